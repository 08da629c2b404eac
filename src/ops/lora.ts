// LoRA on one linear layer, composed from the GEMMs of src/ops/matmul.ts and the dropout, init
// and up-product kernels of shaders/lora.wgsl. With x [T, in], A [r, in], B [out, r], s = lora_alpha / r
// (PEFT's default scaling) and x̃ = dropout(x) (x itself when p = 0; element (row, col) kept by a
// hash of the seed and row·in + col, the seed from dropoutSeed, so a backward regenerates the mask):
//   forward   u = x̃·Aᵀ [T, r] (kept for backward),  y += s·u·Bᵀ
//   backward  t = s·dY·B [T, r]
//             dB += s·dYᵀ·u,  dA += tᵀ·x̃,  dX += dropout'(t·A)
// Gradients accumulate (micro-batches and sequences add up); zeroGrad clears them.
import { grid1d, ShapeError, Tensor, type Gpu, type Kernel, type Recorder } from '../gpu';
import { Matmul } from './matmul';

const WG = 256;

/** What names and sizes one adapted layer. */
export interface LoraSpec {
  /** The adapted module's path as PEFT names it, e.g. `model.language_model.layers.0.self_attn.q_proj`. */
  name: string;
  in: number;
  out: number;
  r: number;
  /** lora_alpha; the update is scaled by alpha / r. */
  alpha: number;
}

/** The trainable state of one adapted layer: what the optimizer and the PEFT exporter iterate. */
export interface LoraParams extends LoraSpec {
  /** lora_A.weight [r, in] */
  A: Tensor;
  /** lora_B.weight [out, r] */
  B: Tensor;
  /** Gradients, same shapes, accumulated by Lora.backward. */
  dA: Tensor;
  dB: Tensor;
}

/** shaders/lora.wgsl's pcg on the CPU: the same u32 permutation (tools/make_fixtures.py has it too). */
export function pcg(v: number): number {
  const state = (Math.imul(v >>> 0, 747796405) + 2891336453) >>> 0;
  const word = Math.imul(((state >>> ((state >>> 28) + 4)) ^ state) >>> 0, 277803737) >>> 0;
  return ((word >>> 22) ^ word) >>> 0;
}

/**
 * The dropout seed (LoraCallOptions.seed) of one adapter in one training forward: a pure function
 * of the run's seed, the forward's step, the layer and the module's index (LORA_PROJECTIONS), so
 * a mask element is a function of (seed, step, layer, module, row, col) alone.
 */
export function dropoutSeed(seed: number, step: number, layer: number, module: number): number {
  let h = pcg(seed);
  for (const v of [step, layer, module]) h = pcg((h ^ v) >>> 0);
  return h;
}

export function loraScale(p: LoraSpec): number {
  return p.alpha / p.r;
}

function checkSpec(spec: LoraSpec): void {
  for (const k of ['in', 'out', 'r'] as const) {
    if (!Number.isInteger(spec[k]) || spec[k] <= 0) throw new ShapeError('lora', `${spec.name}: ${k} must be a positive integer, got ${spec[k]}`);
  }
  if (!(spec.alpha > 0)) throw new ShapeError('lora', `${spec.name}: lora_alpha must be positive, got ${spec.alpha}`);
}

/** Tensors for one layer's adapter; contents undefined until Lora.init (or a checkpoint load). */
export function createLoraParams(gpu: Gpu, spec: LoraSpec): LoraParams {
  checkSpec(spec);
  return {
    ...spec,
    A: gpu.tensor([spec.r, spec.in], 'f32', `${spec.name}.lora_A`),
    B: gpu.tensor([spec.out, spec.r], 'f32', `${spec.name}.lora_B`),
    dA: gpu.tensor([spec.r, spec.in], 'f32', `${spec.name}.lora_A.grad`),
    dB: gpu.tensor([spec.out, spec.r], 'f32', `${spec.name}.lora_B.grad`),
  };
}

/**
 * Tensors for many adapters in few buffers: every A and B are views into one flat buffer (or more
 * where one would pass the device's largest storage binding), every dA and dB into another laid out
 * alike, each view starting at the storage offset alignment. AdamW then covers all of them in a
 * constant number of dispatches (it groups tensors by buffer). A buffer goes back to the pool once
 * every view into it is released (releaseLoraParams on each adapter).
 */
