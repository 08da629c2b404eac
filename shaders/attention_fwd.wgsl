// Attention forward, flash style (online softmax over key tiles; no [T x T] score matrix is
// stored), over packed sequences or (CACHED) over the KV cache for prefill.
// Grid (ceil(rows·G / BO), Hkv, 1) for packed sequences, (.., Hkv, count) with CACHED.
// Writes o and, with LSE, the log-sum-exp the backward needs.

struct Params {
  rows: u32,   // packed: T; CACHED: n, new rows per sequence
  hq: u32,
  hkv: u32,
  causal: u32,
  scale: f32,
  nseq: u32,   // packed: sequences in cu_seqlens; CACHED: count of slots
  slot0: u32,  // CACHED: first slot of the batch
  cap: u32,    // CACHED: the cache slot stride in rows
  prefix_len: u32,  // packed: the shared prompt, rows [0, prefix_len) = sequence 0; CACHED: positions
  prefix_slot: u32, // [0, prefix_len) of every slot live in prefix_slot
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
@group(0) @binding(6) var<storage, read> cu_seqlens: array<u32>;
@group(0) @binding(7) var<storage, read> lengths: array<u32>; // CACHED: filled positions of each slot

#include attention_head
#include attention_rows
#include attention_varlen
#include attention_kv_row
#include attention_tiled

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
