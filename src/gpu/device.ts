// Adapter and device acquisition with feature detection. Works the same in the browser
// (navigator.gpu) and in Node (the `webgpu` package passes its GPU object in).
import { LimitError, MissingFeatureError, WebGpuUnavailableError } from './errors';

/** Features the engine uses when offered. `subgroup-matrix` is Chromium's tensor-core extension. */
export const OPTIONAL_FEATURES = [
  'shader-f16',
  'subgroups',
  'timestamp-query',
  'chromium-experimental-subgroup-matrix',
] as const;
export type EngineFeature = (typeof OPTIONAL_FEATURES)[number];

export interface DeviceOptions {
  /** Features that must be present; acquisition fails with MissingFeatureError otherwise. */
  requiredFeatures?: EngineFeature[];
  /** Minimum limits; acquisition fails with LimitError otherwise. */
  requiredLimits?: Partial<Record<keyof GPUSupportedLimits, number>>;
  /** Features to leave off even when offered (tests use this to exercise fallbacks). */
  disableFeatures?: EngineFeature[];
  powerPreference?: GPUPowerPreference;
  /** Buffer limits the engine keeps below the device's: WebGPU raises any request under its
   * defaults (256 MiB buffers, 128 MiB bindings) to them, so the splitting a smaller browser GPU
   * needs is tested by capping here (tests, emulating a small adapter). */
  capLimits?: Partial<Record<CappedLimit, number>>;
}

/** The limits `capLimits` may lower. */
export type CappedLimit = 'maxBufferSize' | 'maxStorageBufferBindingSize';

/** The device's limits with `caps` applied (the object every size decision reads: Gpu.limits). */
export function cappedLimits(limits: GPUSupportedLimits, caps: DeviceOptions['capLimits'] = {}): GPUSupportedLimits {
  if (Object.keys(caps).length === 0) return limits;
  const out: Record<string, number> = {};
  for (const k in limits) out[k] = (limits as unknown as Record<string, number>)[k];
  for (const [k, v] of Object.entries(caps)) {
    if (!(Number.isInteger(v) && v > 0)) throw new RangeError(`capLimits.${k} must be a positive integer, got ${v}`);
    out[k] = Math.min(out[k], v);
  }
  return out as unknown as GPUSupportedLimits;
}

export interface AdapterSummary {
  name: string;
  vendor: string;
  architecture: string;
  description: string;
  features: string[];
  /** WGSL language extensions the implementation offers (navigator.gpu.wgslLanguageFeatures). */
  wgslFeatures: string[];
  limits: Record<string, number>;
  /** The tensor-core shapes of 'chromium-experimental-subgroup-matrix' (Dawn lists them on the
   * adapter's info only, not on the device's). */
  subgroupMatrixConfigs?: SubgroupMatrixConfig[];
  /** The adapter's subgroup sizes, where the implementation says them (GPUAdapterInfo). */
  subgroupMinSize?: number;
  subgroupMaxSize?: number;
}

export interface SubgroupMatrixConfig {
  componentType: string;
  resultComponentType: string;
  M: number;
  N: number;
  K: number;
}

/** The numeric limits worth showing and raising (maxed to what the adapter allows). */
const RAISED_LIMITS = [
  'maxBufferSize',
  'maxStorageBufferBindingSize',
  'maxUniformBufferBindingSize',
  'maxComputeWorkgroupStorageSize',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupSizeX',
  'maxComputeWorkgroupSizeY',
  'maxComputeWorkgroupSizeZ',
  'maxComputeWorkgroupsPerDimension',
  'maxStorageBuffersPerShaderStage',
  'maxBindGroups',
] as const;

export function summarizeAdapter(adapter: GPUAdapter, wgsl: Iterable<string> = []): AdapterSummary {
  const info = adapter.info;
  const limits: Record<string, number> = {};
  for (const k of RAISED_LIMITS) limits[k] = Number((adapter.limits as unknown as Record<string, number>)[k]);
  const name = [info.vendor, info.architecture, info.device, info.description].filter((s) => s).join(' ') || 'unknown adapter';
  return {
    name,
    vendor: info.vendor,
    architecture: info.architecture,
    description: info.description,
    features: [...adapter.features].sort(),
    wgslFeatures: [...wgsl].sort(),
    limits,
    subgroupMatrixConfigs: ((info as GPUAdapterInfo & { subgroupMatrixConfigs?: SubgroupMatrixConfig[] }).subgroupMatrixConfigs ?? []).map(
      ({ componentType, resultComponentType, M, N, K }) => ({ componentType, resultComponentType, M, N, K }),
    ),
    ...(info.subgroupMinSize === undefined ? {} : { subgroupMinSize: info.subgroupMinSize, subgroupMaxSize: info.subgroupMaxSize }),
  };
}

export async function requestAdapter(gpu: GPU | undefined, opts: DeviceOptions = {}): Promise<GPUAdapter> {
  if (!gpu) {
    throw new WebGpuUnavailableError(
      'WebGPU is not available: use a recent Chrome or Edge (WebGPU on), served from https or localhost',
    );
  }
  const adapter = await gpu.requestAdapter({ powerPreference: opts.powerPreference ?? 'high-performance' });
  if (!adapter) throw new WebGpuUnavailableError('WebGPU is present but no GPU adapter was found');
  return adapter;
}

export interface AcquiredDevice {
  adapter: GPUAdapter;
  device: GPUDevice;
  features: Set<EngineFeature>;
  summary: AdapterSummary;
  /** The device's limits, lowered by DeviceOptions.capLimits. */
  limits: GPUSupportedLimits;
}

/** `wgsl`: the WGSL language extensions of the GPU object the adapter came from (for the summary). */
export async function requestDevice(adapter: GPUAdapter, opts: DeviceOptions = {}, wgsl: Iterable<string> = []): Promise<AcquiredDevice> {
  const offered = new Set<string>(adapter.features);
  for (const f of opts.requiredFeatures ?? []) {
    if (!offered.has(f)) throw new MissingFeatureError(f, `offered: ${[...offered].sort().join(', ') || 'none'}`);
  }
  const disabled = new Set(opts.disableFeatures ?? []);
  const features = new Set<EngineFeature>(
    OPTIONAL_FEATURES.filter((f) => offered.has(f) && !disabled.has(f)),
  );
  const adapterLimits = adapter.limits as unknown as Record<string, number>;
  for (const [k, v] of Object.entries(opts.requiredLimits ?? {})) {
    const have = adapterLimits[k];
    if (have === undefined || have < (v as number)) throw new LimitError(k, v as number, have ?? 0);
  }
  const requiredLimits: Record<string, number> = {};
  for (const k of RAISED_LIMITS) requiredLimits[k] = adapterLimits[k];
  const device = await adapter.requestDevice({
    requiredFeatures: [...features] as GPUFeatureName[],
    requiredLimits,
    label: 'vlrl',
  });
  return { adapter, device, features, summary: summarizeAdapter(adapter, wgsl), limits: cappedLimits(device.limits, opts.capLimits) };
}
