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
const QL_WG = FLAT_WG;
#include int8_groups
#include int8_lanes
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
var<workgroup> fs_sh: array<f32, FLAT_WG>;
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
    // Each group's weight once (CSG exps, not CSG·(CDT + 1): code a cold dispatch fetches).
    var w: array<f32, CSG>;
    var l_all = 0.0;
    for (var g = 0u; g < CSG; g++) {
      w[g] = exp(cm_sh[g] - m_all);
      l_all += cl_sh[g] * w[g];
    }
    for (var t = 0u; t < CDT; t++) {
      let d = dl + CDL * t;
      var acc = 0.0;
      for (var g = 0u; g < CSG; g++) { acc += ca_sh[(g * CDT + t) * CDL + dl] * w[g]; }
      if (d < D) {
        o[i * D + d] = acc / l_all;
#if FOLD
        fo_sh[d] = acc / l_all;
#endif
      }
    }
  }
#if FOLD
  // FLAT_WG / fold_r lanes a rank (fold_r ≤ FLAT_WG), each over a run of D, then the runs summed:
  // short chains in little code (a decode step pays for each kernel's code fetched cold).
  workgroupBarrier();
  let per = FLAT_WG / params.fold_r;
  let run = (D + per - 1u) / per;
  if (lid < params.fold_r * per) {
    let j = lid / per;
    let d0 = (lid % per) * run;
    let arow = j * params.hq * D + (i % params.hq) * D;
    var s = 0.0;
    for (var d = d0; d < min(d0 + run, D); d++) { s += a_fold[arow + d] * fo_sh[d]; }
    fs_sh[lid] = s;
  }
  workgroupBarrier();
  if (lid < params.fold_r) {
    var s = 0.0;
    for (var q = 0u; q < per; q++) { s += fs_sh[lid * per + q]; }
    fold_parts[i * params.fold_r + lid] = s;
  }
#endif
#if QUANT
  // The merged row as int8 groups of 32 (D a multiple of 32, D / 4 ≤ FLAT_WG), a vec4 a lane: o is
  // [rows, Hq·D] row-major, so row i's groups are numbers i·D/32 .. of o's.
  let c = 4u * min(lid, D / 4u - 1u);
  quantize_lanes(lid, vec4f(fo_sh[c], fo_sh[c + 1u], fo_sh[c + 2u], fo_sh[c + 3u]), lid < D / 4u, 3u * (i * (D / 32u) + lid / 8u));
#endif
}
