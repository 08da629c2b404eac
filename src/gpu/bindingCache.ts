// Bind groups and uniform blocks reused across dispatches.
//
// Creating a bind group is the bulk of a dispatch's CPU cost in Dawn (about 40 µs of the 45 µs a
// dispatch took to record, measured in Node on lavapipe), and a decode step records the same
// dispatches every step: same kernels, same buffers, same uniform values. So:
// - uniform blocks are content-addressed: each distinct byte string gets a slot of a uniform
//   buffer, written once when first seen (a queue write at record time lands before any later
//   submit) and never rewritten, so any bind group pointing at a slot stays valid;
// - bind groups are keyed by kernel and, per binding, (index, buffer, offset, size).
// Buffers are told apart by identity (a WeakMap of ids): a pooled buffer handed to another tensor
// binds the same bytes, so its bind groups stay right; a destroyed one is never bound again.
// When either table fills, both start over on a fresh uniform buffer; the old one lives on as long
// as recorded or submitted work holds it.
import type { Kernel } from './kernel';

/** Uniform slots per store buffer (each at least minUniformBufferOffsetAlignment bytes). */
const UNIFORM_SLOTS = 8192;
/** Bind groups kept before the tables start over. */
const MAX_GROUPS = 16384;

export interface BindingCacheStats {
  groupsCreated: number;
  groupHits: number;
  uniformSlots: number;
}

export class BindingCache {
  private readonly ids = new WeakMap<object, number>();
  private nextId = 1;
  private groups = new Map<string, GPUBindGroup>();
  private slots = new Map<string, number>();
  private store: GPUBuffer | null = null;
  private used = 0;
  private readonly words = new Uint32Array(64);
  private readonly scratch = new DataView(this.words.buffer);
  readonly stats: BindingCacheStats = { groupsCreated: 0, groupHits: 0, uniformSlots: 0 };

  constructor(
    private readonly device: GPUDevice,
    private readonly createUniformBuffer: (bytes: number) => GPUBuffer,
  ) {}

  /** A small integer naming `o` (a buffer) for cache keys. */
  id(o: object): number {
    let i = this.ids.get(o);
    if (i === undefined) {
      i = this.nextId++;
      this.ids.set(o, i);
    }
    return i;
  }

  /** The slot holding `kernel`'s uniform struct packed from `values`. */
  uniform(kernel: Kernel, values: Record<string, number>): GPUBufferBinding {
    const bytes = kernel.uniformBytes;
    const n = bytes / 4;
    if (n > this.words.length) throw new Error(`${kernel.name}: ${n} uniform words, at most ${this.words.length}`);
    this.words.fill(0, 0, n);
    const fields = kernel.uniformFields;
    for (let i = 0; i < fields.length; i++) {
      const [field, type] = fields[i];
      const v = values[field];
      if (v === undefined || !Number.isFinite(v)) throw new Error(`${kernel.name}: uniform '${field}' is ${v}`);
      if (type === 'f32') this.scratch.setFloat32(i * 4, v, true);
      else if (type === 'i32') this.scratch.setInt32(i * 4, v, true);
      else this.scratch.setUint32(i * 4, v, true);
    }
    let key = '';
    for (let i = 0; i < n; i++) key += `${this.words[i]},`;
    let offset = this.slots.get(key);
    if (offset === undefined) {
      const align = this.device.limits.minUniformBufferOffsetAlignment;
      const span = Math.ceil(bytes / align) * align;
      if (!this.store || this.used + span > UNIFORM_SLOTS * align) this.startOver();
      offset = this.used;
      this.used += span;
      this.device.queue.writeBuffer(this.store!, offset, this.words.buffer, 0, bytes);
      this.slots.set(key, offset);
      this.stats.uniformSlots++;
    }
    return { buffer: this.store!, offset, size: bytes };
  }

  /** The bind group of `kernel` for `entries`, whose buffers and ranges `key` spells. */
  group(kernel: Kernel, key: string, entries: GPUBindGroupEntry[]): GPUBindGroup {
    const full = `${kernel.id}${key}`;
    let g = this.groups.get(full);
    if (g) {
      this.stats.groupHits++;
      return g;
    }
    if (this.groups.size >= MAX_GROUPS) this.groups.clear();
    g = this.device.createBindGroup({ layout: kernel.layout, entries, label: kernel.name });
    this.groups.set(full, g);
    this.stats.groupsCreated++;
    return g;
  }

  private startOver(): void {
    this.store = this.createUniformBuffer(UNIFORM_SLOTS * this.device.limits.minUniformBufferOffsetAlignment);
    this.used = 0;
    this.slots.clear();
    this.groups.clear();
  }
}
