// LoRA on one linear layer, composed from the GEMMs of src/ops/matmul.ts and the dropout, init
// and up-product kernels of shaders/lora.wgsl. With x [T, in], A [r, in], B [out, r], s = lora_alpha / r
// (PEFT's default scaling) and x̃ = dropout(x) (x itself when p = 0; element (row, col) kept by a
// hash of the seed and row·in + col, the seed from dropoutSeed, so a backward regenerates the mask):
//   forward   u = x̃·Aᵀ [T, r] (kept for backward),  y += s·u·Bᵀ
//   backward  t = s·dY·B [T, r]
//             dB += s·dYᵀ·u,  dA += tᵀ·x̃,  dX += dropout'(t·A)
// Gradients accumulate (micro-batches and sequences add up); zeroGrad clears them.
// Adapters of one input (q/k/v on a layer's normed rows, gate/up on the MLP's) share dispatches
// (forwardGroup, backwardGroup): their u, or their t, in one of shaders/lora_thin.wgsl (no K split
// into partials, x read for all), their up products in one of up_add, their dX in one, their dA
// and dB in two of shaders/lora_grad.wgsl. At large ranks each product runs on the GEMM instead
// (LORA_GEMM_FROM). Where the base product adds the updates and dX parts itself (the f16 tensor
// cores: src/ops/matmulQ4F16.ts), the rest comes apart: downGroup, then tGroup and gradsGroup.
import { capabilitiesOf, grid1d, ShapeError, type Gpu, type Kernel, type KernelSpec, type Recorder, type Tensor } from '../gpu';
import { Matmul } from './matmul';
import { loraScale, type LoraParams } from './loraParams';

const WG = 256;

/** shaders/lora.wgsl's pcg on the CPU: the same u32 permutation (tools/make_fixtures.py has it too). */
export function pcg(v: number): number {
  const state = (Math.imul(v >>> 0, 747796405) + 2891336453) >>> 0;
  const word = Math.imul(((state >>> ((state >>> 28) + 4)) ^ state) >>> 0, 277803737) >>> 0;
  return ((word >>> 22) ^ word) >>> 0;
}

/**
 * The dropout seed (LoraCallOptions.seed) of one adapter in one training forward: a pure function
 * of the run's seed, the forward's step, the layer and the module's index (LORA_PROJECTIONS), so
 * a mask element is a function of (seed, step, layer, module, row, col) alone.
 */
export function dropoutSeed(seed: number, step: number, layer: number, module: number): number {
  let h = pcg(seed);
  for (const v of [step, layer, module]) h = pcg((h ^ v) >>> 0);
  return h;
}

export interface LoraCallOptions {
  /** false runs the base layer alone (the reference policy): nothing is recorded. Default true. */
  enabled?: boolean;
  /** lora_dropout probability in [0, 1); default 0. */
  dropout?: number;
  /** Dropout seed (u32): give each layer and step its own, and backward the forward's. */
  seed?: number;
  /** u already holds this x̃·Aᵀ (a checkpointed recompute whose forward kept it): the update alone. */
  uKept?: boolean;
}

export interface LoraForwardArgs {
  /** Layer input [T, in]. */
  x: Tensor;
  /** Base layer output [T, out]; the LoRA update is added in place. */
  y: Tensor;
  /** Receives x̃·Aᵀ; at least [T, r]. Keep it for backward. */
  u: Tensor;
  /** Workspace for dropout(x), at least [T, in]; needed only when dropout > 0. */
  xd?: Tensor;
}

export interface LoraBackwardArgs {
  x: Tensor;
  /** Gradient of the layer output [T, out]. */
  dy: Tensor;
  /** The forward's u. */
  u: Tensor;
  /** Gradient of the layer input [T, in], accumulated into (it holds the base layer's part); omit when not needed. */
  dx?: Tensor;
  /** Workspace at least [T, r]. */
  t: Tensor;
  /** Workspace at least [T, in]; needed only when dropout > 0. */
  xd?: Tensor;
}

/** up_add's block of y (shaders/lora.wgsl): columns and rows a workgroup. */
const UP_COLS = 128;
const UP_ROWS = 32;
/** lora_thin's block of out (shaders/lora_thin.wgsl): ranks a workgroup, and rows (16, or 8 where
 * 16 makes fewer than THIN_MIN_GROUPS workgroups: an o_proj or down_proj of 2,560 rows alone
 * makes 160, fewer than two an SM on an H100). */
