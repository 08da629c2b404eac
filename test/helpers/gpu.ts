// Gives unit tests a Gpu in Node on a software Vulkan driver ($VLRL_VK: lavapipe by default).
import { createNodeGpu } from '../../src/node/gpu';
import type { Gpu } from '../../src/gpu';

let shared: Promise<Gpu> | null = null;

/** One device per test process, created on first use. */
export function testGpu(): Promise<Gpu> {
  shared ??= createNodeGpu({ driver: process.env.VLRL_VK ?? 'lavapipe' });
  return shared;
}

/** `gpu` as a device that binds only WebGPU's default 8 storage buffers per stage (Chrome offers
 * 10): kernels that bind more must fall back. */
export function withDefaultStorageLimit(gpu: Gpu): Gpu {
  const limits = new Proxy(gpu.limits, { get: (t, k) => (k === 'maxStorageBuffersPerShaderStage' ? 8 : t[k as keyof GPUSupportedLimits]) });
  return Object.create(gpu, { limits: { value: limits } }) as Gpu;
}

/** `gpu` as a device without the 'subgroups' feature: kernels that can use subgroups take their fallback. */
export function withoutSubgroups(gpu: Gpu): Gpu {
  const features = new Set([...gpu.features].filter((f) => f !== 'subgroups'));
  return Object.create(gpu, { features: { value: features } }) as Gpu;
}
