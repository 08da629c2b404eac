// The loaded model's GPU tensors kept as bytes, so that a reload neither downloads nor quantizes
// again (OPFS in the browser, a directory in Node: src/model/weightCacheNode.ts).
//
// An entry is one folder named by its key's id (a SHA-256 of source, revision or content
// fingerprint, quantization, table layout and FORMAT_VERSION):
//   part-0000.bin ...  tensors' bytes back to back, each padded to 4 bytes, parts of ~64 MiB;
//                      an f32 tensor whose values are all bf16 (the norms and biases of a bf16
//                      checkpoint) is stored as its upper halves ("packed": "bf16"), half the
//                      bytes, and widened again on read; a bf16 tensor (the vision tower's
//                      matrices) as it is
//   manifest.json      written last: the key, every part's size and SHA-256, every tensor's
//                      (part, offset, shape, dtype, label), and the ModelWeights tree with its
//                      tensors replaced by indexes ({"$t": i}) and shared objects by {"$ref": n}
//                      (a tied LM head is the embedding table itself)
//   used               the last use (ms since the epoch), for LRU eviction
// A folder without a manifest (a tab closed mid-write) or whose parts fail their size or hash is
// not an entry: it is ignored, and removed when its key is loaded again or space is needed.
// Bump FORMAT_VERSION whenever a stored layout changes (the 4-bit format, the table split, ...).
import { Tensor, type DType, type Gpu } from '../gpu';
import type { Qwen3VLConfig } from './config';
import { WeightLoader, type LoadOptions, type Quantization } from './loader';
import type { ModelFiles } from './safetensors';
import type { ModelWeights } from './weights';

export const FORMAT_VERSION = 4;
/** Tensors are grouped into part files of about this size (a larger tensor gets a part of its own). */
const PART_BYTES = 64 * 2 ** 20;
const MANIFEST = 'manifest.json';
const USED = 'used';

/** Where entries live: folders of files. */
export interface CacheStorage {
  /** Names of the entry folders present (complete or not). */
  entries(): Promise<string[]>;
  /** The file's bytes, or null when it does not exist. */
  read(entry: string, file: string): Promise<Uint8Array | null>;
  /** Create or replace the file (the folder is created as needed); done when durable. */
  write(entry: string, file: string, data: Uint8Array): Promise<void>;
  remove(entry: string): Promise<void>;
  /** Bytes used and available to this origin (or this directory's file system); null: unknown. */
  estimate(): Promise<{ usage: number; quota: number } | null>;
}

export interface CacheKey {
  /** The repo ("Qwen/Qwen3-VL-2B-Instruct"), the served path, or "picked files". */
  source: string;
  /** A hub revision, or a content fingerprint of the files (see *Fingerprint below). */
  revision: string;
  quant: Quantization;
  /** Most rows per token-table block when the caller caps them (it changes the stored layout). */
  maxTableRows?: number;
}

export class WeightCacheQuotaError extends Error {
  constructor(readonly needed: number, readonly available: number) {
    super(
      `the model's weights (${mib(needed)}) do not fit the browser's storage for this site (${mib(available)} free after evicting older models); ` +
        'the model works but will be downloaded again next time: free disk space or clear other sites\' data',
    );
    this.name = 'WeightCacheQuotaError';
  }
}

const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;

interface TensorRecord {
  part: number;
  offset: number;
  /** The tensor's bytes on the GPU (stored: half as many when packed). */
  bytes: number;
  packed?: 'bf16';
  shape: number[];
  dtype: DType;
  label: string;
}

interface Manifest {
  format: number;
  key: CacheKey;
  createdAt: number;
  bytes: number;
  parts: { bytes: number; sha256: string }[];
  tensors: TensorRecord[];
  tree: unknown;
}

export interface CachedEntry {
  id: string;
  key: CacheKey;
  bytes: number;
  lastUsed: number;
}

