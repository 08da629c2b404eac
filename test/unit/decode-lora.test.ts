// Decode with an adapter on: the decode steps take the LoRA GEMV (src/ops/loraGemv.ts,
// ≤ 8 rows), the prefill the two GEMMs. Sampled completions and their log-probs equal those of the
// base model with every adapter merged into its weight (W + alpha/r·B·A, on the CPU).
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { testGpu } from '../helpers/gpu';
import { modelDir, modelFiles, readReference } from '../helpers/modelFixtures';
import { expectClose } from '../helpers/reference';
import { Qwen3VL, splitImages } from '../../src/model/qwen3vl';
import { LORA_PROJECTIONS } from '../../src/model/decoder';
import { parsePeft } from '../../src/adapter/peft';
import { uploadAdapter } from '../../src/adapter/upload';
import { mergeDense } from '../../src/adapter/merge';
import { nodeFileSource, readAllTensors } from '../../src/model/safetensors';

describe('decode with LoRA', () => {
  it('tiny-b: G sampled completions with the adapter on = with the adapter merged; off differs', async () => {
    const m = 'tiny-b';
    const gpu = await testGpu();
    const dir = `${modelDir(m)}/lora`;
    const adapter = parsePeft(m, readFileSync(`${dir}/adapter_config.json`, 'utf8'), await readAllTensors(await nodeFileSource(`${dir}/adapter_model.safetensors`)));
    const opts = { quant: 'none' } as const;
    const net = await Qwen3VL.load(gpu, modelFiles(m), opts);
    net.attachLora(uploadAdapter(gpu, adapter, net.config.text.numLayers));
    const merged = await Qwen3VL.load(gpu, modelFiles(m), opts);
    const byName = new Map(adapter.modules.map((a) => [a.module, a]));
    for (const [l, layer] of merged.weights.language.layers.entries()) {
      for (const proj of LORA_PROJECTIONS) {
        const w = layer[proj];
        if (w.kind !== 'f32') throw new Error('expected f32 weights');
        const module = net.lora[l * LORA_PROJECTIONS.length + LORA_PROJECTIONS.indexOf(proj)].name;
        gpu.write(w.w, mergeDense(await gpu.readF32(w.w), byName.get(module)!));
      }
    }
    const ref = await readReference(m, 'image1');
    const prompt = { id: 'p', inputIds: ref.inputIds, images: splitImages({ pixelValues: ref.pixelValues!, gridThw: ref.gridThw! }, ['p/0']) };
    const sampling = { temperature: 1, topP: 1, topK: 0, maxNewTokens: 10, seed: 11 };
    const on = await net.generate(prompt, 3, sampling, { stopIds: [], lora: true });
    const want = await merged.generate(prompt, 3, sampling, { stopIds: [] });
    expect(on.map((s) => s.tokens)).toEqual(want.map((s) => s.tokens));
    on.forEach((s, g) => expectClose(s.samplingLogps, want[g].samplingLogps, { rtol: 0, atol: 1e-4, what: `sample ${g} log-probs` }));
    const off = await net.generate(prompt, 3, sampling, { stopIds: [], lora: false });
    expect(off.map((s) => s.samplingLogps)).not.toEqual(on.map((s) => s.samplingLogps));
  });
});
