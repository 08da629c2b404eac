// Where the vision tower's dense products run (Qwen3VL.setVisionProducts): a VisionProducts
// value, or 'auto', which follows the decoder's products. Kept apart from products.ts, without GPU
// code, for the memory plan the page imports.
import type { Products, VisionProducts } from './products';

/** A vision setting: a VisionProducts value, or 'auto', which follows the decoder's products
 * (chooseVisionProducts). */
export type VisionProductsSetting = 'auto' | VisionProducts;
export const VISION_PRODUCTS_SETTINGS: readonly VisionProductsSetting[] = ['auto', 'f32', 'int8', 'f16'];

export function isVisionProductsSetting(x: unknown): x is VisionProductsSetting {
  return (VISION_PRODUCTS_SETTINGS as readonly unknown[]).includes(x);
}

/**
 * Where the vision tower's products run for `setting` while the decoder's run on `products`, and
 * why. 'auto' takes f16 only beside f16 products (the device then offers f16 tensor cores, and a
 * user who chose them accepts f16 rounding): a 448x448 image's tower runs about twice as fast there,
 * a 224x224 one's about as fast (BENCHMARKS.md). Beside int8 products it keeps f32: the int8 tower
 * holds an int8 copy of the tower's weights.
 */
export function chooseVisionProducts(setting: VisionProductsSetting, products: Products): { vision: VisionProducts; why: string } {
  if (setting !== 'auto') return { vision: setting, why: 'set by the engine config' };
  if (products === 'f16') return { vision: 'f16', why: 'auto: the products run on f16 tensor cores' };
  return { vision: 'f32', why: `auto: the products run on ${products}, not f16` };
}
