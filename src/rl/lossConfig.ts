// The GSPO/GRPO loss configuration, with TRL's GRPOConfig names and defaults (spec/rl-loss.md).
// `resolveLossConfig` fills defaults and checks the values; `validateLossSetup` checks them
// against a batch: hard errors for what cannot be computed, warnings where TRL only warns.
import { findUnknownKey, isPlainObject } from './configKeys';

export type ImportanceSamplingLevel = 'token' | 'sequence';
export type LossType = 'grpo' | 'bnpo' | 'dr_grpo' | 'dapo' | 'cispo' | 'sapo' | 'luspo' | 'vespo';
export type MultiObjectiveAggregation = 'sum_then_normalize' | 'normalize_then_sum';
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
  /**
   * Surrogate and aggregation; TRL's default is 'dapo'. 'cispo' (-min(ratio, epsilon_high)·A·ℓ,
   * ratio detached; dapo's aggregation), 'sapo' (-σ(τ(ratio-1))·4/τ·A; grpo's), 'luspo' (the
   * clipped surrogate of a sequence times its length, averaged over sequences; needs
   * importance_sampling_level 'sequence'), 'vespo' (-φ(w)·A·ℓ with the Gamma weight φ of the
   * sequence ratio w, detached; dapo's aggregation).
   */
  loss_type: LossType;
  /** Lower clip range ε_low, default 0.2. */
  epsilon: number;
  /**
   * Upper clip range ε_high; null (default) means equal to `epsilon`. DAPO recommends 0.28. For
   * 'cispo' it is the cap of the ratio itself (ScaleRL's ε_max, recommended 5.0).
   */
  epsilon_high: number | null;
  /**
   * Two-sided clipping (INTELLECT-2): the unclipped ratio is capped at `delta` too; null (default,
   * TRL's) is off. TRL recommends a value above 1 + epsilon_high. Clipped loss types only.
   */
  delta: number | null;
  /** 'sapo' temperature τ for A > 0 (TRL default 1.0). */
  sapo_temperature_pos: number;
  /** 'sapo' temperature τ for A <= 0 (TRL default 1.05). */
  sapo_temperature_neg: number;
  /** 'vespo' φ(w) = e^λ·w^k·e^(-λw): k for A >= 0 (TRL default 2.0). */
  vespo_k_pos: number;
  /** 'vespo' λ for A >= 0 (TRL default 3.0). */
  vespo_lambda_pos: number;
  /** 'vespo' k for A < 0 (TRL default 3.0). */
  vespo_k_neg: number;
  /** 'vespo' λ for A < 0 (TRL default 2.0). */
  vespo_lambda_neg: number;
  /**
   * DeepSeek-V3.2's off-policy sequence mask: a sequence with A < 0 whose mean of
   * ℓ_sampling − ℓ (ℓ_old without sampling log-probs) is above this threshold leaves the policy
   * loss. null (default, TRL's) is off; TRL suggests e.g. 0.5.
   */
  off_policy_mask_threshold: number | null;
  /**
   * Keep in the policy loss only the tokens whose entropy is at least the (1 − ρ) quantile of the
   * batch's active tokens ("Beyond the 80/20 rule"; the paper uses 0.2). 1.0 (default, TRL's) keeps all.
   */
  top_entropy_quantile: number;
  /**
   * Entropy bonus: loss −= coef · mean entropy of the policy loss's tokens (TRL default 0.0: off).
   * With `use_adaptive_entropy`, the initial coefficient.
   */
  entropy_coef: number;
  /**
   * Skywork-OR1's adaptive entropy control (TRL default false): after each optimizer step the
   * coefficient moves by entropy_coef_delta toward more bonus when the step's entropy is at or below
   * entropy_target, less otherwise; it applies only while the last step's entropy is at or below the target.
   */
  use_adaptive_entropy: boolean;
  /** Lower bound of the adaptive coefficient (TRL default 0.0). */
  entropy_coef_min: number;
  /** Upper bound of the adaptive coefficient (TRL default 1.0). */
  entropy_coef_max: number;
  /** Step of the adaptive coefficient (TRL default 0.005). */
  entropy_coef_delta: number;
  /** Target mean entropy in nats of the adaptive control (TRL default 0.2). */
  entropy_target: number;
  /**
   * Several reward terms: 'sum_then_normalize' (default, TRL's) sums the weighted terms, then
   * normalises per group; 'normalize_then_sum' (GDPO) normalises each term per group, sums them
   * with their weights and normalises the sum over the batch.
   */
  multi_objective_aggregation: MultiObjectiveAggregation;
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
   * TRL's names for the rollout correction, accepted beside `rollout_correction` (give one or the
   * other). null (default) leaves `rollout_correction` in charge; set, the correction follows TRL:
   * on unless false (TRL default true), with the fields below at TRL's defaults where null.
   */
  vllm_importance_sampling_correction: boolean | null;
  /** TRL default 'sequence_mask' (used where null). */
  vllm_importance_sampling_mode: RolloutCorrectionMode | null;
  /** TRL default 3.0 (used where null). */
  vllm_importance_sampling_clip_max: number | null;
  /** TRL default null (no lower bound). */
  vllm_importance_sampling_clip_min: number | null;
  /** TRL's deprecated alias of vllm_importance_sampling_clip_max (default null). */
  vllm_importance_sampling_cap: number | null;
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
  delta: null,
  sapo_temperature_pos: 1.0,
  sapo_temperature_neg: 1.05,
  vespo_k_pos: 2.0,
  vespo_lambda_pos: 3.0,
  vespo_k_neg: 3.0,
  vespo_lambda_neg: 2.0,
  off_policy_mask_threshold: null,
  top_entropy_quantile: 1.0,
  entropy_coef: 0.0,
  use_adaptive_entropy: false,
  entropy_coef_min: 0.0,
  entropy_coef_max: 1.0,
  entropy_coef_delta: 0.005,
  entropy_target: 0.2,
  multi_objective_aggregation: 'sum_then_normalize',
  rollout_correction: { mode: null, clip_max: 3.0, clip_min: null },
  vllm_importance_sampling_correction: null,
  vllm_importance_sampling_mode: null,
  vllm_importance_sampling_clip_max: null,
  vllm_importance_sampling_clip_min: null,
  vllm_importance_sampling_cap: null,
  num_items_in_batch: null,
  gradient_accumulation_steps: 1,
};

