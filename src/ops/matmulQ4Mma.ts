// y = x·Wᵀ for 4-bit weights on int8 tensor cores (shaders/matmul_q4_mma_*.wgsl): x is quantized per
// (row, group of 32) into two int8 limbs, then an int8 GEMM scales each group's i32 partial into
// f32. Needs Chromium's subgroup-matrix extension with an i8 -> i32, M16 N16 K32 configuration.
// With `kBlock` > 32 the partials accumulate over blocks of K instead, on weights re-rounded to int8
// per (column, block) once per call (requant_w): faster, not bit-faithful to the Q4 weights (the
// shader states the bound); x may then take one limb (`limbs`), and blocks of 256 with it.
import { capabilitiesOf, compileMatrixKernels, grid1d, hasConfig, MissingFeatureError, ShapeError, Tensor, type Capabilities, type Gpu, type Kernel, type MatrixKernelEntry, PACKED_INT8_DOT, type Recorder } from '../gpu';
import { checkQ4Shape, f32Rows, Q4_GROUP, rowSlice, rowSlices, rowsOf, type Q4Weight } from './matmulQ4';

export const SUBGROUP_MATRIX = 'chromium-experimental-subgroup-matrix';

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
  /** The quantized copy of x is allocated once for maxRows rows of maxK: a call whose x has more
   * elements runs in slices of as many rows as fit (maxRows at widths up to maxK, fewer beyond;
   * a multiple of 64 rows, for the slices' binding offsets). */
  maxRows: number;
  maxK: number;
  tile?: MmaTile;
  /** Subgroups each over a 2x2 block of the tile's 16x16 tiles (default: where subgroups are
   * exactly 32 wide and the tile has 128 threads), or walking the tiles one by one. */
  blocked?: boolean;
  /** K per trip of the i32 partials through workgroup memory: 32 (default) is exact on the Q4
   * weights; 64, 128 or 256 re-round each weight to int8 at its (column, block)'s largest scale
   * (an extra error of at most 1/32 of that block's largest Q4 step) for fewer trips; 256 (staged
   * as two halves of 128) takes one limb of x. Needs a tile of (rows/32)·(cols/32) subgroups of
   * exactly 32. */
  kBlock?: KBlock;
  /** x's int8 limbs with a K block above 32: 2 (default; x to about 1/32512 of each block's
   * largest |x|) or 1 (to 1/254 of it, about bf16's precision for a block's largest values and
   * coarser for its small ones): half the MMAs and half the staged bytes of x. */
  limbs?: 1 | 2;
  /** Where x's and W's int8 steps change with a K block above 32: 'block' (default: per row of x
   * and column of W in each K block) or 'row' (one step per row of x and column of W over the
   * whole of K; K block 128 and two limbs only): the i32 sums then run through workgroup memory
   * once, after the last chunk, instead of once a block, for coarser steps where a row's or a
   * column's magnitude varies along K (the shader states the bound). */
  steps?: MmaSteps;
}

export type MmaSteps = 'block' | 'row';

export type KBlock = 32 | 64 | 128 | 256;

/** One product of `gemmShared`: y (+)= x·Wᵀ. */
export interface MmaOutput {
  w: Q4Weight;
  y: Tensor;
}

/** An f32 weight [n, k] rounded to int8 per (row, K block) once (quantizeDense): the int8 values
 * in the layout the K-blocked GEMM stages, and each block's step t (w ≈ q·t, t = max |w| / 127).
 * The caller owns the tensors. */
export interface Int8Weight {
  w8: Tensor;
  steps: Tensor;
  n: number;
  k: number;
}

/** One product of `gemmInt8`: y (+)= x·Wᵀ. */
export interface Int8Output {
  w: Int8Weight;
  y: Tensor;
}

/** Why this device cannot run the int8 tensor-core GEMM, or null when it can. */
export function mmaUnsupported(gpu: Gpu): string | null {
  return mmaUnsupportedBy(capabilitiesOf(gpu));
}

