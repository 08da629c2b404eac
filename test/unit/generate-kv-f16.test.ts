// Generation with the KV cache in f16 (ModelOptions.kvCache 'f16') on the tiny fixtures, against
// the same model with the f32 cache: greedy continuations are the same tokens (transformers'),
// and sampled completions (same seed) draw the same tokens with log-probs within a bound measured
// here, also with an adapter (the q/k/v LoRA updates and the cache writes in one dispatch, or
// kv_append where the device binds fewer storage buffers); 'auto' keeps the f32 cache on the f32
// products.
import { describe, expect, it } from 'vitest';
import { adapterAndMerged } from '../helpers/adapterPair';
import { testGpu, withDefaultStorageLimit } from '../helpers/gpu';
import { CASES, MODELS, modelFiles, readReference, type FixtureModel } from '../helpers/modelFixtures';
import { Qwen3VL, splitImages } from '../../src/model/qwen3vl';
import type { KvCacheSetting } from '../../src/model/kvCacheSetting';
import type { Completion, PreparedPrompt } from '../../src/rl/policy';

const models = new Map<string, Promise<Qwen3VL>>();
function model(m: FixtureModel, kvCache: KvCacheSetting): Promise<Qwen3VL> {
  const key = `${m}/${kvCache}`;
  if (!models.has(key)) models.set(key, testGpu().then((gpu) => Qwen3VL.load(gpu, modelFiles(m), { quant: 'none', kvCache })));
  return models.get(key)!;
}

async function prompt(m: FixtureModel, c: (typeof CASES)[number]): Promise<{ p: PreparedPrompt; greedy: number[] }> {
  const ref = await readReference(m, c);
  const images = ref.gridThw ? splitImages({ pixelValues: ref.pixelValues!, gridThw: ref.gridThw }, ref.gridThw.map((_, k) => `${c}/${k}`)) : [];
  return { p: { id: c, inputIds: ref.inputIds, images }, greedy: Array.from(ref.greedy) };
}

const GREEDY = { temperature: 0, topP: 1, topK: 0, maxNewTokens: 16, seed: 1 };
/** Largest |Δ log-prob| of a sampled token between the f16 and the f32 cache allowed: about 3x
 * the measured (lavapipe, tiny-b, 4 x 12 tokens: mean 2.3e-4, max 6.3e-4). */
const LOGP_BOUND = 2e-3;

describe('generation over an f16 KV cache', () => {
  it("resolves the setting: 'f16' as set, 'auto' f32 on the f32 products", async () => {
    const [f16, auto] = await Promise.all([model('tiny-a', 'f16'), model('tiny-a', 'auto')]);
    expect(f16.kvCache).toEqual({ dtype: 'f16', why: 'set by the engine config' });
    expect(auto.products).toBe('f32');
    expect(auto.kvCache.dtype).toBe('f32');
  });

  describe.each(MODELS)('%s', (m) => {
    it.each(CASES)('%s: 16 greedy tokens with the f16 cache equal the f32 cache and transformers', async (c) => {
      const [net16, net32] = await Promise.all([model(m, 'f16'), model(m, 'f32')]);
      const { p, greedy } = await prompt(m, c);
      const [a] = await net16.generate(p, 1, GREEDY, { stopIds: [] });
      const [b] = await net32.generate(p, 1, GREEDY, { stopIds: [] });
      expect(b.tokens).toEqual(greedy);
      expect(a.tokens).toEqual(greedy);
    });
  });

  it('4 sampled completions (same seed): the same tokens, log-probs within the measured bound, and moved by the rounding', async () => {
    const [net16, net32] = await Promise.all([model('tiny-b', 'f16'), model('tiny-b', 'f32')]);
    const { p } = await prompt('tiny-b', 'image1');
    const opts = { temperature: 1, topP: 1, topK: 0, maxNewTokens: 12, seed: 42 };
    const a = await net16.generate(p, 4, opts, { stopIds: [] });
    const b = await net32.generate(p, 4, opts, { stopIds: [] });
    const { mean, max } = sameTokensDrift(a, b);
    console.log(`f16 vs f32 KV cache, tiny-b, 4 x 12 sampled tokens: |Δ log-prob| mean ${mean.toExponential(2)}, max ${max.toExponential(2)}`);
  });

  it.each([
    { device: 'this device (q/k/v LoRA updates and the cache writes in the q/k norm dispatch)', limited: false },
    { device: '8 storage buffers a stage (kv_append writes the cache)', limited: true },
  ])('with an adapter, $device: the same tokens over the f16 cache, log-probs within the bound', async ({ limited }) => {
    const gpu = limited ? withDefaultStorageLimit(await testGpu()) : await testGpu();
    const { net } = await adapterAndMerged(gpu, 'tiny-b');
    const { p } = await prompt('tiny-b', 'image1');
    const opts = { temperature: 1, topP: 1, topK: 0, maxNewTokens: 10, seed: 11 };
    net.setKvCache('f16');
    const a = await net.generate(p, 3, opts, { stopIds: [], lora: true });
    net.setKvCache('f32');
    const b = await net.generate(p, 3, opts, { stopIds: [], lora: true });
    sameTokensDrift(a, b);
  });
});

/** Asserts that `a` (f16 cache) drew `b`'s (f32 cache) tokens, their log-probs within LOGP_BOUND
 * and moved (the f16 cache is in use); returns the mean and largest |Δ log-prob|. */
function sameTokensDrift(a: Completion[], b: Completion[]): { mean: number; max: number } {
  expect(a.map((s) => s.tokens)).toEqual(b.map((s) => s.tokens));
  const diffs = a.flatMap((s, i) => s.samplingLogps.map((x, j) => Math.abs(x - b[i].samplingLogps[j])));
  const max = Math.max(...diffs);
  const mean = diffs.reduce((x, y) => x + y, 0) / diffs.length;
  expect(max).toBeLessThan(LOGP_BOUND);
  expect(mean).toBeGreaterThan(1e-5);
  return { mean, max };
}

