// The product backend: every y (+)= x·Wᵀ of the model (decoder projections, LM head, vision
// tower), with its optional LoRA update, and every choice of how it runs:
//   4-bit W, ≤ 8 rows     the GEMV (weights read once for all rows); 2..8 rows of inference may
//                          take x as int8 (MatmulQ4's int8 layouts), pre-quantized by the kernel
//                          before where it can (quantizedInput)
//   4-bit W, more rows    the tiled GEMM (split along K when it has few tiles), or the int8 tensor
//                          cores when set (useTensorCores) and W's shape suits them
//   f32 W                 the f32 GEMM (a bias in its epilogue), or the tensor cores on an int8
//                          copy of W made once (vision)
//   joined weights         q/k/v and gate/up of a layer (4-bit) or q/k/v of a vision block (f32)
//                          joined by rows at load (joinRows, joinDense): one product for all
//   LoRA                   few rows of inference: the LoRA GEMV, one pair of dispatches for the
//                          adapters of one x, its norm inside the down dispatch (normProject), or
//                          at one row the norm and the down products inside the base GEMV's
//                          dispatch (normedGemv), an update folded into the GEMV's epilogue
//                          (projectFolded); on the f16 tensor cores the update (and in a backward
//                          the adapter's part of dX) as more of the GEMM's reduction (f16Lora);
//                          otherwise src/ops/lora.ts's group dispatches, keeping u for a backward
//                          (and lora_dropout)
// Callers say what to compute (x, weights, outputs, adapters, whether it is inference); the table
// PATHS and the ops' own `takes…` predicates (device features, shapes) say how.
import { DTYPE_BYTES, grid1d, ShapeError, Tensor, type Gpu, type Kernel, type Recorder } from '../gpu';
import type { DenseWeight, LinearWeight } from '../model/weights';
import { Activations } from './activations';
import { Elementwise } from './elementwise';
import { Lora, LORA_GROUP_MAX, type LoraForwardMember } from './lora';
import { loraScale, type LoraParams } from './loraParams';
import { LORA_GEMV_MAX_ROWS, LoraGemv } from './loraGemv';
import { Matmul } from './matmul';
import { Norms } from './norms';
import { allocQ4, GEMV_MAX_ROWS, int8GroupWords, MatmulQ4, type Q4Weight } from './matmulQ4';
import { MatmulQ4F16 } from './matmulQ4F16';
import { MMA_K_BLOCK } from './productSizes';
import { MatmulQ4Mma, type Int8Weight, type MatmulQ4MmaOptions } from './matmulQ4Mma';

/** The path table: by rows of x (shape class) and x's int8 limbs on the tensor cores. */
export const PATHS = {
  /** At most this many rows: the 4-bit GEMV; more: the GEMM or the tensor cores. */
  gemvMaxRows: GEMV_MAX_ROWS,
  /** At most this many rows with scratch for u (inference): the LoRA GEMV; else src/ops/lora.ts's products. */
  loraGemvMaxRows: LORA_GEMV_MAX_ROWS,
  /** Tensor-core tile by x's limbs, the fastest on an H100 at the decoder's shapes (BENCHMARKS.md). */
  mmaTile: { 1: { rows: 128, cols: 64, threads: 256 }, 2: { rows: 64, cols: 128, threads: 256 } },
  /** K block by x's limbs (productSizes.ts). */
  mmaKBlock: MMA_K_BLOCK,
} as const;

const BIAS_WG = 256;

/** A tensor-core op for 4-bit products (MatmulQ4Mma on int8, MatmulQ4F16 on f16): what the
 * projections route through it. */
export interface TensorCoreProducts {
  takesForward(w: Q4Weight): boolean;
  takesInput(w: Q4Weight): boolean;
  gemm(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor, accumulate?: boolean): void;
  gemmShared(rec: Recorder, x: Tensor, outs: readonly { w: Q4Weight; y: Tensor }[], accumulate?: boolean): void;
  backwardInput(rec: Recorder, dy: Tensor, w: Q4Weight, dx: Tensor, accumulate?: boolean): void;
  release(): void;
}

/** An adapter on one product: its parameters and where u = x·Aᵀ goes (kept for a backward, or scratch). */
export interface ProductLora {
  p: LoraParams;
  u: Tensor;
  /** lora_dropout on the adapter's input (training): the probability, the mask's seed
   * (dropoutSeed) and a workspace of at least [rows, in] for dropout(x). */
  dropout?: { p: number; seed: number; xd: Tensor };
  /** u already holds x·Aᵀ (a checkpointed recompute whose forward kept it): the update alone. */
  uKept?: boolean;
}

/** One input gradient of a backward: dX (+)= dY·W, with the adapter's backward (dA, dB, its part
 * of dX) when `lora` is given: the forward's u, a workspace t [≥ rows, r] of its own, dropout as
 * in the forward. */
export interface BackwardProduct {
  w: LinearWeight;
  dy: Tensor;
  lora?: { p: LoraParams; u: Tensor; t: Tensor; dropout?: { p: number; seed: number; xd: Tensor } };
}

/** One product of x: y (+)= x·Wᵀ (+ its LoRA update). */
export interface Product {
  w: LinearWeight;
  y: Tensor;
  lora?: ProductLora;
}

