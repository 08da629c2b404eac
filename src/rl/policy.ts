// What the RL trainer needs from a model, and nothing more. src/model implements it for Qwen3-VL
// on the engine; the trainer (src/rl) depends only on this.
import type { Tensor } from '../gpu';
import type { LoraParams } from '../ops/loraParams';

/** One image after preprocessing (src/model/processor): flattened patches and its grid. */
export interface PreparedImage {
  /** [patches, 3·temporalPatch·patch·patch] f32, the processor's patch order. */
  pixelValues: Float32Array;
  gridThw: [number, number, number];
  /** Identifies the image for the per-image vision cache (e.g. a content hash). */
  key: string;
}

/** A prompt ready for the model: token ids with every <|image_pad|> already expanded. */
export interface PreparedPrompt {
  id: string;
  inputIds: Int32Array;
  images: PreparedImage[];
  /** The rendered prompt opened a <think> block (a thinking model's generation prompt): the completion starts inside it. */
  thinking?: boolean;
}

export interface SamplingOptions {
  temperature: number;
  topP: number;
  /** 0 disables top-k. */
  topK: number;
  /** transformers' min-p (TRL `min_p`); 0 or undefined: off. */
  minP?: number;
  /** transformers' repetition penalty (TRL `repetition_penalty`); 1 or undefined: off. */
  repetitionPenalty?: number;
  maxNewTokens: number;
  seed: number;
  /**
   * Force </think> after this many thinking tokens (TrainConfig `thinking_budget`), per sequence;
   * the forced tokens are part of the completion. Undefined or null: no budget.
   */
  thinkingBudget?: number | null;
  /** Progress: the tokens sampled so far over all samples, told as they are read back (optional). */
  onTokens?: (tokens: number) => void;
}

export interface Completion {
  tokens: number[];
  text: string;
  /** Log-prob of each sampled token as the sampler reported it (post-temperature). */
  samplingLogps: number[];
  /** True when it ended with one of the config's eos ids; false when cut at maxNewTokens. */
  terminated: boolean;
}

/** G completions of one prompt, to be scored by a training forward. */
export interface SequenceBatch {
  prompt: PreparedPrompt;
  completions: number[][];
}

/** Owned by the policy: valid until its next `forward` call (callers never release them). */
export interface TrainingForward {
  /** [G, maxLen] f32: log-prob of each completion token at `temperature`; 0 past the end. */
  logps: Tensor;
  /** [G, maxLen] f32: entropy (nats) of the next-token distribution at each completion position. */
  entropy: Tensor;
  /** [G, maxLen] f32: 1 on completion tokens, 0 on padding. */
  mask: Tensor;
  maxLen: number;
}

export interface ForwardOptions {
  temperature: number;
  lora: boolean;
  train: boolean;
  /** With `train`: recompute each layer in the backward (default) rather than keep its activations. */
  gradientCheckpointing?: boolean;
  /**
   * lora_dropout on the adapters' inputs, for the forwards whose loss is trained on (the training
   * forward and, for a chunked group, its no-grad forward: the same masks). Each mask element is a
   * function of (seed, step, layer, module, row, col). Absent: no dropout (old/ref log-probs).
   */
  dropout?: { seed: number; step: number };
}

export interface Policy {
  /** The trainable adapters, in a fixed order (optimizer state and checkpoints follow it). */
  readonly lora: readonly LoraParams[];
  /** Tokens the policy chooses among: the trainer warns when the mean entropy nears ln(vocabSize) (a collapse to uniform). */
  readonly vocabSize?: number;
  /** Most packed rows one training forward's buffers can hold on this device; micro-batches stay within it (src/rl/microBatch.ts). */
  readonly maxTrainingRows?: number;
  /** Prefill the prompt once, fork it `numSamples` ways, sample. */
  generate(prompt: PreparedPrompt, numSamples: number, opts: SamplingOptions): Promise<Completion[]>;
  /**
   * Per-token log-probs and entropies of the completions given the prompt. With `train`, what
   * the backward needs is kept: the layer inputs, the layers being recomputed during the backward,
   * or with `gradientCheckpointing: false` (default true) every layer's activations.
   * `lora: false` runs the frozen base model (the reference policy for the KL term).
   */
  forward(batch: SequenceBatch, opts: ForwardOptions): Promise<TrainingForward>;
  /**
   * Backward of Σ gradLogps·logps (+ Σ gradEntropy·entropy) through the last `train` forward,
   * accumulating into each adapter's dA/dB. Frees what that forward kept.
   */
  backward(gradLogps: Tensor, gradEntropy?: Tensor): Promise<void>;
  /** What changed in how the policy runs since the last call that the run should report (e.g. a
   * fallback from f16 activation storage); the trainer adds them to the step's warnings. */
  takeWarnings?(): string[];
}
