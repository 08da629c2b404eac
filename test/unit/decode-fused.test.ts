// Decoder.create joins each layer's q/k/v and gate/up 4-bit weights into one weight apiece (the
// parts become views of it): a decode step then takes one GEMV for each group (at two rows and
// more it writes each part's rows apart). Checked on a random model whose shapes align: no extra
// memory, and one sample's tokens and log-probs equal row 0 of two samples (decode-lora-fold
// compares such steps with the packed forward).
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose } from '../helpers/reference';
import { Filler } from '../../src/bench/fill';
import { parseQwen3VLConfig } from '../../src/model/config';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { randomWeights } from '../../src/model/randomWeights';

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
    hidden_size: 128,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 32,
    intermediate_size: 256,
    vocab_size: 512,
    hidden_act: 'silu',
    rms_norm_eps: 1e-6,
    max_position_embeddings: 4096,
    tie_word_embeddings: true,
    rope_parameters: { rope_type: 'default', rope_theta: 5000000, mrope_section: [6, 5, 5], mrope_interleaved: true },
  },
  vision_config: { model_type: 'qwen3_vl_vision', depth: 1, hidden_size: 64, num_heads: 2, intermediate_size: 128, out_hidden_size: 128, num_position_embeddings: 64, deepstack_visual_indexes: [0], hidden_act: 'gelu_pytorch_tanh', in_channels: 3, patch_size: 16, temporal_patch_size: 2, spatial_merge_size: 2 },
});

describe('fused decode projections', () => {
  it('joins q/k/v and gate/up without extra memory; one sample decodes as row 0 of two', async () => {
    const gpu = await testGpu();
    const filler = await Filler.create(gpu);
    const weights = await randomWeights(gpu, config, (rec, t, scale) => filler.fill(rec, t, 'uniform', scale));
    await gpu.sync();
    gpu.pool.trim();
    const before = gpu.pool.stats.inUse;
    const layer = weights.language.layers[1];
    const parts = () => [layer.q, layer.k, layer.v, layer.gate, layer.up].map((w) => (w.kind === 'q4' ? w.w : null));
    const bytes = async () => Promise.all(parts().flatMap((w) => [gpu.read(w!.codes), gpu.read(w!.scales)]));
    const was = await bytes();
    const model = await Qwen3VL.create(gpu, config, weights, { maxLogitRows: 2 });
    expect(await bytes()).toEqual(was);
    const [q, k, v, gate, up] = parts();
    expect(k?.codes.buffer).toBe(q?.codes.buffer);
    expect(v?.scales.buffer).toBe(q?.scales.buffer);
    expect(up?.codes.buffer).toBe(gate?.codes.buffer);
    expect(v!.codes.byteOffset - q!.codes.byteOffset).toBe(((q!.n + k!.n) * 128) / 2);
    // The joined buffers' size classes against the parts' (each within 1/8 of its bytes).
    expect(gpu.pool.stats.inUse).toBeLessThanOrEqual(before * 1.125);
    expect(gpu.pool.stats.cached).toBe(0);
    const prompt = { id: 'p', inputIds: Int32Array.from({ length: 12 }, (_, i) => (37 * i + 5) % 480), images: [] };
    const sampling = { temperature: 1, topP: 1, topK: 0, maxNewTokens: 6, seed: 3 };
    const [one] = await model.generate(prompt, 1, sampling, { stopIds: [] });
    const [row0] = await model.generate(prompt, 2, sampling, { stopIds: [] });
    expect(one.tokens).toEqual(row0.tokens);
    expectClose(one.samplingLogps, row0.samplingLogps, { rtol: 0, atol: 1e-4, what: 'log-probs' });
  });
});