const THIN_RANKS = 8;
const THIN_MIN_GROUPS = 256;
/** lora_thin's workgroup memory with ROW_QUADS `rq`: half its outputs x (lanes + 1) floats, and
 * with `trans` the staged B, 8 ranks x (lanes + 1) vec4s. 12.4 KiB at most for rq 4 (within
 * WebGPU's 16 KiB minimum), 16.25 KiB for rq 2 with `trans`. */
function thinBytes(rq: number, trans: boolean): number {
  const lanes = 256 / (2 * rq);
  return 4 * (16 * rq) * (lanes + 1) + (trans ? 16 * THIN_RANKS * (lanes + 1) : 0);
}
/**
 * The subgroup size lora_thin sums its lanes with (subgroupAdd), or null for its workgroup-memory
 * rounds: subgroups on the device, of one size (min = max) that divides both of its lane counts (32, 64).
 */
export function thinSubgroupSize(gpu: Gpu): number | null {
  const { enabled, minSize, maxSize } = capabilitiesOf(gpu).subgroups;
  return enabled && minSize !== null && minSize === maxSize && 32 % minSize === 0 ? minSize : null;
}
/** Adapters a group dispatch binds at most (q/k/v). */
export const LORA_GROUP_MAX = 3;
/** lora_grad: columns of P a workgroup (64 threads of a vec4 each), most ranks of Q it holds (its
 * accumulators are as many vec4s a thread: 24 ran 2-3.5x slower than 16, BENCHMARKS.md). */
const GRAD_COLS = 256;
const GRAD_MAX_RANKS = 16;
/** A row of P costs about this many of a rank's vec4 FMAs more (its load, Q's broadcast loads). */
const GRAD_ROW_COST = 8;

/**
 * The ranks of Q a lora_grad workgroup holds (QMAX, a multiple of 4 up to GRAD_MAX_RANKS): the one
 * with the least work over dA's tiles (`aBlocks` column blocks over `aRanks`) and each dB's (`bBlocks`
 * over `r`), a tile's row costing its ranks plus GRAD_ROW_COST. A QMAX past a tile's ranks computes
 * zeros (24 for r = 16: a third of dB's work wasted), one below it reads P again for each chunk.
 */
export function gradRanks(aBlocks: number, aRanks: number, bBlocks: readonly number[], r: number): number {
  const work = (q: number) => aBlocks * Math.ceil(aRanks / q) * (q + GRAD_ROW_COST) + bBlocks.reduce((t, b) => t + b * Math.ceil(r / q) * (q + GRAD_ROW_COST), 0);
  let best = 4;
  for (let q = 8; q <= GRAD_MAX_RANKS; q += 4) if (work(q) <= work(best)) best = q;
  return best;
}

/** lora_grad's rows are split into chunks (partials summed after) until there are about this many
 * workgroups, each chunk of at least GRAD_MIN_ROWS rows. */
const GRAD_TARGET_GROUPS = 512;
const GRAD_MIN_ROWS = 32;
/** lora_grad's Params, in order. */
const GRAD_UNIFORMS = {
  rows: 'u32', chunk_rows: 'u32', r: 'u32', width_a: 'u32', out0: 'u32', out1: 'u32', out2: 'u32', s0: 'f32', s1: 'f32', s2: 'f32',
  adapters: 'u32', a_tiles: 'u32', b_tiles0: 'u32', b_tiles1: 'u32', b_tiles2: 'u32', set_size: 'u32', b_at0: 'u32', b_at1: 'u32', b_at2: 'u32', chunks: 'u32',
} as const;

/** LoRA's products, by what they make: u = x̃·Aᵀ, the update s·u·Bᵀ, t = s·dY·B, dA and dB, dX's t·A. */
export type LoraProduct = 'u' | 'up' | 't' | 'grads' | 'dx';

/**
 * From this rank on, a product runs on the GEMM (src/ops/matmul.ts) instead of its LoRA kernel
 * (lora_thin, up_add, lora_grad: made for thin products, their work a thread growing with the
 * rank): the crossovers measured on an H100 (BENCHMARKS.md, Kernel tuning choices).
 */
export const LORA_GEMM_FROM: Readonly<Record<LoraProduct, number>> = { u: 128, up: 128, t: 128, grads: 128, dx: 128 };

/** One product of lora_thin: out [T, r] = scale·x·Wᵀ (W = A) or scale·x·W (W = B), K = k. */
interface ThinProduct {
  x: Tensor;
  w: Tensor;
  out: Tensor;
  k: number;
  scale: number;
}

