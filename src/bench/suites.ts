// The kernel benchmark suites, every family on the shapes of Qwen3-VL-2B (bench/shapes.json),
// each rate beside the limit measured in the same run: the plain read kernel's bandwidth for
// memory-bound kernels, the card's fp32 datasheet peak (where known) for compute-bound ones.
// Where an op has options (the 4-bit GEMV thread layout, the 4-bit GEMM tile, the decode split)
// every option is tried and the best is reported with its setting; all tries go to `sweeps`.
// Run by bench/kernels.ts in Node (Dawn) and by the engine worker for the app's Benchmark page.
import { grid1d, MissingFeatureError, ShapeError, type Gpu, type Recorder, type Tensor } from '../gpu';
import { Activations } from '../ops/activations';
import { AdamW, type AdamWParam } from '../ops/adamw';
import { createLoraParamSet, releaseLoraParams } from '../ops/loraParams';
import { Attention } from '../ops/attention';
import { DTYPE_BYTES } from '../gpu/tensor';
import { KvCache, type KvDtype } from '../ops/kvCache';
import { LogProb } from '../ops/logprob';
import { Matmul } from '../ops/matmul';
import { DEFAULT_GEMM, MatmulQ4, type GemmShape, type MatmulQ4Options, type Q4Weight } from '../ops/matmulQ4';
import { MatmulQ4Mma, mmaUnsupported, type KBlock, type MmaSteps, type MmaTile } from '../ops/matmulQ4Mma';
import { checkQ4Mma, OUTLIERS, type MmaAccuracy } from '../ops/matmulQ4MmaCheck';
import { gemvOptions } from './gemvOptions';
import { Norms } from '../ops/norms';
import { Rope } from '../ops/rope';
import { mropeLayout } from '../model/ropeTables';
import { Filler } from './fill';
import { bandwidthRow, flopRow, measure, type Limits, type MeasureOptions, type Row, type Timing } from './harness';
import { q4Bytes, Q4LmHead, randomQ4Blocks, releaseQ4 } from './q4';
import { benchShapes, type BenchShapes, type Preset } from './shapes';

/** The suites in the order they run (the read bandwidth always runs first: it is the GB/s limit). */
export const SUITES = ['gemv', 'gemm', 'attention', 'logprob', 'elementwise', 'adamw'] as const;
export type Suite = (typeof SUITES)[number];

function shapesFor(preset: Preset, oneWeight: boolean): BenchShapes {
  const sh = benchShapes(preset);
  return oneWeight ? { ...sh, gemv: { ...sh.gemv, weights: sh.gemv.weights.slice(0, 1) }, gemm: { ...sh.gemm, weights: sh.gemm.weights.slice(0, 1) } } : sh;
}

function withGemv(sh: BenchShapes, gemv: RunOptions['gemv']): BenchShapes {
  return gemv ? { ...sh, gemv: { ...sh.gemv, weights: gemv.weights ?? sh.gemv.weights, rows: gemv.rows ?? sh.gemv.rows } } : sh;
}

/** Rows a run of `suites` on `preset` reports, the read bandwidth's included (for progress). */
export function expectedRows(preset: Preset, suites: readonly Suite[], oneWeight = false): number {
  const sh = shapesFor(preset, oneWeight);
  const per: Record<Suite, number> = {
    gemv: sh.gemv.weights.length * sh.gemv.rows.length,
    gemm: 3 * sh.gemm.weights.length * sh.gemm.rows.length,
    attention: 2 + sh.attention.sequences.length,
    logprob: 2,
    elementwise: 5,
    adamw: 1,
  };
  // The read kernel: once at its full size, once as a small dispatch, once per GEMV weight's bytes.
  return 2 + sh.gemv.weights.length + suites.reduce((s, x) => s + per[x], 0);
}

export type Sweeps = Record<string, { shape: string; setting: string; ms: number }[]>;

/**
 * A 4-bit product just measured, with its buffers still alive, for a peer implementation to run
 * the same work on (the Benchmark page's onnxruntime-web MatMulNBits). `y` holds our output of
 * x·Wᵀ for `weight` (row blocks of one of the `copies` identical-shaped weights the timing cycled).
 */
export interface Q4Case {
  row: Row;
  m: number;
  n: number;
  k: number;
  copies: number;
  x: Tensor;
  weight: Q4Weight[];
  y: Tensor[];
}

export interface RunOptions {
  preset: Preset;
  /** Default: all of SUITES. */
  suites?: readonly Suite[];
  /** Most profiled repetitions per measurement (default 3 quick, 30 full). */
  maxReps?: number;
  /** Try every option of ops that have them (default); false: only the first of each list. */
  sweep?: boolean;
  /** Only the first weight shape of the GEMV and GEMM suites (a smoke check). */
  oneWeight?: boolean;
  /** The GEMV suite's weights [N, K] and rows of x, in place of the preset's (layout sweeps on
   * other shapes: decode's joined q/k/v [4096, 2048] and gate/up [12288, 2048], M = 2..8). */
  gemv?: { weights?: [number, number][]; rows?: number[] };
  /** The card's fp32 datasheet peak, for the "of limit" of TFLOP/s rows. */
  fp32Tflops?: number;
  int8Tops?: number;
  /** Stops the run at the next measurement (the promise rejects with the signal's reason). */
  signal?: AbortSignal;
  onRow?: (row: Row) => void;
  /** After each suite (the read bandwidth counts as 'bandwidth'), with its seconds and the results so far. */
  onSuiteDone?: (suite: Suite | 'bandwidth', seconds: number, soFar: RunResult) => void;
  /** Called after each 4-bit GEMV and GEMM row, before its buffers are released. */
  onQ4?: (c: Q4Case) => Promise<void>;
}

export interface RunResult {
  readGBs: number;
  rows: Row[];
  sweeps: Sweeps;
}

