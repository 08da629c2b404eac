// Bind groups and uniform blocks reused across dispatches.
//
// Creating a bind group is the bulk of a dispatch's CPU cost in Dawn (about 40 µs of the 45 µs a
// dispatch took to record, measured in Node on lavapipe), and a decode step records the same
// dispatches every step: same kernels, same buffers, same uniform values. So:
// - uniform blocks are content-addressed: each distinct byte string gets a slot of a uniform
//   buffer, written once when first seen (a queue write at record time lands before any later
//   submit) and never rewritten, so any bind group pointing at a slot stays valid;
// - bind groups are keyed by kernel and, per binding, (index, buffer, offset, size).
// A decode step looks these up hundreds of times, so the keys are numbers, never strings: every
// buffer range (buffer, offset, size) gets a small integer, remembered by the Tensor that spells it,
// and a kernel's bind groups hang in a tree of Maps walked one binding at a time.
// Buffers are told apart by identity (a WeakMap): a pooled buffer handed to another tensor binds
// the same bytes, so its bind groups stay right; a destroyed one is never bound again.
// When either table fills, both start over on a fresh uniform buffer; the old one lives on as long
// as recorded or submitted work holds it.
import type { Kernel } from './kernel';

/** Uniform slots per store buffer (each at least minUniformBufferOffsetAlignment bytes). */
const UNIFORM_SLOTS = 8192;
/** Bind groups kept before the tables start over. */
const MAX_GROUPS = 16384;
/** Binding indices below this fold into a group key with their range's id. */
const BINDING_SPAN = 1024;

export interface BindingCacheStats {
  groupsCreated: number;
  groupHits: number;
  uniformSlots: number;
}

/** A level of a kernel's bind-group tree: the next binding's key to the level below, or the group. */
type GroupNode = Map<number, GroupNode | GPUBindGroup>;

/** A uniform slot: its words (to tell hash collisions apart) and its byte offset in the store. */
interface UniformSlot {
  words: Uint32Array;
  offset: number;
}

export class BindingCache {
  /** Per buffer: its ranges' ids by offset, then [size, id] pairs (a buffer has few sizes per offset). */
  private readonly ranges = new WeakMap<GPUBuffer, Map<number, number[]>>();
  private nextRange = 1;
  private groups = new Map<number, GroupNode>();
  private groupCount = 0;
  private slots = new Map<number, UniformSlot[]>();
  private store: GPUBuffer | null = null;
  private used = 0;
  private readonly words = new Uint32Array(64);
  private readonly asF32 = new Float32Array(this.words.buffer);
  private readonly asI32 = new Int32Array(this.words.buffer);
  /** The binding of the slot `uniform` returned last (reused: read it before the next call). */
  readonly slot: { buffer: GPUBuffer | null; offset: number; size: number } = { buffer: null, offset: 0, size: 0 };
  readonly stats: BindingCacheStats = { groupsCreated: 0, groupHits: 0, uniformSlots: 0 };

  constructor(
    private readonly device: GPUDevice,
    private readonly createUniformBuffer: (bytes: number) => GPUBuffer,
  ) {}

  /** A small integer naming the bytes [offset, offset + size) of `buffer`: equal ranges, equal ids. */
  rangeId(buffer: GPUBuffer, offset: number, size: number): number {
    let byOffset = this.ranges.get(buffer);
    if (!byOffset) this.ranges.set(buffer, (byOffset = new Map()));
    let pairs = byOffset.get(offset);
    if (!pairs) byOffset.set(offset, (pairs = []));
    for (let i = 0; i < pairs.length; i += 2) if (pairs[i] === size) return pairs[i + 1];
    const id = this.nextRange++;
    pairs.push(size, id);
    return id;
  }

  /** The group key of binding index `binding` holding range `range`. */
  static key(binding: number, range: number): number {
    if (binding >= BINDING_SPAN) throw new Error(`binding index ${binding} ≥ ${BINDING_SPAN}`);
    return range * BINDING_SPAN + binding;
  }

