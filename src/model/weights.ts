// The model's weights as they live on the GPU (the layout src/model/memoryPlan.ts accounts for).
// The loader fills these from a checkpoint; the vision tower, the decoder, the LM head and the
// trainer read them. Nothing here is trainable: LoRA parameters live apart (src/ops/loraParams.ts).
import type { Tensor } from '../gpu';
import type { Q4Weight } from '../ops/matmulQ4';

/** A frozen linear layer W [out, in]: 4-bit (the default for the language model) or dense, its
 * tensor f32 or the checkpoint's own 16-bit halves (bf16 or f16: the vision tower's). */
export type LinearWeight = { kind: 'q4'; w: Q4Weight; out: number; in: number } | { kind: 'dense'; w: Tensor; out: number; in: number };

/**
 * The token table [vocab, hidden], split into row blocks so that no buffer exceeds the device's
 * storage-binding limit (the 2B's 4-bit table alone is 156 MB of codes). Block b holds rows
 * [rowStart[b], rowStart[b] + blocks[b].out).
 */
export interface TokenTable {
  blocks: LinearWeight[];
  rowStart: number[];
  vocab: number;
  hidden: number;
}

export interface DecoderLayerWeights {
  inputNorm: Tensor; // [hidden]
  postAttentionNorm: Tensor; // [hidden]
  q: LinearWeight; // [heads·headDim, hidden]
  k: LinearWeight; // [kvHeads·headDim, hidden]
  v: LinearWeight; // [kvHeads·headDim, hidden]
  o: LinearWeight; // [hidden, heads·headDim]
  qNorm: Tensor; // [headDim]
  kNorm: Tensor; // [headDim]
  gate: LinearWeight; // [intermediate, hidden]
  up: LinearWeight; // [intermediate, hidden]
  down: LinearWeight; // [hidden, intermediate]
}

export interface LanguageModelWeights {
  embed: TokenTable;
  /** The same object as `embed` when the config ties the embeddings. */
  lmHead: TokenTable;
  layers: DecoderLayerWeights[];
  finalNorm: Tensor; // [hidden]
}

/** A dense layer of the vision tower: W [out, in] 4-bit where quantized and K allows (a multiple of 32), else dense (the checkpoint's bf16 or f16, or f32); bias [out] f32. */
export type DenseWeight = LinearWeight & { b: Tensor | null };

export interface NormWeight {
  w: Tensor;
  b: Tensor;
}

export interface VisionBlockWeights {
  norm1: NormWeight;
  norm2: NormWeight;
  /** The checkpoint's fused attn.qkv [3·hidden, hidden] (and its bias), split by rows at load. */
  q: DenseWeight; // [hidden, hidden]
  k: DenseWeight;
  v: DenseWeight;
  proj: DenseWeight; // [hidden, hidden]
  fc1: DenseWeight; // [intermediate, hidden]
  fc2: DenseWeight; // [hidden, intermediate]
}

export interface PatchMergerWeights {
  /** LayerNorm over hidden (main merger) or over 4·hidden (DeepStack mergers: post-shuffle norm). */
  norm: NormWeight;
  postShuffleNorm: boolean;
  fc1: DenseWeight; // [4·hidden, 4·hidden]
  fc2: DenseWeight; // [outHidden, 4·hidden]
}

export interface VisionWeights {
  /** Conv3d(3→hidden, kernel (2,16,16)) as a dense layer over flattened patches [hidden, 1536]. */
  patchEmbed: DenseWeight;
  /** Learned position table [numPositionEmbeddings, hidden] (a square grid, bilinearly interpolated). */
  posEmbed: Tensor;
  blocks: VisionBlockWeights[];
  merger: PatchMergerWeights;
  deepstackMergers: PatchMergerWeights[];
}

export interface ModelWeights {
  language: LanguageModelWeights;
  vision: VisionWeights;
}