interface SuiteContext {
  gpu: Gpu;
  fill: Filler;
  shapes: BenchShapes;
  quick: boolean;
  limits: Limits;
  full: MeasureOptions;
  /** Sweeps: fewer repetitions, no wall clock; the winner is measured again with `full`. */
  sweep: MeasureOptions;
  rows: Row[];
  sweeps: Sweeps;
  opts: RunOptions;
  add(row: Row): void;
  measure(kernel: RegExp, record: (rec: Recorder) => void, opts: MeasureOptions): Promise<Timing>;
}

const shapeMNK = (m: number, n: number, k: number) => `M${m} N${n} K${k}`;

/** Calls of a memory-bound op per measured pass: the weight copies (cold L2) cycled through again
 * until there are this many, so that the pass's own start and end are shared by enough calls (on
 * the H100 two calls of the LM head's GEMV a pass read 72 µs a call in stream, 68 per call over a
 * long submit). */
const MIN_PASS_CALLS = 8;
const passRepeats = (copies: number) => Math.ceil(MIN_PASS_CALLS / copies);

/** A tensor filled on the GPU (the recorder must be submitted before use). */
function filled(ctx: SuiteContext, rec: Recorder, shape: number[], label: string, scale = 0.05): Tensor {
  return ctx.fill.fill(rec, ctx.gpu.tensor(shape, 'f32', label), 'uniform', scale);
}

function release(...ts: Tensor[]): void {
  for (const t of ts) t.release();
}

/** Try every option, keep the fastest (GPU time), measure it again in full; every try is logged to the sweep. */
async function bestOf<T>(
  ctx: SuiteContext,
  sweep: string,
  shape: string,
  options: { setting: string; value: T }[],
  run: (value: T, opts: MeasureOptions) => Promise<Timing>,
): Promise<{ setting: string; value: T; timing: Timing }> {
  if (ctx.opts.sweep === false) {
    const [o] = options;
    return { ...o, timing: await run(o.value, ctx.full) };
  }
  const log = (ctx.sweeps[sweep] ??= []);
  let best: { setting: string; value: T; ms: number } | undefined;
  for (const o of options) {
    let ms: number;
    try {
      // The in-stream clock where there is one: a kernel's cost where it runs (decode, training),
      // without the pass per dispatch that the per-kernel clock adds.
      const t = await run(o.value, ctx.sweep);
      ms = t.passMs ?? t.ms;
    } catch (e) {
      if (e instanceof ShapeError) continue; // an option this device cannot hold (workgroup limits)
      throw e;
    }
    log.push({ shape, setting: o.setting, ms });
    if (!best || ms < best.ms) best = { ...o, ms };
  }
  if (!best) throw new Error(`${sweep} ${shape}: no option ran`);
  return { setting: best.setting, value: best.value, timing: await run(best.value, ctx.full) };
}

// ---------------------------------------------------------------------------------------------

async function readBandwidth(ctx: SuiteContext): Promise<void> {
  const { gpu } = ctx;
  const bytes = Math.min(ctx.shapes.bandwidthBytes, Math.floor((0.85 * gpu.limits.maxStorageBufferBindingSize) / 16) * 16);
  const nVec4 = bytes / 16;
  const rec = gpu.recorder('setup');
  const src = ctx.fill.fill(rec, gpu.tensor([bytes / 4], 'f32', 'bandwidth-src'), 'uniform');
  const sink = gpu.tensor([65536 * 4], 'f32', 'bandwidth-sink');
  await rec.submit();
  const WG = 256;
  const perThread = 16;
  const k = await gpu.kernel({ shader: 'bandwidth', entry: 'read_sum', constants: { WG }, uniforms: { n_vec4: 'u32', per_thread: 'u32', base: 'u32' } });
  const read = (r: Recorder) => r.dispatch(k, { src, sink }, grid1d(nVec4, WG * perThread), { n_vec4: nVec4, per_thread: perThread, base: 0 });
  // About a second of reads first: an idle GPU runs its first milliseconds at lower clocks, which
  // made the first suite's first shape read slower than its later ones.
  for (const t0 = performance.now(); performance.now() - t0 < 1000; ) {
    const warm = gpu.recorder('warm-up');
    for (let i = 0; i < 20; i++) read(warm);
    await warm.submit();
    await gpu.sync();
  }
  const t = await ctx.measure(/^bandwidth\./, read, ctx.full);
  ctx.limits.readGBs = bytes / t.ms / 1e6;
  ctx.add(bandwidthRow(ctx.limits, 'memory', 'read (vec4 f32)', `${bytes >> 20} MiB`, t, bytes));
  // What one dispatch costs when it has almost nothing to do: one workgroup reading 4 KiB, 64
  // calls back to back. Every op pays this; decode runs ~800 dispatches a token.
  const small = 256;
  const tiny = await ctx.measure(
    /^bandwidth\./,
    (r) => {
      for (let i = 0; i < 64; i++) r.dispatch(k, { src, sink }, 1, { n_vec4: small, per_thread: 1, base: 0 });
    },
    { ...ctx.full, calls: 64 },
  );
  ctx.add(bandwidthRow(ctx.limits, 'memory', 'one small dispatch (one workgroup, 4 KiB)', '4 KiB', tiny, 16 * small, { note: 'the fixed cost of a dispatch on this stack' }));
  // The read kernel on exactly the bytes of each GEMV weight, cycling through the buffer as the
  // GEMV cycles through weight copies: what any kernel reading that much can reach per call.
  for (const [n, kk] of ctx.shapes.gemv.weights) {
    const wBytes = Math.ceil(q4Bytes(n, kk) / 16) * 16;
    const copies = Math.max(1, Math.min(64, Math.floor(bytes / wBytes), Math.ceil(ctx.shapes.gemv.coldBytes / wBytes)));
    const nv = wBytes / 16;
    const repeats = passRepeats(copies);
    // Vec4s per thread: 16 suits a large read; a small one needs more workgroups. The best counts.
    let best: { t: Timing; per: number } | undefined;
    for (const per of [1, 2, 4, 16]) {
      const tr = await ctx.measure(
        /^bandwidth\./,
        (r) => {
          for (let i = 0; i < repeats; i++)
            for (let c = 0; c < copies; c++) r.dispatch(k, { src, sink }, grid1d(nv, WG * per), { n_vec4: nv, per_thread: per, base: c * nv });
        },
        { ...ctx.full, calls: copies * repeats },
      );
      if (!best || (tr.passMs ?? tr.ms) < (best.t.passMs ?? best.t.ms)) best = { t: tr, per };
    }
    ctx.add(bandwidthRow(ctx.limits, 'memory', 'read (vec4 f32), the bytes of one 4-bit weight', `${n}x${kk} (${(wBytes / 2 ** 20).toPrecision(3)} MiB)`, best!.t, wBytes, { note: `${copies} copies (cold L2), ${copies * repeats} calls a pass`, setting: `${best!.per} vec4 per thread` }));
  }
  release(src, sink);
}

