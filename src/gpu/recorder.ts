// Records many dispatches into one command encoder and submits them together.
//
// Bind groups and uniform blocks come from the Gpu's BindingCache (bindingCache.ts): a dispatch
// seen before (same kernel, buffers and uniform values) records no new GPU object. Errors raised by
// a submit are attributed to the kernels it contained. A stretch recorded the same way again and
// again (a decode step) can be captured once and replayed (tape.ts).
import type { Gpu } from './runtime';
import type { Kernel } from './kernel';
import type { Profiler } from './profiler';
import { BindingCache } from './bindingCache';
import { Tape } from './tape';
import { Tensor } from './tensor';

export type BindingResource = Tensor | GPUBufferBinding;
export type Bindings = Record<string, BindingResource>;
export type Workgroups = number | readonly [number, number?, number?];

/** Uniform values of a kernel dispatched without any. */
const NO_UNIFORMS: Record<string, number> = {};

export class Recorder {
  private encoder: GPUCommandEncoder | null = null;
  private pass: GPUComputePassEncoder | null = null;
  /** The pipeline last set on `pass` (a dispatch of the same kernel sets none). */
  private pipeline: GPUComputePipeline | null = null;
  private kernels = new Set<string>();
  private pending: Promise<void>[] = [];
  private timings: { names: string[]; query: number } | null = null;
  /** The current dispatch's bind-group key, one number per binding (BindingCache.key). */
  private readonly keys: number[] = [];
  private readonly maxGrid: number;
  /** The tape being captured (capture), if any. */
  private tape: Tape | null = null;

  /** Whether a tape is being captured: scratch released as it is recorded (a split GEMM's
   * partials) cannot be used then, as the tape holds every buffer it binds. */
  get capturing(): boolean {
    return this.tape !== null;
  }

  constructor(
    private readonly gpu: Gpu,
    readonly label = 'recorder',
  ) {
    this.maxGrid = gpu.device.limits.maxComputeWorkgroupsPerDimension;
  }

  private ensureEncoder(): GPUCommandEncoder {
    if (!this.encoder) this.encoder = this.gpu.device.createCommandEncoder({ label: this.label });
    return this.encoder;
  }

  private endPass(): void {
    this.pass?.end();
    this.pass = null;
    this.pipeline = null;
  }

  /**
   * Record one dispatch. `bindings` names the WGSL variables; `uniforms` fills the params struct.
   * Decode records hundreds a step, so a dispatch seen before allocates nothing here.
   */
  dispatch(kernel: Kernel, bindings: Bindings, workgroups: Workgroups, uniforms?: Record<string, number>): this {
    const cache = this.gpu.bindingCache;
    const keys = this.keys;
    let n = 0;
    // The uniform slot first: a full store starts the bind-group tables over.
    const slot = kernel.uniformVar ? cache.uniform(kernel, uniforms ?? NO_UNIFORMS) : -1;
    for (const name in bindings) {
      const binding = kernel.bindings.get(name);
      if (binding === undefined) {
        throw new Error(`${kernel.name}: no binding named '${name}' (has ${[...kernel.bindings.keys()].join(', ')})`);
      }
      keys[n++] = BindingCache.key(binding, rangeOf(cache, bindings[name]));
    }
    // Uniform slots key as negative numbers, apart from the ranges.
    if (slot >= 0 || n === 0) keys[n++] = -1 - Math.max(slot, 0);
    let x = workgroups as number;
    let y = 1;
    let z = 1;
    if (typeof workgroups !== 'number') {
      x = workgroups[0];
      y = workgroups[1] ?? 1;
      z = workgroups[2] ?? 1;
    }
    const max = this.maxGrid;
    if (x > max || y > max || z > max) throw new Error(`${kernel.name}: grid ${x}x${y}x${z} exceeds ${max} per dimension`);
    if (x === 0 || y === 0 || z === 0) return this;
    const group = cache.lookup(kernel, keys, n) ?? cache.create(kernel, keys, n, entriesOf(kernel, bindings, slot >= 0 ? cache.slot : null));
    const tape = this.tape;
    if (tape) {
      tape.entries.push({ op: 'dispatch', kernel, group, x, y, z });
      tape.kernels.add(kernel.name);
      // The uniform slot needs no hold: its bytes are never rewritten (bindingCache.ts).
      for (const name in bindings) tape.bind(bindings[name].buffer);
    }
    return this.encode(kernel, group, x, y, z);
  }

