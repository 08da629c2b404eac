// Decode: a few new rows per sequence over the cache. Each workgroup takes one task of one kv
// head: a set of rows over one key range [lo, hi). Grid (1, Hkv, tasks):
//   unsplit: task b = all keys of sequence b, normalised output into o;
//   SPLIT: first prefix_splits x groups prefix tasks, each the rows of up to RMAX / (n·G)
//     sequences over one chunk of the shared prefix (read once for all of them), then count x
//     splits tasks, each one sequence's rows over one chunk of its own keys (all of its keys when
//     there are no prefix tasks). Partials go to part[chunk]; attn_split_combine merges them.
// Keys are taken in blocks of KB, staged in workgroup memory (coalesced reads of K and V).
//   scores: lane (key kc = lid % KB, row group lid / KB) dots its key with rows RGS apart;
//   output: lane (vec4 column lid % PCL, row group lid / PCL) accumulates rows PGS apart.
// Rows past the task's R are skipped by workgroup-uniform branches (a 2-row task in a 16-row
// kernel does 2 rows of arithmetic).
// FOLD (unsplit: all keys in one task, so no combine runs) starts o_proj's LoRA down product on
// the normalised rows here, as attention_combine.wgsl's FOLD does on the merged ones (partial j of
// (row, head) i: Σ_d A[j, head·D + d]·o[i, d]); QUANT also writes the rows as int8 groups for
// o_proj's GEMV. A context of one key chunk then takes one dispatch where the split took two.

