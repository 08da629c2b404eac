// The KV cache for generation: per layer one k and one v tensor [slots·capacity, Hkv·D] (f32, or
// f16 with KvCacheConfig.dtype 'f16': half the bytes that decode attention reads; rows after RoPE;
// position j of slot s at row s·capacity + j), and lengths u32 [slots] on the GPU with the number
// of filled positions of each slot ("past"). The lengths live on the GPU so
// that whole decode steps can be recorded ahead without a CPU round trip; `past` mirrors them on
// the CPU (they change only through this class) for bounds checks.
//
// One model step over slots [slot0, slot0 + count), n new rows each:
//   for each layer: cache.append(rec, layer, k, v, slot0, count)   // rows at [past, past + n)
//                   attention.forwardCached(rec, q, cache, layer, o, {slot0, count, scale})
//   cache.advance(rec, slot0, count, n)                             // past += n
// Prefill is count = 1, n = prompt length; decode is count = G sequences, n = 1. After a prefill
// of slot 0, fork(rec, 0, [1, ..., G-1], promptLen) gives every sampled completion a copy of the
// prompt; share(rec, 0, [0, ..., G-1], promptLen) gives it without copying: the prompt's positions
// of those slots stay in slot 0, where attention reads them once for the whole batch.
// A cache made with a prefix P (KvCacheConfig.prefix, for a prompt that will be shared) stores no
// rows for the positions [0, P) of slots past 0: position j of slot s sits at row s·stride + j with
// stride = capacity − P, so the buffers hold P + slots·stride rows instead of slots·capacity (the
// default group, 512 + 8 x 256 rows instead of 8 x 768). Those slots must then read [0, P) through
// share before they take a position of their own, and cannot fork.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor, type UniformType } from '../gpu';

const NO_PREFIX = { from: 0, length: 0 };

/** How the cache stores K and V: f16 rounds each element to nearest (shaders/kv_elem.wgsl). */
export type KvDtype = 'f32' | 'f16';

/** The defines that select a kernel's KV cache element type (shaders/kv_elem.wgsl). */
export function kvDefines(dtype: KvDtype): { KV_F16: boolean } {
  return { KV_F16: dtype === 'f16' };
}

export interface KvCacheConfig {
  layers: number;
  slots: number;
  capacity: number;
  hkv: number;
  headDim: number;
  /** Positions [0, prefix) stored in slot 0 alone, for the other slots to share (default 0: none). */
  prefix?: number;
  /** Element type of K and V (default 'f32'); 'f16' needs shader-f16. */
  dtype?: KvDtype;
}

const FLAT_WG = 256;

export class KvCache {
  /** CPU mirror of the GPU lengths: filled positions per slot. */
  readonly past: number[];
  /** Positions [0, length) of every slot in `slots` are stored in slot `from` (see share). */
  private shared: { from: number; length: number; slots: Set<number> } | null = null;

  /** KvCacheConfig.prefix: positions of slot 0 that no other slot stores (0: none). */
  readonly prefix: number;
  /** Rows between the starts of two consecutive slots (the kernels' `cap`): capacity − prefix. */
  readonly stride: number;

  private constructor(
    readonly config: KvCacheConfig,
    readonly k: readonly Tensor[],
    readonly v: readonly Tensor[],
    readonly lengths: Tensor,
    private readonly appendK: Kernel,
    private readonly copyK: Kernel,
    private readonly setK: Kernel,
    private readonly advanceK: Kernel,
  ) {
    this.past = new Array<number>(config.slots).fill(0);
    this.prefix = config.prefix ?? 0;
    this.stride = config.capacity - this.prefix;
  }

  static async create(gpu: Gpu, config: KvCacheConfig): Promise<KvCache> {
    const { layers, slots, capacity, hkv, headDim, prefix = 0, dtype = 'f32' } = config;
    for (const [name, v] of Object.entries({ layers, slots, capacity, hkv, headDim })) {
      if (!Number.isInteger(v) || v < 1) throw new ShapeError('kv_cache', `${name} must be a positive integer, got ${v}`);
    }
    if (!Number.isInteger(prefix) || prefix < 0 || prefix >= capacity) throw new ShapeError('kv_cache', `prefix must be an integer in [0, capacity ${capacity}), got ${prefix}`);
    if (dtype !== 'f32' && dtype !== 'f16') throw new ShapeError('kv_cache', `dtype must be f32 or f16, got ${String(dtype)}`);
    if (dtype === 'f16') gpu.require('shader-f16', 'an f16 KV cache');
    // One file per kernel (shaders/kv_*.wgsl), each with its own params; the two that write K and V
    // are built for the cache's element type (named with _f16 for an f16 cache).
    const spec = (shader: string, entry: string, uniforms: Record<string, UniformType>) => ({ name: `attention.${entry}`, shader, entry, defines: { D: headDim }, uniforms });
    const writer = (shader: string, uniforms: Record<string, UniformType>) => {
      const s = spec(shader, shader, uniforms);
      return { ...s, name: `${s.name}${dtype === 'f16' ? '_f16' : ''}`, defines: { ...s.defines, ...kvDefines(dtype) } };
    };
    const appendK = gpu.kernelOnUse(writer('kv_append', { rows: 'u32', hkv: 'u32', nseq: 'u32', slot0: 'u32', cap: 'u32' }));
    const copyK = gpu.kernelOnUse(writer('kv_copy', { rows: 'u32', hkv: 'u32', slot0: 'u32', cap: 'u32', dst_slot: 'u32' }));
    const setK = gpu.kernelOnUse(spec('kv_lengths', 'kv_set_lengths', LENGTHS_UNIFORMS));
    const advanceK = gpu.kernelOnUse(spec('kv_lengths', 'kv_advance', LENGTHS_UNIFORMS));
    const shape = [prefix + slots * (capacity - prefix), hkv * headDim];
    const k: Tensor[] = [];
    const v: Tensor[] = [];
    for (let l = 0; l < layers; l++) {
      k.push(gpu.tensor(shape, dtype, `kv_cache.k[${l}]`));
      v.push(gpu.tensor(shape, dtype, `kv_cache.v[${l}]`));
    }
    const lengths = gpu.zeros([slots], 'u32', 'kv_cache.lengths');
    return new KvCache(config, k, v, lengths, appendK, copyK, setK, advanceK);
  }

