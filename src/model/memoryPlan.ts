// What the model occupies on the GPU, computed from config.json before anything is downloaded,
// so the app can refuse a model the adapter cannot hold. The plan, by default:
//   - LM linear layers (q, k, v, o, gate, up, down): 4-bit codes in groups of 32 along K (the
//     input dimension) with one f16 scale per group: 4.5 bits a weight (src/ops/matmulQ4.ts);
//   - embed_tokens, and an untied lm_head: the same 4-bit format (the Q4 gather reads embedding
//     rows, the Q4 GEMV computes logits; a tied model uses the one table for both);
//   - vision tower matrices (patch embedding, attention, MLP, mergers): the checkpoint's own
//     halves (config.json's dtype: bf16 for the published models; f32 for an f32 checkpoint), as
//     loadVisionWeights keeps them by default (4-bit, as its quant 'q4' stores them, is an option
//     of the plan); the position table f32;
//   - every vector (RMSNorm, q/k norm, LayerNorm, biases): f32.
// A 4-bit tensor is two buffers (codes, scales); the plan's largest buffer is what is compared
// with the adapter's maxBufferSize and maxStorageBufferBindingSize.
import type { Qwen3VLConfig } from './config';
import { chooseActivationStorage, type ActivationStorage } from './activationStorage';
import { chooseKvCache } from './kvCacheSetting';
import type { Products, VisionProducts } from './products';
import { chooseVisionProducts } from './visionProductsSetting';
import { expectedWeights } from './weightShapes';
import { dkvSplitsOf } from '../ops/dkvSplits';
import { LORA_GEMV_MAX_ROWS } from '../ops/loraGemv';
import { EXPAND_MAX_WORDS, f16BlockedWords, joinsWidths, LOGPROB_CHUNK, LORA_COLUMNS_RESERVED, loraColumns, MMA_K_BLOCK, VISION_MMA_ROWS } from '../ops/productSizes';
import { DEFAULT_MICRO_BATCH_TOKENS } from '../rl/microBatch';
import type { KvDtype } from '../ops/kvCache';
import type { PhaseBuffers } from '../rl/engineConfig';

export type PlanDtype = 'q4' | 'bf16' | 'f16' | 'f32';

export interface MemoryPlanOptions {
  /** Weights per quantization group along K; must match the quantizer's (32). */
  groupSize?: number;
  /** Bytes per group scale; must match the quantizer's (2: f16). */
  scaleBytes?: number;
  /** embed_tokens and an untied lm_head (default q4). */
  embedDtype?: PlanDtype;
  /** Vision tower matrices (default: config.json's dtype, bf16 where it names none). */
  visionDtype?: PlanDtype;
  /** Generation's KV cache, K and V (default f32; EngineConfig.kv_cache). */
  kvCacheDtype?: KvDtype;
}

export interface MemoryPlanPart {
  part: 'lm.linear' | 'lm.embed' | 'lm.head' | 'lm.vectors' | 'vision.matrices' | 'vision.vectors';
  dtype: PlanDtype;
  tensors: number;
  params: number;
  bytes: number;
}

export interface MemoryPlan {
  parts: MemoryPlanPart[];
  /** Sum of the parts: the weights alone, without KV cache, activations or LoRA. */
  totalBytes: number;
  /** The largest single GPU buffer (a 4-bit tensor's codes count apart from its scales). */
  largestBuffer: { name: string; bytes: number };
  /** K and V over all layers at the cache's dtype, per token of context. */
  kvCacheBytesPerToken: number;
  /** The f32 copies the vision tower's f32 products widen its halves into (matmul.ts), which the
   * pool keeps for the next image: one a distinct matrix size (the checkpoint's fused attn.qkv as
   * the joined q/k/v); 0 for f32 or 4-bit matrices. */
  visionWideningBytes: number;
  /** What the tower holds instead with its products on f16 tensor cores (vision_products f16): its
   * op's workspaces (x's row scales and f16 copy for VISION_MMA_ROWS rows, the scratch of its
   * largest matrix in f16) and the patch embedding's widened copy (it stays on the f32 GEMM). */
  visionF16Bytes: number;
}

const LINEAR = /^model\.language_model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight$/;
const BYTES = { bf16: 2, f16: 2, f32: 4 } as const;

