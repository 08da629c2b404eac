// Weights into f16 for matmul_q4_f16.wgsl's W16 variant, [N][K] in its blocks of 32 x 32
// (BLOCKED, f16_blocks.wgsl), two halves a word:
//   dense_to_f16: an f32 weight (the vision tower's), rounded once at load; without BLOCKED, any
//                 f32 tensor in its own order (attention_f16's copies of q, k, v);
//   q4_to_f16:    a Q4 weight dequantized, w = d·(c − 8) rounded to f16 (as the Q4 kernel stages it);
//   q4_to_f16_t:  the same written transposed, Wᵀ [K][N] (TRANSPOSE): the input gradient dY·W is
//                 then the forward's product on Wᵀ (N a multiple of 32).
// EXT (the Q4 entries): each row of the output goes on for e more columns (a multiple of 32) that
// hold a LoRA factor, for f16_row_scale.wgsl's EXT: the forward's row n gets B[n, j] at column
// K + off + j (j < r) and zeros elsewhere, the transpose's row i gets A[j, i] at column N + j. The
// GEMM then adds the adapter's update (or its part of dX) as more of its reduction.
// requires: f16

#include f16_blocks

struct Params {
  count: u32, // words to write (N·K / 2)
#if BLOCKED
  n: u32,     // W's rows
  k: u32,     // W's columns, a multiple of 32
#endif
#if EXT
  e: u32,     // the extension's columns, a multiple of 32
  r: u32,     // the factor's rank
  off: u32,   // forward: where in the extension B's columns start
#endif
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> codes: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read_write> w16: array<u32>;
#if EXT
@group(0) @binding(5) var<storage, read> factor: array<f32>; // B [N, r] (forward) or A [r, K] (TRANSPOSE)
#endif

const WG = 256u;

fn index(wid: vec3u, nwg: vec3u, lid: u32) -> u32 {
  return (wid.x + wid.y * nwg.x) * WG + lid;
}

@compute @workgroup_size(WG)
fn dense_to_f16(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = index(wid, nwg, lid);
  if (i < params.count) {
#if BLOCKED
    w16[blocked(2u * i / params.k, 2u * i % params.k, params.k) / 2u] = pack2x16float(w[i]);
#else
    w16[i] = pack2x16float(w[i]);
#endif
  }
}

#if BLOCKED
fn scale_of(s: u32) -> f32 {
  return unpack2x16float(scales[s >> 1u])[s & 1u];
}

#if EXT
fn ext_width() -> u32 {
  return params.e;
}

// Column c of the forward's extension on row n: B[n, c − off] inside the factor's columns, else 0.
fn b_at(n: u32, c: u32) -> f32 {
  if (c < params.off || c >= params.off + params.r) {
    return 0.0;
  }
  return factor[n * params.r + c - params.off];
}
#else
fn ext_width() -> u32 {
  return 0u;
}
#endif

// Word i holds weights 2i and 2i + 1 of the flat [N][K] order: codes word i / 4, group i / 16.
// With EXT, words past count are the extension's, e / 2 a row.
@compute @workgroup_size(WG)
fn q4_to_f16(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = index(wid, nwg, lid);
  let width = params.k + ext_width();
  if (i < params.count) {
    let c = (codes[i / 4u] >> (8u * (i % 4u))) & 0xFFu;
    let d = scale_of(i / 16u);
    w16[blocked(2u * i / params.k, 2u * i % params.k, width) / 2u] = pack2x16float(vec2<f32>(f32(c & 15u) - 8.0, f32(c >> 4u) - 8.0) * d);
    return;
  }
#if EXT
  let j = i - params.count;
  if (j < params.n * params.e / 2u) {
    let n = 2u * j / params.e;
    let c = 2u * j % params.e;
    w16[blocked(n, params.k + c, width) / 2u] = pack2x16float(vec2<f32>(b_at(n, c), b_at(n, c + 1u)));
  }
#endif
}

#if TRANSPOSE
// A workgroup reads a tile of TT rows x TT columns of W along its rows (8 codes a word), and writes
// it transposed along the rows of Wᵀ, through workgroup memory. Grid (ceil(K / TT), ceil(N / TT)).
const TT = 64u;
const TP = TT + 1u; // the tile's row stride: a column of it spreads over the banks
var<workgroup> tile: array<f32, TT * TP>; // [column of W][row of W]

@compute @workgroup_size(WG)
fn q4_to_f16_t(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let k0 = wid.x * TT;
  let n0 = wid.y * TT;
  let width = params.n + ext_width();
#if EXT
  // The last row of workgroups writes the extension of Wᵀ's rows k0 .. k0 + TT: A[j, i] at column
  // N + j (zeros from r on). Uniform: the whole workgroup returns.
  if (n0 >= params.n) {
    for (var e = lid; e < TT * params.e / 2u; e += WG) {
      let kk = k0 + e / (params.e / 2u);
      let c = 2u * (e % (params.e / 2u));
      if (kk < params.k) {
        let a0 = select(0.0, factor[min(c, params.r - 1u) * params.k + kk], c < params.r);
        let a1 = select(0.0, factor[min(c + 1u, params.r - 1u) * params.k + kk], c + 1u < params.r);
        w16[blocked(kk, params.n + c, width) / 2u] = pack2x16float(vec2<f32>(a0, a1));
      }
    }
    return;
  }
#endif
  // TT rows of TT / 8 code words each.
  for (var e = lid; e < TT * TT / 8u; e += WG) {
    let r = e / (TT / 8u);
    let c = (e % (TT / 8u)) * 8u;
    let n = n0 + r;
    if (n < params.n && k0 + c < params.k) {
      let at = n * params.k + k0 + c; // the first of the word's 8 weights
      let word = codes[at / 8u];
      let d = scale_of(at / 32u);
      for (var j = 0u; j < 8u; j++) {
        tile[(c + j) * TP + r] = (f32((word >> (4u * j)) & 15u) - 8.0) * d;
      }
    }
  }
  workgroupBarrier();
  // TT rows of Wᵀ, TT / 2 words each.
  for (var e = lid; e < TT * TT / 2u; e += WG) {
    let c = e / (TT / 2u);
    let r = (e % (TT / 2u)) * 2u;
    let kk = k0 + c;
    let n = n0 + r;
    if (kk < params.k && n < params.n) {
      w16[blocked(kk, n, width) / 2u] = pack2x16float(vec2<f32>(tile[c * TP + r], tile[c * TP + r + 1u]));
    }
  }
}
#endif
#endif
