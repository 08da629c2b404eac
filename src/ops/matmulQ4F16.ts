// y = x·Wᵀ and dX = dY·W for 4-bit weights on f16 tensor cores (shaders/matmul_q4_f16.wgsl): W is
// expanded to f16 once a call (src/ops/q4ToF16.ts; transposed for dX, which then runs as the
// forward on Wᵀ) or, past expandMaxWords, dequantized with its group scale in workgroup memory; x
// (or dY) is scaled per row by a power of two (shaders/f16_row_scale.wgsl) and rounded to f16, and
// the products accumulate in f32. A LoRA adapter's update (y += s·u·Bᵀ) or its part of dX (t·A)
// joins the product as more of the reduction: x goes on with s·u (or dY with t) and the expanded W
// with B (or Aᵀ), so that it runs on the tensor cores inside the one GEMM. Dense weights (the
// vision tower's: f32, bf16 or f16) are rounded to f16 the same way, into the scratch a call
// (gemmDense). Needs shader-f16 and Chromium's subgroup-matrix extension with an f16 -> f32
// configuration of square fragments (16x16x16 on NVIDIA, 8x8x8 on Apple).
import { capabilitiesOf, compileMatrixKernels, configsOf, grid1d, MissingFeatureError, ShapeError, Tensor, type Capabilities, type Gpu, type Kernel, type Recorder, type SubgroupMatrixConfig } from '../gpu';
import { DENSE_DTYPES, isDenseDtype, type DenseDtype } from './matmul';
import { checkQ4Shape, f32Rows, Q4_GROUP, rowSlice, rowSlices, rowsOf, type Q4Weight } from './matmulQ4';
import { SUBGROUP_MATRIX } from './matmulQ4Mma';
import { EXPAND_MAX_WORDS, f16BlockedWords, joinsWidths, LORA_COLUMNS_RESERVED, loraColumns } from './productSizes';
import { Q4ToF16, type Q4Extension } from './q4ToF16';

/** The workgroup tile of y: `rows` x `cols` by `threads` threads in subgroups of 32, each subgroup
 * over 2 x `tn` fragments, staged through `buffers` buffers of workgroup memory; its epilogue
 * passes the subgroups' fragments through workgroup memory in `outRounds` rounds (default 1). */
export interface F16Tile {
  rows: number;
  cols: number;
  threads: number;
  tn: 2 | 4;
  buffers: 1 | 2;
  outRounds?: 1 | 2;
}

/** A device's tiles: `f16` for f16 weights (Q4 expanded once a call, or dense), `q4` for Q4 codes
 * dequantized in the kernel (forward and input gradient), and for f16 weights where `f16`'s grid
 * would have fewer workgroups than MatmulQ4F16Options.wideFrom. */
export interface F16Tiles {
  f16: F16Tile;
  q4: F16Tile;
  /** For f16 weights, a taller tile whose grid the GPU runs in one wave where `f16`'s takes two
   * (MatmulQ4F16Options.waveSlots): fewer, larger workgroups, each slower per product. */
  oneWave?: F16Tile;
}

const T128X128: F16Tile = { rows: 128, cols: 128, threads: 256, tn: 4, buffers: 2 };
const T64X128: F16Tile = { rows: 64, cols: 128, threads: 256, tn: 2, buffers: 2 };
const T64X64: F16Tile = { rows: 64, cols: 64, threads: 128, tn: 2, buffers: 2 };
const A64X64: F16Tile = { rows: 64, cols: 64, threads: 256, tn: 4, buffers: 2 };
const A32X64: F16Tile = { rows: 32, cols: 64, threads: 128, tn: 4, buffers: 2 };

/** The tiles by fragment size, fastest first (BENCHMARKS.md); a device takes the first that fits
 * its workgroup memory and threads (f16TileFor). */
export const F16_TILES: Readonly<Record<number, readonly F16Tiles[]>> = {
  16: [
    { f16: { rows: 128, cols: 256, threads: 512, tn: 4, buffers: 1 }, q4: T128X128, oneWave: { rows: 160, cols: 256, threads: 640, tn: 4, buffers: 1, outRounds: 2 } },
    { f16: T128X128, q4: T128X128 },
    { f16: T64X128, q4: T64X128 },
    { f16: T64X64, q4: T64X64 },
  ],
  8: [
    { f16: A64X64, q4: A64X64 },
    { f16: A32X64, q4: A32X64 },
  ],
};

export const DEFAULT_F16_TILES: F16Tiles = F16_TILES[16][0];

/** Whether `tiles` name one tile for both uses (then f16 weights need no second kernel). */
export function oneTile(tiles: F16Tiles): boolean {
  return JSON.stringify(tiles.f16) === JSON.stringify(tiles.q4);
}

/** From this many workgroups of the `f16` tile, f16 weights take it, below it the `q4` tile: on an
 * H100 the 128x256 tile's 160-workgroup grids (N 2048 at 2560 rows) ran 1-5% slower than
 * 128x128's, its 320-workgroup grids 5% faster (BENCHMARKS.md). */
