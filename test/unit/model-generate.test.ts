// Generation on the tiny fixtures: greedy continuations equal transformers' for 16 steps (every
// case of both models), sampled completions are seeded and their log-probs are those of the
// full forward over prompt + completion (the KV-cache decode of G forked sequences agrees with
// the packed forward), and generation stops at a stop id.
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { CASES, MODELS, modelFiles, readReference, type FixtureModel } from '../helpers/modelFixtures';
import { expectClose } from '../helpers/reference';
import { BATCHES_IN_FLIGHT, STEPS_PER_READBACK } from '../../src/model/generate';
import { Qwen3VL, splitImages } from '../../src/model/qwen3vl';
import type { PreparedPrompt } from '../../src/rl/policy';

const models = new Map<string, Promise<Qwen3VL>>();
function model(m: FixtureModel, maxTableRows?: number): Promise<Qwen3VL> {
  const key = `${m}/${maxTableRows}`;
  if (!models.has(key)) models.set(key, testGpu().then((gpu) => Qwen3VL.load(gpu, modelFiles(m), { quant: 'none', maxTableRows })));
  return models.get(key)!;
}

async function prompt(m: FixtureModel, c: (typeof CASES)[number]): Promise<{ p: PreparedPrompt; greedy: number[] }> {
  const ref = await readReference(m, c);
  const images = ref.gridThw ? splitImages({ pixelValues: ref.pixelValues!, gridThw: ref.gridThw }, ref.gridThw.map((_, k) => `${c}/${k}`)) : [];
  return { p: { id: c, inputIds: ref.inputIds, images }, greedy: Array.from(ref.greedy) };
}

const GREEDY = { temperature: 0, topP: 1, topK: 0, maxNewTokens: 16, seed: 1 };

describe.each(MODELS)('%s', (m) => {
  it.each(CASES)('%s: 16 greedy tokens equal transformers', async (c) => {
    const net = await model(m);
    const { p, greedy } = await prompt(m, c);
    // The reference continues for 16 steps whatever it samples: no stop ids here.
    const [out] = await net.generate(p, 1, GREEDY, { stopIds: [] });
    expect(out.tokens).toEqual(greedy);
    expect(out.terminated).toBe(false);
  });
});

