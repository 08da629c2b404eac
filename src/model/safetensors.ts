// Safetensors: an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
// shape and [begin, end) byte range in the data section, then the data. This module validates
// the header, streams tensors one by one from any ByteSource (a URL, a picked File, a local path),
// and opens sharded checkpoints through model.safetensors.index.json.
import { DTYPE_BYTES, isSafetensorsDtype, type SafetensorsDtype } from './dtype';

/** Random access to a file's bytes; `read` returns exactly `length` bytes or throws. */
export interface ByteSource {
  readonly name: string;
  size(): Promise<number>;
  read(offset: number, length: number, signal?: AbortSignal): Promise<Uint8Array>;
}

/** The files of one model (a hub repo at a revision, a local folder, the files a user picked). */
export interface ModelFiles {
  /** Where the files come from, for messages: "Qwen/Qwen3-VL-2B-Instruct@main", a path... */
  readonly location: string;
  /** A source for `file`; a missing file may only be noticed on the first read (MissingFileError). */
  open(file: string): Promise<ByteSource>;
  /** The file's text, or null when it does not exist. */
  text(file: string): Promise<string | null>;
}

export class SafetensorsError extends Error {
  constructor(readonly file: string, detail: string) {
    super(`${file}: ${detail}`);
    this.name = new.target.name;
  }
}

/** The file ends before its header or its data does. */
export class TruncatedFileError extends SafetensorsError {}

/** A file the model needs is not there. */
export class MissingFileError extends Error {
  constructor(readonly file: string, readonly location: string, detail = '') {
    super(`${file} not found in ${location}${detail ? `: ${detail}` : ''}`);
    this.name = new.target.name;
  }
}

/** A float tensor holds NaN or ±Infinity: a diverged or corrupted model, refused at load. */
export class NonFiniteWeightError extends SafetensorsError {}

/**
 * Index of the first element of a float tensor's little-endian bytes whose exponent bits are all
 * ones (NaN or ±Infinity), or -1; integer dtypes are never non-finite. Reads bytes, so any alignment works.
 */
export function firstNonFiniteElement(bytes: Uint8Array, dtype: SafetensorsDtype): number {
  const mask = dtype === 'F32' ? [0x7f800000, 0x7f800000] : dtype === 'BF16' ? [0x7f80, 0x7f800000] : dtype === 'F16' ? [0x7c00, 0x7c000000] : null;
  if (mask === null) return -1;
  // Whole words when aligned (a model's gigabytes): a clean tensor returns without the byte loop.
  if (bytes.byteOffset % 4 === 0 && bytes.byteLength % 4 === 0) {
    const words = new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
    const [lo, hi] = mask;
    let dirty = false;
    for (let i = 0; i < words.length; i++) {
      const w = words[i];
      if ((w & lo) === lo || (w & hi) === hi) {
        dirty = true;
        break;
      }
    }
    if (!dirty) return -1;
  }
  if (dtype === 'F32') {
    for (let i = 3; i < bytes.length; i += 4) if ((bytes[i] & 0x7f) === 0x7f && (bytes[i - 1] & 0x80) === 0x80) return (i - 3) / 4;
  } else if (dtype === 'BF16') {
    for (let i = 1; i < bytes.length; i += 2) if ((bytes[i] & 0x7f) === 0x7f && (bytes[i - 1] & 0x80) === 0x80) return (i - 1) / 2;
  } else if (dtype === 'F16') {
    for (let i = 1; i < bytes.length; i += 2) if ((bytes[i] & 0x7c) === 0x7c) return (i - 1) / 2;
  }
  return -1;
}

/** model.safetensors.index.json names a shard that is not there. */
export class MissingShardError extends MissingFileError {}

export interface TensorInfo {
  name: string;
  dtype: SafetensorsDtype;
  shape: number[];
  /** Absolute byte offset of the tensor's data in the file. */
  offset: number;
  byteLength: number;
}

export interface SafetensorsHeader {
  file: string;
  /** Tensors in file order (by offset). */
  tensors: TensorInfo[];
  metadata: Record<string, string>;
  /** Where the data section starts (8 + header length). */
  dataOffset: number;
  fileSize: number;
}

