enable chromium_experimental_subgroup_matrix;
// Subgroup-matrix calls run in loops every subgroup of the workgroup takes equally often; the
// uniformity analysis cannot see that.
diagnostic(off, chromium_experimental.subgroup_matrix_uniformity);
// requires: f16, subgroups

// Attention forward on f16 tensor cores (subgroup matrices FR x FR x FR, f16 in, f32 accumulated):
// o = softmax(scale·q·kᵀ + mask)·v over packed sequences, with attention_fwd.wgsl's layouts and
// masks (attention_varlen.wgsl, the shared prefix). q, k and v come as f16 copies, zero past T.
// Two passes over the keys instead of an online softmax: the first finds each row's log-sum-exp
// (q·kᵀ only), the second sums exp(s − lse)·v, already normalised, so the output fragments never
// need rescaling (a subgroup matrix cannot be scaled row by row).
// A workgroup owns BQ tokens of one query head, FR a subgroup, and walks the keys in tiles of BI.
// Each subgroup loads its fragments of q once, straight from storage; k and v are staged a tile at
// a time in workgroup memory, shared by the subgroups; scores and probabilities pass through each
// subgroup's own rows of workgroup memory for the softmax.
// Grid (ceil(T / BQ), Hq).

struct Params {
  rows: u32, // T
  hq: u32,
  hkv: u32,
  causal: u32,
  scale: f32,
  nseq: u32,
  prefix_len: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q16: array<f16>; // [T + pad, Hq·D]
@group(0) @binding(2) var<storage, read> k16v: array<vec4<u32>>; // [T + pad, Hkv·D], 8 halves a vec4
@group(0) @binding(3) var<storage, read> v16v: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;   // [T, Hq·D]
@group(0) @binding(5) var<storage, read_write> lse: array<f32>; // [T, Hq], written with LSE, read with LSE_IN
@group(0) @binding(6) var<storage, read> cu_seqlens: array<u32>;

#include attention_varlen

#include attention_f16_tile

// Keys j0 .. j0 + BI of kv head hk into a_s (and their values into b_s with `both`), every thread
// of the workgroup taking its share; the caller puts barriers around it.
fn stage(j0: u32, hk: u32, lid: u32, both: bool) {
  let kstride = params.hkv * D;
  for (var i = lid; i < BI * D / 8u; i += WG) {
    let r = i / (D / 8u);
    let c = (i % (D / 8u)) * 8u;
    let g = ((j0 + r) * kstride + hk * D + c) / 8u;
    put8(&a_s, r, c, k16v[g]);
    if (both) {
      put8(&b_s, r, c, v16v[g]);
    }
  }
}

// Fragment c (this subgroup's rows, columns col0 .. col0 + FR of head h) through s_s into o.
fn put(c: Acc, sg: u32, ts: u32, h: u32, col0: u32, lane: u32) {
  stage_out(c, sg);
  for (var e = lane; e < FR * FR; e += 32u) {
    let t = ts + e / FR;
    if (t < params.rows) {
      o[(t * params.hq + h) * D + col0 + e % FR] = s_s[sg][(e / FR) * SS + e % FR];
    }
  }
  workgroupBarrier();
}

@compute @workgroup_size(WG)
fn attn_fwd_f16(
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
  let qbase = ts * params.hq * D + h * D;
  // Softmax: row rr of this subgroup, keys part + LPR·i of each tile.
  let rr = lane / LPR;
  let part = lane % LPR;
  let t = ts + rr;
  let valid = t < T;
  let own = varlen_keys(min(t, T - 1u));
  // This subgroup's rows of q, loaded once (D / FR fragments).
  let qstride = params.hq * D;
#repeat J DF
  let q{{J}} = subgroupMatrixLoad<Left, row_major>(&q16, qbase + {{J}}u * FR, qstride);
#endrepeat
#repeat J DF
  var o{{J}} = Acc();
#endrepeat

  // Phase 0: the row's running max m and sum l, then its lse. Phase 1: o = Σ exp(s − lse)·v.
  // LSE_IN (a checkpointed recompute whose first forward wrote lse): phase 1 alone, on that lse.
  var m = NEG;
  var l = 0.0;
#if LSE_IN
  var row_lse = select(0.0, lse[min(t, T - 1u) * params.hq + h], valid);
  let first_phase = 1u;
#else
  var row_lse = 0.0;
  let first_phase = 0u;
#endif
  for (var phase = first_phase; phase < 2u; phase++) {
    var kw = key_walk(tile_lo, tile_hi);
    loop {
      if (kw.j0 >= tile_hi) { break; }
      let j0 = kw.j0;
      stage(j0, hk, lid, phase == 1u);
      workgroupBarrier();
      // Scores q·kᵀ of this subgroup's rows with the tile's keys, into its rows of s_s.
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
      if (phase == 0u) {
        var s: array<f32, KPL>;
        var mx = m;
        for (var i = 0u; i < KPL; i++) {
          let c = part + LPR * i;
          let j = j0 + c;
          s[i] = select(NEG, s_s[sg][rr * SS + c] * params.scale, valid && j < kw.end && sees(t, j, own));
          mx = max(mx, s[i]);
        }
        l *= exp(m - mx);
        for (var i = 0u; i < KPL; i++) {
          if (s[i] > MASKED) { l += exp(s[i] - mx); }
        }
        m = mx;
      } else {
        for (var i = 0u; i < KPL; i++) {
          let c = part + LPR * i;
          let j = j0 + c;
          let seen = valid && j < kw.end && sees(t, j, own);
          p_s[sg][rr * PS + c] = f16(select(0.0, exp(s_s[sg][rr * SS + c] * params.scale - row_lse), seen));
        }
        workgroupBarrier();
#repeat KC KT
        {
          let p = subgroupMatrixLoad<Left, row_major>(&p_s[sg], {{KC}}u * FR, PS);
#repeat J DF
          o{{J}} = subgroupMatrixMultiplyAccumulate(p, subgroupMatrixLoad<Right, row_major>(&b_s[{{KC}}u * 2u + {{J}}u / HF], ({{J}}u % HF) * FR, HS), o{{J}});
#endrepeat
        }
#endrepeat
      }
      workgroupBarrier(); // a_s, b_s, s_s and p_s are rewritten by the next tile
      kw = key_next(kw, tile_lo, tile_hi);
    }
    if (phase == 0u) {
      for (var off = 1u; off < LPR; off *= 2u) {
        let m2 = subgroupShuffleXor(m, off);
        let l2 = subgroupShuffleXor(l, off);
        let mx = max(m, m2);
        l = l * exp(m - mx) + l2 * exp(m2 - mx);
        m = mx;
      }
      row_lse = select(0.0, m + log(l), l > 0.0);
#if LSE
      if (valid && part == 0u) { lse[t * params.hq + h] = row_lse; }
#endif
    }
  }
#repeat J DF
  put(o{{J}}, sg, ts, h, {{J}}u * FR, lane);
#endrepeat
}
