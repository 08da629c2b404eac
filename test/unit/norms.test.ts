import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, finiteDifferences, randNormal, randUniform } from '../helpers/reference';
import { Norms } from '../../src/ops/norms';
import { ShapeError } from '../../src/gpu';

// f64 references (torch semantics: biased variance, eps inside the rsqrt).
function rmsnormRef(x: ArrayLike<number>, w: ArrayLike<number>, eps: number): { y: Float64Array; rstd: Float64Array } {
  const n = w.length;
  const rows = x.length / n;
  const y = new Float64Array(x.length);
  const rstd = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let i = 0; i < n; i++) ss += x[r * n + i] ** 2;
    rstd[r] = 1 / Math.sqrt(ss / n + eps);
    for (let i = 0; i < n; i++) y[r * n + i] = x[r * n + i] * rstd[r] * w[i];
  }
  return { y, rstd };
}

function layernormRef(x: ArrayLike<number>, w: ArrayLike<number>, b: ArrayLike<number>, eps: number): Float64Array {
  const n = w.length;
  const y = new Float64Array(x.length);
  for (let r = 0; r < x.length / n; r++) {
    let mean = 0;
    for (let i = 0; i < n; i++) mean += x[r * n + i] / n;
    let v = 0;
    for (let i = 0; i < n; i++) v += (x[r * n + i] - mean) ** 2 / n;
    for (let i = 0; i < n; i++) y[r * n + i] = ((x[r * n + i] - mean) / Math.sqrt(v + eps)) * w[i] + b[i];
  }
  return y;
}

const SHAPES: [number, number][] = [
  [1, 1],
  [4, 1],
  [1, 3],
  [3, 65],
  [5, 130],
  [2, 300],
];
/** Rows wide enough for the vec4 kernels (n % 4 == 0, n ≥ 1024): one pass per thread, and a ragged last pass. */
const WIDE: [number, number][] = [
  [1, 2048],
  [3, 1028],
];
/** Narrower rows with n % 4 == 0, 8 a workgroup (the rows kernels): a partial last workgroup, rows of
 * one vec4, of a q/k head (32 threads, one vec4 each) and of more vec4s than threads. */
const NARROW: [number, number][] = [
  [1, 4],
  [11, 128],
  [9, 132],
  [3, 296],
];

