// The f16 tensor-core GEMM's weight expansion (src/ops/q4ToF16.ts, shaders/f16_convert.wgsl): a Q4
// weight dequantized to f16 as [N][K], and transposed as [K][N] for the input gradient, against
// the CPU dequantization rounded to f16, on shapes that leave partial 64 x 64 tiles.
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { randNormal } from '../helpers/reference';
import { dequantizeRef, quantizeRef, toHalfBits } from '../helpers/q4-reference';
import { allocQ4 } from '../../src/ops/matmulQ4';
import { Q4ToF16 } from '../../src/ops/q4ToF16';
import { ShapeError } from '../../src/gpu';

// SwiftShader (VLRL_VK=swiftshader) offers no shader-f16; lavapipe, the default, does.
describe.skipIf(process.env.VLRL_VK === 'swiftshader')('Q4 weights expanded to f16', () => {
  it.each([
    [96, 160],
    [64, 64],
    [32, 32],
    [130, 224],
  ])('N %i, K %i: [N][K] and its transpose [K][N] are the dequantized weights rounded to f16', async (n, k) => {
    const gpu = await testGpu();
    expect(gpu.has('shader-f16'), 'lavapipe offers shader-f16').toBe(true);
    const q = quantizeRef(randNormal(n * k, n + k, 0.05), n, k);
    const want = dequantizeRef(q);
    const w = allocQ4(gpu, n, k, 'w');
    gpu.write(w.codes, q.codes);
    gpu.write(w.scales, q.scales);
    const op = Q4ToF16.create(gpu);
    const plain = gpu.tensor([(n * k) / 2], 'u32', 'w16');
    const trans = gpu.tensor([(n * k) / 2], 'u32', 'w16t');
    const rec = gpu.recorder('expand');
    op.expand(rec, w, plain, false);
    op.expand(rec, w, trans, true);
    await rec.submit();
    const halves = async (t: typeof plain) => new Uint16Array((await gpu.read(t)).buffer);
    const [p, t] = [await halves(plain), await halves(trans)];
    for (let r = 0; r < n; r++) {
      for (let c = 0; c < k; c++) {
        const bits = toHalfBits(want[r * k + c]);
        if (p[r * k + c] !== bits) expect.fail(`[N][K] (${r}, ${c}): half bits ${p[r * k + c]}, expected ${bits} (${want[r * k + c]})`);
        if (t[c * n + r] !== bits) expect.fail(`[K][N] (${c}, ${r}): half bits ${t[c * n + r]}, expected ${bits} (${want[r * k + c]})`);
      }
    }
    for (const x of [w.codes, w.scales, plain, trans]) x.release();
  });

  it('refuses an output too small and an odd N for the transpose', async () => {
    const gpu = await testGpu();
    const op = Q4ToF16.create(gpu);
    const w = allocQ4(gpu, 33, 32, 'w');
    const small = gpu.tensor([100], 'u32', 'small');
    const rec = gpu.recorder('expand');
    expect(() => op.expand(rec, w, small, false)).toThrow(ShapeError);
    const out = gpu.tensor([(33 * 32) / 2], 'u32', 'out');
    expect(() => op.expand(rec, w, out, true)).toThrow(/even N/);
    for (const x of [w.codes, w.scales, small, out]) x.release();
  });
});
