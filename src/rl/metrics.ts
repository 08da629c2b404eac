// Per-step metrics under the names TRL's GRPOTrainer logs, and the samples of the latest rollouts.
// Reward and completion statistics come from the generation batches sampled during the step; loss
// statistics add up over every group trained on in the step, weighted as TRL's global means are
// (tokens at token level, sequences at sequence level).
import type { SampleScore } from '../rewards/registry';
import { CLIPPED_LOSS_TYPES, type LossType, type ScaleRewards } from './lossConfig';

/** One prompt's G completions after scoring, as the trainer keeps them for a generation batch. */
export interface GroupRollout {
  promptId: string;
  /** The rendered prompt text (for samples and the reward context). */
  promptText: string;
  imageKeys: string[];
  answer: string;
  completions: {
    text: string;
    tokens: number[];
    terminated: boolean;
    samplingLogps: number[];
  }[];
  scores: SampleScore[];
  /** One per completion (f64 from the GPU's df64). */
  advantages: number[];
}

/**
 * One metrics record: TRL's names, plus `step`, and `warnings` when the step saw a collapse that
 * stays finite (a near-uniform policy, exploding adapter weights; src/rl/divergence.ts).
 */
export type StepMetrics = Record<string, number> & { warnings?: string[] };

/** A prompt with its completions, for the dashboard's "latest rollouts". */
export interface RolloutSample {
  step: number;
  /** The row's id (the page decodes that row's images to show them); absent in samples of older versions. */
  promptId?: string;
  prompt: string;
  imageKeys: string[];
  answer: string;
  completions: {
    text: string;
    reward: number;
    /** Each reward term's own (unweighted) value. */
    terms: Record<string, number>;
    advantage: number;
    length: number;
    truncated: boolean;
  }[];
}

function mean(xs: readonly number[]): number {
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN;
}

/** Unbiased (n−1) standard deviation, as torch.std and TRL's nanstd; NaN for fewer than 2 values. */
export function std(xs: readonly number[]): number {
  if (xs.length < 2) return NaN;
  const m = mean(xs);
  return Math.sqrt(xs.reduce((a, x) => a + (x - m) ** 2, 0) / (xs.length - 1));
}

/** torch.isclose(x, 0) with its default tolerances. */
const isZero = (x: number) => Math.abs(x) <= 1e-8;

/**
 * TRL's reward and completion metrics over the groups of the generation batches of one step:
 * rewards/<name>/mean and /std (each term's unweighted values), reward (mean of the weighted
 * sums), reward_std (mean of the group stds, or the batch std when scale_rewards = 'batch'),
 * frac_reward_zero_std, completions/{mean,min,max}_length, /clipped_ratio (truncated share) and
 * /{mean,min,max}_terminated_length (0 when none terminated).
 */
export function rolloutMetrics(groups: readonly GroupRollout[], scale: ScaleRewards): Record<string, number> {
  const m: Record<string, number> = {};
  if (groups.length === 0) return m;
  const totals = groups.flatMap((g) => g.scores.map((s) => s.total));
  const names = groups[0].scores[0]?.terms.map((t) => t.name) ?? [];
  names.forEach((name, k) => {
    const values = groups.flatMap((g) => g.scores.map((s) => s.terms[k].value));
    m[`rewards/${name}/mean`] = mean(values);
    m[`rewards/${name}/std`] = std(values);
  });
  m.reward = mean(totals);
  const groupStds = groups.map((g) => std(g.scores.map((s) => s.total)));
  // Per completion, as TRL repeats each group's std G times; groups are equal in size.
  const perCompletion = scale === 'batch' ? [std(totals)] : groupStds;
  m.reward_std = mean(perCompletion);
  m.frac_reward_zero_std = mean(perCompletion.map((s) => (isZero(s) ? 1 : 0)));

  const lengths = groups.flatMap((g) => g.completions.map((c) => c.tokens.length));
  const terminated = groups.flatMap((g) => g.completions.filter((c) => c.terminated).map((c) => c.tokens.length));
  m['completions/mean_length'] = mean(lengths);
  m['completions/min_length'] = Math.min(...lengths);
  m['completions/max_length'] = Math.max(...lengths);
  m['completions/clipped_ratio'] = 1 - terminated.length / lengths.length;
  m['completions/mean_terminated_length'] = terminated.length ? mean(terminated) : 0;
  m['completions/min_terminated_length'] = terminated.length ? Math.min(...terminated) : 0;
  m['completions/max_terminated_length'] = terminated.length ? Math.max(...terminated) : 0;
  return m;
}

/** What one group's loss evaluation contributes (RlLoss.read metrics, plus what the trainer measured). */
export interface GroupLossStats {
  loss: number;
  /** RlLoss metrics (OUT_SLOTS names). */
  metrics: Record<string, number>;
  /** Sequences in the group. */
  sequences: number;
  /** Σ entropy over the tokens under the loss mask. */
  entropySum: number;
  /** Σ and max of |ℓ_trainer − ℓ_sampler| over those tokens. */
  gapSum: number;
  gapMax: number;
}

