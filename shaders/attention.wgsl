// Attention: grouped-query scaled dot-product attention, flash style (online softmax over key
// tiles; no [T x T] score matrix is ever stored), forward and backward, plus the KV-cache kernels.
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
//   KV cache (one tensor per layer for k and one for v): position j of slot s at row s·cap + j of
//     [rows, Hkv·D] (cap: the slot stride, src/ops/kvCache.ts); lengths u32 [slots]
//     holds how many positions of each slot are filled ("past").
//   Cached batches: count sequences (slots slot0 .. slot0+count-1) with n new rows each,
//     q [count·n, Hq·D]; new row i of a slot sits at position past + i and attends to [0, past + i].
//
// A "row" is one (token, query head of the group) pair of a kv head, rho = token·G + g: the G heads
// of a group share every K/V tile they read. Head rows are staged in workgroup memory as vec4s,
// zero-padded to NV·4 floats, at a stride of NV + 1 vec4s so that lanes reading different rows
// at the same column hit different banks.
//
// Tiled kernels (TILED: forward, dq, dk/dv). A workgroup owns BO rows (query rows; keys for
// dk/dv) and walks tiles of BI inner rows (keys; query rows for dk/dv). Each tile has two phases:
//   scores: LPR = WG / BO lanes per owned row, each dotting it with KPT = BI / LPR inner rows
//           (inner rows LPR apart, so that the lanes of a row read adjacent rows: no conflicts);
//   output: CLN lanes across the vec4 columns, each accumulating RPT owned rows x CPT columns
//           from the tile's probabilities, kept transposed in workgroup memory [inner][owned].
// Both phases are register tiles: one workgroup-memory load feeds several multiply-adds.
// The decode kernel (DECODE) is separate: a few rows (n·G ≤ RMAX) over one chunk of the cache.

const D: u32 = {{D}}u;
const NV: u32 = (D + 3u) / 4u;  // vec4s per staged head row
const DSV: u32 = NV + 1u;       // staged row stride in vec4s
const FLAT_WG: u32 = 256u;      // elementwise kernels (cache writes, backward preprocessing)
const NEG: f32 = -1.0e30;       // "minus infinity" that keeps exp(m_old - m_new) finite
const MASKED: f32 = -1.0e29;    // scores at or below this are masked out

