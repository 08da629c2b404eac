// Decode with an adapter on: the decode steps take the LoRA GEMV (src/ops/loraGemv.ts,
// ≤ 8 rows), the prefill the two GEMMs; on this device and on one binding fewer storage buffers
// (where the q/k norm dispatch cannot take the LoRA update and the KV append in). Sampled
// completions and their log-probs equal those of the base model with every adapter merged into its
// weight (W + alpha/r·B·A, on the CPU); also for an adapter on a subset of the projections
// (q, v, o, up, down: q/k/v and gate/up then take LoRA's GEMMs instead of the grouped LoRA GEMV).
import { describe, expect, it } from 'vitest';
import { adapterAndMerged } from '../helpers/adapterPair';
import { testGpu, withDefaultStorageLimit } from '../helpers/gpu';
import { readReference } from '../helpers/modelFixtures';
import { expectClose } from '../helpers/reference';
import { splitImages } from '../../src/model/qwen3vl';

describe('decode with LoRA', () => {
  it.each([
    { device: 'this device', limited: false, folder: 'lora' },
    { device: '8 storage buffers a stage (q/k norm, LoRA up and KV append apart)', limited: true, folder: 'lora' },
    { device: 'this device, an adapter on a subset of the projections', limited: false, folder: 'lora-dropout' },
  ] as const)('tiny-b, $device: G sampled completions with the adapter on = with the adapter merged; off differs', async ({ limited, folder }) => {
    const m = 'tiny-b';
    const gpu = limited ? withDefaultStorageLimit(await testGpu()) : await testGpu();
    const { net, merged } = await adapterAndMerged(gpu, m, folder);
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