/**
 * The loss fields a training config carries as they are (src/rl/config.ts spreads them into
 * TrainConfig, its defaults and resolveLossConfig's input); documented on LossConfig above.
 */
export const TRAIN_LOSS_FIELDS = [
  'delta',
  'sapo_temperature_pos',
  'sapo_temperature_neg',
  'vespo_k_pos',
  'vespo_lambda_pos',
  'vespo_k_neg',
  'vespo_lambda_neg',
  'off_policy_mask_threshold',
  'top_entropy_quantile',
  'entropy_coef',
  'use_adaptive_entropy',
  'entropy_coef_min',
  'entropy_coef_max',
  'entropy_coef_delta',
  'entropy_target',
  'multi_objective_aggregation',
  'vllm_importance_sampling_correction',
  'vllm_importance_sampling_mode',
  'vllm_importance_sampling_clip_max',
  'vllm_importance_sampling_clip_min',
  'vllm_importance_sampling_cap',
] as const satisfies readonly (keyof LossConfig)[];
export type TrainLossFields = Pick<LossConfig, (typeof TRAIN_LOSS_FIELDS)[number]>;

/** Those fields of `c` (defaults: `trainLossFields(DEFAULT_LOSS_CONFIG)`). */
export function trainLossFields(c: TrainLossFields): TrainLossFields {
  return Object.fromEntries(TRAIN_LOSS_FIELDS.map((k) => [k, c[k]])) as unknown as TrainLossFields;
}

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
export const LOSS_TYPES: readonly LossType[] = ['grpo', 'bnpo', 'dr_grpo', 'dapo', 'cispo', 'sapo', 'luspo', 'vespo'];
export const AGGREGATIONS: readonly MultiObjectiveAggregation[] = ['sum_then_normalize', 'normalize_then_sum'];
/** Loss types with TRL's clipped surrogate (and its clip_ratio/* metrics). */
export const CLIPPED_LOSS_TYPES: readonly LossType[] = ['grpo', 'bnpo', 'dr_grpo', 'dapo', 'luspo'];
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

