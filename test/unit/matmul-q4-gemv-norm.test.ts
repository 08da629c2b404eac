// The one-row 4-bit GEMV that applies its input's RMSNorm itself and writes the adapters' LoRA
// down products from extra workgroups of the same dispatch (GemvCall.norm, matmul_q4_gemv.wgsl's
// NORM and DOWN): a decode step at one sequence then has no norm or LoRA down dispatch before its
// q/k/v and gate/up GEMVs. Checked against an f64 CPU reference of xn = rms(h)·w, y = xn·Wᵀ and
// u = xn·Aᵀ on every one-row layout kind (x staged in one chunk or several, read from memory,
// workgroups of a size that is not a power of two), for 0 to 3 adapters of an odd and an even rank.
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { dequantizeRef, quantizeRef } from '../helpers/q4-reference';
import { randNormal, randUniform } from '../helpers/reference';
import { allocQ4, MatmulQ4, type GemvShape } from '../../src/ops/matmulQ4';
import { ShapeError, type Tensor } from '../../src/gpu';

const LAYOUTS: { what: string; shape: GemvShape; xChunk?: number }[] = [
  { what: 'x staged in one chunk', shape: { threadsPerRow: 32, groups: 4 } },
  { what: 'x staged in chunks of 64', shape: { threadsPerRow: 16, groups: 8 }, xChunk: 64 },
  { what: 'x read from memory', shape: { threadsPerRow: 64, groups: 2, xDirect: true } },
  { what: '24 threads a workgroup', shape: { threadsPerRow: 8, groups: 3 } },
];
const SHAPES = [
  { n: 5, k: 96 },
  { n: 131, k: 160 },
];
const EPS = 1e-6;

/** xn = (h·rstd)·w in f64, rstd = 1/sqrt(mean(h²) + eps). */
function normRef(h: Float32Array, w: Float32Array): Float64Array {
  const ss = h.reduce((s, v) => s + v * v, 0);
  const rstd = 1 / Math.sqrt(ss / h.length + EPS);
  return Float64Array.from(h, (v, i) => v * rstd * w[i]);
}

/** Row j of b [rows, k] dotted with x, and Σ|x||b| (the tolerances' scale). */
function dots(x: ArrayLike<number>, b: ArrayLike<number>, rows: number): { y: Float64Array; mag: Float64Array } {
  const k = x.length;
  const y = new Float64Array(rows);
  const mag = new Float64Array(rows);
  for (let j = 0; j < rows; j++)
    for (let l = 0; l < k; l++) {
      y[j] += x[l] * b[j * k + l];
      mag[j] += Math.abs(x[l] * b[j * k + l]);
    }
  return { y, mag };
}

/** |got − want| ≤ rel·Σ|a||b| (+ a floor for all-zero products) per element. */
function expectWithin(got: Float32Array, want: Float64Array, mag: Float64Array, rel: number, what: string): void {
  expect(got.length, `${what}: length`).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    const tol = rel * mag[i] + 1e-30;
    if (!(Math.abs(got[i] - want[i]) <= tol)) expect.fail(`${what}: element ${i} is ${got[i]}, expected ${want[i]} ± ${tol}`);
  }
}

describe('4-bit GEMV with its input RMSNorm and LoRA down products', () => {
  it.each(LAYOUTS)('$what: y = rms(h)·w·Wᵀ (+ y) and u = rms(h)·w·Aᵀ of 0 to 3 adapters, as the f64 reference', async ({ shape, xChunk }) => {
    const gpu = await testGpu();
    const mm = await MatmulQ4.create(gpu, { gemv: shape, xChunk, int8: false });
    const rec = gpu.recorder();
    const cases = [];
    const own: Tensor[] = [];
    const up = (data: Float32Array, dims: number[], label: string) => {
      const t = gpu.upload(data, dims, 'f32', label);
      own.push(t);
      return t;
    };
    for (const { n, k } of SHAPES)
      for (const adapters of [0, 1, 2, 3])
        for (const r of adapters === 0 ? [0] : [3, 8]) {
          const seed = 100 * n + 10 * adapters + r;
          const q = quantizeRef(randNormal(n * k, seed, 0.05), n, k);
          const w = allocQ4(gpu, n, k, 'w');
          gpu.write(w.codes, q.codes);
          gpu.write(w.scales, q.scales);
          own.push(w.codes, w.scales);
          // h with a large common scale: the norm must take it out.
          const h = randUniform(k, seed + 1, -40, 40);
          const normW = randUniform(k, seed + 2, 0.5, 1.5);
          const A = Array.from({ length: adapters }, (_, g) => randUniform(r * k, seed + 3 + g, -0.2, 0.2));
          const accumulate = adapters === 1;
          const y0 = randUniform(n, seed + 7);
          const ty = up(accumulate ? y0 : new Float32Array(n), [1, n], 'y');
          const tu = up(new Float32Array(Math.max(1, adapters * r)), [Math.max(1, adapters * r)], 'u');
          const down = adapters > 0 ? { A: A.map((a) => up(a, [r, k], 'A')), r, u: tu } : undefined;
          expect(mm.takesNorm(1, w, adapters), 'takesNorm').toBe(true);
          mm.gemv(rec, up(h, [1, k], 'h'), w, ty, accumulate, { norm: { weight: up(normW, [k], 'norm_w'), eps: EPS, down } });
          cases.push({ n, k, adapters, r, deq: dequantizeRef(q), h, normW, A, accumulate, y0, ty, tu });
        }
    await rec.submit();
    for (const c of cases) {
      const what = `n ${c.n}, k ${c.k}, ${c.adapters} adapters of rank ${c.r}`;
      const xn = normRef(c.h, c.normW);
      const y = dots(xn, c.deq, c.n);
      if (c.accumulate) y.y.forEach((v, j) => (y.y[j] = v + c.y0[j]));
      // Both f32 sums over k of products of rounded xn: 1e-5 of Σ|a||b| is ~100 roundings.
      expectWithin(await gpu.readF32(c.ty), y.y, y.mag, 1e-5, `${what}: y`);
      if (c.adapters === 0) continue;
      const u = dots(xn, Float64Array.from(c.A.flatMap((a) => [...a])), c.adapters * c.r);
      expectWithin(await gpu.readF32(c.tu), u.y, u.mag, 1e-5, `${what}: u`);
    }
    for (const t of own) t.release();
  }, 300_000);

  it('only one row of x, a layout that does not persist, at most 3 adapters', async () => {
    const gpu = await testGpu();
    const n = 64;
    const k = 64;
    const w = allocQ4(gpu, n, k, 'w');
    const mm = await MatmulQ4.create(gpu, { int8: false });
    expect(mm.takesNorm(2, w, 0)).toBe(false);
    expect(mm.takesNorm(1, w, 4)).toBe(false);
    const persistent = await MatmulQ4.create(gpu, { gemv: { threadsPerRow: 32, groups: 4, persist: 8 }, int8: false });
    expect(persistent.takesNorm(1, w, 0)).toBe(false);
    const x = gpu.tensor([2, k], 'f32', 'x');
    const y = gpu.tensor([2, n], 'f32', 'y');
    const normW = gpu.tensor([k], 'f32', 'norm_w');
    expect(() => mm.gemv(gpu.recorder(), x, w, y, false, { norm: { weight: normW, eps: EPS } })).toThrow(ShapeError);
    for (const t of [x, y, normW, w.codes, w.scales]) t.release();
  });
});