/** Sums the loss statistics of every group of a step into TRL's global means. */
export class LossMetrics {
  private loss = 0;
  private tokens = 0;
  private sequences = 0;
  private kl = 0;
  private low = 0;
  private high = 0;
  private lowMin = Infinity;
  private highMax = -Infinity;
  private entropy = 0;
  private gap = 0;
  private gapMax = 0;
  private groups = 0;
  private policyLoss = 0;
  private cispo = 0;
  private phi = 0;
  private dropped = 0;

  /**
   * `what` says which of TRL's loss-type metrics the step logs: clip_ratio/* (clipped types),
   * cispo_clip_ratio, vespo/phi_seq_mean; policy_loss with the entropy bonus; and
   * off_policy_mask/masked_fraction (our name: TRL logs none) with the off-policy mask.
   */
  constructor(
    private readonly sequenceLevel: boolean,
    private readonly withKl: boolean,
    private readonly what: { lossType?: LossType; entropyBonus?: boolean; offPolicyMask?: boolean } = {},
  ) {}

  add(g: GroupLossStats): void {
    const n = g.metrics.num_tokens;
    // The kernel's clip means are over tokens (token level) or over all B sequences (sequence level).
    const weight = this.sequenceLevel ? g.sequences : n;
    this.groups++;
    this.loss += g.loss;
    this.tokens += n;
    this.sequences += g.sequences;
    this.kl += g.metrics.kl * n;
    this.low += g.metrics['clip_ratio/low_mean'] * weight;
    this.high += g.metrics['clip_ratio/high_mean'] * weight;
    if (!Number.isNaN(g.metrics['clip_ratio/low_min'])) this.lowMin = Math.min(this.lowMin, g.metrics['clip_ratio/low_min']);
    if (!Number.isNaN(g.metrics['clip_ratio/high_max'])) this.highMax = Math.max(this.highMax, g.metrics['clip_ratio/high_max']);
    this.entropy += g.entropySum;
    this.policyLoss += g.metrics.policy_loss ?? g.loss;
    this.cispo += (g.metrics.cispo_clip_ratio ?? 0) * weight;
    this.phi += (g.metrics['vespo/phi_seq_mean'] ?? 0) * g.sequences;
    this.dropped += (g.metrics['off_policy_mask/masked_fraction'] ?? 0) * g.sequences;
    this.gap += g.gapSum;
    this.gapMax = Math.max(this.gapMax, g.gapMax);
  }

  /**
   * loss, kl (when beta > 0), entropy, the loss type's metrics (see the constructor),
   * sampling/sampling_logp_difference/*, num_tokens trained.
   */
  finish(): Record<string, number> {
    if (this.groups === 0) return {};
    const tokens = Math.max(this.tokens, 1);
    const count = this.sequenceLevel ? Math.max(this.sequences, 1) : tokens;
    const m: Record<string, number> = { loss: this.loss };
    if (this.withKl) m.kl = this.kl / tokens;
    m.entropy = this.entropy / tokens;
    const lossType = this.what.lossType ?? 'dapo';
    if (CLIPPED_LOSS_TYPES.includes(lossType)) {
      m['clip_ratio/low_mean'] = this.low / count;
      m['clip_ratio/low_min'] = Number.isFinite(this.lowMin) ? this.lowMin : 0;
      m['clip_ratio/high_mean'] = this.high / count;
      m['clip_ratio/high_max'] = Number.isFinite(this.highMax) ? this.highMax : 0;
      m['clip_ratio/region_mean'] = (this.low + this.high) / count;
    } else if (lossType === 'cispo') {
      m.cispo_clip_ratio = this.cispo / count;
    } else if (lossType === 'vespo') {
      m['vespo/phi_seq_mean'] = this.phi / Math.max(this.sequences, 1);
    }
    if (this.what.entropyBonus) m.policy_loss = this.policyLoss;
    if (this.what.offPolicyMask) m['off_policy_mask/masked_fraction'] = this.dropped / Math.max(this.sequences, 1);
    m['sampling/sampling_logp_difference/mean'] = this.gap / tokens;
    m['sampling/sampling_logp_difference/max'] = this.gapMax;
    return m;
  }
}

/** The display form of a group's rollouts. */
export function rolloutSample(step: number, g: GroupRollout): RolloutSample {
  return {
    step,
    promptId: g.promptId,
    prompt: g.promptText,
    imageKeys: g.imageKeys,
    answer: g.answer,
    completions: g.completions.map((c, i) => ({
      text: c.text,
      reward: g.scores[i].total,
      terms: Object.fromEntries(g.scores[i].terms.map((t) => [t.name, t.value])),
      advantage: g.advantages[i],
      length: c.tokens.length,
      truncated: !c.terminated,
    })),
  };
}
