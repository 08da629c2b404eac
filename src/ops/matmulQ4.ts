// Products with 4-bit weights (shaders/matmul_q4_*.wgsl, one file per kernel): y = x·Wᵀ by GEMV
// (≤ 8 rows) or tiled GEMM, dX = dY·W for backward through a frozen weight, and row gather from a
// 4-bit embedding. The layout choices are matmulQ4Tuning.ts's table.
import { grid1d, MissingFeatureError, ShapeError, type Gpu, type Kernel, type KernelSpec, type Recorder, Tensor } from '../gpu';
import { DEFAULT_GEMM, gemmSplitOf, gemvLayout, gemvLayouts, HEAD_N, Q4_TUNING } from './matmulQ4Tuning';

export { DEFAULT_GEMM, DEFAULT_GEMV } from './matmulQ4Tuning';

/**
 * A weight W [n, k] (nn.Linear [out, in]) in the Q4 format; shaders/q4_format.wgsl has the
 * exact layout. In short: groups of 32 along k share one f16 scale d (symmetric, d = m / -8
 * with m the group's weight of largest magnitude); w = d·(c − 8) with 4-bit codes c.
 *   codes:  u32 [n·k/8], eight codes per word, weight k%8 in bits 4·(k%8)..+3 of word n·k/8 + k/8.
 *   scales: u32 [ceil(n·k/64)], group s = n·(k/32) + k/32 in half (s & 1) of word s >> 1.
 * k must be a multiple of 32 (Qwen3-VL's are 1024, 2048, 4096, 6144...); n is anything.
 */
export interface Q4Weight {
  codes: Tensor;
  scales: Tensor;
  n: number;
  k: number;
}

export const Q4_GROUP = 32;
/** Most rows of x the GEMV takes; more rows go to the GEMM. */
export const GEMV_MAX_ROWS = 8;

const SPLIT_SUM_WG = 256;

/** The uniforms split1, split2 of a joined weight's output widths (at most 3, summing to n), or
 * of one output. */
function splitsOf(op: string, parts: readonly number[] | undefined, n: number): [number, number] {
  if (!parts) return [n, n];
  if (parts.length < 1 || parts.length > 3 || parts.some((p) => !Number.isInteger(p) || p < 1) || parts.reduce((a, p) => a + p, 0) !== n) {
    throw new ShapeError(op, `parts [${parts.join(', ')}] must be 1 to 3 positive widths summing to N = ${n}`);
  }
  return [parts[0], parts.length > 2 ? parts[0] + parts[1] : n];
}

const DX_TILE_M = 128; // dX output tile: rows
const DX_TILE_K = 64; // dX output tile: columns
const GATHER_WG = 256;

/** Word counts of the two tensors of a Q4 weight [n, k]. */
export function q4Words(n: number, k: number): { codes: number; scales: number } {
  return { codes: (n * k) / 8, scales: Math.ceil((n * k) / Q4_GROUP / 2) };
}

export function checkQ4Shape(op: string, n: number, k: number): void {
  if (!Number.isInteger(n) || n < 1) throw new ShapeError(op, `the weight needs at least one row, got n = ${n}`);
  if (!Number.isInteger(k) || k < Q4_GROUP || k % Q4_GROUP !== 0) {
    throw new ShapeError(op, `4-bit weights need K a positive multiple of ${Q4_GROUP}, got K = ${k}`);
  }
}

/** Tensors for a Q4 weight [n, k] from the pool; fill them with QuantizeQ4 or upload stored bytes. */
export function allocQ4(gpu: Gpu, n: number, k: number, label: string): Q4Weight {
  checkQ4Shape(`allocQ4(${label})`, n, k);
  const words = q4Words(n, k);
  return {
    codes: gpu.tensor([words.codes], 'u32', `${label}.codes`),
    scales: gpu.tensor([words.scales], 'u32', `${label}.scales`),
    n,
    k,
  };
}

/** How the GEMV spreads a weight over threads (the `override`s of shaders/q4_gemv_common.wgsl). */
export interface GemvShape {
  /** Lanes per block of 4 rows of W, along K: a power of two up to 128 (up to the subgroup size
   * with the subgroup reduction). More lanes split K finer and give a small N more threads; a call
   * uses at most as many as a row has groups of 32. */
  threadsPerRow: number;
  /** Row blocks per workgroup: threadsPerRow · groups threads, 4 · groups rows of W. */
  groups: number;
  /** Most workgroups per dispatch; each walks row blocks with a grid stride and keeps x staged
   * across them (0 or absent: one workgroup per 4 · groups rows). */
  persist?: number;
  /** Read x from memory instead of staging it in workgroup memory: no barrier before the first
   * multiply, for weights with few rows, where a workgroup's latency is what a call costs. */
  xDirect?: boolean;
  /** Columns of x staged per chunk for this layout (a multiple of 32), in place of the instance's
   * xChunk: a shorter chunk stages fewer bytes per workgroup, so more workgroups fit an SM. */
  xChunk?: number;
  /** 2..8 rows of x: a step's four code words as four inlined calls (constant word indices)
   * instead of a loop. */
  unrolled?: boolean;
  /** 2..8 rows of x quantized to int8 per row and group of 32 as they are staged, and multiplied
   * by packed 4-wide integer dot products (gemv_rows_i8): a fraction of the f32 kernel's
   * instructions per weight, at |x − x̂| ≤ a/254 per group with a its largest |x|. Needs WGSL's
   * packed_4x8_integer_dot_product; not with xDirect. One row of x takes two limbs instead
   * (|x − x̂| ≤ a/64516, quantize_x2 first, then gemv's I8X2 path) whatever preq says. */
  int8?: boolean;
  /** With int8: x quantized once by a dispatch of its own (quantize_x) and read from memory by
   * every workgroup, instead of quantized by each workgroup as it stages x. */
  preq?: boolean;
}

/** The WGSL language extension the int8 GEMV needs. */
export const DOT4_I8 = 'packed_4x8_integer_dot_product';

/** u32 words of `rows` rows of `cols` values as int8 groups, the form the int8 GEMV reads x in
 * (shaders/int8_groups.wgsl): 2 to 8 rows in one limb, 3 vec4s a row and group of 32; one row in
 * two limbs, 5 vec4s a group. */
export function int8GroupWords(rows: number, cols: number): number {
  return ((rows === 1 ? 20 : rows * 12) * cols) / Q4_GROUP;
}

/** Throws ShapeError unless t (named `what` in op's message) holds `rows` rows of `cols` values as int8 groups. */
export function checkInt8Groups(op: string, what: string, t: Tensor, rows: number, cols: number): void {
  const words = int8GroupWords(rows, cols);
  if (t.dtype !== 'u32' || t.numel < words) throw new ShapeError(op, `${what} must hold ${words} u32 (${rows} rows of ${cols} as int8 groups), got ${t.numel} ${t.dtype}`);
}

