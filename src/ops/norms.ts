// RMSNorm (forward, backward to x) and LayerNorm (forward, backward to x) over the rows of [rows, n] f32 tensors.
//
// The per-head q/k norm is the same op on a [T·heads, head_dim] view: `q.reshape([T * H, D])`.
// The backward needs x (the norm's input) and the per-row rstd [rows] saved by the forward; it
// writes dx, or adds it into dx (`accumulate`) when dx is the residual stream's gradient.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

const WG = 128;
/** The vec4 forward: rows of at least 4·VEC4_WG elements with n % 4 == 0 (the hidden rows). */
const VEC4_WG = 256;
const UNIFORMS = { rows: 'u32', n: 'u32', eps: 'f32' } as const;

export class Norms {
  private constructor(
    private readonly rmsK: Kernel,
    private readonly rmsSaveK: Kernel,
    private readonly rmsBwdK: Kernel,
    private readonly rmsBwdAccK: Kernel,
    private readonly layerK: Kernel,
    private readonly rmsVec4K: Kernel,
    private readonly rmsVec4SaveK: Kernel,
    private readonly layerBwdK: Kernel,
    private readonly layerBwdAccK: Kernel,
  ) {}

  static async create(gpu: Gpu): Promise<Norms> {
    const spec = (entry: string, defines: Record<string, boolean> = {}, wg = WG) => ({ shader: 'norms', entry, defines, constants: { WG: wg }, uniforms: UNIFORMS });
    const ks = [
      gpu.kernelOnUse(spec('rmsnorm_fwd')),
      gpu.kernelOnUse(spec('rmsnorm_fwd', { SAVE_RSTD: true })),
      gpu.kernelOnUse(spec('rmsnorm_bwd')),
      gpu.kernelOnUse(spec('rmsnorm_bwd', { ACCUMULATE: true })),
      gpu.kernelOnUse(spec('layernorm_fwd')),
      gpu.kernelOnUse(spec('rmsnorm_fwd_vec4', {}, VEC4_WG)),
      gpu.kernelOnUse(spec('rmsnorm_fwd_vec4', { SAVE_RSTD: true }, VEC4_WG)),
      gpu.kernelOnUse(spec('layernorm_bwd')),
      gpu.kernelOnUse(spec('layernorm_bwd', { ACCUMULATE: true })),
    ];
    return new Norms(ks[0], ks[1], ks[2], ks[3], ks[4], ks[5], ks[6], ks[7], ks[8]);
  }

  /** y = x·rsqrt(mean(x²)+eps)·w per row; `rstd` [rows], when given, receives rsqrt(mean(x²)+eps). */
  rmsnorm(rec: Recorder, x: Tensor, weight: Tensor, y: Tensor, eps: number, rstd?: Tensor): void {
    const op = 'rmsnorm';
    const rows = this.checkRows(op, x, weight, { y });
    if (rstd) this.checkRstd(op, rstd, rows);
    const n = weight.numel;
    const uniforms = { rows, n, eps };
    if (n % 4 === 0 && n >= 4 * VEC4_WG) {
      const bind = { x4: x, weight4: weight, y4: y };
      if (rstd) rec.dispatch(this.rmsVec4SaveK, { ...bind, rstd }, grid1d(rows, 1), uniforms);
      else rec.dispatch(this.rmsVec4K, bind, grid1d(rows, 1), uniforms);
    } else if (rstd) rec.dispatch(this.rmsSaveK, { x, weight, y, rstd }, grid1d(rows, 1), uniforms);
    else rec.dispatch(this.rmsK, { x, weight, y }, grid1d(rows, 1), uniforms);
  }

  /** dx (=, or += with accumulate) of rmsnorm, from dy, its input x, w and the rstd it saved. */
  rmsnormBackward(rec: Recorder, dy: Tensor, x: Tensor, weight: Tensor, rstd: Tensor, dx: Tensor, accumulate = false): void {
    const op = 'rmsnorm_backward';
    const rows = this.checkRows(op, x, weight, { dy, dx });
    this.checkRstd(op, rstd, rows);
    rec.dispatch(accumulate ? this.rmsBwdAccK : this.rmsBwdK, { dy, x, weight, rstd, dx }, grid1d(rows, 1), { rows, n: weight.numel, eps: 0 });
  }

  /** y = (x − mean)·rsqrt(var + eps)·w + b per row (biased variance, as torch.nn.LayerNorm). */
  layernorm(rec: Recorder, x: Tensor, weight: Tensor, bias: Tensor, y: Tensor, eps: number): void {
    const op = 'layernorm';
    const rows = this.checkRows(op, x, weight, { y });
    if (bias.dtype !== 'f32' || bias.numel !== weight.numel) throw new ShapeError(op, `bias must be f32 [${weight.numel}], got ${bias.dtype} [${bias.shape.join(', ')}]`);
    rec.dispatch(this.layerK, { x, weight, bias, y }, grid1d(rows, 1), { rows, n: weight.numel, eps });
  }

  /** dx (=, or += with accumulate) of layernorm, from dy, its input x and w (the row statistics are recomputed). */
  layernormBackward(rec: Recorder, dy: Tensor, x: Tensor, weight: Tensor, dx: Tensor, eps: number, accumulate = false): void {
    const op = 'layernorm_backward';
    const rows = this.checkRows(op, x, weight, { dy, dx });
    rec.dispatch(accumulate ? this.layerBwdAccK : this.layerBwdK, { dy, x, weight, dx }, grid1d(rows, 1), { rows, n: weight.numel, eps });
  }

  /** x is [..., n] with n = weight.numel; every other tensor matches x's shape. Returns the row count. */
  private checkRows(op: string, x: Tensor, weight: Tensor, others: Record<string, Tensor>): number {
    const n = weight.numel;
    for (const [name, t] of Object.entries({ x, weight, ...others })) if (t.dtype !== 'f32') throw new ShapeError(op, `${name} must be f32, got ${t.dtype}`);
    if (weight.shape.length !== 1 || n < 1) throw new ShapeError(op, `weight must be [n], got [${weight.shape.join(', ')}]`);
    if (x.shape[x.shape.length - 1] !== n) throw new ShapeError(op, `x [${x.shape.join(', ')}] does not end in the weight's width ${n}`);
    for (const [name, t] of Object.entries(others)) {
      if (t.numel !== x.numel) throw new ShapeError(op, `${name} has ${t.numel} elements, x has ${x.numel}`);
    }
    return x.numel / n;
  }

  private checkRstd(op: string, rstd: Tensor, rows: number): void {
    if (rstd.dtype !== 'f32' || rstd.numel !== rows) throw new ShapeError(op, `rstd must be f32 with ${rows} elements, got ${rstd.dtype} [${rstd.shape.join(', ')}]`);
  }
}
