// Where a loaded model's large 4-bit products run: the f32 units (every WebGPU device; exact to
// the 4-bit weights) or the int8 tensor cores through Chromium's subgroup-matrix extension, where
// the browser offers it. This is what the app's Model panel switches; the library's finer options
// (ModelOptions.tensorCoreSteps, visionTensorCores) stay with Qwen3VL.
import type { Gpu } from '../gpu';
import { mmaUnsupported } from '../ops/matmulQ4Mma';
import type { Qwen3VL } from './qwen3vl';

/** 'f32': the f32 kernels. 'int8': tensor cores, x in two int8 limbs (ModelOptions.tensorCoreLimbs
 * 2). 'int8-one-limb': one limb, the faster and coarser. Both int8 settings take steps by block. */
export type Products = 'f32' | 'int8' | 'int8-one-limb';

/** The settings in the order the panel lists them, with what each costs and gains (H100 figures,
 * BENCHMARKS.md: the GSPO step 8 x 8 x 256 without checkpointing, and its drift from f32). */
export const PRODUCTS: readonly { value: Products; label: string; about: string }[] = [
  {
    value: 'int8',
    label: 'Tensor cores, int8, two limbs',
    about: 'About 1.8x faster training steps than the f32 units on an H100; log-probabilities move by about 0.006 on average, less than bf16 moves them from fp32.',
  },
  {
    value: 'int8-one-limb',
    label: 'Tensor cores, int8, one limb (fastest)',
    about: 'About 2.3x faster training steps than the f32 units on an H100; log-probabilities move by about 0.008 on average, more where activations have outlier channels.',
  },
  {
    value: 'f32',
    label: 'f32 units (exact 4-bit products)',
    about: 'Every WebGPU device; the products are those of the 4-bit weights in f32.',
  },
];

/** Whether `v` (a stored value) is one of the settings. */
export function isProducts(v: unknown): v is Products {
  return PRODUCTS.some((p) => p.value === v);
}

/** Why this device cannot run the int8 settings, or null when it can. */
export function tensorCoresUnsupported(gpu: Gpu): string | null {
  return mmaUnsupported(gpu);
}

/** The setting a device starts with: the tensor cores where they are offered. */
export function defaultProducts(gpu: Gpu): Products {
  return tensorCoresUnsupported(gpu) === null ? 'int8' : 'f32';
}

/** Moves the model's prefill, scoring and training products (decode's GEMVs are unaffected) onto
 * `products`; throws MissingFeatureError for an int8 setting where the GPU has no subgroup matrices. */
export async function setProducts(model: Qwen3VL, products: Products): Promise<void> {
  if (products === 'f32') await model.setTensorCoreGemm(false);
  else await model.setTensorCoreGemm(true, products === 'int8' ? 2 : 1, 'block');
}

/** The setting the model runs now. */
export function productsOf(model: Qwen3VL): Products {
  const limbs = model.tensorCoreLimbs;
  return limbs === null ? 'f32' : limbs === 1 ? 'int8-one-limb' : 'int8';
}
