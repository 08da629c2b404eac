// Attention on f16 tensor cores (src/ops/attentionF16.ts) against the f64 attention and the f32
// kernels. Needs shader-f16 and an f16 -> f32 subgroup-matrix configuration: software Vulkan has
// none, so here the device tests skip and say why, and the refusal is what is tested; on the GPU
// machine tools/device/attnF16.ts runs the same checks and the model runs checkAttentionF16 before
// use (makeAttentionTensorCores).
import { describe, expect, it } from 'vitest';
import { createNodeGpu } from '../../src/node/gpu';
import { Attention } from '../../src/ops/attention';
import { AttentionF16, attentionF16Unsupported, checkAttentionF16 } from '../../src/ops/attentionF16';
import { makeAttentionTensorCores } from '../../src/model/products';
import { MissingFeatureError } from '../../src/gpu';

const gpu = await createNodeGpu({ driver: process.env.VLRL_VK ?? 'lavapipe', dawnFlags: ['enable-dawn-features=allow_unsafe_apis'] });
const unsupported = attentionF16Unsupported(gpu, 128);
if (unsupported) console.warn(`attention-f16: device tests skipped on ${gpu.adapter.name}: ${unsupported}`);

describe.skipIf(unsupported !== null)('attention on f16 tensor cores', () => {
  it('matches the f64 attention within its rounding bound (D 128 and 64, grouped and not)', async () => {
    for (const [hq, hkv, headDim] of [[16, 8, 128], [4, 4, 64]]) {
      const op = await AttentionF16.create(gpu, { hq, hkv, headDim });
      expect(await checkAttentionF16(gpu, op)).toBeLessThanOrEqual(1);
      op.release();
    }
  }, 300_000);

  it('forward and backward through Attention.useTensorCores match the f32 kernels on a shared prefix', async () => {
    const [hq, hkv, D] = [4, 2, 128];
    const cu = [0, 40, 65, 90];
    const T = 90;
    const rand = (n: number, seed: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(seed * 7919 + i * 12.9898) * 1.5);
    const up = (n: number, cols: number, seed: number, label: string) => gpu.upload(rand(n * cols, seed), [n, cols], 'f32', label);
    const [q, k, v, dout] = [up(T, hq * D, 1, 'q'), up(T, hkv * D, 2, 'k'), up(T, hkv * D, 3, 'v'), up(T, hq * D, 4, 'dout')];
    const cuT = gpu.upload(cu, [cu.length], 'u32', 'cu');
    const out = () => ({ o: gpu.tensor([T, hq * D], 'f32', 'o'), lse: gpu.tensor([T, hq], 'f32', 'lse'), dq: gpu.tensor([T, hq * D], 'f32', 'dq'), dk: gpu.tensor([T, hkv * D], 'f32', 'dk'), dv: gpu.tensor([T, hkv * D], 'f32', 'dv'), stats: gpu.tensor([T, 2 * hq], 'f32', 'stats') });
    const run = async (a: Attention) => {
      const r = out();
      const rec = gpu.recorder('test');
      const args = { q, k, v, cuSeqlens: cuT, causal: true, scale: 1 / Math.sqrt(D), sharedPrefix: 40 };
      a.forward(rec, { ...args, o: r.o, lse: r.lse });
      a.backward(rec, { ...args, o: r.o, lse: r.lse, dout, rowStats: r.stats, dq: r.dq, dk: r.dk, dv: r.dv });
      await rec.submit();
      return Promise.all([r.o, r.dq, r.dk, r.dv].map((t) => gpu.readF32(t)));
    };
    const f32 = await Attention.create(gpu, { hq, hkv, headDim: D });
    const tc = await Attention.create(gpu, { hq, hkv, headDim: D });
    const op = await AttentionF16.create(gpu, { hq, hkv, headDim: D });
    tc.useTensorCores(op);
    const [ref, got] = [await run(f32), await run(tc)];
    for (const [i, name] of ['o', 'dq', 'dk', 'dv'].entries()) {
      const max = ref[i].reduce((m, x) => Math.max(m, Math.abs(x)), 0);
      const err = ref[i].reduce((m, x, j) => Math.max(m, Math.abs(x - got[i][j])), 0);
      expect(err / max, name).toBeLessThan(1e-2);
    }
    op.release();
  }, 300_000);
});

describe.skipIf(unsupported === null)('attention where f16 tensor cores are not offered', () => {
  it('AttentionF16.create refuses with the reason; the model keeps the f32 kernels (makeAttentionTensorCores gives null)', async () => {
    await expect(AttentionF16.create(gpu, { hq: 4, hkv: 2, headDim: 128 })).rejects.toThrow(MissingFeatureError);
    await expect(AttentionF16.create(gpu, { hq: 4, hkv: 2, headDim: 128 })).rejects.toThrow(unsupported!);
    expect(await makeAttentionTensorCores(gpu, { hq: 4, hkv: 2, headDim: 128 })).toBeNull();
    const a = await Attention.create(gpu, { hq: 4, hkv: 2, headDim: 128 });
    expect(a.onTensorCores).toBe(false);
  });
});