export function memoryPlan(config: Qwen3VLConfig, options: MemoryPlanOptions = {}): MemoryPlan {
  const groupSize = options.groupSize ?? 32;
  // One f32 copy of each distinct size of the tower's matrices held in halves (visionWideningBytes),
  // and the f16 path's largest scratch and the patch embedding's copy (visionF16Bytes).
  const widened = new Set<number>();
  let largestF16Words = 0;
  let patchWidened = 0;
  const scaleBytes = options.scaleBytes ?? 2;
  const embedDtype = options.embedDtype ?? 'q4';
  const visionDtype = options.visionDtype ?? checkpointHalves(config);
  const parts = new Map<MemoryPlanPart['part'], MemoryPlanPart>();
  let largest = { name: '', bytes: 0 };
  const add = (part: MemoryPlanPart['part'], dtype: PlanDtype, name: string, shape: number[]) => {
    const params = shape.reduce((a, b) => a * b, 1);
    // 4-bit: [rows, k] as codes (k/2 bytes a row) and scales (one per group of k).
    const buffers =
      dtype === 'q4' ? [Math.ceil(params / 2), Math.ceil(params / shape[shape.length - 1]) * Math.ceil(shape[shape.length - 1] / groupSize) * scaleBytes] : [params * BYTES[dtype]];
    const bytes = buffers.reduce((a, b) => a + b, 0);
    const p = parts.get(part) ?? { part, dtype, tensors: 0, params: 0, bytes: 0 };
    p.tensors++;
    p.params += params;
    p.bytes += bytes;
    parts.set(part, p);
    const big = Math.max(...buffers);
    if (big > largest.bytes) largest = { name: dtype === 'q4' ? `${name} (4-bit codes)` : name, bytes: big };
  };
  for (const [name, shape] of expectedWeights(config)) {
    if (LINEAR.test(name)) add('lm.linear', 'q4', name, shape);
    else if (name === 'model.language_model.embed_tokens.weight') add('lm.embed', embedDtype, name, shape);
    else if (name === 'lm_head.weight') add('lm.head', embedDtype, name, shape);
    else if (shape.length === 1) add(name.startsWith('model.visual.') ? 'vision.vectors' : 'lm.vectors', 'f32', name, shape);
    else if (name.endsWith('pos_embed.weight')) add('vision.matrices', 'f32', name, shape);
    else if (visionDtype === 'q4' && shape.slice(1).reduce((a, b) => a * b, 1) % groupSize !== 0) add('vision.matrices', checkpointHalves(config), name, shape);
    else {
      const k = shape.slice(1).reduce((a, b) => a * b, 1);
      add('vision.matrices', visionDtype, name, [shape[0], k]);
      const halves = visionDtype === 'bf16' || visionDtype === 'f16';
      if (halves) widened.add(shape[0] * k);
      if (name.startsWith('model.visual.patch_embed.')) patchWidened = halves ? 4 * shape[0] * k : 0;
      else largestF16Words = Math.max(largestF16Words, f16BlockedWords(shape[0], k));
    }
  }
  const v = config.vision;
  const visionMaxK = Math.max(v.hiddenSize, v.intermediateSize, v.hiddenSize * v.spatialMergeSize ** 2);
  const list = [...parts.values()];
  const t = config.text;
  return {
    parts: list,
    totalBytes: list.reduce((a, p) => a + p.bytes, 0),
    largestBuffer: largest,
    kvCacheBytesPerToken: t.numLayers * 2 * t.numKvHeads * t.headDim * BYTES[options.kvCacheDtype ?? 'f32'],
    visionWideningBytes: 4 * [...widened].reduce((a, b) => a + b, 0),
    visionF16Bytes: VISION_MMA_ROWS * 4 + VISION_MMA_ROWS * (visionMaxK + LORA_COLUMNS_RESERVED) * 2 + 4 * largestF16Words + patchWidened,
  };
}

/** How loadVisionWeights keeps a checkpoint of config.json's dtype's dense matrices: its halves
 * as they are, f32 otherwise (bf16 where config.json names no dtype, as the published models). */
function checkpointHalves(config: Qwen3VLConfig): 'bf16' | 'f16' | 'f32' {
  const d = config.dtype ?? 'bfloat16';
  return d === 'bfloat16' ? 'bf16' : d === 'float16' ? 'f16' : 'f32';
}