/** mmaUnsupported on a capabilities record (src/gpu/capabilities.ts). */
export function mmaUnsupportedBy(caps: Capabilities): string | null {
  if (!caps.subgroupMatrix.enabled) return `no '${SUBGROUP_MATRIX}' feature on this device (offered only on drivers with cooperative matrices, by Dawn with enable-dawn-features=allow_unsafe_apis and by Chrome with enable-unsafe-webgpu)`;
  if (!caps.subgroups.enabled) return "no 'subgroups' feature";
  if (!hasConfig(caps, CONFIG)) {
    const have = caps.subgroupMatrix.configs.map((c) => `${c.componentType}->${c.resultComponentType} M${c.M} N${c.N} K${c.K}`).join(', ') || 'none';
    return `no i8->i32 M16 N16 K32 subgroup-matrix configuration (offered: ${have})`;
  }
  return null;
}

/** Workgroup bytes of a tile: both limbs of x, the int8 weights, the i32 partials (rows padded
 * by 8 words), the scales. The K-blocked kernel stages a whole block and puts the partials in the
 * same memory afterwards. */
export function mmaTileBytes(t: MmaTile, kBlock: KBlock, limbs: 1 | 2): number {
  if (kBlock === 32) return 4 * (16 * t.rows + 8 * t.cols + 2 * (t.rows + t.cols)) + 4 * t.rows * (t.cols + 8);
  // Blocks of 32 staged rows (two limbs pad each, up to 128 bytes along K, by 16 bytes) or of a
  // subgroup's 32x32 i32 sums at a row stride of 40 words, whichever is larger.
  const row = Math.min(kBlock, 128) + (limbs === 2 ? 16 : 0);
  const block = Math.max(32 * row, 4 * 32 * 40);
  const blocks = Math.max((limbs * t.rows + t.cols) / 32, t.threads / 32);
  return blocks * block + 4 * (t.rows + t.cols);
}

/** The int8 tensor-core kernels' defines for `tile`, K block, limbs, steps by row and blocked tiles. */
export function mmaDefines(tile: MmaTile, kBlock: KBlock, limbs: 1 | 2, rowSteps: boolean, blocked: boolean): { BM: number; BN: number; WG: number; BLOCKED: boolean; SUB: number; STG: number; LIMBS: number; ROWCOL: boolean } {
  const sub = kBlock / Q4_GROUP;
  return { BM: tile.rows, BN: tile.cols, WG: tile.threads, BLOCKED: blocked, SUB: sub, STG: Math.min(sub, 4), LIMBS: limbs, ROWCOL: rowSteps };
}

export class MatmulQ4Mma {
  /** The input gradient's weight steps, by the weight's scales (stepsOf). */
  private readonly inputSteps = new Map<Tensor, Tensor>();
  /** With steps 'row', the forward's weight steps, by the weight's scales (rowStepsOf). */
  private readonly forwardSteps = new Map<Tensor, Tensor>();
  /** The forward's int8 weights and their block steps (rounded), grown on demand. */
  private w8: Tensor | null = null;
  private w8Steps: Tensor | null = null;