/** checkInt8Groups for a kernel that writes the groups as it writes x (quantize_group of
 * shaders/int8_groups.wgsl): one limb, so 2 to 8 rows (one row's groups are two limbs). */
export function checkWrittenInt8Groups(op: string, what: string, t: Tensor, rows: number, cols: number): void {
  if (rows < 2) throw new ShapeError(op, `${what}: one row of x as int8 groups is two limbs, which this kernel does not write`);
  checkInt8Groups(op, what, t, rows, cols);
}

/** How the GEMM tiles y (the `override`s GTM, GTN, GBK of shaders/matmul_q4_gemm.wgsl). */
export interface GemmShape {
  /** Rows of y per thread, 4 or 8 (the workgroup's tile has 16 times as many). */
  rowsPerThread: 4 | 8;
  /** Columns of y per thread, 4 or 8. */
  colsPerThread: 4 | 8;
  /** K per step, 32 (one group) or 16 (half the workgroup memory). */
  stepK: 16 | 32;
}

export interface MatmulQ4Options {
  /** Reduce GEMV partial sums with subgroup shuffles (needs threadsPerRow to divide the smallest
   * subgroup). Default off (Q4_TUNING.subgroups). */
  subgroups?: boolean;
  gemv?: GemvShape;
  /** Most columns of x the GEMV stages in workgroup memory at a time, per row of x (a multiple of
   * 32; default Q4_TUNING.xChunk). Each pipeline for M rows stages min(xChunk, what
   * fits)·M floats, zeroed by WebGPU at each workgroup's start; a longer K is walked in chunks. */
  xChunk?: number;
  gemm?: GemmShape;
  /** K chunks of every GEMM (1: never split). Default: by shape (gemmSplitOf). */
  gemmSplit?: number;
  /** 2..8 rows of x through the int8 kernel where it was faster (GemvShape.int8; default: where
   * WGSL offers packed_4x8_integer_dot_product). Off: every call in f32. */
  int8?: boolean;
  /** Most rows of x a GEMV takes a LoRA epilogue for (takesLora; 1 to GEMV_MAX_ROWS), and up to
   * which a decoder weight's GEMV of 2 or more rows without one runs the epilogue's kernel at rank 0.
   * Default Q4_TUNING.loraMaxRows. */
  loraMaxRows?: number;
}

/** A GEMV layout ready to dispatch: per M its kernel spec, compiled on first use. */
interface GemvPlan {
  /** The kernel for m rows of x, with or without the LoRA epilogue (throws ShapeError where this
   * device's workgroup memory cannot hold it). */
  spec: (m: number, lora: boolean) => KernelSpec;
  /** Per M (then per M with LoRA, from GEMV_MAX_ROWS on), the compiled kernel once used (decode
   * records hundreds of calls a step: no lookups by string on that path); null: does not fit. */
  kernels: (Kernel | null | undefined)[];
  /** One row with its RMSNorm (GemvNorm), by the adapters whose down products it writes (0 to 3);
   * null: this layout does not take it. */
  normKernels: (Kernel | null | undefined)[];
  /** The kernel of one row with its norm and `adapters` down products (GemvCall.norm). */
  normSpec: (adapters: number) => KernelSpec;
  rowsPerGroup: number;
  /** Threads a workgroup (TPR · TG). */
  threads: number;
  persist: number;
  /** 2..8 rows of x are quantized by quantize_x first (GemvShape.preq). */
  preq: boolean;
  /** An int8 layout: one row of x is quantized by quantize_x2 first (GemvShape.int8). */
  int8: boolean;
}

// The params struct of each kernel file, in order.
const GEMV_UNIFORMS = { n: 'u32', k: 'u32', accumulate: 'u32', lora_r: 'u32', lora_np: 'u32', lora_s: 'f32', eps: 'f32', down_r: 'u32', down_rows: 'u32' } as const;
const GEMV_ROWS_UNIFORMS = { m: 'u32', n: 'u32', k: 'u32', accumulate: 'u32', split1: 'u32', split2: 'u32', lora_r: 'u32', lora_np: 'u32', lora_s: 'f32', res_add: 'u32', res_wg0: 'u32', res_r: 'u32', res_np: 'u32', res_s: 'f32' } as const;
const QUANTIZE_X_UNIFORMS = { m: 'u32', k: 'u32' } as const;
const GEMM_UNIFORMS = { m: 'u32', n: 'u32', k: 'u32', accumulate: 'u32', split1: 'u32', split2: 'u32', k_chunk: 'u32' } as const;
const SPLIT_SUM_UNIFORMS = { m: 'u32', n: 'u32', chunks: 'u32', accumulate: 'u32', split1: 'u32', split2: 'u32' } as const;
const DINPUT_UNIFORMS = { m: 'u32', n: 'u32', k: 'u32', accumulate: 'u32' } as const;
const GATHER_UNIFORMS = { tokens: 'u32', n: 'u32', k: 'u32' } as const;
/** Workgroup memory of the LoRA epilogue (shaders/q4_gemv_common.wgsl: lora_u and lora_fold). */
const LORA_BYTES = 3 * 512 * 4;
/** Most rows of x times rank the epilogue holds (LORA_MAX). */
const LORA_MAX = 512;
const NO_LORA = { lora_r: 0, lora_np: 0, lora_s: 0 } as const;
const NO_NORM = { eps: 0, down_r: 0, down_rows: 0 } as const;
const NO_RESIDUAL = { res_add: 0, res_wg0: 0, res_r: 0, res_np: 0, res_s: 0 } as const;
/** Storage buffers of the one-row GEMV with its norm: codes, scales, x, y, the norm's weight, and
 * with adapters their A and u. */
const normBuffers = (adapters: number) => 5 + (adapters > 0 ? adapters + 1 : 0);

/** How a GEMV call differs from a plain y (+)= x·Wᵀ (MatmulQ4.gemv). */
export interface GemvCall {
  /** A joined weight's output widths (at most 3, summing to N): each part's rows stored apart. */
  parts?: readonly number[];
  /** 2..8 rows may take the int8 kernel (inference only). */
  int8?: boolean;
  /** An adapter's up product added as y is stored. */
  lora?: GemvLora;
  /** x already as int8 groups (int8GroupWords' layout: left by the kernel that wrote x, a norm's
   * LoRA down, the SwiGLU or the attention combine, or by quantizeX), for a call that takes them
   * (takesQuantizedX): no quantize dispatch. x is still checked and bound. */
  xq?: Tensor;
  /** One row of x that is a residual row h: the GEMV multiplies its RMSNorm (takesNorm). */
  norm?: GemvNorm;
  /** 2..8 rows (takesResidual): each output stored adds residual[m, n] [M, N], an update owed to
   * y that the GEMV before wrote (`writeResidual`). */
  addResidual?: Tensor;
  /** 2..8 rows (takesResidual), no `lora`: workgroups beside the GEMV's write out [M, N] = s·u·Bᵀ
   * of `lora`'s adapter, independent of the product (a deferred update: projection.ts). */
  writeResidual?: { out: Tensor; lora: GemvLora };
}

