// Attention: grouped-query scaled dot-product attention, flash style (online softmax over key
// tiles; no [T x T] score matrix is ever stored), forward and backward, plus the KV-cache kernels.
//
// Layouts (row-major f32, RoPE already applied):
//   q, o, dq      [T, Hq·D]      k, v, dk, dv  [T, Hkv·D]      lse [T, Hq]
//   Hq = G·Hkv; q head h reads kv head h / G (the G query heads of a group are adjacent).
//   lse[t, h] = log Σ_j exp(scale·q·k_j) over the keys row t attends to (natural log).
//   cu_seqlens u32 [nseq + 1]: sequences packed along T, sequence s = rows [cu[s], cu[s+1]),
//     cu[0] = 0, cu[nseq] = T. Rows attend only within their sequence (causal or not).
//   KV cache (one tensor per layer for k and one for v): [slots, cap, Hkv·D]; lengths u32 [slots]
//     holds how many positions of each slot are filled ("past").
//   Cached batches: count sequences (slots slot0 .. slot0+count-1) with n new rows each,
//     q [count·n, Hq·D]; new row i of a slot sits at position past + i and attends to [0, past + i].
//
// Tiling: a workgroup of B x B threads owns B "rows" of one kv head, where a row is one
// (token, query head of the group) pair, rho = token·G + g. Packing the G heads of a group into
// the rows lets them share each K/V tile (and gives decode, n = 1, G useful rows). Thread (r, c)
// scores row r against key c of the tile, then accumulates output columns d = c, c + B, ...
// D (head dim, any value up to 256) and B are compile-time constants chosen by src/ops/attention.ts
// so that the tiles fit the device's workgroup memory.

const D: u32 = {{D}}u;
const B: u32 = {{B}}u;
const WG: u32 = B * B;
const DPT: u32 = (D + B - 1u) / B; // output columns per thread
const FLAT_WG: u32 = 256u;         // elementwise kernels (cache writes, backward preprocessing)
const NEG: f32 = -1.0e30;          // "minus infinity" that keeps exp(m_old - m_new) finite
const MASKED: f32 = -1.0e29;       // scores at or below this are masked out