  private constructor(
    private readonly gpu: Gpu,
    private readonly quantizeK: Kernel,
    private readonly gemmK: Kernel,
    /** K-blocked only: requant_w (W re-rounded to int8 before each forward GEMM), and for the
     * input gradient block_steps and requant_wt (Wᵀ the same, for the same GEMM). */
    private readonly rounding: { w: Kernel; steps: Kernel; wt: Kernel; dense: Kernel | null } | null,
    /** steps 'row': row_absmax (x's rows before quantizing them), its output, and row_steps. */
    private readonly rowScaling: { absmax: Kernel; amax: Tensor; steps: Kernel } | null,
    private readonly xq: Tensor,
    private readonly sx: Tensor,
    readonly tile: MmaTile,
    /** Each subgroup computes a 2x2 share of the tile, reusing fragments (see the shader). */
    readonly blocked: boolean,
    readonly maxRows: number,
    readonly maxK: number,
    readonly kBlock: KBlock,
    readonly limbs: 1 | 2,
    readonly steps: MmaSteps,
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
    if (![32, 64, 128, 256].includes(kBlock)) throw new ShapeError('matmulQ4Mma', `kBlock must be 32, 64, 128 or 256, got ${kBlock}`);
    const limbs = opts.limbs ?? 2;
    if (limbs !== 2 && (limbs !== 1 || kBlock === 32)) throw new ShapeError('matmulQ4Mma', `limbs must be 2, or 1 with a K block above 32, got ${limbs} (K block ${kBlock})`);
    if (kBlock === 256 && limbs !== 1) throw new ShapeError('matmulQ4Mma', 'a K block of 256 takes x in one limb');
    const steps: MmaSteps = opts.steps ?? 'block';
    if (steps !== 'block' && steps !== 'row') throw new ShapeError('matmulQ4Mma', `steps must be 'block' or 'row', got ${String(steps)}`);
    const rowSteps = steps === 'row';
    if (rowSteps && (kBlock !== 128 || limbs !== 2)) throw new ShapeError('matmulQ4Mma', `steps 'row' takes a K block of 128 and two limbs, got ${kBlock} and ${limbs}`);
    const bytes = mmaTileBytes(tile, kBlock, limbs);
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
    if (kBlock > 32) gpu.requireWgsl(PACKED_INT8_DOT, 'matmulQ4Mma with a K block');
    if (kBlock > 32 && !(sg32 && threads === (rows / 32) * (cols / 32) * 32 && cols <= threads)) {
      throw new ShapeError('matmulQ4Mma', `kBlock ${kBlock} needs ${(rows / 32) * (cols / 32) * 32} threads for a ${rows}x${cols} tile, in subgroups of exactly 32`);
    }
    const blockable = threads === 128 && sg32;
    const blocked = kBlock > 32 || (opts.blocked ?? blockable);
    if (blocked && kBlock === 32 && !blockable) throw new ShapeError('matmulQ4Mma', 'blocked tiles need 128 threads in subgroups of exactly 32');
    const defines = mmaDefines(tile, kBlock, limbs, rowSteps, blocked);
    const suffix = kBlock > 32 ? '_kb' : '';
    const quantize = (entry: string): MmaEntry => ({ shader: 'matmul_q4_mma_quantize', entry, uniforms: ROWS_UNIFORMS });
    const weights = (entry: string): MmaEntry => ({ shader: 'matmul_q4_mma_weights', entry, uniforms: WEIGHT_UNIFORMS });
    // quantize_w (f32 weights to int8, quantizeDense) where the steps are per block.
    const entries = [
      quantize(`quantize_rows${suffix}`),
      { shader: `matmul_q4_mma_gemm${suffix}`, entry: `gemm${suffix}`, uniforms: GEMM_UNIFORMS },
      ...(kBlock > 32 ? ['requant_w', 'block_steps', 'requant_wt'].map(weights) : []),
      ...(rowSteps ? [quantize('row_absmax'), weights('row_steps')] : kBlock > 32 ? [weights('quantize_w')] : []),
    ];
    const [quantizeK, gemmK, w, blockSteps, wt, ...rest] = await compileMatrixKernels(gpu, 'matmul_q4_mma', entries, defines);
    const [absmax, rowStepsK] = rowSteps ? rest : [];
    const dense = !rowSteps && kBlock > 32 ? rest[0] : null;
    // Acquired once: the per-call paths create no buffers. A byte per element and limb.
    const xq = gpu.tensor([(maxRows * maxK * limbs) / 4], 'u32', 'matmul_q4_mma.xq');
    const sx = gpu.tensor([(maxRows * maxK) / Q4_GROUP], 'f32', 'matmul_q4_mma.sx');
    const rounding = w && blockSteps && wt ? { w, steps: blockSteps, wt, dense } : null;
    const rowScaling = absmax && rowStepsK ? { absmax, amax: gpu.tensor([maxRows], 'f32', 'matmul_q4_mma.row_amax'), steps: rowStepsK } : null;
    return new MatmulQ4Mma(gpu, quantizeK, gemmK, rounding, rowScaling, xq, sx, tile, blocked, maxRows, maxK, kBlock, limbs, steps);
  }

  /** Whether `gemm` takes weight `w` (K a whole number of K blocks; rows of K fit the workspace). */
  takesForward(w: Q4Weight): boolean {
    return w.k % this.kBlock === 0 && this.rowsFitting(w.k) > 0;
  }

  /** Whether `backwardInput` takes weight `w` (K-blocked only; N a whole number of blocks, K of 64;
   * rows of N fit the workspace). */
  takesInput(w: Q4Weight): boolean {
    return this.rounding !== null && w.n % this.kBlock === 0 && w.k % 64 === 0 && this.rowsFitting(w.n) > 0;
  }

