// Activations over f32 tensors of any shape (elementwise): SwiGLU forward and backward for the
// decoder MLP, tanh-GELU (vision blocks) and exact (erf) GELU (vision mergers) forward and backward
// (the backwards for LoRA on the vision tower).
// Outputs are separate tensors: WebGPU forbids binding one buffer as both input and output.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

const WG = 256;

export class Activations {
  private constructor(
    private readonly swigluK: Kernel,
    private readonly swigluBwdK: Kernel,
    private readonly geluTanhK: Kernel,
    private readonly geluErfK: Kernel,
    private readonly geluErfBwdK: Kernel,
    private readonly geluTanhBwdK: Kernel,
  ) {}

  static async create(gpu: Gpu): Promise<Activations> {
    const spec = (entry: string) => ({ shader: 'activations', entry, constants: { WG }, uniforms: { n: 'u32' } as const });
    const ks = ['swiglu_fwd', 'swiglu_bwd', 'gelu_tanh_fwd', 'gelu_erf_fwd', 'gelu_erf_bwd', 'gelu_tanh_bwd'].map((e) => gpu.kernelOnUse(spec(e)));
    return new Activations(ks[0], ks[1], ks[2], ks[3], ks[4], ks[5]);
  }

  /** h = silu(gate)·up, e.g. gate and up [T, intermediate]. */
  swiglu(rec: Recorder, gate: Tensor, up: Tensor, h: Tensor): void {
    const n = check('swiglu', { gate, up, h });
    rec.dispatch(this.swigluK, { gate, up, h }, grid1d(n, WG), { n });
  }

  /** dgate and dup from dh and the forward's inputs. */
  swigluBackward(rec: Recorder, gate: Tensor, up: Tensor, dh: Tensor, dgate: Tensor, dup: Tensor): void {
    const n = check('swiglu_backward', { gate, up, dh, dgate, dup });
    rec.dispatch(this.swigluBwdK, { gate, up, dh, dgate, dup }, grid1d(n, WG), { n });
  }

  /** y = gelu_pytorch_tanh(x). */
  geluTanh(rec: Recorder, x: Tensor, y: Tensor): void {
    const n = check('gelu_tanh', { x, y });
    rec.dispatch(this.geluTanhK, { x, y }, grid1d(n, WG), { n });
  }

  /** y = x·Φ(x), torch.nn.GELU() with approximate='none'. */
  geluErf(rec: Recorder, x: Tensor, y: Tensor): void {
    const n = check('gelu_erf', { x, y });
    rec.dispatch(this.geluErfK, { x, y }, grid1d(n, WG), { n });
  }

  /** dx = dy·gelu_tanh'(x), from the forward's input x. */
  geluTanhBackward(rec: Recorder, x: Tensor, dy: Tensor, dx: Tensor): void {
    const n = check('gelu_tanh_backward', { x, dy, dx });
    rec.dispatch(this.geluTanhBwdK, { x, dh: dy, y: dx }, grid1d(n, WG), { n });
  }

  /** dx = dy·gelu_erf'(x), from the forward's input x. */
  geluErfBackward(rec: Recorder, x: Tensor, dy: Tensor, dx: Tensor): void {
    const n = check('gelu_erf_backward', { x, dy, dx });
    rec.dispatch(this.geluErfBwdK, { x, dh: dy, y: dx }, grid1d(n, WG), { n });
  }
}

/** All f32 with one element count; returns it. */
function check(op: string, tensors: Record<string, Tensor>): number {
  const entries = Object.entries(tensors);
  const n = entries[0][1].numel;
  for (const [name, t] of entries) {
    if (t.dtype !== 'f32') throw new ShapeError(op, `${name} must be f32, got ${t.dtype}`);
    if (t.numel !== n) throw new ShapeError(op, `${name} [${t.shape.join(', ')}] has ${t.numel} elements, ${entries[0][0]} has ${n}`);
  }
  return n;
}
