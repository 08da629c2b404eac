// The GSPO/GRPO loss of spec/rl-loss.md and docs/spec/rl-loss-vectors.md (TRL's formulas): group
// advantages, token or sequence importance ratios, the surrogate of the loss type (clipped for
// grpo/bnpo/dr_grpo/dapo/luspo with optional two-sided `delta`, cispo, sapo, vespo), the
// off-policy sequence mask, the high-entropy token mask, rollout correction, k3 KL, aggregation,
// the entropy bonus, dLoss/dlogp, dLoss/dentropy and the logged metrics. Read top to bottom: df64
// arithmetic, then the entry points in the order they run:
// advantages -> entropy_threshold -> seq_pass -> finalize -> scale_grad.
//
// Precision: the loss is a sum of terms of size ~|A| that cancel to ~1e-3, so f32 gives ~1e-5
// relative; the spec's vectors need 1e-6. Everything is computed in "df64": a value is a vec2f
// (hi, lo) with hi + lo exact to ~2^-44 relative, built from error-free transformations
// (Knuth's two-sum, Dekker's split product; WGSL's fma may round twice, so it is not used).
//
// Layouts (B sequences, T tokens, row-major):
//   planes  [10, B, T] f32: (hi, lo) planes of logps, old_logps, ref_logps, sampling_logps, entropy
//   mask    [B, T] f32, non-zero = token under the loss
//   rewards [B] of (hi, lo) f32 read as raw bits: a NaN (or inf) hi marks a missing reward
//   adv     [B] df64 advantages
//   seq     [B, NS] df64 per-sequence partials (slots below); gpair [B, T] df64 gradient
//   out     [NOUT] df64 loss and metrics (slots below)
//   grad_ent [B, T] f32 dLoss/dentropy (the entropy bonus), for the model's backward

struct Params {
  B: u32,
  T: u32,
  G: u32,
  flags: u32,
  scale_mode: u32,
  norm_mode: u32,
  lo_bound_hi: f32,
  lo_bound_lo: f32,
  hi_bound_hi: f32,
  hi_bound_lo: f32,
  beta_hi: f32,
  beta_lo: f32,
  cmax_hi: f32,
  cmax_lo: f32,
  cmin_hi: f32,
  cmin_lo: f32,
  norm_hi: f32,
  norm_lo: f32,
  adv_eps_hi: f32,
  adv_eps_lo: f32,
  one: f32,
  loss_kind: u32,
  delta_hi: f32,
  delta_lo: f32,
  cispo_max_hi: f32,
  cispo_max_lo: f32,
  tau_pos_hi: f32,
  tau_pos_lo: f32,
  tau_neg_hi: f32,
  tau_neg_lo: f32,
  vk_pos_hi: f32,
  vk_pos_lo: f32,
  vl_pos_hi: f32,
  vl_pos_lo: f32,
  vk_neg_hi: f32,
  vk_neg_lo: f32,
  vl_neg_hi: f32,
  vl_neg_lo: f32,
  log_cmax_hi: f32,
  log_cmax_lo: f32,
  log_cmin_hi: f32,
  log_cmin_lo: f32,
  opm_hi: f32,
  opm_lo: f32,
  ent_q_hi: f32,
  ent_q_lo: f32,
  ent_coef_hi: f32,
  ent_coef_lo: f32,
  ga_hi: f32,
  ga_lo: f32,
  ent_den_hi: f32,
  ent_den_lo: f32,
}

// flags
const HAS_OLD: u32 = 1u;          // old_logps given; otherwise old = logps (detached): on-policy
const USE_KL: u32 = 2u;           // beta != 0 (ref_logps given)
const CORRECT: u32 = 4u;          // rollout correction on (sampling_logps given)
const CORRECT_SEQ: u32 = 8u;      // sequence_* correction modes (else token_*)
const CORRECT_TRUNC: u32 = 16u;   // *_truncate (else *_mask)
const HAS_CMAX: u32 = 32u;
const HAS_CMIN: u32 = 64u;
const SEQ_LEVEL: u32 = 128u;      // importance_sampling_level = sequence (GSPO)
const HAS_DELTA: u32 = 256u;      // two-sided clipping: coef_1 = min(coef_1, delta)
const OFF_POLICY: u32 = 512u;     // off_policy_mask_threshold set
const ENT_MASK: u32 = 1024u;      // top_entropy_quantile < 1
const ENT_BONUS: u32 = 2048u;     // entropy bonus (coefficient may be 0 in adaptive mode)
const HAS_SAMPLING: u32 = 4096u;  // sampling_logps given (the off-policy mask's reference)
const ENT_MEAN: u32 = 8192u;      // bonus = mean entropy over its tokens / ga (else / the dapo normaliser)
const ENT_DEN: u32 = 16384u;      // the bonus's normaliser given (ent_den): a micro-batch wider than this batch

// loss_kind: the per-token surrogate
const KIND_CLIP: u32 = 0u;        // grpo, bnpo, dr_grpo, dapo, luspo
const KIND_CISPO: u32 = 1u;
const KIND_SAPO: u32 = 2u;
const KIND_VESPO: u32 = 3u;

// scale_mode: advantage normalisation
const SCALE_GROUP: u32 = 0u;
const SCALE_BATCH: u32 = 1u;

