// GPU time from timestamp queries. While a profiler is attached to a Gpu, in 'dispatch' mode every
// dispatch runs in its own compute pass with begin/end timestamps and totals accumulate per kernel
// name; in 'pass' mode dispatches share passes as usual (Dawn's barriers between dependent ones),
// each pass is stamped and counted under the name 'pass': the time of a stream of kernels without
// the cost of a pass per kernel. A 'pass' profiler counts the dispatches of each kernel, and can
// omit some kernels': the stream's time with them, less its time without them, is what they cost
// in stream (their share of a decode step, which a pass per dispatch overstates by several µs a
// dispatch); or run them as one workgroup each (their code runs, their data barely moves); or twice
// in a row (the second time with its code, bindings and inputs warm: what a first run pays extra).
import type { Kernel } from './kernel';

/** How a 'pass' profiler alters the stream it times (Gpu.startProfiling). */
export interface StreamAlterations {
  /** Kernels whose dispatches are left out. */
  omit?: ReadonlySet<Kernel>;
  /** Kernels dispatched as one workgroup. */
  shrink?: ReadonlySet<Kernel>;
  /** Kernels dispatched twice in a row, the same bindings and grid. */
  twice?: ReadonlySet<Kernel>;
}

export interface KernelTiming {
  name: string;
  calls: number;
  totalMs: number;
  meanMs: number;
}

export class Profiler {
  readonly querySet: GPUQuerySet;
  readonly capacity: number;
  private readonly totals = new Map<string, { calls: number; ns: number }>();
  /** The first begin and last end stamped since the last reset: the GPU's span, idle time included. */
  private first: bigint | null = null;
  private last: bigint | null = null;
  private readonly resolveBuf: GPUBuffer;
  private readonly readBufs: GPUBuffer[] = [];
  /** Kernels whose dispatches are not recorded while this profiler is attached ('pass' mode). */
  omit: ReadonlySet<Kernel> = new Set();
  /** Kernels dispatched as one workgroup while this profiler is attached ('pass' mode). */
  shrink: ReadonlySet<Kernel> = new Set();
  /** Kernels dispatched twice in a row while this profiler is attached ('pass' mode). */
  twice: ReadonlySet<Kernel> = new Set();
  /** 'pass' mode: the dispatches recorded of each kernel, and the grid of its first. */
  readonly dispatched = new Map<Kernel, { calls: number; grid: [number, number, number] }>();

  constructor(
    private readonly device: GPUDevice,
    capacity = 4096,
    readonly mode: 'dispatch' | 'pass' = 'dispatch',
  ) {
    this.capacity = capacity;
    this.querySet = device.createQuerySet({ type: 'timestamp', count: capacity, label: 'profiler' });
    this.resolveBuf = device.createBuffer({
      size: capacity * 8,
      usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
      label: 'profiler-resolve',
    });
  }

  /** First query index of a submit: each submit resolves its own queries before the next one runs. */
  beginSubmit(): number {
    return 0;
  }

  resolve(encoder: GPUCommandEncoder, first: number, count: number): void {
    if (count === 0) return;
    encoder.resolveQuerySet(this.querySet, first, count, this.resolveBuf, first * 8);
    const read = this.readBufs.pop() ?? this.device.createBuffer({
      size: this.capacity * 8,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
      label: 'profiler-read',
    });
    encoder.copyBufferToBuffer(this.resolveBuf, first * 8, read, first * 8, count * 8);
    this.inflight.push(read);
  }

  private inflight: GPUBuffer[] = [];

  async collect(first: number, names: string[]): Promise<void> {
    const read = this.inflight.shift();
    if (!read || names.length === 0) return;
    await read.mapAsync(GPUMapMode.READ, first * 8, names.length * 16);
    const stamps = new BigUint64Array(read.getMappedRange(first * 8, names.length * 16));
    names.forEach((name, i) => {
      const [b, e] = [stamps[2 * i], stamps[2 * i + 1]];
      if (this.first === null || b < this.first) this.first = b;
      if (this.last === null || e > this.last) this.last = e;
      const ns = Number(e - b);
      const t = this.totals.get(name) ?? { calls: 0, ns: 0 };
      t.calls++;
      t.ns += Math.max(0, ns);
      this.totals.set(name, t);
    });
    read.unmap();
    this.readBufs.push(read);
  }

  report(): KernelTiming[] {
    return [...this.totals.entries()]
      .map(([name, t]) => ({ name, calls: t.calls, totalMs: t.ns / 1e6, meanMs: t.ns / 1e6 / t.calls }))
      .sort((a, b) => b.totalMs - a.totalMs);
  }

  /** Milliseconds from the first stamped begin to the last stamped end: with report()'s busy time,
   * how long the GPU sat idle between the stamped passes (0 before any stamp). */
  spanMs(): number {
    return this.first === null || this.last === null ? 0 : Number(this.last - this.first) / 1e6;
  }

  reset(): void {
    this.first = this.last = null;
    this.totals.clear();
    this.dispatched.clear();
  }

  destroy(): void {
    this.querySet.destroy();
    this.resolveBuf.destroy();
    for (const b of this.readBufs) b.destroy();
  }
}
