// The capabilities record on the real adapter (lavapipe: shader-f16 and subgroups, no subgroup
// matrices), the product-path chooser on synthetic records (an H100 through Dawn with its int8 and
// f16 configurations, an Apple GPU's f16/f32 8x8 ones, none), their text, and Dawn's flags.
import { describe, expect, it } from 'vitest';
import { capabilitiesFrom, capabilitiesOf, capabilitySummary, multiprocessorsOf, PACKED_INT8_DOT, type Capabilities, type SubgroupMatrixConfig } from '../../src/gpu';
import { chooseProducts, defaultProducts, productPaths, productPathSummary } from '../../src/model/products';
import { F16_TILES, f16TileBytes, f16TileFor, f16UnsupportedOn, joinsOutputs, oneWaveTakes } from '../../src/ops/matmulQ4F16';
import { EXPAND_MAX_WORDS } from '../../src/ops/productSizes';
import { createNodeGpu, dawnFlags } from '../../src/node/gpu';
import { mmaUnsupported } from '../../src/ops/matmulQ4Mma';
import { testGpu } from '../helpers/gpu';

const cfg = (componentType: string, resultComponentType: string, M: number, N: number, K: number): SubgroupMatrixConfig => ({ componentType, resultComponentType, M, N, K });

/** An H100 through Dawn with allow_unsafe_apis and vulkan_enable_f16_on_nvidia: the int8 config the
 * int8 kernels take and the f16 ones issue 38 reports. */
const H100_CONFIGS = [
  cfg('i8', 'i32', 16, 16, 32),
  ...(['f32', 'f16'] as const).flatMap((r) => [cfg('f16', r, 16, 16, 16), cfg('f16', r, 16, 8, 16), cfg('f16', r, 16, 8, 8)]),
];
const APPLE_CONFIGS = [cfg('f32', 'f32', 8, 8, 8), cfg('f16', 'f16', 8, 8, 8), cfg('f16', 'f32', 8, 8, 8)];

function record(over: Partial<Capabilities> = {}): Capabilities {
  return {
    adapter: 'synthetic',
    vendor: 'nvidia',
    shaderF16: true,
    subgroups: { enabled: true, minSize: 32, maxSize: 32 },
    subgroupMatrix: { enabled: true, configs: H100_CONFIGS },
    packedInt8Dot: true,
    limits: { maxBufferSize: 2 ** 36, maxStorageBufferBindingSize: 2 ** 32 - 4, maxComputeWorkgroupStorageSize: 49152, maxComputeInvocationsPerWorkgroup: 1024 },
    multiprocessors: null,
    ...over,
  };
}

const path = (caps: Capabilities, p: 'f32' | 'int8' | 'f16') => productPaths(caps).find((x) => x.path === p)!;

