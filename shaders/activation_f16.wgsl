// f32 states kept for a backward, stored in f16 and expanded back (src/ops/activationF16.ts),
// two values a thread:
//   to_f16:   h16 = f16(h). A value beyond f16's finite range (|h| > 65504, inf or NaN, tested
//             on its bits so no compiler assumption about non-finite floats can drop the test)
//             is written clamped, and the largest such |h|'s bits go to range[slot]: the caller
//             reads them and keeps f32 instead of training on a clamped state.
//   from_f16: h = f32(h16), exact.
// WGSL leaves the f32 -> f16 rounding mode to the implementation (Vulkan, Metal and D3D round
// to nearest even); the unit test checks it bit for bit against src/model/dtype.ts's f32ToF16Bits.
// requires: f16

struct Params {
  pairs: u32, // values / 2
  slot: u32,  // the entry of `range` this state reports into
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> h: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> h16_out: array<vec2<f16>>;
@group(0) @binding(3) var<storage, read_write> range: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read> h16: array<vec2<f16>>;
@group(0) @binding(5) var<storage, read_write> h_out: array<vec2<f32>>;

override WG: u32 = 256;
// 65504.0, f16's largest finite value, as f32 bits.
const F16_MAX_BITS = 0x477fe000u;
const F16_MAX = 65504.0;

fn flat_index(wid: vec3u, nwg: vec3u, lid: u32) -> u32 {
  return (wid.x + wid.y * nwg.x) * WG + lid;
}

@compute @workgroup_size(WG)
fn to_f16(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i >= params.pairs) {
    return;
  }
  let v = h[i];
  let mag = bitcast<vec2<u32>>(v) & vec2(0x7fffffffu);
  if (any(mag > vec2(F16_MAX_BITS))) {
    atomicMax(&range[params.slot], max(mag.x, mag.y));
    h16_out[i] = vec2<f16>(clamp(v, vec2(-F16_MAX), vec2(F16_MAX)));
    return;
  }
  h16_out[i] = vec2<f16>(v);
}

@compute @workgroup_size(WG)
fn from_f16(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i < params.pairs) {
    h_out[i] = vec2<f32>(h16[i]);
  }
}