struct Params {
  rows: u32,   // n, new rows per sequence
  hq: u32,
  hkv: u32,
  scale: f32,
  nseq: u32,   // count of slots
  slot0: u32,  // first slot of the batch
  cap: u32,    // the cache slot stride in rows
  splits: u32, // SPLIT: chunks of each sequence's own keys
  prefix_len: u32,    // positions [0, prefix_len) of every slot live in prefix_slot
  prefix_slot: u32,
  prefix_splits: u32, // SPLIT: chunks of that shared prefix (0: each sequence's chunks cover it)
  fold_r: u32,        // FOLD: rank of the o_proj adapter whose down product this starts
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;
@group(0) @binding(5) var<storage, read> lengths: array<u32>; // filled positions of each slot
@group(0) @binding(6) var<storage, read_write> part: array<f32>; // SPLIT: [chunks, count·n·Hq, D + 2]: unnormalised output, running max m, sum l
#if FOLD
@group(0) @binding(7) var<storage, read> a_fold: array<f32>;           // o_proj's lora_A [fold_r, Hq·D]
@group(0) @binding(8) var<storage, read_write> fold_parts: array<f32>; // the partials of its down product [rows, Hq, fold_r]
#endif
#if QUANT
@group(0) @binding(9) var<storage, read_write> xq: array<vec4<u32>>;   // the rows as int8 groups
#include int8_groups
#endif

#include attention_head
#include attention_rows
#include attention_kv_row

const RMAX: u32 = {{RMAX}}u;
const KB: u32 = {{KB}}u;
const DWG: u32 = {{DWG}}u;
const RGS: u32 = DWG / KB;          // score row groups
const PCL: u32 = {{PCL}}u;          // output lanes across vec4 columns
const PGS: u32 = DWG / PCL;         // output row groups
const PCPT: u32 = (NV + PCL - 1u) / PCL;
const XW: u32 = DWG / RMAX;         // lanes per row in the max reduction
const DSPT: u32 = (KB * NV + DWG - 1u) / DWG; // staged vec4s of K (and of V) per lane, loaded before stored
// Loading the next block during this one holds 2·DSPT more vec4s a lane: kept for the wide layouts.
const PREFETCH: bool = DSPT <= 4u;

var<workgroup> dq_sh: array<vec4f, RMAX * NV>;
var<workgroup> dk_sh: array<vec4f, KB * DSV>;
var<workgroup> dv_sh: array<vec4f, KB * NV>;
var<workgroup> dp_sh: array<f32, RMAX * KB>; // [row][key]: scores, then probabilities
var<workgroup> dm_sh: array<f32, DWG>;
var<workgroup> rm_sh: array<f32, RMAX>;     // per row: the running max over the blocks so far,
var<workgroup> rs_sh: array<f32, RMAX>;     // and what this block rescales the row's sums by
var<workgroup> lim_sh: array<u32, RMAX>;     // per row: keys below this are visible (causal)

// This lane's share of the K and V rows of keys [j0, min(j0 + KB, hi)) of kv head hk (zeros past hi).
fn load_block(lid: u32, slot: u32, hk: u32, j0: u32, hi: u32, ka: ptr<function, array<vec4f, DSPT>>, va: ptr<function, array<vec4f, DSPT>>) {
  for (var i = 0u; i < DSPT; i++) {
    let e = min(lid + DWG * i, KB * NV - 1u);
    let c = e / NV;
    let base = kv_row(slot, min(j0 + c, hi - 1u)) * params.hkv * D + hk * D;
    (*ka)[i] = select(vec4f(0.0), ld_k(base, e % NV), j0 + c < hi);
    (*va)[i] = select(vec4f(0.0), ld_v(base, e % NV), j0 + c < hi);
  }
}

@compute @workgroup_size(DWG)
fn attn_decode(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let G = params.hq / params.hkv;
  let hk = wid.y;
  let rps = params.rows * G; // rows per sequence
  var b0 = wid.z;            // first sequence of the task
  var nb = 1u;               // its sequences
#if SPLIT
  var lo = 0u;
  var hi = 0u;
  var chunk = 0u;            // its partial's index
  let spb = RMAX / rps;
  let np = params.prefix_splits * ((params.nseq + spb - 1u) / spb);
  if (wid.z < np) {
    let c = wid.z % params.prefix_splits;
    b0 = (wid.z / params.prefix_splits) * spb;
    nb = min(spb, params.nseq - b0);
    let size = (params.prefix_len + params.prefix_splits - 1u) / params.prefix_splits;
    lo = min(c * size, params.prefix_len);
    hi = min(lo + size, params.prefix_len);
    chunk = c;
  } else {
    let z = wid.z - np;
    let c = z % params.splits;
    b0 = z / params.splits;
    let first = select(0u, params.prefix_len, np > 0u);
    let n_keys = lengths[params.slot0 + b0] + params.rows;
    let size = (n_keys - first + params.splits - 1u) / params.splits;
    lo = min(first + c * size, n_keys);
    hi = min(lo + size, n_keys);
    chunk = params.prefix_splits + c;
  }
#else
  let lo = 0u;
  let hi = lengths[params.slot0 + b0] + params.rows;
#endif
  let R = nb * rps;
  let slot = params.slot0 + b0; // keys of a prefix task all lie in the prefix: any slot of it

  for (var e = lid; e < RMAX * NV; e += DWG) {
    let r = min(e / NV, R - 1u);
    dq_sh[e] = select(vec4f(0.0), ld_q(q_index(b0 + r / rps, r % rps, hk, 0u), e % NV), e / NV < R);
  }
  if (lid < RMAX) {
    // Row r is new token (r % rps) / G of its sequence, at position past + that.
    let r = min(lid, R - 1u);
    lim_sh[lid] = select(0u, lengths[params.slot0 + b0 + r / rps] + (r % rps) / G + 1u, lid < R);
    rm_sh[lid] = NEG;
  }
  let kc = lid % KB;
  let srg = lid / KB;
  let pc = lid % PCL;
  let prg = lid / PCL;
  var l: array<f32, RMAX / PGS>;
  var acc: array<vec4f, (RMAX / PGS) * PCPT>;

  // PREFETCH: each block's K and V are loaded into registers while the block before it is computed.
  var ka: array<vec4f, DSPT>;
  var va: array<vec4f, DSPT>;
  if (PREFETCH && lo < hi) { load_block(lid, slot, hk, lo, hi, &ka, &va); }
  for (var j0 = lo; j0 < hi; j0 += KB) {
    if (!PREFETCH) { load_block(lid, slot, hk, j0, hi, &ka, &va); }
    workgroupBarrier(); // the previous block's readers are done (and q, lim_sh are staged)
    for (var i = 0u; i < DSPT; i++) {
      let e = lid + DWG * i;
      if (e < KB * NV) {
        dk_sh[(e / NV) * DSV + e % NV] = ka[i];
        dv_sh[e] = va[i];
      }
    }
    workgroupBarrier();
    if (PREFETCH && j0 + KB < hi) { load_block(lid, slot, hk, j0 + KB, hi, &ka, &va); }
    var s = array<f32, RMAX / RGS>(); // explicit: zeroed on every block
    for (var x = 0u; x < NV; x++) {
      let kv = dk_sh[kc * DSV + x];
      for (var i = 0u; i < RMAX / RGS; i++) {
        if (srg + RGS * i < R) { s[i] += dot(dq_sh[(srg + RGS * i) * NV + x], kv); }
      }
    }
    let j = j0 + kc;
    for (var i = 0u; i < RMAX / RGS; i++) {
      let r = srg + RGS * i;
      if (r < R) { dp_sh[r * KB + kc] = select(NEG, s[i] * params.scale, j < hi && j < lim_sh[r]); }
    }
    workgroupBarrier();
    // Block max per row: lane (row lid / XW, x = lid % XW) over keys x, x + XW, ...; then lane r
    // over row r's XW partials updates the row's running max in workgroup memory, and each lane
    // reads only its own rows' (an unrolled pass over every row's is code a cold dispatch fetches).
    var pm = NEG;
    if (lid / XW < R) {
      for (var c = lid % XW; c < KB; c += XW) { pm = max(pm, dp_sh[(lid / XW) * KB + c]); }
    }
    dm_sh[lid] = pm;
    workgroupBarrier();
    if (lid < R) {
      var mx = rm_sh[lid];
      for (var x = 0u; x < XW; x++) { mx = max(mx, dm_sh[lid * XW + x]); }
      rs_sh[lid] = exp(rm_sh[lid] - mx);
      rm_sh[lid] = mx;
    }
    workgroupBarrier();
    for (var i = 0u; i < RMAX / PGS; i++) {
      let r = prg + PGS * i;
      if (r < R) {
        let a = rs_sh[r];
        l[i] *= a;
        for (var jj = 0u; jj < PCPT; jj++) { acc[i * PCPT + jj] *= a; }
      }
    }
    for (var i = 0u; i < RMAX / RGS; i++) {
      let r = srg + RGS * i;
      if (r < R) {
        let sc = dp_sh[r * KB + kc];
        dp_sh[r * KB + kc] = select(0.0, exp(sc - rm_sh[r]), sc > MASKED);
      }
    }
    workgroupBarrier();
    for (var i = 0u; i < RMAX / PGS; i++) {
      let r = prg + PGS * i;
      if (r < R) {
        for (var c = 0u; c < KB; c++) {
          let p = dp_sh[r * KB + c];
          l[i] += p;
          for (var jj = 0u; jj < PCPT; jj++) {
            acc[i * PCPT + jj] += p * dv_sh[c * NV + min(pc + PCL * jj, NV - 1u)];
          }
        }
      }
    }
  }

  for (var i = 0u; i < RMAX / PGS; i++) {
    let r = prg + PGS * i;
    if (r < R) {
      let row = q_index(b0 + r / rps, r % rps, hk, 0u) / D;
#if SPLIT
      let base = (chunk * params.nseq * params.rows * params.hq + row) * (D + 2u);
      if (pc == 0u) {
        // A task of no keys ran no block (and no barrier after rm_sh's start): its max is NEG.
        var mr = NEG;
        if (lo < hi) { mr = rm_sh[r]; }
        part[base + D] = mr;
        part[base + D + 1u] = l[i];
      }
      let inv = 1.0;
#else
      let base = row * D;
      let inv = select(0.0, 1.0 / l[i], l[i] > 0.0);
#endif
      for (var jj = 0u; jj < PCPT; jj++) {
        let col = pc + PCL * jj;
        for (var e = 0u; e < 4u; e++) {
          let d = 4u * col + e;
#if SPLIT
          if (col < NV && d < D) { part[base + d] = acc[i * PCPT + jj][e]; }
#else
          if (col < NV && d < D) { o[base + d] = acc[i * PCPT + jj][e] * inv; }
#endif
        }
      }
    }
  }
#if FOLD
  // The normalised rows into q's staging (read no more: the last block's scores are behind barriers).
  for (var i = 0u; i < RMAX / PGS; i++) {
    let r = prg + PGS * i;
    if (r < R) {
      let inv = select(0.0, 1.0 / l[i], l[i] > 0.0);
      for (var jj = 0u; jj < PCPT; jj++) {
        let col = pc + PCL * jj;
        if (col < NV) { dq_sh[r * NV + col] = acc[i * PCPT + jj] * inv; }
      }
    }
  }
  workgroupBarrier();
  for (var it = lid; it < R * params.fold_r; it += DWG) {
    let r = it / params.fold_r;
    let j = it % params.fold_r;
    let row = q_index(b0 + r / rps, r % rps, hk, 0u) / D; // (token, head) i = token·Hq + head
    let arow = j * params.hq * D + (row % params.hq) * D;
    var s = 0.0;
    for (var d = 0u; d < D; d++) { s += a_fold[arow + d] * dq_sh[r * NV + d / 4u][d % 4u]; }
    fold_parts[row * params.fold_r + j] = s;
  }
#endif
#if QUANT
  // Each row's D / 32 groups (D a multiple of 32), a thread each, at the combine's places.
  for (var it = lid; it < R * (D / 32u); it += DWG) {
    let r = it / (D / 32u);
    let qg = it % (D / 32u);
    let row = q_index(b0 + r / rps, r % rps, hk, 0u) / D;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) { v[j] = dq_sh[r * NV + 8u * qg + j]; }
    let qv = quantize_group(v);
    let at = 3u * (row * (D / 32u) + qg);
    xq[at] = qv[0];
    xq[at + 1u] = qv[1];
    xq[at + 2u] = qv[2];
  }
#endif
}
