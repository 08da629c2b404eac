import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { randNormal } from '../helpers/reference';
import { createLoraParamSet, releaseLoraParams, type LoraSpec } from '../../src/ops/loraParams';
import type { Gpu } from '../../src/gpu';

const SPECS: LoraSpec[] = [
  { name: 'a', in: 3, out: 5, r: 2, alpha: 4 },
  { name: 'b', in: 100, out: 7, r: 8, alpha: 16 },
  { name: 'c', in: 1, out: 1, r: 1, alpha: 1 },
];

/** Byte ranges [start, end) of every tensor of the set. */
function ranges(params: ReturnType<typeof createLoraParamSet>) {
  return params.flatMap((p) => [p.A, p.B, p.dA, p.dB]).map((t) => ({ t, start: t.byteOffset, end: t.byteOffset + t.byteSize }));
}

describe('createLoraParamSet', () => {
  it('packs A/B and dA/dB as aligned, disjoint views of the specs’ shapes, one buffer per role', async () => {
    const gpu = await testGpu();
    const set = createLoraParamSet(gpu, SPECS);
    const align = gpu.limits.minStorageBufferOffsetAlignment;
    set.forEach((p, i) => {
      expect(p.name).toBe(SPECS[i].name);
      expect([p.A.shape, p.B.shape, p.dA.shape, p.dB.shape]).toEqual([[p.r, p.in], [p.out, p.r], [p.r, p.in], [p.out, p.r]]);
    });
    const params = new Set(set.flatMap((p) => [p.A.buffer, p.B.buffer]));
    const grads = new Set(set.flatMap((p) => [p.dA.buffer, p.dB.buffer]));
    expect([params.size, grads.size]).toEqual([1, 1]);
    expect(params.has([...grads][0])).toBe(false);
    const all = ranges(set);
    for (const r of all) expect(r.start % align, `${r.t.label} offset`).toBe(0);
    for (const a of all) for (const b of all) if (a !== b && a.t.buffer === b.t.buffer) expect(a.end <= b.start || b.end <= a.start, `${a.t.label} / ${b.t.label}`).toBe(true);
    // Each view holds its own values.
    const values = set.map((p, i) => randNormal(p.A.numel, i));
    set.forEach((p, i) => gpu.write(p.A, values[i]));
    for (const [i, p] of set.entries()) expect(await gpu.readF32(p.A)).toEqual(values[i]);
    set.forEach(releaseLoraParams);
  });

  it('gives its buffers back to the pool with the last view released, once', async () => {
    const gpu = await testGpu();
    const inUse = gpu.pool.stats.inUse;
    const set = createLoraParamSet(gpu, SPECS);
    expect(gpu.pool.stats.inUse).toBeGreaterThan(inUse);
    set.slice(1).forEach(releaseLoraParams);
    set[1].A.release(); // released twice: counted once
    expect(gpu.pool.stats.inUse, 'a view is still live').toBeGreaterThan(inUse);
    releaseLoraParams(set[0]);
    expect(gpu.pool.stats.inUse).toBe(inUse);
  });

  it('starts another buffer where one would pass the storage binding limit', async () => {
    const real = await testGpu();
    const limits = new Proxy(real.limits, { get: (t, k) => (k === 'maxStorageBufferBindingSize' ? 4096 : t[k as keyof GPUSupportedLimits]) });
    const gpu = Object.create(real, { limits: { value: limits } }) as Gpu;
    const set = createLoraParamSet(gpu, SPECS);
    // b's A is 8·100 floats = 3200 bytes: a and b's A do not fit 4096 together.
    const buffers = [...new Set(set.flatMap((p) => [p.A.buffer, p.B.buffer]))];
    expect(buffers.length).toBeGreaterThan(1);
    for (const r of ranges(set)) expect(r.end, `${r.t.label} within the limit`).toBeLessThanOrEqual(4096);
    set.forEach(releaseLoraParams);
  });
});