async function gemv(ctx: SuiteContext): Promise<void> {
  const { gpu } = ctx;
  const kernels = new Map<string, Promise<MatmulQ4>>();
  const options = gemvOptions(gpu, ctx.quick);
  const mmFor = (o: MatmulQ4Options) => {
    const key = JSON.stringify(o);
    if (!kernels.has(key)) kernels.set(key, MatmulQ4.create(gpu, o));
    return kernels.get(key)!;
  };
  for (const [n, k] of ctx.shapes.gemv.weights) {
    // Enough copies of the weight that L2 cannot hold them: each layer's weight is cold in decode.
    const copies = Math.max(1, Math.min(64, Math.ceil(ctx.shapes.gemv.coldBytes / q4Bytes(n, k))));
    const setup = gpu.recorder('setup');
    const weights = Array.from({ length: copies }, (_, c) => randomQ4Blocks(gpu, setup, ctx.fill, n, k, `w${c}`));
    const repeats = passRepeats(copies);
    const calls = copies * repeats;
    const cycle = (once: () => void) => {
      for (let i = 0; i < repeats; i++) once();
    };
    for (const m of ctx.shapes.gemv.rows) {
      const x = filled(ctx, setup, [m, k], 'x', 1);
      const ys = weights[0].map((b) => gpu.tensor([m, b.n], 'f32', 'y'));
      await setup.submit();
      const shape = shapeMNK(m, n, k);
      // One row of x takes the same two-limb kernel (quantize_x2 first) for every int8 layout:
      // the preq ones stand for it.
      const tries = m > 1 ? options : options.filter((o) => !o.value.gemv?.int8 || o.value.gemv.preq);
      const best = await bestOf(ctx, 'gemv', shape, tries, async (o, opts) => {
        const mm = await mmFor(o);
        return ctx.measure(/^matmul_q4\.gemv$/, (rec) => cycle(() => weights.forEach((blocks) => blocks.forEach((b, i) => mm.gemv(rec, x, b, ys[i])))), { ...opts, calls });
      });
      const bytes = q4Bytes(n, k) + 4 * m * (k + n);
      const blocks = weights[0].length > 1 ? `, ${weights[0].length} row blocks` : '';
      const same = ctx.rows.find((r) => r.suite === 'memory' && r.shape.startsWith(`${n}x${k} (`));
      const vsRead =
        same?.passMs !== undefined && best.timing.passMs !== undefined
          ? `; in stream ${(1000 * best.timing.passMs).toPrecision(3)} µs = ${(bytes / best.timing.passMs / 1e6).toPrecision(3)} GB/s, the read kernel on the same bytes ${(same.work / same.passMs / 1e6).toPrecision(3)} GB/s (${((100 * (bytes / best.timing.passMs)) / (same.work / same.passMs)).toFixed(0)}% of it)`
          : '';
      const note = `weight copies: ${copies} (cold L2)${blocks}, ${calls} calls a pass${vsRead}`;
      const row = bandwidthRow(ctx.limits, 'gemv-q4', 'y = x·Wᵀ (4-bit GEMV)', shape, best.timing, bytes, { setting: best.setting, note });
      // Every copy wrote into ys: they hold the last copy's product.
      await ctx.opts.onQ4?.({ row, m, n, k, copies, x, weight: weights[copies - 1], y: ys });
      ctx.add(row);
      release(x, ...ys);
    }
    weights.forEach(releaseQ4);
  }
}

function gemmOptions(ctx: SuiteContext): { setting: string; value: GemmShape }[] {
  const shapes: GemmShape[] = ctx.quick
    ? [DEFAULT_GEMM, { rowsPerThread: 8, colsPerThread: 8, stepK: 16 }]
    : ([4, 8] as const).flatMap((r) => ([4, 8] as const).flatMap((c) => ([16, 32] as const).map((s) => ({ rowsPerThread: r, colsPerThread: c, stepK: s }))));
  return shapes.map((g) => ({ setting: `GTM${g.rowsPerThread} GTN${g.colsPerThread} GBK${g.stepK}`, value: g }));
}

const MMA_TILES: MmaTile[] = [
  { rows: 64, cols: 64, threads: 128 },
  { rows: 64, cols: 128, threads: 128 },
  { rows: 128, cols: 64, threads: 128 },
  { rows: 128, cols: 128, threads: 256 },
];

// The K-blocked variant (weights re-rounded to int8 per column and block of K): 32x32 of y per
// subgroup.
const MMA_KB_TILES: MmaTile[] = [
  { rows: 64, cols: 64, threads: 128 },
  { rows: 64, cols: 128, threads: 256 },
  { rows: 128, cols: 64, threads: 256 },
];
const MMA_K_BLOCKS: KBlock[] = [64, 128];

