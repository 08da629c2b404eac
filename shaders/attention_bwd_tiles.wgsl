// What the backward's tiled kernels (attention_bwd_dq, attention_bwd_dkv) share beside
// attention_tiled.wgsl: dO's rows and the two products per tile. The including file binds dout
// (do4 with ALIGNED).

#if ALIGNED
fn ld_do(base: u32, c: u32) -> vec4f { return do4[base / 4u + c]; }
#else
fn ld_do(base: u32, c: u32) -> vec4f { return select(vec4f(0.0), vec4f(dout[at(base, c, 0u)], dout[at(base, c, 1u)], dout[at(base, c, 2u)], dout[at(base, c, 3u)]), cols(c)); }
#endif

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
