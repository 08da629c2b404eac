// One group's loss and backward in micro-batches of whole sequences, so that a training forward
// never holds more than about `tokenBudget` packed rows of saved activations (the per-layer inputs
// and the backward's workspaces grow with the rows: ~0.5 MiB a row for the 2B).
//
// The loss must stay that of the whole group: advantages, the normalisations (grpo, bnpo, dr_grpo,
// dapo) and the mask are group-wide, and the sequence-level ratio needs one sequence's sum only.
// So dLoss/dlogp is computed once over the group, from log-probs gathered by no-grad forwards of
// each micro-batch; then each micro-batch runs its training forward and the backward of its rows
// of that gradient. The LoRA gradients add up across micro-batches. The price is one extra
// no-grad forward over the group, paid only when the group is over the budget.
import type { Gpu, Tensor } from '../gpu';
import { RlLoss, type RlLossBuffers, type RlLossResult } from '../ops/rlLoss';
import { groupLoss, hasEntropyBonus, type GroupLossArgs } from './groupLoss';
import type { Policy, SequenceBatch } from './policy';

/**
 * Packed rows a training forward holds by default. The prompt is packed once before its
 * completions (src/model/train.ts), so the default config's group, 512 + 8 x 256 = 2,560 rows,
 * takes one forward.
 */
export const DEFAULT_MICRO_BATCH_TOKENS = 4096;

export interface GroupStepArgs {
  batch: SequenceBatch;
  temperature: number;
  /** groupLoss's inputs; every [G·T] array uses T = the longest completion (at least 1). */
  loss: Omit<GroupLossArgs, 'fwd'>;
  /** Most packed rows (the prompt once, then completion tokens) per training forward; a longer completion goes alone. */
  tokenBudget: number;
  /** Recompute layers in the backward (EngineConfig.gradient_checkpointing; default true). */
  gradientCheckpointing?: boolean;
  /** lora_dropout masks of this group's forwards (ForwardOptions.dropout): chunks' no-grad and training forwards alike. */
  dropout?: { seed: number; step: number };
}

export interface GroupStepResult {
  result: RlLossResult;
  /** [G·T] log-probs and entropies of the current policy, for metrics. */
  logps: Float32Array;
  entropy: Float32Array;
}

/**
 * Consecutive [start, end) ranges of sequences whose rows add up to at most `budget` (a longer
 * sequence goes alone), as few as the budget allows and as even as they can be: the smallest cap
 * that needs no more chunks than the budget does. Even chunks reuse each other's pooled buffers;
 * a 5 + 3 split of 8 sequences would leave the first chunk's size classes cached beside the second's.
 */
export function sequenceChunks(rows: readonly number[], budget: number): [number, number][] {
  if (!(budget >= 1)) throw new RangeError(`micro-batch token budget must be ≥ 1, got ${budget}`);
  const greedy = (cap: number) => {
    const chunks: [number, number][] = [];
    let start = 0;
    let sum = 0;
    rows.forEach((n, i) => {
      if (i > start && sum + n > cap) {
        chunks.push([start, i]);
        start = i;
        sum = 0;
      }
      sum += n;
    });
    if (rows.length > start) chunks.push([start, rows.length]);
    return chunks;
  };
  const fewest = greedy(budget);
  const total = rows.reduce((a, b) => a + b, 0);
  if (fewest.length <= 1 || !Number.isFinite(budget)) return fewest;
  let [lo, hi] = [Math.ceil(total / fewest.length), budget];
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (greedy(mid).length <= fewest.length) hi = mid;
    else lo = mid + 1;
  }
  return greedy(lo);
}

/**
 * [G, T] log-probs (T the longest completion) of a no-grad forward of the group (old or reference
 * log-probs), in chunks of whole sequences where the group is over the rows the device holds.
 */
export async function scoreLogps(gpu: Gpu, policy: Policy, batch: SequenceBatch, opts: { temperature: number; lora: boolean }): Promise<Float32Array> {
  const lengths = batch.completions.map((c) => c.length);
  const T = Math.max(1, ...lengths);
  const chunks = sequenceChunks(lengths, Math.max(1, (policy.maxTrainingRows ?? Infinity) - batch.prompt.inputIds.length));
  if (chunks.length === 1) return gpu.readF32((await policy.forward(batch, { ...opts, train: false })).logps);
  const out = new Float32Array(lengths.length * T);
  for (const [g0, g1] of chunks) {
    const fwd = await policy.forward({ prompt: batch.prompt, completions: batch.completions.slice(g0, g1) }, { ...opts, train: false });
    const lp = await gpu.readF32(fwd.logps);
    for (let i = 0; i < g1 - g0; i++) out.set(lp.subarray(i * fwd.maxLen, (i + 1) * fwd.maxLen), (g0 + i) * T);
  }
  return out;
}