const encoder = new TextEncoder();
const partName = (i: number) => `part-${String(i).padStart(4, '0')}.bin`;
const pad4 = (n: number) => Math.ceil(n / 4) * 4;

async function sha256Hex(data: Uint8Array | string): Promise<string> {
  const bytes = typeof data === 'string' ? encoder.encode(data) : data;
  const digest = await crypto.subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
}

/** The entry folder's name for `key` (stable across sessions; any field change gives another). */
export async function cacheEntryId(key: CacheKey): Promise<string> {
  const canonical = JSON.stringify([FORMAT_VERSION, key.source, key.revision, key.quant, key.maxTableRows ?? null]);
  return `w${FORMAT_VERSION}-${(await sha256Hex(canonical)).slice(0, 32)}`;
}

/**
 * A fingerprint of files a user picked: name, size, and the first and last 64 KiB of every file
 * (the safetensors header and data at both ends). Reads ~128 KiB per file; two fine-tunes of one
 * model differ there even where names, sizes and headers agree.
 */
export async function filesFingerprint(files: readonly File[]): Promise<string> {
  const SAMPLE = 64 * 1024;
  const sorted = [...files].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const digests: string[] = [];
  for (const f of sorted) {
    const head = new Uint8Array(await f.slice(0, SAMPLE).arrayBuffer());
    const tail = new Uint8Array(await f.slice(Math.max(SAMPLE, f.size - SAMPLE)).arrayBuffer());
    digests.push(`${f.name}:${f.size}:${await sha256Hex(head)}:${await sha256Hex(tail)}`);
  }
  return `content-${(await sha256Hex(digests.join('\n'))).slice(0, 32)}`;
}

/**
 * A fingerprint of served files from their small JSON files only (config.json and the shard
 * index), so that a hit fetches no safetensors at all. A changed shard under an unchanged config
 * is not noticed: a served model that changes must change its path or its config.
 */
export async function servedFingerprint(files: ModelFiles): Promise<string> {
  const parts = await Promise.all(['config.json', 'model.safetensors.index.json'].map(async (f) => `${f}:${(await files.text(f)) ?? '-'}`));
  return `served-${(await sha256Hex(parts.join('\n'))).slice(0, 32)}`;
}

/** The ModelWeights tree as JSON with tensors taken out (pre-order, so rebuild meets objects in the same order). */
function flatten(weights: ModelWeights): { tree: unknown; tensors: Tensor[] } {
  const tensors: Tensor[] = [];
  const tensorIndex = new Map<Tensor, number>();
  const objectId = new Map<object, number>();
  const walk = (v: unknown): unknown => {
    if (v instanceof Tensor) {
      if (!tensorIndex.has(v)) tensorIndex.set(v, tensors.push(v) - 1);
      return { $t: tensorIndex.get(v) };
    }
    if (v === null || typeof v !== 'object') return v;
    if (objectId.has(v)) return { $ref: objectId.get(v) };
    objectId.set(v, objectId.size);
    if (Array.isArray(v)) return v.map(walk);
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
  };
  return { tree: walk(weights), tensors };
}

function rebuild(tree: unknown, tensors: readonly Tensor[]): ModelWeights {
  const objects: object[] = [];
  const walk = (v: unknown): unknown => {
    if (v === null || typeof v !== 'object') return v;
    if (Array.isArray(v)) {
      const out: unknown[] = [];
      objects.push(out);
      for (const x of v) out.push(walk(x));
      return out;
    }
    const o = v as Record<string, unknown>;
    if ('$t' in o) return tensors[o.$t as number];
    if ('$ref' in o) return objects[o.$ref as number];
    const out: Record<string, unknown> = {};
    objects.push(out);
    for (const [k, x] of Object.entries(o)) out[k] = walk(x);
    return out;
  };
  return walk(tree) as ModelWeights;
}

