import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { randNormal } from '../helpers/reference';
import {
  codeAt,
  codeOf,
  dequantizeRef,
  fromBf16Bits,
  fromHalfBits,
  packHalves,
  quantizeRef,
  scaleAt,
  scaleOf,
  toBf16Bits,
  toHalfBits,
  type Q4Host,
} from '../helpers/q4-reference';
import { QuantizeQ4, type SourceFormat } from '../../src/ops/quantizeQ4';
import { allocQ4 } from '../../src/ops/matmulQ4';
import { ShapeError, type Gpu } from '../../src/gpu';

/** The source words of `w` in `format`, and the values the GPU will actually see. */
function encode(w: Float32Array, format: SourceFormat): { words: Uint32Array; values: Float32Array } {
  if (format === 'f32') return { words: new Uint32Array(w.buffer.slice(0)), values: w };
  const bits = Array.from(w, format === 'f16' ? toHalfBits : toBf16Bits);
  const back = format === 'f16' ? fromHalfBits : fromBf16Bits;
  return { words: packHalves(bits), values: Float32Array.from(bits, back) };
}

async function quantizeOnGpu(gpu: Gpu, q: QuantizeQ4, words: Uint32Array, format: SourceFormat, n: number, k: number): Promise<Q4Host> {
  const src = gpu.upload(words, [words.length], 'u32', 'w.raw');
  const w = allocQ4(gpu, n, k, 'w');
  const rec = gpu.recorder();
  q.quantize(rec, src, format, w);
  await rec.submit();
  src.release();
  const out = { codes: (await gpu.read(w.codes)) as Uint32Array, scales: (await gpu.read(w.scales)) as Uint32Array, n, k };
  w.codes.release();
  w.scales.release();
  return out;
}

function relRms(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let e = 0;
  let t = 0;
  for (let i = 0; i < b.length; i++) {
    e += (a[i] - b[i]) ** 2;
    t += b[i] ** 2;
  }
  return Math.sqrt(e / t);
}

