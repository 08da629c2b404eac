// The GSPO/GRPO loss configuration, with TRL's GRPOConfig names and defaults (spec/rl-loss.md).
// `resolveLossConfig` fills defaults and checks the values; `validateLossSetup` checks them
// against a batch: hard errors for what cannot be computed, warnings where TRL only warns.
import { findUnknownKey, isPlainObject } from './configKeys';

export type ImportanceSamplingLevel = 'token' | 'sequence';
export type LossType = 'grpo' | 'bnpo' | 'dr_grpo' | 'dapo';
export type ScaleRewards = 'group' | 'batch' | 'none';
export type RolloutCorrectionMode = 'token_truncate' | 'token_mask' | 'sequence_truncate' | 'sequence_mask';

export interface RolloutCorrection {
  /**
   * TRL `vllm_importance_sampling_mode` (field default 'sequence_mask', applied only with vLLM);
   * null here means no correction. ρ = exp(ℓ^old − ℓ^samp) per token, or exp(Σ_t) per sequence.
   */
  mode: RolloutCorrectionMode | null;
  /** TRL `vllm_importance_sampling_clip_max`, default 3.0; null = no upper bound. */
  clip_max: number | null;
  /** TRL `vllm_importance_sampling_clip_min`, default null (no lower bound). */
  clip_min: number | null;
}

export interface LossConfig {
  /** 'token' (GRPO, default) or 'sequence' (GSPO: length-normalised geometric mean of token ratios). */
  importance_sampling_level: ImportanceSamplingLevel;
  /** Aggregation; TRL's default is 'dapo'. */
  loss_type: LossType;
  /** Lower clip range ε_low, default 0.2. */
  epsilon: number;
  /** Upper clip range ε_high; null (default) means equal to `epsilon`. DAPO recommends 0.28. */
  epsilon_high: number | null;
  /** KL coefficient (k3 estimator against the reference policy), default 0.0: no reference model. */
  beta: number;
  /** Advantage normalisation: 'group' (default), 'batch' (std over the batch, mean per group), 'none'. */
  scale_rewards: ScaleRewards;
  /** Normaliser of `dr_grpo`, default 512. */
  max_completion_length: number;
  /** Completions per prompt G, default 8, at least 2; groups are consecutive sequences. */
  num_generations: number;
  rollout_correction: RolloutCorrection;
  /**
   * `dapo` only: masked tokens of the whole generation batch over all processes (TRL computes it);
   * null means the tokens under the mask of the batch given to the loss.
   */
  num_items_in_batch: number | null;
  /** Divides grpo/bnpo/dr_grpo losses (TRL scales for accumulation itself); dapo is not divided. Default 1. */
  gradient_accumulation_steps: number;
}

export const DEFAULT_LOSS_CONFIG: LossConfig = {
  importance_sampling_level: 'token',
  loss_type: 'dapo',
  epsilon: 0.2,
  epsilon_high: null,
  beta: 0,
  scale_rewards: 'group',
  max_completion_length: 512,
  num_generations: 8,
  rollout_correction: { mode: null, clip_max: 3.0, clip_min: null },
  num_items_in_batch: null,
  gradient_accumulation_steps: 1,
};

/** A complete configuration with `epsilon_high` resolved. */
export interface ResolvedLossConfig extends LossConfig {
  epsilon_high: number;
}

export class LossConfigError extends Error {
  constructor(message: string) {
    super(`loss config: ${message}`);
    this.name = 'LossConfigError';
  }
}

const LEVELS: readonly ImportanceSamplingLevel[] = ['token', 'sequence'];
const LOSS_TYPES: readonly LossType[] = ['grpo', 'bnpo', 'dr_grpo', 'dapo'];
const SCALES: readonly ScaleRewards[] = ['group', 'batch', 'none'];
const MODES: readonly RolloutCorrectionMode[] = ['token_truncate', 'token_mask', 'sequence_truncate', 'sequence_mask'];

function oneOf<T extends string>(name: string, v: unknown, allowed: readonly T[]): T {
  if (typeof v !== 'string' || !allowed.includes(v as T)) {
    throw new LossConfigError(`${name} must be one of ${allowed.join(', ')}; got ${JSON.stringify(v)}`);
  }
  return v as T;
}

function finite(name: string, v: unknown, { min = -Infinity, positive = false } = {}): number {
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new LossConfigError(`${name} must be a finite number; got ${JSON.stringify(v)}`);
  if (v < min || (positive && v <= 0)) throw new LossConfigError(`${name} must be ${positive ? '> 0' : `>= ${min}`}; got ${v}`);
  return v;
}

function integer(name: string, v: unknown, min: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) throw new LossConfigError(`${name} must be an integer >= ${min}; got ${JSON.stringify(v)}`);
  return v;
}

