// Decode with an adapter on a model whose widths are multiples of 64 (the fixtures' are not): the
// split attention's combine starts o_proj's LoRA down product and the SwiGLU dispatch starts
// down_proj's (shaders/attention.wgsl and lora_gemv.wgsl, FOLD), each finished by one dispatch
// after its base GEMV. The sampled tokens' log-probs must equal the log-softmax of the packed
// forward's logits (the LoRA GEMMs, no folds) over the prompt and those tokens.
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose } from '../helpers/reference';
import { Filler } from '../../src/bench/fill';
import { parseQwen3VLConfig } from '../../src/model/config';
import { LORA_PROJECTIONS, loraModuleName } from '../../src/model/decoder';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { randomWeights } from '../../src/model/randomWeights';
import { createLoraParams } from '../../src/ops/lora';

const H = 128;
const I = 256;
const VOCAB = 512;
const config = parseQwen3VLConfig({
  architectures: ['Qwen3VLForConditionalGeneration'],
  model_type: 'qwen3_vl',
  image_token_id: 500,
  video_token_id: 501,
  vision_start_token_id: 502,
  vision_end_token_id: 503,
  tie_word_embeddings: true,
  text_config: {
    model_type: 'qwen3_vl_text',
    hidden_size: H,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 32,
    intermediate_size: I,
    vocab_size: VOCAB,
    hidden_act: 'silu',
    rms_norm_eps: 1e-6,
    max_position_embeddings: 4096,
    tie_word_embeddings: true,
    rope_parameters: { rope_type: 'default', rope_theta: 5000000, mrope_section: [6, 5, 5], mrope_interleaved: true },
  },
  vision_config: { model_type: 'qwen3_vl_vision', depth: 1, hidden_size: 64, num_heads: 2, intermediate_size: 128, out_hidden_size: H, num_position_embeddings: 64, deepstack_visual_indexes: [0], hidden_act: 'gelu_pytorch_tanh', in_channels: 3, patch_size: 16, temporal_patch_size: 2, spatial_merge_size: 2 },
});

describe('decode with folded LoRA down products', () => {
  it('1 and 3 samples: each token\'s log-prob equals the packed forward\'s with the adapter, which differs from the base model\'s', async () => {
    const gpu = await testGpu();
    const filler = await Filler.create(gpu);
    const weights = await randomWeights(gpu, config, (rec, t, scale) => filler.fill(rec, t, 'uniform', scale));
    const model = await Qwen3VL.create(gpu, config, weights, { maxLogitRows: 3 });
    const r = 8;
    const dims = { q: [H, H], k: [64, H], v: [64, H], o: [H, H], gate: [I, H], up: [I, H], down: [H, I] } as const;
    const lora = Array.from({ length: 2 }, (_, l) => LORA_PROJECTIONS.map((p) => createLoraParams(gpu, { name: `base_model.model.${loraModuleName(l, p)}`, out: dims[p][0], in: dims[p][1], r, alpha: 2 * r }))).flat();
    const rec = gpu.recorder();
    // Both factors non-zero (PEFT starts B at zero): the update must show in the outputs.
    for (const p of lora) for (const t of [p.A, p.B]) filler.fill(rec, t, 'uniform', 0.3);
    await rec.submit();
    model.attachLora(lora);
    const prompt = { id: 'p', inputIds: Int32Array.from({ length: 11 }, (_, i) => (53 * i + 7) % 480), images: [] };
    const sampling = { temperature: 1, topP: 1, topK: 0, maxNewTokens: 5, seed: 9 };
    for (const G of [1, 3]) {
      const samples = await model.generate(prompt, G, sampling, { stopIds: [] });
      for (const [g, s] of samples.entries()) {
        const ids = Int32Array.from([...prompt.inputIds, ...s.tokens]);
        const [on, off] = [await model.logits(ids, undefined, { lora: true }), await model.logits(ids, undefined, { lora: false })];
        const logp = (logits: Float32Array) =>
          s.tokens.map((tok, j) => {
            const row = logits.subarray((prompt.inputIds.length - 1 + j) * VOCAB, (prompt.inputIds.length + j) * VOCAB);
            const m = Math.max(...row);
            return row[tok] - m - Math.log(row.reduce((a, x) => a + Math.exp(x - m), 0));
          });
        const want = logp(on);
        expectClose(s.samplingLogps, want, { rtol: 0, atol: 2e-4, what: `G ${G}, sample ${g}` });
        const base = logp(off);
        expect(Math.max(...base.map((b, j) => Math.abs(b - want[j]))), 'the adapter changes the log-probs').toBeGreaterThan(1e-2);
      }
    }
  });
});