/** An adapter in a forward group: u = x·Aᵀ kept in `u` [≥ T, r], y [T, out] += s·u·Bᵀ. */
export interface LoraForwardMember {
  p: LoraParams;
  u: Tensor;
  y: Tensor;
}

/** An adapter in a backward group: its output's gradient, the forward's u and a workspace t [≥ T, r]. */
export interface LoraBackwardMember {
  p: LoraParams;
  dy: Tensor;
  u: Tensor;
  t: Tensor;
}

export class Lora {
  /** Variants by defines, each compiled on first use. */
  private readonly variants = new Map<string, Kernel>();
  private readonly thinSubgroup: number | null;

  private constructor(
    private readonly gpu: Gpu,
    private readonly mm: Matmul,
    private readonly initK: Kernel,
    private readonly dropFwdK: Kernel,
    private readonly dropBwdK: Kernel,
    private readonly gemmFrom: Readonly<Record<LoraProduct, number>>,
  ) {
    this.thinSubgroup = thinSubgroupSize(gpu);
  }

  /** `gemmFrom`: per product, the rank from which it runs on the GEMM (default LORA_GEMM_FROM). */
  static async create(gpu: Gpu, opts: { gemmFrom?: Partial<Record<LoraProduct, number>> } = {}): Promise<Lora> {
    const spec = (entry: string) => ({
      shader: 'lora',
      entry,
      constants: { WG },
      uniforms: { n: 'u32', seed: 'u32', scale: 'f32', threshold: 'u32' } as const,
    });
    const init = gpu.kernelOnUse(spec('init_uniform'));
    const dropout = gpu.kernelOnUse(spec('dropout_forward'));
    const dropoutBackward = gpu.kernelOnUse(spec('dropout_backward_acc'));
    return new Lora(gpu, await Matmul.create(gpu), init, dropout, dropoutBackward, { ...LORA_GEMM_FROM, ...opts.gemmFrom });
  }

  /** Whether `product` of rank r runs on the GEMM (gemmFrom). */
  private onGemm(product: LoraProduct, r: number): boolean {
    return r >= this.gemmFrom[product];
  }

  /** Whether adapters share group dispatches (on one x, and one dX in a backward): one to three
   * of one rank and input width, every width a whole number of vec4s (lora_thin, up_add). */
  static groupable(ps: readonly LoraParams[]): boolean {
    const p0 = ps[0];
    return ps.length >= 1 && ps.length <= LORA_GROUP_MAX && p0.in % 4 === 0 && ps.every((p) => p.r === p0.r && p.in === p0.in && p.out % 4 === 0);
  }

  /** `items` in runs of as many as one dispatch binds: `perItem` storage buffers each, `shared`
   * besides, within the device's storage buffers a stage (WebGPU's default 8 holds two q/k/v
   * adapters of some kernels) and LORA_GROUP_MAX. */
  private runs<T>(items: readonly T[], perItem: number, shared: number): T[][] {
    const n = Math.max(1, Math.min(LORA_GROUP_MAX, Math.floor((this.gpu.limits.maxStorageBuffersPerShaderStage - shared) / perItem)));
    const out: T[][] = [];
    for (let i = 0; i < items.length; i += n) out.push(items.slice(i, i + n));
    return out;
  }

  private variant(key: string, make: () => KernelSpec): Kernel {
    let k = this.variants.get(key);
    if (!k) this.variants.set(key, (k = this.gpu.kernelOnUse(make())));
    return k;
  }

  /** y_g [T, N_g] += scale_g·u_g·W_g for each adapter (own y_g), or with `sum` y += Σ_g of them
   * (one y): W_g (n, j) is B_g[n, j] or, `trans`, A_g[j, n]. N_g % 4 == 0. */
  private upAddGroup(rec: Recorder, all: { u: Tensor; w: Tensor; y: Tensor; n: number; scale: number }[], T: number, r: number, trans: boolean, sum: boolean): void {
    // u_g and W_g for each, and one y for all (sum) or y_g each.
    for (const g of this.runs(all, sum ? 2 : 3, sum ? 1 : 0)) this.upAddRun(rec, g, T, r, trans, sum);
  }

