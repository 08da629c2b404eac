// Where a loaded model's large 4-bit products run: the one setting for it (the engine config's
// `products`, the CLI's --products, the Model panel's choice). The f32 units run on every WebGPU
// device and are exact to the 4-bit weights; the int8 settings use tensor cores through Chromium's
// subgroup-matrix extension where the browser offers it. A new path (f16 tensor cores) is one more
// value here and one more row of TENSOR_CORES.
import { capabilitiesOf, configsOf, formatConfigs, type Capabilities, type Gpu } from '../gpu';
import { mmaTileBytes, mmaUnsupportedBy, type MmaSteps } from '../ops/matmulQ4Mma';
import { PATHS } from '../ops/projection';
import type { ModelOptions, Qwen3VL } from './qwen3vl';

/**
 * The decoder's and the LM head's products of more than 8 rows (prefill, scoring, training) and
 * their input gradients; decode's GEMVs are unaffected.
 * 'f32': the f32 kernels. 'int8': tensor cores, x in two int8 limbs, steps by K block of 128.
 * 'int8-1limb': one limb (K blocks of 256), the fastest and coarsest. 'int8-row': two limbs, one
 * step per row of x and column of W over the whole of K.
 */
export type Products = 'f32' | 'int8' | 'int8-1limb' | 'int8-row';

/** The vision tower's dense products: 'f32', or 'int8' (its f32 weights rounded to int8 once, x in two limbs). */
export type VisionProducts = 'f32' | 'int8';
export const VISION_PRODUCTS: readonly VisionProducts[] = ['f32', 'int8'];

/** The tensor-core settings each int8 value stands for (ModelOptions.tensorCoreLimbs and tensorCoreSteps). */
const TENSOR_CORES: Record<Exclude<Products, 'f32'>, { limbs: 1 | 2; steps: MmaSteps }> = {
  int8: { limbs: 2, steps: 'block' },
  'int8-1limb': { limbs: 1, steps: 'block' },
  'int8-row': { limbs: 2, steps: 'row' },
};

/** The settings in the order the panel lists them, with what each costs and gains (H100 figures,
 * BENCHMARKS.md: the GSPO step 8 x 8 x 256 without checkpointing, and its drift from f32). */
export const PRODUCTS: readonly { value: Products; label: string; about: string }[] = [
  {
    value: 'int8',
    label: 'Tensor cores, int8, two limbs',
    about: 'About 1.8x faster training steps than the f32 units on an H100; log-probabilities move by about 0.006 on average, less than bf16 moves them from fp32.',
  },
  {
    value: 'int8-1limb',
    label: 'Tensor cores, int8, one limb (fastest)',
    about: 'About 2.3x faster training steps than the f32 units on an H100; log-probabilities move by about 0.008 on average, more where activations have outlier channels.',
  },
  {
    value: 'int8-row',
    label: 'Tensor cores, int8, two limbs, steps by row',
    about: 'About 1.2x faster products than two limbs by block on an H100; coarser where a row’s or a column’s magnitude varies along K.',
  },
  {
    value: 'f32',
    label: 'f32 units (exact 4-bit products)',
    about: 'Every WebGPU device; the products are those of the 4-bit weights in f32.',
  },
];

/** Whether `v` is one of the settings. */
export function isProducts(v: unknown): v is Products {
  return PRODUCTS.some((p) => p.value === v);
}

/** A stored setting read back: also the name an earlier version stored for one limb ('int8-one-limb'). */
export function storedProductsValue(v: unknown): Products | undefined {
  if (v === 'int8-one-limb') return 'int8-1limb';
  return isProducts(v) ? v : undefined;
}

/** The families of product paths: what a device may offer them, whichever are implemented. */
export type ProductPath = 'f32' | 'int8' | 'f16';

export interface PathAvailability {
  path: ProductPath;
  available: boolean;
  /** What the device offers for it, or what it lacks. */
  why: string;
}

/** Why the int8 settings cannot run on `caps`, or null when they can: the tensor-core GEMM's own
 * needs (mmaUnsupportedBy) and those of the K blocks and tiles the settings take (PATHS). */
