import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, finiteDifferences, randUniform, matmulT, transpose } from '../helpers/reference';
import { Lora } from '../../src/ops/lora';
import { createLoraParams, loraScale, releaseLoraParams, type LoraParams } from '../../src/ops/loraParams';
import { ShapeError, type Gpu, type Tensor } from '../../src/gpu';

// Small odd shapes: tokens, in, out, rank; alpha / r = 2.
const [T, IN, OUT, R, ALPHA] = [5, 17, 9, 3, 6];
const TOL = { rtol: 1e-5, atol: 1e-6 };

/** f64 LoRA: x̃ = keep∘x, u = x̃·Aᵀ, delta = s·u·Bᵀ. `keep` is the dropout multiplier per element of x (1 without dropout). */
function refForward(x: ArrayLike<number>, A: ArrayLike<number>, B: ArrayLike<number>, keep: ArrayLike<number>) {
  const s = ALPHA / R;
  const xd = Float64Array.from(x, (v, i) => v * keep[i]);
  const u = matmulT(xd, A, T, R, IN);
  const delta = matmulT(u, B, T, OUT, R).map((v) => s * v);
  return { u, delta };
}

/** Analytic f64 gradients of L = Σ g∘y. */
function refBackward(x: ArrayLike<number>, A: ArrayLike<number>, B: ArrayLike<number>, keep: ArrayLike<number>, g: ArrayLike<number>) {
  const s = ALPHA / R;
  const xd = Float64Array.from(x, (v, i) => v * keep[i]);
  const { u } = refForward(x, A, B, keep);
  const t = matmulT(g, transpose(B, OUT, R), T, R, OUT).map((v) => s * v); // s·g·B
  const dB = matmulT(transpose(g, T, OUT), transpose(u, T, R), OUT, R, T).map((v) => s * v);
  const dA = matmulT(transpose(t, T, R), transpose(xd, T, IN), R, IN, T);
  const dx = matmulT(t, transpose(A, R, IN), T, IN, R).map((v, i) => v * keep[i]);
  return { dA, dB, dx };
}

interface Fixture {
  gpu: Gpu;
  lora: Lora;
  p: LoraParams;
  x: Float32Array;
  A: Float32Array;
  B: Float32Array;
  base: Float32Array;
  tx: Tensor;
  ty: Tensor;
  tu: Tensor;
  tt: Tensor;
  txd: Tensor;
  release: () => void;
}

/** Random non-zero A and B (so every gradient path is exercised), zeroed grads, x and a base output y. */
async function fixture(seed: number): Promise<Fixture> {
  const gpu = await testGpu();
  const lora = await Lora.create(gpu);
  const p = createLoraParams(gpu, { name: 'layers.0.mlp.up_proj', in: IN, out: OUT, r: R, alpha: ALPHA });
  const x = randUniform(T * IN, seed);
  const A = randUniform(R * IN, seed + 1);
  const B = randUniform(OUT * R, seed + 2);
  const base = randUniform(T * OUT, seed + 3);
  gpu.write(p.A, A);
  gpu.write(p.B, B);
  const rec = gpu.recorder();
  lora.zeroGrad(rec, p);
  await rec.submit();
  const tx = gpu.upload(x, [T, IN], 'f32', 'x');
  const ty = gpu.upload(base, [T, OUT], 'f32', 'y');
  // Workspaces sized for a longer batch than this one, as a caller would hold them.
  const tu = gpu.tensor([T + 2, R], 'f32', 'u');
  const tt = gpu.tensor([T + 2, R], 'f32', 't');
  const txd = gpu.tensor([T + 2, IN], 'f32', 'xd');
  const release = () => {
    releaseLoraParams(p);
    for (const t of [tx, ty, tu, tt, txd]) t.release();
  };
  return { gpu, lora, p, x, A, B, base, tx, ty, tu, tt, txd, release };
}

const read = async (gpu: Gpu, t: Tensor, n = t.numel) => (await gpu.readF32(t)).slice(0, n);
const ones = new Float64Array(T * IN).fill(1);

