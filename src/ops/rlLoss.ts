// The GSPO/GRPO loss on the GPU (shaders/rl_loss.wgsl): group advantages from rewards, then the
// loss, dLoss/dlogp and TRL's metrics, all in df64 (hi/lo f32 pairs; see the shader's header).
//
// Inputs travel as f32 planes, two per tensor (hi, lo): [10, B, T] in the order of PLANE (the
// log-probs, and the entropies for top_entropy_quantile and the entropy bonus). The CLI and tests split f64 values (splitF64 / packPlanes); the trainer copies its f32
// log-probs into the hi planes with `recordPlanes` (lo = 0).
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import type { LossType, ResolvedLossConfig, ScaleRewards } from '../rl/lossConfig';

/** Plane pairs of the packed input: plane 2p holds the hi parts, 2p+1 the lo parts. */
export const PLANE = { logps: 0, old: 1, ref: 2, sampling: 3, entropy: 4 } as const;
const PLANES = 2 * Object.keys(PLANE).length;
export type PlaneName = keyof typeof PLANE;

/** Slots of the df64 output tensor, with TRL's metric names. */
export const OUT_SLOTS = [
  'loss',
  'kl',
  'clip_ratio/low_mean',
  'clip_ratio/high_mean',
  'clip_ratio/region_mean',
  'clip_ratio/low_min',
  'clip_ratio/high_max',
  'sampling/sampling_logp_difference/mean',
  'sampling/sampling_logp_difference/max',
  'sampling/importance_sampling_ratio/min',
  'sampling/importance_sampling_ratio/mean',
  'sampling/importance_sampling_ratio/max',
  'num_tokens',
  'clip_sequences',
  'cispo_clip_ratio',
  'vespo/phi_seq_mean',
  'off_policy_mask/masked_fraction',
  'policy_loss',
  'entropy_mask/threshold',
  'entropy_bonus/entropy_mean',
  'entropy_bonus/tokens',
  'entropy_bonus/normaliser',
] as const;
const SEQ_SLOTS = 16;
const WG = 64;
/** seq_pass runs one workgroup per sequence along x. */
const MAX_SEQUENCES = 65535;

const FLAG = {
  hasOld: 1,
  useKl: 2,
  correct: 4,
  correctSeq: 8,
  correctTrunc: 16,
  hasCmax: 32,
  hasCmin: 64,
  seqLevel: 128,
  hasDelta: 256,
  offPolicy: 512,
  entMask: 1024,
  entBonus: 2048,
  hasSampling: 4096,
  entMean: 8192,
  entDen: 16384,
} as const;
const KIND: Record<LossType, number> = { grpo: 0, bnpo: 0, dr_grpo: 0, dapo: 0, luspo: 0, cispo: 1, sapo: 2, vespo: 3 };
const NORM = { perSeq: 0, tokens: 1, constant: 2 } as const;
const SCALE: Record<ScaleRewards, number> = { group: 0, batch: 1, none: 2 };

/** `${name}_hi`, `${name}_lo` f32 uniform fields: a df64 parameter. */
function pairFields<N extends string>(...names: N[]): Record<`${N}_hi` | `${N}_lo`, 'f32'> {
  return Object.fromEntries(names.flatMap((n) => [[`${n}_hi`, 'f32'], [`${n}_lo`, 'f32']])) as Record<`${N}_hi` | `${N}_lo`, 'f32'>;
}

const UNIFORMS = {
  B: 'u32',
  T: 'u32',
  G: 'u32',
  flags: 'u32',
  scale_mode: 'u32',
  norm_mode: 'u32',
  lo_bound_hi: 'f32',
  lo_bound_lo: 'f32',
  hi_bound_hi: 'f32',
  hi_bound_lo: 'f32',
  beta_hi: 'f32',
  beta_lo: 'f32',
  cmax_hi: 'f32',
  cmax_lo: 'f32',
  cmin_hi: 'f32',
  cmin_lo: 'f32',
  norm_hi: 'f32',
  norm_lo: 'f32',
  adv_eps_hi: 'f32',
  adv_eps_lo: 'f32',
  one: 'f32',
  loss_kind: 'u32',
  ...pairFields('delta', 'cispo_max', 'tau_pos', 'tau_neg', 'vk_pos', 'vl_pos', 'vk_neg', 'vl_neg', 'log_cmax', 'log_cmin', 'opm', 'ent_q', 'ent_coef', 'ga', 'ent_den'),
} as const;
type Uniforms = Record<keyof typeof UNIFORMS, number>;