export function createLoraParamSet(gpu: Gpu, specs: readonly LoraSpec[]): LoraParams[] {
  specs.forEach(checkSpec);
  const shapes = specs.flatMap((s) => [
    [s.r, s.in],
    [s.out, s.r],
  ]);
  const labels = specs.flatMap((s) => [`${s.name}.lora_A`, `${s.name}.lora_B`]);
  const params = flatViews(gpu, shapes, labels, 'lora.params');
  const grads = flatViews(
    gpu,
    shapes,
    labels.map((l) => `${l}.grad`),
    'lora.grads',
  );
  return specs.map((spec, i) => ({ ...spec, A: params[2 * i], B: params[2 * i + 1], dA: grads[2 * i], dB: grads[2 * i + 1] }));
}

/** f32 views of `shapes` packed into pool buffers at aligned offsets; a buffer is released with its last view. */
function flatViews(gpu: Gpu, shapes: readonly number[][], labels: readonly string[], label: string): Tensor[] {
  const align = gpu.limits.minStorageBufferOffsetAlignment;
  const maxBytes = Math.min(gpu.limits.maxBufferSize, gpu.limits.maxStorageBufferBindingSize);
  // Each tensor's buffer (index) and byte offset there; a buffer is full when the next tensor would pass maxBytes.
  const place: { buffer: number; offset: number }[] = [];
  const sizes: number[] = [];
  let at = 0;
  for (const shape of shapes) {
    const bytes = 4 * shape.reduce((a, b) => a * b, 1);
    if (sizes.length === 0 || at + bytes > maxBytes) {
      sizes.push(0);
      at = 0;
    }
    place.push({ buffer: sizes.length - 1, offset: at });
    sizes[sizes.length - 1] = at + bytes;
    at = Math.ceil((at + bytes) / align) * align;
  }
  const flats = sizes.map((bytes) => gpu.tensor([bytes / 4], 'f32', label));
  const live = flats.map(() => new Set<Tensor>());
  const views = shapes.map((shape, i) => {
    const { buffer: b, offset } = place[i];
    const release = (t: Tensor) => {
      if (live[b].delete(t) && live[b].size === 0) flats[b].release();
    };
    return new Tensor(flats[b].buffer, shape, 'f32', labels[i], offset, release);
  });
  views.forEach((v, i) => live[place[i].buffer].add(v));
  return views;
}

export function releaseLoraParams(p: LoraParams): void {
  for (const t of [p.A, p.B, p.dA, p.dB]) t.release();
}

export interface LoraCallOptions {
  /** false runs the base layer alone (the reference policy): nothing is recorded. Default true. */
  enabled?: boolean;
  /** lora_dropout probability in [0, 1); default 0. */
  dropout?: number;
  /** Dropout seed (u32): give each layer and step its own, and backward the forward's. */
  seed?: number;
}

export interface LoraForwardArgs {
  /** Layer input [T, in]. */
  x: Tensor;
  /** Base layer output [T, out]; the LoRA update is added in place. */
  y: Tensor;
  /** Receives x̃·Aᵀ; at least [T, r]. Keep it for backward. */
  u: Tensor;
  /** Workspace for dropout(x), at least [T, in]; needed only when dropout > 0. */
  xd?: Tensor;
}

export interface LoraBackwardArgs {
  x: Tensor;
  /** Gradient of the layer output [T, out]. */
  dy: Tensor;
  /** The forward's u. */
  u: Tensor;
  /** Gradient of the layer input [T, in], accumulated into (it holds the base layer's part); omit when not needed. */
  dx?: Tensor;
  /** Workspace at least [T, r]. */
  t: Tensor;
  /** Workspace at least [T, in]; needed only when dropout > 0. */
  xd?: Tensor;
}

/** up_add's block of y (shaders/lora.wgsl): columns and rows a workgroup. */
const UP_COLS = 128;
const UP_ROWS = 32;

export class Lora {
  private constructor(
    private readonly mm: Matmul,
    private readonly initK: Kernel,
    private readonly dropFwdK: Kernel,
    private readonly dropBwdK: Kernel,
    /** y += scale·u·W for W = B [N, r] (forward) and W = A [r, N] (dX). */
    private readonly up: { B: Kernel; A: Kernel },
  ) {}

