// LoRA's group dispatches for the adapters of one input (Lora.forwardGroup, Lora.backwardGroup:
// shaders/lora_thin.wgsl and up_add's SECOND/THIRD/SUM variants) against f64 on the CPU: u_g,
// y_g += s_g·u_g·B_gᵀ, and dA_g, dB_g (shaders/lora_grad.wgsl), dX += Σ_g s_g·dY_g·B_g·A_g, at row
// counts that leave a partial block of 16 rows, ranks below, at and above lora_thin's block of 8
// and stacked ranks above lora_grad's 24, and outputs of different widths (q/k/v's).
import { describe, expect, it } from 'vitest';
import { Lora, LORA_GEMM_FROM, type LoraProduct } from '../../src/ops/lora';
import { createLoraParams, loraScale, releaseLoraParams, type LoraParams } from '../../src/ops/loraParams';
import type { Gpu, Tensor } from '../../src/gpu';
import { testGpu, withDefaultStorageLimit, withoutSubgroups } from '../helpers/gpu';
import { expectClose, randUniform, matmulT, transpose } from '../helpers/reference';

interface Member {
  p: LoraParams;
  A: Float32Array;
  B: Float32Array;
  dA0: Float32Array;
  dB0: Float32Array;
  y0: Float32Array;
  dy: Float32Array;
  ty: Tensor;
  tdy: Tensor;
  tu: Tensor;
  tt: Tensor;
}

async function members(gpu: Gpu, T: number, inF: number, outs: readonly number[], r: number, seed: number): Promise<Member[]> {
  return outs.map((out, g) => {
    const p = createLoraParams(gpu, { name: `layers.0.self_attn.${'qkv'[g]}_proj`, in: inF, out, r, alpha: 2 * r + g });
    const [A, B, dA0, dB0, y0, dy] = [r * inF, out * r, r * inF, out * r, T * out, T * out].map((n, i) => randUniform(n, seed + 10 * g + i));
    gpu.write(p.A, A);
    gpu.write(p.B, B);
    // Gradients start non-zero: the group accumulates into them.
    gpu.write(p.dA, dA0);
    gpu.write(p.dB, dB0);
    // Workspaces with more rows than T, as a caller holds them.
    return { p, A, B, dA0, dB0, y0, dy, ty: gpu.upload(y0, [T, out], 'f32', `y${g}`), tdy: gpu.upload(dy, [T, out], 'f32', `dy${g}`), tu: gpu.tensor([T + 3, r], 'f32', `u${g}`), tt: gpu.tensor([T + 3, r], 'f32', `t${g}`) };
  });
}

/** f32 sums of products of values in [-1, 1] (sums of thousands in the largest case): a few ulps
 * of the result's largest entry, 1e-4 at the least. */
function tolOf(want: ArrayLike<number>): { rtol: number; atol: number } {
  let max = 0;
  for (let i = 0; i < want.length; i++) max = Math.max(max, Math.abs(want[i]));
  return { rtol: 1e-5, atol: Math.max(1e-4, 2e-6 * max) };
}

const read = async (gpu: Gpu, t: Tensor, n = t.numel) => (await gpu.readF32(t)).slice(0, n);