/** The RMSNorm a one-row GEMV applies to x first, y = (rms(h)·weight)·Wᵀ, and the adapters whose
 * down products u = rms(h)·weight·Aᵀ workgroups of the same dispatch write (the kernel after it
 * reads u: the LoRA GEMV's up, or a kernel that takes it in). The normed row itself is not written. */
export interface GemvNorm {
  /** [k] */
  weight: Tensor;
  eps: number;
  /** lora_A.weight [r, k] of 1 to 3 adapters of one rank, and u [1, adapters·r] (or larger). */
  down?: { A: readonly Tensor[]; r: number; u: Tensor };
}
const NONE: GemvCall = {};

/** Whether a call of m rows on a plan reads x as int8 groups (quantize_x's; one row takes two limbs,
 * quantize_x2's, on every int8 layout). */
const readsGroups = (plan: GemvPlan, m: number) => plan.int8 && (m === 1 || plan.preq);
/** Workgroups of a GEMV on n rows of W: one a row block, at most `persist` with a persistent grid. */
const gridOf = (plan: GemvPlan, n: number) => Math.min(Math.ceil(n / plan.rowsPerGroup), plan.persist > 0 ? plan.persist : Infinity);
const INT8: GemvCall = { int8: true };

/** A LoRA update the GEMV adds as it stores y: y += s·u·Bᵀ, with u [M, r] the sum of `perRow`
 * partials a row of x (parts [M, perRow, r], left by the kernel before; LoraGemv's fold). */
export interface GemvLora {
  /** lora_B.weight [n, r]. */
  B: Tensor;
  r: number;
  /** alpha / r. */
  scale: number;
  parts: Tensor;
  perRow: number;
}

export class MatmulQ4 {
  /** Plans per layout object and K. */
  private readonly plans = new Map<GemvShape, Map<number, GemvPlan>>();

  private constructor(
    private readonly gpu: Gpu,
    /** The layout every call takes, when the caller fixed one. */
    private readonly fixed: GemvShape | undefined,
    private readonly xChunk: number,
    private readonly gemmK: Kernel,
    private readonly dinputK: Kernel,
    private readonly gatherK: Kernel,
    private readonly splitSumK: Kernel,
    readonly subgroups: boolean,
    private readonly gemmTile: { m: number; n: number },
    /** quantize_x and quantize_x2, where WGSL has the packed 4x8 builtins. */
    private readonly quantizeK: Kernel | null,
    private readonly quantize2K: Kernel | null,
    /** MatmulQ4Options.gemmSplit. */
    private readonly gemmSplit: number | undefined,
    /** MatmulQ4Options.loraMaxRows. */
    private readonly loraMaxRows: number,
  ) {}

  /** 2..8 rows of x take the int8 layouts (when no layout is fixed); set by create. */
  private int8 = false;

  /** quantize_x's output for the PREQ layouts, grown on first use to the largest call's. */
  private xq: Tensor | null = null;
  /** What a rank-0 epilogue binds for its partials and B (never read). */
  private rankZero: Tensor | null = null;
  private residualNone: Tensor | null = null;

  static async create(gpu: Gpu, opts: MatmulQ4Options = {}): Promise<MatmulQ4> {
    const gemm = opts.gemm ?? DEFAULT_GEMM;
    const gemmBytes = 16 * gemm.stepK * 4 * (gemm.rowsPerThread + gemm.colsPerThread);
    if (![4, 8].includes(gemm.rowsPerThread) || ![4, 8].includes(gemm.colsPerThread) || ![16, 32].includes(gemm.stepK)) {
      throw new ShapeError('matmulQ4.gemm', `bad GEMM shape ${JSON.stringify(gemm)}`);
    }
    if (gemmBytes > gpu.limits.maxComputeWorkgroupStorageSize) {
      throw new ShapeError('matmulQ4.gemm', `tiles of ${gemmBytes} bytes exceed this GPU's ${gpu.limits.maxComputeWorkgroupStorageSize} of workgroup memory`);
    }
    const subgroups = opts.subgroups ?? Q4_TUNING.subgroups;
    if (subgroups) gpu.require('subgroups', 'the 4-bit GEMV subgroup reduction');
    const xChunk = opts.xChunk ?? Q4_TUNING.xChunk;
    if (!Number.isInteger(xChunk) || xChunk < Q4_GROUP || xChunk % Q4_GROUP !== 0) {
      throw new ShapeError('matmulQ4.gemv', `xChunk must be a positive multiple of ${Q4_GROUP}, got ${xChunk}`);
    }
    const gemmSplit = opts.gemmSplit;
    if (gemmSplit !== undefined && (!Number.isInteger(gemmSplit) || gemmSplit < 1)) throw new ShapeError('matmulQ4.gemm', `gemmSplit must be a positive integer, got ${gemmSplit}`);
    // Named as before the kernels had files of their own: profiles and benchmarks match these names.
    const gemmK = gpu.kernelOnUse({ name: 'matmul_q4.gemm', shader: 'matmul_q4_gemm', entry: 'gemm', uniforms: GEMM_UNIFORMS, constants: { GTM: gemm.rowsPerThread, GTN: gemm.colsPerThread, GBK: gemm.stepK } });
    const dinputK = gpu.kernelOnUse({ name: 'matmul_q4.dinput', shader: 'matmul_q4_dinput', entry: 'dinput', uniforms: DINPUT_UNIFORMS });
    const gatherK = gpu.kernelOnUse({ name: 'matmul_q4.gather', shader: 'matmul_q4_gather', entry: 'gather', uniforms: GATHER_UNIFORMS });
    const splitSumK = gpu.kernelOnUse({ name: 'matmul_q4.gemm', shader: 'matmul_q4_split_sum', entry: 'split_sum', uniforms: SPLIT_SUM_UNIFORMS });
    if (opts.int8) gpu.requireWgsl(DOT4_I8, 'the int8 GEMV (dot4I8Packed)');
    const dot4 = gpu.hasWgsl(DOT4_I8);
    const [quantizeK, quantize2K] = ['quantize_x', 'quantize_x2'].map((entry) =>
      dot4 ? gpu.kernelOnUse({ name: 'matmul_q4.gemv', shader: 'matmul_q4_quantize_x', entry, uniforms: QUANTIZE_X_UNIFORMS }) : null,
    );
    const loraMaxRows = opts.loraMaxRows ?? Q4_TUNING.loraMaxRows;
    if (!Number.isInteger(loraMaxRows) || loraMaxRows < 1 || loraMaxRows > GEMV_MAX_ROWS) throw new ShapeError('matmulQ4', `loraMaxRows must be an integer in [1, ${GEMV_MAX_ROWS}], got ${loraMaxRows}`);
    const mm = new MatmulQ4(gpu, opts.gemv, xChunk, gemmK, dinputK, gatherK, splitSumK, subgroups, { m: 16 * gemm.rowsPerThread, n: 16 * gemm.colsPerThread }, quantizeK, quantize2K, gemmSplit, loraMaxRows);
    // The layouts are checked now (bad shapes and limits throw here, not at the first call); their
    // pipelines are compiled on first use (a model uses a few of the M x layout x K variants).
    for (const g of opts.gemv ? [opts.gemv] : gemvLayouts('f32')) mm.plan(g, 1 << 20);
    if (opts.gemv || opts.int8 === false || !gpu.hasWgsl(DOT4_I8)) return mm;
    // By default the int8 layouts where this device's workgroup memory holds them all (WebGPU's
    // default 16 KiB does not; the f32 layouts serve every call there).
    try {
      for (const g of gemvLayouts('int8')) mm.plan(g, 1 << 20);
      mm.int8 = true;
    } catch (e) {
      if (!(e instanceof ShapeError) || opts.int8) throw e;
    }
    return mm;
  }