/** The upper halves of f32 values that are all bf16 (low halves zero), else null. */
function packBf16(x: Float32Array): Uint8Array | null {
  const words = new Uint32Array(x.buffer, x.byteOffset, x.length);
  for (let i = 0; i < words.length; i++) if (words[i] & 0xffff) return null;
  const out = new Uint16Array(words.length);
  for (let i = 0; i < words.length; i++) out[i] = words[i] >>> 16;
  return new Uint8Array(out.buffer);
}

/** f32 values from their bf16 upper halves (`bytes` starts on a fresh buffer). */
function widenBf16(bytes: Uint8Array): Uint32Array {
  const halves = new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 2);
  const out = new Uint32Array(halves.length);
  for (let i = 0; i < halves.length; i++) out[i] = halves[i] << 16;
  return out;
}

/** Parts are stored verbatim; a wrong size or hash means a damaged entry. */
class DamagedEntryError extends Error {}

export class WeightCache {
  /** Entries being read or written by this engine: never evicted. */
  private readonly pinned = new Set<string>();

  constructor(readonly storage: CacheStorage) {}

  /** Complete entries, most recently used first. */
  async list(): Promise<CachedEntry[]> {
    const out: CachedEntry[] = [];
    for (const id of await this.storage.entries()) {
      const m = await this.manifest(id);
      if (m) out.push({ id, key: m.key, bytes: m.bytes, lastUsed: await this.lastUsed(id, m) });
    }
    return out.sort((a, b) => b.lastUsed - a.lastUsed);
  }

  async remove(id: string): Promise<void> {
    await this.storage.remove(id);
  }

  /**
   * The weights stored under `key`, uploaded into fresh pooled tensors, or null on a miss. A
   * damaged or partial entry counts as a miss and is removed.
   */
  async read(gpu: Gpu, key: CacheKey, onBytes?: (done: number, total: number) => void): Promise<ModelWeights | null> {
    const id = await cacheEntryId(key);
    const m = await this.manifest(id);
    if (!m || JSON.stringify(m.key) !== JSON.stringify(key)) {
      if ((await this.storage.entries()).includes(id)) await this.storage.remove(id);
      return null;
    }
    const limit = gpu.limits.maxStorageBufferBindingSize;
    if (m.tensors.some((t) => t.bytes > limit)) return null; // stored by a GPU with larger buffers
    this.pinned.add(id);
    const tensors: Tensor[] = [];
    try {
      let done = 0;
      for (let p = 0; p < m.parts.length; p++) {
        const bytes = await this.storage.read(id, partName(p));
        if (!bytes || bytes.byteLength !== m.parts[p].bytes || (await sha256Hex(bytes)) !== m.parts[p].sha256) throw new DamagedEntryError(partName(p));
        for (const [i, t] of m.tensors.entries()) {
          if (t.part !== p) continue;
          tensors[i] = gpu.tensor(t.shape, t.dtype, t.label);
          gpu.write(tensors[i], t.packed ? widenBf16(bytes.slice(t.offset, t.offset + t.bytes / 2)) : bytes.subarray(t.offset, t.offset + pad4(t.bytes)));
        }
        done += bytes.byteLength;
        onBytes?.(done, m.bytes);
      }
      await this.storage.write(id, USED, encoder.encode(String(Date.now())));
      return rebuild(m.tree, tensors);
    } catch (e) {
      tensors.forEach((t) => t?.release());
      if (!(e instanceof DamagedEntryError)) throw e;
      await this.storage.remove(id);
      return null;
    } finally {
      this.pinned.delete(id);
    }
  }

