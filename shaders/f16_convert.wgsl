// Weights into f16 for matmul_q4_f16.wgsl's W16 variant, [N][K] in its blocks of 32 x 32
// (BLOCKED, f16_blocks.wgsl), two halves a word:
//   dense_to_f16: an f32 weight rounded to f16, or (HALVES) one held in bf16 (BF16: rounded) or
//                 f16 (copied) halves: the vision tower's, once at load or into a call's scratch;
//                 without BLOCKED, any f32 tensor in its own order (attention_f16's copies of q, k, v);
//   q4_to_f16:    a Q4 weight dequantized, w = d·(c − 8) rounded to f16 (as the Q4 kernel stages it);
//   q4_to_f16_t:  the same written transposed, Wᵀ [K][N] (TRANSPOSE): the input gradient dY·W is
//                 then the forward's product on Wᵀ (N a multiple of 32).
// Q4 (the Q4 entries) writes 8 halves a store, a code word's weights: the expansion runs at the
// memory's rate rather than at one word a thread's.
// EXT (the Q4 entries): each row of the output goes on for e more columns (a multiple of 32) that
// hold a LoRA factor, for f16_row_scale.wgsl's EXT: the forward's row n gets B[n, j] at column
// K + off + j (j < r) and zeros elsewhere, the transpose's row i gets A[j, i] at column N + j. The
// GEMM then adds the adapter's update (or its part of dX) as more of its reduction.
// requires: f16

#include f16_blocks