  /** The layout a call of m rows of x on a weight [n, k] takes (int8: the call allows int8 x). */
  private layoutFor(m: number, n: number, k: number, int8: boolean): GemvShape {
    return this.fixed ?? gemvLayout(m, n, k, int8 && this.int8);
  }

  /** The plan of a layout for K columns: lanes per row block are capped at the groups a row has
   * (a lane with no group would idle; the demo's K = 64 has two). */
  private plan(shape: GemvShape, k: number): GemvPlan {
    let byK = this.plans.get(shape);
    if (!byK) this.plans.set(shape, (byK = new Map()));
    const known = byK.get(k);
    if (known) return known;
    const groupsPerRow = k / Q4_GROUP;
    const lanes = Math.min(shape.threadsPerRow, 2 ** Math.ceil(Math.log2(groupsPerRow)));
    const gpu = this.gpu;
    const { groups: TG, persist = 0, xDirect = false, xChunk = this.xChunk } = shape;
    const TPR = lanes;
    const pow2 = (v: number) => Number.isInteger(v) && v > 0 && (v & (v - 1)) === 0;
    const badChunk = !Number.isInteger(xChunk) || xChunk < Q4_GROUP || xChunk % Q4_GROUP !== 0;
    if (!pow2(shape.threadsPerRow) || shape.threadsPerRow > 128 || !Number.isInteger(TG) || TG < 1 || !Number.isInteger(persist) || persist < 0 || badChunk) {
      throw new ShapeError('matmulQ4.gemv', `bad GEMV shape ${JSON.stringify(shape)}`);
    }
    if (shape.threadsPerRow * TG > gpu.limits.maxComputeInvocationsPerWorkgroup) {
      throw new ShapeError('matmulQ4.gemv', `${shape.threadsPerRow * TG} threads per workgroup exceed this GPU's ${gpu.limits.maxComputeInvocationsPerWorkgroup}`);
    }
    if (shape.preq && !shape.int8) throw new ShapeError('matmulQ4.gemv', `preq is a form of int8 x (${JSON.stringify(shape)})`);
    if (shape.int8 && xDirect) throw new ShapeError('matmulQ4.gemv', `int8 x is quantized as it is staged: not with xDirect (${JSON.stringify(shape)})`);
    if (shape.int8) gpu.requireWgsl(DOT4_I8, 'the int8 GEMV (dot4I8Packed)');
    const minSubgroup = gpu.device.adapterInfo?.subgroupMinSize ?? 0;
    if (this.subgroups && minSubgroup < TPR) throw new MissingFeatureError('subgroups', `subgroups of ${minSubgroup} invocations split rows of ${TPR} threads`);
    const constants = { TPR, TG, PERSIST: persist > 0 ? 1 : 0, XDIRECT: xDirect ? 1 : 0 };
    const fitChunk = (bytes: number, rows: number) => Math.min(xChunk, Math.floor(bytes / (4 * rows) / Q4_GROUP) * Q4_GROUP);
    // One row of x in f32: the columns staged per chunk are what fits beside the reduction's memory.
    const oneRow = (name: string, wgBytes: number, defines: Record<string, boolean>): KernelSpec => {
      const KC = xDirect ? Q4_GROUP : fitChunk(wgBytes - (this.subgroups ? 0 : 16 * TPR * TG), 1);
      if (KC < Q4_GROUP) throw new ShapeError('matmulQ4.gemv', `${wgBytes} bytes of workgroup memory cannot hold a group of x beside the partial sums of ${TPR * TG} threads`);
      return { name, shader: 'matmul_q4_gemv', entry: 'gemv', uniforms: GEMV_UNIFORMS, constants: { ...constants, KC }, defines };
    };
    // The norm's sums take 8 bytes a thread beside them.
    const normSpec = (adapters: number): KernelSpec =>
      oneRow(`matmul_q4.gemv_norm${adapters > 0 ? `_down_x${adapters}` : ''}`, gpu.limits.maxComputeWorkgroupStorageSize - 8 * TPR * TG, {
        LORA: false,
        SUBGROUPS: this.subgroups,
        NORM: true,
        DOWN: adapters >= 1,
        DOWN2: adapters >= 2,
        DOWN3: adapters >= 3,
      });
    const spec = (M: number, lora: boolean): KernelSpec => {
      // The LoRA epilogue's u and its gather take LORA_BYTES of the workgroup memory.
      const wgBytes = gpu.limits.maxComputeWorkgroupStorageSize - (lora ? LORA_BYTES : 0);
      const defines = { LORA: lora, SUBGROUPS: this.subgroups && M === 1 };
      // Profiles name every GEMV kernel matmul_q4.gemv (one op; the benchmarks and the decode
      // profile look for it).
      const name = 'matmul_q4.gemv';
      if (M === 1 && shape.int8) {
        // One row of x as two int8 limbs from quantize_x2, read from memory: nothing staged.
        return { name, shader: 'matmul_q4_gemv', entry: 'gemv', uniforms: GEMV_UNIFORMS, constants: { ...constants, XDIRECT: 1, KC: Q4_GROUP }, defines: { ...defines, I8X2: true } };
      }
      if (M === 1) return oneRow(name, wgBytes, defines);
      if (shape.preq) {
        // x from quantize_x: workgroup memory holds the lanes' partial sums only.
        const XS = TPR * TG * M;
        if (16 * XS > wgBytes) throw new ShapeError('matmulQ4.gemv', `${wgBytes} bytes of workgroup memory cannot hold the partial sums of ${TPR * TG} threads`);
        return { name, shader: 'matmul_q4_gemv_rows', entry: 'gemv_rows_i8', uniforms: GEMV_ROWS_UNIFORMS, constants: { TPR, TG, PERSIST: constants.PERSIST, M, XS, XQ: 1 }, defines: { ...defines, PREQ: true } };
      }
      if (shape.int8) {
        // Per row of x and staged group 3 vec4s (32 bytes of q, a scale and the integer's start);
        // the lanes' partial sums reuse the memory.
        const XQ = Math.min(xChunk / Q4_GROUP, Math.floor(wgBytes / 16 / (3 * M)));
        const XS = Math.max(3 * M * XQ, TPR * TG * M);
        if (XQ < 1 || 16 * XS > wgBytes) {
          throw new ShapeError('matmulQ4.gemv', `${wgBytes} bytes of workgroup memory cannot hold ${M} rows of int8 x or the partial sums of ${TPR * TG} threads`);
        }
        return { name, shader: 'matmul_q4_gemv_rows', entry: 'gemv_rows_i8', uniforms: GEMV_ROWS_UNIFORMS, constants: { TPR, TG, PERSIST: constants.PERSIST, M, XS, XQ }, defines };
      }
      // 2..8 rows: staged x and then the lanes' partial sums share one buffer of XS vec4s.
      const KC = xDirect ? Q4_GROUP : fitChunk(wgBytes, M);
      const XS = Math.max(xDirect ? 0 : (M * KC) / 4, TPR * TG * M);
      if (KC < Q4_GROUP || 16 * XS > wgBytes) {
        throw new ShapeError('matmulQ4.gemv', `${wgBytes} bytes of workgroup memory cannot hold ${M} rows of x or the partial sums of ${TPR * TG} threads`);
      }
      return { name, shader: 'matmul_q4_gemv_rows', entry: 'gemv_rows', uniforms: GEMV_ROWS_UNIFORMS, constants: { ...constants, M, KC, XS, UNROLLED: shape.unrolled ? 1 : 0 }, defines };
    };
    // Bad shapes and limits throw here, at planning, not at the first call.
    for (let m = 1; m <= GEMV_MAX_ROWS; m++) spec(m, false);
    const plan = { spec, kernels: [], normKernels: [], normSpec, rowsPerGroup: 4 * TG, threads: TPR * TG, persist, preq: shape.preq ?? false, int8: shape.int8 ?? false };
    byK.set(k, plan);
    return plan;
  }