/** Scratch of an inference call, which lets few rows take the LoRA GEMV. */
export interface LoraScratch {
  /** [rows, cols] for the stacked u of up to three adapters. */
  wide: (cols: number) => Tensor;
  /** At least `n` elements for the partials of a folded update. */
  parts: (n: number) => Tensor;
}

export interface ProjectOptions {
  accumulate?: boolean;
  /** Inference: 2..8 rows of a 4-bit GEMV may take x as int8. */
  int8?: boolean;
  /** Inference scratch (LoraScratch); without it adapters take src/ops/lora.ts's products and keep u. */
  scratch?: LoraScratch;
}

/** An adapter's update left as partials of u by the kernel before its product (the folds), and x as int8 groups where that kernel writes them. */
export interface Fold {
  p: LoraParams;
  perRow: number;
  parts: Tensor;
  quantized?: Tensor;
}

/** Adapters that took the LoRA GEMV together, and their stacked u (their up product is the caller's). */
export interface LoraGemvCall {
  ps: LoraParams[];
  u: Tensor;
}

/**
 * normProject's result: the adapters on the LoRA GEMV path, and the update still owed to h. An
 * owed update (a residual [rows, hidden]) is down_proj's adapter update of the layer before in a
 * decode step, written beside down_proj's GEMV (swigluDown) instead of by a dispatch after it:
 * the next layer's norm reads h plus it, and its o_proj GEMV adds it into h as it stores
 * (projectFolded); where a kernel cannot take it, `settle` adds it into h first.
 */
export interface NormProjected {
  gemv: LoraGemvCall | null;
  owed: Tensor | null;
}

/** Weights of one input joined by rows: `w` holds the rows of `parts` in order; each part is a view of it. */
interface JoinedWeight {
  w: LinearWeight;
  parts: readonly LinearWeight[];
}

/** f32 parts with biases joined for one batched GEMM: weights [parts, out, in], biases [parts, out]. */
interface JoinedDense {
  w: Tensor;
  b: Tensor;
  parts: readonly DenseWeight[];
}

/** Joins already made, by first part: a second model over the same weights shares them. */
const joinedOf = new WeakMap<LinearWeight, JoinedWeight>();
const joinedDenseOf = new WeakMap<LinearWeight, JoinedDense>();

export class Projection {
  private tensorCores: TensorCoreProducts | null = null;
  /** Dense weights' tensor-core routes (by the op given to useTensorCores), by the weight's tensor. */
  private routes = new Map<Tensor, DenseRoute>();
  /** The joined output of projections, by the first part's output (workspace views are kept per row count). */
  private readonly joinedOut = new WeakMap<Tensor, { y: Tensor; widths: number[] }>();
  /** A GEMV's x as int8 groups, written by the kernel before (quantizedInput). */
  private xq: Tensor | null = null;

  private constructor(
    private readonly gpu: Gpu,
    readonly matmul: Matmul,
    readonly q4: MatmulQ4,
    readonly lora: Lora,
    readonly loraGemv: LoraGemv,
    private readonly norms: Norms,
    private readonly act: Activations,
    private readonly elementwise: Elementwise,
    private readonly biasAdd: Kernel,
    /** Widest x a pre-quantized GEMV input takes (0: none). */
    private readonly maxK: number,
  ) {}

  /** `int8`: whether inference GEMVs may take int8 x. `maxK`: the widest x of a pre-quantized GEMV input (decoder). */
  static async create(gpu: Gpu, opts: { int8?: boolean; maxK?: number } = {}): Promise<Projection> {
    const biasAdd = gpu.kernelOnUse({ shader: 'vision', entry: 'bias_add', constants: { WG: BIAS_WG }, uniforms: { n: 'u32', width: 'u32', rows: 'u32' } });
    const [matmul, q4, lora, loraGemv, norms, act, elementwise] = await Promise.all([
      Matmul.create(gpu),
      MatmulQ4.create(gpu, { int8: opts.int8 }),
      Lora.create(gpu),
      LoraGemv.create(gpu),
      Norms.create(gpu),
      Activations.create(gpu),
      Elementwise.create(gpu),
    ]);
    return new Projection(gpu, matmul, q4, lora, loraGemv, norms, act, elementwise, biasAdd, opts.maxK ?? 0);
  }

  // ---- weights joined at load ----------------------------------------------------------------

  /**
   * Join 4-bit weights of one input by rows into one and make the parts views of it: no extra
   * memory (the parts' own buffers go back), one GEMV instead of several for a few rows. Only
   * where every part starts on the storage offset alignment, codes and scales alike; else false.
   */
  async joinRows(parts: readonly LinearWeight[], label: string): Promise<boolean> {
    if (joinedOf.has(parts[0])) return true;
    const gpu = this.gpu;
    const align = gpu.limits.minStorageBufferOffsetAlignment;
    const k = parts[0].in;
    const q4: Q4Weight[] = [];
    for (const p of parts) {
      // Each part's codes (n·k/2 bytes) and scales (n·k/16 bytes) must end on the alignment, where the next begins.
      if (p.kind !== 'q4' || p.in !== k || ((p.out * k) / 2) % align || ((p.out * k) / 16) % align) return false;
      q4.push(p.w);
    }
    const n = q4.reduce((a, p) => a + p.n, 0);
    const joined = allocQ4(gpu, n, k, label);
    const rec = gpu.recorder('projection.join');
    let row = 0;
    for (const p of q4) {
      rec.copy(p.codes, joined.codes, (p.n * k) / 2, 0, (row * k) / 2);
      rec.copy(p.scales, joined.scales, (p.n * k) / 16, 0, (row * k) / 16);
      row += p.n;
    }
    await rec.submit();
    row = 0;
    parts.forEach((p, i) => {
      const w = q4[i];
      (p as { w: Q4Weight }).w = {
        codes: new Tensor(joined.codes.buffer, w.codes.shape, 'u32', w.codes.label, joined.codes.byteOffset + (row * k) / 2),
        scales: new Tensor(joined.scales.buffer, w.scales.shape, 'u32', w.scales.label, joined.scales.byteOffset + (row * k) / 16),
        n: w.n,
        k,
      };
      row += w.n;
      w.codes.release();
      w.scales.release();
    });
    // The parts' buffers leave the pool's cache now: the weights take no more memory than before.
    gpu.pool.trim();
    joinedOf.set(parts[0], { w: { kind: 'q4', w: joined, out: n, in: k }, parts });
    return true;
  }

