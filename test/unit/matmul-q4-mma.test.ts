// The int8 tensor-core 4-bit GEMM against dequantize-then-f64. Needs a GPU with Chromium's
// subgroup-matrix extension and an i8 -> i32 M16 N16 K32 configuration: software Vulkan has none,
// so here the test skips and says why; on the GPU machine tools/device/mmaCheck.ts runs the same
// check (src/ops/matmulQ4MmaCheck.ts) and the gemm benchmark suite runs it before timing.
import { describe, expect, it } from 'vitest';
import { createNodeGpu } from '../../src/node/gpu';
import { MatmulQ4Mma, mmaUnsupported } from '../../src/ops/matmulQ4Mma';
import { checkInt8Mma, checkQ4Mma } from '../../src/ops/matmulQ4MmaCheck';
import { capabilitiesOf, MissingFeatureError } from '../../src/gpu';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { defaultProducts, productPaths, PRODUCTS } from '../../src/model/products';
import { f16UnsupportedOn } from '../../src/ops/matmulQ4F16';
import { MODELS, modelFiles } from '../helpers/modelFixtures';

const gpu = await createNodeGpu({ driver: process.env.VLRL_VK ?? 'lavapipe', dawnFlags: ['enable-dawn-features=allow_unsafe_apis'] });
const unsupported = mmaUnsupported(gpu);
if (unsupported) console.warn(`matmul-q4-mma: skipped on ${gpu.adapter.name}: ${unsupported}`);

describe.skipIf(unsupported !== null)('4-bit GEMM on int8 tensor cores', () => {
  // M not a multiple of 16 or of the tile, N not a multiple of the tile, K of one group and more.
  const shapes: [number, number, number][] = [
    [1, 1, 32],
    [17, 33, 64],
    [77, 200, 320],
    [130, 129, 96],
  ];

  it('y = x·Wᵀ and y += stay within the two-limb rounding bound on Gaussian x with outlier channels', async () => {
    const mma = await MatmulQ4Mma.create(gpu, { maxRows: 130, maxK: 320 });
    for (const [i, shape] of shapes.entries()) {
      const a = await checkQ4Mma(gpu, mma, shape, 7 + i);
      expect(a.ofBound, `${a.shape}: error over the rounding bound`).toBeLessThanOrEqual(1);
      expect(a.relToMax, `${a.shape}: error over max |y|`).toBeLessThan(1e-4);
    }
    mma.release();
  });

  it('the K-blocked variant, y = x·Wᵀ and dX = dY·W, stays within its bound (two-limb x per block or per row, weights re-rounded to int8)', async () => {
    for (const [kBlock, steps] of [[64, 'block'], [128, 'block'], [128, 'row']] as const) {
      const mma = await MatmulQ4Mma.create(gpu, { maxRows: 130, maxK: 768, tile: { rows: 64, cols: 64, threads: 128 }, kBlock, steps });
      for (const [i, shape] of ([[1, 1, 256], [45, 96, 768], [130, 129, 512]] as [number, number, number][]).entries()) {
        const a = await checkQ4Mma(gpu, mma, shape, 17 + i);
        expect(a.ofBound, `K block ${kBlock}, steps by ${steps}, ${a.shape}: error over the bound`).toBeLessThanOrEqual(1);
        expect(a.relToMax, `K block ${kBlock}, steps by ${steps}, ${a.shape}: error over max |y|`).toBeLessThan(1e-2);
      }
      // dX = dY·W: blocks along N.
      for (const [i, shape] of ([[1, 128, 64], [45, 256, 192], [130, 384, 320]] as [number, number, number][]).entries()) {
        const a = await checkQ4Mma(gpu, mma, shape, 27 + i, true);
        expect(a.ofBound, `K block ${kBlock}, steps by ${steps}, ${a.shape}: error over the bound`).toBeLessThanOrEqual(1);
        expect(a.relToMax, `K block ${kBlock}, steps by ${steps}, ${a.shape}: error over max |y|`).toBeLessThan(1e-2);
      }
      mma.release();
    }
  });

  it('f32 weights rounded to int8 once (quantizeDense, gemmInt8: the vision tower\'s products) stay within their bound; steps by row refuse them', async () => {
    const mma = await MatmulQ4Mma.create(gpu, { maxRows: 130, maxK: 768, tile: { rows: 64, cols: 64, threads: 128 }, kBlock: 128 });
    for (const [i, shape] of ([[1, 1, 128], [45, 96, 768], [130, 129, 512]] as [number, number, number][]).entries()) {
      const a = await checkInt8Mma(gpu, mma, shape, 47 + i);
      expect(a.ofBound, `${a.shape}: error over the rounding bound`).toBeLessThanOrEqual(1);
    }
    mma.release();
    const byRow = await MatmulQ4Mma.create(gpu, { maxRows: 130, maxK: 768, tile: { rows: 64, cols: 64, threads: 128 }, kBlock: 128, steps: 'row' });
    expect(() => byRow.quantizeDense(gpu.recorder(), gpu.tensor([128, 128], 'f32', 'w'), 128, 128, 'w')).toThrow(/steps 'block'/);
    byRow.release();
  });

  it('refuses a K that is not a multiple of its K block, and a tile without a subgroup per 32x32', async () => {
    const mma = await MatmulQ4Mma.create(gpu, { maxRows: 4, maxK: 512, tile: { rows: 64, cols: 64, threads: 128 }, kBlock: 128 });
    const x = gpu.tensor([4, 96], 'f32', 'x');
    const y = gpu.tensor([4, 8], 'f32', 'y');
    const w = { codes: gpu.tensor([96], 'u32', 'c'), scales: gpu.tensor([12], 'u32', 's'), n: 8, k: 96 };
    expect(() => mma.gemm(gpu.recorder(), x, w, y)).toThrow(/not a multiple of the K block/);
    for (const t of [x, y, w.codes, w.scales]) t.release();
    mma.release();
    await expect(MatmulQ4Mma.create(gpu, { maxRows: 4, maxK: 512, tile: { rows: 64, cols: 128, threads: 128 }, kBlock: 128 })).rejects.toThrow(/needs 256 threads/);
    await expect(MatmulQ4Mma.create(gpu, { maxRows: 4, maxK: 512, tile: { rows: 64, cols: 64, threads: 128 }, kBlock: 64, steps: 'row' })).rejects.toThrow(/steps 'row' takes a K block of 128 and two limbs/);
  });

  it('runs more rows than its workspace in slices of maxRows (a multiple of 64), and refuses slices of another size', async () => {
    const mma = await MatmulQ4Mma.create(gpu, { maxRows: 64, maxK: 512, tile: { rows: 64, cols: 64, threads: 128 }, kBlock: 128 });
    for (const [i, shape] of ([[130, 129, 512], [200, 128, 256]] as [number, number, number][]).entries()) {
      const a = await checkQ4Mma(gpu, mma, shape, 37 + i, i === 1);
      expect(a.ofBound, `${a.shape} in slices of 64 rows: error over the bound`).toBeLessThanOrEqual(1);
    }
    mma.release();
    const odd = await MatmulQ4Mma.create(gpu, { maxRows: 4, maxK: 64 });
    const x = gpu.tensor([5, 64], 'f32', 'x');
    const y = gpu.tensor([5, 8], 'f32', 'y');
    const w = { codes: gpu.tensor([64], 'u32', 'c'), scales: gpu.tensor([8], 'u32', 's'), n: 8, k: 64 };
    expect(() => odd.gemm(gpu.recorder(), x, w, y)).toThrow(/not a multiple of 64/);
    for (const t of [x, y, w.codes, w.scales]) t.release();
    odd.release();
  });
});

