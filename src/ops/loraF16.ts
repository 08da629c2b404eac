// LoRA's products on f16 tensor cores, for adapters of large rank (src/ops/lora.ts routes them here
// from LORA_F16_FROM): each product is MatmulQ4F16.gemmF16's y (+)= x·Wᵀ, x scaled per row by a
// power of two and rounded to f16 there, W an f16 operand made per call from the f32 tensor
// (shaders/f16_operand.wgsl: transposed where the product needs it, the reduction padded with
// zeros to a multiple of 32). With x̃ [T, in], A [r, in], B [out, r], s = alpha / r:
//   u = x̃·Aᵀ          x̃ against A
//   y += u·(s·B)ᵀ      u against s·B
//   t = dY·(s·Bᵀ)ᵀ     dY against s·Bᵀ
//   dX += t·A          t against Aᵀ
//   dA += tᵀ·x̃         tᵀ (an f32 copy, T padded) against x̃ᵀ (one copy for the adapters of one x̃)
//   dB += dYᵀ·(s·u)    dYᵀ (an f32 copy) against s·uᵀ
// Gradients and activations go in as x wherever they can (their rows scaled, so that small values
// keep f16's precision); the f16 operands are weights, s·u and x̃, whose magnitudes f16 holds.
import { ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import { Q4_GROUP, rowSlice } from './matmulQ4';
import type { F16Weight, MatmulQ4F16 } from './matmulQ4F16';
import { f16BlockedWords } from './productSizes';
import { loraScale, type LoraParams } from './loraParams';

const TT = 32; // shaders/f16_operand.wgsl's tile
/** x̃ᵀ is rounded to f16 at this power of two (tᵀ times its inverse, the product exact): activations
 * up to 65504 / X_SCALE stay finite, while those below 2^-14 / X_SCALE, which add little to dA, take
 * f16's subnormal steps. */
const X_SCALE = 2 ** -4;
const UNIFORMS = { n: 'u32', k: 'u32', kp: 'u32', scale: 'f32' } as const;

/** k rounded up to the GEMM's reduction step. */
const padded = (k: number) => Math.ceil(k / Q4_GROUP) * Q4_GROUP;

/** An adapter in a group of one x (LoraBackwardMember's fields). */
export interface LoraF16Member {
  p: LoraParams;
  dy: Tensor;
  u: Tensor;
  t: Tensor;
}

export class LoraF16 {
  private constructor(
    private readonly gpu: Gpu,
    private readonly op: MatmulQ4F16,
    private readonly kernels: { f16: Kernel; f16T: Kernel; f32T: Kernel },
  ) {}

  /** On `op`, the f16 tensor-core op of the decoder's products (it holds the workspace of x). */
  static create(gpu: Gpu, op: MatmulQ4F16): LoraF16 {
    const spec = (trans: boolean, out32: boolean) =>
      gpu.kernelOnUse({ name: `lora_f16.operand${trans ? '_t' : ''}${out32 ? '_f32' : ''}`, shader: 'f16_operand', entry: 'operand', defines: { TRANS: trans, OUT32: out32 }, uniforms: UNIFORMS });
    return new LoraF16(gpu, op, { f16: spec(false, false), f16T: spec(true, false), f32T: spec(true, true) });
  }

  /** Whether adapter p runs here: its rank, in and out whole reduction steps of the GEMM. */
  takes(p: LoraParams): boolean {
    return p.r % Q4_GROUP === 0 && p.in % Q4_GROUP === 0 && p.out % Q4_GROUP === 0;
  }

  /** scale·S as an f16 operand [n, kp]: S = src [n, k], or `trans` src [k, n] transposed. The caller releases it. */
  private operand(rec: Recorder, src: Tensor, n: number, k: number, trans: boolean, scale: number, label: string): F16Weight {
    if (src.numel < n * k) throw new ShapeError('loraF16', `${label} holds ${src.numel} values, fewer than ${n} x ${k}`);
    const kp = padded(k);
    const w16 = this.gpu.tensor([f16BlockedWords(n, kp)], 'u32', `lora_f16.${label}`);
    rec.dispatch(trans ? this.kernels.f16T : this.kernels.f16, { src, out: w16 }, [kp / TT, Math.ceil(n / TT)], { n, k, kp, scale });
    return { w16, n, k: kp };
  }

  /** scale·srcᵀ [n, kp] in f32 for src [k, n] (an x of the GEMM), the columns past k zero. The caller releases it. */
  private transposed(rec: Recorder, src: Tensor, n: number, k: number, scale: number, label: string): Tensor {
    if (src.numel < n * k) throw new ShapeError('loraF16', `${label} holds ${src.numel} values, fewer than ${k} x ${n}`);
    const kp = padded(k);
    const out = this.gpu.tensor([n, kp], 'f32', `lora_f16.${label}`);
    rec.dispatch(this.kernels.f32T, { src, out }, [kp / TT, Math.ceil(n / TT)], { n, k, kp, scale });
    return out;
  }

  /** u_g [T, r] = x̃·A_gᵀ for adapters of one x̃ [T, in] (its row scales found once). */
  down(rec: Recorder, x: Tensor, members: readonly { p: LoraParams; u: Tensor }[], T: number): void {
    const outs = members.map(({ p, u }) => ({ w: this.operand(rec, p.A, p.r, p.in, false, 1, 'A'), y: rowSlice(u, 0, T, p.r) }));
    this.op.gemmF16(rec, rowSlice(x, 0, T, members[0].p.in), outs);
    for (const o of outs) o.w.w16.release();
  }

  /** y [T, out] += s·u·Bᵀ. */
  up(rec: Recorder, p: LoraParams, u: Tensor, y: Tensor, T: number): void {
    const b = this.operand(rec, p.B, p.out, p.r, false, loraScale(p), 'sB');
    this.op.gemmF16(rec, rowSlice(u, 0, T, p.r), [{ w: b, y: rowSlice(y, 0, T, p.out) }], true);
    b.w16.release();
  }

  /** t [T, r] = s·dY·B. */
  t(rec: Recorder, p: LoraParams, dy: Tensor, t: Tensor, T: number): void {
    const bt = this.operand(rec, p.B, p.r, p.out, true, loraScale(p), 'sBt');
    this.op.gemmF16(rec, rowSlice(dy, 0, T, p.out), [{ w: bt, y: rowSlice(t, 0, T, p.r) }]);
    bt.w16.release();
  }

  /** dX [T, in] += t·A. */
  dx(rec: Recorder, p: LoraParams, t: Tensor, dx: Tensor, T: number): void {
    const at = this.operand(rec, p.A, p.in, p.r, true, 1, 'At');
    this.op.gemmF16(rec, rowSlice(t, 0, T, p.r), [{ w: at, y: rowSlice(dx, 0, T, p.in) }], true);
    at.w16.release();
  }

  /** dA_g += t_gᵀ·x̃ and dB_g += s_g·dY_gᵀ·u_g for adapters of one x̃ [T, in] (x̃ᵀ made once). */
  grads(rec: Recorder, x: Tensor, members: readonly LoraF16Member[], T: number): void {
    const inF = members[0].p.in;
    const xt = this.operand(rec, x, inF, T, true, X_SCALE, 'xt');
    for (const { p, dy, u, t } of members) {
      const tt = this.transposed(rec, t, p.r, T, 1 / X_SCALE, 'tt');
      this.op.gemmF16(rec, tt, [{ w: xt, y: p.dA }], true);
      tt.release();
      const dyt = this.transposed(rec, dy, p.out, T, 1, 'dyt');
      const ut = this.operand(rec, u, p.r, T, true, loraScale(p), 'sut');
      this.op.gemmF16(rec, dyt, [{ w: ut, y: p.dB }], true);
      dyt.release();
      ut.w16.release();
    }
    xt.w16.release();
  }
}
