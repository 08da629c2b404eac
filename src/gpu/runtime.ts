// The WebGPU runtime every kernel uses: device, tensors from a pool, a pipeline cache, recorders,
// readback, profiling, and errors turned into typed exceptions.
import { requestAdapter, requestDevice, type AdapterSummary, type DeviceOptions, type EngineFeature } from './device';
import {
  BufferAllocationError,
  DeviceLostError,
  GpuError,
  GpuOutOfMemoryError,
  GpuValidationError,
  MissingFeatureError,
  ShaderCompileError,
} from './errors';
import { compileKernel, compileKernelNow, kernelKey, kernelName, KernelOnUse, type Kernel, type KernelSpec } from './kernel';
import { Profiler, type StreamAlterations } from './profiler';
import { BindingCache } from './bindingCache';
import { Recorder } from './recorder';
import { BufferPool, DTYPE_BYTES, numelOf, storageUsage, Tensor, type DType } from './tensor';

type TypedArray = Float32Array | Uint32Array | Int32Array | Uint16Array | Uint8Array;

/** Readback buffers up to this size are kept for the next read; larger ones are destroyed after use. */
const KEEP_STAGING_BYTES = 64 * 2 ** 20;

/** A runtime's garbage collector: the JS heap in use, and a full collection now. */
export interface HostCollector {
  heapUsed(): number;
  collect(): void;
}

/** Heap growth between Gpu.collectGarbage's collections: about a third of a second of the 2B's
 * generation on an H200 host, well inside V8's own threshold for a full collection. */
const COLLECT_GROWTH = 32 * 2 ** 20;

export class Gpu {
  readonly pool: BufferPool;
  profiler: Profiler | null = null;
  private readonly profilers = new Map<'dispatch' | 'pass', Profiler>();
  private readonly readyKernels = new Map<string, Kernel>();
  private readonly pendingCompiles = new Set<Promise<void>>();
  private readonly lateCompileErrors: ShaderCompileError[] = [];
  /** Resolves when the device is lost; `lostError` is then set. */
  readonly lost: Promise<DeviceLostError>;
  lostError: DeviceLostError | null = null;
  private readonly kernels = new Map<string, Promise<Kernel>>();
  /** Bind groups and uniform blocks shared by every recorder of this device. */
  readonly bindingCache: BindingCache;
  private readonly staging: GPUBuffer[] = [];
  /** Write-mapped staging buffers of uploadMapped, free for the next upload. */
  private readonly uploadStaging: GPUBuffer[] = [];
  private readonly lostListeners = new Set<(e: DeviceLostError) => void>();
  /** Recorders capturing a Tape now (Recorder.capture): host writes are refused meanwhile. */
  taping = 0;
  /** What recording costs the CPU, summed over every recorder (read differences; bench/model.ts
   * --profile reports them a decode step): dispatches encoded, ms in Recorder.replay (WebGPU's own
   * calls, no model code), ms finishing and submitting command buffers, and those submits. */
  readonly hostStats = { dispatches: 0, replayMs: 0, submitMs: 0, submits: 0 };
  /** Objects that must live as long as the device (Dawn's instance in Node). */
  private readonly retained: unknown[] = [];
  /** The host's garbage collector where the runtime lends it (Node: createNodeGpu), else null. */
  hostCollector: HostCollector | null = null;
  private heapAfterCollect = 0;

  constructor(
    readonly device: GPUDevice,
    readonly features: ReadonlySet<EngineFeature>,
    readonly adapter: AdapterSummary,
    /** What sizes are checked against: the device's limits, or lower ones (DeviceOptions.capLimits). */
    readonly limits: GPUSupportedLimits = device.limits,
  ) {
    this.pool = new BufferPool((bytes, label) => this.createBuffer(bytes, label, storageUsage()), Math.min(limits.maxBufferSize, limits.maxStorageBufferBindingSize));
    this.bindingCache = new BindingCache(device, (bytes) => this.createBuffer(bytes, 'uniforms', GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST));
    this.lost = device.lost.then((info) => {
      const err = new DeviceLostError(info.reason, info.message || 'no detail');
      this.lostError = err;
      for (const l of this.lostListeners) l(err);
      return err;
    });
  }

  static async create(gpu: GPU | undefined, opts: DeviceOptions = {}): Promise<Gpu> {
    const adapter = await requestAdapter(gpu, opts);
    const { device, features, summary, limits } = await requestDevice(adapter, opts, gpu?.wgslLanguageFeatures ?? []);
    return new Gpu(device, features, summary, limits);
  }

  has(feature: EngineFeature): boolean {
    return this.features.has(feature);
  }

