// LoRA's forward update for a few rows in one dispatch (shaders/lora_gemv.wgsl): y += s·x·Aᵀ·Bᵀ,
// without keeping u = x·Aᵀ. For decode, where src/ops/lora.ts's two GEMMs run one small
// workgroup each; training keeps u for the backward and stays with those.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import { loraScale, type LoraParams } from './lora';

/** Most rows and largest rank the kernel takes. */
export const LORA_GEMV_MAX_ROWS = 8;
export const LORA_GEMV_MAX_RANK = 64;
const WG = 256;

export class LoraGemv {
  private constructor(private readonly kernel: Kernel) {}

  static async create(gpu: Gpu): Promise<LoraGemv> {
    return new LoraGemv(await gpu.kernel({ shader: 'lora_gemv', entry: 'lora_gemv', uniforms: { rows: 'u32', k: 'u32', n: 'u32', r: 'u32', scale: 'f32' } }));
  }

  /** Whether `rows` rows of an adapter of rank r fit the kernel. */
  static fits(rows: number, r: number): boolean {
    return rows >= 1 && rows <= LORA_GEMV_MAX_ROWS && r <= LORA_GEMV_MAX_RANK;
  }

  /** y [rows, out] += s·x·Aᵀ·Bᵀ for x [rows, in]. */
  forward(rec: Recorder, p: LoraParams, x: Tensor, y: Tensor): void {
    const op = 'lora_gemv';
    const rows = x.shape[0];
    if (x.dtype !== 'f32' || x.numel !== rows * p.in) throw new ShapeError(op, `${p.name}: x must be f32 [rows, ${p.in}], got ${x.dtype} [${x.shape.join(', ')}]`);
    if (y.dtype !== 'f32' || y.numel !== rows * p.out) throw new ShapeError(op, `${p.name}: y must be f32 [${rows}, ${p.out}], got ${y.dtype} [${y.shape.join(', ')}]`);
    if (!LoraGemv.fits(rows, p.r)) throw new ShapeError(op, `${p.name}: ${rows} rows at rank ${p.r} exceed ${LORA_GEMV_MAX_ROWS} rows or rank ${LORA_GEMV_MAX_RANK}`);
    rec.dispatch(this.kernel, { x, a: p.A, b: p.B, y }, grid1d(p.out, WG), { rows, k: p.in, n: p.out, r: p.r, scale: loraScale(p) });
  }
}