export const WIDE_FROM = 256;

export interface MatmulQ4F16Options {
  /** Rows of x a dispatch (the workspace of x's f16 copy and row scales); more rows go through in
   * slices. A multiple of 64. */
  maxRows: number;
  /** The widest x (the f16 copy of x is a workspace of maxRows x maxK halves). */
  maxK: number;
  /** Default: the first of F16_TILES the device runs. */
  tiles?: F16Tiles;
  /** Default WIDE_FROM; 0 puts every product on f16 weights on the `f16` tile (a check of that
   * kernel on small shapes). */
  wideFrom?: number;
  /** Workgroups of the `oneWave` tile the GPU runs at once (one a multiprocessor: multiprocessorsOf),
   * where known: a product on f16 weights whose `f16` grid exceeds it and whose `oneWave` grid
   * does not takes the `oneWave` tile (oneWaveTakes). Unset: never. */
  waveSlots?: number | null;
  /** A Q4 weight of at most this many f16 words (N·K / 2) is expanded to f16 once a call (a
   * scratch as large as the largest such weight), forward and input gradient, instead of
   * dequantized in every workgroup's staging (BENCHMARKS.md). Larger weights (the LM head)
   * dequantize in the kernel. Default EXPAND_MAX_WORDS (src/ops/productSizes.ts). */
  expandMaxWords?: number;
}

/** The GEMM's variants: on Q4 codes forward and input gradient, on f16 weights forward only (an
 * input gradient on an expanded W expands it transposed and runs this forward on Wᵀ). */
interface GemmKernels {
  q4: Kernel;
  q4Dinput: Kernel;
  w16: Kernel;
  /** On the q4 tile (MatmulQ4F16Options.wideFrom); w16 itself where the tiles are the same. */
  w16Few: Kernel;
}

/** The one-wave tile's kernel (on f16 weights) and the workgroups the GPU runs at once. */
interface OneWave {
  tile: F16Tile;
  kernel: Kernel;
  slots: number;
}

/** matmul_q4_f16.wgsl's uniforms. */
export const F16_GEMM_UNIFORMS = { m: 'u32', n: 'u32', k: 'u32', accumulate: 'u32', split1: 'u32', split2: 'u32', bias: 'u32' } as const;

/** Whether a product of m rows and n columns on f16 weights takes the `oneWave` tile: the GPU runs
 * its grid in one wave of `slots` workgroups, and `wide`'s grid in more. */
export function oneWaveTakes(m: number, n: number, wide: F16Tile, oneWave: F16Tile, slots: number): boolean {
  const groups = (t: F16Tile) => Math.ceil(n / t.cols) * Math.ceil(m / t.rows);
  return groups(oneWave) <= slots && groups(wide) > slots;
}

/**
 * Whether products of one x (m rows; each output's W [n, k] and where its y starts) run as one
 * product on their expansions side by side: weights that may (joinsWidths), outputs back to back
 * in one buffer.
 */
export function joinsOutputs(outs: readonly { n: number; k: number; buffer: unknown; byteOffset: number }[], m: number, maxK: number, expandMaxWords: number): boolean {
  if (!joinsWidths(outs.map((o) => o.n), outs[0]?.k ?? 0, maxK, expandMaxWords)) return false;
  return outs.every((o, i) => o.buffer === outs[0].buffer && (i === 0 || o.byteOffset === outs[i - 1].byteOffset + 4 * m * outs[i - 1].n));
}

/** One product of `gemmDense`: y (+)= x·Wᵀ (+ b), W [n, k] f32, bf16 or f16 and b [n] f32. */
export interface DenseOutput {
  w: Tensor;
  y: Tensor;
  b?: Tensor | null;
}

/** One product of `gemmShared`: y (+)= x·Wᵀ. */
export interface F16Output {
  w: Q4Weight;
  y: Tensor;
}

/** An adapter's update inside a forward product: y += scale·u·Bᵀ, u [rows, r] and B [n, r]. */
export interface F16LoraUpdate {
  u: Tensor;
  B: Tensor;
  r: number;
  scale: number;
}

/** An adapter's part of an input gradient inside the product: dX += t·A, t [rows, r] (its scale
 * in it) and A [r, k]. */
export interface F16LoraInput {
  t: Tensor;
  A: Tensor;
  r: number;
}

/** Most adapters one x carries (q/k/v). */
const EXT_MAX_ADAPTERS = 3;

/** The f16 -> f32 configuration with square fragments the kernels take (the widest offered), or null. */
export function f16Config(caps: Capabilities): SubgroupMatrixConfig | null {
  const square = configsOf(caps, 'f16').filter((c) => c.resultComponentType === 'f32' && c.M === c.N && Q4_GROUP % c.K === 0);
  return square.sort((a, b) => b.M - a.M || b.K - a.K)[0] ?? null;
}

