// CPU reference of the GSPO/GRPO loss of spec/rl-loss.md, in f64, written straight from TRL's
// formulas (per-token loss tensor, then aggregation) so that it can check the GPU kernels and,
// through finite differences of `refLossValue`, its own analytic gradient.
import type { ResolvedLossConfig, ScaleRewards } from '../../src/rl/lossConfig';

export type Matrix = number[][];

export interface RefInputs {
  logps: Matrix;
  old: Matrix | null;
  ref: Matrix | null;
  sampling: Matrix | null;
  mask: Matrix;
  advantages: number[];
}

export interface RefMetrics {
  kl: number;
  'clip_ratio/low_mean': number;
  'clip_ratio/high_mean': number;
  'clip_ratio/region_mean': number;
  'clip_ratio/low_min': number;
  'clip_ratio/high_max': number;
  'sampling/sampling_logp_difference/mean': number;
  'sampling/sampling_logp_difference/max': number;
  'sampling/importance_sampling_ratio/min': number;
  'sampling/importance_sampling_ratio/mean': number;
  'sampling/importance_sampling_ratio/max': number;
  num_tokens: number;
}

/** TRL's unbiased nanstd/nanmean group advantages; NaN rewards (and undefined stds) give 0. */
export function refAdvantages(rewards: number[], G: number, scale: ScaleRewards): number[] {
  const stats = (xs: number[]) => {
    const v = xs.filter((x) => !Number.isNaN(x));
    const mean = v.reduce((a, b) => a + b, 0) / v.length;
    const sq = v.reduce((a, b) => a + (b - mean) ** 2, 0) / v.length;
    return { mean, std: v.length > 1 ? Math.sqrt((sq * v.length) / (v.length - 1)) : NaN };
  };
  const batchStd = stats(rewards).std;
  return rewards.map((r, i) => {
    const g = Math.floor(i / G);
    const group = stats(rewards.slice(g * G, g * G + G));
    const a = scale === 'none' ? r - group.mean : (r - group.mean) / ((scale === 'group' ? group.std : batchStd) + 1e-4);
    return Number.isNaN(a) ? 0 : a;
  });
}

function isRatios(x: RefInputs, cfg: ResolvedLossConfig, old: Matrix): Matrix | null {
  const { mode, clip_max, clip_min } = cfg.rollout_correction;
  if (!mode) return null;
  const d = old.map((row, i) => row.map((o, t) => (o - x.sampling![i][t]) * x.mask[i][t]));
  const seq = mode.startsWith('sequence');
  const raw = seq ? d.map((row) => row.map(() => Math.exp(row.reduce((a, b) => a + b, 0)))) : d.map((row) => row.map(Math.exp));
  const lo = clip_min ?? -Infinity;
  const hi = clip_max ?? Infinity;
  return raw.map((row) => row.map((r) => (mode.endsWith('truncate') ? Math.min(Math.max(r, lo), hi) : r < lo || r > hi ? 0 : r)));
}

/** The loss value alone (for finite differences): TRL's per-token loss and aggregation. */
export function refLossValue(x: RefInputs, cfg: ResolvedLossConfig): number {
  return refLoss(x, cfg).loss;
}

