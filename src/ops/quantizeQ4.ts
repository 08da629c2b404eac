// Quantize weights to the Q4 format on the GPU (shaders/quantize_q4.wgsl), straight from the
// checkpoint's raw bytes: f32, or f16/bf16 pairs packed in u32 as safetensors stores them.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import { checkQ4Shape, q4Words, Q4_GROUP, type Q4Weight } from './matmulQ4';

export type SourceFormat = 'f32' | 'f16' | 'bf16';

const SRC_CODE: Record<SourceFormat, number> = { f32: 0, f16: 1, bf16: 2 };
const PAIRS_PER_WG = 64;

export class QuantizeQ4 {
  private constructor(private readonly kernels: Record<SourceFormat, Kernel>) {}

  static async create(gpu: Gpu): Promise<QuantizeQ4> {
    const spec = (f: SourceFormat) => ({
      shader: 'quantize_q4',
      entry: 'quantize',
      constants: { SRC: SRC_CODE[f] },
      uniforms: { n: 'u32', k: 'u32', first: 'u32' } as const,
    });
    return new QuantizeQ4({ f32: gpu.kernelOnUse(spec('f32')), f16: gpu.kernelOnUse(spec('f16')), bf16: gpu.kernelOnUse(spec('bf16')) });
  }

  /**
   * Record the quantization of rows [firstRow, firstRow + rows) of W [w.n, w.k] into `w`'s codes
   * and scales. `src` holds those rows' bytes (any 4-byte dtype: f32 values, or u32 words each
   * holding two f16/bf16 values); by default all of W. A weight can so be quantized block by
   * block as its checkpoint streams in; a block must start on an even group (firstRow·K/32 even,
   * always true for K a multiple of 64). `src` may be released once the recorder is submitted.
   */
  quantize(rec: Recorder, src: Tensor, format: SourceFormat, w: Q4Weight, firstRow = 0): void {
    const op = `quantizeQ4(${format})`;
    checkQ4Shape(op, w.n, w.k);
    const words = q4Words(w.n, w.k);
    if (w.codes.dtype !== 'u32' || w.codes.numel !== words.codes || w.scales.dtype !== 'u32' || w.scales.numel !== words.scales) {
      throw new ShapeError(op, `destination must hold ${words.codes} code and ${words.scales} scale u32 words`);
    }
    if (src.dtype !== 'u32' && src.dtype !== 'f32') throw new ShapeError(op, `source bytes must be bound as u32 or f32, got ${src.dtype}`);
    const rowWords = format === 'f32' ? w.k : w.k / 2;
    const rows = src.numel / rowWords;
    if (!Number.isInteger(rows) || rows < 1 || firstRow + rows > w.n) {
      throw new ShapeError(op, `the source has ${src.numel} words, not whole ${format} rows of K = ${w.k} within the weight's ${w.n} rows from row ${firstRow}`);
    }
    const first = (firstRow * w.k) / Q4_GROUP;
    if (!Number.isInteger(firstRow) || first % 2 !== 0) {
      throw new ShapeError(op, `a block must start on an even group; row ${firstRow} starts on group ${first}`);
    }
    const pairs = Math.ceil((rows * w.k) / Q4_GROUP / 2);
    rec.dispatch(this.kernels[format], { src, codes: w.codes, scales: w.scales }, grid1d(pairs, PAIRS_PER_WG), {
      n: rows,
      k: w.k,
      first,
    });
  }
}
