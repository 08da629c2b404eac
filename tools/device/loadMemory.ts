// Host memory and bytes read of loading a model folder as the CLI loads it (Qwen3VL.load at 4 bits
// by default): from the checkpoint, then storing the weights in the weight cache, then a reload
// served by the cache. Prints one JSON line: per phase the wall time, the peak RSS and peak
// arrayBuffers/external (absolute, sampled every 10 ms: garbage not yet collected counts), the RSS
// before it, the checkpoint and cache bytes read (and written) through the engine, and the
// process's read bytes from /proc/self/io.
// On a discrete GPU the weights live in device memory, so RSS is the loader's own footprint; on
// software Vulkan (lavapipe) it includes the weights.
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/loadMemory.mjs --model DIR [--quant q4|none] [--cache-dir DIR]
// The cache goes to a fresh temporary folder (removed afterwards) unless --cache-dir is given.
import { mkdtemp, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Tensor, type Gpu } from '../../src/gpu';
import type { Quantization } from '../../src/model/loader';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { nodeDirFiles, type ModelFiles } from '../../src/model/safetensors';
import { servedFingerprint, WeightCache, type CacheStorage } from '../../src/model/weightCache';
import { directoryStorage } from '../../src/model/weightCacheNode';
import { createNodeGpu } from '../../src/node/gpu';

export interface LoadFigures {
  /** Whether the weights came from the weight cache. */
  cached: boolean;
  wallMs: number;
  rssBefore: number;
  peakRss: number;
  peakArrayBuffers: number;
  peakExternal: number;
  /** Tensor bytes read from the checkpoint's safetensors (headers included). */
  checkpointBytes: number;
  /** Bytes read from the weight cache's files. */
  cacheBytes: number;
  /** Bytes written to the weight cache's files. */
  cacheWrittenBytes: number;
  /** /proc/self/io: bytes the process read through system calls (rchar) and from the block device (read_bytes); null off Linux. */
  rchar: number | null;
  diskReadBytes: number | null;
}

export interface LoadMemoryReport {
  model: string;
  quant: Quantization;
  /** The checkpoint through the loader (no cache involved). */
  checkpoint: LoadFigures;
  /** Storing those weights in the weight cache (read back from the GPU, hashed, written). */
  cacheWrite: Omit<LoadFigures, 'cached'>;
  /** The reload, served by the cache. */
  fromCache: LoadFigures;
}

function procIo(): { rchar: number; readBytes: number } | null {
  try {
    const text = readFileSync('/proc/self/io', 'utf8');
    const field = (k: string) => Number(new RegExp(`^${k}: (\\d+)$`, 'm').exec(text)?.[1]);
    return { rchar: field('rchar'), readBytes: field('read_bytes') };
  } catch {
    return null;
  }
}

/** The model folder's files, with the bytes read through them counted. */
function countedFiles(files: ModelFiles, count: { bytes: number }): ModelFiles {
  return {
    location: files.location,
    text: (f) => files.text(f),
    async open(f) {
      const src = await files.open(f);
      return {
        name: src.name,
        size: () => src.size(),
        async read(offset, length, signal) {
          const b = await src.read(offset, length, signal);
          count.bytes += b.byteLength;
          return b;
        },
      };
    },
  };
}

function countedStorage(storage: CacheStorage, count: { read: number; written: number }): CacheStorage {
  return {
    entries: () => storage.entries(),
    async read(entry, file) {
      const b = await storage.read(entry, file);
      count.read += b?.byteLength ?? 0;
      return b;
    },
    async write(entry, file, data) {
      count.written += data.byteLength;
      await storage.write(entry, file, data);
    },
    remove: (entry) => storage.remove(entry),
    estimate: () => storage.estimate(),
  };
}

/** Every tensor of the model's weights back to the pool, and the pool's memory back to the device. */
function releaseWeights(gpu: Gpu, model: Qwen3VL): void {
  const seen = new Set<unknown>();
  const walk = (v: unknown): void => {
    if (v === null || typeof v !== 'object' || seen.has(v)) return;
    seen.add(v);
    if (v instanceof Tensor) v.release();
    else for (const x of Object.values(v)) walk(x);
  };
  walk(model.weights);
  gpu.pool.trim();
}

