// f32 states kept for a training backward held in f16 (shaders/activation_f16.wgsl): half the
// bytes of the kept hidden states, each value rounded once (relative error at most 2^-11) and
// expanded back exactly. Values beyond f16's finite range are reported, never stored as inf.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

const WG = 256;

/** f16's largest finite value: a kept state with |x| above it cannot be stored in f16. */
export const F16_MAX = 65504;

export class ActivationF16 {
  private constructor(
    private readonly gpu: Gpu,
    private readonly toF16: Kernel,
    private readonly fromF16: Kernel,
  ) {}

  /** The kernels compile at their first use; using them on a device without shader-f16 throws MissingFeatureError. */
  static create(gpu: Gpu): ActivationF16 {
    const spec = (entry: string) => ({ shader: 'activation_f16', entry, constants: { WG }, uniforms: { pairs: 'u32', slot: 'u32' } as const });
    return new ActivationF16(gpu, gpu.kernelOnUse(spec('to_f16')), gpu.kernelOnUse(spec('from_f16')));
  }

  /**
   * h16 = h rounded to f16 (h f32, h16 f16, one even element count). Where a value passes
   * F16_MAX, the largest such |h| is written (as f32 bits, atomically) to range[slot] — range is
   * u32, cleared by the caller — and that value is stored clamped.
   */
  pack(rec: Recorder, h: Tensor, h16: Tensor, range: Tensor, slot: number): void {
    const op = 'activationF16.pack';
    this.check(op, h, h16);
    if (range.dtype !== 'u32' || !(Number.isInteger(slot) && slot >= 0 && slot < range.numel)) throw new ShapeError(op, `slot ${slot} outside the u32 range buffer [${range.numel}]`);
    const pairs = h.numel / 2;
    rec.dispatch(this.toF16, { h, h16_out: h16, range }, grid1d(pairs, WG), { pairs, slot });
  }

  /** h = h16 expanded to f32 (exact). */
  unpack(rec: Recorder, h16: Tensor, h: Tensor): void {
    this.check('activationF16.unpack', h, h16);
    const pairs = h.numel / 2;
    rec.dispatch(this.fromF16, { h16, h_out: h }, grid1d(pairs, WG), { pairs, slot: 0 });
  }

  private check(op: string, h: Tensor, h16: Tensor): void {
    this.gpu.require('shader-f16', 'keeping activations in f16 (activation_storage f16)');
    if (h.dtype !== 'f32' || h16.dtype !== 'f16') throw new ShapeError(op, `an f32 and an f16 tensor expected, got ${h.dtype} '${h.label}' and ${h16.dtype} '${h16.label}'`);
    if (h.numel !== h16.numel || h.numel % 2 !== 0) throw new ShapeError(op, `'${h.label}' has ${h.numel} elements and '${h16.label}' ${h16.numel}; one even count expected`);
  }
}
