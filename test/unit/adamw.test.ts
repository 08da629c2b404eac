import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, randNormal } from '../helpers/reference';
import { AdamW, type AdamWConfig, type AdamWParam } from '../../src/ops/adamw';
import { createLoraParamSet } from '../../src/ops/loraParams';
import { ShapeError, type Gpu } from '../../src/gpu';

/** torch.nn.utils.clip_grad_norm_ then torch.optim.AdamW (single-tensor path), in f64. */
class CpuAdamW {
  m: Float64Array[];
  v: Float64Array[];
  constructor(
    readonly params: Float64Array[],
    readonly cfg: Required<AdamWConfig>,
  ) {
    this.m = params.map((p) => new Float64Array(p.length));
    this.v = params.map((p) => new Float64Array(p.length));
  }

  step(grads: Float32Array[], lr: number, t: number): number {
    let sq = 0;
    for (const g of grads) for (const x of g) sq += x * x;
    const norm = Math.sqrt(sq);
    const coef = this.cfg.maxGradNorm === null ? 1 : Math.min(1, this.cfg.maxGradNorm / (norm + 1e-6));
    const { beta1, beta2, eps, weightDecay } = this.cfg;
    const bc1 = 1 - beta1 ** t;
    const bc2 = 1 - beta2 ** t;
    this.params.forEach((p, k) => {
      const m = this.m[k];
      const v = this.v[k];
      for (let i = 0; i < p.length; i++) {
        const g = grads[k][i] * coef;
        p[i] *= 1 - lr * weightDecay;
        m[i] = beta1 * m[i] + (1 - beta1) * g;
        v[i] = beta2 * v[i] + (1 - beta2) * g * g;
        p[i] -= ((lr / bc1) * m[i]) / (Math.sqrt(v[i]) / Math.sqrt(bc2) + eps);
      }
    });
    return norm;
  }
}

const SIZES = [1, 1000, 4097, 257];

async function run(cfg: Required<AdamWConfig>, gradScale: number, expectClipped: boolean) {
  const gpu = await testGpu();
  const init = SIZES.map((n, k) => randNormal(n, 100 + k, 0.5));
  const params = SIZES.map((n, k) => ({
    param: gpu.upload(init[k], [n], 'f32', `p${k}`),
    grad: gpu.tensor([n], 'f32', `g${k}`),
  }));
  const opt = await AdamW.create(gpu, params, cfg);
  const cpu = new CpuAdamW(init.map((p) => Float64Array.from(p)), cfg);
  const created = gpu.pool.stats.created;
  for (let t = 1; t <= 5; t++) {
    const lr = 1e-2 * (1 - 0.1 * t); // a schedule: lr changes every step
    const grads = SIZES.map((n, k) => randNormal(n, 1000 * t + k, gradScale));
    const rec = gpu.recorder();
    opt.zeroGrad(rec);
    await rec.submit();
    params.forEach((p, k) => gpu.write(p.grad, grads[k]));
    const rec2 = gpu.recorder();
    opt.step(rec2, { lr, step: t });
    await rec2.submit();
    const want = cpu.step(grads, lr, t);
    const [norm, coef] = await gpu.readF32(opt.gradNorm);
    expectClose([norm], [want], { rtol: 1e-5, what: `grad norm at step ${t}` });
    if (expectClipped) expect(coef).toBeLessThan(1);
    else expect(coef).toBe(1);
  }
  expect(gpu.pool.stats.created, 'steps create no buffers').toBe(created);
  for (let k = 0; k < SIZES.length; k++) {
    expectClose(await gpu.readF32(params[k].param), cpu.params[k], { rtol: 1e-5, atol: 1e-6, what: `param ${k}` });
    expectClose(await gpu.readF32(opt.moments[k].expAvg), cpu.m[k], { rtol: 1e-5, atol: 1e-7, what: `exp_avg ${k}` });
    expectClose(await gpu.readF32(opt.moments[k].expAvgSq), cpu.v[k], { rtol: 1e-5, atol: 1e-9, what: `exp_avg_sq ${k}` });
  }
}