/** Run `fn`, sampling the process's memory every 10 ms and counting what it reads. */
async function phase<T>(gpu: Gpu, fn: (counts: Counts) => Promise<T>): Promise<{ result: T; figures: Omit<LoadFigures, 'cached'> }> {
  const counts: Counts = { checkpoint: { bytes: 0 }, cache: { read: 0, written: 0 } };
  const io0 = procIo();
  const m0 = process.memoryUsage();
  const peak = { rss: m0.rss, arrayBuffers: m0.arrayBuffers, external: m0.external };
  const sample = () => {
    const m = process.memoryUsage();
    peak.rss = Math.max(peak.rss, m.rss);
    peak.arrayBuffers = Math.max(peak.arrayBuffers, m.arrayBuffers);
    peak.external = Math.max(peak.external, m.external);
  };
  const timer = setInterval(sample, 10);
  const t0 = performance.now();
  try {
    const result = await fn(counts);
    await gpu.sync();
    const wallMs = performance.now() - t0;
    sample();
    const io1 = procIo();
    return {
      result,
      figures: {
        wallMs,
        rssBefore: m0.rss,
        peakRss: peak.rss,
        peakArrayBuffers: peak.arrayBuffers,
        peakExternal: peak.external,
        checkpointBytes: counts.checkpoint.bytes,
        cacheBytes: counts.cache.read,
        cacheWrittenBytes: counts.cache.written,
        rchar: io0 && io1 ? io1.rchar - io0.rchar : null,
        diskReadBytes: io0 && io1 ? io1.readBytes - io0.readBytes : null,
      },
    };
  } finally {
    clearInterval(timer);
  }
}

interface Counts {
  checkpoint: { bytes: number };
  cache: { read: number; written: number };
}

/**
 * Load `dir` from its checkpoint (no cache: the loader alone), store the weights in the weight
 * cache in `cacheDir`, then load again through the cache; the figures of the three.
 */
export async function measureLoads(gpu: Gpu, dir: string, cacheDir: string, quant: Quantization = 'q4'): Promise<LoadMemoryReport> {
  const files = nodeDirFiles(dir);
  const storage = directoryStorage(cacheDir);
  const revision = await servedFingerprint(files);
  const first = await phase(gpu, (c) => Qwen3VL.load(gpu, countedFiles(files, c.checkpoint), { quant, maxLogitRows: 1 }));
  const write = await phase(gpu, (c) => new WeightCache(countedStorage(storage, c.cache)).write(gpu, { source: files.location, revision, quant }, first.result.weights));
  releaseWeights(gpu, first.result);
  const second = await phase(gpu, (c) =>
    Qwen3VL.load(gpu, countedFiles(files, c.checkpoint), { quant, maxLogitRows: 1, cache: { store: new WeightCache(countedStorage(storage, c.cache)), source: files.location, revision } }),
  );
  releaseWeights(gpu, second.result);
  return {
    model: dir,
    quant,
    checkpoint: { cached: false, ...first.figures },
    cacheWrite: write.figures,
    fromCache: { cached: second.result.weightSource.cached, ...second.figures },
  };
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const opt = (name: string) => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const dir = opt('model');
  if (!dir) throw new Error('usage: loadMemory --model DIR [--quant q4|none] [--cache-dir DIR] [--driver lavapipe]');
  const quant = (opt('quant') ?? 'q4') as Quantization;
  if (quant !== 'q4' && quant !== 'none') throw new Error(`--quant must be 'q4' or 'none', got '${quant}'`);
  const given = opt('cache-dir');
  const cacheDir = given ?? (await mkdtemp(join(tmpdir(), 'vlrl-load-memory-')));
  const gpu = await createNodeGpu({ driver: opt('driver') });
  try {
    console.log(JSON.stringify({ device: gpu.adapter.name, ...(await measureLoads(gpu, dir, cacheDir, quant)) }));
  } finally {
    if (!given) await rm(cacheDir, { recursive: true, force: true });
    gpu.destroy();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(
    () => process.exit(0),
    (e) => {
      console.error(e);
      process.exit(1);
    },
  );
}
