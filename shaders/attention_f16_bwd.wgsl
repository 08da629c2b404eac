enable chromium_experimental_subgroup_matrix;
// Subgroup-matrix calls run in loops every subgroup of the workgroup takes equally often; the
// uniformity analysis cannot see that.
diagnostic(off, chromium_experimental.subgroup_matrix_uniformity);
// requires: f16, subgroups

// Attention backward on f16 tensor cores: FlashAttention-2's, with attention_bwd_dq.wgsl's and
// attention_bwd_dkv.wgsl's layouts, masks and row_stats ([T, Hq, 2] of lse and delta). With
// P = exp(scale·q·kᵀ − lse) and dS = P ∘ (dO·vᵀ − delta):
//   attn_bwd_dq_f16:  dq = scale·dS·k, a workgroup per BQ tokens of one query head, walking the
//                     keys in tiles of BI (k and v staged);
//   attn_bwd_dkv_f16: dv = Σ_g Pᵀ·dO and dk = scale·Σ_g dSᵀ·q over the G query heads of a kv head,
//                     a workgroup per BQ keys and half of D, walking the queries in tiles of BI (q
//                     and dO staged); the two halves both compute the scores, which keeps the
//                     accumulators within the registers. DKV_SPLIT: the shared prefix's key tiles,
//                     whose queries run to T, each over chunk z / 2 of its queries (grid z = half +
//                     2·chunk), the partials summed in order by attention_dkv_sum.wgsl; the other
//                     tiles from dkv_tile0 on, whole.
// q, k, v and dO come as f16 copies, zero past T. Each subgroup holds its FR rows' fragments of the
// owned side; products accumulate in f32; scores pass through each subgroup's rows of workgroup
// memory as f32, P and dS as f16.

struct Params {
  rows: u32, // T
  hq: u32,
  hkv: u32,
  causal: u32,
  scale: f32,
  nseq: u32,
  prefix_len: u32,
  dkv_splits: u32, // DKV_SPLIT: chunks of the queries each shared-prefix key tile walks
  dkv_rows: u32,   // DKV_SPLIT: key rows of those tiles (the prefix, to a whole tile)
  dkv_tile0: u32,  // the first key tile of the unsplit dispatch (those before are DKV_SPLIT's)
}

@group(0) @binding(0) var<uniform> params: Params;
// Fragment loads (f16) and staging loads (8 halves a vec4) of the same copies; each kernel binds
// the owned side's f16 views and the walked side's vec4 views.
@group(0) @binding(1) var<storage, read> q16: array<f16>;
@group(0) @binding(2) var<storage, read> do16: array<f16>;
@group(0) @binding(3) var<storage, read> k16: array<f16>;
@group(0) @binding(4) var<storage, read> v16: array<f16>;
@group(0) @binding(5) var<storage, read> q16v: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> do16v: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read> k16v: array<vec4<u32>>;
@group(0) @binding(8) var<storage, read> v16v: array<vec4<u32>>;
@group(0) @binding(9) var<storage, read> row_stats: array<f32>;
@group(0) @binding(10) var<storage, read> cu_seqlens: array<u32>;
@group(0) @binding(11) var<storage, read_write> dq: array<f32>;
@group(0) @binding(12) var<storage, read_write> dk: array<f32>;
@group(0) @binding(13) var<storage, read_write> dv: array<f32>;
@group(0) @binding(14) var<storage, read_write> part: array<f32>; // DKV_SPLIT: partial dK and dV [dkv_splits, 2, dkv_rows, Hkv·D]

#include attention_varlen

#include attention_f16_tile

var<workgroup> st_s: array<vec4<f32>, BI>; // dk/dv: the walked query's lse, delta and own key range (bits)