interface MmaSet {
  tiles: { setting: string; value: MatmulQ4Mma }[];
  note: string;
}

function mmaSetting(tile: MmaTile, op: MatmulQ4Mma): string {
  const how = op.kBlock > 32 ? `, K block ${op.kBlock}${op.steps === 'row' ? ', steps by row' : ''}` : op.blocked ? ', 2x2 blocks' : '';
  return `${tile.rows}x${tile.cols}, ${tile.threads} threads${how}`;
}

/** Builds each option that fits this device and checks it on odd shapes against the f64
 * reference (the figures become the rows' note); throws where one misses its bound. */
async function mmaSet(ctx: SuiteContext, what: string, options: { tile: MmaTile; kBlock?: KBlock; blocked?: boolean; limbs?: 1 | 2; steps?: MmaSteps }[], shapes: [number, number, number][], describe: string, inputShapes: [number, number, number][] = []): Promise<MmaSet> {
  const { weights, rows } = ctx.shapes.gemm;
  const maxRows = Math.max(...rows, 300);
  const maxK = Math.max(...weights.flat(), 2048); // the input gradient reads rows of N
  const tiles: MmaSet['tiles'] = [];
  for (const { tile, kBlock, blocked, limbs, steps } of options) {
    try {
      const op = await MatmulQ4Mma.create(ctx.gpu, { maxRows, maxK, tile, blocked, kBlock, limbs, steps });
      tiles.push({ setting: mmaSetting(tile, op), value: op });
    } catch (e) {
      // A tile this device cannot hold, or (K-blocked) no packed int8 WGSL builtins: not measured.
      if (!(e instanceof ShapeError || e instanceof MissingFeatureError)) throw e;
    }
  }
  const checks: MmaAccuracy[] = [];
  for (const { setting, value: op } of tiles) {
    for (const [i, shape] of shapes.entries()) {
      const a = await checkQ4Mma(ctx.gpu, op, shape, 11 + i);
      if (!(a.ofBound <= 1)) throw new Error(`${what} ${setting} ${a.shape}: error ${a.ofBound} times the rounding bound`);
      checks.push(a);
    }
    for (const [i, shape] of inputShapes.entries()) {
      const a = await checkQ4Mma(ctx.gpu, op, shape, 21 + i, true);
      if (!(a.ofBound <= 1)) throw new Error(`${what} ${setting} ${a.shape}: error ${a.ofBound} times the rounding bound`);
      checks.push(a);
    }
  }
  if (!checks.length) return { tiles, note: '' };
  const worst = (f: (a: MmaAccuracy) => number) => Math.max(...checks.map(f)).toExponential(1);
  const note = `${describe}; vs dequantize-then-f64 on Gaussian x with ${OUTLIERS.channels} channels x${OUTLIERS.gain}: max error ${worst((a) => a.relToMax)} of max |y|, ${worst((a) => a.relToMagnitude)} of Σ|x·w|`;
  console.warn(`gemm: ${what}: ${note}; checked ${checks.map((a) => a.shape).join(', ')}`);
  return { tiles, note };
}

/**
 * The int8 tensor-core GEMMs in every tile this device holds: exact on the Q4 weights, and
 * K-blocked (re-rounded weights); null where the device has no int8 subgroup matrices.
 */
async function mmaSetup(ctx: SuiteContext): Promise<{ exact: MmaSet; kBlocked: MmaSet; byRow: MmaSet; oneLimb: MmaSet } | null> {
  const why = mmaUnsupported(ctx.gpu);
  if (why) {
    console.warn(`gemm: no int8 tensor-core rows: ${why}`);
    return null;
  }
  const exactTiles = ctx.quick ? MMA_TILES.slice(0, 1) : MMA_TILES;
  const exact = await mmaSet(
    ctx,
    'int8 tensor cores',
    exactTiles.flatMap((tile) => [true, false].map((blocked) => ({ tile, blocked }))),
    [[77, 200, 320], [300, 515, 2048]],
    'x as two int8 limbs per group of 32',
  );
  const kbTiles = ctx.quick ? MMA_KB_TILES.slice(0, 1) : MMA_KB_TILES;
  const kBlocked = await mmaSet(
    ctx,
    'int8 tensor cores, K-blocked',
    kbTiles.flatMap((tile) => MMA_K_BLOCKS.map((kBlock) => ({ tile, kBlock }))),
    [[45, 96, 768], [300, 515, 2048]],
    'x as two int8 limbs per K block, weights re-rounded to int8 per column and K block (error ≤ 1/32 of the block\'s largest Q4 step); dX = dY·W the same with blocks along N',
    [[45, 256, 192], [77, 2048, 576]],
  );
  // One step per row of x and column of W over the whole of K (products 'int8-row').
  const byRow = await mmaSet(
    ctx,
    'int8 tensor cores, K-blocked, steps by row',
    kbTiles.map((tile) => ({ tile, kBlock: 128 as const, steps: 'row' as const })),
    [[45, 96, 768], [300, 515, 2048]],
    'x as two int8 limbs at one step per row over all of K, weights re-rounded to int8 at one step per column; dX the same with one step per group of K over all of N',
    [[45, 256, 192], [77, 2048, 576]],
  );
  // x in one int8 limb (products 'int8-1limb'), K blocks of 128 and 256.
  const oneLimb = await mmaSet(
    ctx,
    'int8 tensor cores, K-blocked, one limb',
    kbTiles.flatMap((tile) => ([128, 256] as const).map((kBlock) => ({ tile, kBlock, limbs: 1 as const }))),
    [[45, 96, 768], [300, 515, 2048]],
    'x as one int8 limb per K block (a step of 1/127 of its largest |x|), weights re-rounded as in the K-blocked rows; dX the same with blocks along N',
    [[45, 256, 192], [77, 2048, 576]],
  );
  return { exact, kBlocked, byRow, oneLimb };
}

