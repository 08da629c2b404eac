// Q4 weights expanded to f16 for the f16 tensor-core GEMM's W16 variant (shaders/f16_convert.wgsl):
// W [N, K] as it is, for the forward, or transposed to Wᵀ [K, N], for the input gradient: dY·W is
// then the forward's product on Wᵀ, whose staging runs faster than the input gradient's own
// (BENCHMARKS.md, f16 tensor cores). Either may go on for a few more columns holding a LoRA
// factor (Q4Extension), so that the GEMM adds the adapter's update, or its part of dX, as more of
// its reduction.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import type { Q4Weight } from './matmulQ4';
import { f16BlockedWords } from './productSizes';

/** q4_to_f16_t's tile: rows and columns of W a workgroup. */
const TILE = 64;

/** A LoRA factor written past W's columns: `e` more columns (a multiple of 32). Forward: B [N, r]
 * at columns off .. off + r of them (r 0: zeros only); transposed: A [r, K], Aᵀ at columns 0 .. r
 * (off 0). Zeros elsewhere. */
export interface Q4Extension {
  factor: Tensor;
  e: number;
  r: number;
  off: number;
}

const UNIFORMS = { count: 'u32', n: 'u32', k: 'u32' } as const;
const EXT_UNIFORMS = { ...UNIFORMS, e: 'u32', r: 'u32', off: 'u32' } as const;

export class Q4ToF16 {
  private constructor(
    private readonly plain: Kernel,
    private readonly transposed: Kernel,
    private readonly plainExt: Kernel,
    private readonly transposedExt: Kernel,
  ) {}

  /** Its kernels compile on first use (they need shader-f16). */
  static create(gpu: Gpu): Q4ToF16 {
    const kernel = (transpose: boolean, ext: boolean) =>
      gpu.kernelOnUse({
        name: `matmul_q4_f16.q4_to_f16${transpose ? '_t' : ''}${ext ? '_ext' : ''}`,
        shader: 'f16_convert',
        entry: transpose ? 'q4_to_f16_t' : 'q4_to_f16',
        defines: { BLOCKED: true, Q4: true, TRANSPOSE: transpose, EXT: ext },
        uniforms: ext ? EXT_UNIFORMS : UNIFORMS,
      });
    return new Q4ToF16(kernel(false, false), kernel(true, false), kernel(false, true), kernel(true, true));
  }

  /** Words `expand` writes W into: [N][K + e], or with `transpose` [K][N + e], in blocks of 32 x 32. */
  static words(w: Q4Weight, transpose: boolean, e = 0): number {
    return transpose ? f16BlockedWords(w.k, w.n + e) : f16BlockedWords(w.n, w.k + e);
  }

  /** `out` (u32, two halves a word) = W rounded to f16 as [N][K], or with `transpose` as Wᵀ [K][N]
   * (N a multiple of 32), in the GEMM's blocks of 32 x 32 (Q4ToF16.words words at least); with
   * `ext`, each row goes on with its columns of the factor. */
  expand(rec: Recorder, w: Q4Weight, out: Tensor, transpose: boolean, ext?: Q4Extension): void {
    const op = 'q4ToF16';
    const codeWords = (w.n * w.k) / 8;
    const e = ext?.e ?? 0;
    const need = Q4ToF16.words(w, transpose, e);
    if (out.dtype !== 'u32' || out.numel < need) throw new ShapeError(op, `'${out.label}' must be u32 of at least ${need} words, got ${out.dtype} [${out.shape.join(', ')}]`);
    if (ext) checkExtension(op, w, transpose, ext);
    const extU: Record<string, number> = ext ? { e, r: ext.r, off: ext.off } : {};
    const extB: Record<string, Tensor> = ext ? { factor: ext.factor } : {};
    if (!transpose) {
      rec.dispatch(ext ? this.plainExt : this.plain, { codes: w.codes, scales: w.scales, w16: out, ...extB }, grid1d(codeWords + (w.n * e) / 8, 256), { count: codeWords, n: w.n, k: w.k, ...extU });
      return;
    }
    if (w.n % 32 !== 0) throw new ShapeError(op, `a transposed expansion needs N a multiple of 32, got ${w.n}`);
    // With an extension, one more row of workgroups writes it.
    const rowsOfGroups = Math.ceil(w.n / TILE) + (ext ? 1 : 0);
    rec.dispatch(ext ? this.transposedExt : this.transposed, { codes: w.codes, scales: w.scales, w16: out, ...extB }, [Math.ceil(w.k / TILE), rowsOfGroups], { count: codeWords, n: w.n, k: w.k, ...extU });
  }
}

function checkExtension(op: string, w: Q4Weight, transpose: boolean, x: Q4Extension): void {
  const { factor, e, r, off } = x;
  if (!(Number.isInteger(e) && e > 0 && e % 32 === 0)) throw new ShapeError(op, `the extension's width must be a positive multiple of 32, got ${e}`);
  if (!(Number.isInteger(r) && r >= (transpose ? 1 : 0) && Number.isInteger(off) && off >= 0 && off + r <= e)) throw new ShapeError(op, `a factor of rank ${r} at column ${off} does not fit an extension of ${e}`);
  if (transpose && off !== 0) throw new ShapeError(op, 'a transposed extension starts its factor at column 0');
  const need = r * (transpose ? w.k : w.n);
  if (factor.dtype !== 'f32' || factor.numel < need) throw new ShapeError(op, `the factor '${factor.label}' must be f32 of ${need} elements (${transpose ? `A [${r}, ${w.k}]` : `B [${w.n}, ${r}]`}), got ${factor.dtype} [${factor.shape.join(', ')}]`);
}
