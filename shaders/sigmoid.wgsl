// The logistic sigmoid with exp of non-positive arguments only (no overflow for large |z|), shared
// by every kernel that computes SiLU so that their values agree bit for bit.
fn sigmoid(z: f32) -> f32 {
  let e = exp(-abs(z));
  let s = 1.0 / (1.0 + e);
  return select(e * s, s, z >= 0.0);
}
