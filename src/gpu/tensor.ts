// Typed tensors over GPUBuffers and the pool that backs them.
//
// A Tensor is a view: (buffer, byte offset, shape, dtype). Buffers come from a BufferPool that
// rounds sizes up to size classes and recycles released buffers, so steady-state loops (decode,
// training steps) create no buffers.

// bf16 is a checkpoint's own halves, kept as read (bfloat16 has no WGSL type: kernels widen it by a shift).
export type DType = 'f32' | 'f16' | 'bf16' | 'u32' | 'i32' | 'u8';

export const DTYPE_BYTES: Record<DType, number> = { f32: 4, f16: 2, bf16: 2, u32: 4, i32: 4, u8: 1 };

/** Usage of every pooled tensor buffer (a function: in Node the GPU globals appear only once Dawn loads). */
export function storageUsage(): number {
  return GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
}

export function numelOf(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) throw new Error(`bad dimension ${d} in shape [${shape.join(', ')}]`);
    n *= d;
  }
  return n;
}

export class Tensor {
  readonly numel: number;
  constructor(
    readonly buffer: GPUBuffer,
    readonly shape: readonly number[],
    readonly dtype: DType,
    readonly label: string,
    readonly byteOffset = 0,
    private readonly onRelease?: (t: Tensor) => void,
  ) {
    this.numel = numelOf(shape);
  }

  /** This view's range id in the BindingCache `rangeOwner` (BindingCache.rangeId), kept on first bind: a tensor never changes its bytes. */
  rangeId = 0;
  rangeOwner: object | null = null;

  get byteSize(): number {
    return this.numel * DTYPE_BYTES[this.dtype];
  }

  /** The binding resource for this view (size rounded up to 4 bytes, as WebGPU requires). */
  binding(): GPUBufferBinding {
    return { buffer: this.buffer, offset: this.byteOffset, size: Math.max(4, Math.ceil(this.byteSize / 4) * 4) };
  }

  /** A view of the same bytes with another shape (same number of elements). */
  reshape(shape: readonly number[]): Tensor {
    if (numelOf(shape) !== this.numel) {
      throw new Error(`reshape of '${this.label}' [${this.shape.join(', ')}] to [${shape.join(', ')}]: element counts differ`);
    }
    return new Tensor(this.buffer, shape, this.dtype, this.label, this.byteOffset);
  }

  /** Return the buffer to its pool. Views made by reshape share the buffer and must not be released. */
  release(): void {
    this.onRelease?.(this);
  }
}

/** Size classes: powers of two below 1 MiB, then steps of 1/8 of the power of two (≤ 12.5% waste). */
export function sizeClass(bytes: number): number {
  const b = Math.max(256, Math.ceil(bytes / 4) * 4);
  if (b <= 1 << 20) return 2 ** Math.ceil(Math.log2(b));
  const p = 2 ** Math.floor(Math.log2(b));
  const step = p / 8;
  return Math.ceil(b / step) * step;
}

export interface PoolStats {
  /** Bytes in buffers currently handed out. */
  inUse: number;
  /** Bytes in buffers kept for reuse. */
  cached: number;
  /** Highest inUse + cached seen. */
  peak: number;
  /** Number of createBuffer calls made so far (tests check that hot loops add none). */
  created: number;
}

export class BufferPool {
  private free = new Map<number, GPUBuffer[]>();
  private readonly sizeOf = new WeakMap<GPUBuffer, number>();
  /** Each buffer's creation number: enterPhase orders the free lists by it. */
  private readonly serial = new WeakMap<GPUBuffer, number>();
  /** Buffers a live Tape binds, with how many tapes bind each: not released while held. */
  private readonly held = new Map<GPUBuffer, number>();
  /** Buffers handed out, by size class. */
  private readonly inUseByClass = new Map<number, number>();
  /** The most buffers of each class in use at once since the current phase began (enterPhase). */
  private peakByClass = new Map<number, number>();
  private phase: string | null = null;
  /** Each phase's peakByClass the last time it ran. */
  private readonly demands = new Map<string, ReadonlyMap<number, number>>();
  readonly stats: PoolStats = { inUse: 0, cached: 0, peak: 0, created: 0 };

  constructor(
    private readonly create: (bytes: number, label: string) => GPUBuffer,
    /** The largest buffer the device allows: a size class above it is cut back to it, so that a
     * tensor that fits is never refused for its rounding (limits such as 2^31 - 1). */
    private readonly maxBytes = Infinity,
  ) {}

