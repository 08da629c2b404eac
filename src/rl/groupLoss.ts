// The loss of one group (G completions of one prompt) on the GPU, from the training forward's
// log-probs and entropies and the CPU-side old / reference / sampling log-probs: advantages (from
// rewards, or given), the loss and its gradients dLoss/dlogp and dLoss/dentropy (the entropy
// bonus), ready for Policy.backward.
import type { Gpu, Tensor } from '../gpu';
import { PLANE, RlLoss, pairsF64, splitF64, type RlLossBuffers, type RlLossResult } from '../ops/rlLoss';
import type { ResolvedLossConfig } from './lossConfig';
import type { TrainingForward } from './policy';

export interface GroupLossArgs {
  fwd: TrainingForward;
  /** [G·maxLen] loss mask (completion tokens, less truncated completions when so configured). */
  mask: Float32Array;
  /** [G·maxLen] each, or null: on-policy (old = current, detached), no KL term, no rollout correction. */
  old: ArrayLike<number> | null;
  ref: ArrayLike<number> | null;
  sampling: ArrayLike<number> | null;
  /** Rewards of the G completions (advantages computed here), or the advantages themselves. */
  scores: { rewards: readonly number[] } | { advantages: readonly number[] };
  config: ResolvedLossConfig;
  /** The entropy bonus's coefficient now (adaptive control); default config.entropy_coef. */
  entropyCoef?: number;
  /** The entropy bonus's normaliser over the whole micro-batch (RlLoss LossOptions). */
  entropyDenominator?: number;
}

export interface GroupLoss {
  /** Read back once the loss has run: queued at once, awaited by the caller after it has recorded
   * the backward, so that the GPU does not wait on the host between the two. */
  result: Promise<RlLossResult>;
  /**
   * `grad` and `gradEntropy` are the f32 [G, maxLen] gradients for Policy.backward (gradEntropy is
   * all zeros without the entropy bonus); release with RlLoss.release.
   */
  buffers: RlLossBuffers;
}

/** Whether the loss differentiates the entropies (the entropy bonus), so the backward needs gradEntropy. */
export function hasEntropyBonus(cfg: ResolvedLossConfig): boolean {
  return cfg.entropy_coef !== 0 || cfg.use_adaptive_entropy;
}

export async function groupLoss(gpu: Gpu, rl: RlLoss, a: GroupLossArgs): Promise<GroupLoss> {
  const G = a.fwd.logps.shape[0];
  const T = a.fwd.maxLen;
  const n = G * T;
  const b = RlLoss.allocate(gpu, G, T);
  try {
    // Old, reference and sampling planes from the CPU (df64 pairs); log-probs and entropies are copied on the GPU.
    const planes = new Float32Array(b.planes.numel);
    const put = (p: number, v: ArrayLike<number>) => {
      if (v.length !== n) throw new Error(`groupLoss: a log-prob plane has ${v.length} values, expected ${n} (${G} x ${T})`);
      for (let k = 0; k < n; k++) [planes[2 * p * n + k], planes[(2 * p + 1) * n + k]] = splitF64(v[k]);
    };
    if (a.old) put(PLANE.old, a.old);
    if (a.ref) put(PLANE.ref, a.ref);
    if (a.sampling) put(PLANE.sampling, a.sampling);
    gpu.write(b.planes, planes);
    gpu.write(b.mask, a.mask);
    const rec = gpu.recorder('group loss');
    if ('rewards' in a.scores) {
      gpu.write(b.rewards, pairsF64(a.scores.rewards));
      rl.advantages(rec, b, a.config.num_generations, a.config.scale_rewards);
    } else gpu.write(b.advantages, pairsF64(a.scores.advantages));
    rec.copy(a.fwd.logps as Tensor, b.planes, n * 4, 0, 2 * PLANE.logps * n * 4);
    rec.copy(a.fwd.entropy as Tensor, b.planes, n * 4, 0, 2 * PLANE.entropy * n * 4);
    rl.loss(rec, b, a.config, { old: a.old !== null, ref: a.ref !== null, sampling: a.sampling !== null, entropy: true }, { entropyCoef: a.entropyCoef, entropyDenominator: a.entropyDenominator });
    await rec.submit();
    const result = RlLoss.read(gpu, b);
    result.catch(() => undefined); // a caller that fails before awaiting it throws its own error
    return { result, buffers: b };
  } catch (e) {
    RlLoss.release(b);
    throw e;
  }
}

/**
 * TRL's group advantages of a generation batch, on the GPU (df64), for either
 * multi_objective_aggregation: 'sum_then_normalize' normalises the weighted totals per group (as
 * scale_rewards says); 'normalize_then_sum' (GDPO) normalises each term per group (unbiased std,
 * + 1e-4), sums them with their weights, and normalises the sum over the whole batch.
 * `values[i][k]` is term k of completion i (NaN: missing); groups are G consecutive completions.
 */
export async function batchAdvantages(
  gpu: Gpu,
  rl: RlLoss,
  values: readonly (readonly number[])[],
  weights: readonly number[],
  cfg: Pick<ResolvedLossConfig, 'num_generations' | 'scale_rewards' | 'multi_objective_aggregation'>,
): Promise<number[]> {
  const B = values.length;
  const b = RlLoss.allocate(gpu, B, 1);
  const run = async (rewards: readonly number[], G: number, scale: ResolvedLossConfig['scale_rewards']): Promise<number[]> => {
    gpu.write(b.rewards, pairsF64(rewards));
    const rec = gpu.recorder('advantages');
    rl.advantages(rec, b, G, scale);
    await rec.submit();
    const pairs = await gpu.readF32(b.advantages);
    return Array.from({ length: B }, (_, i) => pairs[2 * i] + pairs[2 * i + 1]);
  };
  const total = (row: readonly number[]) => (row.every(Number.isNaN) ? NaN : row.reduce((s, v, k) => s + (Number.isNaN(v) ? 0 : weights[k] * v), 0));
  try {
    if (cfg.multi_objective_aggregation === 'sum_then_normalize') return await run(values.map(total), cfg.num_generations, cfg.scale_rewards);
    // Missing values get advantage 0 from the kernel, which the weighted sum then skips (TRL's nansum).
    const sum = new Float64Array(B);
    for (let k = 0; k < weights.length; k++) {
      const a = await run(values.map((row) => row[k]), cfg.num_generations, 'group');
      a.forEach((v, i) => (sum[i] += weights[k] * v));
    }
    const unscorable = values.map((row) => row.every(Number.isNaN));
    return await run(Array.from(sum, (v, i) => (unscorable[i] ? NaN : v)), B, 'group');
  } finally {
    RlLoss.release(b);
  }
}