  /** Set `kernel`'s pipeline (unless set) and `group`, and dispatch; the pass per profiler mode. */
  private encode(kernel: Kernel, group: GPUBindGroup, x: number, y: number, z: number): this {
    const prof = this.gpu.profiler;
    if (prof?.mode === 'pass') {
      if (prof.omit.has(kernel)) return this;
      if (prof.shrink.has(kernel)) x = y = z = 1;
      const d = prof.dispatched.get(kernel);
      if (d) d.calls++;
      else prof.dispatched.set(kernel, { calls: 1, grid: [x, y, z] });
    }
    this.kernels.add(kernel.name);
    this.gpu.hostStats.dispatches++;
    const encoder = this.ensureEncoder();
    if (prof?.mode === 'dispatch') {
      // One pass per dispatch so each gets its own begin/end timestamps.
      this.endPass();
      const stamps = this.stamps(prof, kernel.name);
      if (!stamps) {
        this.flush();
        return this.encode(kernel, group, x, y, z);
      }
      const pass = encoder.beginComputePass({ label: kernel.name, timestampWrites: stamps });
      pass.setPipeline(kernel.pipeline);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(x, y, z);
      pass.end();
      return this;
    }
    if (!this.pass && prof) {
      // 'pass' mode: the pass's begin/end timestamps.
      const stamps = this.stamps(prof, 'pass');
      if (!stamps) {
        this.flush();
        return this.encode(kernel, group, x, y, z);
      }
      this.pass = encoder.beginComputePass({ label: this.label, timestampWrites: stamps });
    }
    const pass = (this.pass ??= encoder.beginComputePass({ label: this.label }));
    if (this.pipeline !== kernel.pipeline) {
      pass.setPipeline(kernel.pipeline);
      this.pipeline = kernel.pipeline;
    }
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(x, y, z);
    if (prof?.twice.has(kernel)) pass.dispatchWorkgroups(x, y, z);
    return this;
  }

  /**
   * Run `fn`, recording as usual, and keep what it recorded on a Tape that `replay` records again
   * without running `fn` (tape.ts). Host state `fn` changes must go through `hostEffect`; writes
   * of host data are refused while capturing. Release the tape when done with it.
   */
  capture<T>(fn: () => T): { value: T; tape: Tape } {
    if (this.tape) throw new Error(`${this.label}: capture inside a capture`);
    const tape = new Tape(this.gpu.pool);
    this.tape = tape;
    this.gpu.taping++;
    try {
      return { value: fn(), tape };
    } catch (e) {
      tape.release();
      throw e;
    } finally {
      this.tape = null;
      this.gpu.taping--;
    }
  }

  /** Repeat `tape`'s host effects and record its commands again. */
  replay(tape: Tape): this {
    if (tape.released) throw new Error(`${this.label}: replay of a released tape`);
    if (this.tape) throw new Error(`${this.label}: replay while capturing a tape`);
    // The host effects first: one that refuses (a KV cache past its capacity) records nothing.
    for (const f of tape.effects) f();
    const t0 = performance.now();
    for (const e of tape.entries) {
      if (e.op === 'dispatch') this.encode(e.kernel, e.group, e.x, e.y, e.z);
      else if (e.op === 'copy') this.copyBuffer(e.src, e.srcOffset, e.dst, e.dstOffset, e.bytes);
      else this.clearBuffer(e.buffer, e.offset, e.bytes);
    }
    this.gpu.hostStats.replayMs += performance.now() - t0;
    return this;
  }

  /** Run `fn` now, and again on every replay of the tape being captured (host bookkeeping). */
  hostEffect(fn: () => void): void {
    fn();
    this.tape?.effects.push(fn);
  }

