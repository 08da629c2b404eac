// Timing and rows of the kernel benchmarks, shared by the Node bench (bench/kernels.ts) and the
// app's Benchmark page. Two clocks per measurement:
//   ms      GPU time from timestamp queries: while profiling, every dispatch runs in its own
//           compute pass with begin/end stamps; the stamps of the dispatches matching the kernel
//           pattern are summed per repetition, and the median repetition is kept. Launch gaps
//           and barriers between dispatches are not counted.
//   passMs  GPU time from timestamp queries around whole passes: the op's calls recorded back to
//           back as the engine records them (one pass, Dawn's barriers between dependent
//           dispatches), without a pass per dispatch: what a kernel costs inside a stream of work,
//           such as a decode step, launch and barrier included, the CPU's encoding excluded.
//   wallMs  CPU clock from submit to completion of `batch` repetitions recorded back to back in
//           one command buffer (one compute pass, Dawn's barriers), divided by the repetitions:
//           what a caller actually waits, gaps and Dawn's encoding at submit included.
// Both are per call of the op: a record function that issues the op `calls` times (several
// weight copies, so that L2 does not hold the weight) divides by it. A device without
// timestamp-query gets the batched wall clock in both fields, and its rows say so (Row.clock):
// the Benchmark page runs so, because Chrome rounds timestamps to 100 µs for web pages.
import type { Gpu, Recorder } from '../gpu';

export type Unit = 'GB/s' | 'TFLOP/s';

export interface Row {
  /** suite|shape: the key that pairs our row with PyTorch's rows of the same work. */
  key: string;
  suite: string;
  kernel: string;
  shape: string;
  ms: number;
  wallMs: number;
  /** GPU time per call inside one pass of back-to-back calls (timestamp-query devices only). */
  passMs?: number;
  /** Where `ms` came from: timestamp queries, or the wall clock where the device has none. */
  clock?: 'wall';
  /** Achieved rate in `unit`, from ms and the bytes or flops of the op (see BENCHMARKS.md). */
  rate: number;
  unit: Unit;
  /** Bytes or flops of one call, from which `rate` is computed (peers' rates use the same count). */
  work: number;
  /** Fraction of `limit` reached. */
  ofLimit?: number;
  /** 'read' (the plain read kernel's bandwidth of this run) or 'fp32 peak' (the card's datasheet). */
  limit?: string;
  /** The kernel option chosen (the best of those tried), when the op has options. */
  setting?: string;
  note?: string;
  /** Another implementation of the same op on the same inputs (the page's onnxruntime-web). */
  peer?: PeerResult;
}

export interface PeerResult {
  name: string;
  /** Per call; `clock` says how it was measured. */
  ms: number;
  clock: string;
  /** In the row's unit, from the row's `work`. */
  rate: number;
  /** max |peer − ours| / max |ours| over the output. */
  maxRelDiff: number;
  /** Why the peer could not run this row (then the figures are NaN). */
  error?: string;
}

export interface Timing {
  ms: number;
  wallMs: number;
  passMs?: number;
  clock?: 'wall';
}