struct Params {
  rows: u32,     // varlen: T (packed rows); cached: n (new rows per sequence); cache ops: row count
  hq: u32,
  hkv: u32,
  causal: u32,
  scale: f32,
  nseq: u32,     // varlen: sequences in cu_seqlens; cached and cache ops: count of slots
  slot0: u32,    // first slot of a cached batch; the source slot of kv_copy
  cap: u32,      // cache capacity (positions per slot)
  dst_slot: u32, // kv_copy's destination slot
  splits: u32,   // SPLIT: key chunks per cached sequence
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
@group(0) @binding(18) var<storage, read_write> part: array<f32>;

var<workgroup> q_sh: array<f32, B * D>;
var<workgroup> k_sh: array<f32, B * D>;
var<workgroup> v_sh: array<f32, B * D>;
var<workgroup> do_sh: array<f32, B * D>;
var<workgroup> s_sh: array<f32, B * B>;  // scores (forward), P (backward)
var<workgroup> ds_sh: array<f32, B * B>;
var<workgroup> lse_sh: array<f32, B>;
var<workgroup> delta_sh: array<f32, B>;

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

// Keys [lo, hi) that packed query row t attends to. Monotone in t, so a tile's key range is
// [keys(first row).x, keys(last row).y).
fn varlen_keys(t: u32) -> vec2u {
  let s = seq_of(t);
  return vec2u(cu_seqlens[s], select(cu_seqlens[s + 1u], t + 1u, params.causal != 0u));
}

// Queries [lo, hi) that attend to packed key row j (the transpose of varlen_keys).
fn varlen_queries(j: u32) -> vec2u {
  let s = seq_of(j);
  return vec2u(select(cu_seqlens[s], j, params.causal != 0u), cu_seqlens[s + 1u]);
}

// Element d of row rho (token rho / G, query head hk·G + rho % G) of sequence b in a
// [count·rows, Hq·D] tensor (b = 0 for packed sequences).
fn q_index(b: u32, rho: u32, hk: u32, d: u32) -> u32 {
  let G = params.hq / params.hkv;
  return (b * params.rows + rho / G) * params.hq * D + (hk * G + rho % G) * D + d;
}

// ---------------------------------------------------------------------------------------------
// Forward. Grid (ceil(rows·G / B), Hkv, 1) for packed sequences, (.., Hkv, count) with CACHED,
// (.., Hkv, count·splits) with CACHED and SPLIT. Writes o and, with LSE, the log-sum-exp the
// backward needs. SPLIT (split-K for decode over long caches, where count·Hkv workgroups would
// leave most of a GPU idle) divides each sequence's keys into `splits` chunks, one workgroup
// each, and writes partial results that attn_split_combine merges.
@compute @workgroup_size(WG)
fn attn_fwd(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let G = params.hq / params.hkv;
  let hk = wid.y;
#if SPLIT
  let b = wid.z / params.splits;
  let split = wid.z % params.splits;
#else
  let b = wid.z;
#endif
  let r = lid / B;
  let c = lid % B;
  let nrho = params.rows * G;
  let rho0 = wid.x * B;
  let rho = rho0 + r;
  let valid = rho < nrho;
  let t = min(rho, nrho - 1u) / G;
  let t_last = (min(rho0 + B, nrho) - 1u) / G;
  let kstride = params.hkv * D;
#if CACHED
  let slot = params.slot0 + b;
  let kbase = slot * params.cap;
  let past = lengths[slot];
  let lo = 0u;
  let hi = past + t + 1u;
#if SPLIT
  let chunk = ((past + t_last + params.splits) / params.splits + B - 1u) / B * B;
  let tile_lo = split * chunk;
  let tile_hi = min(past + t_last + 1u, tile_lo + chunk);
#else
  let tile_lo = 0u;
  let tile_hi = past + t_last + 1u;
#endif
#else
  let kbase = 0u;
  let keys = varlen_keys(t);
  let lo = keys.x;
  let hi = keys.y;
  let tile_lo = varlen_keys(rho0 / G).x;
  let tile_hi = varlen_keys(t_last).y;
#endif

  for (var e = lid; e < B * D; e += WG) {
    let rr = rho0 + e / D;
    q_sh[e] = select(0.0, q[q_index(b, min(rr, nrho - 1u), hk, e % D)], rr < nrho);
  }

  var m = NEG;
  var l = 0.0;
  var acc: array<f32, DPT>;
  var p: array<f32, B>;
  for (var j0 = tile_lo; j0 < tile_hi; j0 += B) {
    workgroupBarrier(); // the previous tile's readers are done with k_sh, v_sh, s_sh
    for (var e = lid; e < B * D; e += WG) {
      let j = j0 + e / D;
      let idx = (kbase + min(j, tile_hi - 1u)) * kstride + hk * D + e % D;
      k_sh[e] = select(0.0, k[idx], j < tile_hi);
      v_sh[e] = select(0.0, v[idx], j < tile_hi);
    }
    workgroupBarrier();
    let j = j0 + c;
    var s = NEG;
    if (valid && j >= lo && j < hi) {
      var dot = 0.0;
      for (var d = 0u; d < D; d++) { dot += q_sh[r * D + d] * k_sh[c * D + d]; }
      s = dot * params.scale;
    }
    s_sh[r * B + c] = s;
    workgroupBarrier();
    // Every thread of row r computes the row's statistics itself: no extra barrier needed.
    var mx = m;
    for (var cc = 0u; cc < B; cc++) { mx = max(mx, s_sh[r * B + cc]); }
    let alpha = exp(m - mx);
    var sum = 0.0;
    for (var cc = 0u; cc < B; cc++) {
      let sc = s_sh[r * B + cc];
      p[cc] = select(0.0, exp(sc - mx), sc > MASKED);
      sum += p[cc];
    }
    l = l * alpha + sum;
    m = mx;
    for (var i = 0u; i < DPT; i++) {
      let d = c + i * B;
      if (d < D) {
        var a = acc[i] * alpha;
        for (var cc = 0u; cc < B; cc++) { a += p[cc] * v_sh[cc * D + d]; }
        acc[i] = a;
      }
    }
  }

  if (valid) {
#if SPLIT
    let base = (split * params.nseq * params.rows * params.hq + q_index(b, rho, hk, 0u) / D) * (D + 2u);
    for (var i = 0u; i < DPT; i++) {
      let d = c + i * B;
      if (d < D) { part[base + d] = acc[i]; }
    }
    if (c == 0u) {
      part[base + D] = m;
      part[base + D + 1u] = l;
    }
#else
    let inv = select(0.0, 1.0 / l, l > 0.0);
    for (var i = 0u; i < DPT; i++) {
      let d = c + i * B;
      if (d < D) { o[q_index(b, rho, hk, d)] = acc[i] * inv; }
    }
#endif
#if LSE
    if (c == 0u) { lse[q_index(b, rho, hk, 0u) / D] = m + log(l); }
#endif
  }
}

// Merge the SPLIT partials of each (row, head): o = Σ_s e^(m_s − M) acc_s / Σ_s e^(m_s − M) l_s.
// One thread per output element (row, head, d), so that reads of the partials coalesce along d
// (a thread per (row, head) walking D·splits values took 180 µs a layer at 10 chunks on the H100).
// Grid grid1d(count·n·Hq·D, 256).
@compute @workgroup_size(FLAT_WG)
fn attn_split_combine(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = (wid.x + wid.y * nwg.x) * FLAT_WG + lid;
  let n = params.nseq * params.rows * params.hq;
  if (e >= n * D) { return; }
  let i = e / D;
  let d = e % D;
  var mx = NEG;
  for (var s = 0u; s < params.splits; s++) { mx = max(mx, part[(s * n + i) * (D + 2u) + D]); }
  var l = 0.0;
  var a = 0.0;
  for (var s = 0u; s < params.splits; s++) {
    let base = (s * n + i) * (D + 2u);
    let w = exp(part[base + D] - mx);
    l += part[base + D + 1u] * w;
    a += part[base + d] * w;
  }
  o[i * D + d] = a / l;
}

// ---------------------------------------------------------------------------------------------
// Backward (FlashAttention-2, packed sequences, no cache). Three passes:
//   prep: row_stats[t, h] = (lse, delta = Σ_d dO·O)
//   dq:   dQ_i = scale · Σ_j dS_ij k_j                       (one workgroup per query tile)
//   dkv:  dV_j = Σ_i P_ij dO_i,  dK_j = scale · Σ_i dS_ij q_i (one workgroup per key tile; the
//         sum over i runs over every query head of the group)
// with P_ij = exp(scale·q_i·k_j − lse_i), dS_ij = P_ij (dO_i·v_j − delta_i), recomputed per tile.

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

// Grid (ceil(T·G / B), Hkv).
@compute @workgroup_size(WG)
fn attn_bwd_dq(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let G = params.hq / params.hkv;
  let hk = wid.y;
  let r = lid / B;
  let c = lid % B;
  let nrho = params.rows * G;
  let rho0 = wid.x * B;
  let rho = rho0 + r;
  let valid = rho < nrho;
  let rho_c = min(rho, nrho - 1u);
  let keys = varlen_keys(rho_c / G);
  let tile_lo = varlen_keys(rho0 / G).x;
  let tile_hi = varlen_keys((min(rho0 + B, nrho) - 1u) / G).y;
  let kstride = params.hkv * D;

  for (var e = lid; e < B * D; e += WG) {
    let rr = rho0 + e / D;
    let idx = q_index(0u, min(rr, nrho - 1u), hk, e % D);
    q_sh[e] = select(0.0, q[idx], rr < nrho);
    do_sh[e] = select(0.0, dout[idx], rr < nrho);
  }
  let st = q_index(0u, rho_c, hk, 0u) / D;
  let row_lse = row_stats[2u * st];
  let row_delta = row_stats[2u * st + 1u];

  var acc: array<f32, DPT>;
  for (var j0 = tile_lo; j0 < tile_hi; j0 += B) {
    workgroupBarrier();
    for (var e = lid; e < B * D; e += WG) {
      let j = j0 + e / D;
      let idx = min(j, tile_hi - 1u) * kstride + hk * D + e % D;
      k_sh[e] = select(0.0, k[idx], j < tile_hi);
      v_sh[e] = select(0.0, v[idx], j < tile_hi);
    }
    workgroupBarrier();
    let j = j0 + c;
    var ds = 0.0;
    if (valid && j >= keys.x && j < keys.y) {
      var s = 0.0;
      var dp = 0.0;
      for (var d = 0u; d < D; d++) {
        s += q_sh[r * D + d] * k_sh[c * D + d];
        dp += do_sh[r * D + d] * v_sh[c * D + d];
      }
      ds = exp(s * params.scale - row_lse) * (dp - row_delta);
    }
    ds_sh[r * B + c] = ds;
    workgroupBarrier();
    for (var i = 0u; i < DPT; i++) {
      let d = c + i * B;
      if (d < D) {
        var a = acc[i];
        for (var cc = 0u; cc < B; cc++) { a += ds_sh[r * B + cc] * k_sh[cc * D + d]; }
        acc[i] = a;
      }
    }
  }

  if (valid) {
    for (var i = 0u; i < DPT; i++) {
      let d = c + i * B;
      if (d < D) { dq[q_index(0u, rho, hk, d)] = acc[i] * params.scale; }
    }
  }
}

// Grid (ceil(T / B), Hkv). Thread (c, x): key c of the tile; query row x of the current query
// tile when scoring, output columns d = x, x + B, ... of key c when accumulating.
@compute @workgroup_size(WG)
fn attn_bwd_dkv(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let G = params.hq / params.hkv;
  let hk = wid.y;
  let c = lid / B;
  let x = lid % B;
  let T = params.rows;
  let j0 = wid.x * B;
  let j = j0 + c;
  let kvalid = j < T;
  let queries = varlen_queries(min(j, T - 1u));
  let tile_lo = varlen_queries(j0).x * G;
  let tile_hi = varlen_queries(min(j0 + B, T) - 1u).y * G;
  let kstride = params.hkv * D;

  for (var e = lid; e < B * D; e += WG) {
    let jj = j0 + e / D;
    let idx = min(jj, T - 1u) * kstride + hk * D + e % D;
    k_sh[e] = select(0.0, k[idx], jj < T);
    v_sh[e] = select(0.0, v[idx], jj < T);
  }

  var dk_acc: array<f32, DPT>;
  var dv_acc: array<f32, DPT>;
  for (var i0 = tile_lo; i0 < tile_hi; i0 += B) {
    workgroupBarrier();
    for (var e = lid; e < B * D; e += WG) {
      let rr = i0 + e / D;
      let idx = q_index(0u, min(rr, tile_hi - 1u), hk, e % D);
      q_sh[e] = select(0.0, q[idx], rr < tile_hi);
      do_sh[e] = select(0.0, dout[idx], rr < tile_hi);
    }
    if (lid < B) {
      let st = q_index(0u, min(i0 + lid, tile_hi - 1u), hk, 0u) / D;
      lse_sh[lid] = row_stats[2u * st];
      delta_sh[lid] = row_stats[2u * st + 1u];
    }
    workgroupBarrier();
    let rho = i0 + x;
    let t = rho / G;
    var p = 0.0;
    var ds = 0.0;
    if (kvalid && rho < tile_hi && t >= queries.x && t < queries.y) {
      var s = 0.0;
      var dp = 0.0;
      for (var d = 0u; d < D; d++) {
        s += q_sh[x * D + d] * k_sh[c * D + d];
        dp += do_sh[x * D + d] * v_sh[c * D + d];
      }
      p = exp(s * params.scale - lse_sh[x]);
      ds = p * (dp - delta_sh[x]);
    }
    s_sh[x * B + c] = p;
    ds_sh[x * B + c] = ds;
    workgroupBarrier();
    for (var i = 0u; i < DPT; i++) {
      let d = x + i * B;
      if (d < D) {
        var a = dv_acc[i];
        var g = dk_acc[i];
        for (var xx = 0u; xx < B; xx++) {
          a += s_sh[xx * B + c] * do_sh[xx * D + d];
          g += ds_sh[xx * B + c] * q_sh[xx * D + d];
        }
        dv_acc[i] = a;
        dk_acc[i] = g;
      }
    }
  }

  if (kvalid) {
    for (var i = 0u; i < DPT; i++) {
      let d = x + i * B;
      if (d < D) {
        dk[j * kstride + hk * D + d] = dk_acc[i] * params.scale;
        dv[j * kstride + hk * D + d] = dv_acc[i];
      }
    }
  }
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
