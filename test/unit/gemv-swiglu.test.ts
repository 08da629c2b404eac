// gate/up's 4-bit GEMV with the SwiGLU in its epilogue (MatmulQ4.gemvSwiglu, decode of 2 to 8
// sequences with int8 x): act against an f64 reference on the same int8 x and 4-bit weights with
// the adapters' updates, and all three outputs (act, act as int8 groups, down_proj's adapter's
// partials) against the two dispatches it replaces (the GEMV into gate and up, then LoraGemv's
// SwiGLU with its fold and quantization).
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { dequantizeRef, quantizeRef } from '../helpers/q4-reference';
import { expectClose, randUniform } from '../helpers/reference';
import { createLoraParams, loraScale } from '../../src/ops/loraParams';
import { LoraGemv } from '../../src/ops/loraGemv';
import { allocQ4, DOT4_I8, int8GroupWords, MatmulQ4, SWIGLU_COLS } from '../../src/ops/matmulQ4';
import { ShapeError } from '../../src/gpu';

/** Int8 groups (int8GroupWords' layout for 2 to 8 rows: per row and group of 32, two vec4s of
 * packed q, the even weights of each pair of words then the odd, then the scale s) as their q
 * [rows, k] and s [rows, k / 32]. */
function groupsOf(words: Uint32Array, rows: number, k: number): { q: Int32Array; s: Float64Array } {
  const q = new Int32Array(rows * k);
  const s = new Float64Array((rows * k) / 32);
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  for (let m = 0; m < rows; m++)
    for (let g = 0; g < k / 32; g++) {
      const at = 12 * (m * (k / 32) + g);
      u[0] = words[at + 8];
      s[m * (k / 32) + g] = f[0];
      for (let w = 0; w < 4; w++)
        for (let odd = 0; odd < 2; odd++) {
          const word = words[at + 2 * w + odd];
          for (let b = 0; b < 4; b++) q[m * k + 32 * g + 8 * w + 2 * b + odd] = ((word >>> (8 * b)) & 0xff) << 24 >> 24;
        }
    }
  return { q, s };
}

/** The values int8 groups stand for: s·q. */
function dequantizeGroups(words: Uint32Array, rows: number, k: number): Float64Array {
  const { q, s } = groupsOf(words, rows, k);
  return Float64Array.from(q, (v, i) => v * s[Math.floor(i / 32)]);
}

const silu = (v: number) => v / (1 + Math.exp(-v));