describe('sampling', () => {
  it('G forked samples: seeded, distinct, and their log-probs equal the full forward of prompt + completion', async () => {
    const net = await model('tiny-b');
    const { p } = await prompt('tiny-b', 'image1');
    const opts = { temperature: 1, topP: 1, topK: 0, maxNewTokens: 6, seed: 42 };
    const a = await net.generate(p, 4, opts, { stopIds: [] });
    const b = await net.generate(p, 4, opts, { stopIds: [] });
    expect(a.map((s) => s.tokens)).toEqual(b.map((s) => s.tokens));
    expect(new Set(a.map((s) => s.tokens.join(','))).size).toBeGreaterThan(1);
    const images = { pixelValues: Float32Array.from(p.images.flatMap((i) => Array.from(i.pixelValues))), gridThw: p.images.map((i) => i.gridThw) };
    const V = net.head.vocab;
    const T = p.inputIds.length;
    for (const s of a) {
      expect(s.tokens).toHaveLength(6);
      const ids = Int32Array.from([...p.inputIds, ...s.tokens]);
      const logits = await net.logits(ids, images);
      const want = s.tokens.map((tok, j) => {
        const row = logits.subarray((T - 1 + j) * V, (T + j) * V);
        const max = row.reduce((x, y) => Math.max(x, y), -Infinity);
        const lse = max + Math.log(row.reduce((acc, z) => acc + Math.exp(z - max), 0));
        return row[tok] - lse;
      });
      expectClose(s.samplingLogps, want, { rtol: 0, atol: 1e-4, what: 'sampling log-probs vs full forward' });
    }
  });

  it('stops after a stop id and keeps it', async () => {
    const net = await model('tiny-a');
    const { p, greedy } = await prompt('tiny-a', 'text');
    const k = 5;
    const [out] = await net.generate(p, 1, GREEDY, { stopIds: [greedy[k]] });
    const first = greedy.indexOf(greedy[k]);
    expect(out.tokens).toEqual(greedy.slice(0, first + 1));
    expect(out.terminated).toBe(true);
  });

  it('stop ids are checked per batch of steps: each sequence is the run without stops, cut after its first stop id', async () => {
    const net = await model('tiny-a');
    const { p } = await prompt('tiny-a', 'text');
    // Not a multiple of the batch: the last batch is partial.
    const opts = { temperature: 1.5, topP: 1, topK: 0, maxNewTokens: 2 * STEPS_PER_READBACK + 3, seed: 3 };
    const free = await net.generate(p, 3, opts, { stopIds: [] });
    const stopIds = [free[0].tokens[STEPS_PER_READBACK + 2], free[1].tokens[3]];
    const stopped = await net.generate(p, 3, opts, { stopIds });
    const cuts = free.map((s) => s.tokens.findIndex((t) => stopIds.includes(t)));
    // One sequence stops in the second batch, after others stopped in the first.
    expect(Math.max(...cuts)).toBeGreaterThanOrEqual(STEPS_PER_READBACK);
    expect(Math.min(...cuts.filter((c) => c >= 0))).toBeLessThan(STEPS_PER_READBACK);
    stopped.forEach((s, g) => {
      const end = cuts[g] < 0 ? opts.maxNewTokens : cuts[g] + 1;
      expect(s.tokens).toEqual(free[g].tokens.slice(0, end));
      expect(s.samplingLogps).toEqual(free[g].samplingLogps.slice(0, end));
      expect(s.terminated).toBe(cuts[g] >= 0);
    });
  });

  it('submits each step on its own and queues BATCHES_IN_FLIGHT batches of steps before its first readback: a stop at the first token leaves exactly that many recorded', async () => {
    const gpu = await testGpu();
    const net = await model('tiny-a');
    const { p, greedy } = await prompt('tiny-a', 'text');
    const recorded = async (maxNewTokens: number, stopIds: number[]) => {
      const [d, s] = [gpu.hostStats.dispatches, gpu.hostStats.submits];
      const [out] = await net.generate(p, 1, { ...GREEDY, maxNewTokens }, { stopIds });
      return { dispatches: gpu.hostStats.dispatches - d, submits: gpu.hostStats.submits - s, tokens: out.tokens };
    };
    // Step 0 samples the prefill's last row; every later step records the same dispatches, and
    // is submitted on its own (the GPU starts it while the host records the next).
    const first = await recorded(1, []);
    const second = await recorded(2, []);
    expect(second.submits - first.submits).toBe(1);
    const perStep = second.dispatches - first.dispatches;
    const queued = BATCHES_IN_FLIGHT * STEPS_PER_READBACK;
    const cut = await recorded(queued + 9, [greedy[0]]);
    expect(cut.tokens).toEqual([greedy[0]]);
    expect(1 + (cut.dispatches - first.dispatches) / perStep).toBe(queued);
  });

  it('a token table in several blocks gives the same logits and tokens (4-bit and f32)', async () => {
    const gpu = await testGpu();
    const ref = await readReference('tiny-b', 'image2');
    const images = { pixelValues: ref.pixelValues!, gridThw: ref.gridThw! };
    for (const quant of ['none', 'q4'] as const) {
      const one = await Qwen3VL.load(gpu, modelFiles('tiny-b'), { quant });
      const split = await Qwen3VL.load(gpu, modelFiles('tiny-b'), { quant, maxTableRows: 320 });
      expect(split.weights.language.embed.blocks.map((b) => b.out)).toEqual([320, 320, 320, 64]);
      expectClose(await split.logits(ref.inputIds, images), await one.logits(ref.inputIds, images), { rtol: 0, atol: 1e-5, what: `${quant} split-table logits` });
      const { p } = await prompt('tiny-b', 'image2');
      const opts = { temperature: 0.8, topP: 0.9, topK: 50, maxNewTokens: 5, seed: 7 };
      const [x, y] = [await one.generate(p, 3, opts, { stopIds: [] }), await split.generate(p, 3, opts, { stopIds: [] })];
      expect(y.map((s) => s.tokens)).toEqual(x.map((s) => s.tokens));
    }
  });
});
