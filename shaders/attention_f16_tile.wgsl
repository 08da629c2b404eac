// The tile of the f16 tensor-core attention kernels (attention_f16.wgsl, attention_f16_bwd.wgsl):
// a workgroup of SGS subgroups owns BQ rows, FR a subgroup, and walks the other side in tiles of BI
// rows staged as f16 in a_s and b_s; each subgroup's scores pass through its FR rows of s_s (f32)
// and its probabilities (or dS) through its rows of p_s (f16). The including file declares
// `params` (field prefix_len, for the key walk). Fragments are FR x FR x FR (K = M = N).

const D = {{D}}u;
const FR = {{FR}}u;        // fragment rows = columns = K
const SGS = {{SGS}}u;      // subgroups a workgroup, 32 lanes each
const WG = SGS * 32u;
const BQ = SGS * FR;       // owned rows a workgroup
const BI = {{BI}}u;        // walked rows a tile
const KS = D + 8u;         // row stride of the staged rows (f16)
const SS = BI + 4u;        // row stride of the scores (f32)
const PS = BI + 8u;        // row stride of P and dS (f16)
const LPR = 32u / FR;      // softmax: lanes a row
const KPL = BI / LPR;      // softmax: walked rows a lane (part, part + LPR, ...)
const NEG: f32 = -1.0e30;  // "minus infinity" that keeps exp(m_old - m_new) finite
const MASKED: f32 = -1.0e29;

#include attention_key_walk

var<workgroup> a_s: array<f16, BI * KS>; // k (forward, dq); q (dk/dv)
var<workgroup> b_s: array<f16, BI * KS>; // v (forward, dq); dO (dk/dv)
var<workgroup> s_s: array<f32, SGS * FR * SS>;
var<workgroup> p_s: array<f16, SGS * FR * PS>;

alias Left = subgroup_matrix_left<f16, FR, FR>;
alias Right = subgroup_matrix_right<f16, FR, FR>;
alias Acc = subgroup_matrix_result<f32, FR, FR>;

// The 8 halves of `w` into p[at ..].
fn put8(p: ptr<workgroup, array<f16, BI * KS>>, at: u32, w: vec4<u32>) {
  for (var e = 0u; e < 4u; e++) {
    let h2 = bitcast<vec2<f16>>(w[e]);
    (*p)[at + 2u * e] = h2.x;
    (*p)[at + 2u * e + 1u] = h2.y;
  }
}

// Fragment c into this subgroup's rows of s_s (at sbase), for its lanes to read after the barrier.
// Every subgroup calls it equally often: the barrier is uniform.
fn stage_out(c: Acc, sbase: u32) {
  subgroupMatrixStore<row_major>(&s_s, sbase, c, SS);
  workgroupBarrier();
}
