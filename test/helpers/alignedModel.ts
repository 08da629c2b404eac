// A small random-weight Qwen3-VL whose widths are multiples of 64 (the fixtures' are not): hidden
// 128, intermediate 256, 4 query / 2 kv heads of 32, vocabulary 512. Decode paths that need
// aligned shapes (joined q/k/v and gate/up weights, the folded LoRA down products) run on it.
import { parseQwen3VLConfig } from '../../src/model/config';

export const ALIGNED = { hidden: 128, intermediate: 256, vocab: 512, kvWidth: 64 } as const;

/** The config.json of the aligned model (variants change a field and parse it). */
export const ALIGNED_RAW = {
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
};

export const alignedConfig = parseQwen3VLConfig(ALIGNED_RAW);
