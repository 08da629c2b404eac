// Weights into f16 for matmul_q4_f16.wgsl's W16 variant, [N][K] in its blocks of 32 x 32
// (BLOCKED, f16_blocks.wgsl), two halves a word:
//   dense_to_f16: an f32 weight (the vision tower's), rounded once at load; without BLOCKED, any
//                 f32 tensor in its own order (attention_f16's copies of q, k, v);
//   q4_to_f16:    a Q4 weight dequantized, w = d·(c − 8) rounded to f16 (as the Q4 kernel stages it);
//   q4_to_f16_t:  the same written transposed, Wᵀ [K][N] (TRANSPOSE): the input gradient dY·W is
//                 then the forward's product on Wᵀ (N a multiple of 32).
// requires: f16

#include f16_blocks

struct Params {
  count: u32, // words to write (N·K / 2)
#if BLOCKED
  n: u32,     // W's rows
  k: u32,     // W's columns, a multiple of 32
#endif
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> codes: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read_write> w16: array<u32>;

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

// Word i holds weights 2i and 2i + 1 of the flat [N][K] order: codes word i / 4, group i / 16.
@compute @workgroup_size(WG)
fn q4_to_f16(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = index(wid, nwg, lid);
  if (i < params.count) {
    let c = (codes[i / 4u] >> (8u * (i % 4u))) & 0xFFu;
    let d = scale_of(i / 16u);
    w16[blocked(2u * i / params.k, 2u * i % params.k, params.k) / 2u] = pack2x16float(vec2<f32>(f32(c & 15u) - 8.0, f32(c >> 4u) - 8.0) * d);
  }
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
      w16[blocked(kk, n, params.n) / 2u] = pack2x16float(vec2<f32>(tile[c * TP + r], tile[c * TP + r + 1u]));
    }
  }
}
#endif
#endif