describe('capabilities of the real adapter', () => {
  it('records what the device has enabled, the adapter subgroup sizes and the limits', async () => {
    const gpu = await testGpu();
    const caps = capabilitiesOf(gpu);
    expect(caps.adapter).toBe(gpu.adapter.name);
    expect(caps.shaderF16).toBe(gpu.features.has('shader-f16'));
    expect(caps.subgroups.enabled).toBe(gpu.features.has('subgroups'));
    expect(caps.subgroups.minSize).toBe(gpu.device.adapterInfo.subgroupMinSize);
    expect(caps.subgroups.maxSize).toBe(gpu.device.adapterInfo.subgroupMaxSize);
    expect(caps.subgroupMatrix.enabled).toBe(gpu.features.has('chromium-experimental-subgroup-matrix'));
    expect(caps.packedInt8Dot).toBe(gpu.hasWgsl(PACKED_INT8_DOT));
    expect(caps.limits.maxStorageBufferBindingSize).toBe(gpu.limits.maxStorageBufferBindingSize);
    expect(caps.limits.maxBufferSize).toBe(gpu.limits.maxBufferSize);
    expect(caps.limits.maxComputeWorkgroupStorageSize).toBe(gpu.limits.maxComputeWorkgroupStorageSize);
    if (/llvmpipe/i.test(gpu.adapter.name)) {
      expect(caps.shaderF16).toBe(true);
      expect(caps.subgroups.enabled).toBe(true);
      expect(caps.subgroupMatrix).toEqual({ enabled: false, configs: [] });
    }
  });

  it("the same record from the worker's view (the summary and the enabled features, as gpuInfo stores them)", async () => {
    const gpu = await testGpu();
    const seen = JSON.parse(JSON.stringify({ summary: gpu.adapter, enabled: [...gpu.features] })) as { summary: typeof gpu.adapter; enabled: string[] };
    expect(capabilitiesFrom(seen.summary, seen.enabled)).toEqual(capabilitiesOf(gpu));
  });

  it('the default products on it agree with the tensor-core GEMM own check', async () => {
    const gpu = await testGpu();
    const [int8, f16] = (['int8', 'f16'] as const).map((f) => productPaths(capabilitiesOf(gpu)).find((p) => p.path === f)!);
    if (mmaUnsupported(gpu) !== null) expect(int8).toEqual({ path: 'int8', available: false, why: mmaUnsupported(gpu) });
    if (f16UnsupportedOn(gpu) !== null) expect(f16).toEqual({ path: 'f16', available: false, why: f16UnsupportedOn(gpu) });
    expect(defaultProducts(gpu)).toBe(f16.available ? 'f16' : int8.available ? 'int8' : 'f32');
  });

  it('a feature left off is off in the record', async () => {
    const gpu = await createNodeGpu({ driver: process.env.VLRL_VK ?? 'lavapipe', disableFeatures: ['shader-f16', 'subgroups'] });
    const caps = capabilitiesOf(gpu);
    expect(caps.shaderF16).toBe(false);
    expect(caps.subgroups.enabled).toBe(false);
    expect(capabilitySummary(caps)).toContain('f16 shaders: no');
    gpu.device.destroy();
  });
});

