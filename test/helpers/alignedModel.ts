// A small random-weight Qwen3-VL whose widths are multiples of 64 (the fixtures' are not): hidden
// 128, intermediate 256, 4 query / 2 kv heads of 32, vocabulary 512. Decode paths that need
// aligned shapes (joined q/k/v and gate/up weights, the folded LoRA down products) run on it;
// randomModel builds it (or a variant config) with random weights and an adapter.
import { Filler } from '../../src/bench/fill';
import { parseQwen3VLConfig, type Qwen3VLConfig } from '../../src/model/config';
import { LORA_PROJECTIONS, loraModuleName } from '../../src/model/decoder';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { randomWeights } from '../../src/model/randomWeights';
import { createLoraParams } from '../../src/ops/loraParams';
import type { Gpu } from '../../src/gpu';

export const ALIGNED = { hidden: 128, intermediate: 256, vocab: 512, kvWidth: 64 } as const;

export const alignedConfig = parseQwen3VLConfig({
  architectures: ['Qwen3VLForConditionalGeneration'],
  model_type: 'qwen3_vl',
  image_token_id: 500,
  video_token_id: 501,
  vision_start_token_id: 502,
  vision_end_token_id: 503,
  tie_word_embeddings: true,
  text_config: {
    model_type: 'qwen3_vl_text',
    hidden_size: ALIGNED.hidden,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 32,
    intermediate_size: ALIGNED.intermediate,
    vocab_size: ALIGNED.vocab,
    hidden_act: 'silu',
    rms_norm_eps: 1e-6,
    max_position_embeddings: 4096,
    tie_word_embeddings: true,
    rope_parameters: { rope_type: 'default', rope_theta: 5000000, mrope_section: [6, 5, 5], mrope_interleaved: true },
  },
  vision_config: { model_type: 'qwen3_vl_vision', depth: 1, hidden_size: 64, num_heads: 2, intermediate_size: 128, out_hidden_size: ALIGNED.hidden, num_position_embeddings: 64, deepstack_visual_indexes: [0], hidden_act: 'gelu_pytorch_tanh', in_channels: 3, patch_size: 16, temporal_patch_size: 2, spatial_merge_size: 2 },
});

/**
 * A model of `config` (the aligned one by default) with random weights and, with `adapterRank`,
 * an adapter of that rank (alpha 2r) on every projection of every layer, attached, both of its
 * factors non-zero (PEFT starts B at zero: the update must show in the outputs).
 */
export async function randomModel(gpu: Gpu, o: { config?: Qwen3VLConfig; maxLogitRows: number; int8Decode?: boolean; adapterRank?: number }): Promise<Qwen3VL> {
  const { config = alignedConfig, adapterRank: r } = o;
  const filler = await Filler.create(gpu);
  const weights = await randomWeights(gpu, config, (rec, t, scale) => filler.fill(rec, t, 'uniform', scale));
  const model = await Qwen3VL.create(gpu, config, weights, { maxLogitRows: o.maxLogitRows, int8Decode: o.int8Decode });
  if (r === undefined) return model;
  const { hiddenSize: H, intermediateSize: I, numHeads, numKvHeads, headDim } = config.text;
  const [q, kv] = [numHeads * headDim, numKvHeads * headDim];
  const dims = { q: [q, H], k: [kv, H], v: [kv, H], o: [H, q], gate: [I, H], up: [I, H], down: [H, I] } as const;
  const lora = Array.from({ length: config.text.numLayers }, (_, l) => LORA_PROJECTIONS.map((p) => createLoraParams(gpu, { name: `base_model.model.${loraModuleName(l, p)}`, out: dims[p][0], in: dims[p][1], r, alpha: 2 * r }))).flat();
  const rec = gpu.recorder();
  for (const p of lora) for (const t of [p.A, p.B]) filler.fill(rec, t, 'uniform', 0.3);
  await rec.submit();
  model.attachLora(lora);
  return model;
}
