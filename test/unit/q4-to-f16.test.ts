// The f16 tensor-core GEMM's weight expansion (src/ops/q4ToF16.ts, shaders/f16_convert.wgsl): a Q4
// weight dequantized to f16 as [N][K], and transposed as [K][N] for the input gradient, in the
// GEMM's blocks of 32 x 32, against the CPU dequantization rounded to f16, on shapes that leave
// partial 64 x 64 tiles and partial blocks; and x's f16 copy (f16_row_scale.wgsl) in those blocks.
// With a LoRA extension (EXT): the expansions go on with B (or Aᵀ) past W's columns, x with each
// adapter's s·u past its own, zeros after, the row's scale over both.
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { randNormal } from '../helpers/reference';
import { dequantizeRef, quantizeRef, toHalfBits } from '../helpers/q4-reference';
import { allocQ4 } from '../../src/ops/matmulQ4';
import { f16BlockedWords } from '../../src/ops/productSizes';
import { Q4ToF16 } from '../../src/ops/q4ToF16';
import { ROW_SCALE_UNIFORMS, rowScaleDefines } from '../../src/ops/matmulQ4F16';
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

  it.each([
    [96, 160, 8, 2, 64],
    [130, 64, 16, 0, 32],
    [64, 96, 40, 0, 64],
  ])('N %i, K %i with B of rank %i at column %i of %i more: [N][K + e] ends with B, and [K][N + e] with Aᵀ; zeros elsewhere', async (n, k, r, off, e) => {
    const gpu = await testGpu();
    const q = quantizeRef(randNormal(n * k, n + k + 1, 0.05), n, k);
    const want = dequantizeRef(q);
    const B = randNormal(n * r, 3, 0.5);
    const A = randNormal(r * k, 4, 0.5);
    const w = allocQ4(gpu, n, k, 'w');
    gpu.write(w.codes, q.codes);
    gpu.write(w.scales, q.scales);
    const [tb, ta] = [gpu.upload(B, [n, r], 'f32', 'B'), gpu.upload(A, [r, k], 'f32', 'A')];
    const op = Q4ToF16.create(gpu);
    const plain = gpu.tensor([Q4ToF16.words(w, false, e)], 'u32', 'w16');
    const trans = gpu.tensor([Q4ToF16.words(w, true, e)], 'u32', 'w16t');
    const transposes = n % 32 === 0;
    // Poison first: every half the extension owns must be written.
    gpu.write(plain, new Uint32Array(plain.numel).fill(0x7c007c00));
    gpu.write(trans, new Uint32Array(trans.numel).fill(0x7c007c00));
    const rec = gpu.recorder('expand');
    op.expand(rec, w, plain, false, { factor: tb, e, r, off });
    if (transposes) op.expand(rec, w, trans, true, { factor: ta, e, r, off: 0 });
    await rec.submit();
    const halves = async (t: typeof plain) => new Uint16Array((await gpu.read(t)).buffer);
    const [p, t] = [await halves(plain), await halves(trans)];
    for (let row = 0; row < n; row++) {
      for (let c = 0; c < k + e; c++) {
        const j = c - k - off;
        const v = c < k ? want[row * k + c] : j >= 0 && j < r ? B[row * r + j] : 0;
        const got = p[blocked(row, c, k + e)];
        if (got !== toHalfBits(v)) expect.fail(`[N][K + e] (${row}, ${c}): half bits ${got}, expected ${toHalfBits(v)} (${v})`);
      }
    }
    if (transposes) {
      for (let i = 0; i < k; i++) {
        for (let c = 0; c < n + e; c++) {
          const v = c < n ? want[c * k + i] : c - n < r ? A[(c - n) * k + i] : 0;
          const got = t[blocked(i, c, n + e)];
          if (got !== toHalfBits(v)) expect.fail(`[K][N + e] (${i}, ${c}): half bits ${got}, expected ${toHalfBits(v)} (${v})`);
        }
      }
    }
    for (const x of [w.codes, w.scales, plain, trans, tb, ta]) x.release();
  });

  it('refuses an extension that is not a multiple of 32, a factor past it, and a factor of the wrong size', async () => {
    const gpu = await testGpu();
    const op = Q4ToF16.create(gpu);
    const w = allocQ4(gpu, 64, 64, 'w');
    const out = gpu.tensor([Q4ToF16.words(w, true, 64)], 'u32', 'out');
    const b = gpu.tensor([64, 8], 'f32', 'B');
    const rec = gpu.recorder('expand');
    expect(() => op.expand(rec, w, out, false, { factor: b, e: 48, r: 8, off: 0 })).toThrow(/multiple of 32/);
    expect(() => op.expand(rec, w, out, false, { factor: b, e: 32, r: 8, off: 28 })).toThrow(/does not fit/);
    expect(() => op.expand(rec, w, out, false, { factor: b, e: 32, r: 16, off: 0 })).toThrow(/B \[64, 16\]/);
    expect(() => op.expand(rec, w, out, true, { factor: b, e: 32, r: 8, off: 8 })).toThrow(/column 0/);
    for (const x of [w.codes, w.scales, out, b]) x.release();
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
  // hold: vec4s a thread keeps in registers; rows longer than 256·hold vec4s read the rest twice.
  it.each([
    [96, 16],
    [1056, 1],
    [160, 0],
  ])('K %i, hold %i: rows scaled by a power of two and rounded to f16, in blocks of 32 x 32, the scale kept per row', async (k, hold) => {
    const gpu = await testGpu();
    const m = 70;
    const x = randNormal(m * k, 7, 1);
    for (let c = 0; c < k; c++) x[5 * k + c] = 0; // a row of zeros keeps scale 1
    for (let c = 0; c < k; c++) x[6 * k + c] *= 1e-6; // small values are lifted, not lost to subnormals
    const kernel = await gpu.kernel({ shader: 'f16_row_scale', entry: 'row_scale', defines: rowScaleDefines(false, hold), uniforms: ROW_SCALE_UNIFORMS.plain });
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

  it.each([
    [3, 8, 64, 64, 4],
    [2, 16, 32, 1024, 1],
    [1, 40, 64, 64, 0],
  ])('EXT: %i adapters of rank %i in %i more columns after K %i, hold %i: each s·u after x, zeros after the last, the scale over both', async (adapters, r, e, k, hold) => {
    const gpu = await testGpu();
    const m = 37;
    const x = randNormal(m * k, 11, 1);
    const us = Array.from({ length: adapters }, (_, g) => randNormal(m * r, 20 + g, 1));
    const scales = [2, 0.5, 3].slice(0, adapters);
    // Row 3's largest value in the extension: its scale must follow it.
    us[0][3 * r] = 5000;
    const kernel = await gpu.kernel({ shader: 'f16_row_scale', entry: 'row_scale', defines: rowScaleDefines(true, hold), uniforms: ROW_SCALE_UNIFORMS.ext });
    const xt = gpu.upload(x, [m, k], 'f32', 'x');
    const ut = us.map((u, g) => gpu.upload(u, [m, r], 'f32', `u${g}`));
    const rs = gpu.tensor([m], 'f32', 'rs');
    const x16 = gpu.tensor([f16BlockedWords(m, k + e)], 'u32', 'x16');
    gpu.write(x16, new Uint32Array(x16.numel).fill(0x7c007c00));
    const rec = gpu.recorder('row_scale');
    const u = (g: number) => ut[g] ?? ut[0];
    rec.dispatch(kernel, { x: xt, rs, x16, u0: u(0), u1: u(1), u2: u(2) }, [m, 1], { m, k, e, r, adapters, s0: scales[0], s1: scales[1] ?? 0, s2: scales[2] ?? 0 });
    await rec.submit();
    const got = new Float32Array(await gpu.read(rs));
    const halves = new Uint16Array((await gpu.read(x16)).buffer);
    const value = (row: number, c: number) => {
      if (c < k) return x[row * k + c];
      const g = Math.floor((c - k) / r);
      return g < adapters ? Math.fround(scales[g] * us[g][row * r + ((c - k) % r)]) : 0;
    };
    for (let row = 0; row < m; row++) {
      let amax = 0;
      for (let c = 0; c < k + e; c++) amax = Math.max(amax, Math.abs(value(row, c)));
      const s = 2 ** (15 - Math.floor(Math.log2(amax) + 1));
      expect(got[row], `row ${row}`).toBe(s);
      for (let c = 0; c < k + e; c++) {
        const want = toHalfBits(Math.fround(value(row, c) * s));
        const h = halves[blocked(row, c, k + e)];
        if (h !== want) expect.fail(`(${row}, ${c}): half bits ${h}, expected ${want}`);
      }
    }
    for (const t of [xt, rs, x16, ...ut]) t.release();
  });
});
