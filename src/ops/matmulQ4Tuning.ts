// The tuning choices of the 4-bit products (src/ops/matmulQ4.ts), in one place: which GEMV layout
// a call takes by its shape class (rows of x, the weight's N and K) and what the device offers
// (int8 packed dot products), the GEMM tile and when a GEMM splits along K. The figures behind
// each choice and the commands that measure them are in BENCHMARKS.md, "Kernel tuning choices".
import type { GemmShape, GemvShape } from './matmulQ4';

/** Weights above this many rows are "large" (the LM head, stacked weights); the decoder's and the
 * vision tower's weights are below it. */
export const SMALL_N = 16384;

/** Weights above this many rows are vocabulary-sized (the LM head): the int8 head layouts are for
 * them alone. Every decoder weight (the 8B's joined gate/up has 24,576 rows) takes the decoder's:
 * the kernel before writes their x as int8 groups for 2 to 8 rows, and one row reads f32 x. */
export const HEAD_N = 65536;

/** One row of x on a large weight in f32: 8 lanes a block of 4 rows, 64 rows a workgroup. */
export const DEFAULT_GEMV: GemvShape = { threadsPerRow: 8, groups: 16 };

// The layouts the table names (lanes per block of 4 rows x row blocks per workgroup).
const SMALL_FEW_ROWS: GemvShape = { threadsPerRow: 64, groups: 4 };
const LARGE_ROWS: GemvShape = { threadsPerRow: 8, groups: 32 };
const MID_ROWS: GemvShape = { threadsPerRow: 16, groups: 16 };
const SMALL_MANY: GemvShape = { threadsPerRow: 64, groups: 2, xDirect: true };
const ONE_MID: GemvShape = { threadsPerRow: 32, groups: 4 };
const FEW_4K: GemvShape = { threadsPerRow: 32, groups: 8 };
const MID_8K: GemvShape = { threadsPerRow: 16, groups: 8 };
const MANY_LARGE: GemvShape = { threadsPerRow: 8, groups: 32, xChunk: 1024, unrolled: true };
const MANY_MID: GemvShape = { threadsPerRow: 16, groups: 16, unrolled: true };
const MANY_LONG_K: GemvShape = { threadsPerRow: 64, groups: 4, unrolled: true };
const I8Q_ROWS: GemvShape = { threadsPerRow: 32, groups: 4, int8: true, preq: true };
const I8Q_HEAD: GemvShape = { threadsPerRow: 8, groups: 8, int8: true, preq: true };
const I8X2_HEAD: GemvShape = { threadsPerRow: 32, groups: 2, int8: true, preq: true };

/** One rule of the GEMV table: a shape class (bounds inclusive: rows of x in `rows`, N above
 * `nOver` and at most `nUpTo`, K above `kOver`) and the layout it takes. */
export interface GemvRule {
  /** 'int8': only for calls that allow int8 x on a device whose WGSL has packed dot products and
   * whose workgroup memory holds every int8 layout; 'f32': any call. */
  x: 'int8' | 'f32';
  rows: readonly [number, number];
  nOver?: number;
  nUpTo?: number;
  kOver?: number;
  layout: GemvShape;
}

/**
 * The GEMV layouts, first match wins. An int8 call that no int8 rule matches takes the f32 rules.
 * A decode step's GEMVs run interleaved with its other kernels, so fewer distinct variants beat
 * the best layout per shape measured alone (hence one int8 layout for every decoder weight).
 */