export interface DeviceMemoryLimits {
  maxBufferSize: number;
  maxStorageBufferBindingSize: number;
}

/**
 * Reasons the plan does not fit the adapter (empty when it fits). `budgetBytes` is what the
 * caller allows for weights (WebGPU does not report free memory; the app picks it).
 */
export function planProblems(plan: MemoryPlan, limits: DeviceMemoryLimits, budgetBytes?: number): string[] {
  const problems: string[] = [];
  const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
  const { name, bytes } = plan.largestBuffer;
  if (bytes > limits.maxBufferSize) problems.push(`${name} needs ${mib(bytes)} in one buffer; the adapter's maxBufferSize is ${mib(limits.maxBufferSize)}`);
  if (bytes > limits.maxStorageBufferBindingSize) {
    problems.push(`${name} needs a ${mib(bytes)} storage binding; the adapter's maxStorageBufferBindingSize is ${mib(limits.maxStorageBufferBindingSize)}`);
  }
  if (budgetBytes !== undefined && plan.totalBytes > budgetBytes) problems.push(`the weights need ${mib(plan.totalBytes)}, over the budget of ${mib(budgetBytes)}`);
  return problems;
}

/** One RL step's work, as the trainer runs it (src/rl/config.ts's defaults: 8 x (512 + 256), LoRA r=8). */
export interface TrainingWork {
  /** num_generations: completions per prompt, sampled together and trained as one group. */
  generations: number;
  promptTokens: number;
  completionTokens: number;
  loraRank: number;
  /** Packed rows per training forward (default: src/rl/microBatch.ts's DEFAULT_MICRO_BATCH_TOKENS). */
  microBatchTokens: number;
  /** The dtype of the hidden states kept for the backward (EngineConfig.activation_storage, resolved); default 'f32'. */
  activationStorage?: ActivationStorage;
  /** Whether the pool keeps generation's and training's buffers both (EngineConfig.phase_buffers); default 'keep'. */
  phaseBuffers?: PhaseBuffers;
  /** Where the decoder's and the LM head's large products run (EngineConfig.products, resolved); default 'f32'. */
  products?: Products;
  /** Where the vision tower's products run (EngineConfig.vision_products, resolved); default what 'auto' takes beside `products`. */
  visionProducts?: VisionProducts;
}

export const DEFAULT_TRAINING_WORK: TrainingWork = { generations: 8, promptTokens: 512, completionTokens: 256, loraRank: 8, microBatchTokens: DEFAULT_MICRO_BATCH_TOKENS };

export interface TrainingMemory {
  weightsBytes: number;
  /** LoRA A and B on q/k/v/o/gate/up/down of every layer, their gradients and AdamW's two moments. */
  loraBytes: number;
  /** Sampling: the KV cache (plan.kvCacheBytesPerToken) of the prompt once and G completions, the decoder's prefill workspace, the vision tower's widened copies (plan.visionWideningBytes) or its f16 op (plan.visionF16Bytes). */
  generationBytes: number;
  /** One micro-batch's training forward/backward: saved layer inputs (at their dtype), the backward's per-layer workspaces, the LM head's logit chunks, what the pool keeps of the forward's workspace (and with f16 states a copy of the gradients). */
  trainingBytes: number;
  /** The tensor-core op's workspaces (productWorkspaceBytes), held from load: 0 on the f32 units. */
  productsBytes: number;
  /** weights + LoRA + the products' workspaces + generation and training together (phase_buffers
   * 'keep': the pool keeps both), or the larger of the two ('release'). */
  peakBytes: number;
}

/**
 * What a training step holds on the GPU at its peak, by the buffers src/model/generate.ts and
 * src/model/train.ts acquire (f32 activations; 4-bit or f32 weights as `plan` says). Checked
 * against the H100 measurement of bench/model.ts (BENCHMARKS.md, model section).
 */
