// The weight cache in Node (directory storage): key derivation, a model stored then read back
// with identical logits and no checkpoint read, the manifest written last (an interrupted write
// leaves no entry), damaged and partial entries ignored and rewritten, LRU eviction within the
// quota and the quota message; a required entry (picked files after a reload) that is missing is
// an error, never a read of the weight files.
import { mkdtempSync, readdirSync, rmSync, unlinkSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Gpu } from '../../src/gpu';
import { Qwen3VL } from '../../src/model/qwen3vl';
import type { ModelFiles } from '../../src/model/safetensors';
import { cacheEntryId, filesFingerprint, FORMAT_VERSION, WeightCache, WeightCacheMissError, WeightCacheQuotaError, type CacheKey, type CacheStorage } from '../../src/model/weightCache';
import { directoryStorage } from '../../src/model/weightCacheNode';
import type { ModelWeights } from '../../src/model/weights';
import { testGpu } from '../helpers/gpu';
import { modelFiles, readReference } from '../helpers/modelFixtures';

const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'weight-cache-'));
  dirs.push(d);
  return d;
}
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** Files whose safetensors reads are counted. */
function counted(files: ModelFiles): { files: ModelFiles; opened: string[] } {
  const opened: string[] = [];
  return { opened, files: { location: files.location, text: (f) => files.text(f), open: (f) => (opened.push(f), files.open(f)) } };
}

const KEY: CacheKey = { source: 'hub:org/model', revision: 'abc123', quant: 'q4' };

describe('cache keys', () => {
  it('are stable and differ in every field', async () => {
    const id = await cacheEntryId(KEY);
    expect(id).toBe(await cacheEntryId({ ...KEY }));
    expect(id.startsWith(`w${FORMAT_VERSION}-`)).toBe(true);
    const others = await Promise.all([
      cacheEntryId({ ...KEY, source: 'hub:org/other' }),
      cacheEntryId({ ...KEY, revision: 'abc124' }),
      cacheEntryId({ ...KEY, quant: 'none' }),
      cacheEntryId({ ...KEY, maxTableRows: 64 }),
    ]);
    expect(new Set([id, ...others]).size).toBe(5);
  });

  it('fingerprint picked files by name, size and content at both ends, not by order or date', async () => {
    const body = new Uint8Array(200_000).map((_, i) => i % 251);
    const f = (name: string, data: Uint8Array, lastModified = 1) => new File([data as Uint8Array<ArrayBuffer>], name, { lastModified });
    const base = await filesFingerprint([f('a.safetensors', body), f('config.json', new Uint8Array([1]))]);
    expect(await filesFingerprint([f('config.json', new Uint8Array([1]), 99), f('a.safetensors', body, 42)])).toBe(base);
    const tailChanged = body.slice();
    tailChanged[body.length - 1] ^= 1;
    const headChanged = body.slice();
    headChanged[10] ^= 1;
    const others = await Promise.all([
      filesFingerprint([f('a.safetensors', tailChanged), f('config.json', new Uint8Array([1]))]),
      filesFingerprint([f('a.safetensors', headChanged), f('config.json', new Uint8Array([1]))]),
      filesFingerprint([f('b.safetensors', body), f('config.json', new Uint8Array([1]))]),
      filesFingerprint([f('a.safetensors', body.subarray(1)), f('config.json', new Uint8Array([1]))]),
    ]);
    expect(new Set([base, ...others]).size).toBe(5);
  });
});

describe('a tiny model through the cache', () => {
  it('stores on a miss, then loads from the cache alone with identical logits; partial and damaged entries are rewritten', async () => {
    const gpu = await testGpu();
    const dir = tempDir();
    const store = new WeightCache(directoryStorage(dir));
    const cache = { store, source: 'tiny-a', revision: 'fixture' };
    const ref = await readReference('tiny-a', 'image1');
    const images = { pixelValues: ref.pixelValues!, gridThw: ref.gridThw! };

    const first = counted(modelFiles('tiny-a'));
    const cold = await Qwen3VL.load(gpu, first.files, { cache });
    expect(cold.weightSource.cached).toBe(false);
    expect(first.opened.length).toBeGreaterThan(0);
    const expected = await cold.logits(ref.inputIds, images);
    const [entry] = await store.list();
    expect(entry.key).toEqual({ source: 'tiny-a', revision: 'fixture', quant: 'q4' });
    const entryDir = join(dir, entry.id);
    expect(readdirSync(entryDir).sort()).toEqual(expect.arrayContaining(['manifest.json', 'part-0000.bin', 'used']));

    const loadWarm = async () => {
      const files = counted(modelFiles('tiny-a'));
      const progress: boolean[] = [];
      const net = await Qwen3VL.load(gpu, files.files, { cache, onProgress: (p) => progress.push(p.fromCache === true) });
      return { net, opened: files.opened, progress };
    };
    const warm = await loadWarm();
    expect(warm.net.weightSource.cached).toBe(true);
    expect(warm.opened).toEqual([]);
    expect(warm.progress.length).toBeGreaterThan(0);
    expect(warm.progress.every((x) => x)).toBe(true);
    // The tied head is the embedding table itself, as the loader builds it.
    expect(warm.net.weights.language.lmHead === warm.net.weights.language.embed).toBe(cold.weights.language.lmHead === cold.weights.language.embed);
    expect(await warm.net.logits(ref.inputIds, images)).toEqual(expected);

    // Manifest missing (a tab closed mid-write): not an entry; the next load reads the checkpoint and rewrites it.
    unlinkSync(join(entryDir, 'manifest.json'));
    expect(await store.list()).toEqual([]);
    const afterPartial = await loadWarm();
    expect(afterPartial.net.weightSource.cached).toBe(false);
    expect(afterPartial.opened.length).toBeGreaterThan(0);
    expect(readdirSync(entryDir)).toContain('manifest.json');

    // One flipped byte in a part: the hash check refuses it, and it is rewritten.
    const part = join(entryDir, 'part-0000.bin');
    const bytes = readFileSync(part);
    bytes[bytes.length >> 1] ^= 0xff;
    writeFileSync(part, bytes);
    const afterDamage = await loadWarm();
    expect(afterDamage.net.weightSource.cached).toBe(false);
    const again = await loadWarm();
    expect(again.net.weightSource.cached).toBe(true);
    expect(again.opened).toEqual([]);
    expect(await again.net.logits(ref.inputIds, images)).toEqual(expected);
  }, 600_000);
});

