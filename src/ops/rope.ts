// Rotary position embeddings on the GPU: a (cos, sin) table from positions, then in-place rotation
// of q/k heads (forward) or of their gradients (backward, the transpose rotation).
//
// One Rope per layout (src/model/ropeTables.ts): mropeLayout(5e6, 128, [24, 20, 20]) for the
// decoder, visionRopeLayout(1e4, 64) for the vision tower. Typical use per sequence:
//   rope.table(rec, positions, cs);                 // positions [axes, T] u32/i32, cs [T, half, 2]
//   rope.apply(rec, cs, q, heads);  rope.apply(rec, cs, k, kvHeads);   // every layer
//   rope.applyBackward(rec, cs, dq, heads);  ...                        // training backward
// Precision: cos/sin within 1e-7 of the exact value of pos·inv_freq (inv_freq in f64), for any
// position below 2^24 (tested). transformers itself computes inv_freq and pos·inv_freq in f32, so at
// position 1e5 its angles are off by up to 4e-3 rad from the exact ones; at the positions of
// short parity fixtures the difference is below 1e-5.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import type { RopeLayout } from '../model/ropeTables';

const WG = 256;
const UNIFORMS = { n: 'u32', half: 'u32', tokens: 'u32', heads: 'u32', stride: 'u32', offset: 'u32', dir: 'f32' } as const;

export interface RopeApplyOptions {
  /**
   * Column of the first rotated head inside a row of x (default 0). Rows may be wider than
   * heads·head_dim: e.g. the vision tower's fused qkv [N, 3·hidden] has k at offset hidden.
   */
  offset?: number;
}

export class Rope {
  private constructor(
    readonly layout: RopeLayout,
    private readonly slots: Tensor,
    private readonly tableK: Kernel,
    private readonly applyK: Kernel,
  ) {}

  static async create(gpu: Gpu, layout: RopeLayout): Promise<Rope> {
    const spec = (entry: string) => ({ shader: 'rope', entry, constants: { WG }, uniforms: UNIFORMS });
    const slots = gpu.upload(layout.slots, [layout.half, 4], 'u32', 'rope slots');
    return new Rope(layout, slots, gpu.kernelOnUse(spec('rope_table')), gpu.kernelOnUse(spec('rope_apply')));
  }

  /** cs[t, j] = (cos, sin) of positions[axis_j, t]·inv_freq_j. positions: [axes, T] u32 or i32. */
  table(rec: Recorder, positions: Tensor, cs: Tensor): void {
    const { half, axes } = this.layout;
    if (positions.dtype !== 'u32' && positions.dtype !== 'i32') throw new ShapeError('rope_table', `positions must be u32 or i32, got ${positions.dtype}`);
    if (positions.shape.length !== 2 || positions.shape[0] !== axes) {
      throw new ShapeError('rope_table', `positions must be [${axes}, T], got [${positions.shape.join(', ')}]`);
    }
    const tokens = positions.shape[1];
    this.checkTable('rope_table', cs, tokens);
    const n = tokens * half;
    rec.dispatch(this.tableK, { positions, slots: this.slots, cs }, grid1d(n, WG), { n, half, tokens, heads: 0, stride: 0, offset: 0, dir: 1 });
  }

  /** Rotate `heads` heads of every row of x [T, width] in place (q or k after q_norm/k_norm). */
  apply(rec: Recorder, cs: Tensor, x: Tensor, heads: number, opts: RopeApplyOptions = {}): void {
    this.rotate('rope_apply', rec, cs, x, heads, opts, 1);
  }

  /** Backward of apply, in place on the gradient: dx = Rᵀ·dy (rotation by the negated angle). */
  applyBackward(rec: Recorder, cs: Tensor, dx: Tensor, heads: number, opts: RopeApplyOptions = {}): void {
    this.rotate('rope_apply_backward', rec, cs, dx, heads, opts, -1);
  }

  /** Give the slot table back to the pool. */
  release(): void {
    this.slots.release();
  }

  private checkTable(op: string, cs: Tensor, tokens: number): void {
    const half = this.layout.half;
    if (cs.dtype !== 'f32' || cs.shape.length !== 3 || cs.shape[0] !== tokens || cs.shape[1] !== half || cs.shape[2] !== 2) {
      throw new ShapeError(op, `table must be f32 [${tokens}, ${half}, 2], got ${cs.dtype} [${cs.shape.join(', ')}]`);
    }
  }

  private rotate(op: string, rec: Recorder, cs: Tensor, x: Tensor, heads: number, opts: RopeApplyOptions, dir: 1 | -1): void {
    const half = this.layout.half;
    if (x.dtype !== 'f32' || x.shape.length !== 2) throw new ShapeError(op, `x must be f32 [T, width], got ${x.dtype} [${x.shape.join(', ')}]`);
    const [tokens, stride] = x.shape;
    const offset = opts.offset ?? 0;
    if (!Number.isInteger(heads) || heads < 1) throw new ShapeError(op, `heads must be a positive integer, got ${heads}`);
    if (!Number.isInteger(offset) || offset < 0 || offset + heads * 2 * half > stride) {
      throw new ShapeError(op, `${heads} heads of ${2 * half} from column ${offset} do not fit rows of ${stride}`);
    }
    this.checkTable(op, cs, tokens);
    const n = tokens * heads * half;
    rec.dispatch(this.applyK, { table: cs, x }, grid1d(n, WG), { n, half, tokens, heads, stride, offset, dir });
  }
}
