// How the engine runs a training config, apart from what training does (src/rl/config.ts): where
// the matrix products run, how many packed rows a training forward holds, and whether the backward
// recomputes layers. None changes what is trained beyond rounding; each trades speed against memory
// or precision on one device. The CLI's --products, --vision-products, --activation-storage,
// --kv-cache, --micro-batch-tokens, --gradient-checkpointing and --phase-buffers (and a config
// file's "engine" entry), the app's Model panel and the Train form's gradient_checkpointing set
// these fields and nothing else. A training config may also hold gradient_checkpointing at its top level,
// transformers' TrainingArguments name: it is read onto this field (ConfigEngineFields), so
// configs of earlier versions and TRL-style files run.
import { ACTIVATION_STORAGE_SETTINGS, chooseActivationStorage, type ActivationStorage, type ActivationStorageSetting } from '../model/activationStorage';
import { chooseKvCache, isKvCacheSetting, KV_CACHE_SETTINGS, type KvCacheSetting } from '../model/kvCacheSetting';
import { chooseProducts, isProducts, PRODUCTS, type Products, type VisionProducts } from '../model/products';
import { chooseVisionProducts, isVisionProductsSetting, VISION_PRODUCTS_SETTINGS, type VisionProductsSetting } from '../model/visionProductsSetting';
import type { KvDtype } from '../ops/kvCache';
import type { Capabilities } from '../gpu';
import { findUnknownKey, isPlainObject } from './configKeys';
import { DEFAULT_MICRO_BATCH_TOKENS } from './microBatch';

export interface EngineConfig {
  /** The decoder's and the LM head's large products (src/model/products.ts), or 'auto' (default):
   * the fastest the device offers (chooseProducts), f32 where it offers no tensor cores. */
  products: Products | 'auto';
  /**
   * The vision tower's dense products: 'auto' (default): f16 while the products resolve to 'f16',
   * else f32 (chooseVisionProducts); 'f32'; or on tensor cores where offered, 'f16' (each weight
   * rounded to f16 as its product runs: no copy) or 'int8' (an int8 copy of the tower's dense
   * weights, half the bytes of the published checkpoints' bf16). Both run a 448x448 image about
   * twice as fast as the f32 units, a 224x224 one about as fast (BENCHMARKS.md).
   */
  vision_products: VisionProductsSetting;
  /**
   * Where a training forward keeps the hidden states its backward reads (each layer's input):
   * 'f32', 'f16' (half the bytes, each value rounded once to f16; needs shader-f16; a state beyond
   * f16's range falls back to f32 with a warning), or 'auto' (default): f16 where the products
   * resolve to 'f16' and shader-f16 is offered, else f32 (resolveActivationStorage).
   */
  activation_storage: ActivationStorageSetting;
  /**
   * How generation's KV cache stores K and V (src/model/kvCacheSetting.ts): 'f32', 'f16' (half the
   * bytes decode attention reads, each element rounded to f16; needs shader-f16) or 'auto'
   * (default): f16 where the resolved products are 'f16' and the device offers shader-f16, else f32.
   */
  kv_cache: KvCacheSetting;
  /**
   * Most packed rows (the prompt once, then completion tokens) per training forward: peak memory
   * against one extra no-grad forward of a larger group. Default DEFAULT_MICRO_BATCH_TOKENS.
   */
  micro_batch_tokens: number;
  /**
   * Recompute each decoder layer in the backward from its input instead of keeping its
   * activations. Default true (transformers' default is false): a browser GPU's memory is the
   * limit. false keeps every layer's activations (about 130 KB a token a layer for the 2B, 10 GiB
   * for 8 completions of 352 tokens) and saves one forward of the layers.
   */
  gradient_checkpointing: boolean;
  /**
   * What the GPU buffer pool does with one phase's buffers while the other runs (generation's KV
   * caches and workspaces while training, training's activations while generating): 'keep'
   * (default) keeps both cached, so no buffer or bind group is made again from step to step, at a
   * peak of about generation's and training's memory together; 'release' gives the other phase's
   * back to the device, so the peak is the larger of the two (src/model/memoryPlan.ts gives both).
   * Either way, buffers neither phase used last time are given back at each switch.
   */
  phase_buffers: PhaseBuffers;
}

export type PhaseBuffers = 'keep' | 'release';
export const PHASE_BUFFERS: readonly PhaseBuffers[] = ['keep', 'release'];

/** The engine fields a training config may set itself, under transformers' names (TrainConfigInput). */
export type ConfigEngineFields = Partial<Pick<EngineConfig, 'gradient_checkpointing'>>;

export function defaultEngineConfig(): EngineConfig {
  return { products: 'auto', vision_products: 'auto', activation_storage: 'auto', kv_cache: 'auto', micro_batch_tokens: DEFAULT_MICRO_BATCH_TOKENS, gradient_checkpointing: true, phase_buffers: 'keep' };
}

export class EngineConfigError extends Error {
  constructor(message: string) {
    super(`engine config: ${message}`);
    this.name = 'EngineConfigError';
  }
}