/** Why `caps` cannot run the f16 tensor-core products (with `tiles`, else with any of F16_TILES),
 * or null when it can. */
export function f16Unsupported(caps: Capabilities, tiles?: F16Tiles): string | null {
  if (!caps.shaderF16) return 'no shader-f16 on this device';
  if (!caps.subgroupMatrix.enabled) return `no '${SUBGROUP_MATRIX}' feature on this device`;
  if (!caps.subgroups.enabled) return "no 'subgroups' feature";
  const cfg = f16Config(caps);
  if (!cfg) return 'no f16->f32 subgroup-matrix configuration with square fragments';
  if (caps.subgroups.minSize !== 32 || caps.subgroups.maxSize !== 32) return `subgroups of ${caps.subgroups.minSize ?? '?'} to ${caps.subgroups.maxSize ?? '?'} lanes; the tiles need exactly 32`;
  const options = tiles ? [tiles] : (F16_TILES[cfg.M] ?? []);
  if (options.length === 0) return `no tile for ${cfg.M}x${cfg.M} fragments`;
  const why = options.map((t) => tileMisfit(caps, t.f16, cfg.M, false) ?? tileMisfit(caps, t.q4, cfg.M, true));
  return why.some((w) => w === null) ? null : why[why.length - 1];
}

/** The first tiles of F16_TILES that `caps` runs (f16Unsupported(caps) must be null). */
export function f16TileFor(caps: Capabilities): F16Tiles {
  const cfg = f16Config(caps)!;
  const tiles = (F16_TILES[cfg.M] ?? []).find((t) => tileMisfit(caps, t.f16, cfg.M, false) === null && tileMisfit(caps, t.q4, cfg.M, true) === null);
  if (!tiles) throw new ShapeError('matmulQ4F16', f16Unsupported(caps) ?? 'no tile fits');
  return tiles;
}

/** What keeps `caps` from running `tile` with fragments of `fr` x `fr` (`q4`: on Q4 codes, with
 * the input gradient's staging), or null. */
function tileMisfit(caps: Capabilities, tile: F16Tile, fr: number, q4: boolean): string | null {
  const bad = tileProblem(tile, fr);
  if (bad) return bad;
  const bytes = f16TileBytes(tile, fr, q4);
  if (bytes > caps.limits.maxComputeWorkgroupStorageSize) return `a ${tile.rows}x${tile.cols} tile needs ${bytes} bytes of workgroup memory; this GPU has ${caps.limits.maxComputeWorkgroupStorageSize}`;
  if (tile.threads > caps.limits.maxComputeInvocationsPerWorkgroup) return `a tile takes ${tile.threads} threads a workgroup; this GPU allows ${caps.limits.maxComputeInvocationsPerWorkgroup}`;
  return null;
}

/** What is wrong with `tile` for fragments of `fr` x `fr`, or null. */
function tileProblem(t: F16Tile, fr: number): string | null {
  const { rows, cols, threads, tn, buffers } = t;
  const tm = 2;
  if (tn !== 2 && tn !== 4) return `tn must be 2 or 4, got ${String(tn)}`;
  if (buffers !== 1 && buffers !== 2) return `buffers must be 1 or 2, got ${String(buffers)}`;
  const rounds = t.outRounds ?? 1;
  if ((rounds !== 1 && rounds !== 2) || (threads / 32) % rounds !== 0) return `outRounds must be 1 or 2 and divide the tile's subgroups, got ${String(rounds)}`;
  if (rows % (fr * tm) !== 0 || cols % (fr * tn) !== 0) return `a ${rows}x${cols} tile is not a whole number of ${tm}x${tn} blocks of ${fr}x${fr} fragments`;
  if ((rows / (fr * tm)) * (cols / (fr * tn)) * 32 !== threads) return `a ${rows}x${cols} tile in ${tm}x${tn} blocks of ${fr}x${fr} takes ${(rows / (fr * tm)) * (cols / (fr * tn)) * 32} threads, not ${threads}`;
  if ((rows * 4) % threads !== 0 || cols % 16 !== 0) return `a ${rows}x${cols} tile does not divide among ${threads} threads`;
  return null;
}

/** Workgroup bytes: x and W staged as f16 in `buffers` buffers (rows padded by 8; on Q4 codes, the
 * input gradient's W [32][cols] in one block a subgroup column, each padded by 8), one f32
 * fragment a subgroup. */
export function f16TileBytes(t: F16Tile, fr: number, q4: boolean): number {
  const dinputW = q4 ? 32 * (t.cols / (t.tn * fr)) * (t.tn * fr + 8) : 0;
  const staged = t.buffers * 2 * (t.rows * 40 + Math.max(t.cols * 40, dinputW));
  return staged + (4 * (t.threads / 32) * fr * fr) / (t.outRounds ?? 1);
}

