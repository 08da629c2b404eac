// row_scale: a power of two s per row of x that brings the row's largest |x| into [2^14, 2^15), and
// x·s rounded to f16, so that the f16 copy neither overflows (f16 ends at 65504) nor loses small
// values to f16's subnormals; s is exact to undo. A row of zeros, or one that is not finite, gets
// 1 (NaN and infinity then reach the product as they are). For matmul_q4_f16.wgsl, in its blocked
// layout (f16_blocks.wgsl).
// EXT: each row goes on past k with e more columns (a multiple of 32): adapter g's s_g·u_g [m, r]
// in columns k + g·r .. k + g·r + r, zeros after the last: LoRA's update as more of the reduction,
// against its B in the weight's extra columns (f16_convert.wgsl's EXT; src/ops/matmulQ4F16.ts). The
// row's scale covers those columns too.
// requires: subgroups

#include f16_blocks

struct Params {
  m: u32, // rows of x
  k: u32, // columns, a multiple of 32
#if EXT
  e: u32,        // the extension's columns, a multiple of 32
  r: u32,        // each adapter's rank
  adapters: u32, // 1 to 3
  s0: f32,       // their scales
  s1: f32,
  s2: f32,
#endif
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> rs: array<f32>;
@group(0) @binding(3) var<storage, read_write> x16: array<vec2<u32>>; // x·s as f16, 4 a vec2, blocked
#if EXT
@group(0) @binding(4) var<storage, read> u0: array<f32>; // [m, r] each; absent adapters bind u0 again
@group(0) @binding(5) var<storage, read> u1: array<f32>;
@group(0) @binding(6) var<storage, read> u2: array<f32>;

// Column c of the extension of row `row`: s_g·u_g[row, j] for c = g·r + j, past the adapters 0.
fn ext_at(row: u32, c: u32) -> f32 {
  let g = c / params.r;
  let i = row * params.r + c % params.r;
  if (g == 0u) {
    return params.s0 * u0[i];
  }
  if (g == 1u && g < params.adapters) {
    return params.s1 * u1[i];
  }
  if (g == 2u && g < params.adapters) {
    return params.s2 * u2[i];
  }
  return 0.0;
}

fn ext4(row: u32, i: u32) -> vec4<f32> {
  let c = 4u * i;
  return vec4<f32>(ext_at(row, c), ext_at(row, c + 1u), ext_at(row, c + 2u), ext_at(row, c + 3u));
}
#else
fn ext4(row: u32, i: u32) -> vec4<f32> {
  return vec4<f32>(0.0);
}
#endif

// Vec4 i of the blocked row: x's (kv of them), then the extension's.
fn row_vec4(row: u32, kv: u32, i: u32) -> vec4<f32> {
  if (i < kv) {
    return x[row * kv + i];
  }
  return ext4(row, i - kv);
}

const WG = 256u;
// Each thread keeps HOLD of the row's vec4s in registers (unrolled: constant names) between finding
// the row's largest |x| and writing the scaled copy, so a row of at most HOLD·WG vec4s is read from
// memory once; the vec4s past those are read again.
const HOLD = {{HOLD}}u;
// The row's largest |x| as f32 bits (non-negative floats order as their bits, a NaN's above
// infinity's), met once a subgroup: one barrier, whatever the subgroup size.
var<workgroup> amax_bits: atomic<u32>;

fn amax4(v: vec4<f32>) -> f32 {
  let a = abs(v);
  return max(max(a.x, a.y), max(a.z, a.w));
}

fn store(row: u32, width: u32, i: u32, v: vec4<f32>) {
  x16[blocked(row, 4u * i, width) / 4u] = vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));
}

@compute @workgroup_size(WG)
fn row_scale(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) lane: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= params.m) {
    return; // uniform: the whole workgroup
  }
  let kv = params.k / 4u;
#if EXT
  let ev = params.e / 4u;
#else
  let ev = 0u;
#endif
  let n = kv + ev;
  let width = 4u * n; // the blocked row: x, then the extension
  var a = 0.0;
#repeat J HOLD
  let i{{J}} = lid + {{J}}u * WG;
  var h{{J}} = vec4<f32>(0.0);
  if (i{{J}} < n) {
    h{{J}} = row_vec4(row, kv, i{{J}});
    a = max(a, amax4(h{{J}}));
  }
#endrepeat
  for (var i = lid + HOLD * WG; i < n; i += WG) {
    a = max(a, amax4(row_vec4(row, kv, i)));
  }
  a = subgroupMax(a);
  if (lane == 0u) {
    atomicMax(&amax_bits, bitcast<u32>(a));
  }
  workgroupBarrier();
  let amax = bitcast<f32>(atomicLoad(&amax_bits));
  var s = 1.0;
  // amax = f·2^e with f in [0.5, 1): amax·2^(15 − e) lies in [2^14, 2^15).
  if (amax > 0.0 && amax <= 3.4e38) {
    s = ldexp(1.0, min(15 - frexp(amax).exp, 127));
  }
  if (lid == 0u) {
    rs[row] = s;
  }
#repeat J HOLD
  if (i{{J}} < n) {
    store(row, width, i{{J}}, h{{J}} * s);
  }
#endrepeat
  for (var i = lid + HOLD * WG; i < n; i += WG) {
    store(row, width, i, row_vec4(row, kv, i) * s);
  }
}