  static async create(gpu: Gpu): Promise<Lora> {
    const spec = (entry: string) => ({
      shader: 'lora',
      entry,
      constants: { WG },
      uniforms: { n: 'u32', seed: 'u32', scale: 'f32', threshold: 'u32' } as const,
    });
    const upSpec = (trans: boolean) => ({
      name: `lora.up_add${trans ? '[A]' : '[B]'}`,
      shader: 'lora',
      entry: 'up_add',
      defines: { TRANS: trans },
      uniforms: { rows: 'u32', cols: 'u32', r: 'u32', scale: 'f32' } as const,
    });
    const init = gpu.kernelOnUse(spec('init_uniform'));
    const dropout = gpu.kernelOnUse(spec('dropout_forward'));
    const dropoutBackward = gpu.kernelOnUse(spec('dropout_backward_acc'));
    const upAdd = { B: gpu.kernelOnUse(upSpec(false)), A: gpu.kernelOnUse(upSpec(true)) };
    return new Lora(await Matmul.create(gpu), init, dropout, dropoutBackward, upAdd);
  }

  /** y [T, N] += scale·u [T, r]·W: W (n, j) is B[n, j] (`w` = B [N, r]) or A[j, n] (`w` = A
   * [r, N], `trans`). up_add where N % 4 == 0 (y as vec4s), else the GEMM. */
  private upAdd(rec: Recorder, u: Tensor, w: Tensor, y: Tensor, T: number, N: number, r: number, scale: number, trans: boolean): void {
    if (N % 4 === 0) {
      rec.dispatch(trans ? this.up.A : this.up.B, { up_u: u, up_w: w, up_y: y }, [Math.ceil(N / UP_COLS), Math.ceil(T / UP_ROWS)], { rows: T, cols: N, r, scale });
      return;
    }
    this.mm.gemm(rec, { a: u, b: w, c: y, m: T, n: N, k: r, transB: !trans, alpha: scale, beta: 1 });
  }

  /** PEFT's initialisation: A ~ U(-1/√in, 1/√in) from `seed`, B = 0 (so the adapter starts as a no-op); grads cleared. */
  init(rec: Recorder, p: LoraParams, seed: number): void {
    checkSeed('lora.init', seed);
    rec.dispatch(this.initK, { y: p.A }, grid1d(p.A.numel, WG), { n: p.A.numel, seed, scale: 1 / Math.sqrt(p.in), threshold: 0 });
    rec.clear(p.B);
    this.zeroGrad(rec, p);
  }

  zeroGrad(rec: Recorder, p: LoraParams): void {
    rec.clear(p.dA);
    rec.clear(p.dB);
  }

  /** y += s·dropout(x)·Aᵀ·Bᵀ, keeping u = dropout(x)·Aᵀ. */
  forward(rec: Recorder, p: LoraParams, args: LoraForwardArgs, opts: LoraCallOptions = {}): void {
    if (opts.enabled === false) return;
    const op = 'lora.forward';
    const T = rows(op, p, 'x', args.x, p.in);
    rows(op, p, 'y', args.y, p.out, T, true);
    rows(op, p, 'u', args.u, p.r, T);
    this.downProduct(op, rec, p, args.x, args.u, T, args.xd, opts);
    this.upAdd(rec, args.u, p.B, args.y, T, p.out, p.r, loraScale(p), false);
  }

  /** u = x̃·Aᵀ alone: the forward's first half, for a recompute that needs u but not y. */
  down(rec: Recorder, p: LoraParams, x: Tensor, u: Tensor, xd?: Tensor, opts: LoraCallOptions = {}): void {
    if (opts.enabled === false) return;
    const op = 'lora.down';
    const T = rows(op, p, 'x', x, p.in);
    rows(op, p, 'u', u, p.r, T);
    this.downProduct(op, rec, p, x, u, T, xd, opts);
  }

  private downProduct(op: string, rec: Recorder, p: LoraParams, x: Tensor, u: Tensor, T: number, xd: Tensor | undefined, opts: LoraCallOptions): void {
    const xin = this.dropout(op, rec, p, x, xd, T, opts);
    this.mm.gemm(rec, { a: xin, b: p.A, c: u, m: T, n: p.r, k: p.in, transB: true });
  }