/** shaders/matmul_q4_f16.wgsl's defines for `tile` on fragments of fr x fr x fk (the variant's W16 and DINPUT besides). */
export function f16GemmDefines(tile: F16Tile, fr: number, fk: number): { BM: number; BN: number; WG: number; TN: number; NBUF: number; NBUF1: boolean; FR: number; FK: number; KSTEPS: number; AS_PAD: number; OUT_ROUNDS: number } {
  return { BM: tile.rows, BN: tile.cols, WG: tile.threads, TN: tile.tn, NBUF: tile.buffers, NBUF1: tile.buffers === 1, FR: fr, FK: fk, KSTEPS: Q4_GROUP / fk, AS_PAD: 8, OUT_ROUNDS: tile.outRounds ?? 1 };
}

export class MatmulQ4F16 {
  /** Q4 weights expanded to f16 (expand), grown on demand. */
  private scratch: Tensor | null = null;

  private constructor(
    private readonly gpu: Gpu,
    private readonly rowScaleK: Kernel,
    private readonly rowScaleExtK: Kernel,
    private readonly gemmK: GemmKernels,
    private readonly convert: { dense: Record<DenseDtype, Kernel>; q4: Q4ToF16 },
    readonly expandMaxWords: number,
    private readonly rs: Tensor,
    private x16: Tensor,
    readonly maxK: number,
    readonly tiles: F16Tiles,
    readonly config: SubgroupMatrixConfig,
    readonly maxRows: number,
    private readonly wideFrom: number,
    private readonly oneWave: OneWave | null,
  ) {}

  static async create(gpu: Gpu, opts: MatmulQ4F16Options): Promise<MatmulQ4F16> {
    const caps = capabilitiesOf(gpu);
    const why = f16Unsupported(caps, opts.tiles);
    if (why) throw new MissingFeatureError(caps.shaderF16 ? SUBGROUP_MATRIX : 'shader-f16', why);
    const tiles = opts.tiles ?? f16TileFor(caps);
    const cfg = f16Config(caps)!;
    const { maxRows } = opts;
    if (!(Number.isInteger(maxRows) && maxRows > 0 && maxRows % 64 === 0)) throw new ShapeError('matmulQ4F16', `maxRows must be a positive multiple of 64, got ${maxRows}`);
    const one = async (family: string, shader: string, entry: string, uniforms: Record<string, 'u32' | 'f32'>, d: Record<string, number | boolean>) => (await compileMatrixKernels(gpu, family, [{ shader, entry, uniforms }], d))[0];
    const variant = (family: string, tile: F16Tile, w16: boolean, dinput: boolean) => one(family, 'matmul_q4_f16', 'gemm', F16_GEMM_UNIFORMS, { ...f16GemmDefines(tile, cfg.M, cfg.K), W16: w16, DINPUT: dinput });
    const sameTile = oneTile(tiles);
    const slots = opts.waveSlots ?? 0;
    const tall = slots > 0 && tiles.oneWave && !tileMisfit(caps, tiles.oneWave, cfg.M, false) ? tiles.oneWave : null;
    // Compiled side by side: a load waits for the slowest, not for the sum.
    const convertDense = (d: Record<string, boolean>) => one('matmul_q4_f16', 'f16_convert', 'dense_to_f16', { count: 'u32', n: 'u32', k: 'u32' }, { BLOCKED: true, ...d });
    const [rowScale, rowScaleExt, q4, q4Dinput, w16, w16Few, w16Tall, dense, denseBf16, denseF16] = await Promise.all([
      one('matmul_q4_f16', 'f16_row_scale', 'row_scale', ROW_SCALE_UNIFORMS.plain, rowScaleDefines(false)),
      one('matmul_q4_f16.lora', 'f16_row_scale', 'row_scale', ROW_SCALE_UNIFORMS.ext, rowScaleDefines(true)),
      variant('matmul_q4_f16', tiles.q4, false, false),
      variant('matmul_q4_f16.dinput', tiles.q4, false, true),
      variant('matmul_q4_f16.w16', tiles.f16, true, false),
      sameTile ? null : variant('matmul_q4_f16.w16_few', tiles.q4, true, false),
      tall ? variant('matmul_q4_f16.w16_one_wave', tall, true, false) : null,
      convertDense({}),
      convertDense({ HALVES: true, BF16: true }),
      convertDense({ HALVES: true }),
    ]);
    const convert = { dense: { f32: dense, bf16: denseBf16, f16: denseF16 }, q4: Q4ToF16.create(gpu) };
    const rs = gpu.tensor([maxRows], 'f32', 'matmul_q4_f16.row_scales');
    checkQ4Shape('matmulQ4F16', 1, opts.maxK);
    const x16 = gpu.tensor([(maxRows * (opts.maxK + LORA_COLUMNS_RESERVED)) / 2], 'u32', 'matmul_q4_f16.x16');
    return new MatmulQ4F16(gpu, rowScale, rowScaleExt, { q4, q4Dinput, w16, w16Few: w16Few ?? w16 }, convert, opts.expandMaxWords ?? EXPAND_MAX_WORDS, rs, x16, opts.maxK, tiles, cfg, maxRows, opts.wideFrom ?? WIDE_FROM, tall && w16Tall ? { tile: tall, kernel: w16Tall, slots } : null);
  }