  /** Whether WGSL offers the language extension `name` (e.g. packed_4x8_integer_dot_product). */
  hasWgsl(name: string): boolean {
    return this.adapter.wgslFeatures.includes(name);
  }

  /** Throw a MissingFeatureError naming the WGSL extension `name` unless WGSL offers it. */
  requireWgsl(name: string, forWhat: string): void {
    if (!this.hasWgsl(name)) throw new MissingFeatureError(name, `a WGSL language extension, needed for ${forWhat}`);
  }

  /** Throw a MissingFeatureError naming `feature` unless the device has it. */
  require(feature: EngineFeature, forWhat: string): void {
    if (!this.has(feature)) throw new MissingFeatureError(feature, `needed for ${forWhat}`);
  }

  /**
   * A point where the host may pause without idling the GPU (work queued behind it): a full
   * garbage collection, where the runtime lends its collector and the heap has grown by
   * COLLECT_GROWTH since the last. Dawn's Node binding waits on pending work by a setImmediate
   * loop that makes a native callback each turn; those outlive the young generation, so V8's own
   * full collections came mid-generation and held the host past the queued steps (BENCHMARKS.md).
   */
  collectGarbage(): void {
    const c = this.hostCollector;
    if (!c || c.heapUsed() - this.heapAfterCollect < COLLECT_GROWTH) return;
    c.collect();
    this.heapAfterCollect = c.heapUsed();
  }

  /** Keep `owner` alive while this Gpu is reachable. */
  retain(owner: unknown): void {
    this.retained.push(owner);
  }

  onLost(listener: (e: DeviceLostError) => void): () => void {
    this.lostListeners.add(listener);
    return () => this.lostListeners.delete(listener);
  }

  /** Run `fn` inside validation and out-of-memory error scopes and rethrow what they caught, typed. */
  async guarded<T>(what: string, fn: () => T): Promise<T> {
    if (this.lostError) throw this.lostError;
    const known = this.lateCompileErrors.shift();
    if (known) throw known;
    // `fn` runs now, not after the verdicts of kernels still compiling: a submit deferred behind
    // them would land after queue writes the caller makes next, which must follow it.
    this.device.pushErrorScope('validation');
    this.device.pushErrorScope('out-of-memory');
    let result: T;
    try {
      result = fn();
    } finally {
      // Both pops are issued now, synchronously: an await between them would let another caller's
      // push land in between and pair the scopes wrongly.
      const [oom, val] = await Promise.all([this.device.popErrorScope(), this.device.popErrorScope()]);
      // A kernel that failed to compile explains a failed submit better than the submit's error.
      if (this.pendingCompiles.size) await Promise.all(this.pendingCompiles);
      const late = this.lateCompileErrors.shift();
      if (late) throw late;
      if (oom) throw new GpuOutOfMemoryError(what, oom.message);
      if (val) throw new GpuValidationError(what, val.message);
    }
    return result;
  }

  private createBuffer(bytes: number, label: string, usage: number): GPUBuffer {
    if (this.lostError) throw this.lostError;
    const lim = this.limits;
    if (bytes > lim.maxBufferSize) {
      throw new BufferAllocationError(label, bytes, `larger than this GPU's maxBufferSize (${lim.maxBufferSize})`);
    }
    if (usage & GPUBufferUsage.STORAGE && bytes > lim.maxStorageBufferBindingSize) {
      throw new BufferAllocationError(
        label,
        bytes,
        `larger than this GPU's maxStorageBufferBindingSize (${lim.maxStorageBufferBindingSize}); split the tensor`,
      );
    }
    this.device.pushErrorScope('out-of-memory');
    const buf = this.device.createBuffer({ size: bytes, usage, label });
    // createBuffer is synchronous; an OOM is reported asynchronously. Record it for the next submit.
    void this.device.popErrorScope().then((err) => {
      if (err) this.deferred ??= new BufferAllocationError(label, bytes, `out of GPU memory (${err.message})`);
    });
    return buf;
  }

  private deferred: GpuError | null = null;

  /** Wait for all queued work and surface any error recorded asynchronously. */
  async sync(): Promise<void> {
    await this.device.queue.onSubmittedWorkDone();
    if (this.lostError) throw this.lostError;
    const d = this.deferred;
    this.deferred = null;
    if (d) throw d;
  }

  /** A tensor from the pool. Contents are undefined until written (or use `zeros`). */
  tensor(shape: readonly number[], dtype: DType, label: string): Tensor {
    const bytes = Math.max(4, numelOf(shape) * DTYPE_BYTES[dtype]);
    const buf = this.pool.acquire(bytes, label);
    return new Tensor(buf, shape, dtype, label, 0, (t) => this.pool.release(t.buffer));
  }