struct Params {
  rows: u32,     // varlen: T (packed rows); cached: n (new rows per sequence); cache ops: row count
  hq: u32,
  hkv: u32,
  causal: u32,
  scale: f32,
  nseq: u32,     // varlen: sequences in cu_seqlens; cached and cache ops: count of slots
  slot0: u32,    // first slot of a cached batch; the source slot of kv_copy
  cap: u32,      // cache slot stride in rows (its capacity, less a prefix stored in slot 0 alone)
  dst_slot: u32, // kv_copy's destination slot
  splits: u32,   // SPLIT: chunks of each cached sequence's own keys
  prefix_len: u32,    // cached: positions [0, prefix_len) of every slot of a cached batch live in
                      // prefix_slot; varlen: the shared prompt, rows [0, prefix_len) = sequence 0
  prefix_slot: u32,
  prefix_splits: u32, // SPLIT: chunks of that shared prefix (0: each sequence's chunks cover it)
  fold_r: u32,   // FOLD: rank of the o_proj adapter whose down product the combine starts
  dkv_splits: u32, // DKV_SPLIT: chunks of the queries each shared-prefix key tile walks
  dkv_rows: u32,   // DKV_SPLIT and dkv_sum: key rows of those tiles (the prefix, to a whole tile)
  dkv_tile0: u32,  // bwd_dkv: its first key tile (those before are DKV_SPLIT's)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
@group(0) @binding(6) var<storage, read> cu_seqlens: array<u32>;
@group(0) @binding(7) var<storage, read> lengths: array<u32>;
@group(0) @binding(8) var<storage, read> dout: array<f32>;
// Backward workspace [T, Hq, 2]: (lse, delta = rowsum(dO∘O)) per row, one binding for both so
// that the backward kernels stay within 8 storage buffers.
@group(0) @binding(9) var<storage, read_write> row_stats: array<f32>;
@group(0) @binding(10) var<storage, read_write> dq: array<f32>;
@group(0) @binding(11) var<storage, read_write> dk: array<f32>;
@group(0) @binding(12) var<storage, read_write> dv: array<f32>;
@group(0) @binding(13) var<storage, read> k_new: array<f32>;
@group(0) @binding(14) var<storage, read> v_new: array<f32>;
@group(0) @binding(15) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(16) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(17) var<storage, read_write> lengths_rw: array<u32>;
// SPLIT partial results [splits, count·n·Hq, D + 2]: unnormalised output, running max m, sum l.
// DKV_SPLIT partial dK and dV [dkv_splits, 2, dkv_rows, Hkv·D].
@group(0) @binding(18) var<storage, read_write> part: array<f32>;
// ALIGNED (D % 4 == 0): the same q, k, v and dO buffers read as vec4s (a quarter of the load
// instructions when staging tiles); the kernels that use these do not use the f32 views.
@group(0) @binding(19) var<storage, read> q4: array<vec4f>;
@group(0) @binding(20) var<storage, read> k4: array<vec4f>;
@group(0) @binding(21) var<storage, read> v4: array<vec4f>;
@group(0) @binding(22) var<storage, read> do4: array<vec4f>;
// FOLD: o_proj's lora_A [fold_r, Hq·D] and the partials of its down product [rows, Hq, fold_r].
@group(0) @binding(23) var<storage, read> a_fold: array<f32>;
@group(0) @binding(24) var<storage, read_write> fold_parts: array<f32>;
#if QUANT
// QUANT (with FOLD): the merged rows also as int8 groups for o_proj's 4-bit GEMV.
@group(0) @binding(25) var<storage, read_write> xq: array<vec4<u32>>;
#include int8_groups
#endif

// Cache row of position j of slot `slot`: a shared prefix is stored once, in prefix_slot.
fn kv_row(slot: u32, j: u32) -> u32 {
  return select(slot, params.prefix_slot, j < params.prefix_len) * params.cap + j;
}

// The sequence holding packed row t: the s with cu[s] <= t < cu[s + 1].
fn seq_of(t: u32) -> u32 {
  var lo = 0u;
  var hi = params.nseq;
  while (hi - lo > 1u) {
    let mid = (lo + hi) / 2u;
    if (cu_seqlens[mid] <= t) { lo = mid; } else { hi = mid; }
  }
  return lo;
}

// Keys [lo, hi) of its own sequence that packed query row t attends to. Monotone in t, so a
// tile's own key range is [keys(first row).x, keys(last row).y).
fn varlen_keys(t: u32) -> vec2u {
  let s = seq_of(t);
  return vec2u(cu_seqlens[s], select(cu_seqlens[s + 1u], t + 1u, params.causal != 0u));
}

// Whether row t attends to key j, given its own key range: j in it, or j in the shared prefix
// (prefix_len > 0) and t after it.
fn sees(t: u32, j: u32, own: vec2u) -> bool {
  return (j >= own.x && j < own.y) || (t >= params.prefix_len && j < params.prefix_len);
}

// Queries [lo, hi) that attend to packed key row j (the transpose of varlen_keys and sees): a
// key of the shared prefix is seen by every row after it too, up to T.
fn varlen_queries(j: u32) -> vec2u {
  let s = seq_of(j);
  let end = select(cu_seqlens[s + 1u], params.rows, j < params.prefix_len);
  return vec2u(select(cu_seqlens[s], j, params.causal != 0u), end);
}

// Element d of row rho (token rho / G, query head hk·G + rho % G) of sequence b in a
// [count·rows, Hq·D] tensor (b = 0 for packed sequences).
fn q_index(b: u32, rho: u32, hk: u32, d: u32) -> u32 {
  let G = params.hq / params.hkv;
  return (b * params.rows + rho / G) * params.hq * D + (hk * G + rho % G) * D + d;
}

// Columns 4c .. 4c+3 of the head row starting at `base`, zero past D (one function per binding:
// storage pointers cannot be passed to functions).
#if ALIGNED
fn ld_q(base: u32, c: u32) -> vec4f { return q4[base / 4u + c]; }
fn ld_k(base: u32, c: u32) -> vec4f { return k4[base / 4u + c]; }
fn ld_v(base: u32, c: u32) -> vec4f { return v4[base / 4u + c]; }
fn ld_do(base: u32, c: u32) -> vec4f { return do4[base / 4u + c]; }
#else
fn cols(c: u32) -> vec4<bool> {
  return vec4<bool>(4u * c < D, 4u * c + 1u < D, 4u * c + 2u < D, 4u * c + 3u < D);
}
fn at(base: u32, c: u32, i: u32) -> u32 { return base + min(4u * c + i, D - 1u); }
fn ld_q(base: u32, c: u32) -> vec4f { return select(vec4f(0.0), vec4f(q[at(base, c, 0u)], q[at(base, c, 1u)], q[at(base, c, 2u)], q[at(base, c, 3u)]), cols(c)); }
fn ld_k(base: u32, c: u32) -> vec4f { return select(vec4f(0.0), vec4f(k[at(base, c, 0u)], k[at(base, c, 1u)], k[at(base, c, 2u)], k[at(base, c, 3u)]), cols(c)); }
fn ld_v(base: u32, c: u32) -> vec4f { return select(vec4f(0.0), vec4f(v[at(base, c, 0u)], v[at(base, c, 1u)], v[at(base, c, 2u)], v[at(base, c, 3u)]), cols(c)); }
fn ld_do(base: u32, c: u32) -> vec4f { return select(vec4f(0.0), vec4f(dout[at(base, c, 0u)], dout[at(base, c, 1u)], dout[at(base, c, 2u)], dout[at(base, c, 3u)]), cols(c)); }
#endif

#if TILED
const BO: u32 = {{BO}}u;   // owned rows per workgroup
const BI: u32 = {{BI}}u;   // inner rows per tile
const WG: u32 = {{WG}}u;   // threads
const LPR: u32 = WG / BO;  // score phase: lanes per owned row
const KPT: u32 = BI / LPR; // score phase: inner rows per lane
const CLN: u32 = {{CLN}}u; // output phase: lanes across the vec4 columns
const CPT: u32 = (NV + CLN - 1u) / CLN; // output phase: vec4 columns per lane
const RPT: u32 = BO * CLN / WG;         // output phase: owned rows per lane
// Tile staging: every load of a tile is issued into registers before any is stored, so that a
// lane has SPT loads in flight rather than one at a time.
const SPT: u32 = (BI * NV + WG - 1u) / WG;

// The key tiles of a query tile whose own keys are [lo, hi): those, after the shared prefix's
// [0, prefix_len) when the tile's rows see it apart from their own keys (lo is 0 when the tile
// holds rows of the prompt, whose own range then covers the prefix). Walk with
//   var kw = key_walk(lo, hi); loop { if (kw.j0 >= hi) { break; } ...; kw = key_next(kw, lo, hi); }
// and take keys below kw.end only, so that no key counts twice.
struct KeyWalk {
  j0: u32,     // first key of the tile
  end: u32,    // the end of the current range (prefix_len in the prefix, else hi)
  in_pre: bool,
}

fn key_walk(lo: u32, hi: u32) -> KeyWalk {
  let pre = params.prefix_len > 0u && lo >= params.prefix_len;
  return KeyWalk(select(lo, 0u, pre), select(hi, params.prefix_len, pre), pre);
}

fn key_next(kw: KeyWalk, lo: u32, hi: u32) -> KeyWalk {
  let j = kw.j0 + BI;
  if (kw.in_pre && j >= params.prefix_len) {
    return KeyWalk(lo, hi, false);
  }
  return KeyWalk(j, kw.end, kw.in_pre);
}

var<workgroup> own_a: array<vec4f, BO * DSV>;  // q (forward, dq); k (dk/dv)
var<workgroup> own_b: array<vec4f, BO * DSV>;  // dO (dq); v (dk/dv)
var<workgroup> in_a: array<vec4f, BI * DSV>;   // k (forward, dq); q (dk/dv)
var<workgroup> in_b: array<vec4f, BI * DSV>;   // v (forward, dq); dO (dk/dv)
var<workgroup> pt: array<f32, BI * BO>;        // [inner][owned]: P (forward, dk/dv), dS (dq)
var<workgroup> pt2: array<f32, BI * BO>;       // dS (dk/dv)
var<workgroup> red: array<f32, WG>;            // per-lane partial row maxima / sums
var<workgroup> row_f: array<f32, BO>;          // per owned row: rescale factor, then 1 / l
var<workgroup> in_stats: array<vec2f, BI>;     // dk/dv: (lse, delta) of the tile's query rows

// The backward's inner tile: element e of the staged registers a, b into in_a, in_b (row e / NV).
fn store_inner(lid: u32, a: array<vec4f, SPT>, b: array<vec4f, SPT>) {
  for (var i = 0u; i < SPT; i++) {
    let e = lid + WG * i;
    if (e < BI * NV) {
      in_a[(e / NV) * DSV + e % NV] = a[i];
      in_b[(e / NV) * DSV + e % NV] = b[i];
    }
  }
}

// The backward's two products per (owned row sr, inner rows sx + LPR·i): own_a·in_a (the score)
// and own_b·in_b (dO·v in dq, v·dO in dk/dv).
struct ScorePair {
  s: array<f32, KPT>,
  dp: array<f32, KPT>,
}

fn score_pair(sr: u32, sx: u32) -> ScorePair {
  var r: ScorePair; // zeroed
  for (var x = 0u; x < NV; x++) {
    let a = own_a[sr * DSV + x];
    let b = own_b[sr * DSV + x];
    for (var i = 0u; i < KPT; i++) {
      let c = (sx + LPR * i) * DSV + x;
      r.s[i] += dot(a, in_a[c]);
      r.dp[i] += dot(b, in_b[c]);
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Forward. Grid (ceil(rows·G / BO), Hkv, 1) for packed sequences, (.., Hkv, count) with CACHED.
// Writes o and, with LSE, the log-sum-exp the backward needs.
@compute @workgroup_size(WG)
fn attn_fwd(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let G = params.hq / params.hkv;
  let hk = wid.y;
  let b = wid.z;
  let nrho = params.rows * G;
  let rho0 = wid.x * BO;
  let t_last = (min(rho0 + BO, nrho) - 1u) / G;
  let kstride = params.hkv * D;
  // Score phase: owned row sr, inner rows sx + LPR·i. Output phase: rows or0 .. or0 + RPT - 1,
  // vec4 columns oc + CLN·j.
  let sr = lid / LPR;
  let sx = lid % LPR;
  let or0 = (lid / CLN) * RPT;
  let oc = lid % CLN;
  let rho = rho0 + sr;
  let valid = rho < nrho;
  let t = min(rho, nrho - 1u) / G;
#if CACHED
  let slot = params.slot0 + b;
  let past = lengths[slot];
  let lo = 0u;
  let hi = past + t + 1u;
  let tile_lo = 0u;
  let tile_hi = past + t_last + 1u;
#else
  let keys = varlen_keys(t);
  let tile_lo = varlen_keys(rho0 / G).x;
  let tile_hi = varlen_keys(t_last).y;
#endif

  for (var e = lid; e < BO * NV; e += WG) {
    let r = e / NV;
    let rr = min(rho0 + r, nrho - 1u);
    own_a[r * DSV + e % NV] = select(vec4f(0.0), ld_q(q_index(b, rr, hk, 0u), e % NV), rho0 + r < nrho);
  }

  var m = NEG;    // running max of row sr (the same in its LPR lanes)
  var lsum = 0.0; // this lane's share of row sr's running sum
  var acc: array<vec4f, RPT * CPT>;
#if CACHED
  var kw = KeyWalk(tile_lo, tile_hi, false);
#else
  var kw = key_walk(tile_lo, tile_hi);
#endif
  loop {
    if (kw.j0 >= tile_hi) { break; }
    let j0 = kw.j0;
    let j_end = kw.end;
    workgroupBarrier(); // the previous tile's readers are done with in_a, in_b, pt, red, row_f
    var ka: array<vec4f, SPT>;
    var va: array<vec4f, SPT>;
    for (var i = 0u; i < SPT; i++) {
      let e = min(lid + WG * i, BI * NV - 1u);
      let c = e / NV;
#if CACHED
      let base = kv_row(slot, min(j0 + c, j_end - 1u)) * kstride + hk * D;
#else
      let base = min(j0 + c, j_end - 1u) * kstride + hk * D;
#endif
      ka[i] = select(vec4f(0.0), ld_k(base, e % NV), j0 + c < j_end);
      va[i] = select(vec4f(0.0), ld_v(base, e % NV), j0 + c < j_end);
    }
    for (var i = 0u; i < SPT; i++) {
      let e = lid + WG * i;
      if (e < BI * NV) {
        in_a[(e / NV) * DSV + e % NV] = ka[i];
        in_b[e] = va[i];
      }
    }
    workgroupBarrier();
    var s = array<f32, KPT>(); // explicit: zeroed on every tile
    for (var x = 0u; x < NV; x++) {
      let qv = own_a[sr * DSV + x];
      for (var i = 0u; i < KPT; i++) { s[i] += dot(qv, in_a[(sx + LPR * i) * DSV + x]); }
    }
    var mx = NEG;
    for (var i = 0u; i < KPT; i++) {
      let j = j0 + sx + LPR * i;
#if CACHED
      let seen = j >= lo && j < hi;
#else
      let seen = j < j_end && sees(t, j, keys);
#endif
      s[i] = select(NEG, s[i] * params.scale, valid && seen);
      mx = max(mx, s[i]);
    }
    red[lid] = mx;
    workgroupBarrier();
    mx = m;
    for (var x = 0u; x < LPR; x++) { mx = max(mx, red[sr * LPR + x]); }
    let alpha = exp(m - mx);
    lsum *= alpha;
    for (var i = 0u; i < KPT; i++) {
      let p = select(0.0, exp(s[i] - mx), s[i] > MASKED);
      lsum += p;
      pt[(sx + LPR * i) * BO + sr] = p;
    }
    m = mx;
    if (sx == 0u) { row_f[sr] = alpha; }
    workgroupBarrier();
    for (var i = 0u; i < RPT; i++) {
      let a = row_f[or0 + i];
      for (var jj = 0u; jj < CPT; jj++) { acc[i * CPT + jj] *= a; }
    }
    for (var c = 0u; c < BI; c++) {
      for (var i = 0u; i < RPT; i++) {
        let p = pt[c * BO + or0 + i];
        for (var jj = 0u; jj < CPT; jj++) {
          let col = min(oc + CLN * jj, NV - 1u);
          acc[i * CPT + jj] += p * in_b[c * NV + col];
        }
      }
    }
    kw = key_next(kw, tile_lo, tile_hi);
  }

  // Row sums: the LPR lanes' shares.
  workgroupBarrier();
  red[lid] = lsum;
  workgroupBarrier();
  if (sx == 0u) {
    var l = 0.0;
    for (var x = 0u; x < LPR; x++) { l += red[sr * LPR + x]; }
    row_f[sr] = select(0.0, 1.0 / l, l > 0.0);
#if LSE
    if (valid) { lse[q_index(b, rho, hk, 0u) / D] = m + log(l); }
#endif
  }
  workgroupBarrier();
  for (var i = 0u; i < RPT; i++) {
    let r = rho0 + or0 + i;
    if (r < nrho) {
      let inv = row_f[or0 + i];
      let base = q_index(b, r, hk, 0u);
      for (var jj = 0u; jj < CPT; jj++) {
        let col = oc + CLN * jj;
        for (var e = 0u; e < 4u; e++) {
          let d = 4u * col + e;
          if (col < NV && d < D) { o[base + d] = acc[i * CPT + jj][e] * inv; }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Backward (FlashAttention-2, packed sequences, no cache). Three passes:
//   prep: row_stats[t, h] = (lse, delta = Σ_d dO·O)
//   dq:   dQ_i = scale · Σ_j dS_ij k_j                       (one workgroup per query tile)
//   dkv:  dV_j = Σ_i P_ij dO_i,  dK_j = scale · Σ_i dS_ij q_i (one workgroup per key tile; the
//         sum over i runs over every query head of the group)
// with P_ij = exp(scale·q_i·k_j − lse_i), dS_ij = P_ij (dO_i·v_j − delta_i), recomputed per tile.

// Grid (ceil(T·G / BO), Hkv).
@compute @workgroup_size(WG)
fn attn_bwd_dq(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let G = params.hq / params.hkv;
  let hk = wid.y;
  let nrho = params.rows * G;
  let rho0 = wid.x * BO;
  let sr = lid / LPR;
  let sx = lid % LPR;
  let or0 = (lid / CLN) * RPT;
  let oc = lid % CLN;
  let rho = rho0 + sr;
  let valid = rho < nrho;
  let rho_c = min(rho, nrho - 1u);
  let keys = varlen_keys(rho_c / G);
  let tile_lo = varlen_keys(rho0 / G).x;
  let tile_hi = varlen_keys((min(rho0 + BO, nrho) - 1u) / G).y;
  let kstride = params.hkv * D;

  for (var e = lid; e < BO * NV; e += WG) {
    let r = e / NV;
    let base = q_index(0u, min(rho0 + r, nrho - 1u), hk, 0u);
    let inside = rho0 + r < nrho;
    own_a[r * DSV + e % NV] = select(vec4f(0.0), ld_q(base, e % NV), inside);
    own_b[r * DSV + e % NV] = select(vec4f(0.0), ld_do(base, e % NV), inside);
  }
  let st = q_index(0u, rho_c, hk, 0u) / D;
  let row_lse = row_stats[2u * st];
  let row_delta = row_stats[2u * st + 1u];

  var acc: array<vec4f, RPT * CPT>;
  var kw = key_walk(tile_lo, tile_hi);
  loop {
    if (kw.j0 >= tile_hi) { break; }
    let j0 = kw.j0;
    let j_end = kw.end;
    workgroupBarrier();
    var ka: array<vec4f, SPT>;
    var va: array<vec4f, SPT>;
    for (var i = 0u; i < SPT; i++) {
      let e = min(lid + WG * i, BI * NV - 1u);
      let c = e / NV;
      let base = min(j0 + c, j_end - 1u) * kstride + hk * D;
      ka[i] = select(vec4f(0.0), ld_k(base, e % NV), j0 + c < j_end);
      va[i] = select(vec4f(0.0), ld_v(base, e % NV), j0 + c < j_end);
    }
    store_inner(lid, ka, va);
    workgroupBarrier();
    let sp = score_pair(sr, sx);
    let s = sp.s;
    let dp = sp.dp;
    for (var i = 0u; i < KPT; i++) {
      let j = j0 + sx + LPR * i;
      let ds = exp(s[i] * params.scale - row_lse) * (dp[i] - row_delta);
      pt[(sx + LPR * i) * BO + sr] = select(0.0, ds, valid && j < j_end && sees(rho_c / G, j, keys));
    }
    workgroupBarrier();
    for (var c = 0u; c < BI; c++) {
      for (var i = 0u; i < RPT; i++) {
        let g = pt[c * BO + or0 + i];
        for (var jj = 0u; jj < CPT; jj++) {
          let col = min(oc + CLN * jj, NV - 1u);
          acc[i * CPT + jj] += g * in_a[c * DSV + col];
        }
      }
    }
    kw = key_next(kw, tile_lo, tile_hi);
  }

  for (var i = 0u; i < RPT; i++) {
    let r = rho0 + or0 + i;
    if (r < nrho) {
      let base = q_index(0u, r, hk, 0u);
      for (var jj = 0u; jj < CPT; jj++) {
        let col = oc + CLN * jj;
        for (var e = 0u; e < 4u; e++) {
          let d = 4u * col + e;
          if (col < NV && d < D) { dq[base + d] = acc[i * CPT + jj][e] * params.scale; }
        }
      }
    }
  }
}

// Grid (ceil(T / BO) − dkv_tile0, Hkv): owned rows are keys, inner rows the query rows (token,
// head of the group) that attend to them. DKV_SPLIT (grid (dkv_rows / BO, Hkv, dkv_splits)): the
// shared prefix's key tiles, whose queries run to T (a walk many times an own tile's, which left
// the GPU to a few long workgroups at the end), each over chunk wid.z of its queries, the
// partials summed in order by attn_dkv_sum.
@compute @workgroup_size(WG)
fn attn_bwd_dkv(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let G = params.hq / params.hkv;
  let hk = wid.y;
  let T = params.rows;
#if DKV_SPLIT
  let j0 = wid.x * BO;
#else
  let j0 = (wid.x + params.dkv_tile0) * BO;
#endif
  let sr = lid / LPR;
  let sx = lid % LPR;
  let or0 = (lid / CLN) * RPT;
  let oc = lid % CLN;
  let j = j0 + sr;
  let kvalid = j < T;
  let queries = varlen_queries(min(j, T - 1u));
  var tile_lo = varlen_queries(j0).x * G;
  // Not monotone with a shared prefix: the prefix's keys are seen up to T.
  var tile_hi = max(varlen_queries(j0).y, varlen_queries(min(j0 + BO, T) - 1u).y) * G;
#if DKV_SPLIT
  let size = ((tile_hi - tile_lo + params.dkv_splits - 1u) / params.dkv_splits + BI - 1u) / BI * BI;
  tile_lo = min(tile_lo + wid.z * size, tile_hi);
  tile_hi = min(tile_lo + size, tile_hi);
#endif
  let kstride = params.hkv * D;

  for (var e = lid; e < BO * NV; e += WG) {
    let c = e / NV;
    let base = min(j0 + c, T - 1u) * kstride + hk * D;
    let inside = j0 + c < T;
    own_a[c * DSV + e % NV] = select(vec4f(0.0), ld_k(base, e % NV), inside);
    own_b[c * DSV + e % NV] = select(vec4f(0.0), ld_v(base, e % NV), inside);
  }

  var dk_acc: array<vec4f, RPT * CPT>;
  var dv_acc: array<vec4f, RPT * CPT>;
  for (var i0 = tile_lo; i0 < tile_hi; i0 += BI) {
    workgroupBarrier();
    var qa: array<vec4f, SPT>;
    var da: array<vec4f, SPT>;
    for (var i = 0u; i < SPT; i++) {
      let e = min(lid + WG * i, BI * NV - 1u);
      let r = e / NV;
      let base = q_index(0u, min(i0 + r, tile_hi - 1u), hk, 0u);
      qa[i] = select(vec4f(0.0), ld_q(base, e % NV), i0 + r < tile_hi);
      da[i] = select(vec4f(0.0), ld_do(base, e % NV), i0 + r < tile_hi);
    }
    store_inner(lid, qa, da);
    if (lid < BI) {
      let st = q_index(0u, min(i0 + lid, tile_hi - 1u), hk, 0u) / D;
      in_stats[lid] = vec2f(row_stats[2u * st], row_stats[2u * st + 1u]);
    }
    workgroupBarrier();
    let sp = score_pair(sr, sx);
    let s = sp.s;
    let dp = sp.dp;
    for (var i = 0u; i < KPT; i++) {
      let x = sx + LPR * i;
      let r = i0 + x;
      let tq = r / G;
      let live = kvalid && r < tile_hi && tq >= queries.x && tq < queries.y;
      let p = select(0.0, exp(s[i] * params.scale - in_stats[x].x), live);
      pt[x * BO + sr] = p;
      pt2[x * BO + sr] = p * (dp[i] - in_stats[x].y);
    }
    workgroupBarrier();
    for (var x = 0u; x < BI; x++) {
      for (var i = 0u; i < RPT; i++) {
        let p = pt[x * BO + or0 + i];
        let g = pt2[x * BO + or0 + i];
        for (var jj = 0u; jj < CPT; jj++) {
          let col = min(oc + CLN * jj, NV - 1u);
          dv_acc[i * CPT + jj] += p * in_b[x * DSV + col];
          dk_acc[i * CPT + jj] += g * in_a[x * DSV + col];
        }
      }
    }
  }

  for (var i = 0u; i < RPT; i++) {
    let jr = j0 + or0 + i;
    if (jr < T) {
      let base = jr * kstride + hk * D;
#if DKV_SPLIT
      let n = params.dkv_rows * kstride;
#endif
      for (var jj = 0u; jj < CPT; jj++) {
        let col = oc + CLN * jj;
        for (var e = 0u; e < 4u; e++) {
          let d = 4u * col + e;
          if (col < NV && d < D) {
#if DKV_SPLIT
            part[2u * wid.z * n + base + d] = dk_acc[i * CPT + jj][e] * params.scale;
            part[(2u * wid.z + 1u) * n + base + d] = dv_acc[i * CPT + jj][e];
#else
            dk[base + d] = dk_acc[i * CPT + jj][e] * params.scale;
            dv[base + d] = dv_acc[i * CPT + jj][e];
#endif
          }
        }
      }
    }
  }
}
#endif

// dK and dV of the shared prefix's key rows [0, dkv_rows): the sums of DKV_SPLIT's partials in
// chunk order (deterministic). Grid: flat group id = wid.x + wid.y * nwg.x, FLAT_WG elements each.
@compute @workgroup_size(FLAT_WG)
fn attn_dkv_sum(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * FLAT_WG + lid;
  let n = params.dkv_rows * params.hkv * D;
  if (i >= n) { return; }
  var sk = 0.0;
  var sv = 0.0;
  for (var z = 0u; z < params.dkv_splits; z++) {
    sk += part[2u * z * n + i];
    sv += part[(2u * z + 1u) * n + i];
  }
  dk[i] = sk;
  dv[i] = sv;
}

#if DECODE
// ---------------------------------------------------------------------------------------------
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
const RMAX: u32 = {{RMAX}}u;
const KB: u32 = {{KB}}u;
const DWG: u32 = {{DWG}}u;
const RGS: u32 = DWG / KB;          // score row groups
const PCL: u32 = {{PCL}}u;          // output lanes across vec4 columns
const PGS: u32 = DWG / PCL;         // output row groups
const PCPT: u32 = (NV + PCL - 1u) / PCL;
const XW: u32 = DWG / RMAX;         // lanes per row in the max reduction
const DSPT: u32 = (KB * NV + DWG - 1u) / DWG; // staged vec4s of K (and of V) per lane, loaded before stored

var<workgroup> dq_sh: array<vec4f, RMAX * NV>;
var<workgroup> dk_sh: array<vec4f, KB * DSV>;
var<workgroup> dv_sh: array<vec4f, KB * NV>;
var<workgroup> dp_sh: array<f32, RMAX * KB>; // [row][key]: scores, then probabilities
var<workgroup> dm_sh: array<f32, DWG>;
var<workgroup> lim_sh: array<u32, RMAX>;     // per row: keys below this are visible (causal)

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
  let kstride = params.hkv * D;

  for (var e = lid; e < RMAX * NV; e += DWG) {
    let r = min(e / NV, R - 1u);
    dq_sh[e] = select(vec4f(0.0), ld_q(q_index(b0 + r / rps, r % rps, hk, 0u), e % NV), e / NV < R);
  }
  if (lid < RMAX) {
    // Row r is new token (r % rps) / G of its sequence, at position past + that.
    let r = min(lid, R - 1u);
    lim_sh[lid] = select(0u, lengths[params.slot0 + b0 + r / rps] + (r % rps) / G + 1u, lid < R);
  }
  let kc = lid % KB;
  let srg = lid / KB;
  let pc = lid % PCL;
  let prg = lid / PCL;
  var m: array<f32, RMAX>;
  for (var r = 0u; r < RMAX; r++) { m[r] = NEG; }
  var l: array<f32, RMAX / PGS>;
  var acc: array<vec4f, (RMAX / PGS) * PCPT>;

  for (var j0 = lo; j0 < hi; j0 += KB) {
    workgroupBarrier(); // the previous block's readers are done (and q, lim_sh are staged)
    var ka: array<vec4f, DSPT>;
    var va: array<vec4f, DSPT>;
    for (var i = 0u; i < DSPT; i++) {
      let e = min(lid + DWG * i, KB * NV - 1u);
      let c = e / NV;
      let base = kv_row(slot, min(j0 + c, hi - 1u)) * kstride + hk * D;
      ka[i] = select(vec4f(0.0), ld_k(base, e % NV), j0 + c < hi);
      va[i] = select(vec4f(0.0), ld_v(base, e % NV), j0 + c < hi);
    }
    for (var i = 0u; i < DSPT; i++) {
      let e = lid + DWG * i;
      if (e < KB * NV) {
        dk_sh[(e / NV) * DSV + e % NV] = ka[i];
        dv_sh[e] = va[i];
      }
    }
    workgroupBarrier();
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
    // Block max per row: lane (row lid / XW, x = lid % XW) over keys x, x + XW, ...; then every
    // lane reads the XW partials of every row.
    var pm = NEG;
    if (lid / XW < R) {
      for (var c = lid % XW; c < KB; c += XW) { pm = max(pm, dp_sh[(lid / XW) * KB + c]); }
    }
    dm_sh[lid] = pm;
    workgroupBarrier();
    for (var r = 0u; r < RMAX; r++) {
      if (r < R) {
        var mx = m[r];
        for (var x = 0u; x < XW; x++) { mx = max(mx, dm_sh[r * XW + x]); }
        if (r % PGS == prg) {
          let a = exp(m[r] - mx);
          let ri = r / PGS;
          l[ri] *= a;
          for (var jj = 0u; jj < PCPT; jj++) { acc[ri * PCPT + jj] *= a; }
        }
        m[r] = mx;
      }
    }
    for (var i = 0u; i < RMAX / RGS; i++) {
      let r = srg + RGS * i;
      if (r < R) {
        let sc = dp_sh[r * KB + kc];
        dp_sh[r * KB + kc] = select(0.0, exp(sc - m[r]), sc > MASKED);
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
        part[base + D] = m[r];
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
}
#endif

// Merge the SPLIT partials (prefix_splits + splits of them) of each (row, head) i:
//   o = Σ_s e^(m_s − M) acc_s / Σ_s e^(m_s − M) l_s.
// One workgroup per i (grid grid1d(count·n·Hq·256, 256)): lane (d group lid % CDL, split group
// lid / CDL) folds the partials s ≡ lid / CDL (mod CSG) with a running max, so that a lane waits
// on a few loads rather than on all of them in turn (one thread per element walking every
// partial took 16 µs a layer at 20 chunks on the H100); the CSG groups meet in workgroup memory.
// A chunk with no keys has l = 0 and m = NEG: its weight is 0.
// FOLD also starts o_proj's LoRA down product on the merged row (i = row·Hq + head): partial j is
// Σ_d A[j, head·D + d]·o[i, d], so the LoRA GEMV's PARTS up after o_proj's GEMV sums Hq of them
// (one dispatch fewer a layer in decode, which is bound by recording dispatches). QUANT (with
// FOLD) also writes the merged rows as int8 groups, o_proj's GEMV's x without its quantize dispatch.
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

// Grid grid1d(T·Hq, 256).
@compute @workgroup_size(FLAT_WG)
fn attn_bwd_prep(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * FLAT_WG + lid;
  if (i >= params.rows * params.hq) { return; }
  var delta = 0.0;
  for (var d = 0u; d < D; d++) { delta += dout[i * D + d] * o[i * D + d]; }
  row_stats[2u * i] = lse[i];
  row_stats[2u * i + 1u] = delta;
}

// ---------------------------------------------------------------------------------------------
// KV cache. Grids grid1d(elements, 256) unless noted.

// Write count·n new rows (k_new, v_new [count·n, Hkv·D]) at positions lengths[slot] + i.
@compute @workgroup_size(FLAT_WG)
fn kv_append(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = (wid.x + wid.y * nwg.x) * FLAT_WG + lid;
  let row_len = params.hkv * D;
  if (e >= params.nseq * params.rows * row_len) { return; }
  let row = e / row_len;
  let slot = params.slot0 + row / params.rows;
  let dst = (slot * params.cap + lengths[slot] + row % params.rows) * row_len + e % row_len;
  k_cache[dst] = k_new[e];
  v_cache[dst] = v_new[e];
}

// Copy positions [0, rows) of slot slot0 to slot dst_slot (forking a prefilled prompt).
@compute @workgroup_size(FLAT_WG)
fn kv_copy(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = (wid.x + wid.y * nwg.x) * FLAT_WG + lid;
  let row_len = params.hkv * D;
  if (e >= params.rows * row_len) { return; }
  let src = params.slot0 * params.cap * row_len + e;
  let dst = params.dst_slot * params.cap * row_len + e;
  k_cache[dst] = k_cache[src];
  v_cache[dst] = v_cache[src];
}

// lengths[slot0 + i] = rows for i < nseq. Grid ceil(nseq / 256).
@compute @workgroup_size(FLAT_WG)
fn kv_set_lengths(@builtin(global_invocation_id) gid: vec3u) {
  if (gid.x < params.nseq) { lengths_rw[params.slot0 + gid.x] = params.rows; }
}

// lengths[slot0 + i] += rows for i < nseq, after every layer has appended. Grid ceil(nseq / 256).
@compute @workgroup_size(FLAT_WG)
fn kv_advance(@builtin(global_invocation_id) gid: vec3u) {
  if (gid.x < params.nseq) { lengths_rw[params.slot0 + gid.x] += params.rows; }
}
