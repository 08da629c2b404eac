// What every attention kernel shares (shaders/attention_*.wgsl; src/ops/attention.ts binds them):
// the layouts, the head dimension and the masking constants.
//
// Layouts (row-major f32, RoPE already applied):
//   q, o, dq      [T, Hq·D]      k, v, dk, dv  [T, Hkv·D]      lse [T, Hq]
//   Hq = G·Hkv; q head h reads kv head h / G (the G query heads of a group are adjacent).
//   lse[t, h] = log Σ_j exp(scale·q·k_j) over the keys row t attends to (natural log).
//   cu_seqlens u32 [nseq + 1]: sequences packed along T, sequence s = rows [cu[s], cu[s+1]),
//     cu[0] = 0, cu[nseq] = T. Rows attend only within their sequence (causal or not), except
//     with a shared prefix (prefix_len P > 0, training on G completions of one prompt): sequence
//     0 is the prompt [0, P), and the rows of every later sequence also attend to all of it, as
//     if each completion followed its own copy of the prompt (which is computed once).
//   KV cache (one tensor per layer for k and one for v; f32, or f16 with KV_F16: kv_elem.wgsl,
//     read as f32): position j of slot s at row s·cap + j of
//     [rows, Hkv·D] (cap: the slot stride, src/ops/kvCache.ts); lengths u32 [slots]
//     holds how many positions of each slot are filled ("past").
//   Cached batches: count sequences (slots slot0 .. slot0+count-1) with n new rows each,
//     q [count·n, Hq·D]; new row i of a slot sits at position past + i and attends to [0, past + i].
//
// A "row" is one (token, query head of the group) pair of a kv head, rho = token·G + g: the G heads
// of a group share every K/V tile they read. Head rows are staged in workgroup memory as vec4s,
// zero-padded to NV·4 floats, at a stride of NV + 1 vec4s so that lanes reading different rows
// at the same column hit different banks.

const D: u32 = {{D}}u;
const NV: u32 = (D + 3u) / 4u;  // vec4s per staged head row
const DSV: u32 = NV + 1u;       // staged row stride in vec4s
const FLAT_WG: u32 = 256u;      // flat kernels (the split combine, the backward's prep and dK/dV sum)
const NEG: f32 = -1.0e30;       // "minus infinity" that keeps exp(m_old - m_new) finite
const MASKED: f32 = -1.0e29;    // scores at or below this are masked out
