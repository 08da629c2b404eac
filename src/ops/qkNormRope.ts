// Per-head q/k RMSNorm and RoPE of q and k in one dispatch (shaders/qk_norm_rope.wgsl): the four
// dispatches norms.rmsnorm ×2 + rope.apply ×2 of the attention block, for inference.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

const WG = 64;

export interface QkNormRopeArgs {
  /** q_proj and k_proj outputs [T, Hq·D], [T, Hkv·D]. */
  qRaw: Tensor;
  kRaw: Tensor;
  /** q_norm and k_norm weights [D]. */
  qWeight: Tensor;
  kWeight: Tensor;
  /** The rope table of the rows [T, D/2, 2] (Rope.table). */
  cs: Tensor;
  /** Outputs [T, Hq·D], [T, Hkv·D]. */
  q: Tensor;
  k: Tensor;
  hq: number;
  hkv: number;
  eps: number;
}

export class QkNormRope {
  private constructor(private readonly kernel: Kernel) {}

  static async create(gpu: Gpu): Promise<QkNormRope> {
    return new QkNormRope(await gpu.kernel({ shader: 'qk_norm_rope', entry: 'qk_norm_rope', constants: { WG }, uniforms: { rows: 'u32', hq: 'u32', hkv: 'u32', half: 'u32', eps: 'f32' } }));
  }

  apply(rec: Recorder, a: QkNormRopeArgs): void {
    const op = 'qk_norm_rope';
    const D = a.qWeight.numel;
    const T = a.qRaw.shape[0];
    if (D % 2 !== 0 || a.kWeight.numel !== D) throw new ShapeError(op, `q/k norm weights must both be [D] with D even, got ${a.qWeight.numel} and ${a.kWeight.numel}`);
    const want: [string, Tensor, number][] = [
      ['qRaw', a.qRaw, T * a.hq * D],
      ['q', a.q, T * a.hq * D],
      ['kRaw', a.kRaw, T * a.hkv * D],
      ['k', a.k, T * a.hkv * D],
      ['cs', a.cs, T * D],
    ];
    for (const [name, t, n] of want) {
      if (t.dtype !== 'f32' || t.numel !== n) throw new ShapeError(op, `${name} must be f32 with ${n} elements, got ${t.dtype} [${t.shape.join(', ')}]`);
    }
    rec.dispatch(
      this.kernel,
      { q_raw: a.qRaw, k_raw: a.kRaw, q_weight: a.qWeight, k_weight: a.kWeight, table: a.cs, q: a.q, k: a.k },
      grid1d(T * (a.hq + a.hkv), 1),
      { rows: T, hq: a.hq, hkv: a.hkv, half: D / 2, eps: a.eps },
    );
  }
}