describe('adamw', () => {
  const base = { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1 };
  it('matches torch over 5 steps with clipping active', async () => {
    await run({ ...base, maxGradNorm: 1 }, 1, true); // norm ≈ sqrt(5355) ≫ 1
  });
  it('matches torch over 5 steps with clipping inactive', async () => {
    await run({ ...base, maxGradNorm: 1 }, 1e-3, false); // norm ≈ 0.07 < 1
  });
  it('matches torch without clipping, other betas and eps, no weight decay', async () => {
    await run({ beta1: 0.8, beta2: 0.95, eps: 1e-3, weightDecay: 0, maxGradNorm: null }, 2, false);
  });
  it('zeroGrad clears every gradient', async () => {
    const gpu = await testGpu();
    const params = [3, 700].map((n, k) => ({ param: gpu.zeros([n], 'f32', `p${k}`), grad: gpu.upload(randNormal(n, k), [n], 'f32', `g${k}`) }));
    const opt = await AdamW.create(gpu, params);
    const rec = gpu.recorder();
    opt.zeroGrad(rec);
    await rec.submit();
    for (const p of params) expect([...(await gpu.readF32(p.grad))].every((x) => x === 0)).toBe(true);
  });
  it('rejects mismatched param and grad', async () => {
    const gpu = await testGpu();
    const bad = [{ param: gpu.tensor([4], 'f32', 'p'), grad: gpu.tensor([5], 'f32', 'g') }];
    await expect(AdamW.create(gpu, bad)).rejects.toBeInstanceOf(ShapeError);
  });

  describe('many tensors (multi-tensor path)', () => {
    /** Odd sizes from 1 to 5000, chunk edges (1024 elements a workgroup) among them. */
    const ODD = [1, 1023, 1024, 1025, 5000, 4999, ...Array.from({ length: 44 }, (_, k) => 1 + ((k * 7919 + 13) % 5000))];

    /** `sizes` as LoRA tensors (r = 1: A [1, n], B [m, 1]) from createLoraParamSet, plus `loose` tensors in buffers of their own. */
    function tensors(gpu: Gpu, sizes: number[], loose: number[] = []): AdamWParam[] {
      const specs = Array.from({ length: sizes.length / 2 }, (_, i) => ({ name: `t${i}`, r: 1, in: sizes[2 * i], out: sizes[2 * i + 1], alpha: 1 }));
      const set = createLoraParamSet(gpu, specs).flatMap((p) => [
        { param: p.A, grad: p.dA },
        { param: p.B, grad: p.dB },
      ]);
      return [...set, ...loose.map((n, k) => ({ param: gpu.tensor([n], 'f32', `loose${k}`), grad: gpu.tensor([n], 'f32', `loose${k}.grad`) }))];
    }

    /** 3 steps against torch's clip + AdamW; returns the dispatches a step recorded. */
    async function against(gpu: Gpu, params: AdamWParam[]): Promise<number> {
      const cfg = { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1, maxGradNorm: 1 };
      const init = params.map((p, k) => randNormal(p.param.numel, 300 + k, 0.5));
      params.forEach((p, k) => gpu.write(p.param, init[k]));
      const opt = await AdamW.create(gpu, params, cfg);
      const cpu = new CpuAdamW(init.map((p) => Float64Array.from(p)), cfg);
      let dispatches = 0;
      for (let t = 1; t <= 3; t++) {
        const lr = 1e-2 / t;
        const grads = params.map((p, k) => randNormal(p.param.numel, 5000 * t + k));
        const zero = gpu.recorder();
        opt.zeroGrad(zero);
        await zero.submit();
        params.forEach((p, k) => gpu.write(p.grad, grads[k]));
        const rec = gpu.recorder();
        const before = gpu.hostStats.dispatches;
        opt.step(rec, { lr, step: t });
        dispatches = gpu.hostStats.dispatches - before;
        await rec.submit();
        const want = cpu.step(grads, lr, t);
        const [norm, coef] = await gpu.readF32(opt.gradNorm);
        expectClose([norm], [want], { rtol: 1e-5, what: `grad norm at step ${t}` });
        expect(coef, 'clipping is active').toBeLessThan(1);
      }
      for (let k = 0; k < params.length; k++) {
        expectClose(await gpu.readF32(params[k].param), cpu.params[k], { rtol: 1e-5, atol: 1e-6, what: `param ${k} (${params[k].param.numel})` });
        expectClose(await gpu.readF32(opt.moments[k].expAvg), cpu.m[k], { rtol: 1e-5, atol: 1e-7, what: `exp_avg ${k}` });
        expectClose(await gpu.readF32(opt.moments[k].expAvgSq), cpu.v[k], { rtol: 1e-5, atol: 1e-9, what: `exp_avg_sq ${k}` });
      }
      const zero = gpu.recorder();
      opt.zeroGrad(zero);
      await zero.submit();
      for (const [k, p] of params.entries()) expect((await gpu.readF32(p.grad)).every((x) => x === 0), `grad ${k} zeroed`).toBe(true);
      opt.release();
      return dispatches;
    }

    it('matches torch over 50 tensors of odd sizes in one flat buffer, beside 2 tensors in buffers of their own', async () => {
      const gpu = await testGpu();
      // Groups: the flat set, then each loose tensor: 3 sum passes, the clip, 3 updates.
      expect(await against(gpu, tensors(gpu, ODD, [3, 2000]))).toBe(7);
    }, 60_000);

    it('matches torch where the flat set is split across buffers by a small storage binding limit', async () => {
      const real = await testGpu();
      const limits = new Proxy(real.limits, { get: (t, k) => (k === 'maxStorageBufferBindingSize' ? 32768 : t[k as keyof GPUSupportedLimits]) });
      const gpu = Object.create(real, { limits: { value: limits } }) as Gpu;
      const params = tensors(gpu, ODD);
      const buffers = new Set(params.map((p) => p.param.buffer)).size;
      expect(buffers, 'the set spans several buffers').toBeGreaterThan(2);
      expect(await against(gpu, params)).toBe(2 * buffers + 1);
    }, 60_000);

    it('records as many dispatches for 400 tensors as for 4', async () => {
      const gpu = await testGpu();
      const count = async (n: number) => {
        const opt = await AdamW.create(gpu, tensors(gpu, Array.from({ length: n }, (_, k) => 1 + ((k * 31) % 300))));
        const rec = gpu.recorder();
        const before = gpu.hostStats.dispatches;
        opt.step(rec, { lr: 1e-3, step: 1 });
        const step = gpu.hostStats.dispatches - before;
        opt.zeroGrad(rec);
        const zero = gpu.hostStats.dispatches - before - step;
        await rec.submit();
        opt.release();
        return { step, zero };
      };
      expect(await count(4)).toEqual({ step: 3, zero: 1 });
      expect(await count(400)).toEqual({ step: 3, zero: 1 });
    }, 60_000);
  });
});