  /**
   * Store `weights` under `key`: parts first, the manifest last. Makes room by evicting the least
   * recently used other entries (and partial folders); throws WeightCacheQuotaError when even
   * that is not enough.
   */
  async write(gpu: Gpu, key: CacheKey, weights: ModelWeights): Promise<void> {
    const id = await cacheEntryId(key);
    const { tree, tensors } = flatten(weights);
    // Room for the tensors unpacked: what packing saves is only known once they are read back.
    const bound = tensors.reduce((a, t) => a + pad4(t.byteSize), 0);
    this.pinned.add(id);
    try {
      if ((await this.storage.entries()).includes(id)) await this.storage.remove(id);
      await this.makeRoom(bound, id);
      const records: TensorRecord[] = [];
      const parts: Manifest['parts'] = [];
      let pending: Uint8Array[] = [];
      let pendingBytes = 0;
      const flushPart = async () => {
        // A tensor alone in its part (a token table's block) is written as read back, not copied.
        const buf = pending.length === 1 && pending[0].byteLength === pendingBytes ? pending[0] : new Uint8Array(pendingBytes);
        let at = 0;
        if (buf !== pending[0]) {
          for (const b of pending) {
            buf.set(b, at);
            at += pad4(b.byteLength);
          }
        }
        await this.storage.write(id, partName(parts.length), buf);
        parts.push({ bytes: buf.byteLength, sha256: await sha256Hex(buf) });
        pending = [];
        pendingBytes = 0;
      };
      for (const t of tensors) {
        const data = await gpu.read(t);
        const packed = t.dtype === 'f32' ? packBf16(data as Float32Array) : null;
        const stored = packed ?? new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
        const size = pad4(stored.byteLength);
        if (pendingBytes > 0 && pendingBytes + size > PART_BYTES) await flushPart();
        records.push({ part: parts.length, offset: pendingBytes, bytes: t.byteSize, ...(packed ? { packed: 'bf16' as const } : {}), shape: [...t.shape], dtype: t.dtype, label: t.label });
        pending.push(stored);
        pendingBytes += size;
      }
      if (pendingBytes > 0 || parts.length === 0) await flushPart();
      const total = parts.reduce((a, p) => a + p.bytes, 0);
      const manifest: Manifest = { format: FORMAT_VERSION, key, createdAt: Date.now(), bytes: total, parts, tensors: records, tree };
      await this.storage.write(id, USED, encoder.encode(String(Date.now())));
      await this.storage.write(id, MANIFEST, encoder.encode(JSON.stringify(manifest)));
    } catch (e) {
      // Without its manifest a folder is no entry; take the parts away too.
      await this.storage.remove(id).catch(() => undefined);
      throw e;
    } finally {
      this.pinned.delete(id);
    }
  }

  private async makeRoom(needed: number, keep: string): Promise<void> {
    const est = await this.storage.estimate();
    if (!est) return;
    let free = est.quota - est.usage;
    if (free >= needed) return;
    const complete = await this.list();
    const completeIds = new Set(complete.map((e) => e.id));
    const partial = (await this.storage.entries()).filter((id) => !completeIds.has(id) && id !== keep && !this.pinned.has(id));
    const evictable = complete.filter((e) => e.id !== keep && !this.pinned.has(e.id)).reverse();
    // Evict nothing when even all of it would not be enough.
    const reachable = free + evictable.reduce((a, e) => a + e.bytes, 0);
    if (reachable < needed) throw new WeightCacheQuotaError(needed, reachable);
    for (const id of [...partial, ...evictable.map((e) => e.id)]) {
      await this.storage.remove(id);
      const now = await this.storage.estimate();
      free = now ? now.quota - now.usage : free;
      if (free >= needed) return;
    }
    throw new WeightCacheQuotaError(needed, free);
  }

  private async manifest(id: string): Promise<Manifest | null> {
    const bytes = await this.storage.read(id, MANIFEST);
    if (!bytes) return null;
    try {
      const m = JSON.parse(new TextDecoder().decode(bytes)) as Manifest;
      return m.format === FORMAT_VERSION ? m : null;
    } catch {
      return null;
    }
  }

  private async lastUsed(id: string, m: Manifest): Promise<number> {
    const bytes = await this.storage.read(id, USED);
    const t = bytes ? Number(new TextDecoder().decode(bytes)) : NaN;
    return Number.isFinite(t) ? t : m.createdAt;
  }
}

