// Attention backward, dK and dV (attention_bwd_dq.wgsl has the passes): one workgroup per key tile.

struct Params {
  rows: u32, // T
  hq: u32,
  hkv: u32,
  causal: u32,
  scale: f32,
  nseq: u32, // sequences in cu_seqlens
  prefix_len: u32, // the shared prompt, rows [0, prefix_len) = sequence 0
  dkv_splits: u32, // DKV_SPLIT: chunks of the queries each shared-prefix key tile walks
  dkv_rows: u32,   // DKV_SPLIT: key rows of those tiles (the prefix, to a whole tile)
  dkv_tile0: u32,  // its first key tile (those before are DKV_SPLIT's)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read> dout: array<f32>;
@group(0) @binding(5) var<storage, read> row_stats: array<f32>; // attention_bwd_prep's [T, Hq, 2]
@group(0) @binding(6) var<storage, read> cu_seqlens: array<u32>;
@group(0) @binding(7) var<storage, read_write> dk: array<f32>;
@group(0) @binding(8) var<storage, read_write> dv: array<f32>;
@group(0) @binding(9) var<storage, read_write> part: array<f32>; // DKV_SPLIT: partial dK and dV [dkv_splits, 2, dkv_rows, Hkv·D]
@group(0) @binding(13) var<storage, read> do4: array<vec4f>;

#include attention_head
#include attention_rows
#include attention_varlen
#include attention_tiled
#include attention_bwd_tiles

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
