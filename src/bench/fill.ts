// Fills benchmark inputs on the GPU with hashed pseudo-random values, so that large weights and
// activations cost no CPU generation or upload. Benchmarks need plausible values, not exact ones.
import { grid1d, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

const FILL_WGSL = /* wgsl */ `
struct Params { n: u32, seed: u32, mode: u32, scale: f32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

fn hash(v: u32) -> u32 { // a 32-bit integer mix (lowbias32)
  var x = v;
  x ^= x >> 16u; x *= 0x7feb352du;
  x ^= x >> 15u; x *= 0x846ca68bu;
  x ^= x >> 16u;
  return x;
}

fn unit(v: u32) -> f32 { return f32(v >> 8u) / 16777216.0; } // [0, 1)

@compute @workgroup_size(256)
fn fill(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= params.n) { return; }
  let h = hash(i ^ hash(params.seed));
  switch params.mode {
    case 0u: { out[i] = bitcast<u32>((2.0 * unit(h) - 1.0) * params.scale); }          // f32 in ±scale
    case 1u: { out[i] = h; }                                                          // random bits
    default: { out[i] = pack2x16float(params.scale * (1.0 + vec2f(unit(h), unit(hash(h))))); } // f16 pairs in [scale, 2·scale)
  }
}`;

export type FillMode = 'uniform' | 'bits' | 'f16pairs';
const MODE: Record<FillMode, number> = { uniform: 0, bits: 1, f16pairs: 2 };

export class Filler {
  private seed = 1;
  private constructor(private readonly k: Kernel) {}

  static async create(gpu: Gpu): Promise<Filler> {
    return new Filler(await gpu.kernel({ name: 'bench.fill', code: FILL_WGSL, entry: 'fill', uniforms: { n: 'u32', seed: 'u32', mode: 'u32', scale: 'f32' } }));
  }

  /** Record a fill of every 4-byte word of `t`: f32 in ±scale, random u32 bits, or f16 pairs in [scale, 2·scale). */
  fill(rec: Recorder, t: Tensor, mode: FillMode = 'uniform', scale = 0.05): Tensor {
    const n = t.byteSize / 4;
    rec.dispatch(this.k, { out: t }, grid1d(n, 256), { n, seed: this.seed++, mode: MODE[mode], scale });
    return t;
  }
}
