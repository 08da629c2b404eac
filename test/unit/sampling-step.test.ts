// The sampler's step read from the GPU (a u32 [1] tensor, as generate records steps ahead) draws
// exactly as the same step given as a number, on both sampling paths; another step draws otherwise.
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { randNormal } from '../helpers/reference';
import { Sampler, type SamplingConfig } from '../../src/ops/sampling';
import type { Tensor } from '../../src/gpu';

describe('sampling step from the GPU', () => {
  it.each([
    { path: 'chunks + finish', config: { temperature: 1 } },
    { path: 'one workgroup (top-k)', config: { temperature: 0.8, topK: 50 } },
  ])('$path: a step tensor draws as the number', async ({ config }: { config: SamplingConfig }) => {
    const gpu = await testGpu();
    const sampler = await Sampler.create(gpu);
    const rows = 8;
    const vocab = 2500;
    const logits = gpu.upload(randNormal(rows * vocab, 5), [rows, vocab], 'f32', 'logits');
    const steps = [9, 10].map((s) => gpu.upload([s], [1], 'u32', `step ${s}`));
    const draw = async (step: number | Tensor) => {
      const out = { ids: gpu.tensor([rows], 'u32', 'ids'), logp: gpu.tensor([rows], 'f32', 'logp') };
      const rec = gpu.recorder();
      sampler.sample(rec, logits, config, { seed: 17, step }, out);
      await rec.submit();
      const got = [[...(await gpu.read(out.ids))], [...(await gpu.read(out.logp))]];
      out.ids.release();
      out.logp.release();
      return got;
    };
    expect(await draw(steps[0])).toEqual(await draw(9));
    expect(await draw(steps[1])).toEqual(await draw(10));
    expect((await draw(steps[1]))[0]).not.toEqual((await draw(9))[0]);
    logits.release();
    for (const t of steps) t.release();
  });
});