  private checkWeight(op: string, w: Q4Weight): void {
    checkQ4Shape(op, w.n, w.k);
    const words = q4Words(w.n, w.k);
    if (w.codes.dtype !== 'u32' || w.codes.numel !== words.codes) {
      throw new ShapeError(op, `codes of a [${w.n}, ${w.k}] Q4 weight must be ${words.codes} u32, got ${w.codes.numel} ${w.codes.dtype}`);
    }
    if (w.scales.dtype !== 'u32' || w.scales.numel !== words.scales) {
      throw new ShapeError(op, `scales of a [${w.n}, ${w.k}] Q4 weight must be ${words.scales} u32, got ${w.scales.numel} ${w.scales.dtype}`);
    }
  }

  private checkF32(op: string, name: string, t: Tensor, rows: number, cols: number): void {
    if (t.dtype !== 'f32') throw new ShapeError(op, `${name} must be f32, got ${t.dtype}`);
    if (t.numel !== rows * cols) {
      throw new ShapeError(op, `${name} must be [${rows}, ${cols}] (${rows * cols} elements), got [${t.shape.join(', ')}]`);
    }
  }

  /** Rows of x [M, K]: its leading dimensions flattened, K last. */
  private rowsOf(op: string, x: Tensor, k: number): number {
    const last = x.shape[x.shape.length - 1];
    if (last !== k) throw new ShapeError(op, `x [${x.shape.join(', ')}] must end in K = ${k}`);
    return x.numel / k;
  }

  /** y [M, N] = x [M, K] · Wᵀ (or y += with accumulate): GEMV for M ≤ 8, GEMM beyond. `int8`:
   * 2..8 rows may take the int8 GEMV (inference: sampling; training and scoring keep f32). */
  forward(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor, accumulate = false, int8 = false): void {
    if (this.rowsOf('matmulQ4', x, w.k) <= GEMV_MAX_ROWS) this.gemv(rec, x, w, y, accumulate, int8 ? INT8 : NONE);
    else this.gemm(rec, x, w, y, accumulate);
  }

