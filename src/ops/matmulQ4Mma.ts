// y = x·Wᵀ for 4-bit weights on int8 tensor cores (shaders/matmul_q4_mma.wgsl): x is quantized per
// (row, group of 32) into two int8 limbs, then an int8 GEMM scales each group's i32 partial into
// f32. Needs Chromium's subgroup-matrix extension with an i8 -> i32, M16 N16 K32 configuration.
// With `kBlock` > 32 the partials accumulate over blocks of K instead, on weights re-rounded to int8
// per (column, block): faster, not bit-faithful to the Q4 weights (the shader states the bound).
import { grid1d, MissingFeatureError, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import { checkQ4Shape, q4Words, Q4_GROUP, type Q4Weight } from './matmulQ4';

export const SUBGROUP_MATRIX = 'chromium-experimental-subgroup-matrix';
const PACKED_I8 = 'packed_4x8_integer_dot_product';

/** The subgroup-matrix configuration the kernel is written for. */
const CONFIG = { componentType: 'i8', resultComponentType: 'i32', M: 16, N: 16, K: 32 } as const;

/** The workgroup tile of y: BM x BN with `threads` threads (BN ≤ threads, threads a multiple of BN). */
export interface MmaTile {
  rows: 64 | 128;
  cols: 64 | 128;
  threads: 128 | 256;
}

export const DEFAULT_MMA_TILE: MmaTile = { rows: 64, cols: 64, threads: 128 };

export interface MatmulQ4MmaOptions {
  /** Most rows of x per call: the quantized copy of x is allocated once for maxRows x maxK. */
  maxRows: number;
  maxK: number;
  tile?: MmaTile;
  /** Subgroups each over a 2x2 block of the tile's 16x16 tiles (default: where subgroups are
   * exactly 32 wide and the tile has 128 threads), or walking the tiles one by one. */
  blocked?: boolean;
  /** K per trip of the i32 partials through workgroup memory: 32 (default) is exact on the Q4
   * weights; 64 or 128 re-round each weight to int8 at its (column, block)'s largest scale
   * (an extra error of at most 1/32 of that block's largest Q4 step) for fewer trips. Needs a tile
   * of (rows/32)·(cols/32) subgroups of exactly 32. */
  kBlock?: KBlock;
}

export type KBlock = 32 | 64 | 128;

/** Why this device cannot run the int8 tensor-core GEMM, or null when it can. */
export function mmaUnsupported(gpu: Gpu): string | null {
  if (!gpu.has(SUBGROUP_MATRIX)) return `no '${SUBGROUP_MATRIX}' feature on this adapter (Dawn offers it only with enable-dawn-features=allow_unsafe_apis)`;
  if (!gpu.has('subgroups')) return "no 'subgroups' feature";
  const configs = gpu.adapter.subgroupMatrixConfigs ?? [];
  const ok = configs.some((c) => (Object.keys(CONFIG) as (keyof typeof CONFIG)[]).every((key) => c[key] === CONFIG[key]));
  if (!ok) {
    const have = configs.map((c) => `${c.componentType}->${c.resultComponentType} M${c.M} N${c.N} K${c.K}`).join(', ') || 'none';
    return `no i8->i32 M16 N16 K32 subgroup-matrix configuration (offered: ${have})`;
  }
  return null;
}

/** Workgroup bytes of a tile: both limbs of x, the int8 weights, the i32 partials (rows padded
 * by 8 words), the scales. The K-blocked kernel stages a whole block and puts the partials in the
 * same memory afterwards. */
function tileBytes(t: MmaTile, kBlock: KBlock): number {
  const part = 4 * t.rows * (t.cols + 8);
  if (kBlock === 32) return 4 * (16 * t.rows + 8 * t.cols + 2 * (t.rows + t.cols)) + part;
  return Math.max((2 * t.rows + t.cols) * kBlock, part) + 4 * (t.rows + t.cols);
}

export class MatmulQ4Mma {
  private constructor(
    private readonly quantizeK: Kernel,
    private readonly gemmK: Kernel,
    /** K-blocked only: the input gradient's block steps and GEMM, and its step table. */
    private readonly input: { stepsK: Kernel; gemmK: Kernel; tw: Tensor } | null,
    private readonly xq: Tensor,
    private readonly sx: Tensor,
    readonly tile: MmaTile,
    /** Each subgroup computes a 2x2 share of the tile, reusing fragments (see the shader). */
    readonly blocked: boolean,
    readonly maxRows: number,
    readonly maxK: number,
    readonly kBlock: KBlock,
  ) {}

  static async create(gpu: Gpu, opts: MatmulQ4MmaOptions): Promise<MatmulQ4Mma> {
    const why = mmaUnsupported(gpu);
    if (why) throw new MissingFeatureError(SUBGROUP_MATRIX, why);
    const tile = opts.tile ?? DEFAULT_MMA_TILE;
    const { rows, cols, threads } = tile;
    if (![64, 128].includes(rows) || ![64, 128].includes(cols) || ![128, 256].includes(threads) || threads % cols !== 0) {
      throw new ShapeError('matmulQ4Mma', `bad tile ${JSON.stringify(tile)}`);
    }
    const kBlock = opts.kBlock ?? 32;
    if (![32, 64, 128].includes(kBlock)) throw new ShapeError('matmulQ4Mma', `kBlock must be 32, 64 or 128, got ${kBlock}`);
    const bytes = tileBytes(tile, kBlock);
    if (bytes > gpu.limits.maxComputeWorkgroupStorageSize) {
      throw new ShapeError('matmulQ4Mma', `a ${rows}x${cols} tile${kBlock > 32 ? ` with K block ${kBlock}` : ''} needs ${bytes} bytes of workgroup memory; this GPU has ${gpu.limits.maxComputeWorkgroupStorageSize}`);
    }
    if (threads > gpu.limits.maxComputeInvocationsPerWorkgroup) {
      throw new ShapeError('matmulQ4Mma', `${threads} threads per workgroup exceed this GPU's ${gpu.limits.maxComputeInvocationsPerWorkgroup}`);
    }
    const { maxRows, maxK } = opts;
    if (!(Number.isInteger(maxRows) && maxRows > 0)) throw new ShapeError('matmulQ4Mma', `maxRows must be a positive integer, got ${maxRows}`);
    checkQ4Shape('matmulQ4Mma', 1, maxK);
    const info = gpu.device.adapterInfo;
    const sg32 = info?.subgroupMinSize === 32 && info?.subgroupMaxSize === 32;
    if (kBlock > 32) gpu.requireWgsl(PACKED_I8, 'matmulQ4Mma with a K block');
    if (kBlock > 32 && !(sg32 && threads === (rows / 32) * (cols / 32) * 32 && cols <= threads)) {
      throw new ShapeError('matmulQ4Mma', `kBlock ${kBlock} needs ${(rows / 32) * (cols / 32) * 32} threads for a ${rows}x${cols} tile, in subgroups of exactly 32`);
    }
    const blockable = threads === 128 && sg32;
    const blocked = kBlock > 32 || (opts.blocked ?? blockable);
    if (blocked && kBlock === 32 && !blockable) throw new ShapeError('matmulQ4Mma', 'blocked tiles need 128 threads in subgroups of exactly 32');
    const defines = { BM: rows, BN: cols, WG: threads, BLOCKED: blocked, SUB: kBlock / Q4_GROUP };
    const uniforms = { m: 'u32', n: 'u32', k: 'u32', accumulate: 'u32' } as const;
    const suffix = kBlock > 32 ? '_kb' : '';
    const trans = { ...defines, TRANS: true };
    const [quantizeK, gemmK, stepsK, gemmT] = await Promise.all([
      gpu.kernel({ shader: 'matmul_q4_mma', entry: `quantize_rows${suffix}`, defines, uniforms }),
      gpu.kernel({ shader: 'matmul_q4_mma', entry: `gemm${suffix}`, defines, uniforms }),
      kBlock > 32 ? gpu.kernel({ shader: 'matmul_q4_mma', entry: 'block_steps', defines: trans, uniforms }) : null,
      kBlock > 32 ? gpu.kernel({ shader: 'matmul_q4_mma', entry: 'gemm_kb', defines: trans, uniforms }) : null,
    ]);
    // Acquired once: the per-call paths create no buffers. 2 bytes per element (two limbs).
    const xq = gpu.tensor([(maxRows * maxK) / 2], 'u32', 'matmul_q4_mma.xq');
    const sx = gpu.tensor([(maxRows * maxK) / Q4_GROUP], 'f32', 'matmul_q4_mma.sx');
    // The input gradient's steps: one per (block of N, group of K), N and K ≤ maxK.
    const input = stepsK && gemmT ? { stepsK, gemmK: gemmT, tw: gpu.tensor([Math.ceil(maxK / kBlock) * (maxK / Q4_GROUP)], 'f32', 'matmul_q4_mma.tw') } : null;
    return new MatmulQ4Mma(quantizeK, gemmK, input, xq, sx, tile, blocked, maxRows, maxK, kBlock);
  }

  /** y [M, N] (+)= x [M, K] · Wᵀ, M ≤ maxRows and K ≤ maxK. */
  gemm(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor, accumulate = false): void {
    const op = 'matmulQ4Mma.gemm';
    const m = rowsOf(op, w, { name: 'x', t: x, width: w.k, dim: 'K' }, { name: 'y', t: y, width: w.n });
    if (m > this.maxRows || w.k > this.maxK) throw new ShapeError(op, `[${m}, ${w.k}] exceeds the workspace for [${this.maxRows}, ${this.maxK}]`);
    if (w.k % this.kBlock !== 0) throw new ShapeError(op, `K = ${w.k} is not a multiple of the K block ${this.kBlock}`);
    const uniforms = { m, n: w.n, k: w.k, accumulate: accumulate ? 1 : 0 };
    rec.dispatch(this.quantizeK, { x, xq: this.xq, sx: this.sx }, grid1d((m * w.k) / this.kBlock, 64), uniforms);
    const grid: [number, number] = [Math.ceil(w.n / this.tile.cols), Math.ceil(m / this.tile.rows)];
    rec.dispatch(this.gemmK, { xq_in: this.xq, sx_in: this.sx, codes4: w.codes, scales: w.scales, y }, grid, uniforms);
  }

  /**
   * dX [M, K] (+)= dY [M, N]·W, K-blocked only (blocks run along N: a weight's step is shared by
   * its group's rows in the block). M ≤ maxRows, N and K ≤ maxK, N a multiple of the K block and
   * K of 64.
   */
  backwardInput(rec: Recorder, dy: Tensor, w: Q4Weight, dx: Tensor, accumulate = false): void {
    const op = 'matmulQ4Mma.backwardInput';
    if (!this.input) throw new ShapeError(op, 'the input gradient needs a K block above 32');
    const m = rowsOf(op, w, { name: 'dy', t: dy, width: w.n, dim: 'N' }, { name: 'dx', t: dx, width: w.k });
    if (m > this.maxRows || w.n > this.maxK || w.k > this.maxK) throw new ShapeError(op, `[${m}, ${w.n}] x [${w.n}, ${w.k}] exceeds the workspace for ${this.maxRows} rows and widths ≤ ${this.maxK}`);
    if (w.n % this.kBlock !== 0 || w.k % 64 !== 0) throw new ShapeError(op, `N = ${w.n} must be a multiple of the K block ${this.kBlock} and K = ${w.k} of 64`);
    const uniforms = { m, n: w.n, k: w.k, accumulate: accumulate ? 1 : 0 };
    rec.dispatch(this.input.stepsK, { scales: w.scales, tw_out: this.input.tw }, grid1d((w.n / this.kBlock) * (w.k / Q4_GROUP), 64), uniforms);
    // dY's rows are [N]: quantized as x of width N.
    rec.dispatch(this.quantizeK, { x: dy, xq: this.xq, sx: this.sx }, grid1d((m * w.n) / this.kBlock, 64), { ...uniforms, k: w.n });
    const grid: [number, number] = [Math.ceil(w.k / this.tile.cols), Math.ceil(m / this.tile.rows)];
    rec.dispatch(this.input.gemmK, { xq_in: this.xq, sx_in: this.sx, codes4: w.codes, scales: w.scales, tw_in: this.input.tw, y: dx }, grid, uniforms);
  }

  release(): void {
    this.input?.tw.release();
    this.xq.release();
    this.sx.release();
  }
}

/** The rows M of a product's input [M, in.width] and output [M, out.width] on Q4 weight `w`,
 * after checking the weight's buffers, the f32 dtypes and the shapes. */
function rowsOf(op: string, w: Q4Weight, input: { name: string; t: Tensor; width: number; dim: string }, out: { name: string; t: Tensor; width: number }): number {
  checkQ4Shape(op, w.n, w.k);
  const words = q4Words(w.n, w.k);
  if (w.codes.numel !== words.codes || w.scales.numel !== words.scales) throw new ShapeError(op, `codes/scales do not hold a [${w.n}, ${w.k}] Q4 weight`);
  if (input.t.dtype !== 'f32' || out.t.dtype !== 'f32') throw new ShapeError(op, `${input.name} and ${out.name} must be f32, got ${input.t.dtype} and ${out.t.dtype}`);
  if (input.t.shape[input.t.shape.length - 1] !== input.width) throw new ShapeError(op, `${input.name} [${input.t.shape.join(', ')}] must end in ${input.dim} = ${input.width}`);
  const m = input.t.numel / input.width;
  if (out.t.numel !== m * out.width) throw new ShapeError(op, `${out.name} must be [${m}, ${out.width}], got [${out.t.shape.join(', ')}]`);
  return m;
}