export function refLoss(x: RefInputs, cfg: ResolvedLossConfig): { loss: number; grad: Matrix; metrics: RefMetrics } {
  const B = x.logps.length;
  const old = x.old ?? x.logps;
  const lens = x.mask.map((row) => row.reduce((a, b) => a + b, 0));
  const N = lens.reduce((a, b) => a + b, 0);
  const seqLevel = cfg.importance_sampling_level === 'sequence';
  const lo = 1 - cfg.epsilon;
  const hi = 1 + cfg.epsilon_high;
  const rho = isRatios(x, cfg, old);
  const ga = cfg.gradient_accumulation_steps;
  // Weight of token (i,t)'s loss in the total (the aggregation of loss_type).
  const weight = (i: number): number => {
    switch (cfg.loss_type) {
      case 'grpo':
        return 1 / (B * Math.max(lens[i], 1) * ga);
      case 'bnpo':
        return 1 / (Math.max(N, 1) * ga);
      case 'dr_grpo':
        return 1 / (B * cfg.max_completion_length * ga);
      case 'dapo':
        return 1 / Math.max(cfg.num_items_in_batch ?? N, 1);
      default:
        throw new Error(`loss_type ${cfg.loss_type}: not mirrored here (test/fixtures/loss/trl-loss-vectors.json holds its vectors)`);
    }
  };
  let loss = 0;
  let klSum = 0;
  let low = 0;
  let high = 0;
  let lowMin = Infinity;
  let highMax = -Infinity;
  const grad = x.logps.map((row) => row.map(() => 0));
  for (let i = 0; i < B; i++) {
    const A = x.advantages[i];
    const w = weight(i);
    const surrogate = (c: number) => {
      const c2 = Math.min(Math.max(c, lo), hi);
      const u1 = c * A;
      const u2 = c2 * A;
      return { L: -Math.min(u1, u2), dLdc: u1 <= u2 ? -A : 0, low: c < lo && A < 0 ? 1 : 0, high: c > hi && A > 0 ? 1 : 0 };
    };
    const row = x.logps[i];
    let s = 0;
    let seqSur = surrogate(1);
    if (seqLevel) {
      const lr = row.reduce((a, l, t) => a + (l - old[i][t]) * x.mask[i][t], 0);
      s = Math.exp(lr / Math.max(lens[i], 1));
      seqSur = surrogate(s);
      low += seqSur.low;
      high += seqSur.high;
      lowMin = Math.min(lowMin, seqSur.low);
      highMax = Math.max(highMax, seqSur.high);
    }
    const rhoSum = row.reduce((a, _, t) => a + x.mask[i][t] * (rho ? rho[i][t] : 1), 0);
    let rowLow = 0;
    let rowHigh = 0;
    for (let t = 0; t < row.length; t++) {
      const m = x.mask[i][t];
      const r = rho ? rho[i][t] : 1;
      const tok = seqLevel ? seqSur : surrogate(Math.exp(row[t] - old[i][t]));
      let L = tok.L * r;
      let dKL = 0;
      if (cfg.beta !== 0) {
        const e = Math.exp(x.ref![i][t] - row[t]);
        const kl = e - (x.ref![i][t] - row[t]) - 1;
        L += cfg.beta * kl;
        klSum += m * kl;
        dKL = cfg.beta * (1 - e);
      }
      loss += w * m * L;
      const dSur = seqLevel ? (rhoSum * seqSur.dLdc * s) / Math.max(lens[i], 1) : r * tok.dLdc * Math.exp(row[t] - old[i][t]);
      grad[i][t] = w * m * (dSur + dKL);
      if (!seqLevel) {
        rowLow += m * tok.low;
        rowHigh += m * tok.high;
      }
    }
    if (!seqLevel) {
      low += rowLow;
      high += rowHigh;
      if (lens[i] > 0) {
        lowMin = Math.min(lowMin, rowLow / lens[i]);
        highMax = Math.max(highMax, rowHigh / lens[i]);
      }
    }
  }
  const count = seqLevel ? B : Math.max(N, 1);
  // Correction diagnostics: over active tokens, or one ratio per sequence in sequence modes.
  const gaps: number[] = [];
  const ratios: number[] = [];
  if (rho) {
    for (let i = 0; i < B; i++) {
      for (let t = 0; t < x.mask[i].length; t++) if (x.mask[i][t]) gaps.push(Math.abs(old[i][t] - x.sampling![i][t]));
      if (cfg.rollout_correction.mode!.startsWith('sequence')) ratios.push(rho[i][0]);
      else for (let t = 0; t < x.mask[i].length; t++) if (x.mask[i][t]) ratios.push(rho[i][t]);
    }
  }
  const mean = (v: number[]) => (v.length ? v.reduce((a, b) => a + b, 0) / v.length : 0);
  const ext = (v: number[], f: (...a: number[]) => number) => (v.length ? f(...v) : 0);
  return {
    loss,
    grad,
    metrics: {
      kl: klSum / Math.max(N, 1),
      'clip_ratio/low_mean': low / count,
      'clip_ratio/high_mean': high / count,
      'clip_ratio/region_mean': (low + high) / count,
      'clip_ratio/low_min': Number.isFinite(lowMin) ? lowMin : NaN,
      'clip_ratio/high_max': Number.isFinite(highMax) ? highMax : NaN,
      'sampling/sampling_logp_difference/mean': mean(gaps),
      'sampling/sampling_logp_difference/max': ext(gaps, Math.max),
      'sampling/importance_sampling_ratio/min': ext(ratios, Math.min),
      'sampling/importance_sampling_ratio/mean': mean(ratios),
      'sampling/importance_sampling_ratio/max': ext(ratios, Math.max),
      num_tokens: N,
    },
  };
}