/** A small weights tree (the cache stores any tree of tensors), `words` u32 values in all. */
function fakeWeights(gpu: Gpu, words: number, seed: number): ModelWeights {
  const t = gpu.upload(new Uint32Array(words).map((_, i) => i * 7 + seed), [words], 'u32', `w${seed}`);
  const table = { blocks: [{ kind: 'q4', w: { codes: t, scales: t, n: 1, k: 32 }, out: 1, in: 32 }], rowStart: [0], vocab: 1, hidden: 32 };
  return { language: { embed: table, lmHead: table, layers: [], finalNorm: t }, vision: null } as unknown as ModelWeights;
}

/** Directory storage with a quota of `quota` bytes over what its entries hold, and writes that can be made to fail. */
function limitedStorage(dir: string, quota: number): CacheStorage & { failAfter: number | null } {
  const inner = directoryStorage(dir);
  const s = {
    ...inner,
    failAfter: null as number | null,
    async write(entry: string, file: string, data: Uint8Array) {
      if (s.failAfter !== null && s.failAfter-- <= 0) throw new Error('disk gone');
      return inner.write(entry, file, data);
    },
    async estimate() {
      let usage = 0;
      for (const e of await inner.entries()) for (const f of readdirSync(join(dir, e))) usage += readFileSync(join(dir, e, f)).byteLength;
      return { usage, quota };
    },
  };
  return s;
}

describe('weights required from the cache (files picked before a reload)', () => {
  it('a missing entry throws WeightCacheMissError without opening a weight file; once stored, it loads from the cache alone', async () => {
    const gpu = await testGpu();
    const store = new WeightCache(directoryStorage(tempDir()));
    const cache = { store, source: 'picked files', revision: 'content-fixture', required: true };
    const missing = counted(modelFiles('tiny-a'));
    await expect(Qwen3VL.load(gpu, missing.files, { cache })).rejects.toThrow(WeightCacheMissError);
    await expect(Qwen3VL.load(gpu, missing.files, { cache })).rejects.toThrow(/no longer holds the weights of .*pick the model's files again/);
    expect(missing.opened).toEqual([]);
    await Qwen3VL.load(gpu, modelFiles('tiny-a'), { cache: { ...cache, required: false } });
    const again = counted(modelFiles('tiny-a'));
    expect((await Qwen3VL.load(gpu, again.files, { cache })).weightSource.cached).toBe(true);
    expect(again.opened).toEqual([]);
  });
});

describe('writes and eviction', () => {
  it('an interrupted write leaves no entry (the manifest goes last), and the tree reads back with shared objects', async () => {
    const gpu = await testGpu();
    const storage = limitedStorage(tempDir(), 1 << 30);
    const store = new WeightCache(storage);
    storage.failAfter = 1; // the part goes through, the next write fails
    await expect(store.write(gpu, KEY, fakeWeights(gpu, 64, 1))).rejects.toThrow('disk gone');
    expect(await storage.entries()).toEqual([]);
    expect(await store.read(gpu, KEY)).toBeNull();
    storage.failAfter = null;
    await store.write(gpu, KEY, fakeWeights(gpu, 64, 1));
    const back = (await store.read(gpu, KEY))!;
    expect(back.language.lmHead).toBe(back.language.embed);
    const block = back.language.embed.blocks[0];
    if (block.kind !== 'q4') throw new Error('expected a 4-bit block');
    expect(block.w.codes).toBe(back.language.finalNorm);
    expect(Array.from(await gpu.read(block.w.codes))).toEqual(Array.from({ length: 64 }, (_, i) => i * 7 + 1));
  });

  it('evicts the least recently used entries to make room, and says so when the quota is too small', async () => {
    const gpu = await testGpu();
    const dir = tempDir();
    const entryBytes = 4096 * 4;
    // Room for two entries and their manifests, not three.
    const storage = limitedStorage(dir, 2.5 * entryBytes);
    const store = new WeightCache(storage);
    const key = (n: number): CacheKey => ({ ...KEY, revision: `r${n}` });
    await store.write(gpu, key(1), fakeWeights(gpu, 4096, 1));
    await new Promise((r) => setTimeout(r, 5));
    await store.write(gpu, key(2), fakeWeights(gpu, 4096, 2));
    await new Promise((r) => setTimeout(r, 5));
    expect(await store.read(gpu, key(1))).not.toBeNull(); // r1 is now the most recently used
    await store.write(gpu, key(3), fakeWeights(gpu, 4096, 3));
    expect((await store.list()).map((e) => e.key.revision)).toEqual(['r3', 'r1']);

    const tooBig = store.write(gpu, key(4), fakeWeights(gpu, 4 * 4096, 4));
    await expect(tooBig).rejects.toBeInstanceOf(WeightCacheQuotaError);
    await expect(tooBig).rejects.toThrow(/do not fit the browser's storage.*downloaded again next time/);
    // Nothing was evicted for a write that could not fit anyway.
    expect((await store.list()).map((e) => e.key.revision)).toEqual(['r3', 'r1']);
  });
});
