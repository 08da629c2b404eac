import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, finiteDifferences, randNormal, randUniform } from '../helpers/reference';
import { Activations } from '../../src/ops/activations';
import { ShapeError, type Gpu, type Tensor } from '../../src/gpu';

const silu = (g: number) => g / (1 + Math.exp(-g));

/** erfc in f64: Taylor series of erf below 3, Laplace's continued fraction above. */
function erfc(z: number): number {
  if (z < 0) return 2 - erfc(-z);
  if (z < 3) {
    let term = z;
    let sum = z;
    for (let n = 1; n < 100; n++) {
      term *= (-z * z) / n;
      sum += term / (2 * n + 1);
    }
    return 1 - (2 / Math.sqrt(Math.PI)) * sum;
  }
  let f = z;
  for (let k = 80; k >= 1; k--) f = z + k / 2 / f;
  return Math.exp(-z * z) / Math.sqrt(Math.PI) / f;
}

const geluErf = (x: number) => 0.5 * x * erfc(-x / Math.SQRT2);
const geluTanh = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));

/** Random values with a few large magnitudes mixed in (overflow paths of exp). */
function inputs(n: number, seed: number): Float32Array {
  const v = randNormal(n, seed, 2);
  const big = [-100, -30, -9, 9, 30, 100];
  for (let i = 0; i < Math.min(n, big.length); i++) v[(i * 7) % n] = big[i];
  return v;
}

async function run(gpu: Gpu, fn: (rec: ReturnType<Gpu['recorder']>) => void, outs: Tensor[]): Promise<Float32Array[]> {
  const rec = gpu.recorder();
  fn(rec);
  await rec.submit();
  return Promise.all(outs.map((t) => gpu.readF32(t)));
}

const SIZES = [1, 3, 65, 130, 70_000];