  /** Element type of K and V. */
  get dtype(): KvDtype {
    return this.config.dtype ?? 'f32';
  }

  get rowLen(): number {
    return this.config.hkv * this.config.headDim;
  }

  /** Throws unless [slot0, slot0 + count) are slots and each has room for n more positions. */
  checkBatch(op: string, slot0: number, count: number, n: number): void {
    const { slots, capacity } = this.config;
    if (!Number.isInteger(slot0) || !Number.isInteger(count) || slot0 < 0 || count < 1 || slot0 + count > slots) {
      throw new ShapeError(op, `slots [${slot0}, ${slot0 + count}) outside the cache's ${slots} slots`);
    }
    for (let s = slot0; s < slot0 + count; s++) {
      if (this.past[s] + n > capacity) {
        throw new ShapeError(op, `slot ${s} holds ${this.past[s]} positions; ${n} more exceed its capacity ${capacity}`);
      }
      if (n > 0 && s !== 0 && this.past[s] < this.prefix) {
        throw new ShapeError(op, `slot ${s} has no rows of its own for positions below ${this.prefix}: share slot 0's first`);
      }
    }
  }

  private checkLayer(op: string, layer: number): void {
    if (!Number.isInteger(layer) || layer < 0 || layer >= this.config.layers) {
      throw new ShapeError(op, `layer ${layer} outside [0, ${this.config.layers})`);
    }
  }

  /** Write kNew, vNew [count·n, Hkv·D] at positions [past, past + n) of slots slot0 .. slot0+count-1. */
  append(rec: Recorder, layer: number, kNew: Tensor, vNew: Tensor, slot0: number, count: number): void {
    this.checkLayer('kv_append', layer);
    for (const t of [kNew, vNew]) {
      if (t.dtype !== 'f32' || t.shape.length !== 2 || t.shape[1] !== this.rowLen || t.shape[0] % count !== 0) {
        throw new ShapeError('kv_append', `'${t.label}' is ${t.dtype} [${t.shape.join(', ')}], expected f32 [count·n, ${this.rowLen}] with count ${count}`);
      }
    }
    if (kNew.shape[0] !== vNew.shape[0]) throw new ShapeError('kv_append', 'k and v have different row counts');
    const n = kNew.shape[0] / count;
    this.checkBatch('kv_append', slot0, count, n);
    rec.dispatch(
      this.appendK,
      { k_new: kNew, v_new: vNew, k_cache: this.k[layer], v_cache: this.v[layer], lengths: this.lengths },
      grid1d(kNew.numel, FLAT_WG),
      this.uniforms({ rows: n, nseq: count, slot0 }),
    );
  }

  /** past += n for slots slot0 .. slot0+count-1; record once per model step, after every layer's append. */
  advance(rec: Recorder, slot0: number, count: number, n: number): void {
    // The CPU mirror moves on every replay of a recorded decode step too.
    rec.hostEffect(() => {
      this.checkBatch('kv_advance', slot0, count, n);
      for (let s = slot0; s < slot0 + count; s++) this.past[s] += n;
    });
    rec.dispatch(this.advanceK, { lengths_rw: this.lengths }, Math.ceil(count / FLAT_WG), this.uniforms({ rows: n, nseq: count, slot0 }));
  }

