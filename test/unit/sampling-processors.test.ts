// min_p and repetition_penalty on the GPU sampler against transformers' MinPLogitsWarper and
// RepetitionPenaltyLogitsProcessor, as mirrored in numpy by tools/rl_reference.py
// (test/fixtures/sampling/processors.json: the next-token probabilities after repetition penalty,
// temperature, top-k, top-p and min-p). Each case is sampled on many rows at once: every drawn
// token must have a non-zero reference probability, its processed log-prob must be the
// reference's, the empirical frequencies must match the reference within sampling noise, and
// the same seed must give the same draws.
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { testGpu } from '../helpers/gpu';
import { expectClose } from '../helpers/reference';
import { Sampler } from '../../src/ops/sampling';
import { ShapeError } from '../../src/gpu';

interface ProcessorCase {
  settings: { temperature: number; top_k: number; top_p: number; min_p: number | null; repetition_penalty: number };
  logits: number[];
  ids: number[];
  probs: number[];
}
const FX = JSON.parse(readFileSync('test/fixtures/sampling/processors.json', 'utf8')) as { cases: ProcessorCase[] };
const ROWS = 4096;

describe('sampler: min_p and repetition_penalty against transformers processors (numpy mirror)', () => {
  it("the mirror's probabilities are transformers' own (processors.transformers.json: `python3 tools/rl_reference.py --transformers`, transformers 5.17 on the GPU machine)", () => {
    const tf = JSON.parse(readFileSync('test/fixtures/sampling/processors.transformers.json', 'utf8')) as { transformers: string; probs: number[][] };
    expect(tf.probs).toHaveLength(FX.cases.length);
    FX.cases.forEach((c, i) => expectClose(c.probs, tf.probs[i], { rtol: 0, atol: 1e-6, what: `case ${i}` }));
  });

  it('the fixture exercises both knobs, alone and together', () => {
    const s = FX.cases.map((c) => c.settings);
    expect(s.some((x) => x.min_p !== null && x.repetition_penalty === 1)).toBe(true);
    expect(s.some((x) => x.min_p === null && x.repetition_penalty !== 1)).toBe(true);
    expect(s.some((x) => x.min_p !== null && x.repetition_penalty !== 1 && x.top_k > 0 && x.top_p < 1)).toBe(true);
    // min-p removes tokens the other cut-offs keep (the test can tell it is applied).
    expect(FX.cases.filter((c) => c.settings.min_p !== null).every((c) => c.probs.filter((p) => p > 0).length < c.probs.length)).toBe(true);
  });

  for (const [n, c] of FX.cases.entries()) {
    it(`case ${n}: ${JSON.stringify(c.settings)}`, async () => {
      const gpu = await testGpu();
      const sampler = await Sampler.create(gpu);
      const V = c.logits.length;
      const logitsData = new Float32Array(ROWS * V);
      for (let r = 0; r < ROWS; r++) logitsData.set(c.logits, r * V);
      const config = {
        temperature: c.settings.temperature,
        topK: c.settings.top_k,
        topP: c.settings.top_p,
        minP: c.settings.min_p ?? 0,
        repetitionPenalty: c.settings.repetition_penalty,
      };
      const draw = async (seed: number) => {
        const logits = gpu.upload(logitsData, [ROWS, V], 'f32', 'test.logits');
        const seen = Sampler.seenBitmap(gpu, ROWS, V, c.ids);
        const ids = gpu.tensor([ROWS], 'u32', 'test.ids');
        const logp = gpu.tensor([ROWS], 'f32', 'test.logp');
        const rec = gpu.recorder('sampling processors');
        sampler.sample(rec, logits, config, { seed, step: 3 }, { ids, logp }, seen);
        await rec.submit();
        const out = { ids: (await gpu.read(ids)) as Uint32Array, logp: await gpu.readF32(logp), seen: (await gpu.read(seen)) as Uint32Array };
        for (const t of [logits, seen, ids, logp]) t.release();
        return out;
      };
      const a = await draw(11);
      const counts = new Float64Array(V);
      for (let r = 0; r < ROWS; r++) {
        const id = a.ids[r];
        expect(c.probs[id], `row ${r} drew token ${id}, which the reference removes`).toBeGreaterThan(0);
        counts[id]++;
      }
      // Processed log-prob of each drawn token = log of the reference probability.
      expectClose(Array.from(a.logp.slice(0, 64)), Array.from(a.ids.slice(0, 64), (id) => Math.log(c.probs[id])), { rtol: 0, atol: 2e-5, what: 'processed log-probs' });
      // Frequencies within 5 standard deviations of the reference (binomial).
      for (let j = 0; j < V; j++) {
        const p = c.probs[j];
        const sd = Math.sqrt((ROWS * p * (1 - p)) || 1);
        expect(Math.abs(counts[j] - ROWS * p), `token ${j}: ${counts[j]} draws, expected ${(ROWS * p).toFixed(1)}`).toBeLessThan(5 * sd + 1);
      }
      // Same seed, same draws; and with a penalty the drawn token joins its row's bitmap.
      const b = await draw(11);
      expect(Array.from(b.ids)).toEqual(Array.from(a.ids));
      if (c.settings.repetition_penalty !== 1) {
        const words = Math.ceil(V / 32);
        for (let r = 0; r < 8; r++) expect((a.seen[r * words + (a.ids[r] >>> 5)] >>> (a.ids[r] & 31)) & 1).toBe(1);
      }
    }, 600_000);
  }

  it('greedy takes the argmax of the penalised logits', async () => {
    const gpu = await testGpu();
    const sampler = await Sampler.create(gpu);
    // Token 1 leads until the penalty 2 halves it (it is in the prompt); token 2 then wins.
    const logits = gpu.upload([0.5, 3.0, 2.0, -1.0], [1, 4], 'f32', 'test.logits');
    const seen = Sampler.seenBitmap(gpu, 1, 4, [1, 3]);
    const ids = gpu.tensor([1], 'u32', 'test.ids');
    const logp = gpu.tensor([1], 'f32', 'test.logp');
    const rec = gpu.recorder('greedy penalty');
    sampler.sample(rec, logits, { temperature: 0, repetitionPenalty: 2 }, { seed: 1, step: 0 }, { ids, logp }, seen);
    await rec.submit();
    expect(Array.from((await gpu.read(ids)) as Uint32Array)).toEqual([2]);
    expect(Array.from(await gpu.readF32(logits))).toEqual([0.5, 1.5, 2.0, -2.0]);
    expect(() => sampler.sample(gpu.recorder('x'), logits, { temperature: 1, repetitionPenalty: 1.2 }, { seed: 1, step: 0 }, { ids, logp })).toThrow(ShapeError);
    expect(() => sampler.sample(gpu.recorder('x'), logits, { temperature: 1, minP: 1.5 }, { seed: 1, step: 0 }, { ids, logp })).toThrow(/minP/);
    for (const t of [logits, seen, ids, logp]) t.release();
  }, 60_000);
});
