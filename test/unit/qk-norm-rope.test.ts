// The fused q/k RMSNorm + RoPE (shaders/qk_norm_rope.wgsl) against an f64 CPU reference built on
// the rope table the GPU computed, and against norms.rmsnorm then rope.apply on the same inputs.
import { describe, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, randUniform } from '../helpers/reference';
import { Norms } from '../../src/ops/norms';
import { QkNormRope } from '../../src/ops/qkNormRope';
import { Rope } from '../../src/ops/rope';
import { mropeLayout } from '../../src/model/ropeTables';

describe('qk norm + rope', () => {
  it.each([
    { T: 1, hq: 4, hkv: 2, D: 32, section: [6, 5, 5] },
    { T: 5, hq: 2, hkv: 2, D: 16, section: [4, 2, 2] },
    { T: 3, hq: 6, hkv: 3, D: 256, section: [48, 40, 40] },
  ])('T=$T, Hq $hq, Hkv $hkv, D $D', async ({ T, hq, hkv, D, section }) => {
    const gpu = await testGpu();
    const half = D / 2;
    const rope = await Rope.create(gpu, mropeLayout(5e6, D, section));
    const [fused, norms] = await Promise.all([QkNormRope.create(gpu), Norms.create(gpu)]);
    const eps = 1e-6;
    const qRaw = randUniform(T * hq * D, 1 + T, -3, 3);
    const kRaw = randUniform(T * hkv * D, 2 + T, -3, 3);
    const qw = randUniform(D, 3, 0.5, 1.5);
    const kw = randUniform(D, 4, 0.5, 1.5);
    const pos = Int32Array.from({ length: 3 * T }, (_, i) => 7 + 3 * (i % T) + Math.floor(i / T));
    const t = {
      qRaw: gpu.upload(qRaw, [T, hq * D], 'f32', 'q_raw'),
      kRaw: gpu.upload(kRaw, [T, hkv * D], 'f32', 'k_raw'),
      qw: gpu.upload(qw, [D], 'f32', 'q_w'),
      kw: gpu.upload(kw, [D], 'f32', 'k_w'),
      pos: gpu.upload(pos, [3, T], 'i32', 'pos'),
      cs: gpu.tensor([T, half, 2], 'f32', 'cs'),
      q: gpu.tensor([T, hq * D], 'f32', 'q'),
      k: gpu.tensor([T, hkv * D], 'f32', 'k'),
      q2: gpu.tensor([T, hq * D], 'f32', 'q2'),
      k2: gpu.tensor([T, hkv * D], 'f32', 'k2'),
    };
    const rec = gpu.recorder();
    rope.table(rec, t.pos, t.cs);
    fused.apply(rec, { qRaw: t.qRaw, kRaw: t.kRaw, qWeight: t.qw, kWeight: t.kw, cs: t.cs, q: t.q, k: t.k, hq, hkv, eps });
    norms.rmsnorm(rec, t.qRaw.reshape([T * hq, D]), t.qw, t.q2.reshape([T * hq, D]), eps);
    norms.rmsnorm(rec, t.kRaw.reshape([T * hkv, D]), t.kw, t.k2.reshape([T * hkv, D]), eps);
    rope.apply(rec, t.cs, t.q2, hq);
    rope.apply(rec, t.cs, t.k2, hkv);
    await rec.submit();
    const cs = await gpu.readF32(t.cs);
    const ref = (x: Float32Array, w: Float32Array, heads: number) => {
      const out = new Float64Array(x.length);
      for (let r = 0; r < T * heads; r++) {
        const row = Array.from(x.subarray(r * D, (r + 1) * D));
        const rstd = 1 / Math.sqrt(row.reduce((a, v) => a + v * v, 0) / D + eps);
        const n = row.map((v, j) => v * rstd * w[j]);
        const tok = Math.floor(r / heads);
        for (let j = 0; j < half; j++) {
          const [c, s] = [cs[(tok * half + j) * 2], cs[(tok * half + j) * 2 + 1]];
          out[r * D + j] = n[j] * c - n[j + half] * s;
          out[r * D + j + half] = n[j + half] * c + n[j] * s;
        }
      }
      return out;
    };
    const [q, k] = [await gpu.readF32(t.q), await gpu.readF32(t.k)];
    expectClose(q, ref(qRaw, qw, hq), { rtol: 1e-5, atol: 1e-5, what: 'q vs f64' });
    expectClose(k, ref(kRaw, kw, hkv), { rtol: 1e-5, atol: 1e-5, what: 'k vs f64' });
    expectClose(q, await gpu.readF32(t.q2), { rtol: 1e-6, atol: 1e-6, what: 'q vs rmsnorm + rope' });
    expectClose(k, await gpu.readF32(t.k2), { rtol: 1e-6, atol: 1e-6, what: 'k vs rmsnorm + rope' });
    for (const x of Object.values(t)) x.release();
    rope.release();
  });
});
