// How the engine runs a training config, apart from what training does (src/rl/config.ts): where
// the matrix products run and how many packed rows a training forward holds. Neither changes what
// is trained beyond rounding; both trade speed against memory or precision on one device. The CLI's
// --products, --vision-products and --micro-batch-tokens (and a config file's "engine" entry), and
// the app's Model panel, set these fields and nothing else.
import { chooseProducts, isProducts, PRODUCTS, VISION_PRODUCTS, type Products, type VisionProducts } from '../model/products';
import type { Capabilities } from '../gpu';
import { findUnknownKey, isPlainObject } from './configKeys';
import { DEFAULT_MICRO_BATCH_TOKENS } from './microBatch';

export interface EngineConfig {
  /** The decoder's and the LM head's large products (src/model/products.ts), or 'auto' (default):
   * the fastest the device offers (chooseProducts), f32 where it offers no tensor cores. */
  products: Products | 'auto';
  /** The vision tower's dense products. Default 'f32'. */
  vision_products: VisionProducts;
  /**
   * Most packed rows (the prompt once, then completion tokens) per training forward: peak memory
   * against one extra no-grad forward of a larger group. Default DEFAULT_MICRO_BATCH_TOKENS.
   */
  micro_batch_tokens: number;
}

export function defaultEngineConfig(): EngineConfig {
  return { products: 'auto', vision_products: 'f32', micro_batch_tokens: DEFAULT_MICRO_BATCH_TOKENS };
}

export class EngineConfigError extends Error {
  constructor(message: string) {
    super(`engine config: ${message}`);
    this.name = 'EngineConfigError';
  }
}

/** `input` over the defaults, unknown keys refused with their path (under `path`), every field checked. */
export function resolveEngineConfig(input: unknown = {}, path = 'engine'): EngineConfig {
  if (!isPlainObject(input)) throw new EngineConfigError(`${path} must be an object; got ${input === null ? 'null' : JSON.stringify(input)}`);
  const d = defaultEngineConfig();
  const unknown = findUnknownKey(input, { ...d }, path);
  if (unknown !== null) throw new EngineConfigError(unknown);
  const c = { ...d, ...input } as EngineConfig;
  if (c.products !== 'auto' && !isProducts(c.products)) throw new EngineConfigError(`${path}.products must be auto or one of ${PRODUCTS.map((p) => p.value).join(', ')}; got ${JSON.stringify(c.products)}`);
  if (!VISION_PRODUCTS.includes(c.vision_products)) throw new EngineConfigError(`${path}.vision_products must be one of ${VISION_PRODUCTS.join(', ')}; got ${JSON.stringify(c.vision_products)}`);
  const t = c.micro_batch_tokens;
  if (typeof t !== 'number' || !Number.isInteger(t) || t < 1) throw new EngineConfigError(`${path}.micro_batch_tokens must be an integer >= 1; got ${JSON.stringify(t)}`);
  return c;
}

/** Whether it may need Dawn's unsafe APIs in Node (subgroup matrices for the tensor cores; 'auto'
 * to see whether the device offers them). */
export function usesTensorCores(c: EngineConfig): boolean {
  return c.products !== 'f32' || c.vision_products !== 'f32';
}

/** Whether it names a tensor-core setting itself (not 'auto'). */
export function asksTensorCores(c: EngineConfig): boolean {
  return (c.products !== 'f32' && c.products !== 'auto') || c.vision_products !== 'f32';
}

/** The products setting to run on a device of `caps`, and why ('auto' resolved by chooseProducts). */
export function resolveProducts(c: EngineConfig, caps: Capabilities): { products: Products; why: string } {
  return c.products === 'auto' ? chooseProducts(caps) : { products: c.products, why: 'set by the engine config' };
}
