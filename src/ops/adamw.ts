// AdamW (torch.optim.AdamW semantics) over a fixed list of f32 parameters, preceded by global
// grad-norm clipping (torch.nn.utils.clip_grad_norm_). The norm and the clip coefficient are
// computed on the GPU and stay there: a step records dispatches only, no readback.
//
// Multi-tensor: parameters that are views into one buffer, with gradients that are views into one
// other buffer, form a group that each kernel covers in a single dispatch (a segment table names
// each tensor's offsets; shaders/adamw.wgsl). A step is 2·groups + 1 dispatches whatever the
// tensor count: adapters from createLoraParamSet (src/ops/loraParams.ts) make one group. Tensors in
// buffers of their own still work, a group each.
import { grid1d, ShapeError, Tensor, type Gpu, type Kernel, type Recorder } from '../gpu';

const WG = 256;
const PER = 4; // elements per thread (shaders/adamw.wgsl)
/** Elements a workgroup covers: one partial sum each. */
const CHUNK = WG * PER;
/** u32s a segment-table row holds (param offset, grad offset, length, first chunk). */
const SEG_WORDS = 4;

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

/** Parameters sharing a parameter buffer and a gradient buffer: one dispatch per kernel. */
interface Group {
  /** Indices into the parameter list, in order. */
  members: number[];
  /** The bound ranges: from the first member's aligned start to the last member's end. */
  param: Tensor;
  grad: Tensor;
  /** Flat moments laid out as `param` (a member's moments sit at its offset in `param`). */
  expAvg: Tensor;
  expAvgSq: Tensor;
  /** u32 [segments, SEG_WORDS]: see shaders/adamw.wgsl's Seg. */
  table: Tensor;
  chunks: number;
  /** This group's first partial sum. */
  partialOffset: number;
}

/** The range of `buffer` from `start` (rounded down to `align`) to `end` bytes, as an f32 tensor. */
function cover(buffer: GPUBuffer, start: number, end: number, align: number, label: string): Tensor {
  const from = Math.floor(start / align) * align;
  return new Tensor(buffer, [(end - from) / 4], 'f32', label, from);
}

export class AdamW {
  /** [2] f32: the global gradient norm before clipping and the coefficient applied (≤ 1). */
  readonly gradNorm: Tensor;
  /** First and second moments, one pair per parameter, in the order given (for checkpoints): views into the groups' flat moments. */
  readonly moments: readonly AdamWMoments[];
  private readonly groups: Group[];
  private readonly partials: Tensor;
  private readonly partialCount: number;
  private readonly cfg: Required<AdamWConfig>;

  private constructor(
    gpu: Gpu,
    private readonly params: readonly AdamWParam[],
    config: AdamWConfig,
    private readonly kernels: { sum: Kernel; clip: Kernel; step: Kernel; zero: Kernel },
  ) {
    this.cfg = { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, maxGradNorm: 1, ...config };
    const moments: AdamWMoments[] = new Array(params.length);
    this.groups = [];
    let partials = 0;
    for (const [g, members] of groupByBuffers(params).entries()) {
      const group = makeGroup(gpu, params, members, partials, `adamw.${g}`);
      for (const i of members) {
        const { param } = params[i];
        const at = param.byteOffset - group.param.byteOffset;
        const view = (flat: Tensor, what: string) => new Tensor(flat.buffer, [param.numel], 'f32', `adamw.${what}.${i}`, flat.byteOffset + at);
        moments[i] = { expAvg: view(group.expAvg, 'exp_avg'), expAvgSq: view(group.expAvgSq, 'exp_avg_sq') };
      }
      this.groups.push(group);
      partials += group.chunks;
    }
    this.moments = moments;
    this.partialCount = partials;
    this.partials = gpu.tensor([Math.max(1, partials)], 'f32', 'adamw.partials');
    this.gradNorm = gpu.zeros([2], 'f32', 'adamw.grad_norm');
  }

  static async create(gpu: Gpu, params: readonly AdamWParam[], config: AdamWConfig = {}): Promise<AdamW> {
    if (params.length === 0) throw new ShapeError('adamw', 'no parameters');
    params.forEach(({ param, grad }, i) => {
      if (param.dtype !== 'f32' || grad.dtype !== 'f32' || param.numel !== grad.numel) {
        throw new ShapeError('adamw', `parameter ${i} ('${param.label}'): f32 param and grad of equal size expected, got ${param.dtype}[${param.numel}] and ${grad.dtype}[${grad.numel}]`);
      }
      // One dispatch binds the parameter read-write and the gradient read-only: WebGPU refuses both uses of one buffer.
      if (param.buffer === grad.buffer) throw new ShapeError('adamw', `parameter ${i} ('${param.label}'): param and grad share a buffer`);
    });
    const { maxGradNorm } = config;
    if (maxGradNorm !== undefined && maxGradNorm !== null && !(maxGradNorm > 0)) {
      throw new ShapeError('adamw', `maxGradNorm must be > 0 or null, got ${maxGradNorm}`);
    }
    const table = { segments: 'u32', chunks: 'u32' } as const;
    const kernels = {
      sum: gpu.kernelOnUse({ shader: 'adamw', entry: 'sumsq_partial', uniforms: { ...table, offset: 'u32' } }),
      clip: gpu.kernelOnUse({ shader: 'adamw', entry: 'clip_coef', uniforms: { count: 'u32', max_norm: 'f32', clip: 'u32' } }),
      step: gpu.kernelOnUse({
        shader: 'adamw',
        entry: 'adamw_step',
        uniforms: { ...table, lr: 'f32', beta1: 'f32', beta2: 'f32', eps: 'f32', weight_decay: 'f32', step_size: 'f32', bc2_sqrt: 'f32' },
      }),
      zero: gpu.kernelOnUse({ shader: 'adamw', entry: 'zero_grads', uniforms: table }),
    };
    return new AdamW(gpu, params, config, kernels);
  }

