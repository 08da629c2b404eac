// Attention backward (FlashAttention-2, packed sequences, no cache), dQ. Three passes:
//   prep: row_stats[t, h] = (lse, delta = Σ_d dO·O)
//   dq:   dQ_i = scale · Σ_j dS_ij k_j                       (one workgroup per query tile)
//   dkv:  dV_j = Σ_i P_ij dO_i,  dK_j = scale · Σ_i dS_ij q_i (one workgroup per key tile; the
//         sum over i runs over every query head of the group)
// with P_ij = exp(scale·q_i·k_j − lse_i), dS_ij = P_ij (dO_i·v_j − delta_i), recomputed per tile.

struct Params {
  rows: u32, // T
  hq: u32,
  hkv: u32,
  causal: u32,
  scale: f32,
  nseq: u32, // sequences in cu_seqlens
  prefix_len: u32, // the shared prompt, rows [0, prefix_len) = sequence 0
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read> dout: array<f32>;
@group(0) @binding(5) var<storage, read> row_stats: array<f32>; // attention_bwd_prep's [T, Hq, 2]
@group(0) @binding(6) var<storage, read> cu_seqlens: array<u32>;
@group(0) @binding(7) var<storage, read_write> dq: array<f32>;
@group(0) @binding(11) var<storage, read> do4: array<vec4f>;

#include attention_head
#include attention_rows
#include attention_varlen
#include attention_tiled
#include attention_bwd_tiles

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