/** Training forward(s), the group's loss, backward(s) into the adapters' gradients. */
export async function groupStep(gpu: Gpu, policy: Policy, rl: RlLoss, a: GroupStepArgs): Promise<GroupStepResult> {
  const { batch, temperature, gradientCheckpointing, dropout } = a;
  const G = batch.completions.length;
  const T = Math.max(1, ...batch.completions.map((c) => c.length));
  const P = batch.prompt.inputIds.length;
  // Each forward packs the prompt once, then its completions.
  // The budget, and what the device's storage bindings hold: a larger group is split, not refused.
  const budget = Math.min(a.tokenBudget, policy.maxTrainingRows ?? Infinity);
  const chunks = sequenceChunks(batch.completions.map((c) => c.length), Math.max(1, budget - P));
  const sub = ([g0, g1]: [number, number]): SequenceBatch => ({ prompt: batch.prompt, completions: batch.completions.slice(g0, g1) });

  if (chunks.length === 1) {
    const fwd = await policy.forward(batch, { temperature, lora: true, train: true, gradientCheckpointing, dropout });
    const loss = await groupLoss(gpu, rl, { ...a.loss, fwd });
    const { buffers } = loss;
    try {
      // The readbacks are queued now, before the backward; the backward is recorded while they map
      // (awaiting them first left the GPU idle until the CPU recorded the backward's first layer).
      const reads = Promise.all([gpu.readF32(fwd.logps), gpu.readF32(fwd.entropy)]);
      reads.catch(() => undefined); // a failing backward throws first; this one is then not left unhandled
      await policy.backward(buffers.grad, hasEntropyBonus(a.loss.config) ? buffers.gradEntropy : undefined);
      const [logps, entropy] = await reads;
      return { result: await loss.result, logps, entropy };
    } finally {
      RlLoss.release(buffers);
    }
  }

  // Rows [g0, g1) of a [G, T] tensor from (or to) a [g1 - g0, width] one, width ≤ T.
  const copyRows = (src: Tensor, dst: Tensor, g0: number, rows: number, width: number, toGroup: boolean) => {
    const rec = gpu.recorder('micro-batch rows');
    for (let i = 0; i < rows; i++) {
      if (toGroup) rec.copy(src, dst, 4 * width, 4 * i * width, 4 * (g0 + i) * T);
      else rec.copy(src, dst, 4 * width, 4 * (g0 + i) * T, 4 * i * width);
    }
    return rec.submit();
  };
  const logps = gpu.tensor([G, T], 'f32', 'micro-batch.logps');
  const entropy = gpu.tensor([G, T], 'f32', 'micro-batch.entropy');
  const mask = gpu.upload(a.loss.mask, [G, T], 'f32', 'micro-batch.mask');
  let buffers: RlLossBuffers | null = null;
  try {
    const rec = gpu.recorder('micro-batch clear');
    rec.clear(logps);
    rec.clear(entropy);
    await rec.submit();
    for (const c of chunks) {
      const fwd = await policy.forward(sub(c), { temperature, lora: true, train: false, dropout });
      await copyRows(fwd.logps, logps, c[0], c[1] - c[0], fwd.maxLen, true);
      await copyRows(fwd.entropy, entropy, c[0], c[1] - c[0], fwd.maxLen, true);
    }
    const loss = await groupLoss(gpu, rl, { ...a.loss, fwd: { logps, entropy, mask, maxLen: T } });
    buffers = loss.buffers;
    // Queued before the backwards, awaited after them (as above).
    const reads = Promise.all([gpu.readF32(logps), gpu.readF32(entropy)]);
    reads.catch(() => undefined);
    for (const c of chunks) {
      const fwd = await policy.forward(sub(c), { temperature, lora: true, train: true, gradientCheckpointing, dropout });
      const grad = gpu.tensor([c[1] - c[0], fwd.maxLen], 'f32', 'micro-batch.grad');
      const gradEntropy = hasEntropyBonus(a.loss.config) ? gpu.tensor([c[1] - c[0], fwd.maxLen], 'f32', 'micro-batch.grad_entropy') : null;
      try {
        await copyRows(buffers.grad, grad, c[0], c[1] - c[0], fwd.maxLen, false);
        if (gradEntropy) await copyRows(buffers.gradEntropy, gradEntropy, c[0], c[1] - c[0], fwd.maxLen, false);
        await policy.backward(grad, gradEntropy ?? undefined);
      } finally {
        grad.release();
        gradEntropy?.release();
      }
    }
    const [lp, ent] = await reads;
    return { result: await loss.result, logps: lp, entropy: ent };
  } finally {
    if (buffers) RlLoss.release(buffers);
    for (const t of [logps, entropy, mask]) t.release();
  }
}