/** Best GEMM tile per weight shape at the smallest M, used again by the log-prob head. */
async function gemm(ctx: SuiteContext): Promise<GemmShape> {
  const { gpu } = ctx;
  const kernels = new Map<string, Promise<MatmulQ4>>();
  const mmFor = (g: GemmShape) => {
    const key = JSON.stringify(g);
    if (!kernels.has(key)) kernels.set(key, MatmulQ4.create(gpu, { gemm: g }));
    return kernels.get(key)!;
  };
  const dense = await Matmul.create(gpu);
  const base = await mmFor(DEFAULT_GEMM);
  const mma = await mmaSetup(ctx);
  let forHead: { g: GemmShape; ms: number } | undefined;
  for (const [n, k] of ctx.shapes.gemm.weights) {
    const setup = gpu.recorder('setup');
    const [w] = randomQ4Blocks(gpu, setup, ctx.fill, n, k, 'w', n);
    const wf = filled(ctx, setup, [n, k], 'w.f32');
    await setup.submit();
    for (const m of ctx.shapes.gemm.rows) {
      const rec = gpu.recorder('setup');
      const x = filled(ctx, rec, [m, k], 'x', 1);
      const dy = filled(ctx, rec, [m, n], 'dy', 1);
      const y = gpu.tensor([m, n], 'f32', 'y');
      const dx = gpu.tensor([m, k], 'f32', 'dx');
      await rec.submit();
      const shape = shapeMNK(m, n, k);
      const flops = 2 * m * n * k;
      const best = await bestOf(ctx, 'gemm', shape, gemmOptions(ctx), async (g, opts) => {
        const mm = await mmFor(g);
        return ctx.measure(/^matmul_q4\.gemm$/, (r) => mm.gemm(r, x, w, y), opts);
      });
      const row = flopRow(ctx.limits, 'gemm-q4', 'y = x·Wᵀ (4-bit GEMM)', shape, best.timing, flops, { setting: best.setting });
      await ctx.opts.onQ4?.({ row, m, n, k, copies: 1, x, weight: [w], y: [y] });
      ctx.add(row);
      if (n === Math.max(...ctx.shapes.gemm.weights.map((s) => s[0])) && m === ctx.shapes.gemm.rows[0]) forHead = { g: best.value, ms: best.timing.ms };
      const tdx = await ctx.measure(/^matmul_q4\.dinput$/, (r) => base.backwardInput(r, dy, w, dx), ctx.full);
      ctx.add(flopRow(ctx.limits, 'gemm-q4-dx', 'dX = dY·W (4-bit)', shape, tdx, flops));
      const tf = await ctx.measure(/^matmul\.gemm/, (r) => dense.linear(r, x, wf, y), ctx.full);
      ctx.add(flopRow(ctx.limits, 'gemm-f32', 'y = x·Wᵀ (f32 GEMM)', shape, tf, flops));
      if (mma) {
        const run = (op: MatmulQ4Mma, opts: MeasureOptions) => ctx.measure(/^matmul_q4_mma\./, (r) => op.gemm(r, x, w, y), opts);
        if (mma.exact.tiles.length) {
          const exact = await bestOf(ctx, 'gemm-mma', shape, mma.exact.tiles, run);
          ctx.add(flopRow(ctx.limits, 'gemm-q4-mma', '4-bit GEMM, int8 tensor cores', shape, exact.timing, flops, { setting: exact.setting, note: mma.exact.note }, 'int8'));
        }
        const kbMax = Math.max(...MMA_K_BLOCKS);
        if (mma.kBlocked.tiles.length && k % kbMax === 0) {
          const kb = await bestOf(ctx, 'gemm-mma-kb', shape, mma.kBlocked.tiles, run);
          ctx.add(flopRow(ctx.limits, 'gemm-q4-mma-kb', '4-bit GEMM, int8 tensor cores, K-blocked (weights re-rounded to int8)', shape, kb.timing, flops, { setting: kb.setting, note: mma.kBlocked.note }, 'int8'));
        }
        const runDx = (op: MatmulQ4Mma, opts: MeasureOptions) => ctx.measure(/^matmul_q4_mma\./, (r) => op.backwardInput(r, dy, w, dx), opts);
        if (mma.kBlocked.tiles.length && n % kbMax === 0 && k % 64 === 0) {
          const kbDx = await bestOf(ctx, 'gemm-mma-kb-dx', shape, mma.kBlocked.tiles, runDx);
          ctx.add(flopRow(ctx.limits, 'gemm-q4-mma-kb-dx', 'dX = dY·W (4-bit), int8 tensor cores, K-blocked (blocks along N)', shape, kbDx.timing, flops, { setting: kbDx.setting, note: mma.kBlocked.note }, 'int8'));
        }
        // A set's forward and dX rows (suites gemm-q4-KEY, gemm-q4-KEY-dx), where N and K are whole K blocks.
        const forwardAndDx = async (set: MmaSet, block: number, key: string, what: string, whatDx: string) => {
          if (!set.tiles.length || n % block !== 0 || k % block !== 0) return;
          for (const [suffix, label, runOne] of [['', what, run], ['-dx', whatDx, runDx]] as const) {
            const best = await bestOf(ctx, `gemm-${key}${suffix}`, shape, set.tiles, runOne);
            ctx.add(flopRow(ctx.limits, `gemm-q4-${key}${suffix}`, label, shape, best.timing, flops, { setting: best.setting, note: set.note }, 'int8'));
          }
        };
        await forwardAndDx(mma.byRow, 128, 'mma-kbr', '4-bit GEMM, int8 tensor cores, K-blocked, steps by row', 'dX = dY·W (4-bit), int8 tensor cores, K-blocked, steps by row');
        await forwardAndDx(mma.oneLimb, 256, 'mma-kb1', '4-bit GEMM, int8 tensor cores, K-blocked, x in one limb', 'dX = dY·W (4-bit), int8 tensor cores, K-blocked, dY in one limb');
      }
      release(x, dy, y, dx);
    }
    releaseQ4([w]);
    release(wf);
  }
  return forHead?.g ?? DEFAULT_GEMM;
}

