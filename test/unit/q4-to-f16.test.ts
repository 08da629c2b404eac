// The f16 tensor-core GEMM's weight expansion (src/ops/q4ToF16.ts, shaders/f16_convert.wgsl): a Q4
// weight dequantized to f16 as [N][K], and transposed as [K][N] for the input gradient, in the
// GEMM's blocks of 32 x 32, against the CPU dequantization rounded to f16, on shapes that leave
// partial 64 x 64 tiles and partial blocks; and x's f16 copy (f16_row_scale.wgsl) in those blocks.
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { randNormal } from '../helpers/reference';
import { dequantizeRef, quantizeRef, toHalfBits } from '../helpers/q4-reference';
import { allocQ4 } from '../../src/ops/matmulQ4';
import { f16BlockedWords } from '../../src/ops/productSizes';
import { Q4ToF16 } from '../../src/ops/q4ToF16';
import { ShapeError } from '../../src/gpu';

/** The half number of element (r, c) of a [R][K] operand in blocks of 32 x 32 (shaders/f16_blocks.wgsl). */
const blocked = (r: number, c: number, k: number) => (Math.floor(r / 32) * (k / 32) + Math.floor(c / 32)) * 1024 + (r % 32) * 32 + (c % 32);

// SwiftShader (VLRL_VK=swiftshader) offers no shader-f16; lavapipe, the default, does.
describe.skipIf(process.env.VLRL_VK === 'swiftshader')('Q4 weights expanded to f16', () => {
  it.each([
    [96, 160],
    [64, 64],
    [32, 32],
    [130, 224],
    [160, 96],
  ])('N %i, K %i: [N][K] and (N a multiple of 32) its transpose [K][N] are the dequantized weights rounded to f16', async (n, k) => {
    const gpu = await testGpu();
    expect(gpu.has('shader-f16'), 'lavapipe offers shader-f16').toBe(true);
    const q = quantizeRef(randNormal(n * k, n + k, 0.05), n, k);
    const want = dequantizeRef(q);
    const w = allocQ4(gpu, n, k, 'w');
    gpu.write(w.codes, q.codes);
    gpu.write(w.scales, q.scales);
    const op = Q4ToF16.create(gpu);
    const plain = gpu.tensor([f16BlockedWords(n, k)], 'u32', 'w16');
    const trans = gpu.tensor([f16BlockedWords(k, n)], 'u32', 'w16t');
    const transposes = n % 32 === 0;
    const rec = gpu.recorder('expand');
    op.expand(rec, w, plain, false);
    if (transposes) op.expand(rec, w, trans, true);
    await rec.submit();
    const halves = async (t: typeof plain) => new Uint16Array((await gpu.read(t)).buffer);
    const [p, t] = [await halves(plain), await halves(trans)];
    for (let r = 0; r < n; r++) {
      for (let c = 0; c < k; c++) {
        const bits = toHalfBits(want[r * k + c]);
        const [pi, ti] = [blocked(r, c, k), blocked(c, r, n)];
        if (p[pi] !== bits) expect.fail(`[N][K] (${r}, ${c}): half bits ${p[pi]}, expected ${bits} (${want[r * k + c]})`);
        if (transposes && t[ti] !== bits) expect.fail(`[K][N] (${c}, ${r}): half bits ${t[ti]}, expected ${bits} (${want[r * k + c]})`);
      }
    }
    for (const x of [w.codes, w.scales, plain, trans]) x.release();
  });

  it('refuses an output too small for the blocks and, for the transpose, N not a multiple of 32', async () => {
    const gpu = await testGpu();
    const op = Q4ToF16.create(gpu);
    const w = allocQ4(gpu, 33, 32, 'w');
    const small = gpu.tensor([(33 * 32) / 2], 'u32', 'small');
    const rec = gpu.recorder('expand');
    expect(() => op.expand(rec, w, small, false)).toThrow(ShapeError);
    const out = gpu.tensor([f16BlockedWords(33, 32)], 'u32', 'out');
    expect(() => op.expand(rec, w, out, true)).toThrow(/N a multiple of 32/);
    for (const x of [w.codes, w.scales, small, out]) x.release();
  });
});

describe.skipIf(process.env.VLRL_VK === 'swiftshader')("x's f16 copy for the f16 GEMM (row_scale)", () => {
  it('rows scaled by a power of two and rounded to f16, in blocks of 32 x 32, the scale kept per row', async () => {
    const gpu = await testGpu();
    const [m, k] = [70, 96];
    const x = randNormal(m * k, 7, 1);
    for (let c = 0; c < k; c++) x[5 * k + c] = 0; // a row of zeros keeps scale 1
    for (let c = 0; c < k; c++) x[6 * k + c] *= 1e-6; // small values are lifted, not lost to subnormals
    const kernel = await gpu.kernel({ shader: 'f16_row_scale', entry: 'row_scale', uniforms: { m: 'u32', k: 'u32' } });
    const xt = gpu.tensor([m, k], 'f32', 'x');
    gpu.write(xt, x);
    const rs = gpu.tensor([m], 'f32', 'rs');
    const x16 = gpu.tensor([f16BlockedWords(m, k)], 'u32', 'x16');
    const rec = gpu.recorder('row_scale');
    rec.dispatch(kernel, { x: xt, rs, x16 }, [m, 1], { m, k });
    await rec.submit();
    const scales = new Float32Array(await gpu.read(rs));
    const halves = new Uint16Array((await gpu.read(x16)).buffer);
    for (let r = 0; r < m; r++) {
      let amax = 0;
      for (let c = 0; c < k; c++) amax = Math.max(amax, Math.abs(x[r * k + c]));
      const s = amax === 0 ? 1 : 2 ** (15 - Math.floor(Math.log2(amax) + 1));
      expect(scales[r], `row ${r}`).toBe(s);
      if (amax > 0) expect(amax * s).toBeGreaterThanOrEqual(2 ** 14);
      for (let c = 0; c < k; c++) {
        const want = toHalfBits(Math.fround(x[r * k + c] * s));
        const got = halves[blocked(r, c, k)];
        if (got !== want) expect.fail(`(${r}, ${c}): half bits ${got}, expected ${want}`);
      }
    }
    for (const t of [xt, rs, x16]) t.release();
  });
});
