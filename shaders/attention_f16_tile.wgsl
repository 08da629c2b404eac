// The tile of the f16 tensor-core attention kernels (attention_f16.wgsl, attention_f16_bwd.wgsl):
// a workgroup of SGS subgroups owns BQ rows, FR a subgroup, and walks the other side in tiles of BI
// rows staged as f16 in a_s and b_s; each subgroup's scores pass through its FR rows of s_s (f32)
// and its probabilities (or dS) through its rows of p_s (f16). The including file declares
// `params` (field prefix_len, for the key walk). Fragments are FR x FR x FR (K = M = N).
// The DF = D / FR fragments along D (DHF along a half) are named values (q0, q1, ...), written out
// by `#repeat J DF`: named, not an array, so that they stay in registers.

const D = {{D}}u;
const FR = {{FR}}u;        // fragment rows = columns = K
const SGS = {{SGS}}u;      // subgroups a workgroup, 32 lanes each
const WG = SGS * 32u;
const BQ = SGS * FR;       // owned rows a workgroup
const BI = {{BI}}u;        // walked rows a tile
const KT = BI / FR;        // fragments of walked rows a tile (#repeat KC KT unrolls their loops)
const HALF = D / 2u;
const HF = HALF / FR;      // fragments a half of D
const HS = HALF + 8u;      // row stride of a staged half row (f16): 8 past a multiple of 16 puts 8
                           // rows in 8 bank groups
const SS = BI + 4u;        // row stride of the scores (f32)
const PS = BI + 8u;        // row stride of P and dS (f16)
const LPR = 32u / FR;      // softmax: lanes a row
const KPL = BI / LPR;      // softmax: walked rows a lane (part, part + LPR, ...)
const NEG: f32 = -1.0e30;  // "minus infinity" that keeps exp(m_old - m_new) finite
const MASKED: f32 = -1.0e29;

#include attention_key_walk

// Workgroup memory as fixed-size blocks that every fragment load and store reads or writes at a
// constant offset (the loops over fragments unrolled): Dawn's robustness then wraps none of them in
// a bounds test. A staged tile is [BI / FR][2] blocks of FR rows x one half of D; fragment J along
// D lies in block 2·(rows / FR) + J / HF at (J % HF)·FR.
var<workgroup> a_s: array<array<f16, FR * HS>, 2u * KT>; // k (forward, dq); q (dk/dv)
var<workgroup> b_s: array<array<f16, FR * HS>, 2u * KT>; // v (forward, dq); dO (dk/dv)
var<workgroup> s_s: array<array<f32, FR * SS>, SGS>;     // a subgroup's FR rows of scores
var<workgroup> p_s: array<array<f16, FR * PS>, SGS>;     // and of P or dS

alias Left = subgroup_matrix_left<f16, FR, FR>;
alias Right = subgroup_matrix_right<f16, FR, FR>;
alias Acc = subgroup_matrix_result<f32, FR, FR>;

// The 8 halves of `w` into row r, columns c .. c + 8 of the staged tile p.
fn put8(p: ptr<workgroup, array<array<f16, FR * HS>, 2u * KT>>, r: u32, c: u32, w: vec4<u32>) {
  let blk = (r / FR) * 2u + c / HALF;
  let at = (r % FR) * HS + c % HALF;
  for (var e = 0u; e < 4u; e++) {
    let h2 = bitcast<vec2<f16>>(w[e]);
    (*p)[blk][at + 2u * e] = h2.x;
    (*p)[blk][at + 2u * e + 1u] = h2.y;
  }
}

// Fragment c into subgroup sg's rows of s_s, for its lanes to read after the barrier. Every
// subgroup calls it equally often: the barrier is uniform.
fn stage_out(c: Acc, sg: u32) {
  subgroupMatrixStore<row_major>(&s_s[sg], 0u, c, SS);
  workgroupBarrier();
}