describe('lora groups', () => {
  // [T, in, outs, r]: three adapters (q/k/v-like widths), two, one; ranks 8, 5 and 12 (two rank blocks).
  const cases = [
    [37, 68, [40, 24, 24], 8],
    [21, 132, [36, 36], 5],
    [50, 40, [28], 12],
    [16, 64, [32, 16, 16], 12],
    // The weight gradients' rows in 6 chunks, x in 3 blocks of 256 columns (the last partial).
    [203, 516, [260, 40], 8],
    // 64 tiles of lora_grad: 8 chunks of 75 rows, each staged in two passes of 64.
    [600, 4096, [4096, 4096, 4096], 8],
    // Enough row blocks for lora_thin's 16 rows a workgroup (the others take 8).
    [1400, 64, [32, 16, 16], 8],
    // lora_grad at rank 24: its ranks in tiles of at most 16.
    [64, 128, [64, 32], 24],
  ] as const;
  // On a device of WebGPU's default 8 storage buffers a stage, three adapters take lora.thin[t],
  // lora.up_add[B] and lora.grad_* in runs of two. Without subgroups, lora_thin sums its lanes in
  // workgroup memory (with them, by subgroupAdd where the device's subgroups have one size).
  type Device = 'as it is' | '8 storage buffers' | 'no subgroups';
  // Which products run on the GEMM (Lora's gemmFrom, from rank 1): none as at small ranks, every
  // one as at large ranks, or some (a group's products then mix both ways).
  type Routing = 'kernels' | 'gemm' | 'grads and t on the gemm';
  const every = (rank: number) => Object.fromEntries(Object.keys(LORA_GEMM_FROM).map((p) => [p, rank])) as Record<LoraProduct, number>;
  const GEMM_FROM: Record<Routing, Partial<Record<LoraProduct, number>>> = {
    kernels: every(Infinity),
    gemm: every(1),
    'grads and t on the gemm': { ...every(Infinity), t: 1, grads: 1 },
  };
  const on = (c: (typeof cases)[number], d: Device, routing: Routing = 'kernels') => [c[0], c[1], c[2], c[3], d, routing] as const;
  it.each([
    ...cases.map((c) => on(c, 'as it is')),
    on(cases[0], '8 storage buffers'),
    on(cases[1], '8 storage buffers'),
    on(cases[0], 'no subgroups'),
    on(cases[2], 'no subgroups'),
    on(cases[6], 'no subgroups'),
    on(cases[0], 'as it is', 'gemm'),
    on(cases[4], 'as it is', 'gemm'),
    on(cases[1], 'as it is', 'grads and t on the gemm'),
  ])('T %i, in %i, outs %j, rank %i (device: %s, products on %s): forwardGroup and backwardGroup match f64', async (T, inF, outs, r, device, routing) => {
    const base = await testGpu();
    const gpu = device === '8 storage buffers' ? withDefaultStorageLimit(base) : device === 'no subgroups' ? withoutSubgroups(base) : base;
    const lora = await Lora.create(gpu, { gemmFrom: GEMM_FROM[routing] });
    const ms = await members(gpu, T, inF, outs, r, 100 + T);
    const x = randUniform(T * inF, T);
    const dx0 = randUniform(T * inF, T + 1);
    const tx = gpu.upload(x, [T, inF], 'f32', 'x');
    const tdx = gpu.upload(dx0, [T, inF], 'f32', 'dx');
    expect(Lora.groupable(ms.map((m) => m.p))).toBe(true);

    const before = gpu.hostStats.dispatches;
    const rec = gpu.recorder();
    lora.forwardGroup(rec, tx, ms.map((m) => ({ p: m.p, u: m.tu, y: m.ty })));
    const forwardDispatches = gpu.hostStats.dispatches - before;
    lora.backwardGroup(rec, tx, tdx, ms.map((m) => ({ p: m.p, dy: m.tdy, u: m.tu, t: m.tt })));
    const backwardDispatches = gpu.hostStats.dispatches - before - forwardDispatches;
    await rec.submit();
    // One dispatch for every u, one for every update; in the backward one for every t, two for
    // every dA and dB (partials, their sum), one for dX. On the GEMM, at least one a product and adapter.
    const split = device === '8 storage buffers' && outs.length === 3;
    if (routing === 'kernels') {
      expect(forwardDispatches).toBe(split ? 3 : 2);
      expect(backwardDispatches).toBe(split ? 7 : 4);
    } else if (routing === 'gemm') {
      expect(forwardDispatches).toBeGreaterThanOrEqual(2 * outs.length);
      expect(backwardDispatches).toBeGreaterThanOrEqual(4 * outs.length);
    }

    const dxWant = Float64Array.from(dx0);
    for (const [g, m] of ms.entries()) {
      const out = outs[g];
      const s = loraScale(m.p);
      const u = matmulT(x, m.A, T, r, inF);
      const y = matmulT(u, m.B, T, out, r).map((v, i) => s * v + m.y0[i]);
      const t = matmulT(m.dy, transpose(m.B, out, r), T, r, out).map((v) => s * v);
      const dB = matmulT(transpose(m.dy, T, out), transpose(u, T, r), out, r, T).map((v, i) => s * v + m.dB0[i]);
      const dA = matmulT(transpose(t, T, r), transpose(x, T, inF), r, inF, T).map((v, i) => v + m.dA0[i]);
      matmulT(t, transpose(m.A, r, inF), T, inF, r).forEach((v, i) => (dxWant[i] += v));
      for (const [what, got, want] of [['u', await read(gpu, m.tu, T * r), u], ['y', await read(gpu, m.ty), y], ['t', await read(gpu, m.tt, T * r), t], ['dB', await read(gpu, m.p.dB), dB], ['dA', await read(gpu, m.p.dA), dA]] as const) {
        expectClose(got, want, { ...tolOf(want), what: `${what} of adapter ${g}` });
      }
    }
    expectClose(await read(gpu, tdx), dxWant, { ...tolOf(dxWant), what: 'dX of the group' });
    for (const m of ms) {
      releaseLoraParams(m.p);
      for (const t of [m.ty, m.tdy, m.tu, m.tt]) t.release();
    }
    tx.release();
    tdx.release();
  }, 120_000);

  it('groups only adapters of one rank and input width whose widths are whole vec4s', async () => {
    const gpu = await testGpu();
    const p = (inF: number, out: number, r: number) => createLoraParams(gpu, { name: 'layers.0.mlp.up_proj', in: inF, out, r, alpha: r });
    const ps = [p(64, 32, 8), p(64, 16, 8), p(64, 16, 4), p(64, 18, 8), p(62, 16, 8)];
    expect(Lora.groupable([ps[0], ps[1]])).toBe(true);
    expect(Lora.groupable([ps[0], ps[2]])).toBe(false);
    expect(Lora.groupable([ps[0], ps[3]])).toBe(false);
    expect(Lora.groupable([ps[4]])).toBe(false);
    expect(Lora.groupable([ps[0], ps[1], ps[1], ps[1]])).toBe(false);
    ps.forEach(releaseLoraParams);
  });
});