function nullable<T>(v: T | null | undefined, f: (v: T) => T): T | null {
  return v === null || v === undefined ? null : f(v);
}

/** What callers may give: any subset, the correction's fields included. */
export type LossConfigInput = Partial<Omit<LossConfig, 'rollout_correction'>> & { rollout_correction?: Partial<RolloutCorrection> | null };

/** Defaults filled in, every field checked; throws LossConfigError naming the field. */
export function resolveLossConfig(partial: LossConfigInput = {}): ResolvedLossConfig {
  if (!isPlainObject(partial)) throw new LossConfigError(`the config must be an object; got ${JSON.stringify(partial)}`);
  const unknown = findUnknownKey(partial, { ...DEFAULT_LOSS_CONFIG });
  if (unknown !== null) throw new LossConfigError(unknown);
  const c = { ...DEFAULT_LOSS_CONFIG, ...partial };
  const rc = { ...DEFAULT_LOSS_CONFIG.rollout_correction, ...(partial.rollout_correction ?? {}) };
  const epsilon = finite('epsilon', c.epsilon, { min: 0 });
  const mode = rc.mode === null || rc.mode === undefined ? null : oneOf('rollout_correction.mode', rc.mode, MODES);
  const clip_max = nullable(rc.clip_max, (v) => finite('rollout_correction.clip_max', v, { positive: true }));
  const clip_min = nullable(rc.clip_min, (v) => finite('rollout_correction.clip_min', v, { min: 0 }));
  if (clip_max !== null && clip_min !== null && clip_min > clip_max) {
    throw new LossConfigError(`rollout_correction.clip_min (${clip_min}) is above clip_max (${clip_max})`);
  }
  return {
    importance_sampling_level: oneOf('importance_sampling_level', c.importance_sampling_level, LEVELS),
    loss_type: oneOf('loss_type', c.loss_type, LOSS_TYPES),
    epsilon,
    epsilon_high: c.epsilon_high === null || c.epsilon_high === undefined ? epsilon : finite('epsilon_high', c.epsilon_high, { min: 0 }),
    beta: finite('beta', c.beta, { min: 0 }),
    scale_rewards: oneOf('scale_rewards', c.scale_rewards, SCALES),
    max_completion_length: integer('max_completion_length', c.max_completion_length, 1),
    num_generations: integer('num_generations', c.num_generations, 2),
    rollout_correction: { mode, clip_max, clip_min },
    num_items_in_batch: nullable(c.num_items_in_batch, (v) => finite('num_items_in_batch', v, { min: 0 })),
    gradient_accumulation_steps: integer('gradient_accumulation_steps', c.gradient_accumulation_steps, 1),
  };
}

export interface LossSetup {
  /** Sequences in the batch. */
  batch: number;
  /** Padded completion length. */
  tokens: number;
  hasOld: boolean;
  hasRef: boolean;
  hasSampling: boolean;
}

/**
 * Check a configuration against a batch. Throws LossConfigError for what cannot be computed;
 * returns warnings for combinations TRL accepts with a warning.
 */
export function validateLossSetup(cfg: ResolvedLossConfig, s: LossSetup): string[] {
  if (s.batch < 1 || s.tokens < 1) throw new LossConfigError(`empty batch (${s.batch} sequences of ${s.tokens} tokens)`);
  if (s.batch % cfg.num_generations !== 0) {
    throw new LossConfigError(`the batch of ${s.batch} sequences is not divisible by num_generations = ${cfg.num_generations}`);
  }
  if (cfg.beta > 0 && !s.hasRef) throw new LossConfigError(`beta = ${cfg.beta} needs ref_logps`);
  if (cfg.rollout_correction.mode !== null && !s.hasSampling) {
    throw new LossConfigError(`rollout_correction.mode = ${cfg.rollout_correction.mode} needs sampling_logps`);
  }
  const warnings: string[] = [];
  if (cfg.importance_sampling_level === 'sequence' && cfg.loss_type !== 'grpo') {
    warnings.push(
      `importance_sampling_level = 'sequence' with loss_type = '${cfg.loss_type}' sums per-token copies of each sequence's loss, ` +
        `weighting sequences by length; GSPO uses loss_type = 'grpo' (TRL warns the same)`,
    );
  }
  if (cfg.loss_type === 'dr_grpo' && s.tokens > cfg.max_completion_length) {
    warnings.push(`completions are padded to ${s.tokens} tokens, more than max_completion_length = ${cfg.max_completion_length}`);
  }
  if (cfg.rollout_correction.mode?.endsWith('_mask') && cfg.rollout_correction.clip_max === null && cfg.rollout_correction.clip_min === null) {
    warnings.push(`rollout_correction.mode = ${cfg.rollout_correction.mode} without clip_max or clip_min masks nothing`);
  }
  return warnings;
}