async function attention(ctx: SuiteContext): Promise<void> {
  const { gpu } = ctx;
  const { heads: hq, kvHeads: hkv, headDim: D } = ctx.shapes.model;
  const T = ctx.shapes.attention.tokens;
  const attn = await Attention.create(gpu, { hq, hkv, headDim: D });
  const scale = 1 / Math.sqrt(D);
  const rec = gpu.recorder('setup');
  const q = filled(ctx, rec, [T, hq * D], 'q', 1);
  const k = filled(ctx, rec, [T, hkv * D], 'k', 1);
  const v = filled(ctx, rec, [T, hkv * D], 'v', 1);
  const dout = filled(ctx, rec, [T, hq * D], 'dout', 1);
  const o = gpu.tensor([T, hq * D], 'f32', 'o');
  const lse = gpu.tensor([T, hq], 'f32', 'lse');
  const rowStats = gpu.tensor(Attention.rowStatsShape(T, hq), 'f32', 'row_stats');
  const dq = gpu.tensor([T, hq * D], 'f32', 'dq');
  const dk = gpu.tensor([T, hkv * D], 'f32', 'dk');
  const dv = gpu.tensor([T, hkv * D], 'f32', 'dv');
  const cu = gpu.upload(new Uint32Array([0, T]), [2], 'u32', 'cu_seqlens');
  await rec.submit();
  const shape = `T${T} Hq${hq} Hkv${hkv} D${D} causal`;
  // Causal: half of the T² score matrix; forward 2 products of 2·D flops per score, backward 5.
  const fwdFlops = 2 * 2 * T * T * D * hq * 0.5;
  const tf = await ctx.measure(/^attention\.fwd_lse$/, (r) => attn.forward(r, { q, k, v, o, lse, cuSeqlens: cu, causal: true, scale }), ctx.full);
  ctx.add(flopRow(ctx.limits, 'attention-fwd', 'flash forward (+lse)', shape, tf, fwdFlops));
  const tb = await ctx.measure(
    /^attention\.bwd_/,
    (r) => attn.backward(r, { q, k, v, o, lse, dout, cuSeqlens: cu, causal: true, scale, rowStats, dq, dk, dv }),
    ctx.full,
  );
  ctx.add(flopRow(ctx.limits, 'attention-bwd', 'FA2 backward (prep, dq, dk/dv)', shape, tb, 2.5 * fwdFlops));
  release(q, k, v, dout, o, lse, rowStats, dq, dk, dv, cu);

  // Decode: one new row per sequence over a cache of `cache` positions, every layer a fresh cache
  // (as in a decode step) so that L2 does not hold it; again over an f16 cache where shader-f16 is
  // offered (EngineConfig.kv_cache; PyTorch's bf16 cache is its like).
  const dtypes: KvDtype[] = gpu.has('shader-f16') ? ['f32', 'f16'] : ['f32'];
  for (const count of ctx.shapes.attention.sequences) for (const dtype of dtypes) await decodeAttention(ctx, attn, count, dtype);
}

/** attention-decode: `count` sequences, one new row each, over a cache of K and V in `dtype`. */
async function decodeAttention(ctx: SuiteContext, attn: Attention, count: number, dtype: KvDtype): Promise<void> {
  const { gpu } = ctx;
  const { heads: hq, kvHeads: hkv, headDim: D } = ctx.shapes.model;
  const scale = 1 / Math.sqrt(D);
  const L = ctx.shapes.attention.cache;
  const kvBytes = 2 * count * (L + 1) * hkv * D * DTYPE_BYTES[dtype];
  const layers = Math.max(1, Math.min(ctx.shapes.model.layers, Math.ceil(ctx.shapes.gemv.coldBytes / kvBytes)));
  const cache = await KvCache.create(gpu, { layers, slots: count, capacity: L + 1, hkv, headDim: D, dtype });
  const setup = gpu.recorder('setup');
  const kNew = filled(ctx, setup, [count * L, hkv * D], 'k_new', 1);
  const vNew = filled(ctx, setup, [count * L, hkv * D], 'v_new', 1);
  for (let l = 0; l < layers; l++) cache.append(setup, l, kNew, vNew, 0, count);
  cache.advance(setup, 0, count, L);
  const qd = filled(ctx, setup, [count, hq * D], 'q', 1);
  const od = gpu.tensor([count, hq * D], 'f32', 'o');
  await setup.submit();
  release(kNew, vNew);
  const auto = Attention.decodeChunks(L + 1);
  // The automatic split first: the one used without a sweep.
  const chunkOptions = [...new Set([auto, 1, Math.max(1, auto >> 1), Math.min(64, 2 * auto)])];
  const ws = gpu.tensor(attn.splitWorkspaceShape(count, Math.max(...chunkOptions)), 'f32', 'split');
  const dshape = `B${count} L${L} Hq${hq} Hkv${hkv} D${D}${dtype === 'f16' ? ' KV f16' : ''}`;
  const best = await bestOf(
    ctx,
    'attention-decode',
    dshape,
    chunkOptions.map((c) => ({ setting: c === 1 ? 'no split' : `${c} key chunks`, value: c })),
    (chunks, opts) =>
      ctx.measure(
        /^attention\.(fwd_cached|fwd_cached_split|split_combine)(_f16)?$/,
        (r) => {
          for (let l = 0; l < layers; l++) {
            attn.forwardCached(r, qd, cache, l, od, { slot0: 0, count, scale, ...(chunks > 1 ? { split: { workspace: ws, chunks } } : {}) });
          }
        },
        { ...opts, calls: layers },
      ),
  );
  const bytes = kvBytes + 2 * count * hq * D * 4;
  ctx.add(bandwidthRow(ctx.limits, 'attention-decode', `decode over the KV cache${dtype === 'f16' ? ' in f16' : ''}`, dshape, best.timing, bytes, { setting: best.setting, note: `layers' caches: ${layers} (cold L2)` }));
  cache.release();
  release(qd, od, ws);
}