// The format's own cap on the header; a larger length means a corrupt or foreign file.
const MAX_HEADER_BYTES = 100_000_000;

/** Parse and validate the header; `fileSize` is the whole file's size in bytes. */
export function parseHeader(file: string, prefix: Uint8Array, headerBytes: Uint8Array, fileSize: number): SafetensorsHeader {
  const n = Number(new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true));
  const dataOffset = 8 + n;
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(headerBytes));
  } catch (e) {
    throw new SafetensorsError(file, `header is not valid JSON (${(e as Error).message})`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new SafetensorsError(file, 'header is not a JSON object');
  const dataBytes = fileSize - dataOffset;
  let metadata: Record<string, string> = {};
  const tensors: TensorInfo[] = [];
  for (const [name, entry] of Object.entries(json as Record<string, unknown>)) {
    if (name === '__metadata__') {
      metadata = (entry ?? {}) as Record<string, string>;
      continue;
    }
    const e = entry as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    if (typeof e?.dtype !== 'string' || !isSafetensorsDtype(e.dtype)) {
      throw new SafetensorsError(file, `tensor '${name}' has dtype ${JSON.stringify(e?.dtype)}; supported: ${Object.keys(DTYPE_BYTES).join(', ')}`);
    }
    const shape = e.shape;
    if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0)) {
      throw new SafetensorsError(file, `tensor '${name}' has an invalid shape ${JSON.stringify(shape)}`);
    }
    const offsets = e.data_offsets;
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isInteger(o) && o >= 0) || offsets[1] < offsets[0]) {
      throw new SafetensorsError(file, `tensor '${name}' has invalid data_offsets ${JSON.stringify(offsets)}`);
    }
    const [begin, end] = offsets as [number, number];
    const expected = (shape as number[]).reduce((a, b) => a * b, 1) * DTYPE_BYTES[e.dtype];
    if (end - begin !== expected) {
      throw new SafetensorsError(file, `tensor '${name}' ${e.dtype}[${shape.join(', ')}] needs ${expected} bytes, but data_offsets span ${end - begin}`);
    }
    if (end > dataBytes) {
      throw new TruncatedFileError(file, `tensor '${name}' ends at data byte ${end}, but the file holds only ${Math.max(0, dataBytes)} data bytes (file size ${fileSize}): the file is truncated`);
    }
    tensors.push({ name, dtype: e.dtype, shape: shape as number[], offset: dataOffset + begin, byteLength: end - begin });
  }
  tensors.sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < tensors.length; i++) {
    const prev = tensors[i - 1];
    if (tensors[i].offset < prev.offset + prev.byteLength) throw new SafetensorsError(file, `tensors '${prev.name}' and '${tensors[i].name}' overlap`);
  }
  return { file, tensors, metadata, dataOffset, fileSize };
}

/** Read and validate a file's header (two small reads). */
export async function readHeader(source: ByteSource, signal?: AbortSignal): Promise<SafetensorsHeader> {
  const fileSize = await source.size();
  if (fileSize < 8) throw new TruncatedFileError(source.name, `${fileSize} bytes is shorter than the 8-byte header length`);
  const prefix = await source.read(0, 8, signal);
  const n = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true);
  if (n > BigInt(MAX_HEADER_BYTES)) throw new SafetensorsError(source.name, `header length ${n} is over 100 MB: not a safetensors file`);
  if (8 + Number(n) > fileSize) {
    throw new TruncatedFileError(source.name, `header declares ${n} bytes, but the file has only ${fileSize - 8} after the length: the file is truncated`);
  }
  return parseHeader(source.name, prefix, await source.read(8, Number(n), signal), fileSize);
}

export interface Progress {
  /** Tensor bytes read so far and in all (headers not counted). */
  bytesDone: number;
  bytesTotal: number;
  file: string;
  tensor: string;
}