  /**
   * Join dense [out, out] weights of one dtype with biases (a vision block's q, k, v) into one
   * buffer of [parts, out, in] (the parts' weights become views) and their biases into [parts,
   * out] (a copy): one batched GEMM (denseShared). Where a part is 4-bit, differs in dtype, lacks
   * a bias or its view would not start on the storage offset alignment, nothing is joined (false).
   */
  async joinDense(parts: readonly DenseWeight[], label: string): Promise<boolean> {
    if (joinedDenseOf.has(parts[0])) return true;
    const gpu = this.gpu;
    const first = parts[0];
    if (first.kind !== 'dense') return false;
    const { out, in: k } = first;
    const dtype = first.w.dtype;
    const bytes = DTYPE_BYTES[dtype] * out * k;
    if (bytes % gpu.limits.minStorageBufferOffsetAlignment !== 0) return false;
    if (parts.some((d) => d.kind !== 'dense' || d.w.dtype !== dtype || !d.b || d.out !== out || d.in !== k)) return false;
    const w = gpu.tensor([parts.length, out, k], dtype, `${label}.weight`);
    const b = gpu.tensor([parts.length, out], 'f32', `${label}.bias`);
    const rec = gpu.recorder('projection.join_dense');
    const own: Tensor[] = [];
    parts.forEach((d, p) => {
      const src = d.w as Tensor;
      rec.copy(src, w, bytes, 0, p * bytes);
      rec.copy(d.b!, b, 4 * out, 0, 4 * p * out);
      (d as { w: Tensor }).w = new Tensor(w.buffer, src.shape, dtype, src.label, w.byteOffset + p * bytes);
      own.push(src);
    });
    await rec.submit();
    // The parts' own buffers go back, and leave the pool's cache: the weights take no more memory.
    for (const t of own) t.release();
    gpu.pool.trim();
    joinedDenseOf.set(parts[0], { w, b, parts });
    return true;
  }

  // ---- tensor cores --------------------------------------------------------------------------

  /**
   * Route 4-bit products of more than PATHS.gemvMaxRows rows and 4-bit input gradients through
   * `op` (the caller owns it), and the dense weights of `dense` too: on a MatmulQ4F16 as they are
   * held (gemmDense rounds each to f16 into its scratch a call: no copy); on a K-blocked
   * MatmulQ4Mma through int8 copies made here once from their f32 values (|w − q·t| ≤ t/2, t a
   * block's largest |w| / 127; halves widened first). null: the f32 kernels again.
   */
  async useTensorCores(op: TensorCoreProducts | null, dense: readonly DenseWeight[] = []): Promise<void> {
    if (op instanceof MatmulQ4Mma && op.kBlock === 32) throw new ShapeError('projection', 'the tensor-core path takes a K-blocked MatmulQ4Mma (kBlock 64 or above)');
    const old = this.routes;
    this.routes = new Map();
    this.tensorCores = null;
    if ([...old.values()].some((r) => r.kind === 'int8')) {
      // Work recorded with the old copies may still be in flight.
      await this.gpu.sync();
      for (const r of old.values()) releaseRoute(r);
    }
    if (!op) return;
    const rec = this.gpu.recorder('projection.dense_copies');
    for (const d of dense) {
      if (d.kind !== 'dense') continue;
      if (op instanceof MatmulQ4F16) {
        if (op.takesDense(d.in)) this.routes.set(d.w, { kind: 'f16', op, w: d.w });
        continue;
      }
      if (!(op instanceof MatmulQ4Mma) || d.in % op.kBlock !== 0) continue;
      const w = d.w.dtype === 'f32' ? d.w : this.matmul.halves.widen(rec, d.w);
      this.routes.set(d.w, { kind: 'int8', op, w: op.quantizeDense(rec, w, d.out, d.in, d.w.label) });
      if (w !== d.w) {
        // One weight's f32 at a time: submitted before the next widening reuses its buffer.
        await rec.submit();
        w.release();
      }
    }
    await rec.submit();
    this.tensorCores = op;
  }

