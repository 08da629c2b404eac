// Merging a LoRA adapter into its base weight: W' = W + (alpha/r)·B·A, W [out, in].
//
// Dense f32 weights merge exactly (up to f32 rounding), on the CPU (mergeDense, f64 sums) or on
// the GPU (LoraMerger.mergeDense, one GEMM with beta = 1).
//
// A 4-bit weight merges by dequantize → add → requantize (LoraMerger.mergeQ4). That costs a second
// rounding: every merged weight moves to the nearest point of its group's new grid, an error of up
// to half a step, d/2 = max|w_group|/16 (up to d for the clamped code 15 at the far end of the
// range). A trained LoRA delta is usually far smaller than that step, so requantizing rounds most
// of it away: the merged 4-bit model is not the model that was trained. The applied form (4-bit
// base plus the f32 LoRA beside it, as the trainer ran it) is therefore the default for "evaluate
// with the adapter"; merging is for dense weights, or a 4-bit export where speed matters more.
import { ShapeError, Tensor, type Gpu, type Recorder } from '../gpu';
import { Matmul } from '../ops/matmul';
import { MatmulQ4, type Q4Weight } from '../ops/matmulQ4';
import { QuantizeQ4 } from '../ops/quantizeQ4';
import type { LoraSpec } from '../ops/loraParams';
import type { AdapterModule } from './peft';

/** W' = W + sign·(alpha/r)·B·A on the CPU, into a new array (sign −1 unmerges). */
export function mergeDense(w: Float32Array, m: AdapterModule, sign: 1 | -1 = 1): Float32Array {
  if (w.length !== m.out * m.in) throw new ShapeError('mergeDense', `${m.module}: W has ${w.length} values, expected [${m.out}, ${m.in}]`);
  if (m.A.length !== m.r * m.in || m.B.length !== m.out * m.r) throw new ShapeError('mergeDense', `${m.module}: A or B does not match r = ${m.r}`);
  const s = (sign * m.alpha) / m.r;
  const out = new Float32Array(w.length);
  const acc = new Float64Array(m.in);
  for (let o = 0; o < m.out; o++) {
    acc.fill(0);
    for (let j = 0; j < m.r; j++) {
      const b = m.B[o * m.r + j];
      if (b === 0) continue;
      const row = j * m.in;
      for (let i = 0; i < m.in; i++) acc[i] += b * m.A[row + i];
    }
    for (let i = 0; i < m.in; i++) out[o * m.in + i] = w[o * m.in + i] + s * acc[i];
  }
  return out;
}

/** Row ids 0..n−1 (u32), the gather index mergeQ4 dequantizes with; make it once per model. */
export function rowIds(gpu: Gpu, n: number): Tensor {
  return gpu.upload(Uint32Array.from({ length: n }, (_, i) => i), [n], 'u32', 'merge.rowIds');
}

/** Rows per mergeQ4 block when the weight does not fit the workspace: ids views must start 256-byte aligned. */
const BLOCK_ALIGN = 64;

export class LoraMerger {
  private constructor(
    private readonly mm: Matmul,
    private readonly q4: MatmulQ4,
    private readonly quant: QuantizeQ4,
  ) {}

  static async create(gpu: Gpu): Promise<LoraMerger> {
    const [mm, q4, quant] = await Promise.all([Matmul.create(gpu), MatmulQ4.create(gpu), QuantizeQ4.create(gpu)]);
    return new LoraMerger(mm, q4, quant);
  }

  private checkLora(op: string, spec: LoraSpec, A: Tensor, B: Tensor, out: number, inDim: number): void {
    if (spec.out !== out || spec.in !== inDim) throw new ShapeError(op, `${spec.name} is [${spec.out}, ${spec.in}] but the weight is [${out}, ${inDim}]`);
    if (A.dtype !== 'f32' || A.numel !== spec.r * spec.in) throw new ShapeError(op, `${spec.name}: A must be f32 [${spec.r}, ${spec.in}]`);
    if (B.dtype !== 'f32' || B.numel !== spec.out * spec.r) throw new ShapeError(op, `${spec.name}: B must be f32 [${spec.out}, ${spec.r}]`);
  }

  /** W [out, in] f32 += (alpha/r)·B·A, in place. */
  mergeDense(rec: Recorder, w: Tensor, spec: LoraSpec, A: Tensor, B: Tensor): void {
    const op = 'merge.dense';
    if (w.dtype !== 'f32' || w.numel !== spec.out * spec.in) throw new ShapeError(op, `${spec.name}: W must be f32 [${spec.out}, ${spec.in}], got ${w.dtype} [${w.shape.join(', ')}]`);
    this.checkLora(op, spec, A, B, spec.out, spec.in);
    this.mm.gemm(rec, { a: B, b: A, c: w, m: spec.out, n: spec.in, k: spec.r, alpha: spec.alpha / spec.r, beta: 1 });
  }

  /**
   * A 4-bit W [n, k] becomes Q4(deq(W) + (alpha/r)·B·A), in place, block of rows by block of rows
   * through `work` (f32, at least min(n, 64)·k values; more rows per block means fewer passes).
   * `ids` holds 0..n−1 (rowIds). See the top of this file for the extra rounding error.
   */
  mergeQ4(rec: Recorder, w: Q4Weight, spec: LoraSpec, A: Tensor, B: Tensor, work: { ids: Tensor; rows: Tensor }): void {
    const op = 'merge.q4';
    this.checkLora(op, spec, A, B, w.n, w.k);
    const { ids, rows } = work;
    if (ids.dtype !== 'u32' || ids.numel < w.n) throw new ShapeError(op, `ids must be u32 with at least ${w.n} entries (rowIds)`);
    if (rows.dtype !== 'f32') throw new ShapeError(op, `the workspace must be f32, got ${rows.dtype}`);
    const fit = Math.floor(rows.numel / w.k);
    const block = fit >= w.n ? w.n : fit - (fit % BLOCK_ALIGN);
    if (block < 1) throw new ShapeError(op, `the workspace holds ${fit} rows of K = ${w.k}; it needs ${Math.min(w.n, BLOCK_ALIGN)}`);
    for (let r0 = 0; r0 < w.n; r0 += block) {
      const n = Math.min(block, w.n - r0);
      const idView = new Tensor(ids.buffer, [n], 'u32', `${ids.label}[${r0}:]`, ids.byteOffset + r0 * 4);
      const dense = new Tensor(rows.buffer, [n, w.k], 'f32', rows.label, rows.byteOffset);
      this.q4.gather(rec, idView, w, dense);
      this.mm.gemm(rec, { a: B, b: A, c: dense, m: n, n: w.k, k: spec.r, offsetA: r0 * spec.r, alpha: spec.alpha / spec.r, beta: 1 });
      this.quant.quantize(rec, dense, 'f32', w, r0);
    }
  }
}
