// RMSNorm (forward, backward to x) and LayerNorm (forward, backward to x) over the rows of [rows, n] f32 tensors.
//
// The per-head q/k norm is the same op on a [T·heads, head_dim] view: `q.reshape([T * H, D])`.
// The backward needs x (the norm's input) and the per-row rstd [rows] saved by the forward; it
// writes dx, or adds it into dx (`accumulate`) when dx is the residual stream's gradient.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

const WG = 128;
/** The vec4 kernels: rows of at least 4·VEC4_WG elements with n % 4 == 0 (the hidden rows). */
const VEC4_WG = 256;
/** Narrower rows with n % 4 == 0 (the q/k norms' head_dim) on the vec4 kernels, ROWS_PER_WG a
 * workgroup of VEC4_WG threads (shaders/norms.wgsl's RT = VEC4_WG / ROWS_PER_WG threads a row). */
const ROWS_PER_WG = 8;
const UNIFORMS = { rows: 'u32', n: 'u32', eps: 'f32' } as const;

/** How an RMSNorm kernel covers rows of n: one workgroup a row (scalar or vec4), or several over vec4s (rows). */
type Layout = 'scalar' | 'vec4' | 'rows';

function layoutOf(n: number): Layout {
  if (n % 4 !== 0) return 'scalar';
  return n >= 4 * VEC4_WG ? 'vec4' : 'rows';
}

/** Each RMSNorm entry by layout, and its variant (SAVE_RSTD forward, ACCUMULATE backward). */
type RmsKernels = Record<Layout, { plain: Kernel; variant: Kernel }>;

export class Norms {
  private constructor(
    private readonly rmsFwd: RmsKernels,
    /** rmsnorm_fwd_vec4 on x + add (ADD), by layout. */
    private readonly rmsFwdAdd: Record<'vec4' | 'rows', Kernel>,
    private readonly rmsBwd: RmsKernels,
    private readonly layerK: Kernel,
    private readonly layerBwdK: Kernel,
    private readonly layerBwdAccK: Kernel,
  ) {}

  static async create(gpu: Gpu): Promise<Norms> {
    const spec = (entry: string, defines: Record<string, boolean> = {}, constants: Record<string, number> = { WG }, name = `norms.${entry}`) => ({ name, shader: 'norms', entry, defines, constants, uniforms: UNIFORMS });
    const family = (entry: string, variant: string): RmsKernels => {
      const pair = (e: string, constants: Record<string, number>, name: string) => ({ plain: gpu.kernelOnUse(spec(e, {}, constants, name)), variant: gpu.kernelOnUse(spec(e, { [variant]: true }, constants, name)) });
      return {
        scalar: pair(entry, { WG }, `norms.${entry}`),
        vec4: pair(`${entry}_vec4`, { WG: VEC4_WG }, `norms.${entry}_vec4`),
        // The vec4 kernels, several rows a workgroup (named apart in profiles).
        rows: pair(`${entry}_vec4`, { WG: VEC4_WG, RT: VEC4_WG / ROWS_PER_WG }, `norms.${entry}_rows`),
      };
    };
    return new Norms(
      family('rmsnorm_fwd', 'SAVE_RSTD'),
      {
        vec4: gpu.kernelOnUse(spec('rmsnorm_fwd_vec4', { ADD: true }, { WG: VEC4_WG }, 'norms.rmsnorm_fwd_add_vec4')),
        rows: gpu.kernelOnUse(spec('rmsnorm_fwd_vec4', { ADD: true }, { WG: VEC4_WG, RT: VEC4_WG / ROWS_PER_WG }, 'norms.rmsnorm_fwd_add_rows')),
      },
      family('rmsnorm_bwd', 'ACCUMULATE'),
      gpu.kernelOnUse(spec('layernorm_fwd')),
      gpu.kernelOnUse(spec('layernorm_bwd')),
      gpu.kernelOnUse(spec('layernorm_bwd', { ACCUMULATE: true })),
    );
  }

  /** Whether rmsnorm takes `add` on rows of n (n % 4 == 0: the vec4 kernels). */
  static takesAdd(n: number): boolean {
    return layoutOf(n) !== 'scalar';
  }

  /**
   * y = x·rsqrt(mean(x²)+eps)·w per row; `rstd` [rows], when given, receives rsqrt(mean(x²)+eps).
   * With `add` (x's shape, rows where takesAdd): the norm of x + add, x left as it is (no rstd).
   */
  rmsnorm(rec: Recorder, x: Tensor, weight: Tensor, y: Tensor, eps: number, rstd?: Tensor, add?: Tensor | null): void {
    const op = 'rmsnorm';
    const rows = this.checkRows(op, x, weight, add ? { y, add } : { y });
    if (rstd) this.checkRstd(op, rstd, rows);
    const n = weight.numel;
    const layout = layoutOf(n);
    if (add) {
      if (rstd || layout === 'scalar') throw new ShapeError(op, `add takes rows of n % 4 == 0 and no rstd; got n ${n}${rstd ? ' with rstd' : ''}`);
      rec.dispatch(this.rmsFwdAdd[layout], { x4: x, weight4: weight, y4: y, add4: add }, this.grid(layout, rows), { rows, n, eps });
      return;
    }
    const k = this.rmsFwd[layout];
    const bind: Record<string, Tensor> = layout === 'scalar' ? { x, weight, y } : { x4: x, weight4: weight, y4: y };
    rec.dispatch(rstd ? k.variant : k.plain, rstd ? { ...bind, rstd } : bind, this.grid(layout, rows), { rows, n, eps });
  }

  /** dx (=, or += with accumulate) of rmsnorm, from dy, its input x, w and the rstd it saved. */
  rmsnormBackward(rec: Recorder, dy: Tensor, x: Tensor, weight: Tensor, rstd: Tensor, dx: Tensor, accumulate = false): void {
    const op = 'rmsnorm_backward';
    const rows = this.checkRows(op, x, weight, { dy, dx });
    this.checkRstd(op, rstd, rows);
    const n = weight.numel;
    const layout = layoutOf(n);
    const k = this.rmsBwd[layout];
    const bind: Record<string, Tensor> = layout === 'scalar' ? { dy, x, weight, dx } : { dy4: dy, x4: x, weight4: weight, dx4: dx };
    rec.dispatch(accumulate ? k.variant : k.plain, { ...bind, rstd }, this.grid(layout, rows), { rows, n, eps: 0 });
  }

  /** Workgroups for `rows` rows: one a row, or ROWS_PER_WG a workgroup. */
  private grid(layout: Layout, rows: number): [number, number] {
    return grid1d(rows, layout === 'rows' ? ROWS_PER_WG : 1);
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