describe('activations', () => {
  it('swiglu forward matches f64', async () => {
    const gpu = await testGpu();
    const act = await Activations.create(gpu);
    for (const n of SIZES) {
      const g = inputs(n, n);
      const u = randNormal(n, n + 1);
      const [tg, tu, th] = [gpu.upload(g, [n], 'f32', 'gate'), gpu.upload(u, [n], 'f32', 'up'), gpu.tensor([n], 'f32', 'h')];
      const [h] = await run(gpu, (rec) => act.swiglu(rec, tg, tu, th), [th]);
      expectClose(h, Array.from(g, (v, i) => silu(v) * u[i]), { rtol: 1e-6, atol: 1e-7, what: `swiglu n=${n}` });
      [tg, tu, th].forEach((t) => t.release());
    }
  });

  it('swiglu backward matches finite differences of the f64 forward', async () => {
    const gpu = await testGpu();
    const act = await Activations.create(gpu);
    for (const n of [1, 3, 65, 130]) {
      const g = inputs(n, 2 * n);
      const u = randNormal(n, 2 * n + 1);
      const dh = randNormal(n, 2 * n + 2);
      // L = Σ dh·silu(g)·u over the concatenation [g, u].
      const loss = (v: Float64Array) => dh.reduce((s, d, i) => s + d * silu(v[i]) * v[n + i], 0);
      const want = finiteDifferences(loss, [...g, ...u], { eps: 1e-6 });
      const t = [gpu.upload(g, [n], 'f32', 'gate'), gpu.upload(u, [n], 'f32', 'up'), gpu.upload(dh, [n], 'f32', 'dh'), gpu.tensor([n], 'f32', 'dgate'), gpu.tensor([n], 'f32', 'dup')];
      const [dg, du] = await run(gpu, (rec) => act.swigluBackward(rec, t[0], t[1], t[2], t[3], t[4]), [t[3], t[4]]);
      expectClose(dg, want.slice(0, n), { rtol: 1e-5, atol: 1e-6, what: `dgate n=${n}` });
      expectClose(du, want.slice(n), { rtol: 1e-5, atol: 1e-6, what: `dup n=${n}` });
      t.forEach((v) => v.release());
    }
  });

  it('erf-GELU backward matches finite differences of the f64 forward, tails included', async () => {
    const gpu = await testGpu();
    const act = await Activations.create(gpu);
    for (const n of [1, 3, 65, 130]) {
      const x = inputs(n, 4 * n);
      const dy = randNormal(n, 4 * n + 1);
      const loss = (v: Float64Array) => dy.reduce((s, d, i) => s + d * geluErf(v[i]), 0);
      const want = finiteDifferences(loss, [...x], { eps: 1e-6 });
      const t = [gpu.upload(x, [n], 'f32', 'x'), gpu.upload(dy, [n], 'f32', 'dy'), gpu.tensor([n], 'f32', 'dx')];
      const [dx] = await run(gpu, (rec) => act.geluErfBackward(rec, t[0], t[1], t[2]), [t[2]]);
      expectClose(dx, want, { rtol: 1e-5, atol: 1e-6, what: `gelu_erf backward n=${n}` });
      t.forEach((v) => v.release());
    }
  });

  it('tanh-GELU backward matches finite differences of the f64 forward, tails included', async () => {
    const gpu = await testGpu();
    const act = await Activations.create(gpu);
    for (const n of [1, 3, 65, 130]) {
      const x = inputs(n, 5 * n);
      const dy = randNormal(n, 5 * n + 1);
      const loss = (v: Float64Array) => dy.reduce((s, d, i) => s + d * geluTanh(v[i]), 0);
      const want = finiteDifferences(loss, [...x], { eps: 1e-6 });
      const t = [gpu.upload(x, [n], 'f32', 'x'), gpu.upload(dy, [n], 'f32', 'dy'), gpu.tensor([n], 'f32', 'dx')];
      const [dx] = await run(gpu, (rec) => act.geluTanhBackward(rec, t[0], t[1], t[2]), [t[2]]);
      expectClose(dx, want, { rtol: 1e-5, atol: 1e-6, what: `gelu_tanh backward n=${n}` });
      t.forEach((v) => v.release());
    }
  });

  it('tanh-GELU and erf-GELU forward match f64, tails included', async () => {
    const gpu = await testGpu();
    const act = await Activations.create(gpu);
    for (const n of SIZES) {
      const x = inputs(n, 3 * n);
      const [tx, ty] = [gpu.upload(x, [n], 'f32', 'x'), gpu.tensor([n], 'f32', 'y')];
      const [yt] = await run(gpu, (rec) => act.geluTanh(rec, tx, ty), [ty]);
      expectClose(yt, Array.from(x, geluTanh), { rtol: 2e-6, atol: 1e-7, what: `gelu_tanh n=${n}` });
      const [ye] = await run(gpu, (rec) => act.geluErf(rec, tx, ty), [ty]);
      expectClose(ye, Array.from(x, geluErf), { rtol: 2e-6, atol: 1e-7, what: `gelu_erf n=${n}` });
      [tx, ty].forEach((t) => t.release());
    }
    // The two GELUs differ (by up to ~5e-4): the vision blocks and the mergers must not be swapped.
    const grid = randUniform(1000, 4, -4, 4);
    expect(Math.max(...Array.from(grid, (v) => Math.abs(geluErf(v) - geluTanh(v))))).toBeGreaterThan(1e-4);
  });

  it('rejects mismatched sizes and dtypes with ShapeError naming the op', async () => {
    const gpu = await testGpu();
    const act = await Activations.create(gpu);
    const rec = gpu.recorder();
    const a = gpu.tensor([4, 8], 'f32', 'a');
    const b = gpu.tensor([4, 7], 'f32', 'b');
    expect(() => act.swiglu(rec, a, b, a)).toThrow(/swiglu: up/);
    expect(() => act.swigluBackward(rec, a, a, a, a, b)).toThrow(ShapeError);
    expect(() => act.geluTanh(rec, a, gpu.tensor([4, 8], 'u32', 'u'))).toThrow(/gelu_tanh: y must be f32/);
    expect(() => act.geluErf(rec, b, a)).toThrow(/gelu_erf/);
  });
});