  /**
   * Pack `kernel`'s uniform struct from `values` and point `this.slot` at the slot holding those
   * bytes; returns the slot's offset (part of a group key: the tables start over together).
   */
  uniform(kernel: Kernel, values: Record<string, number>): number {
    const bytes = kernel.uniformBytes;
    const n = bytes / 4;
    const words = this.words;
    if (n > words.length) throw new Error(`${kernel.name}: ${n} uniform words, at most ${words.length}`);
    const fields = kernel.uniformFields;
    for (let i = 0; i < fields.length; i++) {
      const field = fields[i];
      const v = values[field[0]];
      if (v === undefined || !Number.isFinite(v)) throw new Error(`${kernel.name}: uniform '${field[0]}' is ${v}`);
      if (field[1] === 'f32') this.asF32[i] = v;
      else if (field[1] === 'i32') this.asI32[i] = v;
      else words[i] = v;
    }
    let hash = 0x811c9dc5;
    for (let i = 0; i < n; i++) {
      if (i >= fields.length) words[i] = 0;
      hash = Math.imul(hash ^ words[i], 0x01000193);
    }
    let list = this.slots.get(hash);
    const slot = list && findSlot(list, words, n);
    let offset: number;
    if (slot) offset = slot.offset;
    else {
      const align = this.device.limits.minUniformBufferOffsetAlignment;
      const span = Math.ceil(bytes / align) * align;
      if (!this.store || this.used + span > UNIFORM_SLOTS * align) {
        this.startOver();
        list = undefined;
      }
      offset = this.used;
      this.used += span;
      this.device.queue.writeBuffer(this.store!, offset, words.buffer, 0, bytes);
      if (!list) this.slots.set(hash, (list = []));
      list.push({ words: words.slice(0, n), offset });
      this.stats.uniformSlots++;
    }
    this.slot.buffer = this.store!;
    this.slot.offset = offset;
    this.slot.size = bytes;
    return offset;
  }

  /** The bind group of `kernel` under keys[0..n) (BindingCache.key per binding), if made before. */
  lookup(kernel: Kernel, keys: readonly number[], n: number): GPUBindGroup | undefined {
    let node = this.groups.get(kernel.id);
    for (let i = 0; node && i < n - 1; i++) node = node.get(keys[i]) as GroupNode | undefined;
    const g = node?.get(keys[n - 1]) as GPUBindGroup | undefined;
    if (g) this.stats.groupHits++;
    return g;
  }

  /** Create `kernel`'s bind group of `entries` and keep it under keys[0..n). */
  create(kernel: Kernel, keys: readonly number[], n: number, entries: GPUBindGroupEntry[]): GPUBindGroup {
    if (this.groupCount >= MAX_GROUPS) {
      this.groups.clear();
      this.groupCount = 0;
    }
    const g = this.device.createBindGroup({ layout: kernel.layout, entries, label: kernel.name });
    let node = this.groups.get(kernel.id);
    if (!node) this.groups.set(kernel.id, (node = new Map()));
    for (let i = 0; i < n - 1; i++) {
      let next = node.get(keys[i]) as GroupNode | undefined;
      if (!next) node.set(keys[i], (next = new Map()));
      node = next;
    }
    node.set(keys[n - 1], g);
    this.groupCount++;
    this.stats.groupsCreated++;
    return g;
  }

  private startOver(): void {
    this.store = this.createUniformBuffer(UNIFORM_SLOTS * this.device.limits.minUniformBufferOffsetAlignment);
    this.used = 0;
    this.slots.clear();
    this.groups.clear();
    this.groupCount = 0;
  }
}

function findSlot(list: readonly UniformSlot[], words: Uint32Array, n: number): UniformSlot | undefined {
  outer: for (const s of list) {
    if (s.words.length !== n) continue;
    for (let i = 0; i < n; i++) if (s.words[i] !== words[i]) continue outer;
    return s;
  }
  return undefined;
}
