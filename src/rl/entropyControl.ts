// The entropy bonus's coefficient across optimizer steps, as TRL's GRPOTrainer keeps it: constant
// (`entropy_coef`), or Skywork-OR1's adaptive control (`use_adaptive_entropy`). Adaptive: the
// coefficient applies only while the previous step's mean entropy (over the policy loss's tokens)
// is at or below `entropy_target`, none on the first step; after each step it moves by
// `entropy_coef_delta` up (entropy at or below the target) or down, within [min, max].
import type { ResolvedLossConfig } from './lossConfig';

/** What a checkpoint keeps (`lastEntropy` null: no step measured yet). */
export interface EntropyControlState {
  coef: number;
  lastEntropy: number | null;
}

type Settings = Pick<ResolvedLossConfig, 'entropy_coef' | 'use_adaptive_entropy' | 'entropy_coef_min' | 'entropy_coef_max' | 'entropy_coef_delta' | 'entropy_target'>;

export class EntropyControl {
  private coef: number;
  private lastEntropy = Infinity;
  private sum = 0;
  private count = 0;

  constructor(private readonly s: Settings) {
    this.coef = s.entropy_coef;
  }

  /** Whether the loss carries the bonus at all (TRL: a non-zero coefficient or adaptive control). */
  get enabled(): boolean {
    return this.s.entropy_coef !== 0 || this.s.use_adaptive_entropy;
  }

  /** The coefficient the loss applies during the current step. */
  applied(): number {
    if (!this.s.use_adaptive_entropy) return this.coef;
    return this.lastEntropy <= this.s.entropy_target ? this.coef : 0;
  }

  /** The coefficient TRL logs as `entropy_coef` (after the step's update). */
  get value(): number {
    return this.coef;
  }

  /** Add a group's Σ entropy and token count over the bonus's tokens. */
  add(entropySum: number, tokens: number): void {
    this.sum += entropySum;
    this.count += tokens;
  }

  /** Forget the current step's measurements (the step is abandoned and redone). */
  discardStep(): void {
    this.sum = 0;
    this.count = 0;
  }

  /** At the optimizer step's end: the adaptive update from the step's mean entropy. */
  endStep(): void {
    if (this.s.use_adaptive_entropy) {
      const entropy = this.sum / Math.max(this.count, 1);
      this.coef =
        entropy <= this.s.entropy_target
          ? Math.min(this.coef + this.s.entropy_coef_delta, this.s.entropy_coef_max)
          : Math.max(this.coef - this.s.entropy_coef_delta, this.s.entropy_coef_min);
      this.lastEntropy = entropy;
    }
    this.sum = 0;
    this.count = 0;
  }

  save(): EntropyControlState {
    return { coef: this.coef, lastEntropy: Number.isFinite(this.lastEntropy) ? this.lastEntropy : null };
  }

  load(state: EntropyControlState): void {
    this.coef = state.coef;
    this.lastEntropy = state.lastEntropy ?? Infinity;
  }
}