  private upAddRun(rec: Recorder, g: { u: Tensor; w: Tensor; y: Tensor; n: number; scale: number }[], T: number, r: number, trans: boolean, sum: boolean): void {
    const G = g.length;
    const summed = sum && G > 1;
    const key = `up/${trans}/${G}/${summed}`;
    const k = this.variant(key, () => ({
      name: `lora.up_add${trans ? '[A]' : '[B]'}${G > 1 ? `x${G}` : ''}`,
      shader: 'lora',
      entry: 'up_add',
      defines: { TRANS: trans, SECOND: G > 1, THIRD: G > 2, SUM: summed, ADAPTERS: G },
      uniforms: { rows: 'u32', r: 'u32', n0: 'u32', n1: 'u32', n2: 'u32', s0: 'f32', s1: 'f32', s2: 'f32' },
    }));
    const names = [['up_u', 'up_w', 'up_y'], ['up_u1', 'up_w1', 'up_y1'], ['up_u2', 'up_w2', 'up_y2']];
    const bind: Record<string, Tensor> = {};
    g.forEach((m, i) => {
      bind[names[i][0]] = m.u;
      bind[names[i][1]] = m.w;
      if (i === 0 || !summed) bind[names[i][2]] = m.y;
    });
    const n = g.map((m) => m.n);
    const s = g.map((m) => m.scale);
    rec.dispatch(k, bind, [Math.ceil(Math.max(...n) / UP_COLS), Math.ceil(T / UP_ROWS), summed ? 1 : G], { rows: T, r, n0: n[0], n1: n[1] ?? 0, n2: n[2] ?? 0, s0: s[0], s1: s[1] ?? 0, s2: s[2] ?? 0 });
  }

  /** y [T, N] += scale·u [T, r]·W: W (n, j) is B[n, j] (`w` = B [N, r]) or A[j, n] (`w` = A
   * [r, N], `trans`). up_add where N % 4 == 0 (y as vec4s) below gemmFrom's rank, else the GEMM. */
  private upAdd(rec: Recorder, u: Tensor, w: Tensor, y: Tensor, T: number, N: number, r: number, scale: number, trans: boolean): void {
    if (N % 4 === 0 && !this.onGemm(trans ? 'dx' : 'up', r)) {
      this.upAddGroup(rec, [{ u, w, y, n: N, scale }], T, r, trans, false);
      return;
    }
    this.mm.gemm(rec, { a: u, b: w, c: y, m: T, n: N, k: r, transB: !trans, alpha: scale, beta: 1 });
  }

  /**
   * out_g [T, r] = scale_g·X_g·W_gᵀ for each adapter in one dispatch (shaders/lora_thin.wgsl):
   * W_g = A_g with one X for all (u = x·Aᵀ), or W_gᵀ = B_g with X_g = dY_g (`trans`: t = s·dY·B).
   * Every K (in, or out with `trans`) is a multiple of 4.
   */
  private thin(rec: Recorder, all: ThinProduct[], T: number, r: number, trans: boolean): void {
    // W_g and out_g for each, and one x for all (u = x·Aᵀ) or X_g each.
    const shared = !trans;
    for (const g of this.runs(all, shared ? 2 : 3, shared ? 1 : 0)) this.thinRun(rec, g, T, r, trans, shared);
  }

  private thinRun(rec: Recorder, g: ThinProduct[], T: number, r: number, trans: boolean, shared: boolean): void {
    const G = g.length;
    const blocks = Math.ceil(r / THIN_RANKS);
    const few = Math.ceil(T / 16) * G * blocks < THIN_MIN_GROUPS;
    const rowQuads = few && thinBytes(2, trans) <= this.gpu.limits.maxComputeWorkgroupStorageSize ? 2 : 4;
    const sg = this.thinSubgroup;
    const key = `thin/${trans}/${G}/${shared}/${rowQuads}/${sg}`;
    const k = this.variant(key, () => ({
      name: `lora.thin${trans ? '[t]' : '[u]'}${G > 1 ? `x${G}` : ''}`,
      shader: 'lora_thin',
      entry: 'thin',
      defines: { TRANS_W: trans, SHARED_X: shared, SECOND: G > 1, THIRD: G > 2, W_TYPE: trans ? 'f32' : 'vec4<f32>', ROW_QUADS: rowQuads, SUBGROUPS: sg !== null, SG_SIZE: sg ?? 0 },
      uniforms: { rows: 'u32', r: 'u32', rank_blocks: 'u32', k0: 'u32', k1: 'u32', k2: 'u32', s0: 'f32', s1: 'f32', s2: 'f32' },
    }));
    const bind: Record<string, Tensor> = {};
    g.forEach((m, i) => {
      if (i === 0 || !shared) bind[`x${i}`] = m.x;
      bind[`w${i}`] = m.w;
      bind[`o${i}`] = m.out;
    });
    const ks = g.map((m) => m.k);
    const s = g.map((m) => m.scale);
    rec.dispatch(k, bind, [Math.ceil(T / (4 * rowQuads)), G * blocks], { rows: T, r, rank_blocks: blocks, k0: ks[0], k1: ks[1] ?? 0, k2: ks[2] ?? 0, s0: s[0], s1: s[1] ?? 0, s2: s[2] ?? 0 });
  }

