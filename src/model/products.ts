// Where a loaded model's large 4-bit products run: the one setting for it (the engine config's
// `products`, the CLI's --products, the Model panel's choice), the path each device offers, and
// the tensor-core ops made and checked for a setting (makeTensorCores). The f32 units run on every
// WebGPU device and are exact to the 4-bit weights; the f16 and int8 settings use tensor cores
// through Chromium's subgroup-matrix extension where the browser offers it.
import { capabilitiesOf, configsOf, formatConfigs, MissingFeatureError, TensorCoreCheckError, type Capabilities, type Gpu } from '../gpu';
import { f16Config, f16Unsupported, MatmulQ4F16 } from '../ops/matmulQ4F16';
import { JOIN_COLUMNS } from '../ops/productSizes';
import { AttentionF16, attentionF16Unsupported, attentionF16UnsupportedBy, checkAttentionF16 } from '../ops/attentionF16';
import type { AttentionConfig } from '../ops/attention';
import { MatmulQ4Mma, mmaTileBytes, mmaUnsupportedBy, type MmaSteps } from '../ops/matmulQ4Mma';
import { checkF16Dense, checkQ4F16, checkQ4F16Joined, checkQ4F16Lora, checkQ4Mma, type MmaAccuracy, type Q4Product } from '../ops/matmulQ4MmaCheck';
import { PATHS, tensorCoreOptions, type TensorCoreProducts } from '../ops/projection';
import type { ModelOptions } from './qwen3vl';
import { chooseVisionProducts, type VisionProductsSetting } from './visionProductsSetting';

/**
 * The decoder's and the LM head's products of more than 8 rows (prefill, scoring, training) and
 * their input gradients; decode's GEMVs are unaffected.
 * 'f32': the f32 kernels. 'f16': f16 tensor cores (x and the dequantized W rounded to f16, f32
 * sums). 'int8': tensor cores, x in two int8 limbs, steps by K block of 128. 'int8-1limb': one limb
 * (K blocks of 256), coarsest where x has outlier channels. 'int8-row': two limbs, one step per row
 * of x and column of W over the whole of K, the fastest, coarsest where W's group scales vary along K.
 */
export type Products = 'f32' | 'f16' | 'int8' | 'int8-1limb' | 'int8-row';

/** The vision tower's dense products: 'f32' (the f32 units, its weights as loaded), 'int8' (its
 * weights rounded to int8 once, x in two limbs) or 'f16' (each weight rounded to f16 as its product
 * runs, f16 tensor cores). */
export type VisionProducts = 'f32' | 'int8' | 'f16';

/** The int8 tensor-core op's settings each int8 value stands for (MatmulQ4MmaOptions.limbs and steps). */
type Int8Products = Exclude<Products, 'f32' | 'f16'>;
const TENSOR_CORES: Record<Int8Products, { limbs: 1 | 2; steps: MmaSteps }> = {
  int8: { limbs: 2, steps: 'block' },
  'int8-1limb': { limbs: 1, steps: 'block' },
  'int8-row': { limbs: 2, steps: 'row' },
};

/** The settings in the order the panel lists them, with what each costs and gains (H100 figures,
 * BENCHMARKS.md: the default config's step, the GEMMs, and their drift from f32). */
