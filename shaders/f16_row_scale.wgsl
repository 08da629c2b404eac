// row_scale: a power of two s per row of x that brings the row's largest |x| into [2^14, 2^15), and
// x·s rounded to f16, so that the f16 copy neither overflows (f16 ends at 65504) nor loses small
// values to f16's subnormals; s is exact to undo. A row of zeros, or one that is not finite, gets
// 1 (NaN and infinity then reach the product as they are). For matmul_q4_f16.wgsl, in its blocked
// layout (f16_blocks.wgsl).

#include f16_blocks

struct Params {
  m: u32, // rows of x
  k: u32, // columns, a multiple of 32
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> rs: array<f32>;
@group(0) @binding(3) var<storage, read_write> x16: array<vec2<u32>>; // x·s as f16, 4 a vec2, blocked

const WG = 256u;
var<workgroup> part: array<f32, WG>;
var<workgroup> scale: f32;

@compute @workgroup_size(WG)
fn row_scale(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= params.m) {
    return; // uniform: the whole workgroup
  }
  let kv = params.k / 4u;
  var a = 0.0;
  for (var i = lid; i < kv; i += WG) {
    let v = abs(x[row * kv + i]);
    a = max(a, max(max(v.x, v.y), max(v.z, v.w)));
  }
  part[lid] = a;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) {
      part[lid] = max(part[lid], part[lid + s]);
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    let amax = part[0];
    var s = 1.0;
    // amax = f·2^e with f in [0.5, 1): amax·2^(15 − e) lies in [2^14, 2^15).
    if (amax > 0.0 && amax <= 3.4e38) {
      s = ldexp(1.0, min(15 - frexp(amax).exp, 127));
    }
    rs[row] = s;
    scale = s;
  }
  workgroupBarrier();
  let s = scale;
  for (var i = lid; i < kv; i += WG) {
    let v = x[row * kv + i] * s;
    x16[blocked(row, 4u * i, params.k) / 4u] = vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));
  }
}
