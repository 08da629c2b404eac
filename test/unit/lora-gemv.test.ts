// The LoRA GEMV update for decode rows (shaders/lora_gemv.wgsl) against an f64 CPU
// reference of y + s·x·Aᵀ·Bᵀ, and against src/ops/lora.ts's two GEMMs on the same inputs.
import { describe, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, randUniform } from '../helpers/reference';
import { createLoraParams, Lora, loraScale } from '../../src/ops/lora';
import { LoraGemv } from '../../src/ops/loraGemv';

describe('lora gemv', () => {
  it.each([
    { rows: 1, inF: 64, out: 300, r: 16 },
    { rows: 3, inF: 100, out: 257, r: 1 },
    { rows: 8, inF: 600, out: 513, r: 64 },
  ])('y += s·x·Aᵀ·Bᵀ: $rows rows, in $inF, out $out, r $r', async ({ rows, inF, out, r }) => {
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
    lora.forward(rec, p, { x: tx, y: ty2, u });
    await rec.submit();
    const s = loraScale(p);
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
    const got = await gpu.readF32(ty);
    // f32 sums of in·r products: errors scale with the largest outputs, not with each one.
    const atol = 1e-5 * want.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
    expectClose(got, want, { rtol: 1e-5, atol, what: 'lora gemv vs f64' });
    expectClose(got, await gpu.readF32(ty2), { rtol: 1e-5, atol, what: 'lora gemv vs the two GEMMs' });
    const uWant = await gpu.readF32(u);
    expectClose(await gpu.readF32(uGemv), uWant, { rtol: 1e-5, atol: 1e-5 * uWant.reduce((m, v) => Math.max(m, Math.abs(v)), 0), what: 'u = x·Aᵀ' });
    for (const t of [tx, ty, ty2, u, uGemv, p.A, p.B, p.dA, p.dB]) t.release();
  });
});