export const PRODUCTS: readonly { value: Products; label: string; about: string }[] = [
  {
    value: 'int8',
    label: 'Tensor cores, int8, two limbs',
    about: 'About 2.8x faster training steps than the f32 units on an H100 (the default config); log-probabilities move by about 0.006 on average, less than bf16 moves them from fp32.',
  },
  {
    value: 'int8-1limb',
    label: 'Tensor cores, int8, one limb',
    about: 'Half the tensor-core work of two limbs (x in one int8 limb): training steps about 10% faster than two limbs on an H100; log-probabilities move by about 0.008 on average, more where activations have outlier channels.',
  },
  {
    value: 'int8-row',
    label: 'Tensor cores, int8, two limbs, steps by row',
    about: 'One int8 step per row of x and column of W over the whole of K (no epilogue per K block): training steps about 15% faster than by block on an H100; coarser where a row’s or a column’s magnitude varies along K.',
  },
  {
    value: 'f16',
    label: 'Tensor cores, f16',
    about: 'The tensor-core path most browsers offer (shader-f16 and f16 subgroup matrices: Apple GPUs, D3D12, NVIDIA with its toggle); x and the weights rounded to f16 (relative 2^-11), f32 sums. On an H100 its training step runs within about 5% of int8’s.',
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

/** The path family a setting belongs to. */
export function productFamily(p: Products): ProductPath {
  return p === 'f32' || p === 'f16' ? p : 'int8';
}

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

/** Each path family on `caps`, in the order of preference: available, or why not. */
export function productPaths(caps: Capabilities): PathAvailability[] {
  const int8 = int8Unsupported(caps);
  const f16 = f16Unsupported(caps);
  const cfg = f16Config(caps);
  return [
    { path: 'f16', available: f16 === null, why: f16 ?? `shader-f16 and f16->f32 ${cfg!.M}x${cfg!.N}x${cfg!.K} subgroup matrices offered (of ${formatConfigs(configsOf(caps, 'f16'))})` },
    { path: 'int8', available: int8 === null, why: int8 ?? 'i8->i32 16x16x32 subgroup matrices offered, with packed int8 dot products and subgroups of 32' },
    { path: 'f32', available: true, why: 'the f32 units of every WebGPU device' },
  ];
}

/** The setting a device starts with, and why: the first available path of productPaths' order
 * (f16 before int8: its training step ran faster on the H100 the benchmarks measure, BENCHMARKS.md). */
export function chooseProducts(caps: Capabilities): { products: Products; why: string } {
  const paths = productPaths(caps);
  const best = paths.find((p) => p.available)!;
  const passed = paths
    .slice(0, paths.indexOf(best))
    .map((p) => `${p.path} unavailable: ${p.why}`)
    .join('; ');
  const name = best.path === 'f32' ? 'f32 units' : `${best.path} tensor cores`;
  return { products: best.path, why: `${name}: ${best.why}${passed ? `; ${passed}` : ''}` };
}

/** Lines for people: each path family, then the default setting and why (the Model panel, `cli gpu`). */
export function productPathSummary(caps: Capabilities): string[] {
  const choice = chooseProducts(caps);
  const vision = chooseVisionProducts('auto', choice.products);
  // The decoder's heads of 128 (the vision tower's of 64 fit wherever these do).
  const attention = attentionF16UnsupportedBy(caps, 128);
  return [
    ...productPaths(caps).map((p) => `${p.path} products: ${p.available ? 'available' : 'unavailable'} — ${p.why}`),
    `default products: ${choice.products} — ${choice.why}`,
    `default vision products: ${vision.vision} — ${vision.why}`,
    `attention over packed rows on f16 tensor cores, with any tensor-core products: ${attention === null ? 'available' : `unavailable — ${attention}`}`,
  ];
}

/** The setting a device starts with: the fastest tensor cores it offers, else the f32 units. */
export function defaultProducts(gpu: Gpu): Products {
  return chooseProducts(capabilitiesOf(gpu)).products;
}

/** The model options (Qwen3VL.load) that run `products` and `vision`. */
export function productOptions(products: Products, vision: VisionProductsSetting): Pick<ModelOptions, 'products' | 'visionProducts'> {
  return { products, visionProducts: vision };
}

/** The widest x and the most rows a tensor-core op's workspace takes. */
export interface ProductDims {
  maxRows: number;
  maxK: number;
}

/**
 * The tensor-core op for `products` (not 'f32'), once its forward and its input gradient have each
 * matched the f64 product on a small random product (activations with outlier channels) within
 * their rounding bound. Otherwise it is released and TensorCoreCheckError thrown: where a driver
 * offers the extension but computes wrongly, the model stays on the f32 kernels instead of
 * training on wrong products. MissingFeatureError where the device lacks what it needs.
 */
export async function makeTensorCores(gpu: Gpu, products: Exclude<Products, 'f32'>, dims: ProductDims): Promise<TensorCoreProducts> {
  return products === 'f16' ? makeF16Products(gpu, dims) : makeInt8Products(gpu, products, dims);
}

/** makeTensorCores for 'f16'. */
async function makeF16Products(gpu: Gpu, dims: ProductDims): Promise<MatmulQ4F16> {
  const caps = capabilitiesOf(gpu);
  const why = f16Unsupported(caps);
  if (why) throw new MissingFeatureError('shader-f16', why);
  const waveSlots = caps.multiprocessors;
  const op = await MatmulQ4F16.create(gpu, { maxRows: 64 * Math.ceil(dims.maxRows / 64), maxK: dims.maxK, waveSlots });
  const k = Math.min(dims.maxK, 512);
  const check = (o: MatmulQ4F16) => checked(o, 'f16', [[70, 96, k], false], [[70, 96, 128], true], (shape, input) => checkQ4F16(gpu, o, shape, 17, input));
  // An op on the same compiled kernels whose small products take a tile `op` gives only large ones:
  // checked, then released (checked releases it on a failure, and `op` goes with it).
  const checkBeside = async (side: MatmulQ4F16, run: (o: MatmulQ4F16) => Promise<unknown>) => {
    try {
      await run(side);
    } catch (e) {
      op.release();
      throw e;
    }
    side.release();
  };
  // Products of one x joined into one (q/k/v), where the op joins any: outputs of 256 columns side
  // by side, at 70 rows on the tile of few workgroups, or on the tile a side op gives them.
  const joinedNs = Array<number>(Math.min(3, Math.floor(dims.maxK / JOIN_COLUMNS))).fill(JOIN_COLUMNS);
  const joinedCheck = async (o: MatmulQ4F16, m: number, seed: number) => {
    if (joinedNs.length >= 2) accept(o, 'f16', '', await checkQ4F16Joined(gpu, o, m, joinedNs, 128, seed, 8));
  };
  const joinedK = Math.max(k, 128, JOIN_COLUMNS * joinedNs.length);
  // Small products take the tile of few workgroups: the wide tile through wideFrom 0.
  await checkBeside(await MatmulQ4F16.create(gpu, { maxRows: 128, maxK: joinedK, wideFrom: 0 }), async (wide) => {
    await check(wide);
    await joinedCheck(wide, 70, 37);
  });
  // The one-wave tile: 150 rows take two workgroups of the wide tile and one of it (with one slot);
  // joined outputs, one of it a 256 columns (with as many slots).
  if (waveSlots) {
    await checkBeside(await MatmulQ4F16.create(gpu, { maxRows: 192, maxK: Math.max(k, 128), waveSlots: 1 }), async (tall) => {
      await checked(tall, 'f16', [[150, 96, k], false], [[150, 96, 128], true], (shape, input) => checkQ4F16(gpu, tall, shape, 29, input));
      await checked(tall, 'f16', [[150, 96, k], false], [[150, 96, 128], true], (shape, input) => checkQ4F16Lora(gpu, tall, shape, 31, input, 8));
    });
    await checkBeside(await MatmulQ4F16.create(gpu, { maxRows: 192, maxK: joinedK, waveSlots: joinedNs.length }), (tall) => joinedCheck(tall, 150, 41));
  }
  await check(op);
  // LoRA's terms inside the product (a rank-8 adapter, forward and input gradient): the extended
  // copies of x and W, on the kernels checked above.
  await checked(op, 'f16', [[70, 96, k], false], [[70, 96, 128], true], (shape, input) => checkQ4F16Lora(gpu, op, shape, 23, input, 8));
  await joinedCheck(op, 70, 43);
  return op;
}

/** The vision tower's op for `v`: makeTensorCores' int8 op, or its f16 op once its products on
 * dense weights (bf16 and f32, each rounded to f16 a call) have also matched the f64 product. */
export async function makeVisionProducts(gpu: Gpu, v: Exclude<VisionProducts, 'f32'>, dims: ProductDims): Promise<TensorCoreProducts> {
  if (v === 'int8') return makeInt8Products(gpu, 'int8', dims);
  const op = await makeF16Products(gpu, dims);
  // Weights as checkpoints hold them: bf16 (the published models), f32.
  const both = async (shape: [number, number, number]) => {
    const [bf16, f32] = [await checkF16Dense(gpu, op, shape, 19, 'bf16'), await checkF16Dense(gpu, op, shape, 23, 'f32')];
    return Number.isNaN(f32.ofBound) || f32.ofBound > bf16.ofBound ? f32 : bf16;
  };
  return checked(op, 'f16', [[70, 96, Math.min(dims.maxK, 512)], false], [[70, 96, 128], false], both);
}

/** makeTensorCores for an int8 setting (the vision tower's dense products take this op too). */
export async function makeInt8Products(gpu: Gpu, products: Int8Products, dims: ProductDims): Promise<MatmulQ4Mma> {
  const { limbs, steps } = TENSOR_CORES[products];
  const op = await MatmulQ4Mma.create(gpu, { ...tensorCoreOptions(limbs, dims.maxRows, dims.maxK), steps });
  const kb = op.kBlock;
  const k = Math.floor(Math.min(dims.maxK, 512) / kb) * kb;
  if (k === 0) return op; // no weight reaches it
  return checked(op, 'int8', [[70, 96, k], false], [[70, kb, 128], true], (shape, input) => checkQ4Mma(gpu, op, shape, 17, input));
}

type CheckShape = readonly [readonly [number, number, number], boolean];

async function checked<T extends Q4Product & { release(): void }>(op: T, path: string, forward: CheckShape, input: CheckShape, check: (shape: [number, number, number], input: boolean) => Promise<MmaAccuracy>): Promise<T> {
  for (const [shape, isInput] of [forward, input]) accept(op, path, `${isInput ? 'input gradient' : 'forward'} `, await check([...shape], isInput));
  return op;
}

/** Returns where `a` is within its rounding bound; else releases `op` and throws TensorCoreCheckError. */
function accept(op: { release(): void }, path: string, what: string, a: MmaAccuracy): void {
  if (a.ofBound <= 1) return;
  op.release();
  throw new TensorCoreCheckError(`${what}${a.shape}: error ${a.ofBound.toFixed(2)} times its rounding bound`, path);
}

/**
 * Attention over packed rows on f16 tensor cores for `config` once it has matched the f64
 * attention on a small batch (checkAttentionF16); null where the device does not offer them.
 * TensorCoreCheckError where the check fails (the attention then stays on the f32 kernels).
 */
export async function makeAttentionTensorCores(gpu: Gpu, config: AttentionConfig): Promise<AttentionF16 | null> {
  if (attentionF16Unsupported(gpu, config.headDim)) return null;
  const op = await AttentionF16.create(gpu, config);
  const ofBound = await checkAttentionF16(gpu, op);
  if (!(ofBound <= 1)) {
    op.release();
    throw new TensorCoreCheckError(`attention forward: error ${ofBound.toFixed(2)} times its rounding bound`, 'f16');
  }
  return op;
}