  /** The forward takes weights whose rows of x (K wide) fit the workspace at least 64 at a time. */
  takesForward(w: Q4Weight): boolean {
    return this.rowsFitting(w.k) > 0;
  }

  /** The input gradient reduces over W's rows in steps of 32; its x (dY) is N wide. */
  takesInput(w: Q4Weight): boolean {
    return w.n % Q4_GROUP === 0 && this.rowsFitting(w.n) > 0;
  }

  /** Rows of x of `width` a dispatch: maxRows up to the workspace's width, beyond it as many whole
   * 64-row slices as it holds (0: none fits). */
  private rowsFitting(width: number): number {
    const cap = (2 * this.x16.numel) / this.maxRows;
    if (width <= cap) return this.maxRows;
    return 64 * Math.floor((this.maxRows * cap) / width / 64);
  }

  /** Whether products on `w` may carry LoRA terms (gemmShared's and backwardInput's `lora`): W is
   * expanded once a call, where its extension is written (the input gradient: N a multiple of 32). */
  takesLora(w: Q4Weight, input: boolean): boolean {
    return this.expands(w) && (!input || this.takesInput(w));
  }

  /** x16 widened to hold maxRows rows of `width` where it holds fewer: for LoRA columns past maxK +
   * LORA_COLUMNS_RESERVED only (wider x without them, the LM head's input gradient, goes through in
   * slices). As the weight scratch: calls recorded before keep the old buffer, which the queue
   * orders before its reuse. */
  private widen(rec: Recorder, width: number): void {
    if ((this.maxRows * width) / 2 <= this.x16.numel) return;
    if (!rec.capturing) this.x16.release();
    this.x16 = this.gpu.tensor([(this.maxRows * width) / 2], 'u32', 'matmul_q4_f16.x16');
  }

  /** y [M, N] (+)= x [M, K]·Wᵀ. */
  gemm(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor, accumulate = false): void {
    this.gemmShared(rec, x, [{ w, y }], accumulate);
  }

  /**
   * Every product of `outs` on the same x (q/k/v, gate/up): x's row scales are found once a slice.
   * Outputs with `lora` (1 to 3, one rank; each W taking it, takesLora) also get scale·u·Bᵀ: their
   * u after x's K columns, each B at its u's place in its W's expansion, zeros there for an output
   * without one.
   */
  gemmShared(rec: Recorder, x: Tensor, outs: readonly (F16Output & { lora?: F16LoraUpdate })[], accumulate = false): void {
    const op = 'matmulQ4F16.gemm';
    const k = outs[0].w.k;
    if (outs.some((o) => o.w.k !== k)) throw new ShapeError(op, `products of one x need one K, got ${outs.map((o) => o.w.k).join(', ')}`);
    const m = outs.map(({ w, y }) => rowsOf(op, w, { name: 'x', t: x, width: w.k, dim: 'K' }, { name: 'y', t: y, width: w.n }))[0];
    const terms = outs.flatMap((o) => (o.lora ? [o.lora] : []));
    const ext = terms.length > 0 ? this.loraColumnsOf(op, terms.map((t) => ({ f: t.u, r: t.r })), m, outs, false) : null;
    const width = k + (ext?.e ?? 0);
    if (ext) this.widen(rec, width);
    // Each output's extension: its adapter's B at its u's place, or zeros over the whole extension (rank 0).
    let slot = 0;
    const exts = outs.map(({ lora }): Q4Extension | undefined => (ext ? (lora ? { factor: lora.B, e: ext.e, r: ext.r, off: ext.r * slot++ } : { factor: terms[0].B, e: ext.e, r: 0, off: 0 }) : undefined));
    const slices = this.slices(op, m, width);
    const joined = slices.length === 1 && this.joins(outs, m) ? this.joinedWeight(rec, outs, exts) : null;
    for (const [r0, rows] of slices) {
      const xin = this.rowScales(rec, rowSlice(x, r0, rows, k), rows, k, ext && { e: ext.e, r: ext.r, terms: terms.map((t) => ({ u: rowSlice(t.u, r0, rows, ext.r), scale: t.scale })) });
      const acc = accumulate ? 1 : 0;
      if (joined) {
        // One output of m rows a part, the parts back to back (q4_joined_parts.wgsl).
        const n = outs.reduce((a, o) => a + o.w.n, 0);
        const y = new Tensor(outs[0].y.buffer, [m * n], 'f32', outs[0].y.label, outs[0].y.byteOffset);
        const split1 = outs[0].w.n;
        this.dispatch(rec, false, xin, joined, y, { m, n, k: width, accumulate: acc, split1, split2: outs.length > 2 ? split1 + outs[1].w.n : n });
        continue;
      }
      outs.forEach(({ w, y }, i) => this.dispatch(rec, false, xin, this.weight(rec, w, false, exts[i]), rowSlice(y, r0, rows, w.n), { m: rows, n: w.n, k: width, accumulate: acc }));
    }
  }