/** The origin private file system's "weight-cache" folder (browsers; also inside workers). */
export function opfsStorage(root: () => Promise<FileSystemDirectoryHandle> = () => navigator.storage.getDirectory()): CacheStorage {
  const top = async () => (await root()).getDirectoryHandle('weight-cache', { create: true });
  const isNotFound = (e: unknown) => e instanceof DOMException && (e.name === 'NotFoundError' || e.name === 'TypeMismatchError');
  return {
    async entries() {
      const out: string[] = [];
      for await (const [name, handle] of (await top()) as unknown as AsyncIterable<[string, FileSystemHandle]>) if (handle.kind === 'directory') out.push(name);
      return out;
    },
    async read(entry, file) {
      try {
        const f = await (await (await top()).getDirectoryHandle(entry)).getFileHandle(file);
        return new Uint8Array(await (await f.getFile()).arrayBuffer());
      } catch (e) {
        if (isNotFound(e)) return null;
        throw e;
      }
    },
    async write(entry, file, data) {
      const dir = await (await top()).getDirectoryHandle(entry, { create: true });
      // A writable commits on close (a swap file until then): a closed tab leaves the old file or none.
      const w = await (await dir.getFileHandle(file, { create: true })).createWritable();
      await w.write(data as Uint8Array<ArrayBuffer>);
      await w.close();
    },
    async remove(entry) {
      try {
        await (await top()).removeEntry(entry, { recursive: true });
      } catch (e) {
        if (!isNotFound(e)) throw e;
      }
    },
    async estimate() {
      const e = await navigator.storage.estimate();
      return e.quota === undefined ? null : { usage: e.usage ?? 0, quota: e.quota };
    },
  };
}

export interface CachedLoadOptions extends LoadOptions {
  /**
   * Where the checkpoint comes from; the quantization and table layout complete the key.
   * `required`: the checkpoint's weight files are not at hand (files picked before a reload), so a
   * miss throws WeightCacheMissError instead of reading them.
   */
  cache?: { store: WeightCache; source: string; revision: string; required?: boolean };
}

/** The weights had to come from the cache (their files are not at hand) and it no longer holds them. */
export class WeightCacheMissError extends Error {
  constructor(readonly source: string) {
    super(`the browser's weight cache no longer holds the weights of ${source} (evicted for another model, or the site's data was cleared): pick the model's files again`);
    this.name = 'WeightCacheMissError';
  }
}

export interface LoadedWeights {
  weights: ModelWeights;
  /** True when the weights came from the cache (no checkpoint read, nothing quantized). */
  cached: boolean;
  /** Why a miss could not be stored (the model is loaded all the same). */
  cacheMessage?: string;
}

/** The cache first (progress marked fromCache); on a miss the checkpoint, then fill the cache. */
export async function loadWeights(gpu: Gpu, files: ModelFiles, config: Qwen3VLConfig, opts: CachedLoadOptions = {}): Promise<LoadedWeights> {
  const cache = opts.cache;
  const key: CacheKey | null = cache ? { source: cache.source, revision: cache.revision, quant: opts.quant ?? 'q4', maxTableRows: opts.maxTableRows } : null;
  if (cache && key) {
    const hit = await cache.store.read(gpu, key, (bytesDone, bytesTotal) => opts.onProgress?.({ bytesDone, bytesTotal, tensor: 'weight cache', fromCache: true }));
    if (hit) return { weights: hit, cached: true };
    if (cache.required) throw new WeightCacheMissError(files.location);
  }
  const loader = await WeightLoader.create(gpu);
  const weights = await loader.load(files, config, opts);
  if (!cache || !key) return { weights, cached: false };
  try {
    await cache.store.write(gpu, key, weights);
    return { weights, cached: false };
  } catch (e) {
    return { weights, cached: false, cacheMessage: `weights not cached: ${(e as Error).message}` };
  }
}