  /** A tensor holding `data` (typed array matching dtype, or plain numbers converted). */
  upload(data: TypedArray | readonly number[], shape: readonly number[], dtype: DType, label: string): Tensor {
    const t = this.tensor(shape, dtype, label);
    this.write(t, data);
    return t;
  }

  /**
   * A tensor holding `data`, copied from a write-mapped staging buffer that is kept and mapped
   * again for the next call: for uploads of megabytes (an image's pixels), where queue.writeBuffer
   * pays for fresh staging memory each time (H100 host through Dawn, 4.8 MB: 3.3 ms by writeBuffer,
   * 0.5 ms through a reused mapped buffer). The copy is submitted before this resolves, so work
   * recorded after it sees the data.
   */
  async uploadMapped(data: TypedArray, shape: readonly number[], dtype: DType, label: string): Promise<Tensor> {
    if (this.taping) throw new Error(`upload to '${label}' while capturing a tape: a replay would not repeat it`);
    const t = this.tensor(shape, dtype, label);
    if (data.byteLength > t.byteSize) {
      t.release();
      throw new BufferAllocationError(label, data.byteLength, `data larger than the tensor (${t.byteSize} bytes)`);
    }
    const bytes = Math.ceil(data.byteLength / 4) * 4;
    if (bytes === 0) return t;
    const buf = takeFitting(this.uploadStaging, bytes) ?? this.device.createBuffer({ label: 'upload', size: bytes, usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC, mappedAtCreation: true });
    new Uint8Array(buf.getMappedRange(0, bytes)).set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    buf.unmap();
    const enc = this.device.createCommandEncoder({ label: `upload ${label}` });
    enc.copyBufferToBuffer(buf, 0, t.buffer, t.byteOffset, bytes);
    await this.guarded(`upload of '${label}'`, () => this.device.queue.submit([enc.finish()]));
    // Mapped again once the copy is done; then free for the next upload.
    buf.mapAsync(GPUMapMode.WRITE).then(
      () => this.uploadStaging.push(buf),
      () => buf.destroy(),
    );
    return t;
  }

  /** A queue write: it lands before any recorder's next submit, so `t` must not be a pool buffer
   * that work recorded but not yet submitted still uses (scratch released as it was recorded, such
   * as a split GEMM's partials, goes back to the pool at once). */
  write(t: Tensor, data: TypedArray | readonly number[]): void {
    if (this.taping) throw new Error(`write to '${t.label}' while capturing a tape: a replay would not repeat it`);
    let arr: TypedArray;
    if (Array.isArray(data)) {
      arr = t.dtype === 'f32' ? new Float32Array(data) : t.dtype === 'i32' ? new Int32Array(data) : t.dtype === 'u8' ? new Uint8Array(data) : t.dtype === 'f16' || t.dtype === 'bf16' ? new Uint16Array(data) : new Uint32Array(data);
    } else arr = data as TypedArray;
    if (arr.byteLength > t.byteSize) {
      throw new BufferAllocationError(t.label, arr.byteLength, `data larger than the tensor (${t.byteSize} bytes)`);
    }
    // writeBuffer needs a multiple of 4 bytes.
    const bytes = Math.ceil(arr.byteLength / 4) * 4;
    if (bytes === arr.byteLength) this.device.queue.writeBuffer(t.buffer, t.byteOffset, arr.buffer, arr.byteOffset, arr.byteLength);
    else {
      const padded = new Uint8Array(bytes);
      padded.set(new Uint8Array(arr.buffer, arr.byteOffset, arr.byteLength));
      this.device.queue.writeBuffer(t.buffer, t.byteOffset, padded);
    }
  }

  zeros(shape: readonly number[], dtype: DType, label: string): Tensor {
    const t = this.tensor(shape, dtype, label);
    const rec = this.recorder('zeros');
    rec.clear(t);
    rec.flush();
    return t;
  }

  /** WGSL extensions this device can enable for shaders that ask for them. */
  private enables(): string[] {
    return [this.has('shader-f16') ? 'f16' : '', this.has('subgroups') ? 'subgroups' : ''].filter((e) => e);
  }

  /** Compile (or fetch from the cache) a kernel. Compile errors surface as ShaderCompileError. */
  kernel(spec: KernelSpec): Promise<Kernel> {
    const key = kernelKey(spec);
    let k = this.kernels.get(key);
    if (!k) {
      k = compileKernel(this.device, spec, this.enables());
      this.kernels.set(key, k);
      // Compiled once for both paths: kernelNow finds it without compiling again.
      k.then(
        (done) => this.readyKernels.set(key, done),
        () => this.kernels.delete(key),
      );
    }
    return k;
  }