export const GEMV_TABLE: readonly GemvRule[] = [
  // int8 x: the LM head in two limbs for one row, one limb for 5..8; every other weight one layout.
  { x: 'int8', rows: [1, 1], nOver: HEAD_N, layout: I8X2_HEAD },
  { x: 'int8', rows: [5, 8], nOver: HEAD_N, layout: I8Q_HEAD },
  { x: 'int8', rows: [2, 8], nUpTo: HEAD_N, layout: I8Q_ROWS },
  // 5..8 rows of f32 x: workgroups sized to about one per SM, words unrolled.
  { x: 'f32', rows: [5, 8], nOver: 8192, layout: MANY_LARGE },
  { x: 'f32', rows: [5, 8], kOver: 2048, layout: MANY_LONG_K },
  { x: 'f32', rows: [5, 8], nOver: 4096, layout: MANY_MID },
  { x: 'f32', rows: [5, 8], nOver: 2048, layout: MID_8K },
  { x: 'f32', rows: [5, 8], layout: SMALL_MANY },
  // 2..4 rows: many rows of W share each staged x on the LM head; more lanes per row on a long K.
  { x: 'f32', rows: [2, 4], nOver: SMALL_N, layout: LARGE_ROWS },
  { x: 'f32', rows: [2, 4], kOver: 2048, layout: SMALL_FEW_ROWS },
  { x: 'f32', rows: [2, 4], nOver: 8192, layout: MID_8K },
  { x: 'f32', rows: [2, 4], nOver: 4096, layout: MID_ROWS },
  { x: 'f32', rows: [2, 4], nOver: 2048, layout: FEW_4K },
  { x: 'f32', rows: [2, 4], layout: SMALL_FEW_ROWS },
  // One row: small weights read x from memory (no staging barrier before the first multiply).
  { x: 'f32', rows: [1, 1], nOver: SMALL_N, layout: DEFAULT_GEMV },
  { x: 'f32', rows: [1, 1], kOver: 2048, layout: SMALL_MANY },
  { x: 'f32', rows: [1, 1], nUpTo: 2048, layout: SMALL_MANY },
  { x: 'f32', rows: [1, 1], nOver: 8192, layout: MID_8K },
  { x: 'f32', rows: [1, 1], layout: ONE_MID },
];

/** The layout of a GEMV of m rows on a weight [n, k]; `int8`: the call allows int8 x and the
 * device runs the int8 layouts. */
export function gemvLayout(m: number, n: number, k: number, int8: boolean): GemvShape {
  for (const r of GEMV_TABLE) {
    if (r.x === 'int8' && !int8) continue;
    if (m < r.rows[0] || m > r.rows[1]) continue;
    if ((r.nOver !== undefined && n <= r.nOver) || (r.nUpTo !== undefined && n > r.nUpTo) || (r.kOver !== undefined && k <= r.kOver)) continue;
    return r.layout;
  }
  throw new Error(`no GEMV layout for ${m} rows of [${n}, ${k}]`);
}

/** The distinct layouts the table takes for f32 or int8 x (checked when an instance is created). */
export function gemvLayouts(x: 'int8' | 'f32'): GemvShape[] {
  return [...new Set(GEMV_TABLE.filter((r) => r.x === x).map((r) => r.layout))];
}

/** 128x64 tiles stepping half a group: 12 KiB of workgroup memory, within WebGPU's default 16. */
export const DEFAULT_GEMM: GemmShape = { rowsPerThread: 8, colsPerThread: 4, stepK: 16 };

/** Everything else the 4-bit products choose by default. */
export const Q4_TUNING = {
  /** A GEMM splits along K into the most chunks (8, 4 or 2) that keep tiles · chunks within this
   * (a y of few tiles over a long K leaves SMs idle)... */
  splitMaxTiles: 512,
  /** ...and each chunk at least this long. */
  splitMinK: 256,
  /** GEMV partial sums meet through workgroup memory, not subgroup shuffles. */
  subgroups: false,
  /** Columns of x a GEMV stages per chunk (Qwen3-VL's hidden size). */
  xChunk: 2048,
  /** Most partials (rows · partials a row · rank) a LoRA epilogue sums in every workgroup: beyond,
   * those reads cost more than the dispatch the epilogue saves (decode then writes the update
   * beside the GEMV: MatmulQ4's writeResidual). */
  loraMaxPartials: 2048,
  /** Most rows of x a LoRA epilogue takes. Up to it, the decoder's GEMVs without an adapter run the
   * epilogue's kernel at rank 0 (one GEMV pipeline in a decode step: BENCHMARKS.md). */
  loraMaxRows: 8,
} as const;

/** K chunks for a 4-bit GEMM of `tiles` tiles of y over K (MatmulQ4Options.gemmSplit overrides). */
export function gemmSplitOf(tiles: number, k: number): number {
  for (const s of [8, 4, 2]) if (tiles * s <= Q4_TUNING.splitMaxTiles && k / s >= Q4_TUNING.splitMinK) return s;
  return 1;
}
