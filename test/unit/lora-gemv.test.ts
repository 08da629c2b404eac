// The LoRA GEMV update for decode rows (shaders/lora_gemv.wgsl) against an f64 CPU
// reference of y + s·x·Aᵀ·Bᵀ, and against src/ops/lora.ts's two GEMMs on the same inputs (u from the
// down dispatch); two or
// three adapters on one input in one call, the input's RMSNorm inside the down dispatch, and the
// gate/up pair fused with SwiGLU (and down_proj's down product folded into it), the normed rows
// also as int8 groups for the 4-bit GEMV after (2 to 8 rows; one row's would be two limbs, which
// they refuse); scalar and vec4 kernels (in and r multiples of 4).
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, randUniform } from '../helpers/reference';
import { Lora } from '../../src/ops/lora';
import { createLoraParams, loraScale } from '../../src/ops/loraParams';
import { LoraGemv } from '../../src/ops/loraGemv';
import { Norms } from '../../src/ops/norms';
import { ShapeError } from '../../src/gpu';
import { allocQ4, int8GroupWords, MatmulQ4 } from '../../src/ops/matmulQ4';
import { gemvGivenAndSelfQuantized } from '../helpers/int8Groups';

describe('lora gemv', () => {
  it.each([
    { rows: 1, inF: 64, out: 300, r: 16 },
    { rows: 3, inF: 100, out: 257, r: 1 },
    { rows: 8, inF: 600, out: 513, r: 64 },
    { rows: 2, inF: 32, out: 20, r: 260 },
    { rows: 1, inF: 63, out: 30, r: 16 },
    { rows: 8, inF: 130, out: 33, r: 16 },
  ])('y += s·x·Aᵀ·Bᵀ (down + up): $rows rows, in $inF, out $out, r $r', async ({ rows, inF, out, r }) => {
    const gpu = await testGpu();
    const [op, lora] = await Promise.all([LoraGemv.create(gpu), Lora.create(gpu)]);
    const p = createLoraParams(gpu, { name: 'test', in: inF, out, r, alpha: 2 * r + 1 });
    const x = randUniform(rows * inF, 1 + rows);
    const A = randUniform(r * inF, 2 + r);
    const B = randUniform(out * r, 3 + out);
    const y0 = randUniform(rows * out, 4);
    gpu.write(p.A, A);
    gpu.write(p.B, B);
    const tx = gpu.upload(x, [rows, inF], 'f32', 'x');
    const ty = gpu.upload(y0, [rows, out], 'f32', 'y');
    const ty2 = gpu.upload(y0, [rows, out], 'f32', 'y2');
    const u = gpu.tensor([rows, r], 'f32', 'u');
    const rec = gpu.recorder();
    const uGemv = gpu.tensor([rows, r], 'f32', 'u_gemv');
    op.forward(rec, p, tx, ty, uGemv);
    op.down(rec, [p], tx, uGemv);
    lora.forward(rec, p, { x: tx, y: ty2, u });
    await rec.submit();
    const want = loraRef(x, A, B, y0, rows, inF, out, r, loraScale(p));
    const got = await gpu.readF32(ty);
    // f32 sums of in·r products: errors scale with the largest outputs, not with each one.
    const atol = 1e-5 * maxAbs(want);
    expectClose(got, want, { rtol: 1e-5, atol, what: 'lora gemv vs f64' });
    expectClose(got, await gpu.readF32(ty2), { rtol: 1e-5, atol, what: 'lora gemv vs the two GEMMs' });
    const uWant = await gpu.readF32(u);
    expectClose(await gpu.readF32(uGemv), uWant, { rtol: 1e-5, atol: 1e-5 * maxAbs(uWant), what: 'u = x·Aᵀ' });
    for (const t of [tx, ty, ty2, u, uGemv, p.A, p.B, p.dA, p.dB]) t.release();
  });
});