  /** y (+)= x·Wᵀ + b for each output on its weight's tensor-core route (all on one op): the f16
   * GEMM adds the bias as it stores y, the int8 one leaves it to a dispatch after. */
  private denseOnTensorCores(rec: Recorder, x: Tensor, outs: readonly { r: DenseRoute; y: Tensor; b: Tensor | null }[], accumulate: boolean): void {
    const first = outs[0].r;
    if (first.kind === 'f16') {
      first.op.gemmDense(rec, x, outs.map(({ r, y, b }) => ({ w: (r as typeof first).w, y, b })), accumulate);
      return;
    }
    first.op.gemmInt8(rec, x, outs.map(({ r, y }) => ({ w: (r as typeof first).w, y })), accumulate);
    for (const o of outs) if (o.b) this.addBias(rec, o.y, o.b);
  }

  get usesTensorCores(): boolean {
    return this.tensorCores !== null;
  }

  /** Whether x·Wᵀ of a 4-bit W takes the tensor cores: set, W's shape suits them, more than gemvMaxRows rows. */
  private onTensorCores(x: Tensor, w: Q4Weight): boolean {
    return !!this.tensorCores?.takesForward(w) && x.numel / w.k > PATHS.gemvMaxRows;
  }

  /** The 4-bit weights of `ws` when all of them take the tensor cores together on x (one K), else null. */
  private tensorCoreWeights(x: Tensor, ws: readonly LinearWeight[]): Q4Weight[] | null {
    if (!this.tensorCores) return null;
    const q4 = ws.flatMap((w) => (w.kind === 'q4' && w.in === ws[0].in && this.onTensorCores(x, w.w) ? [w.w] : []));
    return q4.length === ws.length ? q4 : null;
  }

  // ---- plain products ------------------------------------------------------------------------

  /** y (+)= x·Wᵀ. `int8`: a 4-bit product of 2..8 rows may quantize x (inference). */
  forward(rec: Recorder, x: Tensor, w: LinearWeight, y: Tensor, accumulate = false, int8 = false): void {
    if (w.kind !== 'q4') this.matmul.linear(rec, x, w.w, y, { accumulate });
    else this.forwardQ4(rec, x, w.w, y, accumulate, int8);
  }

  /** forward on a 4-bit weight (the LM head's vocabulary chunks come as Q4Weight views). */
  forwardQ4(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor, accumulate = false, int8 = false): void {
    if (this.onTensorCores(x, w)) this.tensorCores!.gemm(rec, x, w, y, accumulate);
    else this.q4.forward(rec, x, w, y, accumulate, int8);
  }

  /** dx (+)= dy·W (the backward through a frozen weight). */
  backwardInput(rec: Recorder, dy: Tensor, w: LinearWeight, dx: Tensor, accumulate = false): void {
    if (w.kind !== 'q4') this.matmul.linearGradInput(rec, dy, w.w, dx, { accumulate });
    else this.backwardInputQ4(rec, dy, w.w, dx, accumulate);
  }

  backwardInputQ4(rec: Recorder, dy: Tensor, w: Q4Weight, dx: Tensor, accumulate = false): void {
    if (this.tensorCores?.takesInput(w)) this.tensorCores.backwardInput(rec, dy, w, dx, accumulate);
    else this.q4.backwardInput(rec, dy, w, dx, accumulate);
  }

  /** y (+)= x·Wᵀ + b for a layer with an optional bias: on the tensor cores where W has a route to them (useTensorCores). */
  dense(rec: Recorder, x: Tensor, d: DenseWeight, y: Tensor, accumulate = false): void {
    const r = d.kind === 'dense' ? this.routes.get(d.w) : undefined;
    if (r) {
      this.denseOnTensorCores(rec, x, [{ r, y, b: d.b }], accumulate);
      return;
    }
    if (d.kind === 'dense') {
      this.matmul.linear(rec, x, d.w, y, { accumulate, bias: d.b ?? undefined });
      return;
    }
    this.q4.forward(rec, x, d.w, y, accumulate);
    if (!d.b) return;
    if (d.b.numel !== d.out) throw new ShapeError('dense', `bias [${d.b.shape.join(', ')}] of a layer of ${d.out} outputs`);
    this.addBias(rec, y, d.b);
  }

  /** Rows [yRow, yRow + m) of y (+)= rows [xRow, xRow + m) of x · Wᵀ + b: offsets for the f32 GEMM, row views for 4-bit and the tensor cores (the caller aligns them). */
  denseRows(rec: Recorder, x: Tensor, xRow: number, d: DenseWeight, y: Tensor, yRow: number, m: number, accumulate: boolean): void {
    if (d.kind === 'dense' && !this.routes.has(d.w)) {
      this.matmul.gemm(rec, { a: x, b: d.w, c: y, m, n: d.out, k: d.in, transB: true, offsetA: xRow * d.in, offsetC: yRow * d.out, beta: accumulate ? 1 : 0, bias: d.b ?? undefined });
      return;
    }
    const rows = (t: Tensor, r0: number, width: number) => new Tensor(t.buffer, [m, width], 'f32', t.label, t.byteOffset + 4 * r0 * width);
    this.dense(rec, rows(x, xRow, d.in), d, rows(y, yRow, d.out), accumulate);
  }

