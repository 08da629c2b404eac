// AdamW (torch.optim.AdamW semantics) over a fixed list of f32 parameters, preceded by global
// grad-norm clipping (torch.nn.utils.clip_grad_norm_). The norm and the clip coefficient are
// computed on the GPU and stay there: a step records dispatches only, no readback.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

const WG = 256;
const PER = 4; // elements per thread of sumsq_partial (shaders/adamw.wgsl)

export interface AdamWParam {
  param: Tensor;
  grad: Tensor;
}

export interface AdamWConfig {
  /** Default 0.9 and 0.999, as torch. */
  beta1?: number;
  beta2?: number;
  /** Added after the square root of the bias-corrected second moment. Default 1e-8. */
  eps?: number;
  /** Decoupled: θ ← θ·(1 − lr·wd). Default 0, as transformers' TrainingArguments. */
  weightDecay?: number;
  /** Clip the global L2 norm of all gradients to this; null: no clipping (the norm is still computed). Default 1. */
  maxGradNorm?: number | null;
}

export interface AdamWMoments {
  expAvg: Tensor;
  expAvgSq: Tensor;
}

export class AdamW {
  /** [2] f32: the global gradient norm before clipping and the coefficient applied (≤ 1). */
  readonly gradNorm: Tensor;
  /** First and second moments, one pair per parameter, in the order given (for checkpoints). */
  readonly moments: readonly AdamWMoments[];
  private readonly offsets: number[];
  private readonly partials: Tensor;
  private readonly partialCount: number;
  private readonly cfg: Required<AdamWConfig>;

  private constructor(
    gpu: Gpu,
    private readonly params: readonly AdamWParam[],
    config: AdamWConfig,
    private readonly sumK: Kernel,
    private readonly clipK: Kernel,
    private readonly stepK: Kernel,
  ) {
    this.cfg = { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, maxGradNorm: 1, ...config };
    this.offsets = [];
    let count = 0;
    for (const p of params) {
      this.offsets.push(count);
      count += Math.ceil(p.param.numel / (WG * PER));
    }
    this.partialCount = count;
    this.partials = gpu.tensor([Math.max(1, count)], 'f32', 'adamw.partials');
    this.gradNorm = gpu.zeros([2], 'f32', 'adamw.grad_norm');
    this.moments = params.map((p, i) => ({
      expAvg: gpu.zeros([p.param.numel], 'f32', `adamw.exp_avg.${i}`),
      expAvgSq: gpu.zeros([p.param.numel], 'f32', `adamw.exp_avg_sq.${i}`),
    }));
  }

  static async create(gpu: Gpu, params: readonly AdamWParam[], config: AdamWConfig = {}): Promise<AdamW> {
    if (params.length === 0) throw new ShapeError('adamw', 'no parameters');
    params.forEach(({ param, grad }, i) => {
      if (param.dtype !== 'f32' || grad.dtype !== 'f32' || param.numel !== grad.numel) {
        throw new ShapeError('adamw', `parameter ${i} ('${param.label}'): f32 param and grad of equal size expected, got ${param.dtype}[${param.numel}] and ${grad.dtype}[${grad.numel}]`);
      }
    });
    const { maxGradNorm } = config;
    if (maxGradNorm !== undefined && maxGradNorm !== null && !(maxGradNorm > 0)) {
      throw new ShapeError('adamw', `maxGradNorm must be > 0 or null, got ${maxGradNorm}`);
    }
    const sumK = gpu.kernelOnUse({ shader: 'adamw', entry: 'sumsq_partial', uniforms: { n: 'u32', offset: 'u32' } });
    const clipK = gpu.kernelOnUse({ shader: 'adamw', entry: 'clip_coef', uniforms: { count: 'u32', max_norm: 'f32', clip: 'u32' } });
    const stepK = gpu.kernelOnUse({
      shader: 'adamw',
      entry: 'adamw_step',
      uniforms: { n: 'u32', lr: 'f32', beta1: 'f32', beta2: 'f32', eps: 'f32', weight_decay: 'f32', step_size: 'f32', bc2_sqrt: 'f32' },
    });
    return new AdamW(gpu, params, config, sumK, clipK, stepK);
  }

  /** Record the global norm (into gradNorm), clipping and one AdamW update. `step` counts from 1. */
  step(rec: Recorder, { lr, step }: { lr: number; step: number }): void {
    if (!Number.isInteger(step) || step < 1) throw new ShapeError('adamw', `step must be an integer ≥ 1, got ${step}`);
    if (!(lr >= 0)) throw new ShapeError('adamw', `lr must be ≥ 0, got ${lr}`);
    const { beta1, beta2, eps, weightDecay, maxGradNorm } = this.cfg;
    this.params.forEach(({ grad }, i) => {
      rec.dispatch(this.sumK, { grad, partials: this.partials }, grid1d(grad.numel, WG * PER), { n: grad.numel, offset: this.offsets[i] });
    });
    rec.dispatch(this.clipK, { sums: this.partials, stats: this.gradNorm }, 1, {
      count: this.partialCount,
      max_norm: maxGradNorm ?? 0,
      clip: maxGradNorm === null ? 0 : 1,
    });
    // Bias corrections in f64 on the CPU: β^t in f32 would lose digits for large t.
    const uniforms = {
      lr,
      beta1,
      beta2,
      eps,
      weight_decay: weightDecay,
      step_size: lr / (1 - beta1 ** step),
      bc2_sqrt: Math.sqrt(1 - beta2 ** step),
    };
    this.params.forEach(({ param, grad }, i) => {
      const { expAvg, expAvgSq } = this.moments[i];
      rec.dispatch(
        this.stepK,
        { param, g_in: grad, exp_avg: expAvg, exp_avg_sq: expAvgSq, clip: this.gradNorm },
        grid1d(param.numel, WG),
        { n: param.numel, ...uniforms },
      );
    });
  }

  /** Record zeroing of every gradient (before the next accumulation). */
  zeroGrad(rec: Recorder): void {
    for (const { grad } of this.params) rec.clear(grad);
  }
}
