import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { finiteDifferences, randNormal, randUniform } from '../helpers/reference';
import { dequantizeRef, matmulAB, matmulABt, quantizeRef } from '../helpers/q4-reference';
import { allocQ4, DOT4_I8, int8GroupWords, MatmulQ4, type Q4Weight } from '../../src/ops/matmulQ4';
import { MissingFeatureError, ShapeError, type Gpu, type Tensor } from '../../src/gpu';

const MS_GEMV = [1, 2, 3, 4, 5, 6, 7, 8];
const MS_GEMM = [1, 3, 9, 33, 70];
const NS = [1, 5, 67, 131];
const KS = [32, 96, 160];

/** A random Gaussian weight [n, k], quantized on the CPU and uploaded, with its dequantized values. */
function weight(gpu: Gpu, n: number, k: number, seed: number): { w: Q4Weight; deq: Float64Array } {
  const q = quantizeRef(randNormal(n * k, seed, 0.05), n, k);
  const w = allocQ4(gpu, n, k, 'w');
  gpu.write(w.codes, q.codes);
  gpu.write(w.scales, q.scales);
  return { w, deq: dequantizeRef(q) };
}

/** |got - want| ≤ 1e-4·Σ|a||b| per element (plus a floor for all-zero products), plus `extra`
 * (the int8 GEMV's quantization bound) where given. */
function expectMatmulClose(got: Float32Array, want: Float64Array, mag: Float64Array, what: string, extra?: Float64Array): void {
  expect(got.length, `${what}: length`).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    const tol = 1e-4 * mag[i] + (extra?.[i] ?? 0) + 1e-30;
    if (!(Math.abs(got[i] - want[i]) <= tol)) {
      expect.fail(`${what}: element ${i} is ${got[i]}, expected ${want[i]} ± ${tol} (Σ|a||b| = ${mag[i]})`);
    }
  }
}

function release(...ts: Tensor[]): void {
  for (const t of ts) t.release();
}

/** The most the int8 GEMV may differ from the exact product: per group of 32 of a row of x, its
 * values are off by at most half a step a/127 (a: the group's largest |x|), times Σ|w| over the
 * group's weights in that row of W (plus 0.1% for the f32 scale and rounding). One row of x takes
 * two limbs: half a step of the second, a/(127·254). */
function int8Bound(x: Float32Array, deq: Float64Array, m: number, n: number, k: number): Float64Array {
  const halfStep = m === 1 ? 2 * 127 * 254 : 254;
  const out = new Float64Array(m * n);
  for (let i = 0; i < m; i++)
    for (let g = 0; g < k / 32; g++) {
      let a = 0;
      for (let l = 32 * g; l < 32 * g + 32; l++) a = Math.max(a, Math.abs(x[i * k + l]));
      for (let j = 0; j < n; j++) {
        let w = 0;
        for (let l = 32 * g; l < 32 * g + 32; l++) w += Math.abs(deq[j * k + l]);
        out[i * n + j] += (1.001 * a * w) / halfStep;
      }
    }
  return out;
}

type Product = 'gemv' | 'gemm';

/** Every shape in one submit (software Vulkan pays per submit and readback), then compare. With
 * `int8` (a layout of the int8 GEMV), x starts with an all-zero group (scale 0: no division by it)
 * and each element may also differ by int8Bound. */
async function checkForward(gpu: Gpu, mm: MatmulQ4, product: Product, ms: readonly number[], tag: string, int8 = false): Promise<void> {
  const rec = gpu.recorder();
  const cases = [];
  for (const m of ms)
    for (const n of NS)
      for (const k of KS) {
        const seed = 1000 * m + 10 * n + k;
        const { w, deq } = weight(gpu, n, k, seed);
        const x = randUniform(m * k, seed + 1);
        if (int8) x.fill(0, 0, 32);
        const y0 = randUniform(m * n, seed + 2);
        const tx = gpu.upload(x, [m, k], 'f32', 'x');
        const ty = gpu.tensor([m, n], 'f32', 'y');
        const tacc = gpu.upload(y0, [m, n], 'f32', 'y_acc');
        cases.push({ m, n, k, w, deq, x, y0, tx, ty, tacc });
      }
  // Recorded after every upload: a split GEMM's scratch goes back to the pool as it is recorded,
  // and a queue write before the submit must not land in it.
  for (const { w, tx, ty, tacc } of cases) {
    mm[product](rec, tx, w, ty);
    mm[product](rec, tx, w, tacc, true);
  }
  await rec.submit();
  for (const { m, n, k, w, deq, x, y0, tx, ty, tacc } of cases) {
    const { y, mag } = matmulABt(x, deq, m, n, k);
    const what = `${product}${tag} M=${m} N=${n} K=${k}`;
    const bound = int8 ? int8Bound(x, deq, m, n, k) : undefined;
    expectMatmulClose(await gpu.readF32(ty), y, mag, what, bound);
    const magAcc = mag.map((v, i) => v + Math.abs(y0[i]));
    expectMatmulClose(await gpu.readF32(tacc), y.map((v, i) => v + y0[i]), magAcc, `${what} accumulate`, bound);
    release(tx, ty, tacc, w.codes, w.scales);
  }
}

