// What one device offers the engine, as one typed record: the features its kernels can use (f16,
// subgroups, subgroup matrices with each configuration the adapter lists, packed int8 dot
// products) and the limits that size them. Product paths are chosen from it (src/model/products.ts),
// and `cli gpu` and the Model panel show it (capabilitySummary).
import type { AdapterSummary, EngineFeature, SubgroupMatrixConfig } from './device';

/** The WGSL language extension for dot4I8Packed / dot4U8Packed. */
export const PACKED_INT8_DOT = 'packed_4x8_integer_dot_product';

/** The limits that decide which kernels and tiles fit. */
export const CAPABILITY_LIMITS = [
  'maxBufferSize',
  'maxStorageBufferBindingSize',
  'maxComputeWorkgroupStorageSize',
  'maxComputeInvocationsPerWorkgroup',
] as const;
export type CapabilityLimit = (typeof CAPABILITY_LIMITS)[number];

export interface Capabilities {
  adapter: string;
  /** The adapter's vendor as the implementation names it ('nvidia', 'apple', 'mesa'...). */
  vendor: string;
  /** 'shader-f16' is on the device: f16 arithmetic and storage in WGSL. */
  shaderF16: boolean;
  /** 'subgroups' is on the device, with the adapter's subgroup sizes (null where it does not say). */
  subgroups: { enabled: boolean; minSize: number | null; maxSize: number | null };
  /** 'chromium-experimental-subgroup-matrix' is on the device, with every configuration the adapter lists. */
  subgroupMatrix: { enabled: boolean; configs: SubgroupMatrixConfig[] };
  /** WGSL's packed 4x8-bit integer dot products. */
  packedInt8Dot: boolean;
  limits: Record<CapabilityLimit, number>;
  /** The GPU's multiprocessors where its adapter's name says which GPU it is (multiprocessorsOf), else null. */
  multiprocessors: number | null;
}

/** Multiprocessors of the GPUs whose adapter names them, for the tile that runs a grid in one wave
 * (src/ops/matmulQ4F16.ts, oneWave). WebGPU does not expose the count; these are NVIDIA's published
 * figures for the GPUs BENCHMARKS.md measures (the H100 SXM's and the H200's are one die). */
const MULTIPROCESSORS: readonly [RegExp, number][] = [
  [/h200/i, 132],
  [/h100.*(hbm3|sxm)/i, 132],
];

/** The multiprocessors of the GPU `adapter` (the adapter's name) names, or null where not known. */
export function multiprocessorsOf(adapter: string): number | null {
  return MULTIPROCESSORS.find(([name]) => name.test(adapter))?.[1] ?? null;
}

/** What the device of `gpu` offers (features enabled on it, the adapter's configurations and sizes). */
export function capabilitiesOf(gpu: { features: ReadonlySet<EngineFeature>; adapter: AdapterSummary; limits: GPUSupportedLimits }): Capabilities {
  return capabilitiesFrom(gpu.adapter, gpu.features, gpu.limits);
}

/** The record from an adapter's summary, the features enabled on its device and the device's limits
 * (away from the device: the worker's gpuInfo gives the summary and the features, and the summary's
 * limits are the device's, which requestDevice raises to the adapter's). */
export function capabilitiesFrom(a: AdapterSummary, enabled: Iterable<string>, limits: GPUSupportedLimits | Readonly<Record<string, number>> = a.limits): Capabilities {
  const on = new Set<string>(enabled);
  const lim = {} as Record<CapabilityLimit, number>;
  for (const k of CAPABILITY_LIMITS) lim[k] = Number((limits as Readonly<Record<string, number>>)[k]);
  const matrix = on.has('chromium-experimental-subgroup-matrix');
  return {
    adapter: a.name,
    vendor: a.vendor,
    shaderF16: on.has('shader-f16'),
    subgroups: { enabled: on.has('subgroups'), minSize: a.subgroupMinSize ?? null, maxSize: a.subgroupMaxSize ?? null },
    subgroupMatrix: { enabled: matrix, configs: matrix ? [...(a.subgroupMatrixConfigs ?? [])] : [] },
    packedInt8Dot: a.wgslFeatures.includes(PACKED_INT8_DOT),
    limits: lim,
    multiprocessors: multiprocessorsOf(a.name),
  };
}