describe('norms', () => {
  it('rmsnorm forward matches f64 (odd widths, one row, wide rows), and saves rstd', async () => {
    const gpu = await testGpu();
    const norms = await Norms.create(gpu);
    for (const [rows, n] of [...SHAPES, ...WIDE, ...NARROW]) {
      const x = randNormal(rows * n, rows * 100 + n);
      const w = randUniform(n, n, 0.5, 1.5);
      const eps = 1e-6;
      const [tx, tw, ty, tr] = [gpu.upload(x, [rows, n], 'f32', 'x'), gpu.upload(w, [n], 'f32', 'w'), gpu.tensor([rows, n], 'f32', 'y'), gpu.tensor([rows], 'f32', 'rstd')];
      const rec = gpu.recorder();
      norms.rmsnorm(rec, tx, tw, ty, eps, tr);
      await rec.submit();
      const want = rmsnormRef(x, w, eps);
      expectClose(await gpu.readF32(ty), want.y, { rtol: 2e-6, atol: 1e-6, what: `rmsnorm ${rows}x${n}` });
      expectClose(await gpu.readF32(tr), want.rstd, { rtol: 2e-6, what: `rstd ${rows}x${n}` });
      // Without rstd: same output.
      const rec2 = gpu.recorder();
      gpu.write(ty, new Float32Array(rows * n));
      norms.rmsnorm(rec2, tx, tw, ty, eps);
      await rec2.submit();
      expectClose(await gpu.readF32(ty), want.y, { rtol: 2e-6, atol: 1e-6, what: `rmsnorm (no rstd) ${rows}x${n}` });
      [tx, tw, ty, tr].forEach((t) => t.release());
    }
  });

  it('rmsnorm with add is the norm of x + add on the vec4 kernels (wide and narrow rows), x unchanged; refused on odd widths and beside rstd', async () => {
    const gpu = await testGpu();
    const norms = await Norms.create(gpu);
    for (const [rows, n] of [...WIDE, ...NARROW]) {
      expect(Norms.takesAdd(n)).toBe(true);
      const x = randNormal(rows * n, rows * 7 + n);
      const add = randNormal(rows * n, rows * 11 + n, 0.5);
      const w = randUniform(n, n + 3, 0.5, 1.5);
      const [tx, ta, tw, ty] = [gpu.upload(x, [rows, n], 'f32', 'x'), gpu.upload(add, [rows, n], 'f32', 'add'), gpu.upload(w, [n], 'f32', 'w'), gpu.tensor([rows, n], 'f32', 'y')];
      const rec = gpu.recorder();
      norms.rmsnorm(rec, tx, tw, ty, 1e-6, undefined, ta);
      await rec.submit();
      const want = rmsnormRef(Float64Array.from(x, (v, i) => v + add[i]), w, 1e-6).y;
      expectClose(await gpu.readF32(ty), want, { rtol: 2e-6, atol: 1e-6, what: `rmsnorm of x + add ${rows}x${n}` });
      expect(Array.from(await gpu.readF32(tx))).toEqual(Array.from(x));
      [tx, ta, tw, ty].forEach((t) => t.release());
    }
    const [n, rows] = [65, 2];
    expect(Norms.takesAdd(n)).toBe(false);
    const [tx, tw, ty, tr] = [gpu.tensor([rows, n], 'f32', 'x'), gpu.tensor([n], 'f32', 'w'), gpu.tensor([rows, n], 'f32', 'y'), gpu.tensor([rows], 'f32', 'rstd')];
    const rec = gpu.recorder();
    expect(() => norms.rmsnorm(rec, tx, tw, ty, 1e-6, undefined, ty)).toThrow(ShapeError);
    const [wx, ww, wy, wr] = [gpu.tensor([1, 2048], 'f32', 'x'), gpu.tensor([2048], 'f32', 'w'), gpu.tensor([1, 2048], 'f32', 'y'), gpu.tensor([1], 'f32', 'rstd')];
    expect(() => norms.rmsnorm(rec, wx, ww, wy, 1e-6, wr, wy)).toThrow(ShapeError);
    [tx, tw, ty, tr, wx, ww, wy, wr].forEach((t) => t.release());
  });

  it('per-head q/k norm is rmsnorm on the [T·heads, head_dim] view', async () => {
    const gpu = await testGpu();
    const norms = await Norms.create(gpu);
    const [T, H, D] = [3, 4, 128];
    const q = randNormal(T * H * D, 1, 3);
    const w = randUniform(D, 2, 0.5, 1.5);
    const tq = gpu.upload(q, [T, H * D], 'f32', 'q');
    const tw = gpu.upload(w, [D], 'f32', 'q_norm');
    const ty = gpu.tensor([T, H * D], 'f32', 'qn');
    const rec = gpu.recorder();
    expect(() => norms.rmsnorm(rec, tq, tw, ty, 1e-6)).toThrow(ShapeError);
    norms.rmsnorm(rec, tq.reshape([T * H, D]), tw, ty.reshape([T * H, D]), 1e-6);
    await rec.submit();
    expectClose(await gpu.readF32(ty), rmsnormRef(q, w, 1e-6).y, { rtol: 2e-6, atol: 1e-6, what: 'q_norm' });
    [tq, tw, ty].forEach((t) => t.release());
  });

  it('rmsnorm backward matches finite differences of the f64 forward, and accumulates (odd, wide and narrow rows)', async () => {
    const gpu = await testGpu();
    const norms = await Norms.create(gpu);
    for (const [rows, n] of [...SHAPES, ...WIDE, ...NARROW]) {
      const x = randNormal(rows * n, 7 * rows + n);
      const w = randUniform(n, n + 1, 0.5, 1.5);
      const dy = randNormal(rows * n, 3 * n + rows);
      const eps = 1e-5;
      const loss = (v: Float64Array) => rmsnormRef(v, w, eps).y.reduce((s, y, i) => s + y * dy[i], 0);
      const want = finiteDifferences(loss, x, { eps: 1e-5 });
      const prior = randUniform(rows * n, 99);
      const t = {
        x: gpu.upload(x, [rows, n], 'f32', 'x'),
        w: gpu.upload(w, [n], 'f32', 'w'),
        y: gpu.tensor([rows, n], 'f32', 'y'),
        r: gpu.tensor([rows], 'f32', 'rstd'),
        dy: gpu.upload(dy, [rows, n], 'f32', 'dy'),
        dx: gpu.tensor([rows, n], 'f32', 'dx'),
        acc: gpu.upload(prior, [rows, n], 'f32', 'dres'),
      };
      const rec = gpu.recorder();
      norms.rmsnorm(rec, t.x, t.w, t.y, eps, t.r);
      norms.rmsnormBackward(rec, t.dy, t.x, t.w, t.r, t.dx);
      norms.rmsnormBackward(rec, t.dy, t.x, t.w, t.r, t.acc, true);
      await rec.submit();
      // n = 1 has a gradient of ~eps/|x|³ scale; atol covers it relative to |dy|·rstd.
      expectClose(await gpu.readF32(t.dx), want, { rtol: 1e-4, atol: 1e-5, what: `rmsnorm backward ${rows}x${n}` });
      expectClose(await gpu.readF32(t.acc), want.map((g, i) => g + prior[i]), { rtol: 1e-4, atol: 1e-5, what: `accumulate ${rows}x${n}` });
      Object.values(t).forEach((v) => v.release());
    }
  });

  // 66,000 workgroups take ~55 s on SwiftShader (0.3 s on lavapipe); the grid arithmetic does not
  // depend on the driver.
  it.skipIf(process.env.VLRL_VK === 'swiftshader')('covers more rows than one grid dimension holds (2-D grid)', async () => {
    const gpu = await testGpu();
    const norms = await Norms.create(gpu);
    const [rows, n] = [66_000, 2];
    const x = randNormal(rows * n, 5);
    const w = Float32Array.from([1, 2]);
    const [tx, tw, ty] = [gpu.upload(x, [rows, n], 'f32', 'x'), gpu.upload(w, [n], 'f32', 'w'), gpu.tensor([rows, n], 'f32', 'y')];
    const rec = gpu.recorder();
    norms.rmsnorm(rec, tx, tw, ty, 1e-6);
    await rec.submit();
    expectClose(await gpu.readF32(ty), rmsnormRef(x, w, 1e-6).y, { rtol: 2e-6, atol: 1e-6, what: 'rmsnorm 66000 rows' });
    [tx, tw, ty].forEach((t) => t.release());
  });

  it('layernorm forward matches f64, rows with a large mean included', async () => {
    const gpu = await testGpu();
    const norms = await Norms.create(gpu);
    for (const [rows, n] of SHAPES.filter(([, n]) => n > 1)) {
      const x = randNormal(rows * n, 11 * n + rows).map((v, i) => (i < n ? v + 300 : v)); // row 0: mean 300
      const w = randUniform(n, n + 5, 0.5, 1.5);
      const b = randUniform(n, n + 6);
      const tx = gpu.upload(x, [rows, n], 'f32', 'x');
      const tw = gpu.upload(w, [n], 'f32', 'w');
      const tb = gpu.upload(b, [n], 'f32', 'b');
      const ty = gpu.tensor([rows, n], 'f32', 'y');
      const rec = gpu.recorder();
      norms.layernorm(rec, tx, tw, tb, ty, 1e-6);
      await rec.submit();
      // Row 0's values carry f32 rounding of 300 (3e-5 absolute) into x − mean.
      expectClose(await gpu.readF32(ty), layernormRef(x, w, b, 1e-6), { rtol: 1e-5, atol: 5e-5, what: `layernorm ${rows}x${n}` });
      [tx, tw, tb, ty].forEach((t) => t.release());
    }
  });

  it('layernorm backward matches finite differences of the f64 forward, and accumulates', async () => {
    const gpu = await testGpu();
    const norms = await Norms.create(gpu);
    for (const [rows, n] of SHAPES.filter(([, n]) => n > 1)) {
      const x = randNormal(rows * n, 13 * n + rows).map((v, i) => (i < n ? v + 3 : v)); // row 0: mean 3
      const w = randUniform(n, n + 7, 0.5, 1.5);
      const b = randUniform(n, n + 8);
      const dy = randNormal(rows * n, 5 * n + rows);
      const eps = 1e-6;
      const loss = (v: Float64Array) => layernormRef(v, w, b, eps).reduce((s, y, i) => s + y * dy[i], 0);
      const want = finiteDifferences(loss, x, { eps: 1e-5 });
      const prior = randUniform(rows * n, 98);
      const t = {
        x: gpu.upload(x, [rows, n], 'f32', 'x'),
        w: gpu.upload(w, [n], 'f32', 'w'),
        dy: gpu.upload(dy, [rows, n], 'f32', 'dy'),
        dx: gpu.tensor([rows, n], 'f32', 'dx'),
        acc: gpu.upload(prior, [rows, n], 'f32', 'dres'),
      };
      const rec = gpu.recorder();
      norms.layernormBackward(rec, t.dy, t.x, t.w, t.dx, eps);
      norms.layernormBackward(rec, t.dy, t.x, t.w, t.acc, eps, true);
      await rec.submit();
      expectClose(await gpu.readF32(t.dx), want, { rtol: 1e-4, atol: 1e-5, what: `layernorm backward ${rows}x${n}` });
      expectClose(await gpu.readF32(t.acc), want.map((g, i) => g + prior[i]), { rtol: 1e-4, atol: 1e-5, what: `accumulate ${rows}x${n}` });
      Object.values(t).forEach((v) => v.release());
    }
  });

  it('rejects mismatched shapes and dtypes with ShapeError naming the op', async () => {
    const gpu = await testGpu();
    const norms = await Norms.create(gpu);
    const x = gpu.tensor([2, 8], 'f32', 'x');
    const w = gpu.tensor([8], 'f32', 'w');
    const y = gpu.tensor([2, 8], 'f32', 'y');
    const rec = gpu.recorder();
    expect(() => norms.rmsnorm(rec, x, gpu.tensor([7], 'f32', 'w7'), y, 1e-6)).toThrow(/rmsnorm/);
    expect(() => norms.rmsnorm(rec, x, w, gpu.tensor([2, 7], 'f32', 'y7'), 1e-6)).toThrow(ShapeError);
    expect(() => norms.rmsnorm(rec, x, w, y, 1e-6, gpu.tensor([3], 'f32', 'r3'))).toThrow(/rstd/);
    expect(() => norms.rmsnormBackward(rec, y, x, w, gpu.tensor([2], 'u32', 'ru'), y)).toThrow(/rmsnorm_backward/);
    expect(() => norms.layernorm(rec, x, w, gpu.tensor([4], 'f32', 'b4'), y, 1e-6)).toThrow(/layernorm.*bias/);
  });
});