  /** Rows of x of `width` per dispatch: maxRows up to maxK wide, beyond it as many whole 64-row
   * slices as the workspace holds (0: none fits). */
  private rowsFitting(width: number): number {
    if (width <= this.maxK) return this.maxRows;
    return 64 * Math.floor((this.maxRows * this.maxK) / width / 64);
  }

  /** y [M, N] (+)= x [M, K] · Wᵀ; rows beyond the workspace go through in slices. */
  gemm(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor, accumulate = false): void {
    this.gemmShared(rec, x, [{ w, y }], accumulate);
  }

  /** Every product of `outs` on the same x (q/k/v, gate/up): x is quantized once a slice. */
  gemmShared(rec: Recorder, x: Tensor, outs: readonly MmaOutput[], accumulate = false): void {
    const op = 'matmulQ4Mma.gemm';
    const m = outs.map(({ w, y }) => rowsOf(op, w, { name: 'x', t: x, width: w.k, dim: 'K' }, { name: 'y', t: y, width: w.n }))[0];
    const products = outs.map(({ w, y }) => ({
      n: w.n,
      k: w.k,
      y,
      weights: () => (this.rounding ? this.rounded(rec, w, this.rowScaling ? this.rowStepsOf(rec, w) : null, false) : { codes4: w.codes, scales: w.scales }),
    }));
    this.run(rec, op, x, m, products, accumulate);
  }

  /** y (+)= x·Wᵀ for weights rounded to int8 by quantizeDense, every product of `outs` on one x. */
  gemmInt8(rec: Recorder, x: Tensor, outs: readonly Int8Output[], accumulate = false): void {
    const op = 'matmulQ4Mma.gemmInt8';
    if (!this.rounding?.dense) throw new ShapeError(op, "int8 weights need a K block above 32 and steps 'block'");
    const m = outs.map(({ w, y }) => f32Rows(op, { name: 'x', t: x, width: w.k, dim: 'K' }, { name: 'y', t: y, width: w.n }))[0];
    for (const { w } of outs) {
      if (w.w8.numel !== (w.n * w.k) / 4 || w.steps.numel !== (w.n * w.k) / this.kBlock) throw new ShapeError(op, `an int8 weight [${w.n}, ${w.k}] needs ${(w.n * w.k) / 4} words and ${(w.n * w.k) / this.kBlock} steps (K block ${this.kBlock})`);
    }
    this.run(rec, op, x, m, outs.map(({ w, y }) => ({ n: w.n, k: w.k, y, weights: () => ({ w8_in: w.w8, tw_in: w.steps }) })), accumulate);
  }

  /** x's rows quantized once a slice, then each product's GEMM on them (`weights` binds W). */
  private run(rec: Recorder, op: string, x: Tensor, m: number, products: readonly { n: number; k: number; y: Tensor; weights: () => Record<string, Tensor> }[], accumulate: boolean): void {
    const k = products[0].k;
    if (products.some((p) => p.k !== k)) throw new ShapeError(op, `products of one x need one K, got ${products.map((p) => p.k).join(', ')}`);
    if (this.rowsFitting(k) === 0) throw new ShapeError(op, `K = ${k}: not even 64 rows fit the workspace of ${this.maxRows} x ${this.maxK}`);
    if (k % this.kBlock !== 0) throw new ShapeError(op, `K = ${k} is not a multiple of the K block ${this.kBlock}`);
    for (const [r0, rows] of this.slices(m, k)) {
      const uniforms = { m: rows, n: 0, k, accumulate: accumulate ? 1 : 0 };
      this.quantize(rec, rowSlice(x, r0, rows, k), rows, k, uniforms);
      for (const { n, y, weights } of products) {
        const grid: [number, number] = [Math.ceil(n / this.tile.cols), Math.ceil(rows / this.tile.rows)];
        rec.dispatch(this.gemmK, { xq_in: this.xq, sx_in: this.sx, ...weights(), y: rowSlice(y, r0, rows, n) }, grid, { ...uniforms, n });
      }
    }
  }