  /** PEFT's initialisation: A ~ U(-1/√in, 1/√in) from `seed`, B = 0 (so the adapter starts as a no-op); grads cleared. */
  init(rec: Recorder, p: LoraParams, seed: number): void {
    checkSeed('lora.init', seed);
    rec.dispatch(this.initK, { y: p.A }, grid1d(p.A.numel, WG), { n: p.A.numel, seed, scale: 1 / Math.sqrt(p.in), threshold: 0 });
    rec.clear(p.B);
    this.zeroGrad(rec, p);
  }

  zeroGrad(rec: Recorder, p: LoraParams): void {
    rec.clear(p.dA);
    rec.clear(p.dB);
  }

  /** y += s·dropout(x)·Aᵀ·Bᵀ, keeping u = dropout(x)·Aᵀ. */
  forward(rec: Recorder, p: LoraParams, args: LoraForwardArgs, opts: LoraCallOptions = {}): void {
    if (opts.enabled === false) return;
    const op = 'lora.forward';
    const T = rows(op, p, 'x', args.x, p.in);
    rows(op, p, 'y', args.y, p.out, T, true);
    rows(op, p, 'u', args.u, p.r, T);
    if (!opts.uKept) this.downProduct(op, rec, p, args.x, args.u, T, args.xd, opts);
    this.upAdd(rec, args.u, p.B, args.y, T, p.out, p.r, loraScale(p), false);
  }

  /** u = x̃·Aᵀ alone: the forward's first half, for a recompute that needs u but not y. */
  down(rec: Recorder, p: LoraParams, x: Tensor, u: Tensor, xd?: Tensor, opts: LoraCallOptions = {}): void {
    if (opts.enabled === false || opts.uKept) return;
    const op = 'lora.down';
    const T = rows(op, p, 'x', x, p.in);
    rows(op, p, 'u', u, p.r, T);
    this.downProduct(op, rec, p, x, u, T, xd, opts);
  }

  private downProduct(op: string, rec: Recorder, p: LoraParams, x: Tensor, u: Tensor, T: number, xd: Tensor | undefined, opts: LoraCallOptions): void {
    const xin = this.dropout(op, rec, p, x, xd, T, opts);
    if (p.in % 4 === 0 && !this.onGemm('u', p.r)) this.thin(rec, [{ x: xin, w: p.A, out: u, k: p.in, scale: 1 }], T, p.r, false);
    else this.mm.gemm(rec, { a: xin, b: p.A, c: u, m: T, n: p.r, k: p.in, transB: true });
  }

  /** t = s·dY·B [T, r]. */
  private dyB(rec: Recorder, p: LoraParams, dy: Tensor, t: Tensor, T: number): void {
    if (p.out % 4 === 0 && !this.onGemm('t', p.r)) this.thin(rec, [{ x: dy, w: p.B, out: t, k: p.out, scale: loraScale(p) }], T, p.r, true);
    else this.mm.gemm(rec, { a: dy, b: p.B, c: t, m: T, n: p.r, k: p.out, alpha: loraScale(p) });
  }

  /** dB += s·dYᵀ·u, dA += tᵀ·x̃. */
  private weightGrads(rec: Recorder, p: LoraParams, dy: Tensor, u: Tensor, t: Tensor, xin: Tensor, T: number): void {
    this.mm.gemm(rec, { a: dy, b: u, c: p.dB, m: p.out, n: p.r, k: T, transA: true, alpha: loraScale(p), beta: 1 });
    this.mm.gemm(rec, { a: t, b: xin, c: p.dA, m: p.r, n: p.in, k: T, transA: true, beta: 1 });
  }

  /**
   * dB_g += s_g·dY_gᵀ·u_g and dA_g += t_gᵀ·x for a group (shaders/lora_grad.wgsl): partials over
   * chunks of rows in one dispatch, their sum into every gradient in a second (for as many
   * adapters as the device binds); in a tape the GEMMs of each.
   */
  private weightGradsGroup(rec: Recorder, x: Tensor, all: readonly LoraBackwardMember[], T: number): void {
    // Its partials are scratch released at once: not for a tape, which replays later.
    if (rec.capturing) {
      for (const { p, dy, u, t } of all) this.weightGrads(rec, p, dy, u, t, x, T);
      return;
    }
    // grad_parts binds dY_g, u_g and t_g for each, x and the partials besides.
    for (const ms of this.runs(all, 3, 2)) this.weightGradsRun(rec, x, ms, T);
  }

