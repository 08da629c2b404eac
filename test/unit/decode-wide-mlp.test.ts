// Decode on a model whose joined gate/up weight has more rows than the small-weight layouts take
// (2 x 8256 > 16384), as the 4B's (2 x 9728) and the 8B's (2 x 12288) do. Such a weight is still a
// decoder weight, not the LM head: one sequence's GEMVs take f32 x, so the kernel before them must
// not be asked for int8 groups (it writes them for 2 to 8 rows only). The sampled tokens' log-probs
// equal the log-softmax of the packed forward's logits with the adapter.
import { describe, expect, it } from 'vitest';
import { alignedConfig, randomModel } from '../helpers/alignedModel';
import { testGpu } from '../helpers/gpu';
import { expectClose } from '../helpers/reference';
import type { Qwen3VLConfig } from '../../src/model/config';

const I = 8256;
const config: Qwen3VLConfig = { ...alignedConfig, text: { ...alignedConfig.text, intermediateSize: I } };
const { vocabSize: VOCAB } = config.text;

describe('decode with a joined gate/up weight wider than the small-weight layouts', () => {
  it('1 and 3 samples with an adapter: log-probs match the packed forward', async () => {
    const gpu = await testGpu();
    const model = await randomModel(gpu, { config, maxLogitRows: 3, adapterRank: 4 });
    const prompt = { id: 'p', inputIds: Int32Array.from({ length: 9 }, (_, i) => (53 * i + 7) % 480), images: [] };
    for (const G of [1, 3]) {
      const samples = await model.generate(prompt, G, { temperature: 1, topP: 1, topK: 0, maxNewTokens: 3, seed: 5 }, { stopIds: [] });
      expect(samples).toHaveLength(G);
      for (const [g, s] of samples.entries()) {
        const logits = await model.logits(Int32Array.from([...prompt.inputIds, ...s.tokens]), undefined, { lora: true });
        const want = s.tokens.map((tok, j) => {
          const row = logits.subarray((prompt.inputIds.length - 1 + j) * VOCAB, (prompt.inputIds.length + j) * VOCAB);
          const m = Math.max(...row);
          return row[tok] - m - Math.log(row.reduce((a, x) => a + Math.exp(x - m), 0));
        });
        // Three samples take int8 x in the GEMVs by default (the quantization's reach); one takes f32.
        expectClose([...s.samplingLogps], want, { rtol: 0, atol: G === 1 ? 2e-4 : 3e-2, what: `G ${G}, sample ${g}` });
      }
    }
  });
});