  /** Whether gemmShared runs the products of `outs` (m rows of one x) as one (joinsOutputs). */
  joins(outs: readonly F16Output[], m: number): boolean {
    return joinsOutputs(outs.map(({ w, y }) => ({ n: w.n, k: w.k, buffer: y.buffer, byteOffset: y.byteOffset })), m, this.maxK, this.expandMaxWords);
  }

  /** The expansions of `outs`' weights (with their extensions) one after another in the scratch:
   * [N₀ + N₁ (+ N₂)][K + e] in blocks of 32 x 32, as one weight of those rows. */
  private joinedWeight(rec: Recorder, outs: readonly F16Output[], exts: readonly (Q4Extension | undefined)[]): Record<string, Tensor> {
    const words = outs.map(({ w }, i) => Q4ToF16.words(w, false, exts[i]?.e ?? 0));
    const all = words.reduce((a, b) => a + b, 0);
    const scratch = this.scratchOf(rec, all);
    let at = 0;
    outs.forEach(({ w }, i) => {
      this.convert.q4.expand(rec, w, new Tensor(scratch.buffer, [words[i]], 'u32', scratch.label, scratch.byteOffset + 4 * at), false, exts[i]);
      at += words[i];
    });
    return { w16: scratch };
  }

  /** The LoRA columns of a product (their width e and rank r) once its terms (their u or t, `f`)
   * and weights are checked. */
  private loraColumnsOf(op: string, terms: readonly { f: Tensor; r: number }[], m: number, outs: readonly { w: Q4Weight }[], input: boolean): { e: number; r: number } {
    if (terms.length > EXT_MAX_ADAPTERS) throw new ShapeError(op, `at most ${EXT_MAX_ADAPTERS} adapters on one x, got ${terms.length}`);
    const r = terms[0].r;
    if (terms.some((t) => t.r !== r)) throw new ShapeError(op, `adapters of one x need one rank, got ${terms.map((t) => t.r).join(', ')}`);
    for (const { w } of outs) if (!this.takesLora(w, input)) throw new ShapeError(op, `a weight of ${w.n}x${w.k} is not expanded to f16${input ? ' with N a multiple of 32' : ''}: no LoRA terms inside its product`);
    for (const t of terms) {
      if (t.f.dtype !== 'f32' || t.f.shape.length !== 2 || t.f.shape[1] !== r || t.f.shape[0] < m) throw new ShapeError(op, `'${t.f.label}' must be f32 [≥ ${m}, ${r}], got ${t.f.dtype} [${t.f.shape.join(', ')}]`);
    }
    return { e: loraColumns(terms.length, r), r };
  }

  /** A dense weight W [n, k] (f32, bf16 or f16) rounded to f16 once into a tensor of its own, in
   * the kernels' blocks (benchmarks time the GEMM on it alone: tools/device/f16Gemm.ts). */
  toF16(rec: Recorder, w: Tensor, n: number, k: number, label: string): Tensor {
    const w16 = this.gpu.tensor([f16BlockedWords(n, k)], 'u32', `${label}.f16`);
    this.denseToF16(rec, w, n, k, w16, 'matmulQ4F16.toF16');
    return w16;
  }

  /** Whether gemmDense takes a dense weight of K `k`. */
  takesDense(k: number): boolean {
    return k % Q4_GROUP === 0 && k >= Q4_GROUP && this.rowsFitting(k) > 0;
  }

  /**
   * y (+)= x·Wᵀ (+ b) for dense weights as they are held (f32, bf16 or f16 [n, k]), every product
   * of `outs` on one x: each W rounded to f16 into the scratch for its call (no copy is kept),
   * which its dispatch reads before the next expansion rewrites it; a bias [n] added as y is
   * stored (the kernel reading bf16 W itself ran slower: BENCHMARKS.md, Tried and not kept).
   */
  gemmDense(rec: Recorder, x: Tensor, outs: readonly DenseOutput[], accumulate = false): void {
    const op = 'matmulQ4F16.gemmDense';
    const k = outs[0].w.shape[1];
    if (outs.some((o) => o.w.shape.length !== 2 || o.w.shape[1] !== k)) throw new ShapeError(op, `products of one x need 2-D weights of one K, got ${outs.map((o) => `[${o.w.shape.join(', ')}]`).join(', ')}`);
    if (!this.takesDense(k)) throw new ShapeError(op, `K = ${k} must be a positive multiple of ${Q4_GROUP} that fits the workspace`);
    for (const { w, b } of outs) {
      if (b && (b.dtype !== 'f32' || b.numel !== w.shape[0])) throw new ShapeError(op, `bias '${b.label}' must be f32 [${w.shape[0]}], got ${b.dtype} [${b.shape.join(', ')}]`);
    }
    const m = outs.map(({ w, y }) => f32Rows(op, { name: 'x', t: x, width: k, dim: 'K' }, { name: 'y', t: y, width: w.shape[0] }))[0];
    for (const [r0, rows] of this.slices(op, m, k)) {
      const xin = this.rowScales(rec, rowSlice(x, r0, rows, k), rows, k);
      for (const { w, y, b } of outs) {
        const n = w.shape[0];
        const scratch = this.scratchOf(rec, f16BlockedWords(n, k));
        this.denseToF16(rec, w, n, k, scratch, op);
        this.dispatch(rec, false, xin, { w16: scratch }, rowSlice(y, r0, rows, n), { m: rows, n, k, accumulate: accumulate ? 1 : 0 }, b ?? undefined);
      }
    }
  }