  /**
   * The kernel for `spec`, compiled at its first use by `kernelNow` (KernelOnUse): what ops take
   * for the kernels they may dispatch. A compile error surfaces as ShaderCompileError from the
   * submit after that first use.
   */
  kernelOnUse(spec: KernelSpec): Kernel {
    return new KernelOnUse(kernelName(spec), () => this.kernelNow(spec));
  }

  /**
   * A kernel compiled now, synchronously, from the same cache as `kernel`: for a variant created
   * on first use while recording. A compile error surfaces as ShaderCompileError from the next
   * guarded call (a submit) instead of here.
   */
  kernelNow(spec: KernelSpec): Kernel {
    const key = kernelKey(spec);
    const ready = this.readyKernels.get(key);
    if (ready) return ready;
    const { kernel, verdict } = compileKernelNow(this.device, spec, this.enables());
    this.readyKernels.set(key, kernel);
    this.kernels.set(key, Promise.resolve(kernel));
    const check = verdict.then((err) => {
      if (err) {
        this.lateCompileErrors.push(err);
        this.readyKernels.delete(key);
        this.kernels.delete(key);
      }
    });
    this.pendingCompiles.add(check);
    void check.then(() => this.pendingCompiles.delete(check));
    return kernel;
  }

  recorder(label?: string): Recorder {
    return new Recorder(this, label);
  }

  /** Copy a tensor back to the CPU. This is the only readback path. */
  async read(t: Tensor): Promise<Float32Array | Uint32Array | Int32Array | Uint16Array | Uint8Array> {
    const bytes = Math.ceil(t.byteSize / 4) * 4;
    const staging = this.acquireStaging(bytes);
    const enc = this.device.createCommandEncoder({ label: `read ${t.label}` });
    enc.copyBufferToBuffer(t.buffer, t.byteOffset, staging, 0, bytes);
    await this.guarded(`readback of '${t.label}'`, () => this.device.queue.submit([enc.finish()]));
    await staging.mapAsync(GPUMapMode.READ, 0, bytes);
    const copy = staging.getMappedRange(0, bytes).slice(0, t.byteSize);
    staging.unmap();
    // A large readback (the weight cache storing a token table) gives its host memory back.
    if (staging.size > KEEP_STAGING_BYTES) staging.destroy();
    else this.staging.push(staging);
    switch (t.dtype) {
      case 'f32':
        return new Float32Array(copy);
      case 'u32':
        return new Uint32Array(copy);
      case 'i32':
        return new Int32Array(copy);
      case 'f16':
      case 'bf16':
        return new Uint16Array(copy);
      case 'u8':
        return new Uint8Array(copy);
    }
  }

  async readF32(t: Tensor): Promise<Float32Array> {
    if (t.dtype !== 'f32') throw new Error(`readF32 of '${t.label}' which is ${t.dtype}`);
    return (await this.read(t)) as Float32Array;
  }

  private acquireStaging(bytes: number): GPUBuffer {
    return takeFitting(this.staging, bytes) ?? this.createBuffer(Math.max(bytes, 256), 'readback', GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
  }

  /** Start collecting GPU times (needs timestamp-query): per kernel, or per pass (Profiler's modes);
   * in 'pass' mode the dispatches of the kernels in `alter.omit` are left out, those in
   * `alter.shrink` run as one workgroup and those in `alter.twice` twice in a row (measurements
   * only: what they write then is not what the engine would have). */
  startProfiling(mode: 'dispatch' | 'pass' = 'dispatch', alter: StreamAlterations = {}): Profiler {
    const { omit = new Set(), shrink = new Set(), twice = new Set() } = alter;
    if (mode === 'dispatch' && omit.size + shrink.size + twice.size > 0) throw new Error('startProfiling: omit, shrink and twice are for pass mode');
    this.require('timestamp-query', 'per-kernel GPU timing');
    let p = this.profilers.get(mode);
    if (!p) this.profilers.set(mode, (p = new Profiler(this.device, undefined, mode)));
    p.reset();
    p.omit = omit;
    p.shrink = shrink;
    p.twice = twice;
    this.profiler = p;
    return p;
  }

  stopProfiling(): void {
    this.profiler = null;
  }

  destroy(): void {
    this.pool.trim();
    for (const p of this.profilers.values()) p.destroy();
    this.device.destroy();
  }
}

/** A kept staging buffer of `bytes` to 4·`bytes` (a larger one would idle its memory), taken out of `list`. */
function takeFitting(list: GPUBuffer[], bytes: number): GPUBuffer | undefined {
  const i = list.findIndex((b) => b.size >= bytes && b.size <= 4 * bytes);
  return i >= 0 ? list.splice(i, 1)[0] : undefined;
}