/** TRL's epsilon in the advantage denominator, (r - mean) / (std + 1e-4). */
const ADV_EPS = 1e-4;

/** x = hi + lo with hi = fround(x): the df64 form of an f64 (exact to ~2^-48 relative). */
export function splitF64(x: number): [number, number] {
  const hi = Math.fround(x);
  return [hi, Math.fround(x - hi)];
}

/** Interleaved (hi, lo) pairs of f64 values, e.g. rewards [B, 2]; NaN stays NaN (a missing reward). */
export function pairsF64(values: ArrayLike<number>): Float32Array {
  const out = new Float32Array(values.length * 2);
  for (let i = 0; i < values.length; i++) {
    if (Number.isNaN(values[i])) out[2 * i] = NaN;
    else [out[2 * i], out[2 * i + 1]] = splitF64(values[i]);
  }
  return out;
}

/** The [10, B, T] planes from f64 [B·T] arrays; absent inputs leave zeros. */
export function packPlanes(B: number, T: number, inputs: Partial<Record<PlaneName, ArrayLike<number>>>): Float32Array {
  const n = B * T;
  const out = new Float32Array(PLANES * n);
  for (const [name, values] of Object.entries(inputs) as [PlaneName, ArrayLike<number>][]) {
    if (values.length !== n) throw new ShapeError('rl_loss', `${name} has ${values.length} values, expected ${B}x${T}`);
    const p = PLANE[name];
    for (let k = 0; k < n; k++) [out[2 * p * n + k], out[(2 * p + 1) * n + k]] = splitF64(values[k]);
  }
  return out;
}

/** The tensors of one loss evaluation for B sequences of T tokens. */
export interface RlLossBuffers {
  readonly B: number;
  readonly T: number;
  /** [10, B, T] f32 input planes. */
  planes: Tensor;
  /** [B, T] f32, non-zero where the token counts. */
  mask: Tensor;
  /** [B, 2] f32: rewards as (hi, lo); a NaN hi is a missing reward. */
  rewards: Tensor;
  /** [B, 2] df64 advantages (written by `advantages`, read by `loss`). */
  advantages: Tensor;
  /** [B, T] f32 dLoss/dlogp, for the model's backward. */
  grad: Tensor;
  /** [B, T, 2] df64 dLoss/dlogp (also the kernels' scratch). */
  gradPair: Tensor;
  /** [B, T] f32 dLoss/dentropy (the entropy bonus; 0 without it), for the model's backward. */
  gradEntropy: Tensor;
  /** [B, 16, 2] per-sequence partials. */
  seq: Tensor;
  /** [OUT_SLOTS, 2] df64 loss and metrics. */
  out: Tensor;
}

export interface RlLossResult {
  loss: number;
  /** dLoss/dlogp [B·T], row-major, f64 from the df64 pairs. */
  grad: Float64Array;
  /** dLoss/dentropy [B·T] (f32 values). */
  gradEntropy: Float32Array;
  advantages: Float64Array;
  /** Every OUT_SLOTS entry but the loss; low_min/high_max are NaN when no sequence has tokens. */
  metrics: Record<string, number>;
}

/** Which optional log-prob planes hold data. */
export interface PresentInputs {
  old: boolean;
  ref: boolean;
  sampling: boolean;
  /** The entropy plane holds data (needed by top_entropy_quantile < 1 and the entropy bonus). */
  entropy?: boolean;
}

export interface LossOptions {
  /**
   * The entropy bonus's coefficient for this evaluation: the adaptive controller's applied value
   * (src/rl/entropyControl.ts); default cfg.entropy_coef.
   */
  entropyCoef?: number;
  /**
   * The entropy bonus's normaliser, where this batch is part of a wider micro-batch: TRL divides
   * the bonus of grpo/bnpo/dr_grpo/sapo/luspo by the micro-batch's bonus tokens times the
   * accumulation steps. Default: from this batch (its bonus tokens · ga, or the dapo normaliser).
   */
  entropyDenominator?: number;
}

