// Merge the SPLIT partials (prefix_splits + splits of them) of each (row, head) i:
//   o = Σ_s e^(m_s − M) acc_s / Σ_s e^(m_s − M) l_s.
// One workgroup per i (grid grid1d(count·n·Hq·256, 256)): lane (d group lid % CDL, split group
// lid / CDL) folds the partials s ≡ lid / CDL (mod CSG) with a running max, so that a lane waits
// on a few loads rather than on all of them in turn; the CSG groups meet in workgroup memory.
// A chunk with no keys has l = 0 and m = NEG: its weight is 0.
// FOLD also starts o_proj's LoRA down product on the merged row (i = row·Hq + head): partial j is
// Σ_d A[j, head·D + d]·o[i, d], so the LoRA GEMV's PARTS up after o_proj's GEMV sums Hq of them
// (one dispatch fewer a layer in decode, which is bound by recording dispatches). QUANT (with
// FOLD) also writes the merged rows as int8 groups, o_proj's GEMV's x without its quantize dispatch.

struct Params {
  rows: u32,   // n, new rows per sequence
  hq: u32,
  nseq: u32,   // count of sequences
  splits: u32, // chunks of each sequence's own keys
  prefix_splits: u32, // chunks of the shared prefix
  fold_r: u32, // FOLD: rank of the o_proj adapter whose down product the combine starts
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> o: array<f32>;
@group(0) @binding(2) var<storage, read_write> part: array<f32>; // attention_decode's SPLIT partials
@group(0) @binding(3) var<storage, read> a_fold: array<f32>;       // FOLD: o_proj's lora_A [fold_r, Hq·D]
@group(0) @binding(4) var<storage, read_write> fold_parts: array<f32>; // FOLD: the partials of its down product [rows, Hq, fold_r]
#if QUANT
// QUANT (with FOLD): the merged rows also as int8 groups for o_proj's 4-bit GEMV.
@group(0) @binding(5) var<storage, read_write> xq: array<vec4<u32>>;
#include int8_groups
#endif

#include attention_head

const CDL: u32 = 32u;
const CSG: u32 = FLAT_WG / CDL;
const CDT: u32 = (D + CDL - 1u) / CDL; // elements of d per lane
var<workgroup> cm_sh: array<f32, CSG>;
var<workgroup> cl_sh: array<f32, CSG>;
var<workgroup> ca_sh: array<f32, CSG * CDT * CDL>;
#if FOLD
var<workgroup> fo_sh: array<f32, D>;
#endif

@compute @workgroup_size(FLAT_WG)
fn attn_split_combine(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = wid.x + wid.y * nwg.x;
  let n = params.nseq * params.rows * params.hq;
  if (i >= n) { return; }
  let splits = params.prefix_splits + params.splits;
  let dl = lid % CDL;
  let sg = lid / CDL;
  var mx = NEG;
  var l = 0.0;
  var a: array<f32, CDT>;
  for (var s = sg; s < splits; s += CSG) {
    let base = (s * n + i) * (D + 2u);
    let ms = part[base + D];
    let nm = max(mx, ms);
    let w_old = exp(mx - nm);
    let w_new = exp(ms - nm);
    l = l * w_old + part[base + D + 1u] * w_new;
    for (var t = 0u; t < CDT; t++) { a[t] = a[t] * w_old + part[base + min(dl + CDL * t, D - 1u)] * w_new; }
    mx = nm;
  }
  if (dl == 0u) {
    cm_sh[sg] = mx;
    cl_sh[sg] = l;
  }
  for (var t = 0u; t < CDT; t++) { ca_sh[(sg * CDT + t) * CDL + dl] = a[t]; }
  workgroupBarrier();
  if (sg == 0u) {
    var m_all = NEG;
    for (var g = 0u; g < CSG; g++) { m_all = max(m_all, cm_sh[g]); }
    var l_all = 0.0;
    for (var g = 0u; g < CSG; g++) { l_all += cl_sh[g] * exp(cm_sh[g] - m_all); }
    for (var t = 0u; t < CDT; t++) {
      let d = dl + CDL * t;
      var acc = 0.0;
      for (var g = 0u; g < CSG; g++) { acc += ca_sh[(g * CDT + t) * CDL + dl] * exp(cm_sh[g] - m_all); }
      if (d < D) {
        o[i * D + d] = acc / l_all;
#if FOLD
        fo_sh[d] = acc / l_all;
#endif
      }
    }
  }
#if FOLD
  workgroupBarrier();
  if (lid < params.fold_r) {
    let arow = lid * params.hq * D + (i % params.hq) * D;
    var s = 0.0;
    for (var d = 0u; d < D; d++) { s += a_fold[arow + d] * fo_sh[d]; }
    fold_parts[i * params.fold_r + lid] = s;
  }
#endif
#if QUANT
  // The merged row as int8 groups of 32 (D a multiple of 32), the last threads one each: o is
  // [rows, Hq·D] row-major, so row i's groups are numbers i·D/32 .. of o's.
  let qg = FLAT_WG - 1u - lid;
  if (qg < D / 32u) {
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
      let c = 32u * qg + 4u * j;
      v[j] = vec4f(fo_sh[c], fo_sh[c + 1u], fo_sh[c + 2u], fo_sh[c + 3u]);
    }
    let qv = quantize_group(v);
    let at = 3u * (i * (D / 32u) + qg);
    xq[at] = qv[0];
    xq[at + 1u] = qv[1];
    xq[at + 2u] = qv[2];
  }
#endif
}