export function trainingMemory(config: Qwen3VLConfig, plan: MemoryPlan, work: TrainingWork = DEFAULT_TRAINING_WORK): TrainingMemory {
  const { hiddenSize: H, numHeads: hq, numKvHeads: hkv, headDim: D, intermediateSize: I, numLayers: L, vocabSize: V } = config.text;
  const q = hq * D;
  const kv = hkv * D;
  const r = work.loraRank;
  const f = 4;
  const G = work.generations;
  const P = work.promptTokens;
  const C = work.completionTokens;
  const projections: [number, number][] = [[H, q], [H, kv], [H, kv], [q, H], [H, I], [H, I], [I, H]];
  const loraBytes = 4 * L * projections.reduce((a, [i, o]) => a + r * (i + o) * f, 0);
  // Decoder workspace per row: h, out, xn; q_raw, q, attn; k_raw, k, v; gate, up, act; rope; LoRA u;
  // and a decode step's owed update (its few rows).
  const workspaceRow = (3 * H + 3 * q + 3 * kv + 3 * I + D + r) * f;
  const workspaceRows = Math.max(P, G);
  const vision = work.visionProducts ?? chooseVisionProducts('auto', work.products ?? 'f32').vision;
  const visionBytes = vision === 'f16' ? plan.visionF16Bytes : plan.visionWideningBytes;
  const generationBytes = (P + G * C) * plan.kvCacheBytesPerToken + workspaceRows * workspaceRow + Math.min(workspaceRows, LORA_GEMV_MAX_ROWS) * H * f + visionBytes;
  // A micro-batch: the prompt once, then the group's completions in as few even chunks as the
  // budget allows (src/rl/microBatch.ts, src/model/train.ts).
  const perChunk = Math.max(1, Math.min(G, Math.floor((work.microBatchTokens - P) / C)));
  const seqs = Math.ceil(G / Math.ceil(G / perChunk));
  const T = P + seqs * C;
  const N = seqs * C;
  // The kept hidden states at their dtype; f16 ones are expanded into one more f32 row of H in the backward.
  const f16 = work.activationStorage === 'f16';
  // Beside them, each layer's attention lse and its adapters' u (the checkpointed recompute reads both).
  const saved = (L + 1) * T * H * (f16 ? 2 : f) + T * D * f + 2 * N * H * f + L * T * (hq + projections.length * r) * f;
  // train.ts's backward: 7 rows of H, 6 of q, 6 of kv, 6 of I, the attention's statistics, 8 LoRA rows.
  const backward = T * ((f16 ? 8 : 7) * H + 6 * q + 6 * kv + 6 * I + 3 * hq + hkv + 2 + 8 * r) * f;
  const logits = N * Math.min(LOGPROB_CHUNK, V) * f;
  // The attention backward's dK/dV partials of the prompt's keys (src/ops/attention.ts): per query
  // chunk, two [prompt rows to a whole 16-row tile, Hkv·D].
  const dkvPart = 2 * dkvSplitsOf(T, P, seqs + 1) * Math.min(T, Math.ceil(P / 16) * 16) * kv * f;
  // With f16 states, the backward first copies the adapters' gradients (a fall-back to f32 states puts them back: train.ts).
  const gradsCopy = f16 ? loraBytes / 4 : 0;
  // The forward's workspace goes back to the pool before the backward, which keeps it cached (the
  // phase's buffers): the backward's rows of H, q and I take most of it again, but none is the
  // size of its joined q/k/v and gate/up outputs or its LoRA partials (src/model/decoder.ts).
  const forwardLeft = T * (q + 2 * kv + 2 * I + Math.max(Math.ceil(I / 64), hq) * r) * f;
  const trainingBytes = saved + backward + logits + dkvPart + gradsCopy + forwardLeft;
  const productsBytes = productWorkspaceBytes(config, work.products ?? 'f32', r);
  return {
    weightsBytes: plan.totalBytes,
    loraBytes,
    generationBytes,
    trainingBytes,
    productsBytes,
    peakBytes: plan.totalBytes + loraBytes + productsBytes + (work.phaseBuffers === 'release' ? Math.max(generationBytes, trainingBytes) : generationBytes + trainingBytes),
  };
}

/** Rows of x the decoder's tensor-core op takes a dispatch, its workspaces sized by them (Qwen3VL's
 * setProducts): the trainer's default micro-batch in one, in whole 64s (its int8 copy of x: a byte an
 * element and limb, 48 MiB for the 2B with two). */
export const TENSOR_CORE_ROWS = 64 * Math.ceil(DEFAULT_MICRO_BATCH_TOKENS / 64);

