// The token-id shift (shaders/token_ids.wgsl) against the CPU, and the binding cache under it
// (src/gpu/bindingCache.ts): repeated dispatches reuse their bind group, distinct uniform values get
// distinct blocks within one submit, and a pooled buffer handed to another tensor binds right.
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { TokenIds } from '../../src/ops/tokenIds';

describe('token ids', () => {
  it('shift into a block equals (id − first) mod 2^32, odd sizes and ids below the block included', async () => {
    const gpu = await testGpu();
    const op = await TokenIds.create(gpu);
    for (const n of [1, 63, 65, 200]) {
      const ids = Uint32Array.from({ length: n }, (_, i) => (i * 7919 + n) % 151936);
      const firsts = [0, 320, 65536, 151935];
      const t = gpu.upload(ids, [n], 'u32', 'ids');
      const outs = firsts.map((_, k) => gpu.tensor([n], 'u32', `out${k}`));
      const rec = gpu.recorder();
      // One submit, four uniform values: each dispatch must see its own.
      firsts.forEach((f, k) => op.shift(rec, t, f, outs[k]));
      await rec.submit();
      for (const [k, f] of firsts.entries()) {
        expect(Array.from((await gpu.read(outs[k])) as Uint32Array)).toEqual(Array.from(ids, (id) => (id - f) >>> 0));
        outs[k].release();
      }
      t.release();
    }
  });

  it('a repeated dispatch records no new bind group or uniform block; a recycled buffer binds its new contents', async () => {
    const gpu = await testGpu();
    const op = await TokenIds.create(gpu);
    const ids = gpu.upload([10, 20, 30], [3], 'u32', 'ids');
    const out = gpu.tensor([3], 'u32', 'out');
    const run = async (first: number) => {
      const rec = gpu.recorder();
      op.shift(rec, ids, first, out);
      await rec.submit();
      return Array.from((await gpu.read(out)) as Uint32Array);
    };
    expect(await run(5)).toEqual([5, 15, 25]);
    const stats = { ...gpu.bindingCache.stats };
    expect(await run(5)).toEqual([5, 15, 25]);
    expect(gpu.bindingCache.stats.groupsCreated).toBe(stats.groupsCreated);
    expect(gpu.bindingCache.stats.uniformSlots).toBe(stats.uniformSlots);
    expect(gpu.bindingCache.stats.groupHits).toBe(stats.groupHits + 1);
    expect(await run(7)).toEqual([3, 13, 23]);
    expect(gpu.bindingCache.stats.uniformSlots).toBe(stats.uniformSlots + 1);
    // The pool hands the released buffer to the next tensor of its size class: same bind group, new data.
    ids.release();
    const again = gpu.upload([40, 50, 60], [3], 'u32', 'ids2');
    expect(again.buffer).toBe(ids.buffer);
    const rec = gpu.recorder();
    op.shift(rec, again, 5, out);
    await rec.submit();
    expect(Array.from((await gpu.read(out)) as Uint32Array)).toEqual([35, 45, 55]);
    again.release();
    out.release();
  });
});