export interface StreamOptions {
  onProgress?: (p: Progress) => void;
  signal?: AbortSignal;
  /** Large tensors are read in pieces of this size, so progress moves during them. */
  chunkBytes?: number;
  /** Only these tensors (by checkpoint name); all when omitted. */
  names?: ReadonlySet<string>;
}

async function readChunked(
  source: ByteSource,
  info: TensorInfo,
  chunk: number,
  signal: AbortSignal | undefined,
  onChunk: (n: number) => void,
): Promise<Uint8Array> {
  if (info.byteLength <= chunk) {
    const bytes = await source.read(info.offset, info.byteLength, signal);
    onChunk(info.byteLength);
    return bytes;
  }
  const out = new Uint8Array(info.byteLength);
  for (let done = 0; done < info.byteLength; ) {
    const n = Math.min(chunk, info.byteLength - done);
    out.set(await source.read(info.offset + done, n, signal), done);
    done += n;
    onChunk(n);
  }
  return out;
}

/** A shard-aware tensor entry. */
export interface CheckpointTensor extends TensorInfo {
  file: string;
}

export interface Checkpoint {
  location: string;
  /** Files in order: one for a single-file checkpoint, the shards otherwise. */
  files: string[];
  tensors: Map<string, CheckpointTensor>;
  totalBytes: number;
  /** Tensors one at a time, file by file in offset order; only one tensor's bytes are held. */
  stream(options?: StreamOptions): AsyncGenerator<{ tensor: CheckpointTensor; bytes: Uint8Array }>;
  read(name: string, signal?: AbortSignal): Promise<Uint8Array>;
  /** Rows [row, row + rows) of a tensor (along its first dimension), checked finite: a large
   * tensor read piece by piece, so that no more than a piece is ever held. */
  readRows(name: string, row: number, rows: number, signal?: AbortSignal): Promise<Uint8Array>;
}

const INDEX = 'model.safetensors.index.json';
const SINGLE = 'model.safetensors';

/** A shard named by the index: a plain file name inside the model folder, never a path out of it ('../x', '/x'). */
function shardName(tensor: string, file: unknown): string {
  if (typeof file !== 'string' || file === '') throw new SafetensorsError(INDEX, `weight_map gives tensor '${tensor}' the shard ${JSON.stringify(file)}, not a file name`);
  const parts = file.split(/[\\/]/);
  if (file.startsWith('/') || /^[A-Za-z]:/.test(file) || parts.some((p) => p === '..' || p === '.' || p === '')) {
    throw new SafetensorsError(INDEX, `weight_map places tensor '${tensor}' in '${file}', outside the model folder: shard names must be file names in it`);
  }
  return file;
}
const DEFAULT_CHUNK = 16 * 2 ** 20;

/**
 * Open a checkpoint: the shards of model.safetensors.index.json when it exists, else
 * model.safetensors. All headers are read and checked up front (a missing shard, a truncated
 * file, a tensor the index places in a shard that lacks it), before any tensor data.
 */
