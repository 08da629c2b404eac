// Q4 weights expanded to f16 for the f16 tensor-core GEMM's W16 variant (shaders/f16_convert.wgsl):
// W [N, K] as it is, for the forward, or transposed to Wᵀ [K, N], for the input gradient: dY·W is
// then the forward's product on Wᵀ, whose staging runs faster than the input gradient's own
// (BENCHMARKS.md, f16 tensor cores).
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import type { Q4Weight } from './matmulQ4';
import { f16BlockedWords } from './productSizes';

/** q4_to_f16_t's tile: rows and columns of W a workgroup. */
const TILE = 64;

export class Q4ToF16 {
  private constructor(
    private readonly plain: Kernel,
    private readonly transposed: Kernel,
  ) {}

  /** Its kernels compile on first use (they need shader-f16). */
  static create(gpu: Gpu): Q4ToF16 {
    return new Q4ToF16(
      gpu.kernelOnUse({ name: 'matmul_q4_f16.q4_to_f16', shader: 'f16_convert', entry: 'q4_to_f16', defines: { BLOCKED: true }, uniforms: { count: 'u32', n: 'u32', k: 'u32' } }),
      gpu.kernelOnUse({ name: 'matmul_q4_f16.q4_to_f16_t', shader: 'f16_convert', entry: 'q4_to_f16_t', defines: { BLOCKED: true, TRANSPOSE: true }, uniforms: { count: 'u32', n: 'u32', k: 'u32' } }),
    );
  }

  /** Words `expand` writes W into: [N][K], or with `transpose` [K][N], in blocks of 32 x 32. */
  static words(w: Q4Weight, transpose: boolean): number {
    return transpose ? f16BlockedWords(w.k, w.n) : f16BlockedWords(w.n, w.k);
  }

  /** `out` (u32, two halves a word) = W rounded to f16 as [N][K], or with `transpose` as Wᵀ [K][N]
   * (N a multiple of 32), in the GEMM's blocks of 32 x 32 (Q4ToF16.words words at least). */
  expand(rec: Recorder, w: Q4Weight, out: Tensor, transpose: boolean): void {
    const words = (w.n * w.k) / 2;
    const need = Q4ToF16.words(w, transpose);
    if (out.dtype !== 'u32' || out.numel < need) throw new ShapeError('q4ToF16', `'${out.label}' must be u32 of at least ${need} words, got ${out.dtype} [${out.shape.join(', ')}]`);
    if (!transpose) {
      rec.dispatch(this.plain, { codes: w.codes, scales: w.scales, w16: out }, grid1d(words, 256), { count: words, n: w.n, k: w.k });
      return;
    }
    if (w.n % 32 !== 0) throw new ShapeError('q4ToF16', `a transposed expansion needs N a multiple of 32, got ${w.n}`);
    rec.dispatch(this.transposed, { codes: w.codes, scales: w.scales, w16: out }, [Math.ceil(w.k / TILE), Math.ceil(w.n / TILE)], { count: words, n: w.n, k: w.k });
  }
}
