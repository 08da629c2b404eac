// The KV cache stored in f16 (KvCacheConfig.dtype 'f16', shaders/kv_elem.wgsl): every writer
// (kv_append, kv_copy, qk_norm_rope into the cache, with and without the LoRA updates) stores
// round-to-nearest-even of its f32 value, clamped to ±65504; every reader (the cached prefill
// forward, decode, split decode over a shared prefix) equals an f64 reference over the f16-rounded
// K and V within the f32 cache's bound, and moves from the f32 cache's output by no more than f16
// rounding of K and V allows.
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, randUniform } from '../helpers/reference';
import { f16BitsToF32, f32ToF16Bits } from '../../src/model/dtype';
import { Attention } from '../../src/ops/attention';
import { KvCache } from '../../src/ops/kvCache';
import { createLoraParams } from '../../src/ops/loraParams';
import { QkNormRope } from '../../src/ops/qkNormRope';
import { Rope } from '../../src/ops/rope';
import { mropeLayout } from '../../src/model/ropeTables';
import type { Gpu, Tensor } from '../../src/gpu';

const F16_MAX = 65504;
/** f16's unit roundoff: rounding to nearest moves a normal value by at most this fraction of it. */
const F16_EPS = 2 ** -11;

/** The f16 bits a cache stores for x: clamped to f16's finite range, then rounded to nearest even. */
const f16Bits = (x: number) => f32ToF16Bits(Math.min(F16_MAX, Math.max(-F16_MAX, x)));
const roundF16 = (x: number) => f16BitsToF32(f16Bits(x));

async function bits(gpu: Gpu, t: Tensor): Promise<Uint16Array> {
  expect(t.dtype).toBe('f16');
  return (await gpu.read(t)) as Uint16Array;
}

/** f64 causal attention of one sequence's rows: q [T, Hq·D] over k, v [T, Hkv·D]; o [T, Hq·D]. */
function cpuCausal(q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>, hq: number, hkv: number, D: number, scale: number): Float64Array {
  const T = k.length / (hkv * D);
  const G = hq / hkv;
  const o = new Float64Array(T * hq * D);
  for (let t = 0; t < T; t++) {
    for (let h = 0; h < hq; h++) {
      const kh = Math.floor(h / G);
      const s: number[] = [];
      for (let j = 0; j <= t; j++) {
        let dot = 0;
        for (let d = 0; d < D; d++) dot += q[(t * hq + h) * D + d] * k[(j * hkv + kh) * D + d];
        s.push(dot * scale);
      }
      const m = Math.max(...s);
      const l = s.reduce((a, x) => a + Math.exp(x - m), 0);
      s.forEach((x, j) => {
        const p = Math.exp(x - m) / l;
        for (let d = 0; d < D; d++) o[(t * hq + h) * D + d] += p * v[(j * hkv + kh) * D + d];
      });
    }
  }
  return o;
}