export async function openCheckpoint(files: ModelFiles, signal?: AbortSignal): Promise<Checkpoint> {
  const indexText = await files.text(INDEX);
  let shardOf: Map<string, string> | null = null;
  let shardNames: string[];
  if (indexText !== null) {
    let weightMap: unknown;
    try {
      weightMap = (JSON.parse(indexText) as { weight_map?: unknown }).weight_map;
    } catch (e) {
      throw new SafetensorsError(INDEX, `not valid JSON (${(e as Error).message})`);
    }
    if (typeof weightMap !== 'object' || weightMap === null) throw new SafetensorsError(INDEX, 'has no weight_map');
    shardOf = new Map(Object.entries(weightMap as Record<string, unknown>).map(([name, file]) => [name, shardName(name, file)]));
    shardNames = [...new Set(shardOf.values())].sort();
  } else {
    shardNames = [SINGLE];
  }
  const sources = new Map<string, ByteSource>();
  const tensors = new Map<string, CheckpointTensor>();
  for (const file of shardNames) {
    let source: ByteSource;
    let header: SafetensorsHeader;
    try {
      source = await files.open(file);
      header = await readHeader(source, signal);
    } catch (e) {
      if (e instanceof MissingFileError && shardOf !== null) {
        const example = [...shardOf].find(([, f]) => f === file)?.[0];
        throw new MissingShardError(file, files.location, `${INDEX} places ${example ? `'${example}' and others` : 'tensors'} in it`);
      }
      if (e instanceof MissingFileError) throw new MissingFileError(SINGLE, files.location, `no ${INDEX} either: is this a safetensors checkpoint?`);
      throw e;
    }
    sources.set(file, source);
    for (const t of header.tensors) {
      if (tensors.has(t.name)) throw new SafetensorsError(file, `tensor '${t.name}' is also in ${tensors.get(t.name)!.file}`);
      tensors.set(t.name, { ...t, file });
    }
  }
  if (shardOf !== null) {
    for (const [name, file] of shardOf) {
      const t = tensors.get(name);
      if (!t) throw new SafetensorsError(file, `${INDEX} places tensor '${name}' in this shard, but its header lacks it`);
      if (t.file !== file) throw new SafetensorsError(INDEX, `places '${name}' in ${file}, but it is in ${t.file}`);
    }
  }
  const totalBytes = [...tensors.values()].reduce((a, t) => a + t.byteLength, 0);

  async function* stream(options: StreamOptions = {}): AsyncGenerator<{ tensor: CheckpointTensor; bytes: Uint8Array }> {
    const chosen = [...tensors.values()].filter((t) => !options.names || options.names.has(t.name));
    const total = options.names ? chosen.reduce((a, t) => a + t.byteLength, 0) : totalBytes;
    let done = 0;
    for (const file of shardNames) {
      const source = sources.get(file)!;
      for (const t of chosen.filter((c) => c.file === file).sort((a, b) => a.offset - b.offset)) {
        const bytes = await readChunked(source, t, options.chunkBytes ?? DEFAULT_CHUNK, options.signal, (n) => {
          done += n;
          options.onProgress?.({ bytesDone: done, bytesTotal: total, file, tensor: t.name });
        });
        const bad = firstNonFiniteElement(bytes, t.dtype);
        if (bad >= 0) throw new NonFiniteWeightError(file, `tensor '${t.name}' ${t.dtype}[${t.shape.join(', ')}] holds a value that is not finite (NaN or Infinity) at element ${bad}: the model's weights are corrupt or diverged`);
        yield { tensor: t, bytes };
      }
    }
  }

  return {
    location: files.location,
    files: shardNames,
    tensors,
    totalBytes,
    stream,
    async read(name, readSignal) {
      const t = tensors.get(name);
      if (!t) throw new MissingFileError(`tensor '${name}'`, files.location);
      return sources.get(t.file)!.read(t.offset, t.byteLength, readSignal);
    },
    async readRows(name, row, rows, readSignal) {
      const t = tensors.get(name);
      if (!t) throw new MissingFileError(`tensor '${name}'`, files.location);
      const all = t.shape[0] ?? 1;
      if (!(Number.isInteger(row) && Number.isInteger(rows) && row >= 0 && rows > 0 && row + rows <= all)) {
        throw new SafetensorsError(t.file, `rows [${row}, ${row + rows}) of tensor '${name}' are outside its ${all}`);
      }
      const rowBytes = t.byteLength / all;
      const bytes = await sources.get(t.file)!.read(t.offset + row * rowBytes, rows * rowBytes, readSignal);
      const bad = firstNonFiniteElement(bytes, t.dtype);
      if (bad >= 0) {
        const at = bad + (row * rowBytes) / DTYPE_BYTES[t.dtype];
        throw new NonFiniteWeightError(t.file, `tensor '${name}' ${t.dtype}[${t.shape.join(', ')}] holds a value that is not finite (NaN or Infinity) at element ${at}: the model's weights are corrupt or diverged`);
      }
      return bytes;
    },
  };
}