describe('quantize to 4 bits on the GPU', () => {
  for (const format of ['f32', 'f16', 'bf16'] as const) {
    it(`matches the CPU reference code for code from ${format} bytes, odd shapes`, async () => {
      const gpu = await testGpu();
      const q = await QuantizeQ4.create(gpu);
      for (const [n, k] of [
        [1, 32],
        [5, 96],
        [67, 160],
        [3, 32], // an odd number of groups: the last scale word is half used
      ]) {
        const w = randNormal(n * k, 7 * n + k, 0.05);
        w[3] = 0.4; // a group whose extreme is positive, so its scale is negative
        w.fill(0, 32 * (n - 1), 32 * n); // an all-zero group: scale 0, codes 8
        const { words, values } = encode(w, format);
        const got = await quantizeOnGpu(gpu, q, words, format, n, k);
        for (let s = 0; s < (n * k) / 32; s++) {
          const group = values.subarray(s * 32, s * 32 + 32);
          const d = scaleAt(got, s);
          expect(d === scaleOf(group), `scale of group ${s}: ${d} vs ${scaleOf(group)}`).toBe(true);
          for (let i = 0; i < 32; i++) {
            const c = codeAt(got, s * 32 + i);
            expect(c, `group ${s} code ${i} (w/d = ${group[i] / d})`).toBe(codeOf(group[i], d));
          }
        }
        // The all-zero group and the positive extreme.
        expect(scaleAt(got, n - 1) === 0).toBe(true);
        if (n > 1) expect(scaleAt(got, 0)).toBeLessThan(0);
      }
    });
  }

  it('rounds quotients that sit exactly on a half to even, for either sign of the scale', async () => {
    const gpu = await testGpu();
    const q = await QuantizeQ4.create(gpu);
    // Two groups of bf16-exact values: extreme 1 (scale -0.125) and -1 (scale 0.125); the others at
    // (j + 0.5)·0.125, every quotient a tie, where a division that is not exactly rounded may land
    // on either side.
    const w = new Float32Array(64);
    for (const [g, m] of [[0, 1], [1, -1]] as const) {
      w[32 * g] = m;
      for (let i = 1; i < 32; i++) w[32 * g + i] = (((i % 16) - 8) + 0.5) * 0.125 * (i < 16 ? 1 : -1);
    }
    const { words, values } = encode(w, 'bf16');
    const got = await quantizeOnGpu(gpu, q, words, 'bf16', 1, 64);
    for (let s = 0; s < 2; s++) {
      const d = scaleAt(got, s);
      for (let i = 0; i < 32; i++) expect(codeAt(got, 32 * s + i), `group ${s} code ${i} (w/d = ${values[32 * s + i] / d})`).toBe(codeOf(values[32 * s + i], d));
    }
  });

  it('has a relative RMS error of about 0.085 on Gaussian weights, below the scale+offset form at equal size', async () => {
    const gpu = await testGpu();
    const q = await QuantizeQ4.create(gpu);
    const n = 64;
    const k = 512;
    const w = randNormal(n * k, 2024, 0.02);
    const got = await quantizeOnGpu(gpu, q, encode(w, 'f32').words, 'f32', n, k);
    const err = relRms(dequantizeRef(got), w);
    // Measured 0.0853 on these 32,768 weights (0.0845 on 2^20).
    expect(err).toBeLessThan(0.087);
    expect(err).toBeGreaterThan(0.08);
    // The same CPU reference agrees (scales and codes equal up to the tie cases above).
    expect(Math.abs(relRms(dequantizeRef(quantizeRef(w, n, k)), w) - err)).toBeLessThan(1e-4);
    // The alternative at the same 4.5 bits per weight: f16 offset + f16 scale per 64 weights.
    let e = 0;
    let t = 0;
    for (let o = 0; o < w.length; o += 64) {
      const g = w.subarray(o, o + 64);
      let lo = Infinity;
      let hi = -Infinity;
      for (const v of g) {
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
      const d = fromHalfBits(toHalfBits((hi - lo) / 15));
      const off = fromHalfBits(toHalfBits(lo));
      for (const v of g) {
        const r = Math.min(15, Math.max(0, Math.round((v - off) / d))) * d + off;
        e += (r - v) ** 2;
        t += v * v;
      }
    }
    expect(Math.sqrt(e / t)).toBeGreaterThan(err);
  });

  it('quantizes a weight block by block as it streams in, identical to one pass', async () => {
    const gpu = await testGpu();
    const q = await QuantizeQ4.create(gpu);
    const [n, k] = [10, 96]; // 3 groups per row: blocks must start on an even row
    const { words } = encode(randNormal(n * k, 99, 0.05), 'bf16');
    const whole = await quantizeOnGpu(gpu, q, words, 'bf16', n, k);
    const w = allocQ4(gpu, n, k, 'w');
    const rec = gpu.recorder();
    const blocks = [
      [0, 4],
      [4, 6],
      [6, 10],
    ];
    const srcs = blocks.map(([a, b]) => gpu.upload(words.subarray((a * k) / 2, (b * k) / 2), [((b - a) * k) / 2], 'u32', 'block'));
    blocks.forEach(([a], i) => q.quantize(rec, srcs[i], 'bf16', w, a));
    expect(() => q.quantize(rec, srcs[0], 'bf16', w, 1)).toThrow(/even group/);
    expect(() => q.quantize(rec, srcs[2], 'bf16', w, 8)).toThrow(ShapeError); // past the last row
    await rec.submit();
    expect(await gpu.read(w.codes)).toEqual(whole.codes);
    expect(await gpu.read(w.scales)).toEqual(whole.scales);
    for (const t of [...srcs, w.codes, w.scales]) t.release();
  });

  it('rejects K not a multiple of 32 and a source of the wrong size with ShapeError', async () => {
    const gpu = await testGpu();
    const q = await QuantizeQ4.create(gpu);
    expect(() => allocQ4(gpu, 4, 48, 'w')).toThrow(ShapeError);
    expect(() => allocQ4(gpu, 4, 48, 'w')).toThrow(/multiple of 32/);
    const w = allocQ4(gpu, 4, 64, 'w');
    const src = gpu.tensor([4 * 64], 'u32', 'raw');
    const rec = gpu.recorder();
    expect(() => q.quantize(rec, src, 'f32', { ...w, k: 40 })).toThrow(ShapeError);
    expect(() => q.quantize(rec, src, 'bf16', w)).toThrow(/source has 256 words/);
    expect(() => q.quantize(rec, src, 'f32', w)).not.toThrow();
    await rec.submit();
    for (const t of [w.codes, w.scales, src]) t.release();
  });
});