/**
 * `input` over the defaults, unknown keys refused with their path (under `path`), every field
 * checked. `fromConfig`: the fields the training config set (ResolvedConfig.engine); giving one
 * there and another value in `input` is refused.
 */
export function resolveEngineConfig(input: unknown = {}, path = 'engine', fromConfig: ConfigEngineFields = {}): EngineConfig {
  if (!isPlainObject(input)) throw new EngineConfigError(`${path} must be an object; got ${input === null ? 'null' : JSON.stringify(input)}`);
  const d = defaultEngineConfig();
  const unknown = findUnknownKey(input, { ...d }, path);
  if (unknown !== null) throw new EngineConfigError(unknown);
  const c = { ...d, ...input } as EngineConfig;
  for (const [key, value] of Object.entries(fromConfig) as [keyof ConfigEngineFields, boolean | undefined][]) {
    if (value === undefined) continue;
    if (key in input && input[key] !== value) throw new EngineConfigError(`${path}.${key} is ${JSON.stringify(input[key])} and the training config's ${key} ${JSON.stringify(value)}: give one`);
    c[key] = value;
  }
  if (c.products !== 'auto' && !isProducts(c.products)) throw new EngineConfigError(`${path}.products must be auto or one of ${PRODUCTS.map((p) => p.value).join(', ')}; got ${JSON.stringify(c.products)}`);
  if (!isVisionProductsSetting(c.vision_products)) throw new EngineConfigError(`${path}.vision_products must be one of ${VISION_PRODUCTS_SETTINGS.join(', ')}; got ${JSON.stringify(c.vision_products)}`);
  if (!ACTIVATION_STORAGE_SETTINGS.includes(c.activation_storage)) throw new EngineConfigError(`${path}.activation_storage must be one of ${ACTIVATION_STORAGE_SETTINGS.join(', ')}; got ${JSON.stringify(c.activation_storage)}`);
  if (!isKvCacheSetting(c.kv_cache)) throw new EngineConfigError(`${path}.kv_cache must be one of ${KV_CACHE_SETTINGS.join(', ')}; got ${JSON.stringify(c.kv_cache)}`);
  const t = c.micro_batch_tokens;
  if (typeof t !== 'number' || !Number.isInteger(t) || t < 1) throw new EngineConfigError(`${path}.micro_batch_tokens must be an integer >= 1; got ${JSON.stringify(t)}`);
  if (typeof c.gradient_checkpointing !== 'boolean') throw new EngineConfigError(`${path}.gradient_checkpointing must be true or false; got ${JSON.stringify(c.gradient_checkpointing)}`);
  if (!PHASE_BUFFERS.includes(c.phase_buffers)) throw new EngineConfigError(`${path}.phase_buffers must be one of ${PHASE_BUFFERS.join(', ')}; got ${JSON.stringify(c.phase_buffers)}`);
  return c;
}

/** Whether it may need Dawn's unsafe APIs in Node (subgroup matrices for the tensor cores; 'auto'
 * to see whether the device offers them). */
export function usesTensorCores(c: EngineConfig): boolean {
  return c.products !== 'f32' || asksVisionTensorCores(c);
}

/** Whether it names a tensor-core setting itself (not 'auto'). */
export function asksTensorCores(c: EngineConfig): boolean {
  return (c.products !== 'f32' && c.products !== 'auto') || asksVisionTensorCores(c);
}

/** Whether vision_products names a tensor-core setting ('auto' follows the products). */
function asksVisionTensorCores(c: EngineConfig): boolean {
  return c.vision_products !== 'f32' && c.vision_products !== 'auto';
}

/** The products setting to run on a device of `caps`, and why ('auto' resolved by chooseProducts). */
export function resolveProducts(c: EngineConfig, caps: Capabilities): { products: Products; why: string } {
  return c.products === 'auto' ? chooseProducts(caps) : { products: c.products, why: 'set by the engine config' };
}

/** Where the vision tower's products run beside `products` (resolveProducts'), and why. */
export function resolveVisionProducts(c: EngineConfig, products: Products): { vision: VisionProducts; why: string } {
  return chooseVisionProducts(c.vision_products, products);
}

/** Where training forwards keep their hidden states on a device of `caps` running `products`
 * (resolveProducts'), and why; 'f16' without shader-f16 throws MissingFeatureError naming it. */
export function resolveActivationStorage(c: EngineConfig, caps: Capabilities, products: Products): { storage: ActivationStorage; why: string } {
  return chooseActivationStorage(c.activation_storage, caps, products);
}

/** The KV cache's element type where the products run on `products` (resolveProducts' choice),
 * and why; kv_cache 'f16' on a device without shader-f16 throws MissingFeatureError. */
export function resolveKvCache(c: EngineConfig, products: Products, caps: Capabilities): { dtype: KvDtype; why: string } {
  return chooseKvCache(c.kv_cache, products, caps.shaderF16);
}