  /**
   * y [M, N] (+)= x [M, K] · Wᵀ for 1 ≤ M ≤ 8, reading each weight once for all rows. With
   * `parts` (widths summing to N, at most 3: a joined weight's projections), y holds the parts one
   * after another, each [M, width], as separate GEMVs into back-to-back outputs would write them.
   * `int8`: 2..8 rows may take the int8 kernel where this instance has it (MatmulQ4Options.int8).
   * `lora`: the GEMV also adds an adapter's up product from partials of u (GemvLora).
   */
  gemv(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor, accumulate = false, call: GemvCall = NONE): void {
    const { parts, int8 = false, lora, xq: given } = call;
    const op = 'matmulQ4.gemv';
    this.checkWeight(op, w);
    const m = this.rowsOf(op, x, w.k);
    if (m < 1 || m > GEMV_MAX_ROWS) throw new ShapeError(op, `takes 1 to ${GEMV_MAX_ROWS} rows of x, got ${m}`);
    this.checkF32(op, 'x', x, m, w.k);
    this.checkF32(op, 'y', y, m, w.n);
    if (call.norm) {
      if (parts || lora || given) throw new ShapeError(op, 'a GEMV with its norm takes one output, no LoRA epilogue and f32 x');
      this.gemvNorm(rec, x, w, y, accumulate, call.norm);
      return;
    }
    const plan = this.plan(this.layoutFor(m, w.n, w.k, int8), w.k);
    const groups = gridOf(plan, w.n);
    const [split1, split2] = splitsOf(op, parts, w.n);
    if (given) {
      if (!readsGroups(plan, m)) throw new ShapeError(op, `this call (${m} rows, [${w.n}, ${w.k}]) does not take x as int8 groups (takesQuantizedX)`);
      checkInt8Groups(op, 'xq', given, m, w.k);
    }
    const xq = given ?? (readsGroups(plan, m) ? this.quantize(rec, x, m, w.k) : null);
    const { addResidual, writeResidual } = call;
    if (!lora && !addResidual && !writeResidual) {
      const shared = this.sharedEpilogue(plan, m, w.n);
      const kernel = shared ?? (plan.kernels[m - 1] ??= this.gpu.kernelNow(plan.spec(m, false)))!;
      const bind: Record<string, Tensor> = { codes4: w.codes, scales: w.scales, x, y };
      if (shared) {
        bind.lora_parts = bind.lora_b = this.zeros();
        bind.residual = this.noResidual();
      }
      if (xq) bind.xq_in = xq;
      rec.dispatch(kernel, bind, grid1d(groups, 1), { m, n: w.n, k: w.k, accumulate: accumulate ? 1 : 0, split1, split2, ...NO_LORA, ...NO_NORM, ...NO_RESIDUAL });
      return;
    }
    if (lora) this.checkLora(op, lora, m, w.n, parts);
    const kernel = this.loraKernel(plan, m);
    if (!kernel) throw new ShapeError(op, `this device's workgroup memory cannot hold the LoRA epilogue beside ${m} rows of x (takesLora)`);
    const bind: Record<string, Tensor> = { codes4: w.codes, scales: w.scales, x, y, lora_parts: lora?.parts ?? this.zeros(), lora_b: lora?.B ?? this.zeros() };
    // The kernel of 2..8 rows binds a residual (the one-row kernel has none).
    if (m > 1) bind.residual = this.noResidual();
    if (xq) bind.xq_in = xq;
    let grid = groups;
    let res: Record<string, number> = NO_RESIDUAL;
    if (addResidual || writeResidual) {
      if (!this.takesResidual(m, w, int8)) throw new ShapeError(op, `this call (${m} rows, [${w.n}, ${w.k}]) does not take a residual (takesResidual)`);
      if (addResidual && writeResidual) throw new ShapeError(op, 'a GEMV adds a residual or writes one, not both');
    }
    if (addResidual) {
      this.checkF32(op, 'residual', addResidual, m, w.n);
      bind.residual = addResidual;
      res = { ...NO_RESIDUAL, res_add: 1 };
    }
    if (writeResidual) {
      const { out, lora: up } = writeResidual;
      if (lora) throw new ShapeError(op, 'a GEMV that writes a residual runs its own product at rank 0 (no lora)');
      // Each of its workgroups holds one row's u.
      this.checkLora(op, up, m, w.n, undefined, 1);
      this.checkF32(op, 'residual', out, m, w.n);
      if (out.buffer === y.buffer) throw new ShapeError(op, 'the residual must not share y\'s buffer');
      Object.assign(bind, { lora_parts: up.parts, lora_b: up.B, residual: out });
      res = { res_add: 0, res_wg0: groups, res_r: up.r, res_np: up.perRow, res_s: up.scale };
      grid += m * Math.ceil(w.n / plan.threads);
    }
    rec.dispatch(kernel, bind, grid1d(grid, 1), {
      m,
      n: w.n,
      k: w.k,
      accumulate: accumulate ? 1 : 0,
      split1,
      split2,
      ...(lora ? { lora_r: lora.r, lora_np: lora.perRow, lora_s: lora.scale } : NO_LORA),
      ...NO_NORM,
      ...res,
    });
  }

  /** A LoRA epilogue's adapter fits: one output, 1 ≤ r, the `held` rows' u (all m by default)
   * within a workgroup's LORA_MAX, whole partials for m rows. */
  private checkLora(op: string, lora: GemvLora, m: number, n: number, parts: readonly number[] | undefined, held = m): void {
    const { B, r, perRow } = lora;
    if (parts || !Number.isInteger(r) || r < 1 || held * r > LORA_MAX || !Number.isInteger(perRow) || perRow < 1) {
      throw new ShapeError(op, `a LoRA epilogue needs one output, 1 ≤ r and M·r ≤ ${LORA_MAX} and whole partials (r ${r}, M ${held}, ${perRow} partials a row)`);
    }
    this.checkF32(op, 'lora B', B, n, r);
    if (lora.parts.dtype !== 'f32' || lora.parts.numel < m * perRow * r) throw new ShapeError(op, `LoRA partials must hold [${m}, ${perRow}, ${r}] f32`);
  }

  /** Four zeros: the LoRA epilogue's partials and B at rank 0. */
  private zeros(): Tensor {
    return (this.rankZero ??= this.gpu.tensor([4], 'f32', 'matmul_q4.rank_zero'));
  }

  /** The residual binding of a call without one (writable: it cannot share the zeros' buffer). */
  private noResidual(): Tensor {
    return (this.residualNone ??= this.gpu.tensor([4], 'f32', 'matmul_q4.no_residual'));
  }

  /** Whether a gemv of m rows on w takes a residual (GemvCall.addResidual, writeResidual): 2 to
   * loraMaxRows rows on the LoRA epilogue's kernel, a layout that does not persist. */
  takesResidual(m: number, w: Q4Weight, int8: boolean): boolean {
    if (m < 2 || m > this.loraMaxRows) return false;
    const plan = this.plan(this.layoutFor(m, w.n, w.k, int8), w.k);
    return plan.persist === 0 && this.loraKernel(plan, m) !== null;
  }

  /** Whether a gemv of m rows on weight w can take its x's RMSNorm (GemvCall.norm) with the down
   * products of `adapters` adapters (0 to 3): one row of f32 x, a layout that does not persist,
   * and storage buffers enough on this device. */
  takesNorm(m: number, w: Q4Weight, adapters: number): boolean {
    if (m !== 1 || !Number.isInteger(adapters) || adapters < 0 || adapters > 3) return false;
    if (normBuffers(adapters) > this.gpu.limits.maxStorageBuffersPerShaderStage) return false;
    const plan = this.plan(this.layoutFor(1, w.n, w.k, false), w.k);
    return this.normKernel(plan, adapters) !== null;
  }