  /**
   * Every y = x·Wᵀ + b of `outs` on one x: on the tensor cores x is quantized once for all; f32
   * parts joined at load (joinDense) take one batched GEMM, their outputs `stride` floats apart
   * in one buffer; else a product each.
   */
  denseShared(rec: Recorder, x: Tensor, outs: readonly { d: DenseWeight; y: Tensor }[]): void {
    const routes = outs.map((o) => (o.d.kind === 'dense' ? this.routes.get(o.d.w) : undefined));
    if (routes.every((r) => r)) {
      this.denseOnTensorCores(rec, x, outs.map((o, i) => ({ r: routes[i]!, y: o.y, b: o.d.b })), false);
      return;
    }
    const j = joinedDenseOf.get(outs[0].d);
    const stride = outs.length > 1 ? (outs[1].y.byteOffset - outs[0].y.byteOffset) / 4 : 0;
    const laidOut = j && j.parts.length === outs.length && outs.every((o, i) => o.d === j.parts[i] && o.y.buffer === outs[0].y.buffer && o.y.byteOffset === outs[0].y.byteOffset + 4 * i * stride);
    if (!j || !laidOut) {
      for (const o of outs) this.dense(rec, x, o.d, o.y);
      return;
    }
    const { out: n, in: k } = outs[0].d;
    const m = x.numel / k;
    const c = new Tensor(outs[0].y.buffer, [outs.length * stride], 'f32', outs[0].y.label, outs[0].y.byteOffset);
    this.matmul.gemm(rec, { a: x, b: j.w, c, m, n, k, transB: true, batch: outs.length, strideA: 0, strideB: n * k, strideC: stride, bias: j.b, strideBias: n });
  }

  /** y [rows, width] += b [width] on every row (after a product that has no bias of its own). */
  addBias(rec: Recorder, y: Tensor, b: Tensor): void {
    if (y.numel % b.numel !== 0) throw new ShapeError('dense', `bias [${b.shape.join(', ')}] does not fit y [${y.shape.join(', ')}]`);
    rec.dispatch(this.biasAdd, { bias: b, x: y }, grid1d(y.numel, BIAS_WG), { n: y.numel, width: b.numel, rows: 1 });
  }

  // ---- projections with adapters -------------------------------------------------------------

  /**
   * Products of one input x: every y = x·Wᵀ (+ y), then their LoRA updates: on the tensor cores
   * x quantized once for all; on the LoRA GEMV path one pair of dispatches for every adapter.
   */
  project(rec: Recorder, x: Tensor, outs: readonly Product[], o: ProjectOptions = {}): void {
    const { accumulate = false, int8 = false } = o;
    const gemv = this.gemvLora(x, outs, o.scratch);
    const mma = gemv ? null : this.tensorCoreWeights(x, outs.map((p) => p.w));
    const fused = mma && this.f16Lora(outs.map((p, i) => ({ w: mma[i], lora: p.lora })), false);
    if (fused) {
      // u first; the updates then run inside the GEMM, as more of its reduction.
      this.loraDowns(rec, x, outs);
      fused.gemmShared(rec, x, outs.map((p, i) => ({ w: mma[i], y: p.y, lora: p.lora && { u: p.lora.u, B: p.lora.p.B, r: p.lora.p.r, scale: loraScale(p.lora.p) } })), accumulate);
      return;
    }
    if (mma) {
      // The LoRA updates follow the GEMM (in its epilogue they slowed its main loop: BENCHMARKS.md).
      this.tensorCores!.gemmShared(rec, x, outs.map((p, i) => ({ w: mma[i], y: p.y })), accumulate);
      this.loraProducts(rec, x, outs);
      return;
    }
    // One adapter: its down and up after the base projection (LoraGemv.forward).
    const single = gemv && outs.length === 1;
    if (gemv && !single) this.loraGemv.down(rec, gemv.ps, x, gemv.u);
    this.baseProjections(rec, x, outs, accumulate, int8);
    if (single) this.loraGemv.forward(rec, gemv.ps[0], x, outs[0].y, gemv.u);
    else if (gemv) this.loraGemv.up(rec, gemv.ps, gemv.u, outs.map((p) => p.y));
    else this.loraProducts(rec, x, outs);
  }

  /**
   * n = rms(h)·norm, then the products of n (project). On the LoRA GEMV path the norm runs inside
   * the adapters' down dispatch, and their up products are left to the caller (returned), which
   * may fuse them into what comes next; else rmsnorm (keeping rstd when given) + project. One row
   * whose products are one 4-bit GEMV (joined weights) takes the norm and the adapters' down
   * products inside that GEMV's dispatch (normedGemv), and n is then not written.
   */
  normProject(rec: Recorder, h: Tensor, norm: { weight: Tensor; eps: number; rstd?: Tensor }, n: Tensor, outs: readonly Product[], o: ProjectOptions & { owed?: Tensor | null } = {}): NormProjected {
    const int8 = o.int8 ?? false;
    const owed = o.owed ?? null;
    const gemv = norm.rstd ? null : this.gemvLora(n, outs, o.scratch);
    const one = norm.rstd ? null : this.normedGemv(n, outs, gemv);
    // The LoRA GEMV's norm below may take the owed update in; the other paths settle it first.
    if (owed && (one || !gemv)) this.settle(rec, owed, h);
    if (one) {
      const down = gemv ? { A: gemv.ps.map((p) => p.A), r: gemv.ps[0].r, u: gemv.u } : undefined;
      this.q4.gemv(rec, h, one.w, one.y, false, { norm: { weight: norm.weight, eps: norm.eps, down } });
      return { gemv, owed: null };
    }
    if (!gemv) {
      this.norms.rmsnorm(rec, h, norm.weight, n, norm.eps, norm.rstd);
      this.project(rec, n, outs, { ...o, accumulate: false });
      return { gemv: null, owed: null };
    }
    const joined = this.joined(outs);
    const xq = joined && this.loraGemv.quantizes(gemv.ps) ? this.quantizedInput(n.shape[0], joined.w, int8) : undefined;
    const add = owed && this.loraGemv.takesAdd(gemv.ps, xq !== undefined) ? owed : null;
    if (owed && !add) this.settle(rec, owed, h);
    this.loraGemv.down(rec, gemv.ps, h, gemv.u, { weight: norm.weight, eps: norm.eps, out: n, quantized: xq, add: add ?? undefined });
    this.baseProjections(rec, n, outs, false, int8, xq);
    return { gemv, owed: add };
  }