async function logprob(ctx: SuiteContext, headTile: GemmShape): Promise<void> {
  const { gpu } = ctx;
  const { tokens: T, chunk } = ctx.shapes.logprob;
  const V = ctx.shapes.model.vocab;
  const H = ctx.shapes.model.hidden;
  const mm = await MatmulQ4.create(gpu, { gemm: headTile });
  const lp = await LogProb.create(gpu, { maxTokens: T, chunk });
  const rec = gpu.recorder('setup');
  const head = new Q4LmHead(mm, randomQ4Blocks(gpu, rec, ctx.fill, V, H, 'lm_head', chunk), V, H);
  const h = filled(ctx, rec, [T, H], 'h', 1);
  const targets = gpu.upload(Uint32Array.from({ length: T }, (_, i) => (i * 7919) % V), [T], 'u32', 'targets');
  const out = { logp: gpu.tensor([T], 'f32', 'logp'), entropy: gpu.tensor([T], 'f32', 'entropy'), saved: gpu.tensor([T, 2], 'f32', 'saved') };
  const gLogp = filled(ctx, rec, [T], 'grad_logp', 1);
  const gEnt = filled(ctx, rec, [T], 'grad_entropy', 0.1);
  const dh = gpu.tensor([T, H], 'f32', 'dh');
  await rec.submit();
  const shape = `T${T} V${V} H${H}`;
  const setting = `4-bit head, chunk ${chunk}, GEMM GTM${headTile.rowsPerThread} GTN${headTile.colsPerThread} GBK${headTile.stepK}`;
  const flops = 2 * T * V * H;
  const tf = await ctx.measure(/^(matmul_q4|logprob)\./, (r) => lp.forward(r, head, h, targets, 1, out), ctx.full);
  ctx.add(flopRow(ctx.limits, 'logprob-fwd', 'log p + entropy (chunked, 4-bit head)', shape, tf, flops, { setting }));
  const tb = await ctx.measure(
    /^(matmul_q4|logprob)\./,
    (r) => {
      r.clear(dh);
      lp.backward(r, head, h, targets, 1, out.saved, gLogp, gEnt, dh);
    },
    ctx.full,
  );
  ctx.add(flopRow(ctx.limits, 'logprob-bwd', 'd(log p, entropy)/dh (recomputes logits)', shape, tb, 2 * flops, { setting }));
  release(h, targets, out.logp, out.entropy, out.saved, gLogp, gEnt, dh);
}

async function elementwise(ctx: SuiteContext): Promise<void> {
  const { gpu } = ctx;
  const T = ctx.shapes.elementwise.tokens;
  const { hidden: H, intermediate: I, heads: hq, kvHeads: hkv, headDim: D } = ctx.shapes.model;
  const [norms, act, rope] = await Promise.all([Norms.create(gpu), Activations.create(gpu), Rope.create(gpu, mropeLayout(5e6, D, mropeSection(D)))]);
  const rec = gpu.recorder('setup');
  const x = filled(ctx, rec, [T, H], 'x', 1);
  const w = filled(ctx, rec, [H], 'w', 1);
  const dy = filled(ctx, rec, [T, H], 'dy', 1);
  const y = gpu.tensor([T, H], 'f32', 'y');
  const dx = gpu.tensor([T, H], 'f32', 'dx');
  const rstd = gpu.tensor([T], 'f32', 'rstd');
  const gate = filled(ctx, rec, [T, I], 'gate', 1);
  const up = filled(ctx, rec, [T, I], 'up', 1);
  const dh = filled(ctx, rec, [T, I], 'dh', 1);
  const hOut = gpu.tensor([T, I], 'f32', 'h');
  const dgate = gpu.tensor([T, I], 'f32', 'dgate');
  const dup = gpu.tensor([T, I], 'f32', 'dup');
  const q = filled(ctx, rec, [T, hq * D], 'q', 1);
  const k = filled(ctx, rec, [T, hkv * D], 'k', 1);
  const positions = gpu.upload(Uint32Array.from({ length: 3 * T }, (_, i) => i % T), [3, T], 'u32', 'positions');
  const cs = gpu.tensor([T, D / 2, 2], 'f32', 'rope_table');
  rope.table(rec, positions, cs);
  await rec.submit();
  const f = 4; // bytes per f32
  const tn = `T${T} H${H}`;
  ctx.add(bandwidthRow(ctx.limits, 'rmsnorm-fwd', 'RMSNorm (saves rstd)', tn, await ctx.measure(/^norms\.rmsnorm_fwd(_vec4)?$/, (r) => norms.rmsnorm(r, x, w, y, 1e-6, rstd), ctx.full), f * (2 * T * H + H + T)));
  ctx.add(bandwidthRow(ctx.limits, 'rmsnorm-bwd', 'RMSNorm dx', tn, await ctx.measure(/^norms\.rmsnorm_bwd$/, (r) => norms.rmsnormBackward(r, dy, x, w, rstd, dx), ctx.full), f * (3 * T * H + H + T)));
  const ti = `T${T} I${I}`;
  ctx.add(bandwidthRow(ctx.limits, 'swiglu-fwd', 'silu(gate)·up', ti, await ctx.measure(/^activations\.swiglu_fwd$/, (r) => act.swiglu(r, gate, up, hOut), ctx.full), f * 3 * T * I));
  ctx.add(bandwidthRow(ctx.limits, 'swiglu-bwd', 'dgate, dup', ti, await ctx.measure(/^activations\.swiglu_bwd$/, (r) => act.swigluBackward(r, gate, up, dh, dgate, dup), ctx.full), f * 5 * T * I));
  const tr = `T${T} Hq${hq} Hkv${hkv} D${D}`;
  const tRope = await ctx.measure(
    /^rope\.rope_apply$/,
    (r) => {
      rope.apply(r, cs, q, hq);
      rope.apply(r, cs, k, hkv);
    },
    ctx.full,
  );
  ctx.add(bandwidthRow(ctx.limits, 'rope', 'M-RoPE on q and k (in place)', tr, tRope, f * (2 * T * (hq + hkv) * D + 2 * T * D)));
  rope.release();
  release(x, w, dy, y, dx, rstd, gate, up, dh, hOut, dgate, dup, q, k, positions, cs);
}