describe('gate/up GEMV with the SwiGLU in its epilogue', () => {
  it.each([
    { rows: 2, k: 256, half: 128, r: 8 },
    { rows: 3, k: 128, half: 192, r: 2 },
    { rows: 8, k: 512, half: 64, r: 16 },
  ])('$rows rows, K $k, half $half, r $r: act against f64 and the unfused pair; act as int8 and the fold as theirs', async ({ rows, k, half, r }) => {
    const gpu = await testGpu();
    if (!gpu.hasWgsl(DOT4_I8)) return;
    const [mm, lg] = await Promise.all([MatmulQ4.create(gpu), LoraGemv.create(gpu)]);
    const n = 2 * half;
    const q = quantizeRef(randUniform(n * k, 7 + k, -0.1, 0.1), n, k);
    const w = allocQ4(gpu, n, k, 'gate_up');
    gpu.write(w.codes, q.codes);
    gpu.write(w.scales, q.scales);
    expect(mm.takesSwiglu(rows, w, r)).toBe(true);
    const p = (name: string, inF: number, out: number, alpha: number) => createLoraParams(gpu, { name, in: inF, out, r, alpha });
    const [gateP, upP, downP] = [p('gate', k, half, 2 * r), p('up', k, half, r), p('down', half, 64, 3 * r)];
    for (const [i, t] of [gateP.A, gateP.B, upP.A, upP.B, downP.A].entries()) gpu.write(t, randUniform(t.numel, 20 + i, -0.3, 0.3));
    const h = gpu.upload(randUniform(rows * k, 3, -2, 2), [rows, k], 'f32', 'h');
    const normW = gpu.upload(randUniform(k, 4, 0.5, 1.5), [k], 'f32', 'norm_w');
    const xn = gpu.tensor([rows, k], 'f32', 'xn');
    const xq = gpu.tensor([int8GroupWords(rows, k)], 'u32', 'xq');
    const u = gpu.tensor([rows, 2 * r], 'f32', 'u');
    const perRow = half / SWIGLU_COLS;
    const out = () => ({
      act: gpu.tensor([rows, half], 'f32', 'act'),
      xq: gpu.tensor([int8GroupWords(rows, half)], 'u32', 'xq_act'),
      parts: gpu.tensor([rows * perRow * r], 'f32', 'parts'),
    });
    const [fused, unfused] = [out(), out()];
    const gateUp = gpu.tensor([rows, n], 'f32', 'gate_up_y');
    const rec = gpu.recorder();
    lg.down(rec, [gateP, upP], h, u, { weight: normW, eps: 1e-6, out: xn });
    mm.quantizeX(rec, xn, xq);
    mm.gemvSwiglu(rec, xn, xq, w, fused.act, { u, B: [gateP.B, upP.B], r, scales: [loraScale(gateP), loraScale(upP)], fold: { A: downP.A, parts: fused.parts }, xqOut: fused.xq });
    mm.gemv(rec, xn, w, gateUp, false, { int8: true, xq, parts: [half, half] });
    await rec.submit();
    // The unfused SwiGLU reads gate and up as the GEMV stored them: [rows, half] each, back to back.
    const [gy, uy] = [gpu.tensor([rows, half], 'f32', 'g'), gpu.tensor([rows, half], 'f32', 'u_y')];
    const rec2 = gpu.recorder();
    rec2.copy(gateUp, gy, rows * half * 4);
    rec2.copy(gateUp, uy, rows * half * 4, rows * half * 4);
    lg.upSwiglu(rec2, gateP, upP, u, gy, uy, unfused.act, { p: downP, parts: unfused.parts, quantized: unfused.xq });
    await rec2.submit();

    // f64: act = silu(g)·v, g and v = x̂·Wᵀ + s·u·Bᵀ with x̂ the int8 groups' values.
    const xhat = dequantizeGroups((await gpu.read(xq)) as Uint32Array, rows, k);
    const wd = dequantizeRef(q);
    const [uh, bg, bu] = [await gpu.readF32(u), await gpu.readF32(gateP.B), await gpu.readF32(upP.B)];
    const want = new Float64Array(rows * half);
    let scale = 0;
    for (let m = 0; m < rows; m++)
      for (let c = 0; c < half; c++) {
        const dot = (row: number) => {
          let s = 0;
          for (let j = 0; j < k; j++) s += xhat[m * k + j] * wd[row * k + j];
          return s;
        };
        const lora = (B: Float32Array, a: number, sc: number) => {
          let s = 0;
          for (let j = 0; j < r; j++) s += uh[m * 2 * r + a * r + j] * B[c * r + j];
          return sc * s;
        };
        const g = dot(c) + lora(bg, 0, loraScale(gateP));
        const v = dot(half + c) + lora(bu, 1, loraScale(upP));
        want[m * half + c] = silu(g) * v;
        scale = Math.max(scale, Math.abs(want[m * half + c]));
      }
    const act = await gpu.readF32(fused.act);
    expectClose(act, want, { rtol: 1e-4, atol: 1e-5 * scale, what: 'act against f64' });
    expectClose(act, await gpu.readF32(unfused.act), { rtol: 1e-5, atol: 1e-6 * scale, what: 'act against the unfused pair' });
    const partsWant = await gpu.readF32(unfused.parts);
    const partsScale = partsWant.reduce((s, v) => Math.max(s, Math.abs(v)), 0);
    expectClose(await gpu.readF32(fused.parts), partsWant, { rtol: 1e-5, atol: 1e-5 * partsScale, what: "down_proj's partials" });
    // act's int8 groups: act differs by rounding only, so their scales agree to rounding and their
    // integers but for a value on a rounding edge, one step apart.
    const [gotQ, wantQ] = [groupsOf((await gpu.read(fused.xq)) as Uint32Array, rows, half), groupsOf((await gpu.read(unfused.xq)) as Uint32Array, rows, half)];
    expectClose(gotQ.s, wantQ.s, { rtol: 1e-5, atol: 0, what: "act's group scales" });
    expect(Math.max(...gotQ.q.map((v, i) => Math.abs(v - wantQ.q[i]))), "act's integers").toBeLessThanOrEqual(1);
    expect(gotQ.q.filter((v, i) => v !== wantQ.q[i]).length, 'integers one step apart').toBeLessThanOrEqual(Math.ceil(0.01 * rows * half));
    expectClose(dequantizeGroups((await gpu.read(fused.xq)) as Uint32Array, rows, half), await gpu.readF32(fused.act), { rtol: 0, atol: (0.51 * scale) / 127, what: 'act as int8 groups against act' });
    for (const t of [w.codes, w.scales, h, normW, xn, xq, u, gateUp, gy, uy, ...Object.values(fused), ...Object.values(unfused)]) t.release();
    for (const lp of [gateP, upP, downP]) for (const t of [lp.A, lp.B, lp.dA, lp.dB]) t.release();
  }, 300_000);

  it('refuses what it cannot take: one row, a width off its 64-column workgroups, act\'s groups in x\'s buffer', async () => {
    const gpu = await testGpu();
    if (!gpu.hasWgsl(DOT4_I8)) return;
    const mm = await MatmulQ4.create(gpu);
    const w = allocQ4(gpu, 256, 128, 'w');
    const odd = allocQ4(gpu, 192, 128, 'odd');
    expect(mm.takesSwiglu(1, w, 8)).toBe(false);
    expect(mm.takesSwiglu(4, odd, 8)).toBe(false);
    expect(mm.takesSwiglu(4, w, 8)).toBe(true);
    const x = gpu.tensor([4, 128], 'f32', 'x');
    const xq = gpu.tensor([int8GroupWords(4, 128)], 'u32', 'xq');
    const act = gpu.tensor([4, 128], 'f32', 'act');
    const any = gpu.tensor([4096], 'f32', 'any');
    const call = { u: any, B: [gpu.tensor([128, 8], 'f32', 'bg'), gpu.tensor([128, 8], 'f32', 'bu')] as const, r: 8, scales: [1, 1] as const, fold: { A: gpu.tensor([8, 128], 'f32', 'a'), parts: any }, xqOut: xq };
    expect(() => mm.gemvSwiglu(gpu.recorder(), x, xq, w, act, call)).toThrow(ShapeError);
    expect(() => mm.gemvSwiglu(gpu.recorder(), x, xq, odd, act, { ...call, xqOut: gpu.tensor([int8GroupWords(4, 128)], 'u32', 'xq2') })).toThrow(/takesSwiglu/);
  });
});