  /** h += owed: an update owed to the residual rows (NormProjected) added by a dispatch of its own. */
  settle(rec: Recorder, owed: Tensor, h: Tensor): void {
    this.elementwise.axpy(rec, owed, h);
  }

  /**
   * The one 4-bit GEMV of `outs` (one weight, or weights joined at load) when its row of x may
   * take its RMSNorm inside it (MatmulQ4.takesNorm), with the down products of `gemv`'s adapters:
   * one row, and no adapter left to LoRA's GEMMs (they read the normed row); else null.
   */
  private normedGemv(x: Tensor, outs: readonly Product[], gemv: LoraGemvCall | null): { w: Q4Weight; y: Tensor } | null {
    if (x.shape[0] !== 1 || (!gemv && outs.some((p) => p.lora))) return null;
    const one = outs.length === 1 ? outs[0] : this.joined(outs);
    if (!one || one.w.kind !== 'q4' || !this.q4.takesNorm(1, one.w.w, gemv?.ps.length ?? 0)) return null;
    return { w: one.w.w, y: one.y };
  }

  /**
   * Where the GEMV of `rows` rows on w takes x as int8 groups, which the kernel before it (a
   * norm's LoRA down, the SwiGLU, the attention combine) can write as it writes x: the scratch
   * that carries them, saving the GEMV's quantize dispatch. Else undefined.
   */
  quantizedInput(rows: number, w: LinearWeight, int8: boolean): Tensor | undefined {
    if (!int8 || w.kind !== 'q4' || this.maxK === 0 || !this.q4.takesQuantizedX(rows, w.w, true)) return undefined;
    // One for every such input (each GEMV reads it before the next kernel writes it again), sized
    // once for the widest; never released: calls recorded before (a decode tape) may read it.
    this.xq ??= this.gpu.tensor([int8GroupWords(PATHS.gemvMaxRows, this.maxK)], 'u32', 'projection.xq');
    return this.xq;
  }

  /**
   * On the LoRA GEMV path, the fold of o_proj's adapter into the attention kernel that normalises
   * its rows (the split's combine, or the unsplit decode kernel: one partial of u a head, `heads` a
   * row), and where that kernel also leaves x as int8 groups
   * (`quantizes`): what forwardCached takes and projectFolded finishes; else undefined.
   */
  attentionFold(gemv: LoraGemvCall | null, out: Product, rows: number, heads: number, scratch: LoraScratch | undefined, o: { quantizes: boolean; int8: boolean }): Fold | undefined {
    const p = out.lora?.p;
    if (!gemv || !p || !scratch || !LoraGemv.takesParts(p)) return undefined;
    return { p, perRow: heads, parts: scratch.parts(rows * heads * p.r), quantized: o.quantizes ? this.quantizedInput(rows, out.w, o.int8) : undefined };
  }

  /**
   * act = silu(gate)·up, then down (+)= act·W_downᵀ with its adapter: on the LoRA GEMV path of
   * gate/up (`gemv`, normProject's) their adapters' up products finish in the SwiGLU dispatch, and
   * down's adapter folds into it (swigluFold); else SwiGLU, then the projection. Given `residual`
   * [rows, out], down's adapter update may go there instead of into y, written beside its GEMV:
   * then it is returned, owed to y (NormProjected), else null.
   */
  swigluDown(rec: Recorder, gemv: LoraGemvCall | null, b: { gate: Tensor; up: Tensor; act: Tensor }, down: Product, o: { scratch?: LoraScratch; int8?: boolean; accumulate?: boolean; residual?: Tensor } = {}): Tensor | null {
    const { int8 = false, accumulate = false } = o;
    const fold = this.swigluFold(gemv, down, b.act.shape[0], o.scratch, int8);
    if (gemv) this.loraGemv.upSwiglu(rec, gemv.ps[0], gemv.ps[1], gemv.u, b.gate, b.up, b.act, fold && { p: fold.p, parts: fold.parts, quantized: fold.quantized });
    else this.act.swiglu(rec, b.gate, b.up, b.act);
    if (fold) return this.projectFolded(rec, b.act, down, fold, int8, { write: o.residual });
    this.project(rec, b.act, [down], { int8, scratch: o.scratch, accumulate });
    return null;
  }

