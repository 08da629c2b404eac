// LoRA in the decoder, switchable per call: with the fixture's PEFT adapter (non-zero A and B) on,
// the logits equal those of the base model with every adapter merged into its weight
// (W + alpha/r·B·A, on the CPU); with it off, the base model's (transformers' reference).
import { describe, expect, it } from 'vitest';
import { adapterAndMerged } from '../helpers/adapterPair';
import { testGpu } from '../helpers/gpu';
import { readReference } from '../helpers/modelFixtures';
import { expectClose } from '../helpers/reference';

describe.each(['tiny-a', 'tiny-b'] as const)('%s', (m) => {
  it('adapter on = merged weights; off = base model', async () => {
    const gpu = await testGpu();
    const { net, merged } = await adapterAndMerged(gpu, m);
    const ref = await readReference(m, 'image1');
    const images = { pixelValues: ref.pixelValues!, gridThw: ref.gridThw! };
    const on = await net.logits(ref.inputIds, images, { lora: true });
    const r = expectClose(on, await merged.logits(ref.inputIds, images), { rtol: 0, atol: 1e-4, what: 'LoRA on vs merged' });
    expect(expectClose(on, ref.logits, { rtol: 0, atol: Infinity }).maxAbs).toBeGreaterThan(1e-2); // the adapter changes the output
    expectClose(await net.logits(ref.inputIds, images, { lora: false }), ref.logits, { rtol: 0, atol: 1e-3, what: 'LoRA off vs base' });
    console.log(`${m}: LoRA on vs merged max abs ${r.maxAbs.toExponential(2)}`);
  });
});