// Where the GPU has no subgroup matrices (software Vulkan), asking the model for tensor-core GEMMs
// fails with the reason and leaves it on the f32 kernels.
describe.skipIf(unsupported === null)('tensor-core GEMM on a GPU without subgroup matrices', () => {
  it("Qwen3VL.setProducts('int8' | 'f16') and setVisionProducts('int8' | 'f16') throw MissingFeatureError naming the feature; the model stays on the f32 kernels", async () => {
    const model = await Qwen3VL.load(gpu, modelFiles(MODELS[0]));
    await expect(model.setProducts('int8')).rejects.toThrow(MissingFeatureError);
    await expect(model.setProducts('int8')).rejects.toThrow(/chromium-experimental-subgroup-matrix|subgroup-matrix configuration|'subgroups'/);
    // lavapipe offers shader-f16 but no subgroup matrices: the f16 path names what is missing.
    await expect(model.setProducts('f16')).rejects.toThrow(MissingFeatureError);
    await expect(model.setProducts('f16')).rejects.toThrow(f16UnsupportedOn(gpu)!);
    expect(model.products).toBe('f32');
    await expect(Qwen3VL.load(gpu, modelFiles(MODELS[0]), { products: 'int8' })).rejects.toThrow(MissingFeatureError);
    // The vision tower's likewise.
    for (const v of ['int8', 'f16'] as const) await expect(model.setVisionProducts(v)).rejects.toThrow(MissingFeatureError);
    expect(model.visionProducts).toBe('f32');
    // 'auto', the default, follows the products: on the f32 units here, and a failed products switch leaves it there.
    expect(model.visionProductsSetting).toBe('auto');
    await model.setVisionProducts('f32');
    expect(model.visionProductsSetting).toBe('f32');
    await model.setVisionProducts('auto');
    expect([model.visionProductsSetting, model.visionProducts]).toEqual(['auto', 'f32']);
    await expect(Qwen3VL.load(gpu, modelFiles(MODELS[0]), { visionProducts: 'f16' })).rejects.toThrow(MissingFeatureError);
  });

  it("the app's products setting: f32 by default, the tensor-core settings refused with the reason, the model left on f32", async () => {
    const model = await Qwen3VL.load(gpu, modelFiles(MODELS[0]));
    expect(productPaths(capabilitiesOf(gpu)).filter((p) => !p.available)).toEqual([
      { path: 'f16', available: false, why: f16UnsupportedOn(gpu) },
      { path: 'int8', available: false, why: unsupported },
    ]);
    expect(defaultProducts(gpu)).toBe('f32');
    for (const p of ['f16', 'int8', 'int8-1limb', 'int8-row'] as const) {
      await expect(model.setProducts(p)).rejects.toThrow(MissingFeatureError);
      expect(model.products).toBe('f32');
    }
    await model.setProducts('f32');
    expect(model.products).toBe('f32');
    expect(PRODUCTS.map((p) => p.value).sort()).toEqual(['f16', 'f32', 'int8', 'int8-1limb', 'int8-row']);
  });
});