// Fragment c (this subgroup's rows from r0, columns col0 .. col0 + FR of head `head` of `heads`)
// through s_s, times `f`: dq's rows (put_dq), dk's or dv's (put_kv, `is_dv`). Every subgroup calls
// them equally often: the barriers are uniform.
fn put_dq(c: Acc, sg: u32, r0: u32, head: u32, col0: u32, lane: u32) {
  stage_out(c, sg);
  for (var e = lane; e < FR * FR; e += 32u) {
    let r = r0 + e / FR;
    if (r < params.rows) {
      dq[(r * params.hq + head) * D + col0 + e % FR] = s_s[sg][(e / FR) * SS + e % FR] * params.scale;
    }
  }
  workgroupBarrier();
}

fn put_kv(c: Acc, sg: u32, r0: u32, head: u32, col0: u32, is_dv: bool, chunk: u32, lane: u32) {
  stage_out(c, sg);
  for (var e = lane; e < FR * FR; e += 32u) {
    let r = r0 + e / FR;
    if (r < params.rows) {
      let at = (r * params.hkv + head) * D + col0 + e % FR;
      let x = s_s[sg][(e / FR) * SS + e % FR] * select(params.scale, 1.0, is_dv);
#if DKV_SPLIT
      let n = params.dkv_rows * params.hkv * D;
      part[(2u * chunk + select(0u, 1u, is_dv)) * n + at] = x;
#else
      if (is_dv) { dv[at] = x; } else { dk[at] = x; }
#endif
    }
  }
  workgroupBarrier();
}

@compute @workgroup_size(WG)
fn attn_bwd_dq_f16(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_id) sg: u32,
  @builtin(subgroup_invocation_id) lane: u32,
) {
  let T = params.rows;
  let h = wid.y;
  let hk = h / (params.hq / params.hkv);
  let t0 = wid.x * BQ;
  let tile_lo = varlen_keys(t0).x;
  let tile_hi = varlen_keys(min(t0 + BQ, T) - 1u).y;
  let ts = t0 + sg * FR;
  let rr = lane / LPR;
  let part = lane % LPR;
  let t = ts + rr;
  let valid = t < T;
  let tc = min(t, T - 1u);
  let own = varlen_keys(tc);
  let stats = select(vec2f(0.0), vec2f(row_stats[2u * (tc * params.hq + h)], row_stats[2u * (tc * params.hq + h) + 1u]), valid);
  let qstride = params.hq * D;
  let qbase = ts * qstride + h * D;
  let kstride = params.hkv * D;
#repeat J DF
  let q{{J}} = subgroupMatrixLoad<Left, row_major>(&q16, qbase + {{J}}u * FR, qstride);
#endrepeat
#repeat J DF
  let g{{J}} = subgroupMatrixLoad<Left, row_major>(&do16, qbase + {{J}}u * FR, qstride);
#endrepeat
#repeat J DF
  var a{{J}} = Acc();
#endrepeat
  var kw = key_walk(tile_lo, tile_hi);
  loop {
    if (kw.j0 >= tile_hi) { break; }
    let j0 = kw.j0;
    for (var i = lid; i < BI * D / 8u; i += WG) {
      let r = i / (D / 8u);
      let c = (i % (D / 8u)) * 8u;
      let at = ((j0 + r) * kstride + hk * D + c) / 8u;
      put8(&a_s, r, c, k16v[at]);
      put8(&b_s, r, c, v16v[at]);
    }
    workgroupBarrier();
    // S = q·kᵀ; P kept in registers.
#repeat KC KT
    {
      var s = Acc();
#repeat J DF
      s = subgroupMatrixMultiplyAccumulate(q{{J}}, subgroupMatrixLoad<Right, col_major>(&a_s[{{KC}}u * 2u + {{J}}u / HF], ({{J}}u % HF) * FR, HS), s);
#endrepeat
      subgroupMatrixStore<row_major>(&s_s[sg], {{KC}}u * FR, s, SS);
    }
#endrepeat
    workgroupBarrier();
    var p: array<f32, KPL>;
    for (var i = 0u; i < KPL; i++) {
      let c = part + LPR * i;
      let j = j0 + c;
      p[i] = select(0.0, exp(s_s[sg][rr * SS + c] * params.scale - stats.x), valid && j < kw.end && sees(t, j, own));
    }
    workgroupBarrier();
    // dP = dO·vᵀ, then dS = P ∘ (dP − delta) as f16.
#repeat KC KT
    {
      var s = Acc();
#repeat J DF
      s = subgroupMatrixMultiplyAccumulate(g{{J}}, subgroupMatrixLoad<Right, col_major>(&b_s[{{KC}}u * 2u + {{J}}u / HF], ({{J}}u % HF) * FR, HS), s);
#endrepeat
      subgroupMatrixStore<row_major>(&s_s[sg], {{KC}}u * FR, s, SS);
    }
#endrepeat
    workgroupBarrier();
    for (var i = 0u; i < KPL; i++) {
      let c = part + LPR * i;
      p_s[sg][rr * PS + c] = f16(p[i] * (s_s[sg][rr * SS + c] - stats.y));
    }
    workgroupBarrier();
    // dq += dS·k
#repeat KC KT
    {
      let l = subgroupMatrixLoad<Left, row_major>(&p_s[sg], {{KC}}u * FR, PS);
#repeat J DF
      a{{J}} = subgroupMatrixMultiplyAccumulate(l, subgroupMatrixLoad<Right, row_major>(&a_s[{{KC}}u * 2u + {{J}}u / HF], ({{J}}u % HF) * FR, HS), a{{J}});
#endrepeat
    }
#endrepeat
    workgroupBarrier(); // a_s, b_s, s_s and p_s are rewritten by the next tile
    kw = key_next(kw, tile_lo, tile_hi);
  }
#repeat J DF
  put_dq(a{{J}}, sg, ts, h, {{J}}u * FR, lane);
#endrepeat
}