export class RlLoss {
  private constructor(
    private readonly advK: Kernel,
    private readonly seqK: Kernel,
    private readonly finK: Kernel,
    private readonly gradK: Kernel,
    private readonly thrK: Kernel,
  ) {}

  static async create(gpu: Gpu): Promise<RlLoss> {
    const spec = (entry: string) => ({ shader: 'rl_loss', entry, uniforms: UNIFORMS });
    const [a, s, f, g, t] = ['advantages', 'seq_pass', 'finalize', 'scale_grad', 'entropy_threshold'].map((e) => gpu.kernelOnUse(spec(e)));
    return new RlLoss(a, s, f, g, t);
  }

  /** Tensors for B sequences of T tokens, from the pool (acquire once, reuse every step). */
  static allocate(gpu: Gpu, B: number, T: number): RlLossBuffers {
    return {
      B,
      T,
      planes: gpu.tensor([PLANES, B, T], 'f32', 'rl_loss.planes'),
      mask: gpu.tensor([B, T], 'f32', 'rl_loss.mask'),
      rewards: gpu.tensor([B, 2], 'f32', 'rl_loss.rewards'),
      advantages: gpu.tensor([B, 2], 'f32', 'rl_loss.advantages'),
      grad: gpu.tensor([B, T], 'f32', 'rl_loss.grad'),
      gradPair: gpu.tensor([B, T, 2], 'f32', 'rl_loss.grad_pair'),
      gradEntropy: gpu.tensor([B, T], 'f32', 'rl_loss.grad_entropy'),
      seq: gpu.tensor([B, SEQ_SLOTS, 2], 'f32', 'rl_loss.seq'),
      out: gpu.tensor([OUT_SLOTS.length, 2], 'f32', 'rl_loss.out'),
    };
  }

  static release(b: RlLossBuffers): void {
    for (const t of [b.planes, b.mask, b.rewards, b.advantages, b.grad, b.gradPair, b.gradEntropy, b.seq, b.out]) t.release();
  }

  /** Record copies of f32 [B, T] log-probs into the hi planes; lo planes become 0. */
  static recordPlanes(rec: Recorder, b: RlLossBuffers, inputs: Partial<Record<PlaneName, Tensor>>): void {
    const bytes = b.B * b.T * 4;
    rec.clear(b.planes);
    for (const [name, t] of Object.entries(inputs) as [PlaneName, Tensor][]) {
      if (t.dtype !== 'f32' || t.numel !== b.B * b.T) {
        throw new ShapeError('rl_loss', `${name} must be f32 [${b.B}, ${b.T}], got ${t.dtype} [${t.shape.join(', ')}]`);
      }
      rec.copy(t, b.planes, bytes, 0, 2 * PLANE[name] * bytes);
    }
  }

  private checkBuffers(b: RlLossBuffers): void {
    const want: [Tensor, number[]][] = [
      [b.planes, [PLANES, b.B, b.T]],
      [b.mask, [b.B, b.T]],
      [b.rewards, [b.B, 2]],
      [b.advantages, [b.B, 2]],
      [b.grad, [b.B, b.T]],
      [b.gradPair, [b.B, b.T, 2]],
      [b.gradEntropy, [b.B, b.T]],
      [b.seq, [b.B, SEQ_SLOTS, 2]],
      [b.out, [OUT_SLOTS.length, 2]],
    ];
    for (const [t, shape] of want) {
      const n = shape.reduce((x, y) => x * y, 1);
      if (t.dtype !== 'f32' || t.numel !== n) {
        throw new ShapeError('rl_loss', `'${t.label}' must be f32 [${shape.join(', ')}], got ${t.dtype} [${t.shape.join(', ')}]`);
      }
    }
    if (b.B < 1 || b.T < 1) throw new ShapeError('rl_loss', `empty batch ${b.B}x${b.T}`);
    if (b.B > MAX_SEQUENCES) throw new ShapeError('rl_loss', `${b.B} sequences exceed one dispatch dimension (${MAX_SEQUENCES})`);
  }