  /** The one-row GEMV on the residual row h with its norm (GemvCall.norm). */
  private gemvNorm(rec: Recorder, h: Tensor, w: Q4Weight, y: Tensor, accumulate: boolean, norm: GemvNorm): void {
    const op = 'matmulQ4.gemv';
    const down = norm.down;
    const adapters = down?.A.length ?? 0;
    // One row of x takes the f32 layouts (the int8 ones of one row are the LM head's).
    const plan = this.plan(this.layoutFor(1, w.n, w.k, false), w.k);
    if (!this.takesNorm(h.numel / w.k, w, adapters)) throw new ShapeError(op, `this call (${h.numel / w.k} rows, [${w.n}, ${w.k}], ${adapters} adapters) does not take its norm (takesNorm)`);
    if (norm.weight.dtype !== 'f32' || norm.weight.numel !== w.k) throw new ShapeError(op, `norm weight must be f32 [${w.k}], got ${norm.weight.dtype} [${norm.weight.shape.join(', ')}]`);
    const bind: Record<string, Tensor> = { codes4: w.codes, scales: w.scales, x: h, y, norm_w: norm.weight };
    let downRows = 0;
    if (down) {
      const { A, r, u } = down;
      if (!Number.isInteger(r) || r < 1) throw new ShapeError(op, `adapters' rank must be a positive integer, got ${r}`);
      A.forEach((a, g) => {
        if (a.dtype !== 'f32' || a.numel !== r * w.k) throw new ShapeError(op, `lora A ${g} '${a.label}' must be f32 [${r}, ${w.k}], got ${a.dtype} [${a.shape.join(', ')}]`);
      });
      downRows = adapters * r;
      if (u.dtype !== 'f32' || u.numel < downRows) throw new ShapeError(op, `u must be f32 with ${downRows} elements, got ${u.dtype} [${u.shape.join(', ')}]`);
      // Fixed keys (this runs twice a layer in a decode step, which is CPU-bound at one row).
      bind.down_a0 = A[0];
      if (adapters > 1) bind.down_a1 = A[1];
      if (adapters > 2) bind.down_a2 = A[2];
      bind.down_u = u;
    }
    const blocks = Math.ceil(w.n / plan.rowsPerGroup);
    rec.dispatch(this.normKernel(plan, adapters)!, bind, grid1d(blocks + downRows, 1), {
      n: w.n,
      k: w.k,
      accumulate: accumulate ? 1 : 0,
      ...NO_LORA,
      eps: norm.eps,
      down_r: down?.r ?? 0,
      down_rows: downRows,
    });
  }

  private normKernel(plan: GemvPlan, adapters: number): Kernel | null {
    let kernel = plan.normKernels[adapters];
    if (kernel === undefined) {
      try {
        kernel = plan.persist > 0 || plan.int8 ? null : this.gpu.kernelNow(plan.normSpec(adapters));
      } catch (e) {
        if (!(e instanceof ShapeError)) throw e;
        kernel = null;
      }
      plan.normKernels[adapters] = kernel;
    }
    return kernel;
  }

  /** x [m, k] as int8 groups in this instance's scratch (quantizeInto). */
  private quantize(rec: Recorder, x: Tensor, m: number, k: number): Tensor {
    const words = int8GroupWords(GEMV_MAX_ROWS, k); // holds one row's two limbs too
    if (!this.xq || this.xq.numel < words) {
      // Sized for the most rows at this K; a smaller one is never released (calls recorded
      // before may still read it).
      this.xq = this.gpu.tensor([words], 'u32', 'matmul_q4.xq');
    }
    this.quantizeInto(rec, x, this.xq, m, k);
    return this.xq;
  }

  /** x [m, k] into xq as int8 groups: quantize_x for 2 to 8 rows (3 vec4s a row and group),
   * quantize_x2 for one row's two limbs (5). */
  private quantizeInto(rec: Recorder, x: Tensor, xq: Tensor, m: number, k: number): void {
    const kernel = m === 1 ? this.quantize2K : this.quantizeK;
    if (!kernel) throw new MissingFeatureError(DOT4_I8, 'the int8 GEMV (quantize_x)');
    rec.dispatch(kernel, { x, xq_out: xq }, grid1d((m * k) / Q4_GROUP, 64), { m, k });
  }

  /** x [m, k] (1 to 8 rows, k a multiple of 32) into xq as int8 groups (int8GroupWords' layout), for
   * gemv calls that take them (GemvCall.xq): one quantize dispatch for several products of x. */
  quantizeX(rec: Recorder, x: Tensor, xq: Tensor): void {
    const op = 'matmulQ4.quantizeX';
    const k = x.shape[x.shape.length - 1];
    const m = x.numel / k;
    if (m < 1 || m > GEMV_MAX_ROWS || k % Q4_GROUP !== 0) throw new ShapeError(op, `takes 1 to ${GEMV_MAX_ROWS} rows of a multiple of ${Q4_GROUP} columns, got [${x.shape.join(', ')}]`);
    this.checkF32(op, 'x', x, m, k);
    checkInt8Groups(op, 'xq', xq, m, k);
    this.quantizeInto(rec, x, xq, m, k);
  }

  /** Whether a gemv of m rows on weight w (int8 allowed) reads x as int8 groups that the caller
   * may give ready-made (GemvCall.xq, int8GroupWords' layout). */
  takesQuantizedX(m: number, w: Q4Weight, int8: boolean): boolean {
    return m <= GEMV_MAX_ROWS && readsGroups(this.plan(this.layoutFor(m, w.n, w.k, int8), w.k), m);
  }

  /** Whether gemv can add a rank-r adapter's update, from `perRow` partials of u a row, to m rows
   * of x·Wᵀ in its epilogue (and should: few enough partials). */
  takesLora(m: number, w: Q4Weight, r: number, perRow: number, int8: boolean): boolean {
    if (m < 1 || m > this.loraMaxRows || m * r > LORA_MAX || m * perRow * r > Q4_TUNING.loraMaxPartials) return false;
    return this.loraKernel(this.plan(this.layoutFor(m, w.n, w.k, int8), w.k), m) !== null;
  }

  /** The epilogue kernel at rank 0 that a gemv of m rows on n rows of W without an adapter takes,
   * or null: at 2..loraMaxRows rows a decoder weight takes it, so that a decode step streams its
   * weights through one GEMV pipeline; a second one cost the step more than the epilogue saves
   * (BENCHMARKS.md, Kernel tuning choices). */
  private sharedEpilogue(plan: GemvPlan, m: number, n: number): Kernel | null {
    return m >= 2 && m <= this.loraMaxRows && n <= HEAD_N ? this.loraKernel(plan, m) : null;
  }

  /**
   * The kernel a gemv of m rows on w without an adapter dispatches, as its spec, and its grid's
   * workgroups: for tools that build variants of it (tools/device/gemvRows.ts).
   */
  gemvSpec(m: number, w: Q4Weight, int8: boolean): { spec: KernelSpec; groups: number } {
    const plan = this.plan(this.layoutFor(m, w.n, w.k, int8), w.k);
    return { spec: plan.spec(m, this.sharedEpilogue(plan, m, w.n) !== null), groups: gridOf(plan, w.n) };
  }