// norm_mode: each sequence's weight is 1 / (norm · f_i), f_i below
const NORM_PER_SEQ: u32 = 0u;     // f_i = max(|o_i|, 1)        (grpo)
const NORM_TOKENS: u32 = 1u;      // f_i = max(N, 1), N = Σ mask (bnpo, dapo without num_items)
                                  // otherwise f_i = 1          (dr_grpo, dapo with num_items)

// seq slots
const NS: u32 = 16u;
const S_LEN: u32 = 0u;
const S_LOSS: u32 = 1u;
const S_KL: u32 = 2u;
const S_LOW: u32 = 3u;
const S_HIGH: u32 = 4u;
const S_GAP: u32 = 5u;
const S_GAP_MAX: u32 = 6u;
const S_RHO: u32 = 7u;
const S_RHO_MIN: u32 = 8u;
const S_RHO_MAX: u32 = 9u;
const S_WEIGHT: u32 = 10u;
const S_ENT_SUM: u32 = 11u;       // Σ entropy over the tokens of the bonus (mask ∧ entropy mask)
const S_ENT_CNT: u32 = 12u;       // their count
const S_DROPPED: u32 = 13u;       // 1 when the off-policy mask drops the sequence
const S_PHI: u32 = 14u;           // vespo's φ

// out slots (src/ops/rlLoss.ts names them)
const O_LOSS: u32 = 0u;
const O_KL: u32 = 1u;
const O_LOW_MEAN: u32 = 2u;
const O_HIGH_MEAN: u32 = 3u;
const O_REGION_MEAN: u32 = 4u;
const O_LOW_MIN: u32 = 5u;
const O_HIGH_MAX: u32 = 6u;
const O_GAP_MEAN: u32 = 7u;
const O_GAP_MAX: u32 = 8u;
const O_RHO_MIN: u32 = 9u;
const O_RHO_MEAN: u32 = 10u;
const O_RHO_MAX: u32 = 11u;
const O_TOKENS: u32 = 12u;
const O_CLIP_SEQS: u32 = 13u;     // sequences behind low_min/high_max (0: those are NaN, as TRL's nanmin)
const O_CISPO_CLIP: u32 = 14u;
const O_PHI_MEAN: u32 = 15u;
const O_DROPPED: u32 = 16u;       // fraction of sequences the off-policy mask drops
const O_POLICY_LOSS: u32 = 17u;   // the loss before the entropy bonus
const O_ENT_THR: u32 = 18u;       // high-entropy threshold (written by entropy_threshold)
const O_ENT_MEAN: u32 = 19u;      // mean entropy over the bonus's tokens (the adaptive controller's input)
const O_ENT_CNT: u32 = 20u;       // their count
const O_ENT_DEN: u32 = 21u;       // the bonus's normaliser

const WG: u32 = 64u;
const BIG: f32 = 3.0e38;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> planes: array<f32>;
@group(0) @binding(2) var<storage, read> mask: array<f32>;
@group(0) @binding(3) var<storage, read> rewards: array<vec2u>;
@group(0) @binding(4) var<storage, read_write> adv: array<vec2f>;
@group(0) @binding(5) var<storage, read_write> seq: array<vec2f>;
@group(0) @binding(6) var<storage, read_write> gpair: array<vec2f>;
@group(0) @binding(7) var<storage, read_write> grad: array<f32>;
@group(0) @binding(8) var<storage, read_write> out: array<vec2f>;
@group(0) @binding(9) var<storage, read_write> grad_ent: array<f32>;

// ---------------------------------------------------------------------------------------------
// df64 arithmetic

// `· params.one` (a uniform 1.0) keeps the compiler from simplifying (a + b) - a to b, which
// lavapipe's optimizer does (it treats float math as associative) and which would zero every
// error term. SwiftShader keeps the plain form; both are tested.
fn two_sum(a: f32, b: f32) -> vec2f {
  let s = (a + b) * params.one;
  let bb = s - a;
  return vec2f(s, (a - (s - bb)) + (b - bb));
}

fn quick_two_sum(a: f32, b: f32) -> vec2f {
  let s = (a + b) * params.one;
  return vec2f(s, b - (s - a));
}

// Dekker: a = hi + lo with 12-bit halves, so products of halves are exact in f32.
fn split(a: f32) -> vec2f {
  let t = (4097.0 * a) * params.one;
  let hi = t - (t - a);
  return vec2f(hi, a - hi);
}

fn two_prod(a: f32, b: f32) -> vec2f {
  let p = a * b;
  let x = split(a);
  let y = split(b);
  return vec2f(p, ((x.x * y.x - p) + x.x * y.y + x.y * y.x) + x.y * y.y);
}

fn df(a: f32) -> vec2f {
  return vec2f(a, 0.0);
}

fn df_add(a: vec2f, b: vec2f) -> vec2f {
  var s = two_sum(a.x, b.x);
  let t = two_sum(a.y, b.y);
  s.y += t.x;
  s = quick_two_sum(s.x, s.y);
  s.y += t.y;
  return quick_two_sum(s.x, s.y);
}

fn df_sub(a: vec2f, b: vec2f) -> vec2f {
  return df_add(a, -b);
}

fn df_mul(a: vec2f, b: vec2f) -> vec2f {
  var p = two_prod(a.x, b.x);
  p.y += a.x * b.y + a.y * b.x;
  return quick_two_sum(p.x, p.y);
}

// f32 division is only accurate to 2.5 ulp in WGSL: each quotient digit is corrected by an exact residual.
fn df_div(a: vec2f, b: vec2f) -> vec2f {
  let q1 = a.x / b.x;
  var r = df_sub(a, df_mul(b, df(q1)));
  let q2 = r.x / b.x;
  r = df_sub(r, df_mul(b, df(q2)));
  let q3 = r.x / b.x;
  return df_add(quick_two_sum(q1, q2), df(q3));
}