struct Params {
  count: u32, // words to write (N·K / 2); the Q4 entries: code words to expand (N·K / 8)
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
#if HALVES
@group(0) @binding(1) var<storage, read> w: array<u32>; // two halves a word (BF16: bf16, else f16)
#else
@group(0) @binding(1) var<storage, read> w: array<vec2<f32>>;
#endif
@group(0) @binding(2) var<storage, read> codes: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
#if Q4
@group(0) @binding(4) var<storage, read_write> w16: array<vec4<u32>>; // 8 halves a vec4
#else
@group(0) @binding(4) var<storage, read_write> w16: array<u32>;
#endif
#if EXT
@group(0) @binding(5) var<storage, read> factor: array<f32>; // B [N, r] (forward) or A [r, K] (TRANSPOSE)
#endif

const WG = 256u;

fn index(wid: vec3u, nwg: vec3u, lid: u32) -> u32 {
  return (wid.x + wid.y * nwg.x) * WG + lid;
}

#if !Q4
@compute @workgroup_size(WG)
fn dense_to_f16(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = index(wid, nwg, lid);
  if (i < params.count) {
#if BF16
    // bf16 is the top half of an f32.
    let h = pack2x16float(vec2(bitcast<f32>(w[i] << 16u), bitcast<f32>(w[i] & 0xffff0000u)));
#else
#if HALVES
    let h = w[i];
#else
    let h = pack2x16float(w[i]);
#endif
#endif
#if BLOCKED
    w16[blocked(2u * i / params.k, 2u * i % params.k, params.k) / 2u] = h;
#else
    w16[i] = h;
#endif
  }
}
#endif

#if Q4
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

// Two weights of a code word, from bit `shift` on, dequantized with d as one f16 pair.
fn pair(word: u32, shift: u32, d: f32) -> u32 {
  return pack2x16float(vec2<f32>(f32((word >> shift) & 15u) - 8.0, f32((word >> (shift + 4u)) & 15u) - 8.0) * d);
}

// The 8 weights of code word i, one vec4 of f16 pairs (low nibble first).
fn expand_word(i: u32) -> vec4<u32> {
  let word = codes[i];
  let d = scale_of(i / 4u);
  return vec4<u32>(pair(word, 0u, d), pair(word, 8u, d), pair(word, 16u, d), pair(word, 24u, d));
}

// Thread i expands code word i, weights 8i .. 8i + 7 of the flat [N][K] order: one row, one group
// (K a multiple of 32), 8 consecutive halves of a block. With EXT, threads past count write the
// extension, 8 of its columns each.
@compute @workgroup_size(WG)
fn q4_to_f16(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = index(wid, nwg, lid);
  let width = params.k + ext_width();
  if (i < params.count) {
    let at = 8u * i;
    let n = at / params.k;
    w16[blocked(n, at - n * params.k, width) / 8u] = expand_word(i);
    return;
  }
#if EXT
  let j = i - params.count;
  if (j < params.n * params.e / 8u) {
    let n = 8u * j / params.e;
    let c = 8u * j % params.e;
    var h: array<u32, 4>;
    for (var p = 0u; p < 4u; p++) {
      h[p] = pack2x16float(vec2<f32>(b_at(n, c + 2u * p), b_at(n, c + 2u * p + 1u)));
    }
    w16[blocked(n, params.k + c, width) / 8u] = vec4<u32>(h[0], h[1], h[2], h[3]);
  }
#endif
}

#if TRANSPOSE
// A workgroup reads a tile of TT rows x TT columns of W along its rows (8 codes a word), two rows a
// thread, and writes it transposed along the rows of Wᵀ, 8 halves a store, through workgroup
// memory that holds it as f16 pairs of neighbouring rows. Grid (ceil(K / TT), ceil(N / TT)).
const TT = 64u;
const TP = TT / 2u + 1u; // the tile's row stride in pairs: a column of it spreads over the banks
var<workgroup> tile: array<u32, TT * TP>; // [column of W][pair of rows of W]

@compute @workgroup_size(WG)
fn q4_to_f16_t(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let k0 = wid.x * TT;
  let n0 = wid.y * TT;
  let width = params.n + ext_width();
#if EXT
  // The last row of workgroups writes the extension of Wᵀ's rows k0 .. k0 + TT: A[j, i] at column
  // N + j (zeros from r on), 8 columns a store. Uniform: the whole workgroup returns.
  if (n0 >= params.n) {
    let per_row = params.e / 8u;
    for (var t = lid; t < TT * per_row; t += WG) {
      let kk = k0 + t / per_row;
      let c = 8u * (t % per_row);
      if (kk < params.k) {
        var h: array<u32, 4>;
        for (var p = 0u; p < 4u; p++) {
          let j = c + 2u * p;
          let a0 = select(0.0, factor[min(j, params.r - 1u) * params.k + kk], j < params.r);
          let a1 = select(0.0, factor[min(j + 1u, params.r - 1u) * params.k + kk], j + 1u < params.r);
          h[p] = pack2x16float(vec2<f32>(a0, a1));
        }
        w16[blocked(kk, params.n + c, width) / 8u] = vec4<u32>(h[0], h[1], h[2], h[3]);
      }
    }
    return;
  }
#endif
  // TT / 2 pairs of rows, TT / 8 code words of each: one pair of words a thread (N is even).
  for (var e = lid; e < TT * TT / 16u; e += WG) {
    let p = e / (TT / 8u);
    let c = (e % (TT / 8u)) * 8u;
    let n = n0 + 2u * p;
    if (n < params.n && k0 + c < params.k) {
      let at = n * params.k + k0 + c; // the first of the upper word's 8 weights
      let lo = codes[at / 8u];
      let hi = codes[(at + params.k) / 8u];
      let d = vec2<f32>(scale_of(at / 32u), scale_of((at + params.k) / 32u));
      for (var j = 0u; j < 8u; j++) {
        let q = vec2<f32>(f32((lo >> (4u * j)) & 15u), f32((hi >> (4u * j)) & 15u)) - 8.0;
        tile[(c + j) * TP + p] = pack2x16float(q * d);
      }
    }
  }
  workgroupBarrier();
  // TT rows of Wᵀ, TT / 8 stores of 8 halves each (N a multiple of 32: a store is in or out whole).
  for (var e = lid; e < TT * TT / 8u; e += WG) {
    let c = e / (TT / 8u);
    let p = (e % (TT / 8u)) * 4u;
    let kk = k0 + c;
    let n = n0 + 2u * p;
    if (kk < params.k && n < params.n) {
      let t = c * TP + p;
      w16[blocked(kk, n, width) / 8u] = vec4<u32>(tile[t], tile[t + 1u], tile[t + 2u], tile[t + 3u]);
    }
  }
}
#endif
#endif