  private weightGradsRun(rec: Recorder, x: Tensor, ms: readonly LoraBackwardMember[], T: number): void {
    const G = ms.length;
    const { r, in: inF } = ms[0].p;
    const colBlocks = (w: number) => Math.ceil(w / GRAD_COLS);
    const qmax = gradRanks(colBlocks(inF), G * r, ms.map((m) => colBlocks(m.p.out)), r);
    const aTiles = colBlocks(inF) * Math.ceil((G * r) / qmax);
    const bTiles = ms.map((m) => colBlocks(m.p.out) * Math.ceil(r / qmax));
    const tiles = aTiles + bTiles.reduce((a, b) => a + b, 0);
    const bAt: number[] = [];
    let set = G * r * inF;
    for (const m of ms) {
      bAt.push(set);
      set += m.p.out * r;
    }
    // As many chunks as fill the GPU, of GRAD_MIN_ROWS rows at least, their partials within one binding.
    const fit = Math.floor(Math.min(this.gpu.limits.maxStorageBufferBindingSize, this.gpu.limits.maxBufferSize) / (4 * set));
    let chunks = Math.max(1, Math.min(Math.ceil(GRAD_TARGET_GROUPS / tiles), Math.floor(T / GRAD_MIN_ROWS), fit));
    const chunkRows = Math.ceil(T / chunks);
    chunks = Math.ceil(T / chunkRows);
    const part = this.gpu.tensor([chunks * set], 'f32', 'lora.grad_parts');
    const uniforms = {
      rows: T, chunk_rows: chunkRows, r, width_a: inF,
      out0: ms[0].p.out, out1: ms[1]?.p.out ?? 0, out2: ms[2]?.p.out ?? 0,
      s0: loraScale(ms[0].p), s1: ms[1] ? loraScale(ms[1].p) : 0, s2: ms[2] ? loraScale(ms[2].p) : 0,
      adapters: G, a_tiles: aTiles, b_tiles0: bTiles[0], b_tiles1: bTiles[1] ?? 0, b_tiles2: bTiles[2] ?? 0,
      set_size: set, b_at0: bAt[0], b_at1: bAt[1] ?? set, b_at2: bAt[2] ?? set, chunks,
    };
    const spec = (parts: boolean): KernelSpec => ({
      name: `lora.grad_${parts ? 'parts' : 'sum'}${G > 1 ? `x${G}` : ''}`,
      shader: 'lora_grad',
      entry: parts ? 'grad_parts' : 'grad_sum',
      defines: { PARTS: parts, SECOND: G > 1, THIRD: G > 2, QMAX: parts ? qmax : 4 },
      uniforms: GRAD_UNIFORMS,
    });
    const partsK = this.variant(`grad/parts/${G}/${qmax}`, () => spec(true));
    const sumK = this.variant(`grad/sum/${G}`, () => spec(false));
    const src: Record<string, Tensor> = { x, part };
    const dst: Record<string, Tensor> = { part };
    ms.forEach((m, g) => {
      Object.assign(src, { [`dy${g}`]: m.dy, [`u${g}`]: m.u, [`t${g}`]: m.t });
      Object.assign(dst, { [`da${g}`]: m.p.dA, [`db${g}`]: m.p.dB });
    });
    rec.dispatch(partsK, src, [tiles, chunks], uniforms);
    rec.dispatch(sumK, dst, grid1d(set, 256), uniforms);
    part.release();
  }

  /**
   * forward for the adapters of one input x without dropout (q/k/v, gate/up): every u in one
   * dispatch and every update in one where they are groupable, else forward each. `uKept`: the
   * u hold x·Aᵀ already (LoraCallOptions.uKept), the updates alone run.
   */
  forwardGroup(rec: Recorder, x: Tensor, members: readonly LoraForwardMember[], uKept = false): void {
    if (members.length === 0) return;
    const T = checkForward(x, members);
    if (!Lora.groupable(members.map((m) => m.p))) {
      for (const { p, u, y } of members) this.forward(rec, p, { x, y, u }, { uKept });
      return;
    }
    const r = members[0].p.r;
    if (!uKept) this.downs(rec, x, members, T);
    if (this.onGemm('up', r)) for (const { p, u, y } of members) this.upAdd(rec, u, p.B, y, T, p.out, r, loraScale(p), false);
    else this.upAddGroup(rec, members.map((m) => ({ u: m.u, w: m.p.B, y: m.y, n: m.p.out, scale: loraScale(m.p) })), T, r, false, false);
  }