  /**
   * On the LoRA GEMV path of gate/up (`gemv`), the fold of down_proj's adapter into their SwiGLU
   * dispatch (one partial of u per 64 columns of act), and act as int8 groups where it can: what
   * upSwiglu takes and projectFolded finishes; else undefined.
   */
  private swigluFold(gemv: LoraGemvCall | null, out: Product, rows: number, scratch: LoraScratch | undefined, int8: boolean): Fold | undefined {
    const p = out.lora?.p;
    if (!gemv || !p || !scratch || !LoraGemv.canFold(gemv.ps[0], p)) return undefined;
    const perRow = LoraGemv.foldParts(p);
    const quantized = this.loraGemv.foldQuantizes(gemv.ps[0]) ? this.quantizedInput(rows, out.w, int8) : undefined;
    return { p, perRow, parts: scratch.parts(rows * perRow * p.r), quantized };
  }

  /**
   * y += x·Wᵀ + s·u·Bᵀ for the fold's adapter, u [rows, r] left as partials by the kernel before
   * (attentionFold, swigluFold): inside the 4-bit GEMV's epilogue where it takes it (MatmulQ4.takesLora),
   * else one dispatch after it. `residual.add`: an update owed to y (NormProjected), added as the
   * GEMV stores y where it takes one (MatmulQ4.takesResidual), else settled first.
   * `residual.write`: where the GEMV takes it and not the epilogue, the adapter's update goes
   * there, beside the GEMV, and is returned, owed to y; else null.
   */
  projectFolded(rec: Recorder, x: Tensor, out: Product, f: Fold, int8: boolean, residual: { add?: Tensor | null; write?: Tensor } = {}): Tensor | null {
    const { w, y } = out;
    const { p, parts, perRow, quantized: xq } = f;
    const q4 = this.q4;
    const m = x.shape[0];
    const lora = { B: p.B, r: p.r, scale: loraScale(p), parts, perRow };
    const takesResidual = w.kind === 'q4' && q4.takesResidual(m, w.w, int8);
    if (residual.add && !takesResidual) this.settle(rec, residual.add, y);
    const addResidual = (takesResidual && residual.add) || undefined;
    if (w.kind === 'q4' && q4.takesLora(m, w.w, p.r, perRow, int8)) {
      q4.gemv(rec, x, w.w, y, true, { int8, lora, xq, addResidual });
      return null;
    }
    if (w.kind === 'q4' && takesResidual && residual.write && !addResidual) {
      q4.gemv(rec, x, w.w, y, true, { int8, xq, writeResidual: { out: residual.write, lora } });
      return residual.write;
    }
    if (w.kind === 'q4' && (xq || addResidual)) q4.gemv(rec, x, w.w, y, true, { int8, xq, addResidual });
    else this.forward(rec, x, w, y, true, int8);
    this.loraGemv.upFromParts(rec, p, parts, perRow, y);
    return null;
  }

  /**
   * dx = Σ dy·W over `items` (products of one input x), with each adapter's backward: on the f16 tensor cores every t = s·dY·B first and
   * each adapter's t·A inside its product's reduction (f16Lora), else src/ops/lora.ts's products
   * after them (dropout adapters each, the others as one group).
   */
  backwardProducts(rec: Recorder, x: Tensor, dx: Tensor, items: readonly BackwardProduct[]): void {
    const fused = this.f16Lora(items.map((it) => ({ w: it.w.kind === 'q4' ? it.w.w : null, lora: it.lora })), true);
    const members = items.flatMap((it) => (it.lora && !it.lora.dropout ? [{ p: it.lora.p, dy: it.dy, u: it.lora.u, t: it.lora.t }] : []));
    if (fused) {
      this.lora.tGroup(rec, x, members);
      items.forEach((it, i) => {
        const l = it.lora;
        if (l && it.w.kind === 'q4') fused.backwardInput(rec, it.dy, it.w.w, dx, i > 0, { t: l.t, A: l.p.A, r: l.p.r });
        else this.backwardInput(rec, it.dy, it.w, dx, i > 0);
      });
      this.lora.gradsGroup(rec, x, members);
      return;
    }
    items.forEach((it, i) => this.backwardInput(rec, it.dy, it.w, dx, i > 0));
    for (const { dy, lora: l } of items) {
      if (l?.dropout) this.lora.backward(rec, l.p, { x, dy, u: l.u, dx, t: l.t, xd: l.dropout.xd }, { dropout: l.dropout.p, seed: l.dropout.seed });
    }
    this.lora.backwardGroup(rec, x, dx, members);
  }

  /**
   * The f16 tensor-core op when the adapters of these products run inside its products: 1 to 3
   * of one rank, each on a 4-bit weight taking the extension (`input`: the input gradient's, which
   * dropout's mask keeps out); in a forward every weight of the shared x, since an output without
   * an adapter takes zeros there (MatmulQ4F16.gemmShared); else null.
   */
  private f16Lora(ps: readonly { w: Q4Weight | null; lora?: { p: LoraParams; dropout?: unknown } }[], input: boolean): MatmulQ4F16 | null {
    const op = this.tensorCores;
    const withLora = ps.filter((p) => p.lora);
    if (!(op instanceof MatmulQ4F16) || withLora.length === 0 || withLora.length > LORA_GROUP_MAX) return null;
    const r = withLora[0].lora!.p.r;
    if (withLora.some((p) => p.lora!.p.r !== r || (input && p.lora!.dropout))) return null;
    const extended = input ? withLora : ps;
    return extended.every((p) => p.w && op.takesLora(p.w, input)) ? op : null;
  }