  /** Record TRL's group advantages: rewards -> advantages, groups of G consecutive sequences. */
  advantages(rec: Recorder, b: RlLossBuffers, numGenerations: number, scale: ScaleRewards): void {
    this.checkBuffers(b);
    if (!Number.isInteger(numGenerations) || numGenerations < 1 || b.B % numGenerations !== 0) {
      throw new ShapeError('rl_loss.advantages', `batch of ${b.B} is not divisible by num_generations = ${numGenerations}`);
    }
    const u = { ...this.baseUniforms(b), G: numGenerations, scale_mode: SCALE[scale] };
    rec.dispatch(this.advK, { rewards: b.rewards, adv: b.advantages }, 1, u);
  }

  /** Record the loss, its gradient and the metrics from planes, mask and advantages. */
  loss(rec: Recorder, b: RlLossBuffers, cfg: ResolvedLossConfig, present: PresentInputs, opts: LossOptions = {}): void {
    this.checkBuffers(b);
    if (cfg.beta !== 0 && !present.ref) throw new ShapeError('rl_loss', `beta = ${cfg.beta} needs ref_logps`);
    const entMask = cfg.top_entropy_quantile < 1;
    const entBonus = cfg.entropy_coef !== 0 || cfg.use_adaptive_entropy;
    if ((entMask || entBonus) && !present.entropy) throw new ShapeError('rl_loss', 'top_entropy_quantile < 1 and the entropy bonus need the entropy plane');
    const rc = cfg.rollout_correction;
    if (rc.mode && !present.sampling) throw new ShapeError('rl_loss', `rollout correction ${rc.mode} needs sampling_logps`);
    let flags = 0;
    if (present.old) flags |= FLAG.hasOld;
    if (cfg.beta !== 0) flags |= FLAG.useKl;
    if (rc.mode) {
      flags |= FLAG.correct;
      if (rc.mode.startsWith('sequence')) flags |= FLAG.correctSeq;
      if (rc.mode.endsWith('truncate')) flags |= FLAG.correctTrunc;
      if (rc.clip_max !== null) flags |= FLAG.hasCmax;
      if (rc.clip_min !== null) flags |= FLAG.hasCmin;
    }
    if (cfg.importance_sampling_level === 'sequence') flags |= FLAG.seqLevel;
    if (cfg.delta !== null) flags |= FLAG.hasDelta;
    if (cfg.off_policy_mask_threshold !== null) flags |= FLAG.offPolicy;
    if (present.sampling) flags |= FLAG.hasSampling;
    if (entMask) flags |= FLAG.entMask;
    if (entBonus) flags |= FLAG.entBonus;
    // TRL's bonus divides by the dapo normaliser for the token-sum types, else takes a mean / ga.
    if (!['dapo', 'cispo', 'vespo'].includes(cfg.loss_type)) flags |= FLAG.entMean;
    if (opts.entropyDenominator !== undefined) {
      if (!(opts.entropyDenominator > 0)) throw new ShapeError('rl_loss', `entropyDenominator must be > 0, got ${opts.entropyDenominator}`);
      flags |= FLAG.entDen;
    }
    const ga = cfg.gradient_accumulation_steps;
    // Aggregation weight of sequence i: 1 / (norm · f_i), see the shader's norm_mode.
    const [normMode, norm] = ((): [number, number] => {
      switch (cfg.loss_type) {
        case 'grpo':
          return [NORM.perSeq, b.B * ga];
        case 'bnpo':
          return [NORM.tokens, ga];
        case 'dr_grpo':
          return [NORM.constant, b.B * cfg.max_completion_length * ga];
        case 'sapo':
          return [NORM.perSeq, b.B * ga];
        case 'luspo':
          // mean_i(L_i·|o_i|) / ga, and the kernel's sequence sum is |o_i|·L_i.
          return [NORM.constant, b.B * ga];
        case 'dapo':
        case 'cispo':
        case 'vespo':
          return cfg.num_items_in_batch === null ? [NORM.tokens, 1] : [NORM.constant, Math.max(cfg.num_items_in_batch, 1)];
      }
    })();
    const pair = (name: string, x: number) => {
      const [hi, lo] = splitF64(x);
      return { [`${name}_hi`]: hi, [`${name}_lo`]: lo };
    };
    const u = {
      ...this.baseUniforms(b),
      flags,
      norm_mode: normMode,
      ...pair('lo_bound', 1 - cfg.epsilon),
      ...pair('hi_bound', 1 + cfg.epsilon_high),
      ...pair('beta', cfg.beta),
      ...pair('cmax', rc.clip_max ?? 0),
      ...pair('cmin', rc.clip_min ?? 0),
      ...pair('norm', norm),
      loss_kind: KIND[cfg.loss_type],
      ...pair('delta', cfg.delta ?? 0),
      ...pair('cispo_max', cfg.epsilon_high),
      ...pair('tau_pos', cfg.sapo_temperature_pos),
      ...pair('tau_neg', cfg.sapo_temperature_neg),
      ...pair('vk_pos', cfg.vespo_k_pos),
      ...pair('vl_pos', cfg.vespo_lambda_pos),
      ...pair('vk_neg', cfg.vespo_k_neg),
      ...pair('vl_neg', cfg.vespo_lambda_neg),
      ...pair('log_cmax', rc.clip_max === null ? 0 : Math.log(rc.clip_max)),
      ...pair('log_cmin', rc.clip_min === null || rc.clip_min === 0 ? -1e30 : Math.log(rc.clip_min)),
      ...pair('opm', cfg.off_policy_mask_threshold ?? 0),
      ...pair('ent_q', 1 - cfg.top_entropy_quantile),
      ...pair('ent_coef', opts.entropyCoef ?? cfg.entropy_coef),
      ...pair('ga', ga),
      ...pair('ent_den', opts.entropyDenominator ?? 0),
    } as Uniforms;
    if (entMask) rec.dispatch(this.thrK, { planes: b.planes, mask: b.mask, out: b.out }, 1, u);
    rec.dispatch(this.seqK, { planes: b.planes, mask: b.mask, adv: b.advantages, seq: b.seq, gpair: b.gradPair, out: b.out }, b.B, u);
    rec.dispatch(this.finK, { seq: b.seq, out: b.out }, 1, u);
    rec.dispatch(this.gradK, { planes: b.planes, mask: b.mask, seq: b.seq, gpair: b.gradPair, grad: b.grad, out: b.out, grad_ent: b.gradEntropy }, grid1d(b.B * b.T, WG), u);
  }