  /** Copy positions [0, length) of fromSlot, every layer, into each of toSlots and set their lengths. */
  fork(rec: Recorder, fromSlot: number, toSlots: readonly number[], length: number): void {
    if (this.prefix) throw new ShapeError('kv_fork', `a cache made with a prefix (${this.prefix}) shares its slot 0, it does not copy it`);
    this.checkBatch('kv_fork', fromSlot, 1, 0);
    this.checkOwns('kv_fork', fromSlot);
    if (!Number.isInteger(length) || length < 0 || length > this.past[fromSlot]) {
      throw new ShapeError('kv_fork', `length ${length} outside the ${this.past[fromSlot]} positions of slot ${fromSlot}`);
    }
    for (const to of toSlots) {
      this.checkBatch('kv_fork', to, 1, 0);
      if (to === fromSlot) continue;
      for (let l = 0; l < this.config.layers; l++) {
        rec.dispatch(
          this.copyK,
          { k_cache: this.k[l], v_cache: this.v[l] },
          grid1d(length * this.rowLen, FLAT_WG),
          this.uniforms({ rows: length, slot0: fromSlot, dst_slot: to }),
        );
      }
      this.setLengths(rec, to, 1, length);
    }
  }

  /**
   * Give each of toSlots (fromSlot may be among them) the positions [0, length) of fromSlot
   * without copying them: they stay in fromSlot, which must not be reset while another slot
   * shares them. One shared prefix per cache at a time.
   */
  share(rec: Recorder, fromSlot: number, toSlots: readonly number[], length: number): void {
    this.checkBatch('kv_share', fromSlot, 1, 0);
    this.checkOwns('kv_share', fromSlot);
    if (!Number.isInteger(length) || length < 0 || length > this.past[fromSlot]) {
      throw new ShapeError('kv_share', `length ${length} outside the ${this.past[fromSlot]} positions of slot ${fromSlot}`);
    }
    if (this.prefix > 0 && (fromSlot !== 0 || length < this.prefix)) {
      throw new ShapeError('kv_share', `a cache made with a prefix shares at least its ${this.prefix} positions of slot 0, not ${length} of slot ${fromSlot}`);
    }
    for (const to of toSlots) this.checkBatch('kv_share', to, 1, 0);
    if (this.shared && this.shared.slots.size > 0) throw new ShapeError('kv_share', `slots [${[...this.shared.slots].join(', ')}] still share a prefix`);
    for (const to of toSlots) if (to !== fromSlot) this.setLengths(rec, to, 1, length);
    this.shared = { from: fromSlot, length, slots: new Set([fromSlot, ...toSlots]) };
  }

  /**
   * The shared prefix that slots [slot0, slot0 + count) read (length 0: none). Throws when some
   * of them share one and others do not: one attention dispatch reads one layout.
   */
  prefixOf(slot0: number, count: number): { from: number; length: number } {
    const sh = this.shared;
    if (!sh || sh.slots.size === 0) return NO_PREFIX;
    let inside = 0;
    for (let s = slot0; s < slot0 + count; s++) if (sh.slots.has(s)) inside++;
    if (inside === 0) return NO_PREFIX;
    if (inside !== count) throw new ShapeError('kv_prefix', `slots [${slot0}, ${slot0 + count}) mix slots that share a prefix with slots that do not`);
    return sh;
  }

  /** Throws unless slot stores all of its positions itself (it is no sharer of another's prefix). */
  private checkOwns(op: string, slot: number): void {
    const sh = this.shared;
    if (sh && sh.from !== slot && sh.length > 0 && sh.slots.has(slot)) throw new ShapeError(op, `slot ${slot} reads its first ${sh.length} positions from slot ${sh.from}`);
  }

  /** Forget slots [slot0, slot0 + count) (all by default): their lengths become 0. */
  reset(rec: Recorder, slot0 = 0, count = this.config.slots): void {
    this.checkBatch('kv_reset', slot0, count, 0);
    this.setLengths(rec, slot0, count, 0);
  }

  private setLengths(rec: Recorder, slot0: number, count: number, value: number): void {
    const sh = this.shared;
    if (sh) {
      const end = slot0 + count;
      const stays = [...sh.slots].filter((s) => s < slot0 || s >= end);
      if (sh.from >= slot0 && sh.from < end && stays.some((s) => s !== sh.from)) {
        throw new ShapeError('kv_reset', `slot ${sh.from} holds the prefix that slots [${stays.join(', ')}] share`);
      }
      sh.slots = new Set(stays);
    }
    rec.dispatch(this.setK, { lengths_rw: this.lengths }, Math.ceil(count / FLAT_WG), this.uniforms({ rows: value, nseq: count, slot0 }));
    for (let s = slot0; s < slot0 + count; s++) this.past[s] = value;
  }

  private uniforms(u: Partial<typeof ZERO_VALUES>): Record<string, number> {
    return { ...ZERO_VALUES, hkv: this.config.hkv, cap: this.stride, ...u };
  }

  release(): void {
    for (const t of [...this.k, ...this.v, this.lengths]) t.release();
  }
}

const LENGTHS_UNIFORMS = { rows: 'u32', nseq: 'u32', slot0: 'u32' } as const;

/** The values a dispatch may fill; each kernel reads its own struct's fields. */
const ZERO_VALUES = { rows: 0, hkv: 0, nseq: 0, slot0: 0, cap: 0, dst_slot: 0 };
