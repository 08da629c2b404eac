// Where generation's KV cache keeps K and V (src/ops/kvCache.ts): f32, or f16 (half the bytes
// that decode attention reads a step; each element rounded to nearest, BENCHMARKS.md gives the
// log-prob drift). 'auto' takes f16 only on the f16 path: a user who chose f16 products accepts
// f16 rounding; the f32 and int8 paths keep their f32 cache.
import { MissingFeatureError } from '../gpu/errors';
import type { KvDtype } from '../ops/kvCache';
import type { Products } from './products';

export type KvCacheSetting = 'auto' | KvDtype;
export const KV_CACHE_SETTINGS: readonly KvCacheSetting[] = ['auto', 'f32', 'f16'];

export function isKvCacheSetting(x: unknown): x is KvCacheSetting {
  return (KV_CACHE_SETTINGS as readonly unknown[]).includes(x);
}

/**
 * The cache's element type for `setting` where the products run on `products` and the device
 * does (or does not) offer shader-f16, and why. 'f16' without shader-f16 throws
 * MissingFeatureError naming it.
 */
export function chooseKvCache(setting: KvCacheSetting, products: Products, shaderF16: boolean): { dtype: KvDtype; why: string } {
  if (setting === 'f16' && !shaderF16) throw new MissingFeatureError('shader-f16', 'needed for kv_cache f16 (an f16 KV cache); use kv_cache auto or f32');
  if (setting !== 'auto') return { dtype: setting, why: 'set by the engine config' };
  if (products !== 'f16') return { dtype: 'f32', why: `auto: the products run on ${products}, not f16` };
  if (!shaderF16) return { dtype: 'f32', why: 'auto: no shader-f16 on this device' };
  return { dtype: 'f16', why: 'auto: the products run on f16 and the device offers shader-f16' };
}