  /** Record the global norm (into gradNorm), clipping and one AdamW update. `step` counts from 1. */
  step(rec: Recorder, { lr, step }: { lr: number; step: number }): void {
    if (!Number.isInteger(step) || step < 1) throw new ShapeError('adamw', `step must be an integer ≥ 1, got ${step}`);
    if (!(lr >= 0)) throw new ShapeError('adamw', `lr must be ≥ 0, got ${lr}`);
    const { beta1, beta2, eps, weightDecay, maxGradNorm } = this.cfg;
    for (const g of this.groups) {
      rec.dispatch(this.kernels.sum, { segs: g.table, grad: g.grad, partials: this.partials }, grid1d(g.chunks, 1), {
        ...tableUniforms(g),
        offset: g.partialOffset,
      });
    }
    rec.dispatch(this.kernels.clip, { sums: this.partials, stats: this.gradNorm }, 1, {
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
    for (const g of this.groups) {
      rec.dispatch(
        this.kernels.step,
        { segs: g.table, param: g.param, g_in: g.grad, exp_avg: g.expAvg, exp_avg_sq: g.expAvgSq, clip: this.gradNorm },
        grid1d(g.chunks, 1),
        { ...tableUniforms(g), ...uniforms },
      );
    }
  }

  /** Record zeroing of every gradient (before the next accumulation): one dispatch a group (a clear for a lone tensor). */
  zeroGrad(rec: Recorder): void {
    for (const g of this.groups) {
      // The lone tensor itself, not its bound range: that may start earlier, at an aligned offset.
      if (g.members.length === 1) rec.clear(this.params[g.members[0]].grad);
      else rec.dispatch(this.kernels.zero, { segs: g.table, grad_out: g.grad }, grid1d(g.chunks, 1), tableUniforms(g));
    }
  }

  /** Give the moments, tables and scratch back to the pool (the parameters stay the caller's). */
  release(): void {
    for (const g of this.groups) for (const t of [g.expAvg, g.expAvgSq, g.table]) t.release();
    this.partials.release();
    this.gradNorm.release();
  }
}

function tableUniforms(g: Group): { segments: number; chunks: number } {
  return { segments: g.members.length, chunks: g.chunks };
}

/** Parameter indices grouped by (parameter buffer, gradient buffer), groups in order of first appearance. */
function groupByBuffers(params: readonly AdamWParam[]): number[][] {
  const byParam = new Map<GPUBuffer, Map<GPUBuffer, number[]>>();
  const groups: number[][] = [];
  params.forEach(({ param, grad }, i) => {
    let byGrad = byParam.get(param.buffer);
    if (!byGrad) byParam.set(param.buffer, (byGrad = new Map()));
    let members = byGrad.get(grad.buffer);
    if (!members) {
      byGrad.set(grad.buffer, (members = []));
      groups.push(members);
    }
    members.push(i);
  });
  return groups;
}

/** The bound ranges, zeroed flat moments and segment table of one group. */
function makeGroup(gpu: Gpu, params: readonly AdamWParam[], members: number[], partialOffset: number, label: string): Group {
  const align = gpu.limits.minStorageBufferOffsetAlignment;
  const ts = members.map((i) => params[i]);
  const range = (t: (p: AdamWParam) => Tensor, what: string) => {
    const start = Math.min(...ts.map((p) => t(p).byteOffset));
    const end = Math.max(...ts.map((p) => t(p).byteOffset + 4 * t(p).numel));
    return cover(t(ts[0]).buffer, start, end, align, `${label}.${what}`);
  };
  const param = range((p) => p.param, 'params');
  const grad = range((p) => p.grad, 'grads');
  const rows = new Uint32Array(SEG_WORDS * members.length);
  let chunks = 0;
  ts.forEach((p, k) => {
    rows.set([(p.param.byteOffset - param.byteOffset) / 4, (p.grad.byteOffset - grad.byteOffset) / 4, p.param.numel, chunks], SEG_WORDS * k);
    chunks += Math.ceil(p.param.numel / CHUNK);
  });
  return {
    members,
    param,
    grad,
    expAvg: gpu.zeros([param.numel], 'f32', `${label}.exp_avg`),
    expAvgSq: gpu.zeros([param.numel], 'f32', `${label}.exp_avg_sq`),
    table: gpu.upload(rows, [members.length, SEG_WORDS], 'u32', `${label}.segments`),
    chunks,
    partialOffset,
  };
}