  /** Every u = x·Aᵀ of adapters of one input x without dropout, and nothing else: for a product
   * that adds their updates itself (the f16 tensor cores' extended reduction). */
  downGroup(rec: Recorder, x: Tensor, members: readonly { p: LoraParams; u: Tensor }[]): void {
    if (members.length === 0) return;
    const T = checkForward(x, members);
    if (Lora.groupable(members.map((m) => m.p))) this.downs(rec, x, members, T);
    else for (const { p, u } of members) this.down(rec, p, x, u);
  }

  private downs(rec: Recorder, x: Tensor, members: readonly { p: LoraParams; u: Tensor }[], T: number): void {
    const r = members[0].p.r;
    if (this.onGemm('u', r)) for (const { p, u } of members) this.mm.gemm(rec, { a: x, b: p.A, c: u, m: T, n: r, k: p.in, transB: true });
    else this.thin(rec, members.map((m) => ({ x, w: m.p.A, out: m.u, k: m.p.in, scale: 1 })), T, r, false);
  }

  /**
   * backward for the adapters of one input x without dropout: every t = s·dY·B in one dispatch,
   * dA and dB accumulated, and (with `dx`) their parts of dX added in one, where groupable; else
   * backward each.
   */
  backwardGroup(rec: Recorder, x: Tensor, dx: Tensor | undefined, members: readonly LoraBackwardMember[]): void {
    if (members.length === 0) return;
    const T = checkBackward(x, dx, members);
    if (!Lora.groupable(members.map((m) => m.p))) {
      for (const { p, dy, u, t } of members) this.backward(rec, p, { x, dy, u, t, dx });
      return;
    }
    const r = members[0].p.r;
    this.ts(rec, members, T);
    this.grads(rec, x, members, T);
    if (!dx) return;
    if (this.onGemm('dx', r)) for (const { p, t } of members) this.upAdd(rec, t, p.A, dx, T, p.in, r, 1, true);
    else this.upAddGroup(rec, members.map((m) => ({ u: m.t, w: m.p.A, y: dx, n: m.p.in, scale: 1 })), T, r, true, true);
  }

  /** Every t = s·dY·B of adapters of one input x without dropout, for a product that adds their
   * parts of dX itself (the f16 tensor cores' extended reduction); gradsGroup then finishes. */
  tGroup(rec: Recorder, x: Tensor, members: readonly LoraBackwardMember[]): void {
    if (members.length === 0) return;
    const T = checkBackward(x, undefined, members);
    if (Lora.groupable(members.map((m) => m.p))) this.ts(rec, members, T);
    else for (const { p, dy, t } of members) this.dyB(rec, p, dy, t, T);
  }

  /** dA and dB of adapters of one input x without dropout, on the t that tGroup left. */
  gradsGroup(rec: Recorder, x: Tensor, members: readonly LoraBackwardMember[]): void {
    if (members.length === 0) return;
    const T = checkBackward(x, undefined, members);
    if (Lora.groupable(members.map((m) => m.p))) this.grads(rec, x, members, T);
    else for (const { p, dy, u, t } of members) this.weightGrads(rec, p, dy, u, t, x, T);
  }

  private ts(rec: Recorder, members: readonly LoraBackwardMember[], T: number): void {
    const r = members[0].p.r;
    if (this.onGemm('t', r)) for (const { p, dy, t } of members) this.dyB(rec, p, dy, t, T);
    else this.thin(rec, members.map((m) => ({ x: m.dy, w: m.p.B, out: m.t, k: m.p.out, scale: loraScale(m.p) })), T, r, true);
  }

  private grads(rec: Recorder, x: Tensor, members: readonly LoraBackwardMember[], T: number): void {
    if (this.onGemm('grads', members[0].p.r)) for (const { p, dy, u, t } of members) this.weightGrads(rec, p, dy, u, t, x, T);
    else this.weightGradsGroup(rec, x, members, T);
  }

