// Dense weights held in 16-bit halves (shaders/halves.wgsl): the vision tower keeps a bf16 or f16
// checkpoint's matrices as they are (half of f32's bytes), and these convert whole tensors where a
// consumer needs f32 (the f32 GEMM, a product at a time; the tensor-core copies), or where random
// weights stand in for a bf16 checkpoint.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

export class Halves {
  private readonly kernels = new Map<string, Kernel>();

  constructor(private readonly gpu: Gpu) {}

  /** An f32 copy of `w` (bf16 or f16), exact; the caller releases it. */
  widen(rec: Recorder, w: Tensor): Tensor {
    if (w.dtype !== 'bf16' && w.dtype !== 'f16') throw new ShapeError('halves.widen', `'${w.label}' must be bf16 or f16, got ${w.dtype}`);
    const out = this.gpu.tensor(w.shape, 'f32', `${w.label} (f32)`);
    this.run(rec, `widen_${w.dtype}`, 'widen_halves', { BF16: w.dtype === 'bf16' }, w, out);
    return out;
  }

  /** A bf16 copy of `x` (f32), rounded to nearest even; the caller releases `x`. */
  toBf16(rec: Recorder, x: Tensor, label = x.label): Tensor {
    if (x.dtype !== 'f32') throw new ShapeError('halves.toBf16', `'${x.label}' must be f32, got ${x.dtype}`);
    const out = this.gpu.tensor(x.shape, 'bf16', label);
    this.run(rec, 'narrow_bf16', 'narrow_bf16', { NARROW: true }, x, out);
    return out;
  }

  private run(rec: Recorder, name: string, entry: string, defines: Record<string, boolean>, src: Tensor, dst: Tensor): void {
    let k = this.kernels.get(name);
    if (!k) this.kernels.set(name, (k = this.gpu.kernelNow({ name: `halves.${name}`, shader: 'halves', entry, defines, uniforms: { count: 'u32' } })));
    rec.dispatch(k, { src, dst }, grid1d(Math.ceil(src.numel / 2), 256), { count: src.numel });
  }
}