  /** Record W [n, k] rounded to f16 into `w16` in blocks of 32 x 32. */
  private denseToF16(rec: Recorder, w: Tensor, n: number, k: number, w16: Tensor, op: string): void {
    if (!isDenseDtype(w.dtype) || w.numel !== n * k) throw new ShapeError(op, `'${w.label}' must be ${DENSE_DTYPES.join(', ')} [${n}, ${k}], got ${w.dtype} [${w.shape.join(', ')}]`);
    if (!Number.isInteger(n) || n < 1 || k % Q4_GROUP !== 0 || k < Q4_GROUP) throw new ShapeError(op, `'${w.label}': K = ${k} must be a positive multiple of ${Q4_GROUP}`);
    rec.dispatch(this.convert.dense[w.dtype], { w, w16 }, grid1d((n * k) / 2, 256), { count: (n * k) / 2, n, k });
  }

  /** Whether W is expanded to f16 once a call (expandMaxWords) rather than dequantized in the kernel. */
  private expands(w: Q4Weight): boolean {
    return (w.n * w.k) / 2 <= this.expandMaxWords;
  }

  /** The bindings of a Q4 weight: its f16 expansion (expandMaxWords; `transpose`: Wᵀ) into the one
   * scratch, which the dispatch recorded next reads before any later expansion rewrites it, or its
   * codes and scales. */
  private weight(rec: Recorder, w: Q4Weight, transpose = false, ext?: Q4Extension): Record<string, Tensor> {
    if (!this.expands(w)) return { codes2: w.codes, scales: w.scales };
    const scratch = this.scratchOf(rec, Q4ToF16.words(w, transpose, ext?.e ?? 0));
    this.convert.q4.expand(rec, w, scratch, transpose, ext);
    return { w16: scratch };
  }

  /** The one scratch expansions write, grown to `words` where smaller. */
  private scratchOf(rec: Recorder, words: number): Tensor {
    if (!this.scratch || this.scratch.numel < words) {
      // As MatmulQ4Mma's scratch: calls recorded before still read the smaller one, and the
      // queue orders them before any reuse of its buffer; kept while a tape is captured.
      if (!rec.capturing) this.scratch?.release();
      this.scratch = this.gpu.tensor([words], 'u32', 'matmul_q4_f16.w16');
    }
    return this.scratch;
  }

  /** dX [M, K] (+)= dY [M, N]·W; N a multiple of 32. With `lora` (takesLora(w, true)) also + t·A:
   * t after dY's N columns, Aᵀ after Wᵀ's. */
  backwardInput(rec: Recorder, dy: Tensor, w: Q4Weight, dx: Tensor, accumulate = false, lora?: F16LoraInput): void {
    const op = 'matmulQ4F16.backwardInput';
    if (!this.takesInput(w)) throw new ShapeError(op, `N = ${w.n} must be a multiple of ${Q4_GROUP}`);
    const m = rowsOf(op, w, { name: 'dy', t: dy, width: w.n, dim: 'N' }, { name: 'dx', t: dx, width: w.k });
    const ext = lora ? this.loraColumnsOf(op, [{ f: lora.t, r: lora.r }], m, [{ w }], true) : null;
    const width = w.n + (ext?.e ?? 0);
    if (ext) this.widen(rec, width);
    // An expanded W is expanded transposed: dY·W is then the forward's product on Wᵀ.
    const forward = this.expands(w);
    const weight = this.weight(rec, w, forward, lora && ext ? { factor: lora.A, e: ext.e, r: ext.r, off: 0 } : undefined);
    for (const [r0, rows] of this.slices(op, m, width)) {
      const xin = this.rowScales(rec, rowSlice(dy, r0, rows, w.n), rows, w.n, lora && ext && { e: ext.e, r: ext.r, terms: [{ u: rowSlice(lora.t, r0, rows, ext.r), scale: 1 }] });
      this.dispatch(rec, !forward, xin, weight, rowSlice(dx, r0, rows, w.k), { m: rows, n: w.k, k: width, accumulate: accumulate ? 1 : 0 });
    }
  }