/** TRL's vllm_importance_sampling_* names mapped onto `rollout_correction` (null: not used). */
function trlCorrection(c: Pick<LossConfig, `vllm_importance_sampling_${'correction' | 'mode' | 'clip_max' | 'clip_min' | 'cap'}`>): RolloutCorrection | null {
  const given = [c.vllm_importance_sampling_correction, c.vllm_importance_sampling_mode, c.vllm_importance_sampling_clip_max, c.vllm_importance_sampling_clip_min, c.vllm_importance_sampling_cap];
  if (given.every((v) => v === null || v === undefined)) return null;
  const on = c.vllm_importance_sampling_correction ?? true;
  if (typeof on !== 'boolean') throw new LossConfigError(`vllm_importance_sampling_correction must be true, false or null; got ${JSON.stringify(on)}`);
  const max = nullable(c.vllm_importance_sampling_clip_max, (v) => finite('vllm_importance_sampling_clip_max', v, { positive: true }));
  const cap = nullable(c.vllm_importance_sampling_cap, (v) => finite('vllm_importance_sampling_cap', v, { positive: true }));
  if (max !== null && cap !== null && max !== cap) {
    throw new LossConfigError(`vllm_importance_sampling_cap (${cap}, deprecated) disagrees with vllm_importance_sampling_clip_max (${max})`);
  }
  const mode = c.vllm_importance_sampling_mode === null || c.vllm_importance_sampling_mode === undefined ? 'sequence_mask' : oneOf('vllm_importance_sampling_mode', c.vllm_importance_sampling_mode, MODES);
  const clip_min = nullable(c.vllm_importance_sampling_clip_min, (v) => finite('vllm_importance_sampling_clip_min', v, { min: 0 }));
  return { mode: on ? mode : null, clip_max: cap ?? max ?? 3.0, clip_min };
}

/** The rollout correction a config asks for, given either way (TRL's names win when set; unchecked). */
export function effectiveRolloutCorrection(c: Pick<LossConfig, 'rollout_correction'> & Parameters<typeof trlCorrection>[0]): RolloutCorrection {
  return trlCorrection(c) ?? c.rollout_correction;
}

