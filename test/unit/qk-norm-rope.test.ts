// The fused q/k RMSNorm + RoPE (shaders/qk_norm_rope.wgsl) against an f64 CPU reference built on
// the rope table the GPU computed, and against norms.rmsnorm then rope.apply on the same inputs;
// the variant writing k and v into the KV cache against apply + KvCache.append, and with the q/k/v
// LoRA updates inside against LoraGemv.up first (scalar and vec4 B, one and two pairs a thread).
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, randUniform } from '../helpers/reference';
import { KvCache } from '../../src/ops/kvCache';
import { createLoraParams } from '../../src/ops/loraParams';
import { LoraGemv } from '../../src/ops/loraGemv';
import { Norms } from '../../src/ops/norms';
import { QkNormRope } from '../../src/ops/qkNormRope';
import { Rope } from '../../src/ops/rope';
import { mropeLayout } from '../../src/model/ropeTables';
import type { Tensor } from '../../src/gpu';

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

  it('writes k and v into the cache as apply + KvCache.append (two steps: 3 slots x 2 rows, then slots 1-2 x 1)', async () => {
    const gpu = await testGpu();
    const [hq, hkv, D, eps] = [3, 2, 16, 1e-6];
    const rope = await Rope.create(gpu, mropeLayout(1e4, D, [4, 2, 2]));
    const op = await QkNormRope.create(gpu);
    const cfg = { layers: 2, slots: 3, capacity: 5, hkv, headDim: D };
    const [viaAppend, direct] = await Promise.all([KvCache.create(gpu, cfg), KvCache.create(gpu, cfg)]);
    const qw = gpu.upload(randUniform(D, 5, 0.5, 1.5), [D], 'f32', 'q_w');
    const kw = gpu.upload(randUniform(D, 6, 0.5, 1.5), [D], 'f32', 'k_w');
    const rec = gpu.recorder();
    for (const c of [viaAppend, direct]) for (const t of [...c.k, ...c.v]) rec.clear(t);
    const temps = [qw, kw];
    for (const [step, { slot0, count, n }] of [{ slot0: 0, count: 3, n: 2 }, { slot0: 1, count: 2, n: 1 }].entries()) {
      const T = count * n;
      const up = (data: Float32Array, shape: number[], label: string) => {
        const t = gpu.upload(data, shape, 'f32', label);
        temps.push(t);
        return t;
      };
      const qRaw = up(randUniform(T * hq * D, 10 + step, -3, 3), [T, hq * D], 'q_raw');
      const kRaw = up(randUniform(T * hkv * D, 20 + step, -3, 3), [T, hkv * D], 'k_raw');
      const v = up(randUniform(T * hkv * D, 30 + step, -3, 3), [T, hkv * D], 'v');
      const [q, q2, k] = [up(new Float32Array(T * hq * D), [T, hq * D], 'q'), up(new Float32Array(T * hq * D), [T, hq * D], 'q2'), up(new Float32Array(T * hkv * D), [T, hkv * D], 'k')];
      const pos = gpu.upload(Int32Array.from({ length: 3 * T }, (_, i) => 4 * step + (i % T)), [3, T], 'i32', 'pos');
      const cs = up(new Float32Array(T * D), [T, D / 2, 2], 'cs');
      temps.push(pos);
      rope.table(rec, pos, cs);
      const args = { qRaw, kRaw, qWeight: qw, kWeight: kw, cs, hq, hkv, eps };
      op.apply(rec, { ...args, q, k });
      viaAppend.append(rec, 1, k, v, slot0, count);
      op.applyToCache(rec, { ...args, q: q2, v, cache: direct, layer: 1, slot0, count });
      for (const c of [viaAppend, direct]) c.advance(rec, slot0, count, n);
      await rec.submit();
      expect([...(await gpu.readF32(q2))]).toEqual([...(await gpu.readF32(q))]);
    }
    for (const l of [0, 1]) {
      expect([...(await gpu.readF32(direct.k[l]))], `k of layer ${l}`).toEqual([...(await gpu.readF32(viaAppend.k[l]))]);
      expect([...(await gpu.readF32(direct.v[l]))], `v of layer ${l}`).toEqual([...(await gpu.readF32(viaAppend.v[l]))]);
    }
    expect(direct.past).toEqual([2, 3, 3]);
    for (const t of temps) t.release();
    viaAppend.release();
    direct.release();
    rope.release();
  });

  it.each([
    { hq: 3, hkv: 2, D: 16, r: 3, T: 2, section: [4, 2, 2] },
    { hq: 2, hkv: 1, D: 256, r: 8, T: 3, section: [48, 40, 40] },
  ])('with a transient adapter: the q/k/v LoRA updates inside the dispatch = LoraGemv.up first (Hq $hq, Hkv $hkv, D $D, r $r, T $T)', async ({ hq, hkv, D, r, T, section }) => {
    const gpu = await testGpu();
    const eps = 1e-6;
    const rope = await Rope.create(gpu, mropeLayout(1e4, D, section));
    const [op, gemv] = await Promise.all([QkNormRope.create(gpu), LoraGemv.create(gpu)]);
    const cfg = { layers: 1, slots: T, capacity: 3, hkv, headDim: D };
    const [fusedCache, refCache] = await Promise.all([KvCache.create(gpu, cfg), KvCache.create(gpu, cfg)]);
    const temps: Tensor[] = [];
    const up = (data: Float32Array, shape: number[], label: string) => {
      const t = gpu.upload(data, shape, 'f32', label);
      temps.push(t);
      return t;
    };
    const widths = { q: hq * D, k: hkv * D, v: hkv * D };
    const ps = (['q', 'k', 'v'] as const).map((name, g) => {
      const p = createLoraParams(gpu, { name, in: 8, out: widths[name], r, alpha: 5 + g });
      gpu.write(p.B, randUniform(widths[name] * r, 40 + g));
      temps.push(p.A, p.B, p.dA, p.dB);
      return p;
    });
    const u = up(randUniform(T * 3 * r, 44), [T, 3 * r], 'u');
    const raw = ps.map((p, g) => randUniform(T * p.out, 50 + g, -3, 3));
    const [qRaw, kRaw, v] = raw.map((x, g) => up(x, [T, ps[g].out], `raw${g}`));
    const [qRaw2, kRaw2, v2] = raw.map((x, g) => up(x, [T, ps[g].out], `raw${g}'`));
    const [q, q2] = [up(new Float32Array(T * hq * D), [T, hq * D], 'q'), up(new Float32Array(T * hq * D), [T, hq * D], 'q2')];
    const cs = up(new Float32Array(T * D), [T, D / 2, 2], 'cs');
    const pos = gpu.upload(Int32Array.from({ length: 3 * T }, (_, i) => 3 + (i % T)), [3, T], 'i32', 'pos');
    temps.push(pos, up(randUniform(D, 61, 0.5, 1.5), [D], 'q_w'), up(randUniform(D, 62, 0.5, 1.5), [D], 'k_w'));
    const [qw, kw] = temps.slice(-2);
    const rec = gpu.recorder();
    for (const c of [fusedCache, refCache]) for (const t of [...c.k, ...c.v]) rec.clear(t);
    rope.table(rec, pos, cs);
    const args = { qWeight: qw, kWeight: kw, cs, hq, hkv, eps, layer: 0, slot0: 0, count: T };
    op.applyToCache(rec, { ...args, qRaw, kRaw, v, q, cache: fusedCache, lora: { q: ps[0], k: ps[1], v: ps[2], u } });
    gemv.up(rec, ps, u, [qRaw2, kRaw2, v2]);
    op.applyToCache(rec, { ...args, qRaw: qRaw2, kRaw: kRaw2, v: v2, q: q2, cache: refCache });
    await rec.submit();
    expectClose(await gpu.readF32(q), await gpu.readF32(q2), { rtol: 1e-5, atol: 1e-5, what: 'q' });
    expectClose(await gpu.readF32(fusedCache.k[0]), await gpu.readF32(refCache.k[0]), { rtol: 1e-5, atol: 1e-5, what: 'k cache' });
    expectClose(await gpu.readF32(fusedCache.v[0]), await gpu.readF32(refCache.v[0]), { rtol: 1e-5, atol: 1e-5, what: 'v cache' });
    for (const t of temps) t.release();
    fusedCache.release();
    refCache.release();
    rope.release();
  });
});