  /** x's row scales and its f16 copy (what the GEMM reads as x), [rows, k] followed by `ext`'s e
   * columns: each term's scale·u side by side, then zeros. */
  private rowScales(rec: Recorder, x: Tensor, rows: number, k: number, ext?: { e: number; r: number; terms: readonly { u: Tensor; scale: number }[] } | null): Tensor {
    if (!ext) {
      rec.dispatch(this.rowScaleK, { x, rs: this.rs, x16: this.x16 }, grid1d(rows, 1), { m: rows, k });
      return this.x16;
    }
    const { e, r, terms } = ext;
    const u = (i: number) => (terms[i] ?? terms[0]).u;
    const s = (i: number) => terms[i]?.scale ?? 0;
    rec.dispatch(this.rowScaleExtK, { x, rs: this.rs, x16: this.x16, u0: u(0), u1: u(1), u2: u(2) }, grid1d(rows, 1), { m: rows, k, e, r, adapters: terms.length, s0: s(0), s1: s(1), s2: s(2) });
    return this.x16;
  }

  /** The GEMM on `weight`'s bindings: f16 (forward only, with an optional bias [n]) or Q4 codes, whose input gradient (`dinput`) reduces over W's rows. */
  private dispatch(rec: Recorder, dinput: boolean, x: Tensor, weight: Record<string, Tensor>, y: Tensor, one: { m: number; n: number; k: number; accumulate: number; split1?: number; split2?: number }, bias?: Tensor): void {
    const u = { split1: one.n, split2: one.n, ...one, bias: bias ? 1 : 0 };
    const w16 = 'w16' in weight;
    if (w16 && dinput) throw new ShapeError('matmulQ4F16', 'an f16 weight takes the forward only (its input gradient is the forward on Wᵀ)');
    if (!w16 && bias) throw new ShapeError('matmulQ4F16', 'a bias goes with f16 weights only');
    const groups = (t: F16Tile): [number, number] => [Math.ceil(u.n / t.cols), Math.ceil(u.m / t.rows)];
    // The kernels on f16 weights bind a bias; without one, any f32 buffer (params.bias is 0).
    const bindings = w16 ? { x, rs: this.rs, ...weight, y, bias_v: bias ?? this.rs } : { x, rs: this.rs, ...weight, y };
    const tall = this.oneWave;
    if (w16 && tall && oneWaveTakes(u.m, u.n, this.tiles.f16, tall.tile, tall.slots)) {
      rec.dispatch(tall.kernel, bindings, groups(tall.tile), u);
      return;
    }
    const [gx, gy] = groups(this.tiles.f16);
    const wide = w16 && gx * gy >= this.wideFrom;
    const kernel = wide ? this.gemmK.w16 : w16 ? this.gemmK.w16Few : dinput ? this.gemmK.q4Dinput : this.gemmK.q4;
    rec.dispatch(kernel, bindings, wide ? [gx, gy] : groups(this.tiles.q4), u);
  }

  /** [first row, rows] of the slices of m rows of x `width` wide: as few as the workspace allows,
   * of equal size rounded up to 64 rows (binding offsets). */
  private slices(op: string, m: number, width: number): [number, number][] {
    const cap = this.rowsFitting(width);
    if (cap === 0) throw new ShapeError(op, `x of width ${width}: not even 64 rows fit the workspace of ${this.maxRows} x ${this.maxK}`);
    return rowSlices(m, cap);
  }

  release(): void {
    this.rs.release();
    this.x16.release();
    this.scratch?.release();
    this.scratch = null;
  }
}

/** f16_row_scale's uniforms: plain, and with the adapters' columns (EXT). */
export const ROW_SCALE_UNIFORMS = {
  plain: { m: 'u32', k: 'u32' },
  ext: { m: 'u32', k: 'u32', e: 'u32', r: 'u32', adapters: 'u32', s0: 'f32', s1: 'f32', s2: 'f32' },
} as const;

/** Vec4s of a row each of f16_row_scale's threads holds in registers: rows of up to 4,096 columns
 * are read once, longer ones read their rest twice (BENCHMARKS.md, Kernel tuning choices). */
export const ROW_SCALE_HOLD = 4;

/** f16_row_scale's defines: with the adapters' columns (EXT) or not; `hold` as ROW_SCALE_HOLD. */
export function rowScaleDefines(ext: boolean, hold = ROW_SCALE_HOLD): { EXT: boolean; HOLD: number } {
  return { EXT: ext, HOLD: hold };
}

/** Why this device cannot run the f16 tensor-core products, or null when it can. */
export function f16UnsupportedOn(gpu: Gpu): string | null {
  return f16Unsupported(capabilitiesOf(gpu));
}