  /** The next pair of timestamp queries of this submit, named `name`; null when the query set is
   * full (the caller flushes and starts over). */
  private stamps(prof: Profiler, name: string): GPUComputePassTimestampWrites | null {
    if (!this.timings) this.timings = { names: [], query: prof.beginSubmit() };
    if (2 * this.timings.names.length + 2 > prof.capacity) return null;
    const q = this.timings.query + 2 * this.timings.names.length;
    this.timings.names.push(name);
    return { querySet: prof.querySet, beginningOfPassWriteIndex: q, endOfPassWriteIndex: q + 1 };
  }

  /** Copy bytes between tensors (whole source by default). */
  copy(src: Tensor, dst: Tensor, bytes = src.byteSize, srcOffset = 0, dstOffset = 0): this {
    return this.copyBuffer(src.buffer, src.byteOffset + srcOffset, dst.buffer, dst.byteOffset + dstOffset, bytes);
  }

  /** Zero a tensor's bytes. */
  clear(t: Tensor): this {
    return this.clearBuffer(t.buffer, t.byteOffset, Math.ceil(t.byteSize / 4) * 4);
  }

  private copyBuffer(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, bytes: number): this {
    const tape = this.tape;
    if (tape) {
      tape.entries.push({ op: 'copy', src, srcOffset, dst, dstOffset, bytes });
      tape.bind(src);
      tape.bind(dst);
    }
    this.endPass();
    this.ensureEncoder().copyBufferToBuffer(src, srcOffset, dst, dstOffset, bytes);
    return this;
  }

  private clearBuffer(buffer: GPUBuffer, offset: number, bytes: number): this {
    const tape = this.tape;
    if (tape) {
      tape.entries.push({ op: 'clear', buffer, offset, bytes });
      tape.bind(buffer);
    }
    this.endPass();
    this.ensureEncoder().clearBuffer(buffer, offset, bytes);
    return this;
  }

  /** Raw access for readback copies (not while capturing: a tape could not repeat them). */
  encoderForCopy(): GPUCommandEncoder {
    if (this.tape) throw new Error(`${this.label}: raw encoder access while capturing a tape`);
    this.endPass();
    return this.ensureEncoder();
  }

  /** Submit what was recorded so far and keep recording into a fresh encoder. */
  flush(): void {
    if (!this.encoder) return;
    this.endPass();
    const gpu = this.gpu;
    const prof = gpu.profiler;
    const timings = this.timings;
    if (prof && timings) prof.resolve(this.encoder, timings.query, timings.names.length * 2);
    const t0 = performance.now();
    const cmd = this.encoder.finish();
    const what = [...this.kernels].join(', ') || this.label;
    this.pending.push(gpu.guarded(what, () => gpu.device.queue.submit([cmd])));
    gpu.hostStats.submitMs += performance.now() - t0;
    gpu.hostStats.submits++;
    if (prof && timings) this.pending.push(prof.collect(timings.query, timings.names));
    this.encoder = null;
    this.timings = null;
    this.kernels.clear();
  }

  /** Submit and wait until WebGPU has validated the work; throws typed errors naming the kernels. */
  async submit(): Promise<void> {
    this.flush();
    const pending = this.pending;
    this.pending = [];
    await Promise.all(pending);
  }
}

/** The BindingCache range id of a binding resource (remembered by a Tensor). */
function rangeOf(cache: BindingCache, res: BindingResource): number {
  if (!(res instanceof Tensor)) return cache.rangeId(res.buffer, res.offset ?? 0, res.size ?? -1);
  if (res.rangeOwner !== cache) {
    const b = res.binding();
    res.rangeId = cache.rangeId(b.buffer, b.offset!, b.size!);
    res.rangeOwner = cache;
  }
  return res.rangeId;
}

/** The bind group entries of a dispatch (made only when its group is new). */
function entriesOf(kernel: Kernel, bindings: Bindings, slot: BindingCache['slot'] | null): GPUBindGroupEntry[] {
  const entries: GPUBindGroupEntry[] = [];
  for (const name in bindings) {
    const res = bindings[name];
    entries.push({ binding: kernel.bindings.get(name)!, resource: res instanceof Tensor ? res.binding() : res });
  }
  if (slot) entries.push({ binding: kernel.bindings.get(kernel.uniformVar!)!, resource: { buffer: slot.buffer!, offset: slot.offset, size: slot.size } });
  return entries;
}
