// The vision tower's position embedding: a learned square table [side², hidden] bilinearly
// resampled to each image's (h, w) patch grid, as transformers' fast_pos_embed_interpolate does.
//
// Row r of an h-row grid samples the table at r·(side−1)/(h−1) (torch.linspace(0, side−1, h); a
// one-row grid samples 0). floor = ⌊pos⌋, ceil = min(floor + 1, side − 1), d = pos − floor; the
// corners (floor,floor), (floor,ceil), (ceil,floor), (ceil,ceil) get weights (1−dh)(1−dw),
// (1−dh)dw, dh(1−dw), dh·dw. Positions are exact rationals here (integer floor and remainder),
// where torch rounds linspace to f32; the interpolation is continuous, so the two agree to f32
// rounding. The per-patch lists are laid out in the tower's patch order (2x2 merge blocks
// row-major, each block's patches row-major, the grid repeated per frame), the order of
// visionRopePositions and of the processor's pixel_values.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

const WG = 256;

/** Per-axis samples of the table: floor and ceil rows (or columns) and the fraction toward ceil. */
function axisSamples(n: number, side: number): { lo: Int32Array; hi: Int32Array; frac: Float64Array } {
  const lo = new Int32Array(n);
  const hi = new Int32Array(n);
  const frac = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    // pos = i·(side−1)/(n−1) exactly: integer quotient and remainder.
    const num = n === 1 ? 0 : i * (side - 1);
    const den = n === 1 ? 1 : n - 1;
    lo[i] = Math.floor(num / den);
    hi[i] = Math.min(lo[i] + 1, side - 1);
    frac[i] = (num - lo[i] * den) / den;
  }
  return { lo, hi, frac };
}

/**
 * The 4 table rows and 4 bilinear weights of every patch of the packed images, u32 [N, 8]
 * (weights as f32 bits), for the pos_embed_add kernel. `side`² is the table's row count.
 */
export function posEmbedInterpolation(gridThw: readonly (readonly [number, number, number])[], side: number, mergeSize: number): Uint32Array {
  const n = gridThw.reduce((s, [t, h, w]) => s + t * h * w, 0);
  const out = new Uint32Array(8 * n);
  const weights = new Float32Array(out.buffer);
  let k = 0;
  for (const [t, h, w] of gridThw) {
    if (h % mergeSize || w % mergeSize) throw new Error(`grid ${h}x${w} is not a multiple of the merge size ${mergeSize}`);
    const rows = axisSamples(h, side);
    const cols = axisSamples(w, side);
    for (let f = 0; f < t; f++) {
      for (let br = 0; br < h / mergeSize; br++) {
        for (let bc = 0; bc < w / mergeSize; bc++) {
          for (let ir = 0; ir < mergeSize; ir++) {
            for (let ic = 0; ic < mergeSize; ic++) {
              const r = br * mergeSize + ir;
              const c = bc * mergeSize + ic;
              // Written element by element: array literals here cost about 1 ms a 448x448 image.
              const rl = rows.lo[r] * side;
              const rh = rows.hi[r] * side;
              const dh = rows.frac[r];
              const cl = cols.lo[c];
              const ch = cols.hi[c];
              const dw = cols.frac[c];
              const o = 8 * k++;
              out[o] = rl + cl;
              out[o + 1] = rl + ch;
              out[o + 2] = rh + cl;
              out[o + 3] = rh + ch;
              weights[o + 4] = (1 - dh) * (1 - dw);
              weights[o + 5] = (1 - dh) * dw;
              weights[o + 6] = dh * (1 - dw);
              weights[o + 7] = dh * dw;
            }
          }
        }
      }
    }
  }
  return out;
}

/** The table's side: num_position_embeddings must be a perfect square. */
export function posEmbedSide(rows: number): number {
  const side = Math.round(Math.sqrt(rows));
  if (side * side !== rows) throw new ShapeError('pos_embed_add', `position table has ${rows} rows, not a square grid`);
  return side;
}

/** x [N, hidden] += the interpolated position embedding (shaders/vision.wgsl). */
export class PosEmbedAdd {
  private constructor(private readonly kernel: Kernel) {}

  static async create(gpu: Gpu): Promise<PosEmbedAdd> {
    return new PosEmbedAdd(
      gpu.kernelOnUse({ shader: 'vision', entry: 'pos_embed_add', constants: { WG }, uniforms: { n: 'u32', width: 'u32', rows: 'u32' } }),
    );
  }

  /** table [side², hidden] f32, interp u32 [N, 8] from posEmbedInterpolation, x [N, hidden] f32 (in place). */
  add(rec: Recorder, table: Tensor, interp: Tensor, x: Tensor): void {
    const op = 'pos_embed_add';
    if (table.dtype !== 'f32' || table.shape.length !== 2) throw new ShapeError(op, `table must be f32 [rows, hidden], got ${table.dtype} [${table.shape.join(', ')}]`);
    const [rows, width] = table.shape;
    if (x.dtype !== 'f32' || x.shape.length !== 2 || x.shape[1] !== width) {
      throw new ShapeError(op, `x must be f32 [N, ${width}], got ${x.dtype} [${x.shape.join(', ')}]`);
    }
    const patches = x.shape[0];
    if (interp.dtype !== 'u32' || interp.numel !== 8 * patches) {
      throw new ShapeError(op, `interp must be u32 [${patches}, 8], got ${interp.dtype} [${interp.shape.join(', ')}]`);
    }
    const n = patches * width;
    if (n > 0) rec.dispatch(this.kernel, { table, interp, x }, grid1d(n, WG), { n, width, rows });
  }
}
