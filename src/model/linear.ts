// A frozen linear layer (LinearWeight: 4-bit or f32) applied with the kernel its format needs:
// MatmulQ4 for 4-bit weights, the f32 GEMM otherwise. Both directions the model uses:
//   forward        y (+)= x·Wᵀ          x [T, in], y [T, out]
//   backwardInput  dx (+)= dy·W         (backward through the frozen weight, for training)
//   dense          y (+)= x·Wᵀ + b      (the vision tower's layers with a bias: the f32 GEMM adds
//                                        it; after a 4-bit product, shaders/vision.wgsl's bias_add)
// With tensor cores set (useTensorCores), 4-bit products of more than GEMV_MAX_ROWS rows and the
// input gradients take the K-blocked int8 kernels where a weight's shape suits them (the decoder's
// projections and the LM head's vocabulary chunks alike).
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import { Matmul } from '../ops/matmul';
import { GEMV_MAX_ROWS, MatmulQ4, type Q4Weight } from '../ops/matmulQ4';
import type { MatmulQ4Mma, MmaOutput } from '../ops/matmulQ4Mma';
import type { DenseWeight, LinearWeight } from './weights';

const BIAS_WG = 256;

export class Linear {
  /** The int8 tensor-core GEMM (MatmulQ4Mma, K-blocked) or null: the f32 kernels throughout. */
  private tensorCores: MatmulQ4Mma | null = null;

  private constructor(
    readonly matmul: Matmul,
    readonly q4: MatmulQ4,
    private readonly biasAdd: Kernel,
  ) {}

  static async create(gpu: Gpu, opts: { int8?: boolean } = {}): Promise<Linear> {
    const biasAdd = gpu.kernelOnUse({ shader: 'vision', entry: 'bias_add', constants: { WG: BIAS_WG }, uniforms: { n: 'u32', width: 'u32', rows: 'u32' } });
    return new Linear(await Matmul.create(gpu), await MatmulQ4.create(gpu, { int8: opts.int8 }), biasAdd);
  }

  /** Route 4-bit GEMMs and input gradients through `mma` (a K-blocked MatmulQ4Mma), or, with
   * null, back to the f32 kernels. The caller owns `mma`. */
  useTensorCores(mma: MatmulQ4Mma | null): void {
    if (mma && mma.kBlock === 32) throw new ShapeError('linear', 'the tensor-core path takes a K-blocked MatmulQ4Mma (kBlock 64 or 128)');
    this.tensorCores = mma;
  }

  /** Whether 4-bit GEMMs and input gradients take the tensor cores (useTensorCores). */
  get usesTensorCores(): boolean {
    return this.tensorCores !== null;
  }

  /** `int8`: a 4-bit product of 2..8 rows may quantize x to int8 (MatmulQ4.forward; inference only). */
  forward(rec: Recorder, x: Tensor, w: LinearWeight, y: Tensor, accumulate = false, int8 = false): void {
    if (w.kind !== 'q4') this.matmul.linear(rec, x, w.w, y, { accumulate });
    else this.forwardQ4(rec, x, w.w, y, accumulate, int8);
  }

  /** forward on a 4-bit weight (the LM head's vocabulary chunks come as Q4Weight views). */
  forwardQ4(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor, accumulate = false, int8 = false): void {
    if (this.forwardOnTensorCores(x, w)) this.tensorCores!.gemm(rec, x, w, y, accumulate);
    else this.q4.forward(rec, x, w, y, accumulate, int8);
  }

  /** Whether x·Wᵀ takes the tensor cores: set, W's shape suits them, more than GEMV_MAX_ROWS rows. */
  private forwardOnTensorCores(x: Tensor, w: Q4Weight): boolean {
    return !!this.tensorCores?.takesForward(w) && x.numel / w.k > GEMV_MAX_ROWS;
  }

  /** The 4-bit weights of `ws` when all of them take the tensor cores together on x's rows
   * (forwardShared: one K), else null. */
  tensorCoreWeights(x: Tensor, ws: readonly LinearWeight[]): Q4Weight[] | null {
    const q4 = ws.flatMap((w) => (w.kind === 'q4' && w.in === ws[0].in && this.forwardOnTensorCores(x, w.w) ? [w.w] : []));
    return q4.length === ws.length ? q4 : null;
  }

  /** Products of one x on the tensor cores (weights from tensorCoreWeights): x is quantized once. */
  forwardShared(rec: Recorder, x: Tensor, outs: readonly MmaOutput[], accumulate = false): void {
    if (!this.tensorCores) throw new ShapeError('linear', 'forwardShared needs the tensor cores (useTensorCores)');
    this.tensorCores.gemmShared(rec, x, outs, accumulate);
  }

  backwardInput(rec: Recorder, dy: Tensor, w: LinearWeight, dx: Tensor, accumulate = false): void {
    if (w.kind !== 'q4') this.matmul.linearGradInput(rec, dy, w.w, dx, { accumulate });
    else this.backwardInputQ4(rec, dy, w.w, dx, accumulate);
  }

  /** backwardInput on a 4-bit weight. */
  backwardInputQ4(rec: Recorder, dy: Tensor, w: Q4Weight, dx: Tensor, accumulate = false): void {
    if (this.tensorCores?.takesInput(w)) this.tensorCores.backwardInput(rec, dy, w, dx, accumulate);
    else this.q4.backwardInput(rec, dy, w, dx, accumulate);
  }

  /** y (+)= x·Wᵀ + b for a layer with an optional bias. */
  dense(rec: Recorder, x: Tensor, d: DenseWeight, y: Tensor, accumulate = false): void {
    if (d.kind === 'f32') {
      this.matmul.linear(rec, x, d.w, y, { accumulate, bias: d.b ?? undefined });
      return;
    }
    this.q4.forward(rec, x, d.w, y, accumulate);
    if (!d.b) return;
    if (d.b.numel !== d.out) throw new ShapeError('dense', `bias [${d.b.shape.join(', ')}] of a layer of ${d.out} outputs`);
    this.addBias(rec, y, d.b);
  }

  /** y [rows, width] += b [width] on every row (after a product that has no bias of its own). */
  addBias(rec: Recorder, y: Tensor, b: Tensor): void {
    if (y.numel % b.numel !== 0) throw new ShapeError('dense', `bias [${b.shape.join(', ')}] does not fit y [${y.shape.join(', ')}]`);
    rec.dispatch(this.biasAdd, { bias: b, x: y }, grid1d(y.numel, BIAS_WG), { n: y.numel, width: b.numel, rows: 1 });
  }
}