  /** Accumulate dA and dB, and add the adapter's part of dX when `dx` is given. */
  backward(rec: Recorder, p: LoraParams, args: LoraBackwardArgs, opts: LoraCallOptions = {}): void {
    if (opts.enabled === false) return;
    const op = 'lora.backward';
    const s = loraScale(p);
    const T = rows(op, p, 'x', args.x, p.in);
    rows(op, p, 'dy', args.dy, p.out, T, true);
    rows(op, p, 'u', args.u, p.r, T);
    rows(op, p, 't', args.t, p.r, T);
    if (args.dx) rows(op, p, 'dx', args.dx, p.in, T, true);
    const { dy, u, t } = args;
    this.mm.gemm(rec, { a: dy, b: u, c: p.dB, m: p.out, n: p.r, k: T, transA: true, alpha: s, beta: 1 });
    this.mm.gemm(rec, { a: dy, b: p.B, c: t, m: T, n: p.r, k: p.out, alpha: s });
    const xin = this.dropout(op, rec, p, args.x, args.xd, T, opts);
    this.mm.gemm(rec, { a: t, b: xin, c: p.dA, m: p.r, n: p.in, k: T, transA: true, beta: 1 });
    if (!args.dx) return;
    if (xin === args.x) {
      this.upAdd(rec, t, p.A, args.dx, T, p.in, p.r, 1, true);
      return;
    }
    // With dropout, t·A goes through the workspace (dropout(x) is no longer needed) and only
    // the kept elements reach dX.
    const xd = args.xd!;
    this.mm.gemm(rec, { a: t, b: p.A, c: xd, m: T, n: p.in, k: p.r });
    const n = T * p.in;
    rec.dispatch(this.dropBwdK, { x: xd, y: args.dx }, grid1d(n, WG), dropoutUniforms(n, opts));
  }

  /** x itself when p = 0, else dropout(x) written to the workspace `xd`. */
  private dropout(op: string, rec: Recorder, p: LoraParams, x: Tensor, xd: Tensor | undefined, T: number, opts: LoraCallOptions): Tensor {
    const prob = opts.dropout ?? 0;
    if (!(prob >= 0 && prob < 1)) throw new ShapeError(op, `${p.name}: dropout must be in [0, 1), got ${prob}`);
    if (prob === 0) return x;
    checkSeed(op, opts.seed);
    if (!xd) throw new ShapeError(op, `${p.name}: dropout ${prob} needs the workspace xd [${T}, ${p.in}]`);
    rows(op, p, 'xd', xd, p.in, T);
    const n = T * p.in;
    rec.dispatch(this.dropFwdK, { x, y: xd }, grid1d(n, WG), dropoutUniforms(n, opts));
    return xd;
  }
}

function dropoutUniforms(n: number, opts: LoraCallOptions): Record<string, number> {
  const prob = opts.dropout ?? 0;
  return { n, seed: opts.seed!, scale: 1 / (1 - prob), threshold: Math.min(2 ** 32 - 1, Math.round(prob * 2 ** 32)) };
}

function checkSeed(op: string, seed: number | undefined): void {
  if (seed === undefined || !Number.isInteger(seed) || seed < 0 || seed >= 2 ** 32) {
    throw new ShapeError(op, `seed must be a u32, got ${seed}`);
  }
}

/**
 * Check a 2-D f32 tensor with `cols` columns and return its rows. With `T` given, the tensor
 * must have exactly T rows (`exact`) or at least T (a workspace sized for the longest batch).
 */
function rows(op: string, p: LoraParams, what: string, t: Tensor, cols: number, T?: number, exact = false): number {
  const bad = (why: string) => new ShapeError(op, `${p.name}: ${what} ('${t.label}') ${why}`);
  if (t.dtype !== 'f32') throw bad(`must be f32, got ${t.dtype}`);
  if (t.shape.length !== 2 || t.shape[1] !== cols) throw bad(`must be [tokens, ${cols}], got [${t.shape}]`);
  if (T !== undefined && (exact ? t.shape[0] !== T : t.shape[0] < T)) throw bad(`needs ${exact ? '' : 'at least '}${T} rows, got ${t.shape[0]}`);
  return t.shape[0];
}