  /** An f32 weight W [n, k] (nn.Linear's [out, in]) rounded to int8 per (row, K block), for
   * gemmInt8: |w − q·t| ≤ t/2 with t = max |w| / 127 over the block. K a multiple of the K block. */
  quantizeDense(rec: Recorder, w: Tensor, n: number, k: number, label: string): Int8Weight {
    const op = 'matmulQ4Mma.quantizeDense';
    const kernel = this.rounding?.dense;
    if (!kernel) throw new ShapeError(op, "int8 weights need a K block above 32 and steps 'block'");
    if (w.dtype !== 'f32' || w.numel !== n * k) throw new ShapeError(op, `${label} must be f32 [${n}, ${k}], got ${w.dtype} [${w.shape.join(', ')}]`);
    if (!Number.isInteger(n) || n < 1 || k % this.kBlock !== 0 || k < this.kBlock) throw new ShapeError(op, `${label}: K = ${k} must be a positive multiple of the K block ${this.kBlock}`);
    const out = { w8: this.gpu.tensor([(n * k) / 4], 'u32', `${label}.int8`), steps: this.gpu.tensor([(n * k) / this.kBlock], 'f32', `${label}.int8_steps`), n, k };
    const groups = (n * k) / Q4_GROUP;
    rec.dispatch(kernel, { x: w, w8_out: out.w8, tw_out: out.steps }, grid1d(groups, 64), { m: 0, n, k, accumulate: 0 });
    return out;
  }

  /**
   * dX [M, K] (+)= dY [M, N]·W, K-blocked only (blocks run along N: a weight's step is shared by
   * its group's rows in the block; those steps are computed on a weight's first call and kept).
   * N a multiple of the K block and K of 64; rows beyond the workspace go through in slices.
   */
  backwardInput(rec: Recorder, dy: Tensor, w: Q4Weight, dx: Tensor, accumulate = false): void {
    const op = 'matmulQ4Mma.backwardInput';
    if (!this.rounding) throw new ShapeError(op, 'the input gradient needs a K block above 32');
    const m = rowsOf(op, w, { name: 'dy', t: dy, width: w.n, dim: 'N' }, { name: 'dx', t: dx, width: w.k });
    if (this.rowsFitting(w.n) === 0) throw new ShapeError(op, `N = ${w.n}: not even 64 rows of dY fit the workspace of ${this.maxRows} x ${this.maxK}`);
    if (w.n % this.kBlock !== 0 || w.k % 64 !== 0) throw new ShapeError(op, `N = ${w.n} must be a multiple of the K block ${this.kBlock} and K = ${w.k} of 64`);
    const all = { m, n: w.n, k: w.k, accumulate: accumulate ? 1 : 0 };
    const tw = this.stepsOf(rec, w, all);
    for (const [r0, rows] of this.slices(m, w.n)) {
      // The forward's GEMM on Wᵀ: x is dY (rows of width N, the reduction), y is dX (width K).
      const uniforms = { m: rows, n: w.k, k: w.n, accumulate: all.accumulate };
      this.quantize(rec, rowSlice(dy, r0, rows, w.n), rows, w.n, uniforms);
      const weights = this.rounded(rec, w, tw, true);
      const grid: [number, number] = [Math.ceil(w.k / this.tile.cols), Math.ceil(rows / this.tile.rows)];
      rec.dispatch(this.gemmK, { xq_in: this.xq, sx_in: this.sx, ...weights, y: rowSlice(dx, r0, rows, w.k) }, grid, uniforms);
    }
  }

  /** x's rows into the workspace's int8 limbs (with steps 'row', their largest |x| first). */
  private quantize(rec: Recorder, x: Tensor, rows: number, width: number, uniforms: Record<string, number>): void {
    const rs = this.rowScaling;
    if (rs) rec.dispatch(rs.absmax, { x, rmax_out: rs.amax }, grid1d(rows, 1), uniforms);
    rec.dispatch(this.quantizeK, { x, xq: this.xq, sx: this.sx, ...(rs ? { rmax_in: rs.amax } : {}) }, this.quantizeGrid(rows * width), uniforms);
  }