/** y + s·x·Aᵀ·Bᵀ in f64 for x [rows, inF], A [r, inF], B [out, r]. */
function loraRef(x: Float32Array, A: Float32Array, B: Float32Array, y0: Float32Array, rows: number, inF: number, out: number, r: number, s: number): Float64Array {
  const want = new Float64Array(rows * out);
  for (let t = 0; t < rows; t++) {
    const ut = Array.from({ length: r }, (_, j) => {
      let acc = 0;
      for (let k = 0; k < inF; k++) acc += x[t * inF + k] * A[j * inF + k];
      return acc;
    });
    for (let c = 0; c < out; c++) {
      let acc = 0;
      for (let j = 0; j < r; j++) acc += ut[j] * B[c * r + j];
      want[t * out + c] = y0[t * out + c] + s * acc;
    }
  }
  return want;
}

const maxAbs = (v: ArrayLike<number>) => Array.from(v).reduce((m, x) => Math.max(m, Math.abs(x)), 0);

describe('lora gemv, adapters sharing an input', () => {
  it.each([
    { rows: 5, inF: 70, outs: [33, 17, 17], r: 3 },
    { rows: 8, inF: 129, outs: [40, 7], r: 16 },
    { rows: 1, inF: 300, outs: [260, 2, 513], r: 8 },
  ])('one down and one up dispatch for $outs.length adapters: $rows rows, in $inF, outs $outs, r $r', async ({ rows, inF, outs, r }) => {
    const gpu = await testGpu();
    const op = await LoraGemv.create(gpu);
    const x = randUniform(rows * inF, 40 + rows);
    const tx = gpu.upload(x, [rows, inF], 'f32', 'x');
    const u = gpu.tensor([rows, outs.length * r], 'f32', 'u');
    const parts = outs.map((out, g) => {
      const p = createLoraParams(gpu, { name: `p${g}`, in: inF, out, r, alpha: 3 + g });
      const A = randUniform(r * inF, 50 + g);
      const B = randUniform(out * r, 60 + g);
      const y0 = randUniform(rows * out, 70 + g);
      gpu.write(p.A, A);
      gpu.write(p.B, B);
      return { p, y: gpu.upload(y0, [rows, out], 'f32', `y${g}`), want: loraRef(x, A, B, y0, rows, inF, out, r, loraScale(p)) };
    });
    const rec = gpu.recorder();
    const ps = parts.map((q) => q.p);
    op.down(rec, ps, tx, u);
    op.up(rec, ps, u, parts.map((q) => q.y));
    await rec.submit();
    for (const [g, q] of parts.entries()) {
      expectClose(await gpu.readF32(q.y), q.want, { rtol: 1e-5, atol: 1e-5 * maxAbs(q.want), what: `adapter ${g}` });
      for (const t of [q.y, q.p.A, q.p.B, q.p.dA, q.p.dB]) t.release();
    }
    tx.release();
    u.release();
  });

  it.each([
    { rows: 3, inF: 90, I: 301, r: 5 },
    { rows: 8, inF: 1028, I: 67, r: 12 },
  ])('gate/up updates fused with SwiGLU: act = silu(gate + Δgate)·(up + Δup), gate and up untouched ($rows rows, in $inF, I $I, r $r)', async ({ rows, inF, I, r }) => {
    const gpu = await testGpu();
    const op = await LoraGemv.create(gpu);
    const x = randUniform(rows * inF, 81);
    const tx = gpu.upload(x, [rows, inF], 'f32', 'x');
    const parts = [0, 1].map((g) => {
      const p = createLoraParams(gpu, { name: g ? 'up' : 'gate', in: inF, out: I, r, alpha: 7 + g });
      const A = randUniform(r * inF, 82 + g);
      const B = randUniform(I * r, 84 + g);
      const y0 = randUniform(rows * I, 86 + g);
      gpu.write(p.A, A);
      gpu.write(p.B, B);
      return { p, y0, y: gpu.upload(y0, [rows, I], 'f32', p.name), full: loraRef(x, A, B, y0, rows, inF, I, r, loraScale(p)) };
    });
    const act = gpu.tensor([rows, I], 'f32', 'act');
    const u = gpu.tensor([rows, 2 * r], 'f32', 'u');
    const rec = gpu.recorder();
    op.down(rec, [parts[0].p, parts[1].p], tx, u);
    op.upSwiglu(rec, parts[0].p, parts[1].p, u, parts[0].y, parts[1].y, act);
    await rec.submit();
    const want = parts[0].full.map((g, i) => (g / (1 + Math.exp(-g))) * parts[1].full[i]);
    expectClose(await gpu.readF32(act), want, { rtol: 1e-5, atol: 1e-5 * maxAbs(want), what: 'act' });
    for (const q of parts) {
      expect([...(await gpu.readF32(q.y))], `${q.p.name} keeps the base projection`).toEqual([...q.y0]);
      for (const t of [q.y, q.p.A, q.p.B, q.p.dA, q.p.dB]) t.release();
    }
    for (const t of [tx, act, u]) t.release();
  });

  it.each([
    { rows: 1, inF: 96, I: 192, out: 128, r: 16 },
    { rows: 3, inF: 40, I: 128, out: 64, r: 2 },
    { rows: 8, inF: 64, I: 320, out: 192, r: 8 },
  ])('SwiGLU dispatch folds down_proj\'s down product: after its base projection, one dispatch adds s·(act·Aᵀ)·Bᵀ ($rows rows, in $inF, I $I, out $out, r $r)', async ({ rows, inF, I, out, r }) => {
    const gpu = await testGpu();
    const op = await LoraGemv.create(gpu);
    const x = randUniform(rows * inF, 31);
    const tx = gpu.upload(x, [rows, inF], 'f32', 'x');
    const gu = [0, 1].map((g) => {
      const p = createLoraParams(gpu, { name: g ? 'up' : 'gate', in: inF, out: I, r, alpha: 5 + g });
      const A = randUniform(r * inF, 32 + g);
      const B = randUniform(I * r, 34 + g);
      const y0 = randUniform(rows * I, 36 + g);
      gpu.write(p.A, A);
      gpu.write(p.B, B);
      return { p, y: gpu.upload(y0, [rows, I], 'f32', p.name), full: loraRef(x, A, B, y0, rows, inF, I, r, loraScale(p)) };
    });
    const act = gu[0].full.map((g, i) => (g / (1 + Math.exp(-g))) * gu[1].full[i]);
    const down = createLoraParams(gpu, { name: 'down', in: I, out, r, alpha: 3 });
    const Ad = randUniform(r * I, 38);
    const Bd = randUniform(out * r, 39);
    const h0 = randUniform(rows * out, 40);
    gpu.write(down.A, Ad);
    gpu.write(down.B, Bd);
    expect(LoraGemv.canFold(gu[0].p, down)).toBe(true);
    const tact = gpu.tensor([rows, I], 'f32', 'act');
    const th = gpu.upload(h0, [rows, out], 'f32', 'h');
    const u = gpu.tensor([rows, 2 * r], 'f32', 'u');
    const parts = gpu.tensor([rows * LoraGemv.foldParts(down) * r], 'f32', 'parts');
    const rec = gpu.recorder();
    op.down(rec, [gu[0].p, gu[1].p], tx, u);
    op.upSwiglu(rec, gu[0].p, gu[1].p, u, gu[0].y, gu[1].y, tact, { p: down, parts });
    op.upFromParts(rec, down, parts, LoraGemv.foldParts(down), th);
    await rec.submit();
    expectClose(await gpu.readF32(tact), act, { rtol: 1e-5, atol: 1e-5 * maxAbs(act), what: 'act' });
    const want = loraRef(Float32Array.from(await gpu.readF32(tact)), Ad, Bd, h0, rows, I, out, r, loraScale(down));
    expectClose(await gpu.readF32(th), want, { rtol: 1e-5, atol: 1e-5 * maxAbs(want), what: 'h + down_proj update' });
    if (op.foldQuantizes(gu[0].p) && rows === 1) {
      // One row's int8 groups are two limbs, which the fold does not write.
      expect(() => op.upSwiglu(gpu.recorder(), gu[0].p, gu[1].p, u, gu[0].y, gu[1].y, tact, { p: down, parts, quantized: gpu.tensor([int8GroupWords(1, I)], 'u32', 'xq1') })).toThrow(ShapeError);
    } else if (op.foldQuantizes(gu[0].p)) {
      // act also as int8 groups: the same act, and down_proj's GEMV given them writes what it
      // writes quantizing act itself, bit for bit.
      const [tact2, xq] = [gpu.tensor([rows, I], 'f32', 'act2'), gpu.tensor([int8GroupWords(rows, I)], 'u32', 'xq')];
      const rec2 = gpu.recorder();
      op.upSwiglu(rec2, gu[0].p, gu[1].p, u, gu[0].y, gu[1].y, tact2, { p: down, parts, quantized: xq });
      await rec2.submit();
      expect(await gpu.readF32(tact2)).toEqual(await gpu.readF32(tact));
      const [given, self] = await gemvGivenAndSelfQuantized(gpu, tact2, xq);
      expect(given).toEqual(self);
      expect(maxAbs(given)).toBeGreaterThan(0);
      tact2.release();
      xq.release();
    }
    // Shapes a 64-column workgroup cannot fold: another rank, or widths off the multiple.
    expect(LoraGemv.canFold(gu[0].p, createLoraParams(gpu, { name: 'r', in: I, out, r: r === 2 ? 4 : 2, alpha: 1 }))).toBe(false);
    expect(LoraGemv.canFold(gu[0].p, createLoraParams(gpu, { name: 'o', in: I, out: out + 1, r, alpha: 1 }))).toBe(false);
    for (const t of [tx, tact, th, u, parts, ...[...gu.map((q) => q.p), down].flatMap((p) => [p.A, p.B, p.dA, p.dB]), ...gu.map((q) => q.y)]) t.release();
  });

  it.each([
    { rows: 2, inF: 1024, r: 8, adapters: 3 },
    { rows: 7, inF: 130, r: 3, adapters: 2 },
    { rows: 1, inF: 96, r: 16, adapters: 3 },
    { rows: 8, inF: 258, r: 4, adapters: 2 },
  ])('the input RMSNorm inside the down dispatch: u and the normed rows as rmsnorm then down, and as f64 ($rows rows, in $inF, r $r, $adapters adapters)', async ({ rows, inF, r, adapters }) => {
    const gpu = await testGpu();
    const [op, norms] = await Promise.all([LoraGemv.create(gpu), Norms.create(gpu)]);
    const eps = 1e-6;
    const h = randUniform(rows * inF, 91, -2, 2);
    const w = randUniform(inF, 92, 0.5, 1.5);
    const As = Array.from({ length: adapters }, (_, g) => randUniform(r * inF, 93 + g));
    const ps = As.map((A, g) => {
      const p = createLoraParams(gpu, { name: `p${g}`, in: inF, out: 4, r, alpha: r });
      gpu.write(p.A, A);
      return p;
    });
    const th = gpu.upload(h, [rows, inF], 'f32', 'h');
    const tw = gpu.upload(w, [inF], 'f32', 'norm_w');
    const [xn, xn2] = [gpu.tensor([rows, inF], 'f32', 'xn'), gpu.tensor([rows, inF], 'f32', 'xn2')];
    const [u, u2] = [gpu.tensor([rows, adapters * r], 'f32', 'u'), gpu.tensor([rows, adapters * r], 'f32', 'u2')];
    const rec = gpu.recorder();
    op.down(rec, ps, th, u, { weight: tw, eps, out: xn });
    norms.rmsnorm(rec, th, tw, xn2, eps);
    op.down(rec, ps, xn2, u2);
    await rec.submit();
    const want = await gpu.readF32(xn2);
    expectClose(await gpu.readF32(xn), want, { rtol: 1e-6, atol: 1e-6 * maxAbs(want), what: 'normed rows' });
    const uWant = await gpu.readF32(u2);
    expectClose(await gpu.readF32(u), uWant, { rtol: 1e-5, atol: 1e-5 * maxAbs(uWant), what: 'u' });
    // f64: xn = h·rsqrt(mean(h²) + eps)·w, u [rows, G·r] = xn·[A_0; ...]ᵀ
    const xnRef = new Float64Array(rows * inF);
    const uRef = new Float64Array(rows * adapters * r);
    for (let t = 0; t < rows; t++) {
      let ss = 0;
      for (let k = 0; k < inF; k++) ss += h[t * inF + k] ** 2;
      const rstd = 1 / Math.sqrt(ss / inF + eps);
      for (let k = 0; k < inF; k++) xnRef[t * inF + k] = h[t * inF + k] * rstd * w[k];
      As.forEach((A, g) => {
        for (let j = 0; j < r; j++) {
          let acc = 0;
          for (let k = 0; k < inF; k++) acc += xnRef[t * inF + k] * A[j * inF + k];
          uRef[t * adapters * r + g * r + j] = acc;
        }
      });
    }
    expectClose(await gpu.readF32(xn), xnRef, { rtol: 1e-5, atol: 1e-6 * maxAbs(xnRef), what: 'normed rows vs f64' });
    expectClose(await gpu.readF32(u), uRef, { rtol: 1e-5, atol: 1e-5 * maxAbs(uRef), what: 'u vs f64' });
    for (const t of [th, tw, xn, xn2, u, u2, ...ps.flatMap((p) => [p.A, p.B, p.dA, p.dB])]) t.release();
  });

  it.each([
    { rows: 2, inF: 96, r: 4, adapters: 2 },
    { rows: 8, inF: 512, r: 8, adapters: 3 },
    { rows: 5, inF: 64, r: 16, adapters: 3 },
    { rows: 1, inF: 96, r: 4, adapters: 3 },
  ])('the normed rows also as int8 groups: the 4-bit GEMV given them writes what it writes quantizing them itself, bit for bit; one row refused ($rows rows, in $inF, r $r, $adapters adapters)', async ({ rows, inF, r, adapters }) => {
    const gpu = await testGpu();
    const [op, mm] = await Promise.all([LoraGemv.create(gpu), MatmulQ4.create(gpu)]);
    const ps = Array.from({ length: adapters }, (_, g) => {
      const p = createLoraParams(gpu, { name: `p${g}`, in: inF, out: 4, r, alpha: r });
      gpu.write(p.A, randUniform(r * inF, 120 + g));
      return p;
    });
    const th = gpu.upload(randUniform(rows * inF, 110, -2, 2), [rows, inF], 'f32', 'h');
    const tw = gpu.upload(randUniform(inF, 111, 0.5, 1.5), [inF], 'f32', 'norm_w');
    const [xn, xn2] = [gpu.tensor([rows, inF], 'f32', 'xn'), gpu.tensor([rows, inF], 'f32', 'xn2')];
    const [u, u2] = [gpu.tensor([rows, adapters * r], 'f32', 'u'), gpu.tensor([rows, adapters * r], 'f32', 'u2')];
    const xq = gpu.tensor([int8GroupWords(rows, inF)], 'u32', 'xq');
    if (!op.quantizes(ps)) {
      // No packed dot products in this WGSL: the norm refuses to quantize.
      expect(() => op.down(gpu.recorder(), ps, th, u, { weight: tw, eps: 1e-6, out: xn, quantized: xq })).toThrow(ShapeError);
      return;
    }
    if (rows === 1) {
      // One row's int8 groups are two limbs, which the norm does not write.
      expect(() => op.down(gpu.recorder(), ps, th, u, { weight: tw, eps: 1e-6, out: xn, quantized: xq })).toThrow(ShapeError);
      return;
    }
    const rec = gpu.recorder();
    op.down(rec, ps, th, u, { weight: tw, eps: 1e-6, out: xn, quantized: xq });
    op.down(rec, ps, th, u2, { weight: tw, eps: 1e-6, out: xn2 });
    await rec.submit();
    expect(await gpu.readF32(xn)).toEqual(await gpu.readF32(xn2));
    expect(await gpu.readF32(u)).toEqual(await gpu.readF32(u2));
    const [given, self] = await gemvGivenAndSelfQuantized(gpu, xn, xq);
    expect(given).toEqual(self);
    expect(maxAbs(given)).toBeGreaterThan(0);
    // Too few words, or a call that reads f32 x, are refused.
    expect(() => op.down(gpu.recorder(), ps, th, u, { weight: tw, eps: 1e-6, out: xn, quantized: gpu.tensor([4], 'u32', 'small') })).toThrow(ShapeError);
    const w = allocQ4(gpu, 8, inF, 'w8');
    expect(mm.takesQuantizedX(rows, w, false)).toBe(false);
    expect(() => mm.gemv(gpu.recorder(), xn, w, gpu.tensor([rows, 8], 'f32', 'y8'), false, { xq })).toThrow(ShapeError);
    for (const t of [th, tw, xn, xn2, u, u2, xq, w.codes, w.scales, ...ps.flatMap((p) => [p.A, p.B, p.dA, p.dB])]) t.release();
  });

  it.each([
    { rows: 8, inF: 512, r: 8, adapters: 3, quantized: true },
    { rows: 3, inF: 96, r: 4, adapters: 2, quantized: true },
    { rows: 7, inF: 130, r: 3, adapters: 2, quantized: false },
    { rows: 2, inF: 256, r: 16, adapters: 1, quantized: false },
  ])('the norm of h plus an owed update (add): u, the normed rows and their int8 groups are bit for bit those of the norm of h + add, and h is left as it was ($rows rows, in $inF, r $r, $adapters adapters, int8 $quantized)', async ({ rows, inF, r, adapters, quantized }) => {
    const gpu = await testGpu();
    const op = await LoraGemv.create(gpu);
    const ps = Array.from({ length: adapters }, (_, g) => {
      const p = createLoraParams(gpu, { name: `p${g}`, in: inF, out: 4, r, alpha: r });
      gpu.write(p.A, randUniform(r * inF, 140 + g));
      return p;
    });
    if (quantized && !op.quantizes(ps)) return;
    if (!op.takesAdd(ps, quantized)) {
      // Too few storage buffers a stage for the owed update: refused.
      expect(() => op.down(gpu.recorder(), ps, gpu.tensor([rows, inF], 'f32', 'h'), gpu.tensor([rows, adapters * r], 'f32', 'u'), { weight: gpu.tensor([inF], 'f32', 'w'), eps: 1e-6, out: gpu.tensor([rows, inF], 'f32', 'xn'), add: gpu.tensor([rows, inF], 'f32', 'add') })).toThrow(ShapeError);
      return;
    }
    const h = randUniform(rows * inF, 150, -2, 2);
    const add = randUniform(rows * inF, 151, -0.5, 0.5);
    const sum = h.map((v, i) => Math.fround(v + add[i]));
    const [th, tadd, tsum] = [gpu.upload(h, [rows, inF], 'f32', 'h'), gpu.upload(add, [rows, inF], 'f32', 'add'), gpu.upload(sum, [rows, inF], 'f32', 'h_plus')];
    const tw = gpu.upload(randUniform(inF, 152, 0.5, 1.5), [inF], 'f32', 'norm_w');
    const [xn, xn2] = [gpu.tensor([rows, inF], 'f32', 'xn'), gpu.tensor([rows, inF], 'f32', 'xn2')];
    const [u, u2] = [gpu.tensor([rows, adapters * r], 'f32', 'u'), gpu.tensor([rows, adapters * r], 'f32', 'u2')];
    const [xq, xq2] = quantized ? [0, 1].map((i) => gpu.tensor([int8GroupWords(rows, inF)], 'u32', `xq${i}`)) : [undefined, undefined];
    const rec = gpu.recorder();
    op.down(rec, ps, th, u, { weight: tw, eps: 1e-6, out: xn, quantized: xq, add: tadd });
    op.down(rec, ps, tsum, u2, { weight: tw, eps: 1e-6, out: xn2, quantized: xq2 });
    await rec.submit();
    expect(await gpu.readF32(u)).toEqual(await gpu.readF32(u2));
    expect(await gpu.readF32(xn)).toEqual(await gpu.readF32(xn2));
    if (xq && xq2) expect(await gpu.read(xq)).toEqual(await gpu.read(xq2));
    expect(await gpu.readF32(th)).toEqual(h);
    expect(maxAbs(await gpu.readF32(u))).toBeGreaterThan(0);
    // An owed update of the wrong size is refused.
    expect(() => op.down(gpu.recorder(), ps, th, u, { weight: tw, eps: 1e-6, out: xn, add: gpu.tensor([rows, inF - 1], 'f32', 'short') })).toThrow(ShapeError);
    for (const t of [th, tadd, tsum, tw, xn, xn2, u, u2, ...(xq && xq2 ? [xq, xq2] : []), ...ps.flatMap((p) => [p.A, p.B, p.dA, p.dB])]) t.release();
  });

  it.each([
    { rows: 8, np: 96, out: 128, r: 16 },
    { rows: 3, np: 101, out: 64, r: 4 },
    { rows: 1, np: 7, out: 64, r: 64 },
  ])('upFromParts: y += s·(Σ partials)·Bᵀ, rounds of partials past the last masked ($rows rows, $np partials a row, out $out, r $r)', async ({ rows, np, out, r }) => {
    const gpu = await testGpu();
    const op = await LoraGemv.create(gpu);
    const p = createLoraParams(gpu, { name: 'down', in: 64, out, r, alpha: 3 });
    const B = randUniform(out * r, 130);
    gpu.write(p.B, B);
    const parts = randUniform(rows * np * r, 131);
    const y0 = randUniform(rows * out, 132);
    const [tparts, ty] = [gpu.upload(parts, [rows * np * r], 'f32', 'parts'), gpu.upload(y0, [rows, out], 'f32', 'y')];
    const rec = gpu.recorder();
    op.upFromParts(rec, p, tparts, np, ty);
    await rec.submit();
    const want = new Float64Array(rows * out);
    for (let t = 0; t < rows; t++) {
      const u = Array.from({ length: r }, (_, j) => {
        let acc = 0;
        for (let q = 0; q < np; q++) acc += parts[(t * np + q) * r + j];
        return acc;
      });
      for (let c = 0; c < out; c++) want[t * out + c] = y0[t * out + c] + loraScale(p) * u.reduce((a, uj, j) => a + uj * B[c * r + j], 0);
    }
    expectClose(await gpu.readF32(ty), want, { rtol: 1e-5, atol: 1e-5 * maxAbs(want), what: 'y' });
    for (const t of [tparts, ty, p.A, p.B, p.dA, p.dB]) t.release();
  });

  it('rejects groups it cannot take in one call', async () => {
    const gpu = await testGpu();
    const op = await LoraGemv.create(gpu);
    const ps = [8, 16].map((r, g) => createLoraParams(gpu, { name: `p${g}`, in: 32, out: 8, r, alpha: r }));
    const x = gpu.tensor([2, 32], 'f32', 'x');
    const ys = ps.map((p) => gpu.tensor([2, 8], 'f32', p.name));
    const u = gpu.tensor([2, 48], 'f32', 'u');
    expect(() => op.down(gpu.recorder(), ps, x, u)).toThrow(ShapeError);
    expect(() => op.up(gpu.recorder(), ps, u, ys)).toThrow(ShapeError);
    const x9 = gpu.tensor([9, 32], 'f32', 'x9');
    expect(() => op.forward(gpu.recorder(), ps[0], x9, gpu.tensor([9, 8], 'f32', 'y9'), gpu.tensor([9, 8], 'f32', 'u9'))).toThrow(ShapeError);
  });
});