describe('4-bit matmul', () => {
  it('GEMV y = x·Wᵀ (and y +=) matches dequantize-then-f64 for 1 to 8 rows, odd N and K (2 to 8 rows on the LoRA epilogue\'s kernel at rank 0, and on the plain one)', async () => {
    const gpu = await testGpu();
    await checkForward(gpu, await MatmulQ4.create(gpu), 'gemv', MS_GEMV, '');
    await checkForward(gpu, await MatmulQ4.create(gpu, { loraMaxRows: 1 }), 'gemv', [2, 8], ' (no epilogue kernel)');
  });

  it('GEMV with another thread layout (8 lanes per row block, 4 blocks), with and without subgroups', async () => {
    const gpu = await testGpu();
    const gemv = { threadsPerRow: 8, groups: 4 };
    const sgMin = gpu.device.adapterInfo?.subgroupMinSize ?? 0;
    for (const subgroups of gpu.has('subgroups') && sgMin >= 8 ? [false, true] : [false]) {
      const mm = await MatmulQ4.create(gpu, { subgroups, gemv });
      expect(mm.subgroups).toBe(subgroups);
      await checkForward(gpu, mm, 'gemv', [1, 3, 8], ` (8x4${subgroups ? ', subgroups' : ''})`);
    }
    await expect(MatmulQ4.create(gpu, { gemv: { ...gemv, threadsPerRow: 12 } })).rejects.toBeInstanceOf(ShapeError);
    await expect(MatmulQ4.create(gpu, { gemv: { ...gemv, threadsPerRow: 256 } })).rejects.toBeInstanceOf(ShapeError);
    await expect(MatmulQ4.create(gpu, { xChunk: 48 })).rejects.toBeInstanceOf(ShapeError);
  });

  it('GEMV with 64 and 128 lanes per row block (K split finer than one group per lane: idle lanes), tree-reduced; and x read from memory unstaged', async () => {
    const gpu = await testGpu();
    for (const gemv of [{ threadsPerRow: 64, groups: 2 }, { threadsPerRow: 128, groups: 1 }, { threadsPerRow: 8, groups: 4, xDirect: true }]) {
      const mm = await MatmulQ4.create(gpu, { gemv });
      await checkForward(gpu, mm, 'gemv', [1, 8], ` (${gemv.threadsPerRow}x${gemv.groups})`);
    }
  });

  it('GEMV walking x in chunks of 64 columns, and a persistent grid of 2 workgroups, agrees too', async () => {
    const gpu = await testGpu();
    const mm = await MatmulQ4.create(gpu, { xChunk: 64, gemv: { threadsPerRow: 8, groups: 2, persist: 2 } });
    await checkForward(gpu, mm, 'gemv', [1, 8], ' (chunks of 64, persistent)');
  });

  it('GEMV with one lane per row block (a warp across rows of W) and its own x chunk per layout agrees', async () => {
    const gpu = await testGpu();
    // 64 rows a workgroup, so the odd N end mid-workgroup and mid-block; a 64-column chunk walks K
    // in several chunks, one lane through every group of a chunk. One M: a pipeline for gemv_rows
    // takes seconds to compile on lavapipe.
    const mm = await MatmulQ4.create(gpu, { gemv: { threadsPerRow: 1, groups: 16, xChunk: 64, unrolled: true } });
    await checkForward(gpu, mm, 'gemv', [8], ' (1x16, chunks of 64)');
    await expect(MatmulQ4.create(gpu, { gemv: { threadsPerRow: 1, groups: 16, xChunk: 40 } })).rejects.toBeInstanceOf(ShapeError);
  });

  it('int8 GEMV (x quantized per row and group, packed dot products) stays within its quantization bound for 2 to 8 rows, and one row in two limbs within 1/254 of that, odd N and K, chunks, a persistent grid', async () => {
    const gpu = await testGpu();
    if (!gpu.hasWgsl(DOT4_I8)) {
      await expect(MatmulQ4.create(gpu, { gemv: { threadsPerRow: 8, groups: 4, int8: true } })).rejects.toBeInstanceOf(MissingFeatureError);
      return;
    }
    await expect(MatmulQ4.create(gpu, { gemv: { threadsPerRow: 8, groups: 4, int8: true, xDirect: true } })).rejects.toBeInstanceOf(ShapeError);
    const layouts = [
      [{ threadsPerRow: 8, groups: 4, int8: true }, [1, 2, 5, 8]],
      [{ threadsPerRow: 4, groups: 2, int8: true, xChunk: 64, persist: 2 }, [8]],
      // x quantized by a dispatch of its own, read from memory.
      [{ threadsPerRow: 8, groups: 2, int8: true, preq: true }, [1, 8]],
    ] as const;
    for (const [gemv, ms] of layouts) await checkForward(gpu, await MatmulQ4.create(gpu, { gemv }), 'gemv', ms, ` int8 ${JSON.stringify(gemv)}`, true);
  });

  it('one row given x in two limbs (GemvCall.xq, from quantizeX) writes, bit for bit, what the layout writes quantizing x itself, within the two-limb bound: two int8 layouts and the LM head\'s by default; the decoder\'s weights stay f32', async () => {
    const gpu = await testGpu();
    const byDefault = await MatmulQ4.create(gpu);
    const small = weight(gpu, 70, 64, 1);
    if (!gpu.hasWgsl(DOT4_I8)) {
      expect(byDefault.takesQuantizedX(1, small.w, true)).toBe(false);
      return;
    }
    // One row on a decoder weight (at most HEAD_N = 65536 rows) takes f32 x by default, int8 allowed or not.
    expect(byDefault.takesQuantizedX(1, small.w, true)).toBe(false);
    // [n, k, the instance]: fixed two-limb layouts, and the default on a vocabulary-sized weight (over 65536 rows).
    const shapes = [
      [70, 64, await MatmulQ4.create(gpu, { gemv: { threadsPerRow: 32, groups: 1, int8: true, preq: true } })],
      [70, 2080, await MatmulQ4.create(gpu, { gemv: { threadsPerRow: 64, groups: 1, int8: true, preq: true } })],
      [65600, 64, byDefault],
    ] as const;
    const rec = gpu.recorder();
    const cases = [];
    // A decoder weight past the small-weight bound (the 4B's and 8B's joined gate/up) stays f32 at one row.
    expect(byDefault.takesQuantizedX(1, weight(gpu, 20000, 64, 3).w, true)).toBe(false);
    for (const [n, k, mm] of shapes) {
      const { w, deq } = weight(gpu, n, k, n + k);
      const x = randUniform(k, n + k + 1);
      x.fill(0, 0, 32); // an all-zero group: scale 0
      const tx = gpu.upload(x, [1, k], 'f32', 'x');
      const xq = gpu.tensor([int8GroupWords(1, k)], 'u32', 'xq');
      const [given, self] = [gpu.tensor([1, n], 'f32', 'y'), gpu.tensor([1, n], 'f32', 'y2')];
      expect(mm.takesQuantizedX(1, w, true)).toBe(true);
      mm.quantizeX(rec, tx, xq);
      mm.gemv(rec, tx, w, given, false, { int8: true, xq });
      mm.gemv(rec, tx, w, self, false, { int8: true });
      cases.push({ n, k, w, deq, x, tx, xq, given, self });
    }
    await rec.submit();
    for (const { n, k, w, deq, x, tx, xq, given, self } of cases) {
      const { y, mag } = matmulABt(x, deq, 1, n, k);
      const got = await gpu.readF32(given);
      expectMatmulClose(got, y, mag, `given two limbs N=${n} K=${k}`, int8Bound(x, deq, 1, n, k));
      expect([...got]).toEqual([...(await gpu.readF32(self))]);
      release(tx, xq, given, self, w.codes, w.scales);
    }
    // xq too small for x's two limbs, or a row count quantizeX does not take.
    const x = gpu.tensor([1, 64], 'f32', 'x');
    const fixed = shapes[0][2];
    expect(() => fixed.gemv(gpu.recorder(), x, small.w, gpu.tensor([1, 70], 'f32', 'y'), false, { int8: true, xq: gpu.tensor([int8GroupWords(1, 64) - 1], 'u32', 'short') })).toThrow(ShapeError);
    expect(() => fixed.quantizeX(gpu.recorder(), x, gpu.tensor([int8GroupWords(1, 64) - 1], 'u32', 'short'))).toThrow(ShapeError);
    expect(() => fixed.quantizeX(gpu.recorder(), gpu.tensor([9, 64], 'f32', 'x9'), gpu.tensor([int8GroupWords(8, 128)], 'u32', 'big'))).toThrow(ShapeError);
  });

  it('GEMV with a LoRA epilogue adds s·u·Bᵀ, u the sum of each row\'s partials, for 1 to 8 rows, f32 and int8 x (one row: two limbs)', async () => {
    const gpu = await testGpu();
    // The epilogue up to 8 rows (Q4_TUNING.loraMaxRows).
    const byDefault = await MatmulQ4.create(gpu, { loraMaxRows: 8 });
    // One row takes int8 x (two limbs) by default on the LM head, or given them: a fixed int8 layout here.
    const oneRowInt8 = gpu.hasWgsl(DOT4_I8) ? await MatmulQ4.create(gpu, { gemv: { threadsPerRow: 8, groups: 2, int8: true, preq: true } }) : null;
    const rec = gpu.recorder();
    const cases = [];
    // [m, n, k, r, partials a row, int8]; the last two with many partials a thread.
    const shapes: (readonly [number, number, number, number, number, boolean])[] = [[1, 67, 96, 4, 5, false], [3, 131, 160, 16, 3, false], [8, 64, 64, 16, 16, false], [8, 131, 96, 4, 7, true], [2, 5, 32, 8, 1, true], [8, 40, 64, 3, 50, true], [1, 67, 96, 16, 96, false]];
    // On 16 threads, 320 partials: 20 a thread.
    if (oneRowInt8) shapes.push([1, 37, 128, 8, 3, true], [1, 37, 128, 16, 20, true]);
    for (const [m, n, k, r, np, int8] of shapes) {
      const mm = m === 1 && int8 ? oneRowInt8! : byDefault;
      const seed = 7000 + 100 * m + r;
      const { w, deq } = weight(gpu, n, k, seed);
      const x = randUniform(m * k, seed + 1);
      const parts = randUniform(m * np * r, seed + 2);
      const B = randUniform(n * r, seed + 3);
      const y0 = randUniform(m * n, seed + 4);
      const t = { x: gpu.upload(x, [m, k], 'f32', 'x'), parts: gpu.upload(parts, [m * np * r], 'f32', 'parts'), B: gpu.upload(B, [n, r], 'f32', 'B'), y: gpu.upload(y0, [m, n], 'f32', 'y') };
      const scale = 0.75;
      expect(mm.takesLora(m, w, r, np, int8)).toBe(true);
      mm.gemv(rec, t.x, w, t.y, true, { int8, lora: { B: t.B, r, scale, parts: t.parts, perRow: np } });
      cases.push({ m, n, k, r, np, int8, w, deq, x, parts, B, y0, t, scale });
    }
    await rec.submit();
    for (const { m, n, k, r, np, int8, w, deq, x, parts, B, y0, t, scale } of cases) {
      const { y, mag } = matmulABt(x, deq, m, n, k);
      const bound = int8 ? int8Bound(x, deq, m, n, k) : new Float64Array(m * n);
      const got = await gpu.readF32(t.y);
      for (let i = 0; i < m; i++)
        for (let j = 0; j < n; j++) {
          let up = 0;
          let upMag = 0;
          for (let c = 0; c < r; c++) {
            let u = 0;
            for (let q = 0; q < np; q++) u += parts[(i * np + q) * r + c];
            up += scale * u * B[j * r + c];
            upMag += Math.abs(scale * u * B[j * r + c]);
          }
          const e = i * n + j;
          const want = y0[e] + y[e] + up;
          const tol = bound[e] + 1e-4 * (mag[e] + upMag + Math.abs(y0[e])) + 1e-6;
          if (!(Math.abs(got[e] - want) <= tol)) expect.fail(`lora epilogue M=${m} N=${n} r=${r} np=${np} int8 ${int8}: element ${e} is ${got[e]}, expected ${want} ± ${tol}`);
        }
      release(t.x, t.parts, t.B, t.y, w.codes, w.scales);
    }
    const { w } = weight(gpu, 8, 32, 3);
    expect(byDefault.takesLora(8, w, 65, 1, false)).toBe(false); // M·r over the epilogue's 512
    expect(byDefault.takesLora(8, w, 16, 96, false)).toBe(false); // down_proj's partials at 8 rows: written beside the GEMV instead (takesResidual)
    // By default 1 to 8 rows take it (o_proj's update at 8 sequences, r 8, 16 heads), and the
    // GEMVs of 2 to 8 rows without an adapter run its kernel at rank 0 (the first test's).
    const engine = await MatmulQ4.create(gpu);
    expect(engine.takesLora(1, w, 16, 96, false)).toBe(true);
    expect(engine.takesLora(2, w, 8, 16, false)).toBe(true);
    expect(engine.takesLora(8, w, 8, 16, false)).toBe(true);
    expect((await MatmulQ4.create(gpu, { loraMaxRows: 1 })).takesLora(2, w, 8, 16, false)).toBe(false);
    await expect(MatmulQ4.create(gpu, { loraMaxRows: 9 })).rejects.toThrow(ShapeError);
  });

  it('GEMV of 2 to 8 rows with a residual: written beside the product (s·u·Bᵀ from partials, y untouched by it), or added to each output, with and without the LoRA epilogue', async () => {
    const gpu = await testGpu();
    const mm = await MatmulQ4.create(gpu);
    const rec = gpu.recorder();
    const scale = 0.625;
    const sum = (parts: Float32Array, np: number, r: number, i: number, c: number) => {
      let u = 0;
      for (let q = 0; q < np; q++) u += parts[(i * np + q) * r + c];
      return u;
    };
    // [m, n, k, r, partials a row, int8, mode]: 'write' the residual; 'add' it (r > 0: beside a LoRA epilogue).
    const shapes: (readonly [number, number, number, number, number, boolean, 'write' | 'add'])[] = [
      [2, 67, 96, 4, 5, false, 'write'],
      [8, 300, 160, 16, 96, false, 'write'],
      [3, 131, 64, 8, 7, false, 'add'],
      [8, 64, 64, 16, 16, false, 'add'],
      [5, 131, 96, 0, 0, false, 'add'],
    ];
    if (gpu.hasWgsl(DOT4_I8)) shapes.push([8, 300, 160, 16, 96, true, 'write'], [8, 64, 64, 16, 16, true, 'add']);
    const cases = [];
    for (const [m, n, k, r, np, int8, mode] of shapes) {
      const seed = 9100 + 10 * m + r + (int8 ? 5 : 0);
      const { w, deq } = weight(gpu, n, k, seed);
      const x = randUniform(m * k, seed + 1);
      const parts = randUniform(Math.max(1, m * np * r), seed + 2);
      const B = randUniform(Math.max(1, n * r), seed + 3);
      const y0 = randUniform(m * n, seed + 4);
      const res0 = randUniform(m * n, seed + 5);
      const t = { x: gpu.upload(x, [m, k], 'f32', 'x'), parts: gpu.upload(parts, [parts.length], 'f32', 'parts'), B: gpu.upload(B, [Math.max(1, n * r)], 'f32', 'B'), y: gpu.upload(y0, [m, n], 'f32', 'y'), res: gpu.upload(res0, [m, n], 'f32', 'residual') };
      expect(mm.takesResidual(m, w, int8)).toBe(true);
      const lora = { B: t.B, r, scale, parts: t.parts, perRow: np };
      if (mode === 'write') mm.gemv(rec, t.x, w, t.y, true, { int8, writeResidual: { out: t.res, lora } });
      else mm.gemv(rec, t.x, w, t.y, true, { int8, addResidual: t.res, lora: r > 0 ? lora : undefined });
      cases.push({ m, n, k, r, np, int8, mode, deq, x, parts, B, y0, res0, t, w });
    }
    await rec.submit();
    for (const { m, n, k, r, np, int8, mode, deq, x, parts, B, y0, res0, t, w } of cases) {
      const { y, mag } = matmulABt(x, deq, m, n, k);
      const bound = int8 ? int8Bound(x, deq, m, n, k) : new Float64Array(m * n);
      const [gotY, gotRes] = [await gpu.readF32(t.y), await gpu.readF32(t.res)];
      const what = `${mode} M=${m} N=${n} r=${r} int8 ${int8}`;
      for (let i = 0; i < m; i++)
        for (let j = 0; j < n; j++) {
          const e = i * n + j;
          let up = 0;
          let upMag = 0;
          for (let c = 0; c < r; c++) {
            const term = scale * sum(parts, np, r, i, c) * B[j * r + c];
            up += term;
            upMag += Math.abs(term);
          }
          const tolY = bound[e] + 1e-4 * (mag[e] + upMag + Math.abs(y0[e]) + Math.abs(res0[e])) + 1e-6;
          const wantY = y0[e] + y[e] + (mode === 'add' ? up + res0[e] : 0);
          if (!(Math.abs(gotY[e] - wantY) <= tolY)) expect.fail(`${what}: y[${e}] is ${gotY[e]}, expected ${wantY} ± ${tolY}`);
          const wantRes = mode === 'write' ? up : res0[e];
          if (!(Math.abs(gotRes[e] - wantRes) <= 1e-5 * (upMag + 1))) expect.fail(`${what}: residual[${e}] is ${gotRes[e]}, expected ${wantRes}`);
        }
      release(t.x, t.parts, t.B, t.y, t.res, w.codes, w.scales);
    }
    // One row takes none; nor does a call that adds and writes, or writes beside its own epilogue, or writes into y's buffer.
    const { w } = weight(gpu, 64, 64, 4);
    expect(mm.takesResidual(1, w, false)).toBe(false);
    expect((await MatmulQ4.create(gpu, { loraMaxRows: 1 })).takesResidual(2, w, false)).toBe(false);
    const x = gpu.tensor([2, 64], 'f32', 'x');
    const y = gpu.tensor([2, 64], 'f32', 'y');
    const res = gpu.tensor([2, 64], 'f32', 'res');
    const lora = { B: gpu.tensor([64, 4], 'f32', 'B'), r: 4, scale: 1, parts: gpu.tensor([2 * 3 * 4], 'f32', 'parts'), perRow: 3 };
    expect(() => mm.gemv(gpu.recorder(), x, w, y, true, { addResidual: res, writeResidual: { out: res, lora } })).toThrow(ShapeError);
    expect(() => mm.gemv(gpu.recorder(), x, w, y, true, { lora, writeResidual: { out: res, lora } })).toThrow(ShapeError);
    expect(() => mm.gemv(gpu.recorder(), x, w, y, true, { writeResidual: { out: y, lora } })).toThrow(ShapeError);
    expect(() => mm.gemv(gpu.recorder(), gpu.tensor([1, 64], 'f32', 'x1'), w, gpu.tensor([1, 64], 'f32', 'y1'), true, { addResidual: gpu.tensor([1, 64], 'f32', 'r1') })).toThrow(ShapeError);
  });

  it('GEMM y = x·Wᵀ (and y +=) matches for one row to several tiles, odd N and K', async () => {
    const gpu = await testGpu();
    const mm = await MatmulQ4.create(gpu);
    await checkForward(gpu, mm, 'gemm', MS_GEMM, '');
  });

  it('GEMM with other tiles: 128x128 stepping half a group, 64x128, 64x64 stepping a group', async () => {
    const gpu = await testGpu();
    const shapes = [
      { rowsPerThread: 8, colsPerThread: 8, stepK: 16 },
      { rowsPerThread: 4, colsPerThread: 8, stepK: 32 },
      { rowsPerThread: 4, colsPerThread: 4, stepK: 32 },
    ] as const;
    for (const gemm of shapes) {
      if (16 * gemm.stepK * 4 * (gemm.rowsPerThread + gemm.colsPerThread) > gpu.limits.maxComputeWorkgroupStorageSize) continue;
      const mm = await MatmulQ4.create(gpu, { gemm });
      await checkForward(gpu, mm, 'gemm', [9, 130], ` ${JSON.stringify(gemm)}`);
    }
  });

  it('GEMM split along K (2, 3 and 5 chunks, the last shorter where they do not divide K) sums its partials, with and without accumulate', async () => {
    const gpu = await testGpu();
    for (const gemmSplit of [2, 3, 5]) {
      const mm = await MatmulQ4.create(gpu, { gemmSplit });
      await checkForward(gpu, mm, 'gemm', [3, 130], ` split ${gemmSplit}`);
    }
    await expect(MatmulQ4.create(gpu, { gemmSplit: 0 })).rejects.toThrow(/gemmSplit/);
  });

  it.each([
    ['GEMV', 'gemv', [[3, [8, 5, 9]], [8, [12, 4]], [2, [7]]]],
    ['GEMM', 'gemm', [[9, [8, 5, 9]], [130, [70, 3]], [20, [7]]]],
    ['GEMM split along K', 'gemm split', [[9, [8, 5, 9]], [130, [70, 3]]]],
  ] as const)('%s of a joined weight writes each part\'s rows apart ([M, n_s] one after another), with and without accumulate', async (_, product, shapes) => {
    const gpu = await testGpu();
    const mm = await MatmulQ4.create(gpu, product === 'gemm split' ? { gemmSplit: 2 } : {});
    const k = 96;
    for (const [m, parts] of shapes) {
      const n = parts.reduce((a, p) => a + p, 0);
      const { w, deq } = weight(gpu, n, k, 40 + m);
      const x = randUniform(m * k, 41 + m);
      const y0 = randUniform(m * n, 42 + m);
      const tx = gpu.upload(x, [m, k], 'f32', 'x');
      const ty = gpu.tensor([m * n], 'f32', 'y');
      const tacc = gpu.upload(y0, [m * n], 'f32', 'y_acc');
      const rec = gpu.recorder();
      if (product === 'gemv') {
        mm.gemv(rec, tx, w, ty, false, { parts });
        mm.gemv(rec, tx, w, tacc, true, { parts });
      } else {
        mm.gemm(rec, tx, w, ty, false, parts);
        mm.gemm(rec, tx, w, tacc, true, parts);
      }
      await rec.submit();
      const { y, mag } = matmulABt(x, deq, m, n, k);
      // Part s holds columns [c0, c0 + width) of every row, row-major, after the earlier parts.
      const perm: number[] = [];
      let c0 = 0;
      for (const width of parts) {
        for (let r = 0; r < m; r++) for (let c = 0; c < width; c++) perm.push(r * n + c0 + c);
        c0 += width;
      }
      const what = `parts [${parts.join(', ')}] M=${m}`;
      expectMatmulClose(await gpu.readF32(ty), Float64Array.from(perm, (i) => y[i]), Float64Array.from(perm, (i) => mag[i]), what);
      expectMatmulClose(await gpu.readF32(tacc), Float64Array.from(perm, (i, j) => y[i] + y0[j]), Float64Array.from(perm, (i, j) => mag[i] + Math.abs(y0[j])), `${what} accumulate`);
      release(tx, ty, tacc, w.codes, w.scales);
    }
    const { w } = weight(gpu, 10, 32, 1);
    const [x, y] = [gpu.tensor([2, 32], 'f32', 'x'), gpu.tensor([20], 'f32', 'y')];
    if (product === 'gemv') expect(() => mm.gemv(gpu.recorder(), x, w, y, false, { parts: [4, 5] })).toThrow(ShapeError);
    else expect(() => mm.gemm(gpu.recorder(), x, w, y, false, [4, 5])).toThrow(ShapeError);
  });

  it('GEMV spans several workgroups and a K that is many groups', async () => {
    const gpu = await testGpu();
    const mm = await MatmulQ4.create(gpu);
    const [m, n, k] = [2, 37, 2080]; // 65 groups: more than one stride of 32 threads, plus one
    const { w, deq } = weight(gpu, n, k, 5);
    const x = randUniform(m * k, 6);
    const tx = gpu.upload(x, [m, k], 'f32', 'x');
    const ty = gpu.tensor([m, n], 'f32', 'y');
    const rec = gpu.recorder();
    mm.forward(rec, tx, w, ty);
    await rec.submit();
    const { y, mag } = matmulABt(x, deq, m, n, k);
    expectMatmulClose(await gpu.readF32(ty), y, mag, 'gemv long K');
    release(tx, ty, w.codes, w.scales);
  });

  it('GEMV keeps 1e-4 over many groups per thread when x has a large common offset (its codes offset by 8)', async () => {
    const gpu = await testGpu();
    const [n, k] = [37, 2080];
    const { w, deq } = weight(gpu, n, k, 7);
    // The default layout (x in one chunk of 2080 columns); 8 lanes per row block: 9 groups per
    // lane (65 = 8·8 + 1), 10 blocks of 4 rows (the last past N) walked by 3 workgroups, x in
    // chunks of 1024 columns (the last of 3 chunks one group).
    const layouts = [
      [undefined, 2080],
      [{ threadsPerRow: 8, groups: 2, persist: 3 }, 1024],
    ] as const;
    for (const [gemv, xChunk] of layouts) {
      const mm = await MatmulQ4.create(gpu, { gemv, xChunk });
      for (const m of [1, 8]) {
        const x = randUniform(m * k, 8 + m, 2, 3);
        const tx = gpu.upload(x, [m, k], 'f32', 'x');
        const ty = gpu.tensor([m, n], 'f32', 'y');
        const rec = gpu.recorder();
        mm.gemv(rec, tx, w, ty);
        await rec.submit();
        const { y, mag } = matmulABt(x, deq, m, n, k);
        expectMatmulClose(await gpu.readF32(ty), y, mag, `gemv offset x M=${m} ${JSON.stringify(gemv ?? 'default')} xChunk ${xChunk}`);
        release(tx, ty);
      }
    }
    release(w.codes, w.scales);
  });

  it('dX = dY·W (and dX +=) matches for odd M, N and K (M over one 128-row tile, N over several 16-row steps)', async () => {
    const gpu = await testGpu();
    const mm = await MatmulQ4.create(gpu);
    for (const m of [1, 9, 150])
      for (const n of [...NS, 40])
        for (const k of KS) {
          const seed = 7 * m + 3 * n + k;
          const { w, deq } = weight(gpu, n, k, seed);
          const dy = randUniform(m * n, seed + 1);
          const dx0 = randUniform(m * k, seed + 2);
          const tdy = gpu.upload(dy, [m, n], 'f32', 'dy');
          const tdx = gpu.tensor([m, k], 'f32', 'dx');
          const tacc = gpu.upload(dx0, [m, k], 'f32', 'dx_acc');
          const rec = gpu.recorder();
          mm.backwardInput(rec, tdy, w, tdx);
          mm.backwardInput(rec, tdy, w, tacc, true);
          await rec.submit();
          const { y, mag } = matmulAB(dy, deq, m, n, k);
          const what = `dX M=${m} N=${n} K=${k}`;
          expectMatmulClose(await gpu.readF32(tdx), y, mag, what);
          const magAcc = mag.map((v, i) => v + Math.abs(dx0[i]));
          expectMatmulClose(await gpu.readF32(tacc), y.map((v, i) => v + dx0[i]), magAcc, `${what} accumulate`);
          release(tdy, tdx, tacc, w.codes, w.scales);
        }
  });

  it('dX is the gradient of Σ dY ⊙ (x·Wᵀ) by finite differences', async () => {
    const gpu = await testGpu();
    const mm = await MatmulQ4.create(gpu);
    const [m, n, k] = [3, 5, 64];
    const { w, deq } = weight(gpu, n, k, 11);
    const x = randUniform(m * k, 12);
    const dy = randUniform(m * n, 13);
    const tdy = gpu.upload(dy, [m, n], 'f32', 'dy');
    const tdx = gpu.tensor([m, k], 'f32', 'dx');
    const rec = gpu.recorder();
    mm.backwardInput(rec, tdy, w, tdx);
    await rec.submit();
    const loss = (xs: Float64Array) => matmulABt(xs, deq, m, n, k).y.reduce((s, v, i) => s + v * dy[i], 0);
    const fd = finiteDifferences(loss, x, { eps: 1e-3 });
    const got = await gpu.readF32(tdx);
    for (let i = 0; i < fd.length; i++) expect(Math.abs(got[i] - fd[i]), `dx[${i}]`).toBeLessThan(1e-5 + 1e-4 * Math.abs(fd[i]));
    release(tdy, tdx, w.codes, w.scales);
  });

  it('gathers dequantized rows by token id (u32 and i32), zeros outside the table', async () => {
    const gpu = await testGpu();
    const mm = await MatmulQ4.create(gpu);
    for (const [n, k] of [
      [67, 96],
      [5, 32],
      [1, 160],
    ]) {
      const { w, deq } = weight(gpu, n, k, n + k);
      const ids = [0, n - 1, Math.floor(n / 2), 0, n, n + 1000];
      for (const dtype of ['u32', 'i32'] as const) {
        const tids = gpu.upload(ids, [ids.length], dtype, 'ids');
        const rows = gpu.tensor([ids.length, k], 'f32', 'rows');
        const rec = gpu.recorder();
        mm.gather(rec, tids, w, rows);
        await rec.submit();
        const got = await gpu.readF32(rows);
        const want = ids.flatMap((id) => (id < n ? Array.from(deq.subarray(id * k, (id + 1) * k)) : new Array<number>(k).fill(0)));
        // Dequantization is exact in f32 (an f16 scale times a small integer).
        expect(Array.from(got), `gather N=${n} K=${k} ${dtype}`).toEqual(want);
        release(tids, rows);
      }
      release(w.codes, w.scales);
    }
  });

  it('rejects bad shapes and dtypes with ShapeError naming the op', async () => {
    const gpu = await testGpu();
    const mm = await MatmulQ4.create(gpu);
    const { w } = weight(gpu, 5, 64, 1);
    const x = gpu.tensor([2, 64], 'f32', 'x');
    const y = gpu.tensor([2, 5], 'f32', 'y');
    const rec = gpu.recorder();
    expect(() => mm.gemv(rec, gpu.tensor([2, 32], 'f32', 'x32'), w, y)).toThrow(ShapeError);
    expect(() => mm.gemv(rec, gpu.tensor([9, 64], 'f32', 'x9'), w, gpu.tensor([9, 5], 'f32', 'y9'))).toThrow(/matmulQ4.gemv.*1 to 8 rows/);
    expect(() => mm.gemm(rec, x, w, gpu.tensor([2, 4], 'f32', 'y4'))).toThrow(/matmulQ4.gemm/);
    expect(() => mm.gemm(rec, x, { ...w, k: 48 }, y)).toThrow(/multiple of 32/);
    expect(() => mm.backwardInput(rec, gpu.tensor([2, 5], 'u32', 'dyu'), w, x)).toThrow(/dy must be f32/);
    expect(() => mm.gather(rec, gpu.tensor([3], 'f32', 'ids'), w, gpu.tensor([3, 64], 'f32', 'r'))).toThrow(ShapeError);
    expect(() => mm.forward(rec, x, { ...w, codes: w.scales }, y)).toThrow(/codes/);
    await rec.submit();
    release(x, y, w.codes, w.scales);
  });
});