describe('f16 KV cache', () => {
  it('kv_append and kv_copy store each value rounded to nearest even f16, ±65504 beyond it', async () => {
    const gpu = await testGpu();
    const [hkv, D] = [2, 8];
    const rowLen = hkv * D;
    const cache = await KvCache.create(gpu, { layers: 1, slots: 3, capacity: 6, hkv, headDim: D, dtype: 'f16' });
    expect(cache.k[0].dtype).toBe('f16');
    expect(cache.k[0].byteSize).toBe(3 * 6 * rowLen * 2);
    // Two slots x 4 rows: values of every magnitude, halfway cases, subnormals and overflow.
    const k = randUniform(8 * rowLen, 1, -3, 3);
    const v = randUniform(8 * rowLen, 2, -3, 3);
    const special = [1e5, -1e5, 65519, 65520, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 3e-6, -7e-8, 1e-9, 0.1, 1 / 3, 1000.7];
    special.forEach((x, i) => {
      k[i] = x;
      v[3 * i + 1] = -x;
    });
    for (let i = 20; i < 60; i++) k[i] *= 2 ** (i - 40); // 2^-20 .. 2^19
    const tk = gpu.upload(k, [8, rowLen], 'f32', 'k_new');
    const tv = gpu.upload(v, [8, rowLen], 'f32', 'v_new');
    const rec = gpu.recorder();
    cache.append(rec, 0, tk, tv, 0, 2);
    cache.advance(rec, 0, 2, 4);
    cache.fork(rec, 1, [2], 3); // slot 1's first 3 positions into slot 2
    await rec.submit();
    const [kc, vc] = [await bits(gpu, cache.k[0]), await bits(gpu, cache.v[0])];
    for (const [name, got, src] of [['k', kc, k], ['v', vc, v]] as const) {
      for (let s = 0; s < 2; s++) {
        const want = Array.from(src.subarray(s * 4 * rowLen, (s + 1) * 4 * rowLen), f16Bits);
        expect(Array.from(got.subarray(s * 6 * rowLen, s * 6 * rowLen + 4 * rowLen)), `${name} of slot ${s}`).toEqual(want);
      }
      expect(Array.from(got.subarray(12 * rowLen, 15 * rowLen)), `${name} forked into slot 2`).toEqual(Array.from(got.subarray(6 * rowLen, 9 * rowLen)));
    }
    expect(f16BitsToF32(kc[0])).toBe(F16_MAX); // 1e5: clamped, not inf
    expect(f16BitsToF32(kc[3])).toBe(F16_MAX); // 65520 rounds to inf unclamped
    expect(f16BitsToF32(vc[1])).toBe(-F16_MAX);
    tk.release();
    tv.release();
    cache.release();
  });

  it.each([
    { D: 16, lora: 0 },
    { D: 16, lora: 4 },
    { D: 10, lora: 3 },
  ])('qk_norm_rope writes K and V into an f16 cache as the f32 cache rounded to f16 (D $D, LoRA rank $lora)', async ({ D, lora }) => {
    const gpu = await testGpu();
    const [hq, hkv, T, eps] = [4, 2, 3, 1e-6];
    const rope = await Rope.create(gpu, mropeLayout(1e4, D, D === 16 ? [4, 2, 2] : [3, 1, 1]));
    const op = await QkNormRope.create(gpu);
    const cfg = { layers: 1, slots: T, capacity: 2, hkv, headDim: D };
    const [c32, c16] = await Promise.all([KvCache.create(gpu, cfg), KvCache.create(gpu, { ...cfg, dtype: 'f16' })]);
    const temps: Tensor[] = [];
    const up = (data: Float32Array | Int32Array, shape: number[], label: string, dtype: 'f32' | 'i32' = 'f32') => {
      const t = gpu.upload(data, shape, dtype, label);
      temps.push(t);
      return t;
    };
    // V up to ±9e4: beyond f16's range, where the cache must clamp.
    const v = up(randUniform(T * hkv * D, 3, -9e4, 9e4), [T, hkv * D], 'v');
    const args = {
      qRaw: up(randUniform(T * hq * D, 1, -3, 3), [T, hq * D], 'q_raw'),
      kRaw: up(randUniform(T * hkv * D, 2, -3, 3), [T, hkv * D], 'k_raw'),
      qWeight: up(randUniform(D, 4, 0.5, 1.5), [D], 'q_w'),
      kWeight: up(randUniform(D, 5, 0.5, 1.5), [D], 'k_w'),
      cs: up(new Float32Array(T * D), [T, D / 2, 2], 'cs'),
      q: up(new Float32Array(T * hq * D), [T, hq * D], 'q'),
      v,
      hq,
      hkv,
      eps,
      layer: 0,
      slot0: 0,
      count: T,
    };
    const widths = { q: hq * D, k: hkv * D, v: hkv * D };
    const adapters = lora
      ? (['q', 'k', 'v'] as const).map((name, g) => {
          const p = createLoraParams(gpu, { name, in: 8, out: widths[name], r: lora, alpha: 3 + g });
          gpu.write(p.B, randUniform(widths[name] * lora, 10 + g));
          temps.push(p.A, p.B, p.dA, p.dB);
          return p;
        })
      : null;
    const withLora = adapters ? { lora: { q: adapters[0], k: adapters[1], v: adapters[2], u: up(randUniform(T * 3 * lora, 13), [T, 3 * lora], 'u') } } : {};
    const rec = gpu.recorder();
    for (const c of [c32, c16]) for (const t of [...c.k, ...c.v]) rec.clear(t); // the rows no slot writes
    rope.table(rec, up(Int32Array.from({ length: 3 * T }, (_, i) => 2 + (i % T)), [3, T], 'pos', 'i32'), args.cs);
    op.applyToCache(rec, { ...args, ...withLora, cache: c32 });
    op.applyToCache(rec, { ...args, ...withLora, cache: c16 });
    await rec.submit();
    for (const name of ['k', 'v'] as const) {
      const want = Array.from(await gpu.readF32(c32[name][0]), f16Bits);
      expect(Array.from(await bits(gpu, c16[name][0])), `${name} cache`).toEqual(want);
    }
    expect(Array.from(await bits(gpu, c16.v[0])).some((b) => (b & 0x7fff) === 0x7bff)).toBe(true); // some V clamped to ±65504
    for (const t of temps) t.release();
    c32.release();
    c16.release();
    rope.release();
  });

  it.each([
    { hq: 4, hkv: 2, D: 16 },
    { hq: 3, hkv: 1, D: 6 },
  ])('prefill, shared prefix and (split) decode over an f16 cache: the f64 reference on f16 K, V; near the f32 cache (Hq $hq, Hkv $hkv, D $D)', async ({ hq, hkv, D }) => {
    const gpu = await testGpu();
    const scale = 1 / Math.sqrt(D);
    const [slots, P] = [4, 21];
    const att = await Attention.create(gpu, { hq, hkv, headDim: D });
    const cfg = { layers: 1, slots, capacity: P + 6, hkv, headDim: D, prefix: P };
    const caches = { f32: await KvCache.create(gpu, cfg), f16: await KvCache.create(gpu, { ...cfg, dtype: 'f16' as const }) };
    const ws = gpu.tensor(att.splitWorkspaceShape(slots, 8), 'f32', 'split');
    const all = Array.from({ length: slots }, (_, s) => s);
    // Per slot: the q, k, v rows received; per cache and slot: the outputs.
    const hist = all.map(() => ({ q: [] as number[], k: [] as number[], v: [] as number[] }));
    const got = { f32: all.map(() => [] as number[]), f16: all.map(() => [] as number[]) };
    let seed = 100;
    const step = async (slot0: number, count: number, n: number, chunks?: number) => {
      const rows = count * n;
      // K, V of a few units: f16 keeps about 3 decimal digits of them.
      const [q, k, v] = [randUniform(rows * hq * D, seed++, -2, 2), randUniform(rows * hkv * D, seed++, -2, 2), randUniform(rows * hkv * D, seed++, -2, 2)];
      for (let b = 0; b < count; b++) {
        const h = hist[slot0 + b];
        h.q.push(...q.subarray(b * n * hq * D, (b + 1) * n * hq * D));
        h.k.push(...k.subarray(b * n * hkv * D, (b + 1) * n * hkv * D));
        h.v.push(...v.subarray(b * n * hkv * D, (b + 1) * n * hkv * D));
      }
      const tq = gpu.upload(q, [rows, hq * D], 'f32', 'q');
      const tk = gpu.upload(k, [rows, hkv * D], 'f32', 'k');
      const tv = gpu.upload(v, [rows, hkv * D], 'f32', 'v');
      const outs = { f32: gpu.tensor([rows, hq * D], 'f32', 'o32'), f16: gpu.tensor([rows, hq * D], 'f32', 'o16') };
      const rec = gpu.recorder();
      for (const dt of ['f32', 'f16'] as const) {
        caches[dt].append(rec, 0, tk, tv, slot0, count);
        att.forwardCached(rec, tq, caches[dt], 0, outs[dt], { slot0, count, scale, split: chunks ? { workspace: ws, chunks } : undefined });
        caches[dt].advance(rec, slot0, count, n);
      }
      await rec.submit();
      for (const dt of ['f32', 'f16'] as const) {
        const o = await gpu.readF32(outs[dt]);
        for (let b = 0; b < count; b++) got[dt][slot0 + b].push(...o.subarray(b * n * hq * D, (b + 1) * n * hq * D));
        outs[dt].release();
      }
      for (const t of [tq, tk, tv]) t.release();
    };
    await step(0, 1, P); // prefill: the tiled cached forward
    const rec = gpu.recorder();
    for (const c of Object.values(caches)) c.share(rec, 0, all, P);
    await rec.submit();
    for (const s of all.slice(1)) {
      hist[s] = { q: hist[0].q.slice(), k: hist[0].k.slice(), v: hist[0].v.slice() };
      for (const dt of ['f32', 'f16'] as const) got[dt][s] = got[dt][0].slice();
    }
    for (const chunks of [undefined, 1, 3, 8]) await step(0, slots, 1, chunks); // decode, unsplit and split
    await step(1, 2, 2, 2); // two new rows of two sequences

    let moved = 0;
    for (let s = 0; s < slots; s++) {
      const h = hist[s];
      const exact = cpuCausal(h.q, h.k, h.v, hq, hkv, D, scale);
      const rounded = cpuCausal(h.q, h.k.map(roundF16), h.v.map(roundF16), hq, hkv, D, scale);
      expectClose(got.f32[s], exact, { rtol: 1e-4, atol: 2e-6, what: `f32 cache, slot ${s}` });
      expectClose(got.f16[s], rounded, { rtol: 1e-4, atol: 2e-6, what: `f16 cache vs f64 on f16 K, V, slot ${s}` });
      // First order: V moves by ε|v| at most, each score by scale·Σ|q||k|ε ≤ scale·D·2·2·ε, and a
      // score error δ moves a softmax-weighted mean of V by at most 2δ·max|v|.
      const bound = F16_EPS * 2 * (1 + 2 * scale * D * 4);
      const r = expectClose(got.f16[s], got.f32[s], { rtol: 0, atol: bound, what: `f16 vs f32 cache, slot ${s}` });
      moved = Math.max(moved, r.maxAbs);
    }
    // The f16 cache does round: its outputs differ from the f32 cache's.
    expect(moved).toBeGreaterThan(1e-5);
    ws.release();
    for (const c of Object.values(caches)) c.release();
  });

  it('refuses an unknown dtype by name', async () => {
    const gpu = await testGpu();
    await expect(KvCache.create(gpu, { layers: 1, slots: 1, capacity: 2, hkv: 1, headDim: 4, dtype: 'bf16' as 'f16' })).rejects.toThrow(/dtype must be f32 or f16, got bf16/);
  });
});
