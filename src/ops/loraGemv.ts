// LoRA's forward update for a few rows (shaders/lora_gemv.wgsl): y += s·x·Aᵀ·Bᵀ through
// u = x·Aᵀ, as two wide GEMV-shaped dispatches. For decode, where src/ops/lora.ts's two tiled
// GEMMs run one workgroup each; training (many rows, dropout) stays with those.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import { loraScale, type LoraParams } from './lora';

/** Most rows the GEMV path takes. */
export const LORA_GEMV_MAX_ROWS = 8;
const WG = 256;
const UNIFORMS = { rows: 'u32', k: 'u32', n: 'u32', r: 'u32', scale: 'f32' } as const;

export class LoraGemv {
  private constructor(
    private readonly down: Kernel,
    private readonly up: Kernel,
  ) {}

  static async create(gpu: Gpu): Promise<LoraGemv> {
    const [down, up] = await Promise.all(['lora_down', 'lora_up'].map((entry) => gpu.kernel({ shader: 'lora_gemv', entry, uniforms: UNIFORMS })));
    return new LoraGemv(down, up);
  }

  /** Whether `rows` rows take this path. */
  static fits(rows: number): boolean {
    return rows >= 1 && rows <= LORA_GEMV_MAX_ROWS;
  }

  /** y [rows, out] += s·x·Aᵀ·Bᵀ for x [rows, in]; u [rows, r] (or larger) receives x·Aᵀ. */
  forward(rec: Recorder, p: LoraParams, x: Tensor, y: Tensor, u: Tensor): void {
    const op = 'lora_gemv';
    const rows = x.shape[0];
    if (x.dtype !== 'f32' || x.numel !== rows * p.in) throw new ShapeError(op, `${p.name}: x must be f32 [rows, ${p.in}], got ${x.dtype} [${x.shape.join(', ')}]`);
    if (y.dtype !== 'f32' || y.numel !== rows * p.out) throw new ShapeError(op, `${p.name}: y must be f32 [${rows}, ${p.out}], got ${y.dtype} [${y.shape.join(', ')}]`);
    if (u.dtype !== 'f32' || u.numel < rows * p.r) throw new ShapeError(op, `${p.name}: u must be f32 with ${rows * p.r} elements, got ${u.dtype} [${u.shape.join(', ')}]`);
    if (!LoraGemv.fits(rows)) throw new ShapeError(op, `${p.name}: ${rows} rows exceed ${LORA_GEMV_MAX_ROWS}`);
    const uniforms = { rows, k: p.in, n: p.out, r: p.r, scale: loraScale(p) };
    rec.dispatch(this.down, { x, a: p.A, u }, grid1d(rows * p.r, 1), uniforms);
    rec.dispatch(this.up, { b: p.B, y, u_in: u }, grid1d(rows * p.out, WG), uniforms);
  }
}