describe('the product-path chooser', () => {
  it('int8 and f16 configs with subgroups of 32: both available, f16 by default (the faster on an H100)', () => {
    const caps = record();
    expect(path(caps, 'int8').available).toBe(true);
    expect(chooseProducts(caps).products).toBe('f16');
    const f16 = path(caps, 'f16');
    expect(f16.available).toBe(true);
    expect(f16.why).toMatch(/^shader-f16 and f16->f32 16x16x16 subgroup matrices offered/);
    expect(f16TileFor(caps)).toEqual(F16_TILES[16][0]);
    // Without shader-f16 (NVIDIA's Vulkan driver without Dawn's toggle), int8 is the default.
    expect(chooseProducts(record({ shaderF16: false }))).toEqual({ products: 'int8', why: expect.stringMatching(/^int8 tensor cores: .*; f16 unavailable: no shader-f16/) });
    // Less workgroup memory: a smaller tile of the table.
    expect(f16TileFor(record({ limits: { ...record().limits, maxComputeWorkgroupStorageSize: 32768 } }))).toEqual(F16_TILES[16][3]);
    expect(capabilitySummary(caps)).toContain('f16 tensor cores: offered (f16->f32 16x16x16, 16x8x16, 16x8x8; f16->f16 16x16x16, 16x8x16, 16x8x8)');
    expect(capabilitySummary(caps)).toContain('subgroup matrices: i8->i32 16x16x32; f16->f32 16x16x16, 16x8x16, 16x8x8; f16->f16 16x16x16, 16x8x16, 16x8x8');
    expect(productPathSummary(caps).at(-3)).toMatch(/^default products: f16 — f16 tensor cores/);
    expect(productPathSummary(caps).at(-2)).toBe('default vision products: f16 — auto: the products run on f16 tensor cores');
    expect(productPathSummary(caps).at(-1)).toBe('attention over packed rows on f16 tensor cores, with any tensor-core products: available');
  });

  it("only f16/f32 configs (Apple's 8x8): f16 tensor cores; the int8 path names the missing config and what is offered", () => {
    const caps = record({ vendor: 'apple', subgroupMatrix: { enabled: true, configs: APPLE_CONFIGS }, limits: { ...record().limits, maxComputeWorkgroupStorageSize: 32768 } });
    const choice = chooseProducts(caps);
    expect(choice.products).toBe('f16');
    expect(path(caps, 'int8').why).toMatch(/no i8->i32 M16 N16 K32 subgroup-matrix configuration \(offered: f32->f32 M8 N8 K8, f16->f16 M8 N8 K8, f16->f32 M8 N8 K8\)/);
    expect(path(caps, 'f16').why).toContain('f16->f32 8x8x8 subgroup matrices offered (of f16->f16 8x8x8; f16->f32 8x8x8)');
    expect(f16TileFor(caps)).toEqual(F16_TILES[8][0]);
    // Without shader-f16 (the same GPU, the feature not on the device): f32, saying so.
    expect(chooseProducts({ ...caps, shaderF16: false })).toEqual({ products: 'f32', why: expect.stringContaining('f16 unavailable: no shader-f16 on this device') });
    expect(capabilitySummary(caps)).toContain('f16 tensor cores: offered (f16->f16 8x8x8; f16->f32 8x8x8)');
    // Heads of 128 are 16 fragments of 8: the decoder's attention stays on the f32 units there.
    expect(productPathSummary(caps).at(-1)).toBe('attention over packed rows on f16 tensor cores, with any tensor-core products: unavailable — head dim 128 is not 4 or 8 fragments of 8');
  });

  it('no subgroup matrices: f32, saying the feature is missing', () => {
    const caps = record({ subgroupMatrix: { enabled: false, configs: [] } });
    expect(chooseProducts(caps)).toEqual({ products: 'f32', why: expect.stringContaining("no 'chromium-experimental-subgroup-matrix' feature") });
    expect(path(caps, 'f16').why).toMatch(/^no 'chromium-experimental-subgroup-matrix' feature/);
    expect(path(caps, 'f32')).toEqual({ path: 'f32', available: true, why: expect.any(String) });
    expect(capabilitySummary(caps)).toContain('f16 tensor cores: not offered');
  });

  it('int8 configs but what the K-blocked tiles need missing: f32 with that reason (f16 off, to see int8 alone)', () => {
    const cases: [Partial<Capabilities>, RegExp][] = [
      [{ subgroups: { enabled: false, minSize: 32, maxSize: 32 } }, /'subgroups'/],
      [{ packedInt8Dot: false }, /packed_4x8_integer_dot_product/],
      [{ subgroups: { enabled: true, minSize: 16, maxSize: 64 } }, /16 to 64 lanes.*exactly 32/],
      [{ limits: { ...record().limits, maxComputeWorkgroupStorageSize: 32768 } }, /needs \d+ bytes of workgroup memory; this GPU has 32768/],
      [{ limits: { ...record().limits, maxComputeInvocationsPerWorkgroup: 128 } }, /256 threads a workgroup; this GPU allows 128/],
    ];
    for (const [over, reason] of cases) {
      const choice = chooseProducts(record({ shaderF16: false, ...over }));
      expect(choice.products).toBe('f32');
      expect(choice.why).toMatch(reason);
    }
  });

  it("no shader-f16 on NVIDIA: the summary names Dawn's toggle; the f16 path says why", () => {
    const caps = record({ shaderF16: false });
    expect(capabilitySummary(caps)[0]).toMatch(/^f16 shaders: no .*vulkan_enable_f16_on_nvidia/);
    expect(capabilitySummary(record({ shaderF16: false, vendor: 'apple' }))[0]).toBe('f16 shaders: no');
    expect(path(caps, 'f16').why).toMatch(/^no shader-f16 on this device/);
  });
});

describe("Dawn's flags", () => {
  it('joins the toggles of the options and of every enable/disable flag into one flag each', () => {
    expect(dawnFlags({})).toEqual([]);
    expect(dawnFlags({ unsafeApis: true, f16: true })).toEqual(['enable-dawn-features=allow_unsafe_apis,vulkan_enable_f16_on_nvidia']);
    expect(
      dawnFlags({ f16: true, dawnFlags: ['enable-dawn-features=allow_unsafe_apis,dump_shaders', 'disable-dawn-features=timestamp_quantization', 'backend=vulkan', 'enable-dawn-features=vulkan_enable_f16_on_nvidia'] }),
    ).toEqual(['enable-dawn-features=vulkan_enable_f16_on_nvidia,allow_unsafe_apis,dump_shaders', 'disable-dawn-features=timestamp_quantization', 'backend=vulkan']);
  });
});

