// Per-head q/k RMSNorm and RoPE of q and k in one dispatch (shaders/qk_norm_rope.wgsl): the four
// dispatches norms.rmsnorm ×2 + rope.apply ×2 of the attention block, for inference; in
// generation also KvCache.append's (k and v written straight into the cache) and, with a
// transient adapter, the q/k/v LoRA up dispatch (u from LoraGemv.down on the three adapters).
import { grid1d, MissingFeatureError, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import { kvDefines, type KvCache, type KvDtype } from './kvCache';
import { loraScale, type LoraParams } from './loraParams';

/** Largest head_dim the kernel takes (2·WG·PAIRS in the shader: the pairs a thread holds). */
const MAX_HEAD_DIM = 512;

export interface QkNormRopeArgs {
  /** q_proj and k_proj outputs [T, Hq·D], [T, Hkv·D]. */
  qRaw: Tensor;
  kRaw: Tensor;
  /** q_norm and k_norm weights [D]. */
  qWeight: Tensor;
  kWeight: Tensor;
  /** The rope table of the rows [T, D/2, 2] (Rope.table). */
  cs: Tensor;
  /** Outputs [T, Hq·D], [T, Hkv·D]. */
  q: Tensor;
  k: Tensor;
  hq: number;
  hkv: number;
  eps: number;
}

/** applyToCache: k goes into the cache of `layer` with v [T, Hkv·D], T = count·n rows. */
export interface QkNormRopeCacheArgs extends Omit<QkNormRopeArgs, 'k'> {
  v: Tensor;
  cache: KvCache;
  layer: number;
  slot0: number;
  count: number;
  /** qRaw, kRaw, v are base projections; each takes s·u·Bᵀ of its adapter, u [T, 3r] = q, k, v parts. */
  lora?: { q: LoraParams; k: LoraParams; v: LoraParams; u: Tensor };
}

/** Storage buffers the cache variants bind (q_raw, k_raw, v, two norm weights, table, q, k/v cache, lengths; + u and three B). */
const CACHE_STORAGE_BUFFERS = 10;
const CACHE_LORA_STORAGE_BUFFERS = 14;
const UNIFORMS = { rows: 'u32', hq: 'u32', hkv: 'u32', half: 'u32', eps: 'f32', n: 'u32', slot0: 'u32', cap: 'u32', r: 'u32', sq: 'f32', sk: 'f32', sv: 'f32' } as const;

/** The variants that write the cache, by its element type (each compiled at its first use). */
type ByKvDtype<T> = Record<KvDtype, T>;

export class QkNormRope {
  private constructor(
    private readonly kernel: Kernel,
    /** Null where the device binds fewer storage buffers than the kernel needs (Chrome offers 10, WebGPU's default is 8). */
    private readonly cacheKernel: ByKvDtype<Kernel> | null,
    /** By whether the rank is a multiple of 4 (u and B read as vec4s). */
    private readonly cacheLoraKernels: ByKvDtype<{ scalar: Kernel; vec4: Kernel }> | null,
  ) {}

  static async create(gpu: Gpu): Promise<QkNormRope> {
    const spec = (cache: boolean, lora = false, vec4 = false, kv: KvDtype = 'f32') => ({
      name: cache ? `qk_norm_rope.to_cache${lora ? '_lora' : ''}${vec4 ? '_vec4' : ''}${kv === 'f16' ? '_f16' : ''}` : undefined,
      shader: 'qk_norm_rope',
      entry: 'qk_norm_rope',
      defines: { CACHE: cache, LORA: lora, LVEC4: vec4, LW: vec4 ? 4 : 1, LELEM: vec4 ? 'vec4f' : 'f32', ...kvDefines(kv) },
      uniforms: UNIFORMS,
    });
    const fits = (buffers: number) => gpu.limits.maxStorageBuffersPerShaderStage >= buffers;
    const byKv = <T>(make: (kv: KvDtype) => T): ByKvDtype<T> => ({ f32: make('f32'), f16: make('f16') });
    const cache = fits(CACHE_STORAGE_BUFFERS) ? byKv((kv) => gpu.kernelOnUse(spec(true, false, false, kv))) : null;
    const lora = fits(CACHE_LORA_STORAGE_BUFFERS) ? byKv((kv) => ({ scalar: gpu.kernelOnUse(spec(true, true, false, kv)), vec4: gpu.kernelOnUse(spec(true, true, true, kv)) })) : null;
    return new QkNormRope(gpu.kernelOnUse(spec(false)), cache, lora);
  }

  /** Whether applyToCache runs on this device (with the q/k/v LoRA updates inside when `lora`). */
  writesCache(lora: boolean): boolean {
    return (lora ? this.cacheLoraKernels : this.cacheKernel) !== null;
  }

  apply(rec: Recorder, a: QkNormRopeArgs): void {
    const T = this.check(a, [['k', a.k]]);
    rec.dispatch(
      this.kernel,
      { q_raw: a.qRaw, k_raw: a.kRaw, q_weight: a.qWeight, k_weight: a.kWeight, table: a.cs, q: a.q, k: a.k },
      grid1d(T * (a.hq + a.hkv), 1),
      { rows: T, hq: a.hq, hkv: a.hkv, half: a.qWeight.numel / 2, eps: a.eps, n: 0, slot0: 0, cap: 0, r: 0, sq: 0, sk: 0, sv: 0 },
    );
  }

  /**
   * q as apply; k and v written at positions [past, past + n) of slots slot0 .. slot0+count-1 of
   * the cache's layer, as KvCache.append would (record cache.advance after the last layer).
   */
  applyToCache(rec: Recorder, a: QkNormRopeCacheArgs): void {
    const T = this.check(a, [['v', a.v]]);
    const { cache } = a;
    if (a.hkv !== cache.config.hkv || a.qWeight.numel !== cache.config.headDim) {
      throw new ShapeError('qk_norm_rope', `${a.hkv} heads of ${a.qWeight.numel}, the cache holds ${cache.config.hkv} of ${cache.config.headDim}`);
    }
    if (!Number.isInteger(a.layer) || a.layer < 0 || a.layer >= cache.config.layers) throw new ShapeError('qk_norm_rope', `layer ${a.layer} outside the cache's ${cache.config.layers}`);
    if (!Number.isInteger(a.count) || a.count < 1 || T % a.count !== 0) throw new ShapeError('qk_norm_rope', `${T} rows are not ${a.count} slots of equal rows`);
    const n = T / a.count;
    cache.checkBatch('qk_norm_rope', a.slot0, a.count, n);
    const { lora } = a;
    // Plain objects of fixed keys (no spreads): recorded 28 times a decode step, which is CPU-bound at one row.
    const bind: Record<string, Tensor> = {
      q_raw: a.qRaw,
      k_raw: a.kRaw,
      q_weight: a.qWeight,
      k_weight: a.kWeight,
      table: a.cs,
      q: a.q,
      v: a.v,
      k_cache: cache.k[a.layer],
      v_cache: cache.v[a.layer],
      lengths: cache.lengths,
    };
    const uniforms = { rows: T, hq: a.hq, hkv: a.hkv, half: a.qWeight.numel / 2, eps: a.eps, n, slot0: a.slot0, cap: cache.stride, r: 0, sq: 0, sk: 0, sv: 0 };
    if (lora) {
      const D = a.qWeight.numel;
      const { r } = lora.q;
      const shapes: [LoraParams, number][] = [[lora.q, a.hq * D], [lora.k, a.hkv * D], [lora.v, a.hkv * D]];
      for (const [p, out] of shapes) if (p.r !== r || p.out !== out) throw new ShapeError('qk_norm_rope', `adapter ${p.name}: [${p.out}, r ${p.r}], expected [${out}, r ${r}]`);
      if (lora.u.dtype !== 'f32' || lora.u.numel < T * 3 * r) throw new ShapeError('qk_norm_rope', `u must be f32 with ${T * 3 * r} elements, got ${lora.u.dtype} [${lora.u.shape.join(', ')}]`);
      uniforms.r = r;
      uniforms.sq = loraScale(lora.q);
      uniforms.sk = loraScale(lora.k);
      uniforms.sv = loraScale(lora.v);
      bind.u_in = lora.u;
      bind.bq = lora.q.B;
      bind.bk = lora.k.B;
      bind.bv = lora.v.B;
    }
    const loraKernels = this.cacheLoraKernels?.[cache.dtype];
    const kernel = lora ? loraKernels && (lora.q.r % 4 === 0 ? loraKernels.vec4 : loraKernels.scalar) : (this.cacheKernel?.[cache.dtype] ?? null);
    if (!kernel) throw new MissingFeatureError('maxStorageBuffersPerShaderStage', `qk_norm_rope into the KV cache binds ${lora ? CACHE_LORA_STORAGE_BUFFERS : CACHE_STORAGE_BUFFERS} storage buffers (check writesCache)`);
    // q and k heads, then v's heads (a copy into the cache) in workgroups of their own.
    rec.dispatch(kernel, bind, grid1d(T * (a.hq + 2 * a.hkv), 1), uniforms);
  }

  /** Shapes of the common arguments and of `kv` ([T, Hkv·D] each); returns T. */
  private check(a: Omit<QkNormRopeArgs, 'k'>, kv: [string, Tensor][]): number {
    const op = 'qk_norm_rope';
    const D = a.qWeight.numel;
    const T = a.qRaw.shape[0];
    if (D % 2 !== 0 || D > MAX_HEAD_DIM || a.kWeight.numel !== D) throw new ShapeError(op, `q/k norm weights must both be [D] with D even and at most ${MAX_HEAD_DIM}, got ${a.qWeight.numel} and ${a.kWeight.numel}`);
    const want: [string, Tensor, number][] = [
      ['qRaw', a.qRaw, T * a.hq * D],
      ['q', a.q, T * a.hq * D],
      ['kRaw', a.kRaw, T * a.hkv * D],
      ['cs', a.cs, T * D],
    ];
    for (const [name, t] of kv) want.push([name, t, T * a.hkv * D]);
    for (const [name, t, n] of want) {
      if (t.dtype !== 'f32' || t.numel !== n) throw new ShapeError(op, `${name} must be f32 with ${n} elements, got ${t.dtype} [${t.shape.join(', ')}]`);
    }
    return T;
  }
}
