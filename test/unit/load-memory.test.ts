// tools/device/loadMemory.ts on tiny-a: the figures of a load from the checkpoint, of storing it in
// the weight cache and of a reload from the cache are consistent with what each reads and writes
// (the checkpoint's tensor bytes; the entry's files; the entry's bytes and no checkpoint byte).
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openCheckpoint } from '../../src/model/safetensors';
import { measureLoads } from '../../tools/device/loadMemory';
import { testGpu } from '../helpers/gpu';
import { modelDir, modelFiles } from '../helpers/modelFixtures';

const cacheDir = mkdtempSync(join(tmpdir(), 'load-memory-'));
afterAll(() => rmSync(cacheDir, { recursive: true, force: true }));

describe('loadMemory', () => {
  it('measures a checkpoint load, then a reload that reads the cache only', async () => {
    const gpu = await testGpu();
    const r = await measureLoads(gpu, modelDir('tiny-a'), cacheDir, 'q4');
    const ckpt = await openCheckpoint(modelFiles('tiny-a'));
    const [entry] = readdirSync(cacheDir);
    const size = (f: string) => statSync(join(cacheDir, entry, f)).size;
    const files = readdirSync(join(cacheDir, entry));
    const stored = files.reduce((a, f) => a + size(f), 0);
    const parts = files.filter((f) => f.startsWith('part-')).reduce((a, f) => a + size(f), 0);

    expect(r.checkpoint.cached).toBe(false);
    // Every tensor once, plus the shards' headers (a few KiB each).
    expect(r.checkpoint.checkpointBytes).toBeGreaterThanOrEqual(ckpt.totalBytes);
    expect(r.checkpoint.checkpointBytes).toBeLessThan(ckpt.totalBytes + 64 * 1024);
    expect(r.checkpoint.cacheBytes + r.checkpoint.cacheWrittenBytes).toBe(0);
    expect(r.cacheWrite.cacheWrittenBytes).toBe(stored);
    expect(r.cacheWrite.checkpointBytes).toBe(0);
    // The 4-bit language model and the bf16 vision tower (f32 on the GPU, stored packed): less than the bf16 checkpoint.
    expect(parts).toBeLessThan(0.75 * ckpt.totalBytes);

    expect(r.fromCache.cached).toBe(true);
    expect(r.fromCache.checkpointBytes).toBe(0);
    expect(r.fromCache.cacheWrittenBytes).toBeLessThan(64); // the last-use stamp only
    expect(r.fromCache.cacheBytes).toBeGreaterThanOrEqual(stored - 64);
    expect(r.fromCache.cacheBytes).toBeLessThanOrEqual(stored);

    for (const f of [r.checkpoint, r.cacheWrite, r.fromCache]) {
      expect(f.wallMs).toBeGreaterThan(0);
      expect(f.peakRss).toBeGreaterThanOrEqual(f.rssBefore);
      expect(f.peakArrayBuffers).toBeGreaterThan(0);
      expect(f.peakExternal).toBeGreaterThanOrEqual(f.peakArrayBuffers);
      if (f.rchar !== null) expect(f.rchar).toBeGreaterThanOrEqual(f.checkpointBytes + f.cacheBytes);
    }
  }, 300_000);
});