  /** Every adapter's u = x̃·Aᵀ of `outs` (not those kept): dropout's each, the others as one group. */
  private loraDowns(rec: Recorder, x: Tensor, outs: readonly Product[]): void {
    const group: { p: LoraParams; u: Tensor }[] = [];
    for (const { lora } of outs) {
      if (!lora || lora.uKept) continue;
      const d = lora.dropout;
      if (d) this.lora.down(rec, lora.p, x, lora.u, d.xd, { dropout: d.p, seed: d.seed });
      else group.push({ p: lora.p, u: lora.u });
    }
    this.lora.downGroup(rec, x, group);
  }

  /** Each adapter's update by src/ops/lora.ts, keeping u: those without dropout (which share x) as one group. */
  private loraProducts(rec: Recorder, x: Tensor, outs: readonly Product[]): void {
    const groups: [LoraForwardMember[], LoraForwardMember[]] = [[], []];
    for (const { y, lora } of outs) {
      if (!lora) continue;
      const d = lora.dropout;
      if (d) this.lora.forward(rec, lora.p, { x, y, u: lora.u, xd: d.xd }, { dropout: d.p, seed: d.seed, uKept: lora.uKept });
      else groups[lora.uKept ? 1 : 0].push({ p: lora.p, u: lora.u, y });
    }
    this.lora.forwardGroup(rec, x, groups[0]);
    this.lora.forwardGroup(rec, x, groups[1], true);
  }

  /**
   * Every y (+)= x·Wᵀ of `outs`: for up to gemvMaxRows rows, weights joined at load as one GEMV
   * into their back-to-back outputs, each part's rows written apart; for more, one GEMM (more
   * tiles to spread: BENCHMARKS.md, gemmSpeed --split).
   */
  private baseProjections(rec: Recorder, x: Tensor, outs: readonly Product[], accumulate: boolean, int8: boolean, xq?: Tensor): void {
    const rows = x.shape[0];
    const joined = outs.length > 1 ? this.joined(outs) : null;
    if (joined?.w.kind === 'q4') {
      const parts = rows > 1 ? joined.widths : undefined;
      if (rows <= PATHS.gemvMaxRows) this.q4.gemv(rec, x, joined.w.w, joined.y, accumulate, { parts, int8, xq });
      else this.q4.gemm(rec, x, joined.w.w, joined.y, accumulate, parts);
      return;
    }
    for (const p of outs) this.forward(rec, x, p.w, p.y, accumulate, int8);
  }

  /** The joined weight whose parts are `outs`' weights, in order, when their outputs lie back to back too. */
  private joined(outs: readonly Product[]): { w: LinearWeight; y: Tensor; widths: number[] } | null {
    const f = joinedOf.get(outs[0].w);
    if (!f || f.parts.length !== outs.length || outs.some((o, i) => o.w !== f.parts[i])) return null;
    const y0 = outs[0].y;
    let j = this.joinedOut.get(y0);
    if (!j) {
      let n = 0;
      for (const o of outs) {
        if (o.y.buffer !== y0.buffer || o.y.byteOffset !== y0.byteOffset + 4 * n) return null;
        n += o.y.numel;
      }
      const widths = outs.map((o) => o.y.shape[o.y.shape.length - 1]);
      this.joinedOut.set(y0, (j = { y: new Tensor(y0.buffer, [y0.shape[0], n / y0.shape[0]], 'f32', 'projection.joined', y0.byteOffset), widths }));
    }
    return { w: f.w, ...j };
  }

  /** The adapters of `outs` and their wide u when every product has one and they take the LoRA GEMV together on the rows of x. */
  private gemvLora(x: Tensor, outs: readonly Product[], scratch: LoraScratch | undefined): LoraGemvCall | null {
    const rows = x.shape[0];
    if (!scratch || rows < 1 || rows > PATHS.loraGemvMaxRows) return null;
    // Dropout takes src/ops/lora.ts's products (its mask is applied to a copy of x).
    const ps = outs.map((o) => (o.lora?.dropout ? undefined : o.lora?.p));
    if (ps.some((p) => !p)) return null;
    const all = ps as LoraParams[];
    return LoraGemv.groupable(all) ? { ps: all, u: scratch.wide(all.length * all[0].r) } : null;
  }

  /** Give back the tensors of the f32 join whose first part is parts[0] (joinDense; the parts are views of it). */
  static releaseJoined(parts: readonly LinearWeight[]): void {
    const d = joinedDenseOf.get(parts[0]);
    if (d) {
      d.w.release();
      d.b.release();
      joinedDenseOf.delete(parts[0]);
    }
  }

  release(): void {
    for (const r of this.routes.values()) releaseRoute(r);
    this.routes.clear();
    this.tensorCores = null;
  }
}

/** A dense weight's way onto the tensor cores: its int8 copy and the op that made it, or the weight itself and the f16 op that rounds it each call. */
type DenseRoute = { kind: 'int8'; op: MatmulQ4Mma; w: Int8Weight } | { kind: 'f16'; op: MatmulQ4F16; w: Tensor };

function releaseRoute(r: DenseRoute): void {
  if (r.kind === 'int8') for (const t of [r.w.w8, r.w.steps]) t.release();
}

/** The tensor-core options for x in `limbs` int8 limbs (PATHS' tile and K block). */
export function tensorCoreOptions(limbs: 1 | 2, maxRows: number, maxK: number): MatmulQ4MmaOptions {
  return { maxRows, maxK, tile: PATHS.mmaTile[limbs], kBlock: PATHS.mmaKBlock[limbs], limbs };
}