  /** W re-rounded to int8 per (row, K block) by requant_w, or (`transposed`, with block_steps'
   * `steps`) Wᵀ per (column, block of N) by requant_wt, into this instance's scratch, which grows
   * to the largest weight's N·K bytes on its first call (25 MiB for the 2B's joined gate/up). With
   * steps 'row', requant_w takes row_steps' `steps` and the blocks are the whole of K or N. */
  private rounded(rec: Recorder, w: Q4Weight, steps: Tensor | null, transposed: boolean): { w8_in: Tensor; tw_in: Tensor } {
    const words = (w.n * w.k) / 4;
    if (!this.w8 || this.w8.numel < words) {
      // The smaller one goes back to the pool now: calls recorded before still read it, and the
      // queue orders them before any later use of its buffer (as a split GEMM's scratch); not
      // while a tape is captured, whose replays would read it again.
      if (!rec.capturing) {
        this.w8?.release();
        this.w8Steps?.release();
      }
      this.w8 = this.gpu.tensor([words], 'u32', 'matmul_q4_mma.w8');
      this.w8Steps = this.gpu.tensor([(w.n * w.k) / this.kBlock], 'f32', 'matmul_q4_mma.w8_steps');
    }
    const groups = (w.n * w.k) / Q4_GROUP;
    const out = { codes4: w.codes, scales: w.scales, w8_out: this.w8, tw_out: this.w8Steps! };
    const uniforms = { m: 0, n: w.n, k: w.k, accumulate: 0 };
    const k = transposed ? this.rounding!.wt : this.rounding!.w;
    rec.dispatch(k, steps ? { ...out, tw_in: steps } : out, grid1d(groups, 64), uniforms);
    return { w8_in: this.w8, tw_in: this.w8Steps! };
  }

  /** Workgroups of the quantize dispatch for `n` values of x: quantize_rows takes a group of 32 a
   * thread (64 threads), quantize_rows_kb a vec4 a lane (256 lanes). */
  private quantizeGrid(n: number): [number, number] {
    return this.kBlock === 32 ? grid1d(n / Q4_GROUP, 64) : grid1d(n / 4, 256);
  }

  /** A weight's steps for the input gradient (block_steps), made on its first backward and kept:
   * the base weights are frozen, so a weight's scales must not change while this op lives. */
  private stepsOf(rec: Recorder, w: Q4Weight, uniforms: Record<string, number>): Tensor {
    let tw = this.inputSteps.get(w.scales);
    if (!tw) {
      const count = (this.rowScaling ? 1 : w.n / this.kBlock) * (w.k / Q4_GROUP);
      tw = this.gpu.tensor([count], 'f32', 'matmul_q4_mma.tw');
      rec.dispatch(this.rounding!.steps, { scales: w.scales, tw_out: tw }, grid1d(count, 64), uniforms);
      this.inputSteps.set(w.scales, tw);
    }
    return tw;
  }

  /** With steps 'row', a weight's forward steps (row_steps: one per row of W), made on its first
   * call and kept like stepsOf's. */
  private rowStepsOf(rec: Recorder, w: Q4Weight): Tensor {
    let tw = this.forwardSteps.get(w.scales);
    if (!tw) {
      tw = this.gpu.tensor([w.n], 'f32', 'matmul_q4_mma.row_steps');
      rec.dispatch(this.rowScaling!.steps, { scales: w.scales, tw_out: tw }, grid1d(w.n, 64), { m: 0, n: w.n, k: w.k, accumulate: 0 });
      this.forwardSteps.set(w.scales, tw);
    }
    return tw;
  }

  /** [first row, rows] of the slices of m rows of x `width` wide: as few as the workspace allows,
   * of equal size rounded up to 64 rows (the slices' binding offsets; a short last slice would
   * leave SMs idle). */
  private slices(m: number, width: number): [number, number][] {
    const cap = this.rowsFitting(width);
    if (m > cap && cap % 64 !== 0) throw new ShapeError('matmulQ4Mma', `${m} rows need slices of maxRows = ${cap}, which is not a multiple of 64`);
    return rowSlices(m, cap);
  }

  release(): void {
    for (const tw of [...this.inputSteps.values(), ...this.forwardSteps.values()]) tw.release();
    this.inputSteps.clear();
    this.forwardSteps.clear();
    this.rowScaling?.amax.release();
    this.xq.release();
    this.sx.release();
    this.w8?.release();
    this.w8Steps?.release();
    this.w8 = this.w8Steps = null;
  }
}

// The params struct of each kernel file, in order.
const ROWS_UNIFORMS = { m: 'u32', k: 'u32' } as const;
const WEIGHT_UNIFORMS = { n: 'u32', k: 'u32' } as const;
const GEMM_UNIFORMS = { m: 'u32', n: 'u32', k: 'u32', accumulate: 'u32' } as const;

type MmaEntry = MatrixKernelEntry;
