// Gpu.collectGarbage: a full collection of the host's heap at points where the GPU has work queued,
// only once the heap has grown by the threshold since the last; none where the runtime lends no
// collector (browsers). In Node the collector is V8's own (createNodeGpu).
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import type { Gpu } from '../../src/gpu';

describe('the host collector', () => {
  it("Node's Gpu carries V8's collector, which frees unreachable memory", async () => {
    const gpu = await testGpu();
    const c = gpu.hostCollector!;
    expect(c).not.toBeNull();
    let garbage: number[][] | null = Array.from({ length: 2000 }, () => Array.from({ length: 1000 }, (_, i) => i + 0.5));
    const held = c.heapUsed();
    garbage = null;
    c.collect();
    expect(garbage).toBeNull();
    expect(c.heapUsed()).toBeLessThan(held - 8 * 2 ** 20);
  });

  it('collects once the heap has grown by 32 MiB since the last collection, not before', async () => {
    const real = await testGpu();
    let heap = 100 * 2 ** 20;
    let collections = 0;
    const gpu = Object.create(real, { heapAfterCollect: { value: 0, writable: true } }) as Gpu;
    gpu.hostCollector = {
      heapUsed: () => heap,
      collect: () => {
        collections++;
        heap = 40 * 2 ** 20;
      },
    };
    gpu.collectGarbage();
    expect(collections).toBe(1);
    heap += 31 * 2 ** 20;
    gpu.collectGarbage();
    expect(collections).toBe(1);
    heap += 2 * 2 ** 20;
    gpu.collectGarbage();
    expect(collections).toBe(2);
    gpu.hostCollector = null;
    heap += 64 * 2 ** 20;
    gpu.collectGarbage();
    expect(collections).toBe(2);
  });
});
