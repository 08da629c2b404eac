// Token ids shifted into one block of a token table in row blocks (shaders/token_ids.wgsl), for
// embedding gathers whose ids live only on the GPU (decode feeds back the ids it sampled).
import { ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

const WG = 64;

export class TokenIds {
  private constructor(private readonly kernel: Kernel) {}

  static async create(gpu: Gpu): Promise<TokenIds> {
    return new TokenIds(gpu.kernelOnUse({ shader: 'token_ids', entry: 'shift_ids', constants: { WG }, uniforms: { n: 'u32', first: 'u32' } }));
  }

  /** out[i] = ids[i] − first (u32, wrapping): ids [n] u32 or i32, out [n] u32. */
  shift(rec: Recorder, ids: Tensor, first: number, out: Tensor): void {
    const op = 'shift_ids';
    if (ids.dtype !== 'u32' && ids.dtype !== 'i32') throw new ShapeError(op, `ids must be u32 or i32, got ${ids.dtype}`);
    if (out.dtype !== 'u32' || out.numel !== ids.numel) throw new ShapeError(op, `out must be u32 [${ids.numel}], got ${out.dtype} [${out.shape.join(', ')}]`);
    if (!Number.isInteger(first) || first < 0 || first > 0xffffffff) throw new ShapeError(op, `first must be a u32, got ${first}`);
    // 65,535 groups of 64 cover any batch of token ids.
    if (ids.numel > 65535 * WG) throw new ShapeError(op, `${ids.numel} ids exceed one dispatch`);
    rec.dispatch(this.kernel, { ids, out }, Math.ceil(ids.numel / WG), { n: ids.numel, first });
  }
}
