// x quantized to int8 groups of 32 for the 4-bit GEMV (shaders/int8_groups.wgsl's layout):
// quantize_x one limb a row for 2 to 8 rows (gemv_rows_i8 with PREQ), quantize_x2 two limbs for
// one row (gemv's I8X2).

struct Params {
  m: u32, // rows of x
  k: u32, // columns, a multiple of 32
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xq_out: array<vec4<u32>>; // quantize_x: [m, k / 32, 3]; quantize_x2: [k / 32, 5]

// x quantized once for every workgroup of the GEMV after it (PREQ): one thread per (row, group),
// xq_out[(m·k/32 + g)·3 + h] as staged (h = 0, 1 packed q; 2 scale and start).
@compute @workgroup_size(64)
fn quantize_x(@builtin(global_invocation_id) gid: vec3u) {
  let i = gid.x;
  if (i >= params.m * (params.k / 32u)) {
    return;
  }
  let q = quantize_group(x_group(i));
  xq_out[3u * i] = q[0];
  xq_out[3u * i + 1u] = q[1];
  xq_out[3u * i + 2u] = q[2];
}

// Group i (row-major (row, group) index) of x's 32 values.
fn x_group(i: u32) -> array<vec4<f32>, 8> {
  var v: array<vec4<f32>, 8>;
  for (var j = 0u; j < 8u; j++) {
    v[j] = x[8u * i + j];
  }
  return v;
}

#include int8_groups

// One row of x as two limbs for gemv's I8X2 (x ≈ s·(hi + lo/254), s = a/127), one thread per
// group: xq_out[5g ..] = hi (2 vec4s), lo (2), then (s/254, −8·Σhi, −8·Σlo) as bits (the −8 of
// the codes, as in quantize_group). |t − hi| ≤ 1/2 for t = x/s, so lo = round(254·(t − hi)) fits
// in [−127, 127].
@compute @workgroup_size(64)
fn quantize_x2(@builtin(global_invocation_id) gid: vec3u) {
  let i = gid.x;
  if (i >= params.m * (params.k / 32u)) {
    return;
  }
  let v = x_group(i);
  let a = group_absmax(v);
  let inv = group_inv(a);
  var qh: array<vec4<i32>, 8>;
  var ql: array<vec4<i32>, 8>;
  for (var j = 0u; j < 8u; j++) {
    let t = v[j] * inv;
    let h = round(t);
    qh[j] = vec4<i32>(h);
    ql[j] = vec4<i32>(round(254.0 * (t - h)));
  }
  let hi = pack_limb(qh);
  let lo = pack_limb(ql);
  xq_out[5u * i] = hi.p[0];
  xq_out[5u * i + 1u] = hi.p[1];
  xq_out[5u * i + 2u] = lo.p[0];
  xq_out[5u * i + 3u] = lo.p[1];
  xq_out[5u * i + 4u] = vec4<u32>(bitcast<u32>(a / (127.0 * 254.0)), bitcast<u32>(-8i * hi.sum), bitcast<u32>(-8i * lo.sum), 0u);
}
