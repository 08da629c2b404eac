// y += alpha·x and y = alpha·x over flat f32 tensors (residual adds, gradient accumulation).
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

const WG = 256;

export class Elementwise {
  private constructor(
    private readonly axpyK: Kernel,
    private readonly scaleK: Kernel,
  ) {}

  static async create(gpu: Gpu): Promise<Elementwise> {
    const spec = (entry: string) => ({
      shader: 'elementwise',
      entry,
      constants: { WG },
      uniforms: { n: 'u32', alpha: 'f32' } as const,
    });
    return new Elementwise(gpu.kernelOnUse(spec('axpy')), gpu.kernelOnUse(spec('scale')));
  }

  private check(name: string, x: Tensor, y: Tensor): void {
    if (x.dtype !== 'f32' || y.dtype !== 'f32') throw new ShapeError(name, `f32 tensors expected, got ${x.dtype} and ${y.dtype}`);
    if (x.numel !== y.numel) throw new ShapeError(name, `x has ${x.numel} elements, y has ${y.numel}`);
  }

  /** y ← y + alpha·x */
  axpy(rec: Recorder, x: Tensor, y: Tensor, alpha = 1): void {
    this.check('axpy', x, y);
    rec.dispatch(this.axpyK, { x, y }, grid1d(x.numel, WG), { n: x.numel, alpha });
  }

  /** y ← alpha·x */
  scale(rec: Recorder, x: Tensor, y: Tensor, alpha: number): void {
    this.check('scale', x, y);
    rec.dispatch(this.scaleK, { x, y }, grid1d(x.numel, WG), { n: x.numel, alpha });
  }
}