@compute @workgroup_size(WG)
fn attn_bwd_dkv_f16(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_id) sg: u32,
  @builtin(subgroup_invocation_id) lane: u32,
) {
  let T = params.rows;
  let G = params.hq / params.hkv;
  let hk = wid.y;
  let side = wid.z % 2u; // this workgroup's half of D
  let col = side * HALF;
  let chunk = wid.z / 2u;
  let j0 = (wid.x + params.dkv_tile0) * BQ;
  let j_last = min(j0 + BQ, T) - 1u;
  // Queries that see any of the keys: from the first key's, to the later end of the first's and
  // the last's (a key of the shared prefix is seen up to T).
  var q_lo = varlen_queries(j0).x;
  var q_hi = max(varlen_queries(j0).y, varlen_queries(j_last).y);
#if DKV_SPLIT
  let size = ((q_hi - q_lo + params.dkv_splits - 1u) / params.dkv_splits + BI - 1u) / BI * BI;
  q_lo = min(q_lo + chunk * size, q_hi);
  q_hi = min(q_lo + size, q_hi);
#endif
  let js = j0 + sg * FR;
  let rr = lane / LPR;
  let part = lane % LPR;
  let j = js + rr;
  let validk = j < T;
  let kstride = params.hkv * D;
  let qstride = params.hq * D;
  let kbase = js * kstride + hk * D;
#repeat J DF
  let k{{J}} = subgroupMatrixLoad<Left, row_major>(&k16, kbase + {{J}}u * FR, kstride);
#endrepeat
#repeat J DF
  let v{{J}} = subgroupMatrixLoad<Left, row_major>(&v16, kbase + {{J}}u * FR, kstride);
#endrepeat
#repeat J DHF
  var dk{{J}} = Acc();
#endrepeat
#repeat J DHF
  var dv{{J}} = Acc();
#endrepeat
  for (var g = 0u; g < G; g++) {
    let h = hk * G + g;
    for (var t0 = q_lo; t0 < q_hi; t0 += BI) {
      for (var i = lid; i < BI * D / 8u; i += WG) {
        let r = i / (D / 8u);
        let c = (i % (D / 8u)) * 8u;
        let at = ((t0 + r) * qstride + h * D + c) / 8u;
        put8(&a_s, r, c, q16v[at]);
        put8(&b_s, r, c, do16v[at]);
      }
      if (lid < BI) {
        let tq = t0 + lid;
        let tc = min(tq, T - 1u);
        let own = varlen_keys(tc);
        let live = tq < q_hi;
        let st = select(vec2f(0.0), vec2f(row_stats[2u * (tc * params.hq + h)], row_stats[2u * (tc * params.hq + h) + 1u]), live);
        st_s[lid] = vec4f(st, bitcast<f32>(select(0u, own.x, live)), bitcast<f32>(select(0u, own.y, live)));
      }
      workgroupBarrier();
      // Sᵀ = k·qᵀ; Pᵀ kept in registers and as f16 for dv.
#repeat KC KT
      {
        var s = Acc();
#repeat J DF
        s = subgroupMatrixMultiplyAccumulate(k{{J}}, subgroupMatrixLoad<Right, col_major>(&a_s[{{KC}}u * 2u + {{J}}u / HF], ({{J}}u % HF) * FR, HS), s);
#endrepeat
        subgroupMatrixStore<row_major>(&s_s[sg], {{KC}}u * FR, s, SS);
      }
#endrepeat
      workgroupBarrier();
      var p: array<f32, KPL>;
      for (var i = 0u; i < KPL; i++) {
        let c = part + LPR * i;
        let tq = t0 + c;
        let st = st_s[c];
        let own = vec2u(bitcast<u32>(st.z), bitcast<u32>(st.w));
        p[i] = select(0.0, exp(s_s[sg][rr * SS + c] * params.scale - st.x), validk && tq < q_hi && sees(tq, j, own));
        p_s[sg][rr * PS + c] = f16(p[i]);
      }
      workgroupBarrier();
      // dv += Pᵀ·dO (this half of D); dPᵀ = v·dOᵀ.
#repeat KC KT
      {
        let l = subgroupMatrixLoad<Left, row_major>(&p_s[sg], {{KC}}u * FR, PS);
#repeat J DHF
        dv{{J}} = subgroupMatrixMultiplyAccumulate(l, subgroupMatrixLoad<Right, row_major>(&b_s[{{KC}}u * 2u + side], {{J}}u * FR, HS), dv{{J}});
#endrepeat
      }
#endrepeat
#repeat KC KT
      {
        var s = Acc();
#repeat J DF
        s = subgroupMatrixMultiplyAccumulate(v{{J}}, subgroupMatrixLoad<Right, col_major>(&b_s[{{KC}}u * 2u + {{J}}u / HF], ({{J}}u % HF) * FR, HS), s);
#endrepeat
        subgroupMatrixStore<row_major>(&s_s[sg], {{KC}}u * FR, s, SS);
      }
#endrepeat
      workgroupBarrier();
      // dSᵀ = Pᵀ ∘ (dPᵀ − delta) as f16; dk += dSᵀ·q (this half of D).
      for (var i = 0u; i < KPL; i++) {
        let c = part + LPR * i;
        p_s[sg][rr * PS + c] = f16(p[i] * (s_s[sg][rr * SS + c] - st_s[c].y));
      }
      workgroupBarrier();
#repeat KC KT
      {
        let l = subgroupMatrixLoad<Left, row_major>(&p_s[sg], {{KC}}u * FR, PS);
#repeat J DHF
        dk{{J}} = subgroupMatrixMultiplyAccumulate(l, subgroupMatrixLoad<Right, row_major>(&a_s[{{KC}}u * 2u + side], {{J}}u * FR, HS), dk{{J}});
#endrepeat
      }
#endrepeat
      workgroupBarrier(); // a_s, b_s, st_s, s_s and p_s are rewritten by the next tile
    }
  }
#repeat J DHF
  put_kv(dk{{J}}, sg, js, hk, col + {{J}}u * FR, false, chunk, lane);
#endrepeat
#repeat J DHF
  put_kv(dv{{J}}, sg, js, hk, col + {{J}}u * FR, true, chunk, lane);
#endrepeat
}