describe('lora', () => {
  it('init: A ~ U(-1/√in, 1/√in) from the seed, B and grads zero', async () => {
    const gpu = await testGpu();
    const lora = await Lora.create(gpu);
    const spec = { name: 'q_proj', in: 400, out: 7, r: 8, alpha: 16 };
    const p1 = createLoraParams(gpu, spec);
    const p2 = createLoraParams(gpu, spec);
    const p3 = createLoraParams(gpu, spec);
    for (const p of [p1, p2, p3]) gpu.write(p.B, new Float32Array(spec.out * spec.r).fill(3));
    const rec = gpu.recorder();
    lora.init(rec, p1, 1);
    lora.init(rec, p2, 1);
    lora.init(rec, p3, 2);
    await rec.submit();
    const a1 = await read(gpu, p1.A);
    const bound = 1 / Math.sqrt(spec.in);
    expect(a1.every((v) => Math.abs(v) <= bound)).toBe(true);
    const mean = a1.reduce((s, v) => s + v, 0) / a1.length;
    const std = Math.sqrt(a1.reduce((s, v) => s + (v - mean) ** 2, 0) / a1.length);
    expect(Math.abs(mean)).toBeLessThan(0.05 * bound);
    expect(Math.abs(std / (bound / Math.sqrt(3)) - 1)).toBeLessThan(0.03);
    expect(await read(gpu, p2.A)).toEqual(a1);
    const a3 = await read(gpu, p3.A);
    expect(a3.filter((v, i) => v === a1[i]).length).toBeLessThan(5);
    for (const t of [p1.B, p1.dA, p1.dB]) expect((await read(gpu, t)).every((v) => v === 0)).toBe(true);
    for (const p of [p1, p2, p3]) releaseLoraParams(p);
  });

  it('forward adds s·(x·Aᵀ)·Bᵀ to the base output and keeps u; off leaves the base output exactly', async () => {
    const f = await fixture(10);
    expect(loraScale(f.p)).toBe(2);
    const rec = f.gpu.recorder();
    f.lora.forward(rec, f.p, { x: f.tx, y: f.ty, u: f.tu });
    await rec.submit();
    const { u, delta } = refForward(f.x, f.A, f.B, ones);
    expectClose(await read(f.gpu, f.tu, T * R), u, { ...TOL, what: 'u' });
    expectClose(await read(f.gpu, f.ty), delta.map((v, i) => v + f.base[i]), { ...TOL, what: 'y' });

    // down: u alone (a recompute's), y untouched.
    f.gpu.write(f.ty, f.base);
    f.gpu.write(f.tu, new Float32Array(T * R));
    const down = f.gpu.recorder();
    f.lora.down(down, f.p, f.tx, f.tu);
    await down.submit();
    expectClose(await read(f.gpu, f.tu, T * R), u, { ...TOL, what: 'u from down' });
    expect(await read(f.gpu, f.ty)).toEqual(f.base);

    const off = f.gpu.recorder();
    f.lora.forward(off, f.p, { x: f.tx, y: f.ty, u: f.tu }, { enabled: false });
    f.lora.backward(off, f.p, { x: f.tx, dy: f.ty, u: f.tu, t: f.tt }, { enabled: false });
    await off.submit();
    expect(await read(f.gpu, f.ty)).toEqual(f.base);
    expect((await read(f.gpu, f.p.dA)).every((v) => v === 0)).toBe(true);
    f.release();
  });

  it('backward: dA, dB, dX match the analytic f64 gradients and finite differences of the f64 forward', async () => {
    const f = await fixture(20);
    const g = randUniform(T * OUT, 25);
    const dxBase = randUniform(T * IN, 26); // the base layer's part of dX, already there
    const tg = f.gpu.upload(g, [T, OUT], 'f32', 'dy');
    const tdx = f.gpu.upload(dxBase, [T, IN], 'f32', 'dx');
    const rec = f.gpu.recorder();
    f.lora.forward(rec, f.p, { x: f.tx, y: f.ty, u: f.tu });
    f.lora.backward(rec, f.p, { x: f.tx, dy: tg, u: f.tu, dx: tdx, t: f.tt });
    await rec.submit();
    const want = refBackward(f.x, f.A, f.B, ones, g);
    const dA = await read(f.gpu, f.p.dA);
    const dB = await read(f.gpu, f.p.dB);
    const dx = (await read(f.gpu, tdx)).map((v, i) => v - dxBase[i]);
    expectClose(dA, want.dA, { ...TOL, what: 'dA' });
    expectClose(dB, want.dB, { ...TOL, what: 'dB' });
    expectClose(dx, want.dx, { rtol: 1e-5, atol: 1e-5, what: 'dX (less the base part)' });

    const loss = (x: ArrayLike<number>, A: ArrayLike<number>, B: ArrayLike<number>) =>
      refForward(x, A, B, ones).delta.reduce((s, v, i) => s + v * g[i], 0);
    const fd = { rtol: 1e-4, atol: 1e-5 };
    expectClose(dA, finiteDifferences((A) => loss(f.x, A, f.B), f.A), { ...fd, what: 'dA vs finite differences' });
    expectClose(dB, finiteDifferences((B) => loss(f.x, f.A, B), f.B), { ...fd, what: 'dB vs finite differences' });
    expectClose(dx, finiteDifferences((x) => loss(x, f.A, f.B), f.x), { ...fd, what: 'dX vs finite differences' });
    tg.release();
    tdx.release();
    f.release();
  });

  it('the up products of many rows (up_add: widths of whole vec4s, ranks in passes of 16) match f64', async () => {
    const gpu = await testGpu();
    const lora = await Lora.create(gpu);
    // 3 row blocks of 32 and 3 column blocks of 128 (the last partial), for y and for dX.
    const [t, inF, outF] = [70, 136, 260];
    for (const [r, seed] of [[16, 40], [37, 50]] as const) {
      const p = createLoraParams(gpu, { name: 'layers.1.mlp.down_proj', in: inF, out: outF, r, alpha: 2 * r });
      const [x, A, B, base, g, dxBase] = [t * inF, r * inF, outF * r, t * outF, t * outF, t * inF].map((n, i) => randUniform(n, seed + i));
      gpu.write(p.A, A);
      gpu.write(p.B, B);
      const tensors = [gpu.upload(x, [t, inF], 'f32', 'x'), gpu.upload(base, [t, outF], 'f32', 'y'), gpu.upload(g, [t, outF], 'f32', 'dy'), gpu.upload(dxBase, [t, inF], 'f32', 'dx'), gpu.tensor([t, r], 'f32', 'u'), gpu.tensor([t, r], 'f32', 't')];
      const [tx, ty, tg, tdx, tu, tt] = tensors;
      const rec = gpu.recorder();
      lora.zeroGrad(rec, p);
      lora.forward(rec, p, { x: tx, y: ty, u: tu });
      lora.backward(rec, p, { x: tx, dy: tg, u: tu, dx: tdx, t: tt });
      await rec.submit();
      const u = matmulT(x, A, t, r, inF);
      const y = matmulT(u, B, t, outF, r).map((v, i) => 2 * v + base[i]);
      const tq = matmulT(g, transpose(B, outF, r), t, r, outF).map((v) => 2 * v);
      const dx = matmulT(tq, transpose(A, r, inF), t, inF, r).map((v, i) => v + dxBase[i]);
      // f32 sums of r products of u (itself a sum of 136 terms), values up to about 100: a few ulps.
      expectClose(await read(gpu, ty), y, { rtol: 1e-5, atol: 1e-4, what: `y, rank ${r}` });
      expectClose(await read(gpu, tdx), dx, { rtol: 1e-5, atol: 1e-4, what: `dX, rank ${r}` });
      releaseLoraParams(p);
      for (const x of tensors) x.release();
    }
  });

  it('accumulates dA and dB across two calls (two micro-batches), and zeroGrad clears them', async () => {
    const f = await fixture(30);
    const x2 = randUniform(T * IN, 31);
    const g1 = randUniform(T * OUT, 32);
    const g2 = randUniform(T * OUT, 33);
    const tx2 = f.gpu.upload(x2, [T, IN], 'f32', 'x2');
    const tg1 = f.gpu.upload(g1, [T, OUT], 'f32', 'dy1');
    const tg2 = f.gpu.upload(g2, [T, OUT], 'f32', 'dy2');
    const tu2 = f.gpu.tensor([T, R], 'f32', 'u2');
    const rec = f.gpu.recorder();
    f.lora.forward(rec, f.p, { x: f.tx, y: f.ty, u: f.tu });
    f.lora.forward(rec, f.p, { x: tx2, y: f.ty, u: tu2 });
    f.lora.backward(rec, f.p, { x: f.tx, dy: tg1, u: f.tu, t: f.tt });
    f.lora.backward(rec, f.p, { x: tx2, dy: tg2, u: tu2, t: f.tt });
    await rec.submit();
    const w1 = refBackward(f.x, f.A, f.B, ones, g1);
    const w2 = refBackward(x2, f.A, f.B, ones, g2);
    expectClose(await read(f.gpu, f.p.dA), w1.dA.map((v, i) => v + w2.dA[i]), { ...TOL, what: 'dA summed' });
    expectClose(await read(f.gpu, f.p.dB), w1.dB.map((v, i) => v + w2.dB[i]), { ...TOL, what: 'dB summed' });
    const clear = f.gpu.recorder();
    f.lora.zeroGrad(clear, f.p);
    await clear.submit();
    expect((await read(f.gpu, f.p.dB)).every((v) => v === 0)).toBe(true);
    for (const t of [tx2, tg1, tg2, tu2]) t.release();
    f.release();
  });

  it('lora_dropout: a seeded inverted-dropout mask on x, regenerated identically in backward', async () => {
    const f = await fixture(40);
    const prob = 0.25;
    const g = randUniform(T * OUT, 45);
    const tg = f.gpu.upload(g, [T, OUT], 'f32', 'dy');
    const tdx = f.gpu.zeros([T, IN], 'f32', 'dx');
    const opts = { dropout: prob, seed: 1234 };
    const rec = f.gpu.recorder();
    f.lora.forward(rec, f.p, { x: f.tx, y: f.ty, u: f.tu, xd: f.txd }, opts);
    await rec.submit();
    // The workspace holds dropout(x): each element is 0 or x / (1 - p).
    const xd = await read(f.gpu, f.txd, T * IN);
    const keep = new Float64Array(T * IN);
    xd.forEach((v, i) => {
      if (v !== 0) {
        expect(v).toBeCloseTo(f.x[i] / (1 - prob), 6);
        keep[i] = 1 / (1 - prob);
      }
    });
    const kept = keep.filter((v) => v > 0).length / keep.length;
    expect(Math.abs(kept - (1 - prob))).toBeLessThan(0.08);
    const fw = refForward(f.x, f.A, f.B, keep);
    expectClose(await read(f.gpu, f.ty), fw.delta.map((v, i) => v + f.base[i]), { ...TOL, what: 'y with dropout' });

    const back = f.gpu.recorder();
    f.lora.backward(back, f.p, { x: f.tx, dy: tg, u: f.tu, dx: tdx, t: f.tt, xd: f.txd }, opts);
    await back.submit();
    const want = refBackward(f.x, f.A, f.B, keep, g);
    const dA = await read(f.gpu, f.p.dA);
    const dx = await read(f.gpu, tdx);
    expectClose(dA, want.dA, { ...TOL, what: 'dA with dropout' });
    expectClose(await read(f.gpu, f.p.dB), want.dB, { ...TOL, what: 'dB with dropout' });
    expectClose(dx, want.dx, { rtol: 1e-5, atol: 1e-5, what: 'dX with dropout' });
    const loss = (x: ArrayLike<number>) => refForward(x, f.A, f.B, keep).delta.reduce((s, v, i) => s + v * g[i], 0);
    expectClose(dx, finiteDifferences(loss, f.x), { rtol: 1e-4, atol: 1e-5, what: 'dX with dropout vs finite differences' });

    // Another seed draws another mask.
    const other = f.gpu.recorder();
    f.lora.forward(other, f.p, { x: f.tx, y: f.ty, u: f.tu, xd: f.txd }, { dropout: prob, seed: 1235 });
    await other.submit();
    const xd2 = await read(f.gpu, f.txd, T * IN);
    expect(xd2.some((v, i) => (v === 0) !== (xd[i] === 0))).toBe(true);
    tg.release();
    tdx.release();
    f.release();
  });

  it('refuses bad shapes, dropout without workspace or seed, with ShapeError naming the op and layer', async () => {
    const f = await fixture(50);
    const rec = f.gpu.recorder();
    const wrongIn = f.gpu.tensor([T, IN + 1], 'f32', 'x_bad');
    const shortY = f.gpu.tensor([T - 1, OUT], 'f32', 'y_short');
    const smallU = f.gpu.tensor([T - 1, R], 'f32', 'u_small');
    expect(() => f.lora.forward(rec, f.p, { x: wrongIn, y: f.ty, u: f.tu })).toThrow(ShapeError);
    expect(() => f.lora.forward(rec, f.p, { x: f.tx, y: shortY, u: f.tu })).toThrow(/lora.forward: layers.0.mlp.up_proj: y/);
    expect(() => f.lora.forward(rec, f.p, { x: f.tx, y: f.ty, u: smallU })).toThrow(/at least 5 rows/);
    expect(() => f.lora.forward(rec, f.p, { x: f.tx, y: f.ty, u: f.tu }, { dropout: 0.1, seed: 1 })).toThrow(/workspace xd/);
    expect(() => f.lora.forward(rec, f.p, { x: f.tx, y: f.ty, u: f.tu, xd: f.txd }, { dropout: 0.1 })).toThrow(/seed/);
    expect(() => f.lora.forward(rec, f.p, { x: f.tx, y: f.ty, u: f.tu }, { dropout: 1 })).toThrow(/dropout/);
    expect(() => f.lora.backward(rec, f.p, { x: f.tx, dy: f.ty, u: f.tu, t: smallU })).toThrow(/lora.backward/);
    expect(() => createLoraParams(f.gpu, { name: 'o_proj', in: 4, out: 4, r: 0, alpha: 8 })).toThrow(/o_proj: r/);
    await rec.submit();
    for (const t of [wrongIn, shortY, smallU]) t.release();
    f.release();
  });
});