fn df_sqrt(a: vec2f) -> vec2f {
  if (a.x <= 0.0) {
    return vec2f(0.0);
  }
  let y = sqrt(a.x);
  // One Newton step from the f32 root doubles its bits: y + (a - y²) / 2y.
  let r = df_sub(a, two_prod(y, y));
  return df_add(df(y), df_div(r, df(2.0 * y)));
}

fn df_lt(a: vec2f, b: vec2f) -> bool {
  return a.x < b.x || (a.x == b.x && a.y < b.y);
}

fn df_min(a: vec2f, b: vec2f) -> vec2f {
  return select(b, a, df_lt(a, b));
}

fn df_max(a: vec2f, b: vec2f) -> vec2f {
  return select(b, a, df_lt(b, a));
}

fn df_abs(a: vec2f) -> vec2f {
  return select(a, -a, a.x < 0.0);
}

const LN2 = vec2f(0.6931471824645996, -1.9046542121259336e-9);
const INV3 = vec2f(0.1666666716337204, -4.967053879312289e-9);     // 1/3!
const INV4 = vec2f(0.0416666679084301, -1.2417634698280722e-9);    // 1/4!
const INV5 = vec2f(0.008333333767950535, -4.34617203337595e-10);   // 1/5!
const INV6 = vec2f(0.0013888889225199819, -3.3631094437103215e-11); // 1/6!

// exp(a) - 1 for |a| <= ln2/2: a/512 by a Taylor polynomial, then nine doublings
// (e <- e·(e + 2), i.e. (1+e)² - 1), which keep small results accurate to relative precision.
fn df_expm1_reduced(a: vec2f) -> vec2f {
  let r = a * (1.0 / 512.0);
  var p = df_add(INV5, df_mul(r, INV6));
  p = df_add(INV4, df_mul(r, p));
  p = df_add(INV3, df_mul(r, p));
  p = df_add(df(0.5), df_mul(r, p));
  p = df_add(df(1.0), df_mul(r, p));
  var e = df_mul(r, p);
  for (var i = 0; i < 9; i++) {
    e = df_mul(e, df_add(e, df(2.0)));
  }
  return e;
}

// exp(a) = 2^k · exp(a - k·ln2). Arguments are clamped to ±80 (f32 range): larger ratios only
// meet clamps or comparisons that an exp(80) decides the same way.
fn df_exp(a: vec2f) -> vec2f {
  let x = select(a, df(clamp(a.x, -80.0, 80.0)), abs(a.x) > 80.0);
  let k = round(x.x / LN2.x);
  let e = df_expm1_reduced(df_sub(x, df_mul(LN2, df(k))));
  let m = df_add(df(1.0), e);
  let ki = i32(k);
  return vec2f(ldexp(m.x, ki), ldexp(m.y, ki));
}

// exp(x) - x - 1 (the k3 KL with x = ref - logp), accurate for small x through expm1.
fn df_k3(x: vec2f) -> vec2f {
  if (abs(x.x) <= 0.34) {
    return df_sub(df_expm1_reduced(x), x);
  }
  return df_sub(df_sub(df_exp(x), x), df(1.0));
}

// ---------------------------------------------------------------------------------------------
// Workgroup reductions of NR df64 slots at once: sums, except slots whose bit is set in min_bits
// or max_bits. Every invocation calls it (it has barriers); the results are in acc[0..NR).

const NR: u32 = 18u;
var<workgroup> acc: array<vec2f, 1152>; // WG * NR

fn wg_reduce(lid: u32, nslots: u32, min_bits: u32, max_bits: u32) {
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s = s / 2u) {
    if (lid < s) {
      for (var k = 0u; k < nslots; k++) {
        let a = acc[lid * NR + k];
        let b = acc[(lid + s) * NR + k];
        var c: vec2f;
        if ((min_bits & (1u << k)) != 0u) {
          c = df_min(a, b);
        } else if ((max_bits & (1u << k)) != 0u) {
          c = df_max(a, b);
        } else {
          c = df_add(a, b);
        }
        acc[lid * NR + k] = c;
      }
    }
    workgroupBarrier();
  }
}

fn has(flag: u32) -> bool {
  return (params.flags & flag) != 0u;
}

// ---------------------------------------------------------------------------------------------
// Group-relative advantages (one workgroup). TRL: A = (r - mean_group) / (std + 1e-4) with the
// unbiased nanstd of the group ('group') or of the whole batch ('batch'), or r - mean_group
// ('none'). Missing rewards, and groups whose std is undefined (fewer than 2 rewards), give 0.

fn reward_valid(i: u32) -> bool {
  return (rewards[i].x & 0x7f800000u) != 0x7f800000u;
}

fn reward(i: u32) -> vec2f {
  return bitcast<vec2f>(rewards[i]);
}