/** Qwen3-VL's mrope_section [24, 20, 20] for head_dim 128, scaled for other head dims. */
function mropeSection(D: number): number[] {
  const half = D / 2;
  const hw = Math.floor((half * 20) / 64);
  return [half - 2 * hw, hw, hw];
}

/** LoRA A [r, in] and B [out, r] on q, k, v, o, gate, up, down of every layer. */
function loraShapes(ctx: SuiteContext): number[][] {
  const { hidden: H, intermediate: I, heads, kvHeads, headDim: D, layers, loraRank: r } = ctx.shapes.model;
  const modules: [number, number][] = [
    [H, heads * D],
    [H, kvHeads * D],
    [H, kvHeads * D],
    [heads * D, H],
    [H, I],
    [H, I],
    [I, H],
  ];
  const per = modules.flatMap(([inF, outF]) => [
    [r, inF],
    [outF, r],
  ]);
  return Array.from({ length: layers }, () => per).flat();
}

async function adamw(ctx: SuiteContext): Promise<void> {
  const { gpu } = ctx;
  const shapes = loraShapes(ctx);
  // The adapters as the session allocates them (createLoraParamSet): views into one flat buffer each for params and grads.
  const lora = createLoraParamSet(
    gpu,
    shapes.filter((_, i) => i % 2 === 0).map(([r, inF], i) => ({ name: `bench.${i}`, r, in: inF, out: shapes[2 * i + 1][0], alpha: 2 * r })),
  );
  const params: AdamWParam[] = lora.flatMap((p) => [
    { param: p.A, grad: p.dA },
    { param: p.B, grad: p.dB },
  ]);
  const rec = gpu.recorder('setup');
  for (const p of params) {
    ctx.fill.fill(rec, p.param, 'uniform', 0.05);
    ctx.fill.fill(rec, p.grad, 'uniform', 1e-3);
  }
  await rec.submit();
  const opt = await AdamW.create(gpu, params, { weightDecay: 0.01, maxGradNorm: 1 });
  const count = shapes.reduce((s, sh) => s + sh[0] * sh[1], 0);
  let step = 0;
  const t = await ctx.measure(/^adamw\./, (r) => opt.step(r, { lr: 1e-5, step: ++step }), ctx.full);
  // Grad-norm pass reads g; the step reads p, g, m, v and writes p, m, v.
  ctx.add(bandwidthRow(ctx.limits, 'adamw', 'clip + AdamW', `${count} params in ${shapes.length} tensors`, t, 32 * count, { note: `LoRA r=${ctx.shapes.model.loraRank}, q/k/v/o/gate/up/down × ${ctx.shapes.model.layers} layers` }));
  lora.forEach(releaseLoraParams);
  opt.release();
}


/**
 * Run the read bandwidth and then `opts.suites` on `gpu`. A cancelled run rejects at its next
 * measurement; the buffers of the suite it was in are left to the garbage collector (use a device
 * of its own, as the engine worker does).
 */
export async function runSuites(gpu: Gpu, opts: RunOptions): Promise<RunResult> {
  const quick = opts.preset === 'quick';
  const maxReps = opts.maxReps ?? (quick ? 3 : 30);
  const rows: Row[] = [];
  const ctx: SuiteContext = {
    gpu,
    fill: await Filler.create(gpu),
    shapes: withGemv(shapesFor(opts.preset, opts.oneWeight ?? false), opts.gemv),
    quick,
    limits: { readGBs: NaN, fp32Tflops: opts.fp32Tflops, int8Tops: opts.int8Tops },
    full: { maxReps, minReps: Math.min(5, maxReps) },
    sweep: { maxReps: Math.min(10, maxReps), minReps: Math.min(3, maxReps), budgetMs: 50, gpuOnly: true },
    rows,
    sweeps: {},
    opts,
    add(row) {
      rows.push(row);
      opts.onRow?.(row);
    },
    measure(kernel, record, m) {
      opts.signal?.throwIfAborted();
      return measure(gpu, kernel, record, m);
    },
  };
  const chosen = new Set<Suite>(opts.suites ?? SUITES);
  const step = async (name: Suite | 'bandwidth', f: () => Promise<unknown>) => {
    const t = performance.now();
    await f();
    gpu.pool.trim();
    opts.onSuiteDone?.(name, (performance.now() - t) / 1000, { readGBs: ctx.limits.readGBs, rows, sweeps: ctx.sweeps });
  };
  await step('bandwidth', () => readBandwidth(ctx));
  if (chosen.has('gemv')) await step('gemv', () => gemv(ctx));
  let headTile = DEFAULT_GEMM;
  if (chosen.has('gemm')) await step('gemm', async () => (headTile = await gemm(ctx)));
  if (chosen.has('attention')) await step('attention', () => attention(ctx));
  if (chosen.has('logprob')) await step('logprob', () => logprob(ctx, headTile));
  if (chosen.has('elementwise')) await step('elementwise', () => elementwise(ctx));
  if (chosen.has('adamw')) await step('adamw', () => adamw(ctx));
  return { readGBs: ctx.limits.readGBs, rows, sweeps: ctx.sweeps };
}