/** Defaults filled in, every field checked; throws LossConfigError naming the field. */
export function resolveLossConfig(partial: LossConfigInput = {}): ResolvedLossConfig {
  if (!isPlainObject(partial)) throw new LossConfigError(`the config must be an object; got ${JSON.stringify(partial)}`);
  const unknown = findUnknownKey(partial, { ...DEFAULT_LOSS_CONFIG });
  if (unknown !== null) throw new LossConfigError(unknown);
  const c = { ...DEFAULT_LOSS_CONFIG, ...partial };
  let rc = { ...DEFAULT_LOSS_CONFIG.rollout_correction, ...(partial.rollout_correction ?? {}) };
  const trl = trlCorrection(c);
  if (trl) {
    if (rc.mode !== null && rc.mode !== undefined) {
      throw new LossConfigError(`rollout_correction.mode = ${rc.mode} and vllm_importance_sampling_* are both given; give the correction one way`);
    }
    rc = trl;
  }
  const epsilon = finite('epsilon', c.epsilon, { min: 0 });
  const mode = rc.mode === null || rc.mode === undefined ? null : oneOf('rollout_correction.mode', rc.mode, MODES);
  const clip_max = nullable(rc.clip_max, (v) => finite('rollout_correction.clip_max', v, { positive: true }));
  const clip_min = nullable(rc.clip_min, (v) => finite('rollout_correction.clip_min', v, { min: 0 }));
  if (clip_max !== null && clip_min !== null && clip_min > clip_max) {
    throw new LossConfigError(`rollout_correction.clip_min (${clip_min}) is above clip_max (${clip_max})`);
  }
  if (mode?.endsWith('_truncate') && clip_max === null && clip_min === null) {
    throw new LossConfigError(`rollout_correction.mode = ${mode} needs clip_max or clip_min (TRL refuses it too)`);
  }
  const entropy_coef_min = finite('entropy_coef_min', c.entropy_coef_min);
  const entropy_coef_max = finite('entropy_coef_max', c.entropy_coef_max);
  if (entropy_coef_min > entropy_coef_max) throw new LossConfigError(`entropy_coef_min (${entropy_coef_min}) is above entropy_coef_max (${entropy_coef_max})`);
  const quantile = finite('top_entropy_quantile', c.top_entropy_quantile, { min: 0 });
  if (quantile > 1) throw new LossConfigError(`top_entropy_quantile must be in [0, 1]; got ${quantile}`);
  if (typeof c.use_adaptive_entropy !== 'boolean') throw new LossConfigError(`use_adaptive_entropy must be true or false; got ${JSON.stringify(c.use_adaptive_entropy)}`);
  return {
    importance_sampling_level: oneOf('importance_sampling_level', c.importance_sampling_level, LEVELS),
    loss_type: oneOf('loss_type', c.loss_type, LOSS_TYPES),
    epsilon,
    epsilon_high: c.epsilon_high === null || c.epsilon_high === undefined ? epsilon : finite('epsilon_high', c.epsilon_high, { min: 0 }),
    delta: nullable(c.delta, (v) => finite('delta', v, { positive: true })),
    sapo_temperature_pos: finite('sapo_temperature_pos', c.sapo_temperature_pos, { positive: true }),
    sapo_temperature_neg: finite('sapo_temperature_neg', c.sapo_temperature_neg, { positive: true }),
    vespo_k_pos: finite('vespo_k_pos', c.vespo_k_pos, { min: 0 }),
    vespo_lambda_pos: finite('vespo_lambda_pos', c.vespo_lambda_pos, { positive: true }),
    vespo_k_neg: finite('vespo_k_neg', c.vespo_k_neg, { min: 0 }),
    vespo_lambda_neg: finite('vespo_lambda_neg', c.vespo_lambda_neg, { positive: true }),
    off_policy_mask_threshold: nullable(c.off_policy_mask_threshold, (v) => finite('off_policy_mask_threshold', v)),
    top_entropy_quantile: quantile,
    entropy_coef: finite('entropy_coef', c.entropy_coef),
    use_adaptive_entropy: c.use_adaptive_entropy,
    entropy_coef_min,
    entropy_coef_max,
    entropy_coef_delta: finite('entropy_coef_delta', c.entropy_coef_delta, { min: 0 }),
    entropy_target: finite('entropy_target', c.entropy_target, { min: 0 }),
    multi_objective_aggregation: oneOf('multi_objective_aggregation', c.multi_objective_aggregation, AGGREGATIONS),
    beta: finite('beta', c.beta, { min: 0 }),
    scale_rewards: oneOf('scale_rewards', c.scale_rewards, SCALES),
    max_completion_length: integer('max_completion_length', c.max_completion_length, 1),
    num_generations: integer('num_generations', c.num_generations, 2),
    rollout_correction: { mode, clip_max, clip_min },
    vllm_importance_sampling_correction: c.vllm_importance_sampling_correction ?? null,
    vllm_importance_sampling_mode: c.vllm_importance_sampling_mode ?? null,
    vllm_importance_sampling_clip_max: c.vllm_importance_sampling_clip_max ?? null,
    vllm_importance_sampling_clip_min: c.vllm_importance_sampling_clip_min ?? null,
    vllm_importance_sampling_cap: c.vllm_importance_sampling_cap ?? null,
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
  if (cfg.loss_type === 'luspo') {
    // TRL's luspo averages a [B, T] loss over every position, padding included, once a per-token
    // factor enters; only the [B, 1] form is defined by the sequences alone.
    if (cfg.importance_sampling_level !== 'sequence') throw new LossConfigError(`loss_type = 'luspo' needs importance_sampling_level = 'sequence'`);
    const perToken = [
      cfg.beta !== 0 && `beta = ${cfg.beta}`,
      cfg.top_entropy_quantile < 1 && `top_entropy_quantile = ${cfg.top_entropy_quantile}`,
      cfg.rollout_correction.mode?.startsWith('token') && `rollout_correction.mode = ${cfg.rollout_correction.mode}`,
    ].filter(Boolean);
    if (perToken.length) throw new LossConfigError(`loss_type = 'luspo' with ${perToken.join(', ')} would weigh padding positions (TRL's [B, T] form); not supported`);
  }
  const warnings: string[] = [];
  if (cfg.delta !== null && !CLIPPED_LOSS_TYPES.includes(cfg.loss_type)) {
    warnings.push(`delta = ${cfg.delta} has no effect with loss_type = '${cfg.loss_type}' (TRL applies it to the clipped surrogate only)`);
  } else if (cfg.delta !== null && cfg.delta <= 1 + cfg.epsilon_high) {
    warnings.push(`delta = ${cfg.delta} is not above 1 + epsilon_high = ${1 + cfg.epsilon_high}, as TRL recommends`);
  }
  if (cfg.importance_sampling_level === 'sequence' && !['grpo', 'luspo', 'sapo', 'vespo'].includes(cfg.loss_type)) {
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