describe('the one-wave tile', () => {
  const tiles = F16_TILES[16][0];
  const oneWave = tiles.oneWave!;

  it('knows the multiprocessors of the GPUs it measured from their adapter names, and no others', () => {
    expect(multiprocessorsOf('nvidia nvidia-h200 NVIDIA: 580.159.04 580.159.4.0')).toBe(132);
    expect(multiprocessorsOf('nvidia nvidia-h100-80gb-hbm3 NVIDIA: 580.159.04')).toBe(132);
    expect(multiprocessorsOf('nvidia nvidia-h100-pcie')).toBeNull();
    expect(multiprocessorsOf('nvidia lovelace')).toBeNull();
    expect(capabilitySummary(record({ multiprocessors: 132 })).at(-1)).toContain('multiprocessors: 132');
    expect(capabilitySummary(record()).at(-1)).toContain('not known');
  });

  it('takes a grid the wide tile runs in two waves and it in one, and no other', () => {
    // 2560 rows by 2048 columns: 160 workgroups of 128x256, 128 of 160x256.
    expect(oneWaveTakes(2560, 2048, tiles.f16, oneWave, 132)).toBe(true);
    // One wave either way, or two either way.
    expect(oneWaveTakes(2048, 2048, tiles.f16, oneWave, 132)).toBe(false);
    expect(oneWaveTakes(2560, 12288, tiles.f16, oneWave, 132)).toBe(false);
    // A GPU with fewer multiprocessors runs both in several waves.
    expect(oneWaveTakes(2560, 2048, tiles.f16, oneWave, 60)).toBe(false);
  });

  it('fits the workgroup memory and threads of a 48 KiB device with its epilogue in two rounds', () => {
    expect(f16TileBytes(oneWave, 16, false)).toBeLessThanOrEqual(49152);
    expect(f16TileBytes({ ...oneWave, outRounds: 1 }, 16, false)).toBeGreaterThan(49152);
  });
});

describe('joined f16 products of one x', () => {
  // The 2B's q/k/v and gate/up at T rows, stacked in one buffer each as the decoder's workspace lays them out.
  const T = 2560;
  const stacked = (ns: number[], k: number, buffer: object = {}, rows = T) => {
    let at = 0;
    return ns.map((n) => {
      const o = { n, k, buffer, byteOffset: 256 + 4 * at };
      at += rows * n;
      return o;
    });
  };

  it("joins q/k/v stacked back to back, not gate/up (wider than the widest x: the scratch would grow)", () => {
    expect(joinsOutputs(stacked([2048, 1024, 1024], 2048), T, 6144, EXPAND_MAX_WORDS)).toBe(true);
    expect(joinsOutputs(stacked([6144, 6144], 2048), T, 6144, EXPAND_MAX_WORDS)).toBe(false);
    // The 8B's q/k/v: 4096 + 1024 + 1024 columns under its intermediate 12288.
    expect(joinsOutputs(stacked([4096, 1024, 1024], 4096), T, 12288, EXPAND_MAX_WORDS)).toBe(true);
  });

  it('runs apart outputs in other buffers, not back to back, of columns a tile could straddle, or a weight not expanded', () => {
    const qkv = stacked([2048, 1024, 1024], 2048);
    expect(joinsOutputs([qkv[0], { ...qkv[1], buffer: {} }, qkv[2]], T, 6144, EXPAND_MAX_WORDS)).toBe(false);
    // Outputs of more rows than x has (their views laid out for another T).
    expect(joinsOutputs(stacked([2048, 1024, 1024], 2048, {}, T + 64), T, 6144, EXPAND_MAX_WORDS)).toBe(false);
    expect(joinsOutputs(stacked([2048, 1024 + 128, 1024], 2048), T, 6144, EXPAND_MAX_WORDS)).toBe(false);
    expect(joinsOutputs(stacked([2048, 1024, 1024], 2048), T, 6144, (1024 * 2048) / 2 - 1)).toBe(false);
    expect(joinsOutputs(stacked([2048], 2048), T, 6144, EXPAND_MAX_WORDS)).toBe(false);
  });
});
