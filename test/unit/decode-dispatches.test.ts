// How many dispatches a decode step records: the step's wall time on a large GPU is bound by its
// dispatches (each costs GPU time in stream and CPU time to record and submit), so a kernel fused
// away must show here. Counted as the difference between generating n + 1 and n tokens (every
// step records the same commands), on the aligned random model with and without an adapter,
// after prompts whose keys make one chunk of split attention and two.
import { describe, expect, it } from 'vitest';
import { alignedConfig, randomModel } from '../helpers/alignedModel';
import { testGpu, withDefaultStorageLimit } from '../helpers/gpu';
import { expectClose } from '../helpers/reference';
import type { Qwen3VL } from '../../src/model/qwen3vl';
import type { Gpu } from '../../src/gpu';

const L = alignedConfig.text.numLayers;
/** Outside the layers: the token's embedding, its rope table, the cache's advance, the final
 * norm, the LM head and sampling's two. */
const OUTSIDE = 7;
/** A prompt of `length` tokens: decode reads one chunk of keys (generate's 64 a chunk) below 60
 * tokens (with the 4 new ones), two at 70. */
const prompt = (length: number) => ({ id: 'p', inputIds: Int32Array.from({ length }, (_, i) => (41 * i + 3) % 480), images: [] });
const SAMPLING = { temperature: 1, topP: 1, topK: 0, seed: 5 };

/** The aligned random model on `gpu` (the same weights and adapter for the same seed) with an
 * adapter of rank 8 on every projection of every layer, both factors non-zero. */
const adaptedModel = (gpu: Gpu): Promise<Qwen3VL> => randomModel(gpu, { maxLogitRows: 2, adapterRank: 8 });

/** The dispatches of one decode step of G sequences after a prompt of `length`, and 4 tokens' log-probs of each. */
async function decodeStep(model: Qwen3VL, gpu: Gpu, G: number, length: number, lora: boolean): Promise<{ dispatches: number; logps: number[][] }> {
  const run = async (n: number) => {
    const before = gpu.hostStats.dispatches;
    const samples = await model.generate(prompt(length), G, { ...SAMPLING, maxNewTokens: n }, { stopIds: [], lora });
    return { dispatches: gpu.hostStats.dispatches - before, logps: samples.map((s) => [...s.samplingLogps]) };
  };
  const [a, b] = [await run(4), await run(3)];
  return { dispatches: a.dispatches - b.dispatches, logps: a.logps };
}

describe('dispatches of a decode step', () => {
  it('one sequence, with an adapter and without: 8 a layer over two key chunks, 7 over one', async () => {
    const gpu = await testGpu();
    const model = await adaptedModel(gpu);
    // A layer with adapters: q/k/v's GEMV with the input norm and their down products; the q/k
    // norms, RoPE, the cache append and their up products; split attention and its combine (with
    // o_proj's down product), or over one key chunk the unsplit attention in their place;
    // o_proj's GEMV (its up product in the epilogue); gate/up's GEMV with the norm and their down
    // products; their up products with the SwiGLU (and down_proj's down product); down_proj's GEMV
    // (its up product in the epilogue). Without adapters the same kernels less the LoRA parts.
    // Before the norms moved into the GEMVs and one chunk skipped the combine: 10 a layer.
    for (const lora of [true, false]) {
      expect((await decodeStep(model, gpu, 1, 70, lora)).dispatches, `two chunks, adapter ${lora}`).toBe(8 * L + OUTSIDE);
      expect((await decodeStep(model, gpu, 1, 9, lora)).dispatches, `one chunk, adapter ${lora}`).toBe(7 * L + OUTSIDE);
    }
  }, 600_000);

  it('eight sequences with an adapter: 10 a layer over two key chunks, 9 over one, every adapter product inside the layer\'s kernels', async () => {
    const gpu = await testGpu();
    const model = await adaptedModel(gpu);
    // A layer: q/k/v's norm with their down products (x as int8 groups); their GEMV; the q/k
    // norms, RoPE, cache append and up products; split attention and its combine (with o_proj's
    // down product), or over one chunk the unsplit attention; o_proj's GEMV with its up product in
    // the epilogue; gate/up's norm with their down products; their GEMV; their up products with
    // the SwiGLU and down_proj's down product; down_proj's GEMV with its up product in the
    // epilogue. With the epilogue at one row only (Q4_TUNING.loraMaxRows 1) o_proj's and
    // down_proj's up products took a dispatch each: 12 a layer. (The 2B's down_proj has 96
    // partials a row, past Q4_TUNING.loraMaxPartials at 8 rows: workgroups beside its GEMV write
    // its update, owed to the next layer, the last layer's to the final norm; this model's has 4:
    // decode-lora-fold.test.ts has one with 17.) Outside the layers, the LM head's x becomes
    // int8 groups first.
    expect((await decodeStep(model, gpu, 8, 70, true)).dispatches, 'two chunks').toBe(10 * L + OUTSIDE + 1);
    expect((await decodeStep(model, gpu, 8, 9, true)).dispatches, 'one chunk').toBe(9 * L + OUTSIDE + 1);
  }, 600_000);

  it('one sequence on a device of 8 storage buffers a stage: q/k/v keep the norm\'s own dispatch, gate/up fold it; log-probs as on this device', async () => {
    const full = await testGpu();
    const limited = withDefaultStorageLimit(full);
    const want = await decodeStep(await adaptedModel(full), full, 1, 70, true);
    const got = await decodeStep(await adaptedModel(limited), limited, 1, 70, true);
    // q/k/v's fused GEMV would bind 9 (its norm and the LoRA down of three adapters: +1), the q/k
    // norm takes neither the LoRA up nor the cache append (+2); gate/up's binds 8.
    expect(got.dispatches).toBe(11 * L + OUTSIDE);
    expectClose(got.logps[0], want.logps[0], { rtol: 0, atol: 1e-4, what: 'log-probs' });
  }, 600_000);
});