  /** Accumulate dA and dB, and add the adapter's part of dX when `dx` is given. */
  backward(rec: Recorder, p: LoraParams, args: LoraBackwardArgs, opts: LoraCallOptions = {}): void {
    if (opts.enabled === false) return;
    const op = 'lora.backward';
    const T = rows(op, p, 'x', args.x, p.in);
    rows(op, p, 'dy', args.dy, p.out, T, true);
    rows(op, p, 'u', args.u, p.r, T);
    rows(op, p, 't', args.t, p.r, T);
    if (args.dx) rows(op, p, 'dx', args.dx, p.in, T, true);
    const { dy, u, t } = args;
    this.dyB(rec, p, dy, t, T);
    const xin = this.dropout(op, rec, p, args.x, args.xd, T, opts);
    if (Lora.groupable([p]) && !this.onGemm('grads', p.r)) this.weightGradsGroup(rec, xin, [{ p, dy, u, t }], T);
    else this.weightGrads(rec, p, dy, u, t, xin, T);
    if (!args.dx) return;
    if (xin === args.x) {
      this.upAdd(rec, t, p.A, args.dx, T, p.in, p.r, 1, true);
      return;
    }
    // With dropout, t·A goes through the workspace (dropout(x) is no longer needed) and only
    // the kept elements reach dX.
    const xd = args.xd!;
    this.mm.gemm(rec, { a: t, b: p.A, c: xd, m: T, n: p.in, k: p.r });
    const n = T * p.in;
    rec.dispatch(this.dropBwdK, { x: xd, y: args.dx }, grid1d(n, WG), dropoutUniforms(n, opts));
  }

  /** x itself when p = 0, else dropout(x) written to the workspace `xd`. */
  private dropout(op: string, rec: Recorder, p: LoraParams, x: Tensor, xd: Tensor | undefined, T: number, opts: LoraCallOptions): Tensor {
    const prob = opts.dropout ?? 0;
    if (!(prob >= 0 && prob < 1)) throw new ShapeError(op, `${p.name}: dropout must be in [0, 1), got ${prob}`);
    if (prob === 0) return x;
    checkSeed(op, opts.seed);
    if (!xd) throw new ShapeError(op, `${p.name}: dropout ${prob} needs the workspace xd [${T}, ${p.in}]`);
    rows(op, p, 'xd', xd, p.in, T);
    const n = T * p.in;
    rec.dispatch(this.dropFwdK, { x, y: xd }, grid1d(n, WG), dropoutUniforms(n, opts));
    return xd;
  }
}

/** A forward group's shapes (x, each u and y); its rows. */
function checkForward(x: Tensor, members: readonly { p: LoraParams; u: Tensor; y?: Tensor }[]): number {
  const op = 'lora.forward';
  const T = x.shape[0];
  for (const { p, u, y } of members) {
    rows(op, p, 'x', x, p.in);
    if (y) rows(op, p, 'y', y, p.out, T, true);
    rows(op, p, 'u', u, p.r, T);
  }
  return T;
}

/** A backward group's shapes (x, each dY, u, t, and dX when given); its rows. */
function checkBackward(x: Tensor, dx: Tensor | undefined, members: readonly LoraBackwardMember[]): number {
  const op = 'lora.backward';
  const T = x.shape[0];
  for (const { p, dy, u, t } of members) {
    rows(op, p, 'x', x, p.in);
    rows(op, p, 'dy', dy, p.out, T, true);
    rows(op, p, 'u', u, p.r, T);
    rows(op, p, 't', t, p.r, T);
    if (dx) rows(op, p, 'dx', dx, p.in, T, true);
  }
  return T;
}

function dropoutUniforms(n: number, opts: LoraCallOptions): Record<string, number> {
  const prob = opts.dropout ?? 0;
  return { n, seed: opts.seed!, scale: 1 / (1 - prob), threshold: Math.min(2 ** 32 - 1, Math.round(prob * 2 ** 32)) };
}

function checkSeed(op: string, seed: number | undefined): void {
  if (seed === undefined || !Number.isInteger(seed) || seed < 0 || seed >= 2 ** 32) {
    throw new ShapeError(op, `seed must be a u32, got ${seed}`);
  }
}

/**
 * Check a 2-D f32 tensor with `cols` columns and return its rows. With `T` given, the tensor
 * must have exactly T rows (`exact`) or at least T (a workspace sized for the longest batch).
 */
function rows(op: string, p: LoraParams, what: string, t: Tensor, cols: number, T?: number, exact = false): number {
  const bad = (why: string) => new ShapeError(op, `${p.name}: ${what} ('${t.label}') ${why}`);
  if (t.dtype !== 'f32') throw bad(`must be f32, got ${t.dtype}`);
  if (t.shape.length !== 2 || t.shape[1] !== cols) throw bad(`must be [tokens, ${cols}], got [${t.shape}]`);
  if (T !== undefined && (exact ? t.shape[0] !== T : t.shape[0] < T)) throw bad(`needs ${exact ? '' : 'at least '}${T} rows, got ${t.shape[0]}`);
  return t.shape[0];
}