  acquire(bytes: number, label: string): GPUBuffer {
    const cls = Math.max(Math.ceil(bytes / 4) * 4, Math.min(sizeClass(bytes), Math.floor(this.maxBytes / 4) * 4));
    const list = this.free.get(cls);
    let buf = list?.pop();
    if (buf) {
      this.stats.cached -= cls;
      buf.label = label;
    } else {
      buf = this.create(cls, label);
      this.sizeOf.set(buf, cls);
      this.serial.set(buf, this.stats.created++);
    }
    this.stats.inUse += cls;
    this.stats.peak = Math.max(this.stats.peak, this.stats.inUse + this.stats.cached);
    const n = (this.inUseByClass.get(cls) ?? 0) + 1;
    this.inUseByClass.set(cls, n);
    if (n > (this.peakByClass.get(cls) ?? 0)) this.peakByClass.set(cls, n);
    return buf;
  }

  release(buf: GPUBuffer): void {
    const cls = this.sizeOf.get(buf);
    if (cls === undefined) throw new Error(`buffer '${buf.label}' does not belong to this pool`);
    if (this.held.has(buf)) throw new Error(`buffer '${buf.label}' is bound by a recorded tape: release the tape first`);
    this.stats.inUse -= cls;
    this.stats.cached += cls;
    this.inUseByClass.set(cls, this.inUseByClass.get(cls)! - 1);
    let list = this.free.get(cls);
    if (!list) this.free.set(cls, (list = []));
    list.push(buf);
  }

  /** Keep `buf` from being released (a Tape binds it); one unhold per hold. */
  hold(buf: GPUBuffer): void {
    this.held.set(buf, (this.held.get(buf) ?? 0) + 1);
  }

  unhold(buf: GPUBuffer): void {
    const n = this.held.get(buf);
    if (n === undefined) return;
    if (n > 1) this.held.set(buf, n - 1);
    else this.held.delete(buf);
  }

  /** Destroy the cached buffers: every one (memory pressure, or switching models), or those beyond
   * `keep`, the number of buffers of each size class to have in use and cached together. */
  trim(keep?: ReadonlyMap<number, number>): void {
    for (const [cls, list] of this.free) {
      const room = Math.max(0, (keep?.get(cls) ?? 0) - (this.inUseByClass.get(cls) ?? 0));
      const gone = list.splice(0, Math.max(0, list.length - room)); // the last ones are popped first
      for (const b of gone) b.destroy();
      this.stats.cached -= gone.length * cls;
      if (list.length === 0) this.free.delete(cls);
    }
  }

  /**
   * Each free list in creation order, newest first (trim destroys from the front, acquire pops the
   * oldest from the back): work that makes its tensors in the same order as last time gets the same
   * buffers, and finds the bind groups it made then (BindingCache). enterPhase does it; a model's
   * top-level calls outside phases (a generation, an image's features) do it too.
   */
  reorder(): void {
    for (const list of this.free.values()) list.sort((a, b) => this.serial.get(b)! - this.serial.get(a)!);
  }

  /**
   * Start a phase of work that alternates with others (generating, then training on what was
   * generated), keeping cached what the phases had in use the last time each ran and destroying the
   * rest (the leftovers of one-off work, or of sizes no longer asked for). `keep`: 'all' keeps what
   * any phase used (a phase that comes back finds its buffers, and the bind groups made on them;
   * the peak is about the phases' sum), 'own' only what `name` used (the peak stays the larger
   * phase's; the others' buffers are made again each time). A phase never run before counts as
   * having used nothing. The cached buffers are then handed out oldest first: a phase that makes
   * its tensors in the same order as last time gets the same buffers, so the bind groups it made
   * then are found again (BindingCache) and none are made, nor dropped for the garbage collector.
   */
  enterPhase(name: string, keep: 'all' | 'own'): void {
    if (this.phase !== null) this.demands.set(this.phase, this.peakByClass);
    const want = new Map<number, number>();
    for (const [phase, demand] of this.demands) {
      if (keep === 'own' && phase !== name) continue;
      for (const [cls, n] of demand) want.set(cls, Math.max(want.get(cls) ?? 0, n));
    }
    this.reorder();
    this.trim(want);
    this.phase = name;
    this.peakByClass = new Map(this.inUseByClass);
  }
}