/** A File or Blob the user picked. */
export function blobSource(blob: Blob, name = (blob as File).name ?? 'blob'): ByteSource {
  return {
    name,
    size: async () => blob.size,
    async read(offset, length) {
      if (offset + length > blob.size) throw new TruncatedFileError(name, `read of ${length} bytes at ${offset} runs past the end (${blob.size} bytes)`);
      return new Uint8Array(await blob.slice(offset, offset + length).arrayBuffer());
    },
  };
}

/** The files a user picked (an <input type=file multiple> or a dropped folder), matched by name. */
export function pickedFiles(picked: Iterable<File>, location = 'the picked files'): ModelFiles {
  const byName = new Map<string, File>();
  for (const f of picked) byName.set(f.name, f);
  return {
    location,
    async open(file) {
      const f = byName.get(file);
      if (!f) throw new MissingFileError(file, location);
      return blobSource(f, file);
    },
    async text(file) {
      const f = byName.get(file);
      return f ? f.text() : null;
    },
  };
}

/** A local file in Node (fs is imported only when called, so browser bundles never need it). */
export async function nodeFileSource(path: string): Promise<ByteSource> {
  const fs = await import('node:fs/promises');
  let size: number;
  try {
    size = (await fs.stat(path)).size;
  } catch {
    throw new MissingFileError(path, 'the local file system');
  }
  return {
    name: path,
    size: async () => size,
    async read(offset, length) {
      if (offset + length > size) throw new TruncatedFileError(path, `read of ${length} bytes at ${offset} runs past the end (${size} bytes)`);
      const handle = await fs.open(path, 'r');
      try {
        const out = new Uint8Array(length);
        let done = 0;
        while (done < length) {
          const { bytesRead } = await handle.read(out, done, length - done, offset + done);
          if (bytesRead === 0) throw new TruncatedFileError(path, `file ended at byte ${offset + done} while reading`);
          done += bytesRead;
        }
        return out;
      } finally {
        await handle.close();
      }
    },
  };
}

/** A local model folder in Node. */
export function nodeDirFiles(dir: string): ModelFiles {
  const join = (f: string) => `${dir.replace(/\/+$/, '')}/${f}`;
  return {
    location: dir,
    async open(file) {
      try {
        return await nodeFileSource(join(file));
      } catch (e) {
        if (e instanceof MissingFileError) throw new MissingFileError(file, dir);
        throw e;
      }
    },
    async text(file) {
      const fs = await import('node:fs/promises');
      try {
        return await fs.readFile(join(file), 'utf8');
      } catch {
        return null;
      }
    },
  };
}

/** Read a whole single-file safetensors source into named tensors (small files: fixtures, inputs). */
export async function readAllTensors(source: ByteSource): Promise<Map<string, { info: TensorInfo; bytes: Uint8Array }>> {
  const header = await readHeader(source);
  const out = new Map<string, { info: TensorInfo; bytes: Uint8Array }>();
  for (const info of header.tensors) out.set(info.name, { info, bytes: await source.read(info.offset, info.byteLength) });
  return out;
}

export interface TensorToWrite {
  name: string;
  dtype: SafetensorsDtype;
  shape: number[];
  data: Uint8Array;
}

/** Serialize tensors to safetensors bytes (header padded to 8 bytes, as the Python library does). */
export function serializeSafetensors(tensors: TensorToWrite[], metadata?: Record<string, string>): Uint8Array<ArrayBuffer> {
  const header: Record<string, unknown> = {};
  if (metadata) header.__metadata__ = metadata;
  let offset = 0;
  for (const t of tensors) {
    const need = t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype];
    if (need !== t.data.byteLength) throw new SafetensorsError(t.name, `${t.dtype}[${t.shape}] needs ${need} bytes, got ${t.data.byteLength}`);
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + need] };
    offset += need;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + new TextEncoder().encode(json).length) % 8)) % 8);
  const headerBytes = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + headerBytes.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(headerBytes.length), true);
  out.set(headerBytes, 8);
  let at = 8 + headerBytes.length;
  for (const t of tensors) {
    out.set(t.data, at);
    at += t.data.byteLength;
  }
  return out;
}
