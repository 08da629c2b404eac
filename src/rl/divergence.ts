// Divergence and collapse: a non-finite loss, gradient or parameter stops the run (DivergenceError,
// naming the step and the tensor); a collapse that stays finite (a near-uniform policy, adapter
// weights far beyond their initial scale) is only warned about in the step's metrics.

export class DivergenceError extends Error {
  constructor(
    readonly step: number,
    readonly tensor: string,
    detail: string,
  ) {
    super(`training diverged at step ${step}: ${tensor} ${detail}; the last checkpoint saved before it stays current (lower the learning rate or set max_grad_norm)`);
    this.name = 'DivergenceError';
  }
}

/** Index of the first NaN or ±Infinity in `xs`, or -1. */
export function firstNonFinite(xs: ArrayLike<number>): number {
  for (let i = 0; i < xs.length; i++) if (!Number.isFinite(xs[i])) return i;
  return -1;
}

/** Throws a DivergenceError when `values` (one tensor, read back) holds a value that is not finite. */
export function assertFiniteTensor(step: number, name: string, values: ArrayLike<number>): void {
  const at = firstNonFinite(values);
  if (at >= 0) throw new DivergenceError(step, name, `holds ${values[at]} at element ${at} of ${values.length}`);
}

/** Mean token entropy at or above this share of ln(vocab) is a near-uniform policy. */
export const UNIFORM_ENTROPY_SHARE = 0.9;
/** Adapter values beyond this magnitude are far beyond any initialisation's scale (kaiming-uniform A, zero B). */
export const EXPLODING_WEIGHT = 1e3;

/** The warning for a step whose mean token entropy is near its maximum ln(vocab), or null. */
export function uniformPolicyWarning(entropy: number | undefined, vocabSize: number | undefined): string | null {
  if (entropy === undefined || vocabSize === undefined || vocabSize < 2) return null;
  const max = Math.log(vocabSize);
  if (!(entropy >= UNIFORM_ENTROPY_SHARE * max)) return null;
  return `mean token entropy ${entropy.toFixed(3)} is ${((100 * entropy) / max).toFixed(0)}% of its maximum ln(${vocabSize}) = ${max.toFixed(3)}: the policy is close to uniform (collapsed)`;
}

/** The warning for adapter tensors whose largest magnitude is beyond EXPLODING_WEIGHT, or null. */
export function explodingWeightsWarning(tensors: Iterable<[string, ArrayLike<number>]>): string | null {
  let worst = { name: '', value: 0 };
  for (const [name, xs] of tensors) {
    for (let i = 0; i < xs.length; i++) if (Math.abs(xs[i]) > Math.abs(worst.value)) worst = { name, value: xs[i] };
  }
  if (!(Math.abs(worst.value) > EXPLODING_WEIGHT)) return null;
  return `adapter weights are exploding: ${worst.name} reaches ${worst.value.toExponential(2)} (beyond ${EXPLODING_WEIGHT})`;
}
