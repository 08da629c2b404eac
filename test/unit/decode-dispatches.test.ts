// How many dispatches a decode step records: the step's wall time on a large GPU is bound by its
// dispatches (each costs GPU time in stream and CPU time to record and submit), so a kernel fused
// away must show here. Counted as the difference between generating n + 1 and n tokens (every
// step records the same commands), on the aligned random model with and without an adapter.
import { describe, expect, it } from 'vitest';
import { ALIGNED, alignedConfig } from '../helpers/alignedModel';
import { testGpu } from '../helpers/gpu';
import { Filler } from '../../src/bench/fill';
import { LORA_PROJECTIONS, loraModuleName } from '../../src/model/decoder';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { randomWeights } from '../../src/model/randomWeights';
import { createLoraParams } from '../../src/ops/lora';

const { hidden: H, intermediate: I, kvWidth: KV } = ALIGNED;
const config = alignedConfig;
const L = config.text.numLayers;

describe('dispatches of a decode step', () => {
  it('one sequence, with an adapter and without: 8 a layer', async () => {
    const gpu = await testGpu();
    const filler = await Filler.create(gpu);
    const weights = await randomWeights(gpu, config, (rec, t, scale) => filler.fill(rec, t, 'uniform', scale));
    const model = await Qwen3VL.create(gpu, config, weights, { maxLogitRows: 2 });
    const r = 8;
    const dims = { q: [H, H], k: [KV, H], v: [KV, H], o: [H, H], gate: [I, H], up: [I, H], down: [H, I] } as const;
    const lora = Array.from({ length: L }, (_, l) => LORA_PROJECTIONS.map((p) => createLoraParams(gpu, { name: `base_model.model.${loraModuleName(l, p)}`, out: dims[p][0], in: dims[p][1], r, alpha: 2 * r }))).flat();
    model.attachLora(lora);
    const prompt = { id: 'p', inputIds: Int32Array.from({ length: 9 }, (_, i) => (41 * i + 3) % 480), images: [] };
    const dispatches = async (G: number, n: number, on: boolean) => {
      const before = gpu.hostStats.dispatches;
      await model.generate(prompt, G, { temperature: 1, topP: 1, topK: 0, maxNewTokens: n, seed: 5 }, { stopIds: [], lora: on });
      return gpu.hostStats.dispatches - before;
    };
    const step = async (G: number, on: boolean) => (await dispatches(G, 4, on)) - (await dispatches(G, 3, on));
    // Outside the layers: the token's embedding, its rope table, the cache's advance, the final
    // norm, the LM head and sampling's two.
    const outside = 7;
    // A layer with adapters: q/k/v's GEMV with the input norm and their down products; the q/k
    // norms, RoPE, the cache append and their up products; split attention and its combine (with
    // o_proj's down product); o_proj's GEMV (its up product in the epilogue); gate/up's GEMV with
    // the norm and their down products; their up products with the SwiGLU (and down_proj's down
    // product); down_proj's GEMV (its up product in the epilogue). Without adapters the same
    // kernels less the LoRA parts. Before the norms moved into the GEMVs: 10 a layer.
    expect(await step(1, true)).toBe(8 * L + outside);
    expect(await step(1, false)).toBe(8 * L + outside);
  }, 600_000);
});