@compute @workgroup_size(WG)
fn advantages(@builtin(local_invocation_index) lid: u32) {
  let B = params.B;
  let G = params.G;
  // Batch mean, then the batch's sum of squared deviations.
  var sum = vec2f(0.0);
  var cnt = 0.0;
  for (var i = lid; i < B; i += WG) {
    if (reward_valid(i)) {
      sum = df_add(sum, reward(i));
      cnt += 1.0;
    }
  }
  acc[lid * NR] = sum;
  acc[lid * NR + 1u] = df(cnt);
  wg_reduce(lid, 2u, 0u, 0u);
  let bcount = acc[1].x;
  let bmean = df_div(acc[0], df(max(bcount, 1.0)));
  workgroupBarrier();
  var sq = vec2f(0.0);
  for (var i = lid; i < B; i += WG) {
    if (reward_valid(i)) {
      let d = df_sub(reward(i), bmean);
      sq = df_add(sq, df_mul(d, d));
    }
  }
  acc[lid * NR] = sq;
  wg_reduce(lid, 1u, 0u, 0u);
  let bstd = df_sqrt(df_div(acc[0], df(max(bcount - 1.0, 1.0))));

  for (var g = lid; g < B / G; g += WG) {
    var gsum = vec2f(0.0);
    var gcnt = 0.0;
    for (var j = 0u; j < G; j++) {
      if (reward_valid(g * G + j)) {
        gsum = df_add(gsum, reward(g * G + j));
        gcnt += 1.0;
      }
    }
    let gmean = df_div(gsum, df(max(gcnt, 1.0)));
    var gsq = vec2f(0.0);
    for (var j = 0u; j < G; j++) {
      if (reward_valid(g * G + j)) {
        let d = df_sub(reward(g * G + j), gmean);
        gsq = df_add(gsq, df_mul(d, d));
      }
    }
    let gstd = df_sqrt(df_div(gsq, df(max(gcnt - 1.0, 1.0))));
    var sd = gstd;
    var defined = gcnt > 1.0;
    if (params.scale_mode == SCALE_BATCH) {
      sd = bstd;
      defined = bcount > 1.0;
    }
    let eps = vec2f(params.adv_eps_hi, params.adv_eps_lo);
    for (var j = 0u; j < G; j++) {
      let i = g * G + j;
      var a = vec2f(0.0);
      if (reward_valid(i)) {
        a = df_sub(reward(i), gmean);
        if (params.scale_mode <= SCALE_BATCH) {
          a = select(vec2f(0.0), df_div(a, df_add(sd, eps)), defined);
        }
      }
      adv[i] = a;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The high-entropy threshold of top_entropy_quantile ρ (one workgroup): TRL's torch.quantile of
// the active tokens' entropies at level q = 1 - ρ, linear between the order statistics at
// floor(q(n-1)) and the next. Each active token finds its rank by counting (ties broken by index).

fn entropy_at(k: u32) -> vec2f {
  return plane(4u, k);
}

@compute @workgroup_size(WG)
fn entropy_threshold(@builtin(local_invocation_index) lid: u32) {
  let N = params.B * params.T;
  var n = 0.0;
  for (var k = lid; k < N; k += WG) {
    n += select(0.0, 1.0, mask[k] != 0.0);
  }
  acc[lid * NR] = df(n);
  wg_reduce(lid, 1u, 0u, 0u);
  let count = acc[0].x;
  workgroupBarrier();
  let pos = df_mul(vec2f(params.ent_q_hi, params.ent_q_lo), df(max(count - 1.0, 0.0)));
  var i0 = floor(pos.x);
  if (i0 == pos.x && pos.y < 0.0) {
    i0 -= 1.0;
  }
  let frac = df_sub(pos, df(i0));
  let i1 = min(i0 + 1.0, max(count - 1.0, 0.0));
  var v0 = vec2f(0.0);
  var v1 = vec2f(0.0);
  for (var k = lid; k < N; k += WG) {
    if (mask[k] == 0.0) {
      continue;
    }
    let h = entropy_at(k);
    var rank = 0.0;
    for (var j = 0u; j < N; j++) {
      if (mask[j] != 0.0) {
        let hj = entropy_at(j);
        if (df_lt(hj, h) || (hj.x == h.x && hj.y == h.y && j < k)) {
          rank += 1.0;
        }
      }
    }
    if (rank == i0) {
      v0 = h;
    }
    if (rank == i1) {
      v1 = h;
    }
  }
  acc[lid * NR] = v0;
  acc[lid * NR + 1u] = v1;
  wg_reduce(lid, 2u, 0u, 0u);
  if (lid == 0u) {
    // No active token: TRL's mask keeps nothing.
    out[O_ENT_THR] = select(df(BIG), df_add(acc[0], df_mul(frac, df_sub(acc[1], acc[0]))), count > 0.0);
  }
}

// ---------------------------------------------------------------------------------------------
// Per-sequence pass (one workgroup per sequence). Pass 1 sums the masked log-ratios (GSPO, vespo),
// the correction's log-ratios and the off-policy mask's gap; pass 2 forms each token's loss
//   L = S(c, A)·ρ·m_opm·m_ent + β·(exp(ref-ℓ) - (ref-ℓ) - 1)
// with S the loss type's surrogate of c (the token ratio exp(ℓ-ℓ_old) or the sequence ratio
// s = exp(mean_t(ℓ-ℓ_old))), ρ the rollout correction (detached; not for vespo, whose φ folds it
// in), m_opm the off-policy sequence mask and m_ent the high-entropy mask, and its derivative in
// ℓ before the aggregation weight:
//   token level:    ρ·m·∂S/∂c·c + β(1 - exp(ref-ℓ))
//   sequence level: (Σ_t m·ρ_t·m_ent,t)·m_opm·∂S/∂s·s/|o| + β(1 - exp(ref-ℓ))   (s feeds every token)
//   cispo, vespo:   S = -w·A·ℓ with w detached (min(c, ε_high), or φ), so ∂/∂ℓ = -w·A·ρ·m

fn plane(p: u32, k: u32) -> vec2f {
  let bt = params.B * params.T;
  return vec2f(planes[2u * p * bt + k], planes[(2u * p + 1u) * bt + k]);
}

struct Surrogate {
  loss: vec2f,
  dc: vec2f,     // ∂loss/∂c
  low: f32,      // c < 1-ε_low and A < 0 (TRL's is_low_clipped)
  high: f32,     // c > 1+ε_high and A > 0
}

fn df_sigmoid(x: vec2f) -> vec2f {
  return df_div(df(1.0), df_add(df(1.0), df_exp(-x)));
}

// grpo/bnpo/dr_grpo/dapo/luspo: -min(c'·A, clip(c, 1-ε_low, 1+ε_high)·A), c' = min(c, δ) with
// two-sided clipping; sapo: -σ(τ(c-1))·4/τ·A with τ by the sign of A.
fn surrogate(c: vec2f, a: vec2f) -> Surrogate {
  var s: Surrogate;
  s.low = 0.0;
  s.high = 0.0;
  if (params.loss_kind == KIND_SAPO) {
    let tau = select(vec2f(params.tau_neg_hi, params.tau_neg_lo), vec2f(params.tau_pos_hi, params.tau_pos_lo), a.x > 0.0);
    let sg = df_sigmoid(df_mul(tau, df_sub(c, df(1.0))));
    s.loss = -df_div(df_mul(df_mul(sg, df(4.0)), a), tau);
    // ∂/∂c = -4·A·σ(1-σ)
    s.dc = -df_mul(df_mul(df(4.0), a), df_mul(sg, df_sub(df(1.0), sg)));
    return s;
  }
  let lo = vec2f(params.lo_bound_hi, params.lo_bound_lo);
  let hi = vec2f(params.hi_bound_hi, params.hi_bound_lo);
  let delta = vec2f(params.delta_hi, params.delta_lo);
  let capped = has(HAS_DELTA) && df_lt(delta, c);
  let c1 = select(c, delta, capped);
  let c2 = df_min(df_max(c, lo), hi);
  let u1 = df_mul(c1, a);
  let u2 = df_mul(c2, a);
  if (df_lt(u2, u1)) {
    s.loss = -u2;        // the clipped term wins: no gradient through c
    s.dc = vec2f(0.0);
  } else {
    s.loss = -u1;
    s.dc = select(-a, vec2f(0.0), capped);
  }
  s.low = select(0.0, 1.0, df_lt(c1, lo) && a.x < 0.0);
  s.high = select(0.0, 1.0, df_lt(hi, c1) && a.x > 0.0);
  return s;
}

// Truncate (clamp) or mask (zero outside the bounds) a correction ratio.
fn correct(rho: vec2f) -> vec2f {
  let cmax = vec2f(params.cmax_hi, params.cmax_lo);
  let cmin = vec2f(params.cmin_hi, params.cmin_lo);
  if (has(CORRECT_TRUNC)) {
    var r = rho;
    if (has(HAS_CMIN)) {
      r = df_max(r, cmin);
    }
    if (has(HAS_CMAX)) {
      r = df_min(r, cmax);
    }
    return r;
  }
  let out_of_range = (has(HAS_CMIN) && df_lt(rho, cmin)) || (has(HAS_CMAX) && df_lt(cmax, rho));
  return select(rho, vec2f(0.0), out_of_range);
}

// log(1e-8): vespo's lower clamp of log-ratios.
const LOG_1E8 = vec2f(-18.420680743952367, 0.0);

fn df_clamp(x: vec2f, lo: vec2f, hi: vec2f) -> vec2f {
  return df_min(df_max(x, lo), hi);
}

// clamp(log(correct(exp(d))), log 1e-8, 20), in the log domain (a masked ratio is log 0 = -inf).
fn log_rho(d: vec2f) -> vec2f {
  let lmax = vec2f(params.log_cmax_hi, params.log_cmax_lo);
  let lmin = vec2f(params.log_cmin_hi, params.log_cmin_lo);
  var l = d;
  if (has(CORRECT_TRUNC)) {
    if (has(HAS_CMIN)) {
      l = df_max(l, lmin);
    }
    if (has(HAS_CMAX)) {
      l = df_min(l, lmax);
    }
  } else if ((has(HAS_CMIN) && df_lt(d, lmin)) || (has(HAS_CMAX) && df_lt(lmax, d))) {
    l = LOG_1E8;
  }
  return df_clamp(l, LOG_1E8, df(20.0));
}

fn old_at(k: u32, l: vec2f) -> vec2f {
  return select(l, plane(1u, k), has(HAS_OLD));
}

// The high-entropy mask of token k (1 without top_entropy_quantile).
fn ent_keep(k: u32) -> bool {
  if (!has(ENT_MASK)) {
    return true;
  }
  return !df_lt(entropy_at(k), out[O_ENT_THR]);
}

@compute @workgroup_size(WG)
fn seq_pass(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = wid.x;
  let T = params.T;
  let a = adv[i];
  let token_rho = has(CORRECT) && !has(CORRECT_SEQ);
  let kind = params.loss_kind;

  var n = 0.0;
  var lr_sum = vec2f(0.0);
  var d_sum = vec2f(0.0);
  var f_sum = vec2f(0.0);
  var gap_sum = vec2f(0.0);
  var vlr_sum = vec2f(0.0);
  var vis_sum = vec2f(0.0);
  for (var t = lid; t < T; t += WG) {
    let k = i * T + t;
    if (mask[k] != 0.0) {
      let l = plane(0u, k);
      let o = old_at(k, l);
      n += 1.0;
      let lr = df_sub(l, o);
      lr_sum = df_add(lr_sum, lr);
      vlr_sum = df_add(vlr_sum, df_clamp(lr, df(-20.0), df(20.0)));
      var f = select(0.0, 1.0, ent_keep(k));
      if (has(CORRECT)) {
        let d = df_sub(o, plane(3u, k));
        d_sum = df_add(d_sum, d);
        if (token_rho) {
          f_sum = df_add(f_sum, df_mul(df(f), correct(df_exp(d))));
          vis_sum = df_add(vis_sum, log_rho(d));
        }
      }
      if (!token_rho) {
        f_sum = df_add(f_sum, df(f));
      }
      // Off-policy gap: ℓ_sampling (or ℓ_old) - ℓ.
      let ls = select(o, plane(3u, k), has(HAS_SAMPLING));
      gap_sum = df_add(gap_sum, df_sub(ls, l));
    }
  }
  acc[lid * NR] = df(n);
  acc[lid * NR + 1u] = lr_sum;
  acc[lid * NR + 2u] = d_sum;
  acc[lid * NR + 3u] = f_sum;
  acc[lid * NR + 4u] = gap_sum;
  acc[lid * NR + 5u] = vlr_sum;
  acc[lid * NR + 6u] = vis_sum;
  wg_reduce(lid, 7u, 0u, 0u);
  let len = acc[0].x;
  let len1 = df(max(len, 1.0));
  // Sequence-level quantities, computed identically by every invocation.
  let s = df_exp(df_div(acc[1], len1));
  let seq_sur = surrogate(s, a);
  let seq_rho = correct(df_exp(acc[2]));
  // TRL's off-policy sequence mask: keep when A >= 0 or mean(ℓ_sampling - ℓ) <= threshold.
  let dropped = has(OFF_POLICY) && a.x < 0.0 && df_lt(vec2f(params.opm_hi, params.opm_lo), df_div(acc[4], len1));
  let m_opm = select(1.0, 0.0, dropped);
  // Σ_t m·ρ_t·m_ent (sequence-level surrogates feed every token's loss).
  var f_total = acc[3];
  if (has(CORRECT) && !token_rho) {
    f_total = df_mul(f_total, seq_rho);
  }
  f_total = df_mul(f_total, df(m_opm));
  // vespo: φ(w) = exp(λ + k·log w - λ·w), w the sequence ratio with the correction's log-ratios
  // (padding positions add log ρ(1), as TRL sums the whole [B, T] ratio tensor).
  var phi = vec2f(0.0);
  if (kind == KIND_VESPO) {
    var lw = acc[5];
    if (token_rho) {
      lw = df_add(lw, df_add(acc[6], df_mul(df(f32(T) - len), log_rho(vec2f(0.0)))));
    } else if (has(CORRECT)) {
      lw = df_add(lw, log_rho(acc[2]));
    }
    lw = df_clamp(lw, LOG_1E8, df(20.0));
    let pos = a.x >= 0.0;
    let kk = select(vec2f(params.vk_neg_hi, params.vk_neg_lo), vec2f(params.vk_pos_hi, params.vk_pos_lo), pos);
    let lam = df_max(select(vec2f(params.vl_neg_hi, params.vl_neg_lo), vec2f(params.vl_pos_hi, params.vl_pos_lo), pos), df(1e-4));
    let log_phi = df_sub(df_add(lam, df_mul(kk, lw)), df_mul(lam, df_exp(lw)));
    phi = select(df_exp(log_phi), vec2f(0.0), log_phi.x < -80.0);
  }
  let cispo_max = vec2f(params.cispo_max_hi, params.cispo_max_lo);
  let seq_cispo_high = select(0.0, 1.0, df_lt(cispo_max, s) && a.x > 0.0);
  workgroupBarrier();

  let beta = vec2f(params.beta_hi, params.beta_lo);
  var loss = vec2f(0.0);
  var kl = vec2f(0.0);
  var low = 0.0;
  var high = 0.0;
  var gap = vec2f(0.0);
  var gap_max = vec2f(0.0);
  var rho_acc = vec2f(0.0);
  var rho_min = df(BIG);
  var rho_max = df(-BIG);
  var ent_sum = vec2f(0.0);
  var ent_cnt = 0.0;
  for (var t = lid; t < T; t += WG) {
    let k = i * T + t;
    if (mask[k] == 0.0) {
      gpair[k] = vec2f(0.0);
      continue;
    }
    let l = plane(0u, k);
    let o = old_at(k, l);
    let keep = ent_keep(k);
    if (keep) {
      ent_sum = df_add(ent_sum, entropy_at(k));
      ent_cnt += 1.0;
    }
    var rho = df(1.0);
    if (has(CORRECT)) {
      let d = df_sub(o, plane(3u, k));
      let g = df_abs(d);
      gap = df_add(gap, g);
      gap_max = df_max(gap_max, g);
      rho = select(seq_rho, correct(df_exp(d)), token_rho);
      rho_acc = df_add(rho_acc, rho);
      rho_min = df_min(rho_min, rho);
      rho_max = df_max(rho_max, rho);
    }
    // The detached factors of this token's policy loss.
    var factor = df(select(0.0, m_opm, keep));
    if (kind != KIND_VESPO) {
      factor = df_mul(factor, rho);
    }
    var lt: vec2f;
    var dl: vec2f;
    if (kind == KIND_CISPO || kind == KIND_VESPO) {
      var w = phi;
      if (kind == KIND_CISPO) {
        var c = s;
        if (!has(SEQ_LEVEL)) {
          c = df_exp(df_sub(l, o));
          high += select(0.0, 1.0, df_lt(cispo_max, c) && a.x > 0.0);
        }
        w = df_min(c, cispo_max);
      }
      let wa = df_mul(w, a);
      lt = -df_mul(df_mul(wa, l), factor);
      dl = -df_mul(wa, factor);
    } else if (has(SEQ_LEVEL)) {
      lt = df_mul(seq_sur.loss, factor);
      dl = df_div(df_mul(df_mul(f_total, seq_sur.dc), s), len1);
    } else {
      let r = df_exp(df_sub(l, o));
      let sur = surrogate(r, a);
      lt = df_mul(sur.loss, factor);
      dl = df_mul(df_mul(factor, sur.dc), r);
      low += sur.low;
      high += sur.high;
    }
    if (has(USE_KL)) {
      let x = df_sub(plane(2u, k), l);
      let k3 = df_k3(x);
      kl = df_add(kl, k3);
      lt = df_add(lt, df_mul(beta, k3));
      // ∂k3/∂ℓ = 1 - exp(x) = -expm1(x)
      dl = df_sub(dl, df_mul(beta, df_add(k3, x)));
    }
    loss = df_add(loss, lt);
    gpair[k] = dl;
  }
  acc[lid * NR] = loss;
  acc[lid * NR + 1u] = kl;
  acc[lid * NR + 2u] = df(low);
  acc[lid * NR + 3u] = df(high);
  acc[lid * NR + 4u] = gap;
  acc[lid * NR + 5u] = gap_max;
  acc[lid * NR + 6u] = rho_acc;
  acc[lid * NR + 7u] = rho_min;
  acc[lid * NR + 8u] = rho_max;
  acc[lid * NR + 9u] = ent_sum;
  acc[lid * NR + 10u] = df(ent_cnt);
  wg_reduce(lid, 11u, 1u << 7u, (1u << 5u) | (1u << 8u));
  if (lid == 0u) {
    let base = i * NS;
    let seq_level = has(SEQ_LEVEL);
    let seq_high = select(seq_sur.high, seq_cispo_high, kind == KIND_CISPO);
    seq[base + S_LEN] = df(len);
    seq[base + S_LOSS] = acc[0];
    seq[base + S_KL] = acc[1];
    seq[base + S_LOW] = select(acc[2], df(seq_sur.low), seq_level);
    seq[base + S_HIGH] = select(acc[3], df(seq_high), seq_level);
    seq[base + S_GAP] = acc[4];
    seq[base + S_GAP_MAX] = acc[5];
    let seq_mode = has(CORRECT) && !token_rho;
    seq[base + S_RHO] = select(acc[6], seq_rho, seq_mode);
    seq[base + S_RHO_MIN] = select(acc[7], seq_rho, seq_mode);
    seq[base + S_RHO_MAX] = select(acc[8], seq_rho, seq_mode);
    seq[base + S_ENT_SUM] = acc[9];
    seq[base + S_ENT_CNT] = acc[10];
    seq[base + S_DROPPED] = df(1.0 - m_opm);
    seq[base + S_PHI] = phi;
  }
}

// ---------------------------------------------------------------------------------------------
// Batch totals (one workgroup): token count, the aggregation weight of each sequence, the loss
// Σ_i w_i·Σ_t m·L, the entropy bonus, and TRL's metrics.

@compute @workgroup_size(WG)
fn finalize(@builtin(local_invocation_index) lid: u32) {
  let B = params.B;
  let seq_level = has(SEQ_LEVEL);
  let seq_rho = has(CORRECT_SEQ);
  var v: array<vec2f, 16>;
  for (var k = 0u; k < 16u; k++) {
    v[k] = vec2f(0.0);
  }
  v[5] = df(-BIG);   // gap max
  v[7] = df(BIG);    // rho min
  v[8] = df(-BIG);   // rho max
  v[9] = df(BIG);    // low_min
  v[10] = df(-BIG);  // high_max
  for (var i = lid; i < B; i += WG) {
    let base = i * NS;
    let n = seq[base + S_LEN];
    v[0] = df_add(v[0], n);
    v[1] = df_add(v[1], seq[base + S_KL]);
    v[2] = df_add(v[2], seq[base + S_LOW]);
    v[3] = df_add(v[3], seq[base + S_HIGH]);
    v[4] = df_add(v[4], seq[base + S_GAP]);
    if (n.x > 0.0) {
      v[5] = df_max(v[5], seq[base + S_GAP_MAX]);
    }
    v[6] = df_add(v[6], seq[base + S_RHO]);
    if (n.x > 0.0 || seq_rho) {
      v[7] = df_min(v[7], seq[base + S_RHO_MIN]);
      v[8] = df_max(v[8], seq[base + S_RHO_MAX]);
    }
    // Per-sequence clip fractions (TRL's nanmin/nanmax skip empty sequences at token level).
    if (seq_level || n.x > 0.0) {
      let lo = select(df_div(seq[base + S_LOW], n), seq[base + S_LOW], seq_level);
      let hi = select(df_div(seq[base + S_HIGH], n), seq[base + S_HIGH], seq_level);
      v[9] = df_min(v[9], lo);
      v[10] = df_max(v[10], hi);
      v[11] = df_add(v[11], df(1.0));
    }
    v[12] = df_add(v[12], seq[base + S_ENT_SUM]);
    v[13] = df_add(v[13], seq[base + S_ENT_CNT]);
    v[14] = df_add(v[14], seq[base + S_DROPPED]);
    v[15] = df_add(v[15], seq[base + S_PHI]);
  }
  for (var k = 0u; k < 16u; k++) {
    acc[lid * NR + k] = v[k];
  }
  wg_reduce(lid, 16u, (1u << 7u) | (1u << 9u), (1u << 5u) | (1u << 8u) | (1u << 10u));
  var r: array<vec2f, 16>;
  for (var k = 0u; k < 16u; k++) {
    r[k] = acc[k];
  }
  workgroupBarrier();

  let tokens = r[0];
  let tokens1 = df(max(tokens.x, 1.0));
  let norm = vec2f(params.norm_hi, params.norm_lo);
  var loss = vec2f(0.0);
  for (var i = lid; i < B; i += WG) {
    let base = i * NS;
    var f = df(1.0);
    if (params.norm_mode == NORM_PER_SEQ) {
      f = df(max(seq[base + S_LEN].x, 1.0));
    } else if (params.norm_mode == NORM_TOKENS) {
      f = tokens1;
    }
    let w = df_div(df(1.0), df_mul(norm, f));
    seq[base + S_WEIGHT] = w;
    loss = df_add(loss, df_mul(w, seq[base + S_LOSS]));
  }
  acc[lid * NR] = loss;
  wg_reduce(lid, 1u, 0u, 0u);

  if (lid == 0u) {
    // The entropy bonus -coef·Σ H / den: den the mean's count times ga, or the dapo normaliser.
    let ent_cnt1 = df(max(r[13].x, 1.0));
    var den = df_mul(ent_cnt1, vec2f(params.ga_hi, params.ga_lo));
    if (!has(ENT_MEAN)) {
      den = select(norm, df_mul(norm, tokens1), params.norm_mode == NORM_TOKENS);
    }
    if (has(ENT_DEN)) {
      den = vec2f(params.ent_den_hi, params.ent_den_lo);
    }
    var total = acc[0];
    if (has(ENT_BONUS)) {
      total = df_sub(total, df_div(df_mul(vec2f(params.ent_coef_hi, params.ent_coef_lo), r[12]), den));
    }
    out[O_LOSS] = total;
    out[O_POLICY_LOSS] = acc[0];
    out[O_ENT_DEN] = den;
    out[O_ENT_MEAN] = df_div(r[12], ent_cnt1);
    out[O_ENT_CNT] = r[13];
    out[O_KL] = df_div(r[1], tokens1);
    let count = select(tokens1, df(f32(B)), seq_level);
    let kind = params.loss_kind;
    out[O_LOW_MEAN] = df_div(r[2], count);
    out[O_HIGH_MEAN] = df_div(r[3], count);
    out[O_REGION_MEAN] = df_div(df_add(r[2], r[3]), count);
    out[O_LOW_MIN] = select(vec2f(0.0), r[9], r[11].x > 0.0);
    out[O_HIGH_MAX] = select(vec2f(0.0), r[10], r[11].x > 0.0);
    out[O_CLIP_SEQS] = r[11];
    out[O_CISPO_CLIP] = select(vec2f(0.0), df_div(r[3], count), kind == KIND_CISPO);
    out[O_PHI_MEAN] = df_div(r[15], df(f32(B)));
    out[O_DROPPED] = df_div(r[14], df(f32(B)));
    // Correction diagnostics; 0 when no token is active (TRL logs 0 for empty selections).
    let any = tokens.x > 0.0;
    out[O_GAP_MEAN] = df_div(r[4], tokens1);
    out[O_GAP_MAX] = select(vec2f(0.0), r[5], any);
    let items = select(tokens1, df(f32(B)), seq_rho);
    let any_rho = any || seq_rho;
    out[O_RHO_MIN] = select(vec2f(0.0), r[7], any_rho);
    out[O_RHO_MEAN] = df_div(r[6], items);
    out[O_RHO_MAX] = select(vec2f(0.0), r[8], any_rho);
    out[O_TOKENS] = tokens;
  }
}

// ---------------------------------------------------------------------------------------------
// dLoss/dℓ = w_i · (per-token derivative of seq_pass): df64 in gpair, and its f32 rounding in
// grad for the model's backward; dLoss/dH = -coef / den on the bonus's tokens (f32, grad_ent).
// Grid as src/gpu/grid.ts: flat id = wid.x + wid.y * nwg.x.

@compute @workgroup_size(WG)
fn scale_grad(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let k = (wid.x + wid.y * nwg.x) * WG + lid;
  if (k >= params.B * params.T) {
    return;
  }
  let g = df_mul(gpair[k], seq[(k / params.T) * NS + S_WEIGHT]);
  gpair[k] = g;
  grad[k] = g.x;
  var ge = 0.0;
  if (has(ENT_BONUS) && mask[k] != 0.0 && ent_keep(k)) {
    let d = -df_div(vec2f(params.ent_coef_hi, params.ent_coef_lo), out[O_ENT_DEN]);
    ge = d.x + d.y;
  }
  grad_ent[k] = ge;
}