  private baseUniforms(b: RlLossBuffers): Uniforms {
    const zero = Object.fromEntries(Object.keys(UNIFORMS).map((k) => [k, 0])) as Uniforms;
    const [epsHi, epsLo] = splitF64(ADV_EPS);
    return { ...zero, B: b.B, T: b.T, G: 1, adv_eps_hi: epsHi, adv_eps_lo: epsLo, one: 1 };
  }

  /** Read the loss, the df64 gradient, the advantages and the metrics back to the CPU. */
  static async read(gpu: Gpu, b: RlLossBuffers): Promise<RlLossResult> {
    const pairs = async (t: Tensor) => {
      const v = await gpu.readF32(t);
      const r = new Float64Array(v.length / 2);
      for (let i = 0; i < r.length; i++) r[i] = v[2 * i] + v[2 * i + 1];
      return r;
    };
    const [out, grad, advantages, gradEntropy] = await Promise.all([pairs(b.out), pairs(b.gradPair), pairs(b.advantages), gpu.readF32(b.gradEntropy)]);
    const metrics: Record<string, number> = {};
    OUT_SLOTS.forEach((name, i) => {
      if (name !== 'loss') metrics[name] = out[i];
    });
    if (metrics.clip_sequences === 0) metrics['clip_ratio/low_min'] = metrics['clip_ratio/high_max'] = NaN;
    return { loss: out[0], grad, gradEntropy, advantages, metrics };
  }
}
