// The weight side of the K-blocked tensor-core GEMM (matmul_q4_mma_gemm_kb.wgsl): Q4 weights
// re-rounded to int8 per (row of W, K block) with one step t per block (requant_w; block_steps and
// requant_wt for Wᵀ, the input gradient's; with ROWCOL one step per row or column, row_steps), or
// an f32 weight rounded to int8 once (quantize_w).

struct Params {
  n: u32, // rows of W (out features)
  k: u32, // columns (in features), a multiple of 32
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;       // quantize_w: the f32 weight [N, K]
@group(0) @binding(2) var<storage, read> codes4: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read> tw_in: array<f32>;         // requant_w: row_steps' (ROWCOL); requant_wt: block_steps' [N/KB, K/32]
@group(0) @binding(5) var<storage, read_write> tw_out: array<f32>;  // the steps t
@group(0) @binding(6) var<storage, read_write> w8_out: array<vec4<u32>>; // W (or Wᵀ) as int8: [N, K/32, 2]

#include q4_format

const SUB = {{SUB}}u;     // groups a K block
const KB = 32u * SUB;
const KB_MAX = 127.0 / 8.0;

// For dX: tw[b·G + g] = 8·max |d[n, g]| / 127 over the rows n of block b of N (G = K/32 groups).
@compute @workgroup_size(64)
fn block_steps(@builtin(global_invocation_id) gid: vec3u) {
  let groups = params.k / 32u;
  let i = gid.x;
#if ROWCOL
  // One block: all of N.
  let span = params.n;
#else
  let span = KB;
#endif
  if (i >= (params.n + span - 1u) / span * groups) {
    return;
  }
  let b = i / groups;
  let g = i % groups;
  var dmax = 0.0;
  for (var n = b * span; n < min(params.n, (b + 1u) * span); n++) {
    dmax = max(dmax, abs(scale_of(n * groups + g)));
  }
  tw_out[i] = dmax / KB_MAX;
}

// ROWCOL, forward: tw[n] = 8·max_g |d[n, g]| / 127 over the whole row n of W (once per weight).
@compute @workgroup_size(64)
fn row_steps(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let groups = params.k / 32u;
  let n = gid.x + gid.y * nwg.x * 64u;
  if (n >= params.n) {
    return;
  }
  var dmax = 0.0;
  for (var g = 0u; g < groups; g++) {
    dmax = max(dmax, abs(scale_of(n * groups + g)));
  }
  tw_out[n] = dmax / KB_MAX;
}

// Forward: W re-rounded to int8 once per call, before the GEMM (each of its workgroups re-rounding
// its tile's weights re-rounded every weight once per 128 rows of x). One thread per (row n of W, group g): the group's 32 codes as round((c − 8)·d/t)
// with t = 8·max |d| / 127 over the SUB groups of g's block, in the staged byte order (words 2w,
// 2w + 1: word w's even weights, then its odd ones); t of each block into tw_out [N, K/KB].
@compute @workgroup_size(64)
fn requant_w(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let groups = params.k / 32u;
  let i = gid.x + gid.y * nwg.x * 64u; // n·G + g
  if (i >= params.n * groups) {
    return;
  }
#if ROWCOL
  let t = tw_in[i / groups]; // row_steps'
  let dmax = t;
#else
  let first = i - i % SUB; // the block's first group
  var dmax = 0.0;
  for (var h = 0u; h < SUB; h++) {
    dmax = max(dmax, abs(scale_of(first + h)));
  }
  let t = dmax / KB_MAX;
#endif
  let f = select(0.0, scale_of(i) / t, dmax > 0.0);
  let c = codes4[i];
  var q: array<i32, 8>;
  for (var w = 0u; w < 4u; w++) {
    q[2u * w] = requant(c[w] & 0x0F0F0F0Fu, f);              // k = 8w + 0, 2, 4, 6
    q[2u * w + 1u] = requant((c[w] >> 4u) & 0x0F0F0F0Fu, f); // k = 8w + 1, 3, 5, 7
  }
  w8_out[2u * i] = bitcast<vec4<u32>>(vec4<i32>(q[0], q[1], q[2], q[3]));
  w8_out[2u * i + 1u] = bitcast<vec4<u32>>(vec4<i32>(q[4], q[5], q[6], q[7]));
#if ROWCOL
  if (i % groups == 0u) {
    tw_out[i / groups] = t;
  }
#else
  if (i % SUB == 0u) {
    tw_out[i / SUB] = t;
  }
#endif
}

// An f32 weight W [N, K] (x binds it) rounded to int8 once, in requant_w's layout, for products
// with an f32 weight (the vision tower's): one thread per (row n, group g), its 32 weights as
// round(w / t) with t = max |w| / 127 over the SUB groups of g's block; t into tw_out [N, K/KB].
@compute @workgroup_size(64)
fn quantize_w(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let groups = params.k / 32u;
  let i = gid.x + gid.y * nwg.x * 64u; // n·G + g
  if (i >= params.n * groups) {
    return;
  }
  let first = i - i % SUB;
  var wmax = vec4<f32>(0.0);
  for (var v = 8u * first; v < 8u * (first + SUB); v++) {
    wmax = max(wmax, abs(x[v]));
  }
  let t = max(max(wmax.x, wmax.y), max(wmax.z, wmax.w)) / 127.0;
  let f = select(0.0, 1.0 / t, t > 0.0);
  var q: array<i32, 8>;
  for (var w = 0u; w < 4u; w++) {
    let a = x[8u * i + 2u * w];      // k = 8w + 0 .. 3
    let b = x[8u * i + 2u * w + 1u]; // k = 8w + 4 .. 7
    q[2u * w] = bitcast<i32>(pack4xI8(vec4<i32>(round(vec4<f32>(a.x, a.z, b.x, b.z) * f))));      // k = 8w + 0, 2, 4, 6
    q[2u * w + 1u] = bitcast<i32>(pack4xI8(vec4<i32>(round(vec4<f32>(a.y, a.w, b.y, b.w) * f)))); // k = 8w + 1, 3, 5, 7
  }
  w8_out[2u * i] = bitcast<vec4<u32>>(vec4<i32>(q[0], q[1], q[2], q[3]));
  w8_out[2u * i + 1u] = bitcast<vec4<u32>>(vec4<i32>(q[4], q[5], q[6], q[7]));
  if (i % SUB == 0u) {
    tw_out[i / SUB] = t;
  }
}

// Wᵀ for dX = dY·W, as requant_w lays out a weight: one thread per (column k of W, rows 32j ..
// 32j + 31 of W, the reduction's group j), those 32 weights as round((c − 8)·d[n, g]/t) with t
// block_steps' step of (block j / SUB, group g = k / 32) (tw_in), rows 8o + 0, 2, 4, 6 in word 2o
// and 8o + 1, 3, 5, 7 in word 2o + 1 (dY's limb order); t into tw_out [K, N/KB] once a block.
// N is a whole number of blocks (the host checks), so every row exists. Neighbouring threads take
// neighbouring columns of the same rows, so that a subgroup's reads of a row are one 16-byte run
// (with neighbouring row groups instead, each of a subgroup's 32 reads fell on its own row).
@compute @workgroup_size(64)
fn requant_wt(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let wg = params.k / 32u; // W's groups a row
  let rg = params.n / 32u; // groups of 32 rows of W
  let i = gid.x + gid.y * nwg.x * 64u; // j·K + k
  if (i >= params.k * rg) {
    return;
  }
  let k = i % params.k;
  let j = i / params.k;
  let g = k / 32u;
#if ROWCOL
  let t = tw_in[g];
#else
  let t = tw_in[(j / SUB) * wg + g];
#endif
  let shift = 4u * (k % 8u);
  var q: array<u32, 8>;
  for (var o = 0u; o < 4u; o++) {
    for (var p = 0u; p < 2u; p++) { // even rows, then odd
      var v = vec4<f32>(0.0);
      for (var b = 0u; b < 4u; b++) {
        let n = 32u * j + 8u * o + 2u * b + p;
        let word = n * (params.k / 8u) + k / 8u;
        let c = (codes4[word / 4u][word % 4u] >> shift) & 0xFu;
        let f = select(0.0, scale_of(n * wg + g) / t, t > 0.0);
        v[b] = round((f32(c) - 8.0) * f);
      }
      q[2u * o + p] = pack4xI8(vec4<i32>(v));
    }
  }
  let o = 2u * (k * rg + j);
  w8_out[o] = vec4<u32>(q[0], q[1], q[2], q[3]);
  w8_out[o + 1u] = vec4<u32>(q[4], q[5], q[6], q[7]);
#if ROWCOL
  if (j == 0u) {
    tw_out[k] = t;
  }
#else
  if (j % SUB == 0u) {
    tw_out[k * (rg / SUB) + j / SUB] = t;
  }
#endif
}

// Four codes (one per byte of a masked word) as round((c − 8)·f), packed int8.
fn requant(nibbles: u32, f: f32) -> i32 {
  return bitcast<i32>(pack4xI8(vec4<i32>(round((vec4<f32>(unpack4xU8(nibbles)) - 8.0) * f))));
}