export interface MeasureOptions {
  /** Most profiled repetitions. */
  maxReps: number;
  /** Fewest profiled repetitions. */
  minReps?: number;
  /** GPU time to aim at over the repetitions, ms (more repetitions for fast ops). */
  budgetMs?: number;
  /** Op calls one `record` issues; times are divided by it. */
  calls?: number;
  /** Skip the wall-clock measurement (used in option sweeps, whose winners are remeasured). */
  gpuOnly?: boolean;
  /** The untimed back-to-back work first, ms: default WARM_MS, or SWEEP_WARM_MS with gpuOnly. */
  warmMs?: number;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function profiledOnce(gpu: Gpu, kernel: RegExp, record: (rec: Recorder) => void, mode: 'dispatch' | 'pass' = 'dispatch'): Promise<number> {
  const prof = gpu.startProfiling(mode);
  try {
    const rec = gpu.recorder('bench');
    record(rec);
    await rec.submit();
    await gpu.sync();
  } finally {
    gpu.stopProfiling();
  }
  if (mode === 'pass') return prof.report().reduce((s, r) => s + r.totalMs, 0);
  const matched = prof.report().filter((r) => kernel.test(r.name));
  if (matched.length === 0) throw new Error(`no dispatch matched ${kernel} (ran: ${prof.report().map((r) => r.name).join(', ')})`);
  return matched.reduce((s, r) => s + r.totalMs, 0);
}

/** The back-to-back GPU work (one batch of at least this long) each measurement runs untimed
 * first; an option sweep's tries (gpuOnly, their winner measured again in full) take the short one. */
export const WARM_MS = 100;
const SWEEP_WARM_MS = 25;

async function wallOnce(gpu: Gpu, record: (rec: Recorder) => void, times: number): Promise<number> {
  const rec = gpu.recorder('bench-wall');
  for (let b = 0; b < times; b++) record(rec);
  const t0 = performance.now();
  await rec.submit();
  await gpu.sync();
  return performance.now() - t0;
}

/** Per-call GPU and wall times of the op that `record` records, after a warm-up. */
export async function measure(gpu: Gpu, kernel: RegExp, record: (rec: Recorder) => void, opts: MeasureOptions): Promise<Timing> {
  const calls = opts.calls ?? 1;
  for (let i = 0; i < 2; i++) {
    const rec = gpu.recorder('warmup');
    record(rec);
    await rec.submit();
  }
  await gpu.sync();
  // Then the op back to back until one batch lasts WARM_MS: a GPU left idle (through the compiles
  // before a try, or between suites) runs at low clocks until a sustained load raises them. With
  // 25 ms, the H100's attention forward, measured right after a start, read 8.8 ms on the
  // per-dispatch clock and 1.6 in stream (the idle clock is 345 MHz, the top 1980: 5.7x).
  const warm = opts.warmMs ?? (opts.gpuOnly ? SWEEP_WARM_MS : WARM_MS);
  for (let batch = 4; batch <= 4096 && (await wallOnce(gpu, record, batch)) < warm; batch *= 4);
  // About 20 ms of work per submit, so that the submit's own cost (tens of µs) stays small.
  const batchFor = (ms: number) => Math.max(1, Math.min(50, Math.ceil(20 / Math.max(ms * calls, 1e-3))));
  const batched = async (batch: number, times: number) => {
    const walls: number[] = [];
    for (let i = 0; i < times; i++) walls.push((await wallOnce(gpu, record, batch)) / (batch * calls));
    return median(walls);
  };
  if (!gpu.has('timestamp-query')) {
    // Batched wall clock only; a sweep's try takes one batch, a full measurement three.
    const ms = await batched(batchFor((await wallOnce(gpu, record, 1)) / calls), opts.gpuOnly ? 1 : 3);
    return { ms, wallMs: ms, clock: 'wall' };
  }
  const first = await profiledOnce(gpu, kernel, record);
  const budget = opts.budgetMs ?? 200;
  const reps = Math.max(opts.minReps ?? 3, Math.min(opts.maxReps, Math.ceil(budget / Math.max(first, 1e-3))));
  const times = [first];
  for (let i = 1; i < reps; i++) times.push(await profiledOnce(gpu, kernel, record));
  const ms = median(times) / calls;
  const passes: number[] = [];
  for (let i = 0; i < Math.min(reps, 9); i++) passes.push(await profiledOnce(gpu, kernel, record, 'pass'));
  const passMs = median(passes) / calls;
  if (opts.gpuOnly) return { ms, passMs, wallMs: NaN };
  return { ms, passMs, wallMs: await batched(batchFor(ms), 3) };
}

/** The limits a run's rows are measured against. */
export interface Limits {
  /** The plain read kernel's bandwidth in this run, GB/s. */
  readGBs: number;
  /** The card's fp32 datasheet peak, if known. */
  fp32Tflops?: number;
  /** The card's int8 tensor-core datasheet peak (TOPS), if known: the limit of the subgroup-matrix GEMMs. */
  int8Tops?: number;
}

/** A row of a memory-bound op: GB/s from `bytes` per call, as a fraction of the read bandwidth. */
export function bandwidthRow(limits: Limits, suite: string, kernel: string, shape: string, t: Timing, bytes: number, extra: Partial<Row> = {}): Row {
  const rate = bytes / t.ms / 1e6;
  return { key: `${suite}|${shape}`, suite, kernel, shape, ...t, rate, unit: 'GB/s', work: bytes, ofLimit: rate / limits.readGBs, limit: 'read', ...extra };
}

/** A row of a compute-bound op: TFLOP/s from `flops` per call, as a fraction of the fp32 peak where known. */
export function flopRow(limits: Limits, suite: string, kernel: string, shape: string, t: Timing, flops: number, extra: Partial<Row> = {}, units: 'fp32' | 'int8' = 'fp32'): Row {
  const rate = flops / t.ms / 1e9;
  const peak = units === 'fp32' ? limits.fp32Tflops : limits.int8Tops;
  const limit = units === 'fp32' ? 'fp32 peak' : 'int8 tensor peak';
  return { key: `${suite}|${shape}`, suite, kernel, shape, ...t, rate, unit: 'TFLOP/s', work: flops, ...(peak ? { ofLimit: rate / peak, limit } : {}), ...extra };
}

/** The rate of `work` (bytes or flops, as `unit` counts them) done in `ms`. */
export function rateOf(work: number, unit: Unit, ms: number): number {
  return unit === 'GB/s' ? work / ms / 1e6 : work / ms / 1e9;
}

export const fmtNum = (v: number, digits = 3): string => (Number.isFinite(v) ? v.toPrecision(digits) : '—');
export const fmtPct = (f: number | undefined): string => (f === undefined || !Number.isFinite(f) ? '' : `${(100 * f).toFixed(0)}%`);
export const fmtRate = (r: Pick<Row, 'rate' | 'unit'>): string => `${fmtNum(r.rate)} ${r.unit}`;
export const fmtLimit = (r: Row): string => (r.ofLimit === undefined ? '' : `${fmtPct(r.ofLimit)} of ${r.limit}`);

/** The rows as a Markdown table, one line per row (the Node bench prints it). */
export function rowsMarkdown(rows: Row[]): string[] {
  const lines = ['| suite | kernel | shape | GPU ms | in-stream ms | wall ms | rate | of limit | setting |', '|---|---|---|---|---|---|---|---|---|'];
  for (const r of rows) lines.push(`| ${[r.suite, r.kernel, r.shape, r.ms.toPrecision(3), r.passMs?.toPrecision(3) ?? '—', r.wallMs.toPrecision(3), fmtRate(r), fmtLimit(r), r.setting ?? ''].join(' | ')} |`);
  return lines;
}