function int8Unsupported(caps: Capabilities): string | null {
  const mma = mmaUnsupportedBy(caps);
  if (mma) return mma;
  if (!caps.packedInt8Dot) return "no WGSL 'packed_4x8_integer_dot_product' (the K-blocked tensor-core kernels need it)";
  const { minSize, maxSize } = caps.subgroups;
  if (minSize !== 32 || maxSize !== 32) return `subgroups of ${minSize ?? '?'} to ${maxSize ?? '?'} lanes; the K-blocked tiles need exactly 32`;
  for (const limbs of [1, 2] as const) {
    const tile = PATHS.mmaTile[limbs];
    const need = mmaTileBytes(tile, PATHS.mmaKBlock[limbs], limbs);
    if (need > caps.limits.maxComputeWorkgroupStorageSize) return `a ${tile.rows}x${tile.cols} tile needs ${need} bytes of workgroup memory; this GPU has ${caps.limits.maxComputeWorkgroupStorageSize}`;
    if (tile.threads > caps.limits.maxComputeInvocationsPerWorkgroup) return `a tile takes ${tile.threads} threads a workgroup; this GPU allows ${caps.limits.maxComputeInvocationsPerWorkgroup}`;
  }
  return null;
}

/** Each path family on `caps`, in the order of preference: available, or why not. f16 is reported
 * (whether f16 tensor cores are offered) but has no implementation yet, so it is never available. */
export function productPaths(caps: Capabilities): PathAvailability[] {
  const int8 = int8Unsupported(caps);
  const f16 = configsOf(caps, 'f16');
  const f16Why = !caps.shaderF16
    ? 'no shader-f16 on this device'
    : f16.length === 0
      ? 'shader-f16, but no f16 subgroup-matrix configuration'
      : `f16 subgroup matrices offered (${formatConfigs(f16)})`;
  return [
    { path: 'f16', available: false, why: `${f16Why}; no f16 product path is implemented yet` },
    { path: 'int8', available: int8 === null, why: int8 ?? 'i8->i32 16x16x32 subgroup matrices offered, with packed int8 dot products and subgroups of 32' },
    { path: 'f32', available: true, why: 'the f32 units of every WebGPU device' },
  ];
}

/** The setting a device starts with, from the implemented paths it offers, and why. */
export function chooseProducts(caps: Capabilities): { products: Products; why: string } {
  // Of the families, f32 and int8 are implemented; f16 is only reported (productPaths).
  const int8 = productPaths(caps).find((p) => p.path === 'int8')!;
  return int8.available
    ? { products: 'int8', why: `int8 tensor cores: ${int8.why}` }
    : { products: 'f32', why: `f32 units; int8 tensor cores unavailable: ${int8.why}` };
}

/** Lines for people: each path family, then the default setting and why (the Model panel, `cli gpu`). */
export function productPathSummary(caps: Capabilities): string[] {
  const choice = chooseProducts(caps);
  return [
    ...productPaths(caps).map((p) => `${p.path} products: ${p.available ? 'available' : 'unavailable'} — ${p.why}`),
    `default products: ${choice.products} — ${choice.why}`,
  ];
}

/** Why this device cannot run the int8 settings, or null when it can. */
export function tensorCoresUnsupported(gpu: Gpu): string | null {
  return int8Unsupported(capabilitiesOf(gpu));
}

/** The setting a device starts with: the tensor cores where they are offered. */
export function defaultProducts(gpu: Gpu): Products {
  return chooseProducts(capabilitiesOf(gpu)).products;
}

/** The model options (Qwen3VL.load) that run `products` and `vision`. */
export function productOptions(products: Products, vision: VisionProducts): Pick<ModelOptions, 'tensorCoreGemm' | 'tensorCoreLimbs' | 'tensorCoreSteps' | 'visionTensorCores'> {
  const tc = products === 'f32' ? null : TENSOR_CORES[products];
  return { tensorCoreGemm: tc !== null, tensorCoreLimbs: tc?.limbs, tensorCoreSteps: tc?.steps, visionTensorCores: vision === 'int8' };
}

/** Moves a loaded model's products onto `products`; throws MissingFeatureError for an int8 setting where the GPU has no subgroup matrices. */
export async function setProducts(model: Qwen3VL, products: Products): Promise<void> {
  if (products === 'f32') await model.setTensorCoreGemm(false);
  else await model.setTensorCoreGemm(true, TENSOR_CORES[products].limbs, TENSOR_CORES[products].steps);
}

/** The setting the model runs now. */
export function productsOf(model: Qwen3VL): Products {
  const [limbs, steps] = [model.tensorCoreLimbs, model.tensorCoreSteps];
  if (limbs === null) return 'f32';
  const found = (Object.keys(TENSOR_CORES) as (keyof typeof TENSOR_CORES)[]).find((p) => TENSOR_CORES[p].limbs === limbs && TENSOR_CORES[p].steps === steps);
  if (found === undefined) throw new Error(`the model runs tensor cores with ${limbs} limb(s) and steps by ${steps}, which no products setting names`);
  return found;
}