  private loraKernel(plan: GemvPlan, m: number): Kernel | null {
    const at = GEMV_MAX_ROWS + m - 1;
    let kernel = plan.kernels[at];
    if (kernel === undefined) {
      try {
        kernel = this.gpu.kernelNow(plan.spec(m, true));
      } catch (e) {
        if (!(e instanceof ShapeError)) throw e;
        kernel = null;
      }
      plan.kernels[at] = kernel;
    }
    return kernel;
  }

  /** y [M, N] (+)= x [M, K] · Wᵀ for any M, tiled (128x64 by default); a y of few tiles over a
   * long K is split along K (gemmSplitOf) and its partials summed by split_sum. `parts`: as gemv's,
   * a joined weight's outputs stored apart. */
  gemm(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor, accumulate = false, parts?: readonly number[]): void {
    const op = 'matmulQ4.gemm';
    this.checkWeight(op, w);
    const m = this.rowsOf(op, x, w.k);
    this.checkF32(op, 'x', x, m, w.k);
    this.checkF32(op, 'y', y, m, w.n);
    const tiles: [number, number] = [Math.ceil(w.n / this.gemmTile.n), Math.ceil(m / this.gemmTile.m)];
    // Not while a tape is captured: it would hold the partials' scratch, released as recorded.
    const S = rec.capturing ? 1 : (this.gemmSplit ?? gemmSplitOf(tiles[0] * tiles[1], w.k));
    // Chunks of whole groups; the last may be shorter (S need not divide K / 32).
    const kChunk = Q4_GROUP * Math.ceil(w.k / Q4_GROUP / S);
    const chunks = Math.ceil(w.k / kChunk);
    const [split1, split2] = splitsOf(op, parts, w.n);
    const uniforms = { m, n: w.n, k: w.k, accumulate: accumulate ? 1 : 0, split1, split2, k_chunk: kChunk, chunks };
    if (chunks === 1) {
      rec.dispatch(this.gemmK, { codes: w.codes, scales: w.scales, x, y }, tiles, uniforms);
      return;
    }
    const part = this.gpu.tensor([chunks, m, w.n], 'f32', 'matmul_q4.split_k');
    rec.dispatch(this.gemmK, { codes: w.codes, scales: w.scales, x, y: part }, [...tiles, chunks], { ...uniforms, accumulate: 0 });
    rec.dispatch(this.splitSumK, { parts: part, y }, grid1d(m * w.n, SPLIT_SUM_WG), uniforms);
    part.release();
  }

  /** dx [M, K] (+)= dy [M, N] · W: the gradient of x·Wᵀ with respect to x. */
  backwardInput(rec: Recorder, dy: Tensor, w: Q4Weight, dx: Tensor, accumulate = false): void {
    const op = 'matmulQ4.backwardInput';
    this.checkWeight(op, w);
    const m = this.rowsOf(op, dx, w.k);
    this.checkF32(op, 'dy', dy, m, w.n);
    this.checkF32(op, 'dx', dx, m, w.k);
    rec.dispatch(this.dinputK, { codes: w.codes, scales: w.scales, dy, dx }, [Math.ceil(w.k / DX_TILE_K), Math.ceil(m / DX_TILE_M)], {
      m,
      n: w.n,
      k: w.k,
      accumulate: accumulate ? 1 : 0,
    });
  }

  /** rows [T, K] = W[ids[t], :] dequantized; ids (u32 or i32, [T]) outside [0, N) give zeros. */
  gather(rec: Recorder, ids: Tensor, w: Q4Weight, rows: Tensor): void {
    const op = 'matmulQ4.gather';
    this.checkWeight(op, w);
    if (ids.dtype !== 'u32' && ids.dtype !== 'i32') throw new ShapeError(op, `ids must be u32 or i32, got ${ids.dtype}`);
    const t = ids.numel;
    this.checkF32(op, 'rows', rows, t, w.k);
    const words = (t * w.k) / 8;
    rec.dispatch(this.gatherK, { codes: w.codes, scales: w.scales, ids, rows }, grid1d(words, GATHER_WG), {
      tokens: t,
      n: w.n,
      k: w.k,
    });
  }
}

/** [first row, rows] of the slices of m rows at most `cap` (a multiple of 64) a slice: as few as
 * that allows, of equal size rounded up to 64 rows (binding offsets; a short last slice would leave
 * SMs idle). */
export function rowSlices(m: number, cap: number): [number, number][] {
  if (m <= cap) return [[0, m]];
  const size = Math.min(cap, 64 * Math.ceil(m / Math.ceil(m / cap) / 64));
  const out: [number, number][] = [];
  for (let r0 = 0; r0 < m; r0 += size) out.push([r0, Math.min(size, m - r0)]);
  return out;
}

/** Rows [r0, r0 + rows) of a [M, width] f32 tensor as a view (the whole tensor when that is all of it). */
export function rowSlice(t: Tensor, r0: number, rows: number, width: number): Tensor {
  if (r0 === 0 && rows * width === t.numel) return t;
  return new Tensor(t.buffer, [rows, width], t.dtype, t.label, t.byteOffset + 4 * r0 * width);
}

/** One f32 operand of a product: its name in errors, the tensor, its row width. */
export interface Operand {
  name: string;
  t: Tensor;
  width: number;
}

/** The rows M of a product's f32 input [M, in.width] and output [M, out.width], after checking
 * the dtypes and shapes. */
export function f32Rows(op: string, input: Operand & { dim: string }, out: Operand): number {
  if (input.t.dtype !== 'f32' || out.t.dtype !== 'f32') throw new ShapeError(op, `${input.name} and ${out.name} must be f32, got ${input.t.dtype} and ${out.t.dtype}`);
  if (input.t.shape[input.t.shape.length - 1] !== input.width) throw new ShapeError(op, `${input.name} [${input.t.shape.join(', ')}] must end in ${input.dim} = ${input.width}`);
  const m = input.t.numel / input.width;
  if (out.t.numel !== m * out.width) throw new ShapeError(op, `${out.name} must be [${m}, ${out.width}], got [${out.t.shape.join(', ')}]`);
  return m;
}

/** f32Rows for a product on Q4 weight `w`, after checking the weight's buffers. */
export function rowsOf(op: string, w: Q4Weight, input: Operand & { dim: string }, out: Operand): number {
  checkQ4Shape(op, w.n, w.k);
  const words = q4Words(w.n, w.k);
  if (w.codes.numel !== words.codes || w.scales.numel !== words.scales) throw new ShapeError(op, `codes/scales do not hold a [${w.n}, ${w.k}] Q4 weight`);
  return f32Rows(op, input, out);
}
