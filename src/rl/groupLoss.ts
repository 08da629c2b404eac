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
}

export interface GroupLoss {
  result: RlLossResult;
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
    rl.loss(rec, b, a.config, { old: a.old !== null, ref: a.ref !== null, sampling: a.sampling !== null, entropy: true }, { entropyCoef: a.entropyCoef });
    await rec.submit();
    return { result: await RlLoss.read(gpu, b), buffers: b };
  } catch (e) {
    RlLoss.release(b);
    throw e;
  }
}