/** The subgroup-matrix configurations on the device whose operands are `componentType`. */
export function configsOf(caps: Capabilities, componentType: string): SubgroupMatrixConfig[] {
  return caps.subgroupMatrix.configs.filter((c) => c.componentType === componentType);
}

/** Whether the device runs subgroup matrices of exactly `want` (all five fields). */
export function hasConfig(caps: Capabilities, want: SubgroupMatrixConfig): boolean {
  return configsOf(caps, want.componentType).some((c) => c.resultComponentType === want.resultComponentType && c.M === want.M && c.N === want.N && c.K === want.K);
}

/** Configurations grouped by their types: 'f16->f32 16x16x16, 16x8x16; f16->f16 16x16x16'. */
export function formatConfigs(configs: readonly SubgroupMatrixConfig[]): string {
  const byType = new Map<string, string[]>();
  for (const c of configs) {
    const key = `${c.componentType}->${c.resultComponentType}`;
    byType.set(key, [...(byType.get(key) ?? []), `${c.M}x${c.N}x${c.K}`]);
  }
  return [...byType].map(([types, sizes]) => `${types} ${sizes.join(', ')}`).join('; ');
}

function bytes(n: number): string {
  if (n >= 2 ** 30) return `${+(n / 2 ** 30).toFixed(2)} GiB`;
  if (n >= 2 ** 20) return `${+(n / 2 ** 20).toFixed(1)} MiB`;
  return `${+(n / 2 ** 10).toFixed(1)} KiB`;
}

/** The record as lines of text for people (the Model panel, `cli gpu`'s log). */
export function capabilitySummary(caps: Capabilities): string[] {
  const f16 = caps.shaderF16
    ? 'f16 shaders: yes'
    : `f16 shaders: no${caps.vendor.toLowerCase() === 'nvidia' ? " (Dawn hides shader-f16 on NVIDIA's Vulkan driver unless started with the toggle vulkan_enable_f16_on_nvidia)" : ''}`;
  const sg = caps.subgroups;
  const sizes = sg.minSize === null ? '' : sg.minSize === sg.maxSize ? `, ${sg.minSize} lanes` : `, ${sg.minSize} to ${sg.maxSize} lanes`;
  const matrix = caps.subgroupMatrix.enabled
    ? `subgroup matrices: ${formatConfigs(caps.subgroupMatrix.configs) || 'none listed'}`
    : 'subgroup matrices: no (Chrome offers them with chrome://flags/#enable-unsafe-webgpu, Dawn with allow_unsafe_apis)';
  const f16Mma = configsOf(caps, 'f16');
  return [
    f16,
    `subgroups: ${sg.enabled ? `yes${sizes}` : 'no'}`,
    matrix,
    f16Mma.length > 0 ? `f16 tensor cores: offered (${formatConfigs(f16Mma)})` : 'f16 tensor cores: not offered',
    `packed int8 dot products: ${caps.packedInt8Dot ? 'yes' : 'no'}`,
    `largest buffer ${bytes(caps.limits.maxBufferSize)}, storage binding ${bytes(caps.limits.maxStorageBufferBindingSize)}, workgroup memory ${bytes(caps.limits.maxComputeWorkgroupStorageSize)}, ${caps.limits.maxComputeInvocationsPerWorkgroup} threads a workgroup`,
    caps.multiprocessors === null
      ? `multiprocessors: not known (the adapter does not name its GPU)${f16Mma.length > 0 ? ': no one-wave f16 tile' : ''}`
      : `multiprocessors: ${caps.multiprocessors} (from the adapter's name)${f16Mma.length > 0 ? ': f16 products whose grid fits one wave take the one-wave tile' : ''}`,
  ];
}