/**
 * What the decoder's and the LM head's tensor-core op (src/model/products.ts) holds for `products`,
 * as MatmulQ4F16 and MatmulQ4Mma allocate it for TENSOR_CORE_ROWS rows of the widest x: f16, x's row
 * scales and f16 copy (with the columns of adapters of rank `loraRank`), and the scratch its largest
 * expanded weight (either way round, with its adapter's columns) grows to;
 * int8, x's limbs and group scales (and row maxima for steps by row), and the scratch of the
 * largest weight rounded to int8 with its block steps. The vision tower's op (vision_products) is
 * not counted. 0 on the f32 units.
 */
export function productWorkspaceBytes(config: Qwen3VLConfig, products: Products, loraRank = 0): number {
  if (products === 'f32') return 0;
  const { hiddenSize: H, intermediateSize: I, numHeads: hq, numKvHeads: hkv, headDim: D, vocabSize: V } = config.text;
  const q = hq * D;
  const maxK = Math.max(H, I, q);
  const rows = TENSOR_CORE_ROWS;
  // [N, K] of each product, and whether it has an adapter: q, k and v (k and v alike), o, gate and
  // up, down, a chunk of the LM head.
  const head = Math.min(LOGPROB_CHUNK, V);
  const weights: [number, number, boolean][] = [[q, H, true], [hkv * D, H, true], [H, q, true], [I, H, true], [H, I, true], [head, H, false]];
  if (products === 'f16') {
    // LoRA's terms widen x and the expansions: three adapters of x in a forward, one in an input gradient.
    const [fwd, inp] = loraRank > 0 ? [loraColumns(3, loraRank), loraColumns(1, loraRank)] : [0, 0];
    const expanded = weights
      .filter(([n, k]) => (n * k) / 2 <= EXPAND_MAX_WORDS)
      .map(([n, k, lora]) => Math.max(f16BlockedWords(n, k + (lora ? fwd : 0)), f16BlockedWords(k, n + (lora ? inp : 0))));
    // q, k and v expanded side by side where the op joins them (MatmulQ4F16.joins), forward only.
    const joined = joinsWidths([q, hkv * D, hkv * D], H, maxK) ? [f16BlockedWords(q + 2 * hkv * D, H + fwd)] : [];
    return rows * 4 + rows * (maxK + Math.max(LORA_COLUMNS_RESERVED, fwd)) * 2 + 4 * Math.max(0, ...expanded, ...joined);
  }
  const limbs = products === 'int8-1limb' ? 1 : 2;
  const largest = Math.max(...weights.map(([n, k]) => n * k));
  return rows * maxK * limbs + ((rows * maxK) / 32) * 4 + (products === 'int8-row' ? rows * 4 : 0) + largest + (largest / MMA_K_BLOCK[limbs]) * 4;
}

/** What an estimate of a training run assumes beyond its work: the engine's storage settings as
 * they resolve on the device (kv_cache and activation_storage 'auto' follow the products). */
export interface EngineStorage {
  kvCache: KvDtype;
  activationStorage: ActivationStorage;
  phaseBuffers: PhaseBuffers;
  /** The products themselves (their op's workspaces count too). */
  products: Products;
  /** The vision tower's (vision_products 'auto' follows the products). */
  visionProducts: VisionProducts;
}

/** The storage the engine's 'auto' settings take with `products` on a device with or without
 * shader-f16 (src/model/kvCacheSetting.ts, src/model/activationStorage.ts,
 * src/model/visionProductsSetting.ts). */
export function defaultEngineStorage(products: Products, shaderF16: boolean, phaseBuffers: PhaseBuffers = 'keep'): EngineStorage {
  return {
    kvCache: chooseKvCache('auto', products, shaderF16).dtype,
    activationStorage: chooseActivationStorage('auto', { shaderF16 }, products).storage,
    phaseBuffers,
    products,
    visionProducts: chooseVisionProducts('auto', products).vision,
  };
}

/** trainingMemory with the plan's KV cache and the work's storage as `storage` says. */
export function trainingMemoryWith(config: Qwen3VLConfig, options: MemoryPlanOptions, work: TrainingWork, storage: EngineStorage): TrainingMemory {
  return trainingMemory(config, memoryPlan(config, { ...options, kvCacheDtype: storage.kvCache }), { ...work, activationStorage: storage.activationStorage, phaseBuffers: storage.phaseBuffers, products: storage.products, visionProducts: storage.visionProducts });
}
