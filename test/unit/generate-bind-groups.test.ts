// Outside the trainer's phases (the playground, an eval), each generation and each image's
// features take their buffers from the pool in creation order (BufferPool.reorder): a call like
// the last gets the same buffers and finds the bind groups it made then, where popping the free
// lists in whatever order the last call released them made tens a call on this small model (and
// hundreds on the 2B) again.
import { describe, expect, it } from 'vitest';
import { randomModel } from '../helpers/alignedModel';
import { testGpu } from '../helpers/gpu';

describe('bind groups of repeated calls', () => {
  it('the third generation of a prompt with an image, and a second image encoding, make no bind group', async () => {
    const gpu = await testGpu();
    const model = await randomModel(gpu, { maxLogitRows: 4 });
    // A 4x4 grid of patches (3·2·16·16 values each) merged into 4 image tokens (id 500).
    const image = { pixelValues: Float32Array.from({ length: 16 * 1536 }, (_, i) => Math.sin(i)), gridThw: [1, 4, 4] as [number, number, number], key: 'a' };
    const inputIds = Int32Array.from([1, 2, 502, 500, 500, 500, 500, 503, 7, 8, 9]);
    const made = async (f: () => Promise<unknown>) => {
      const before = gpu.bindingCache.stats.groupsCreated;
      await f();
      return gpu.bindingCache.stats.groupsCreated - before;
    };
    const generation = () => {
      model.visionCache.clear();
      return model.generate({ id: 'p', inputIds, images: [image] }, 4, { temperature: 1, topP: 1, topK: 0, seed: 5, maxNewTokens: 6 }, { stopIds: [] });
    };
    const encoding = async () => {
      model.visionCache.clear();
      const v = await model.encodeImages(inputIds, [image]);
      for (const t of [v.rows, v.embeds, ...v.deepstack]) t.release();
    };
    expect(await made(generation)).toBeGreaterThan(0);
    await made(generation);
    expect(await made(generation)).toBe(0);
    await made(encoding);
    expect(await made(encoding)).toBe(0);
  }, 600_000);
});
