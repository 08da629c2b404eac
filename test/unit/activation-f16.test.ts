// Kept activations in f16 (src/ops/activationF16.ts): the rounding against the CPU's
// round-to-nearest-even (src/model/dtype.ts) bit for bit, the exact expansion back, and a value
// beyond f16's range reported instead of stored as inf.
import { describe, expect, it } from 'vitest';
import { f16BitsToF32, f32ToF16Bits } from '../../src/model/dtype';
import { ActivationF16, F16_MAX } from '../../src/ops/activationF16';
import { testGpu } from '../helpers/gpu';

/** Values over f16's whole range: normals of several scales, subnormals, exact ties between two
 * halves (which round-to-nearest-even must send to the even one), and f16's largest values. */
function values(n: number): Float32Array {
  let s = 12345;
  const rand = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32);
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const kind = i % 4;
    const sign = rand() < 0.5 ? -1 : 1;
    if (kind === 0) x[i] = sign * rand() * 2 ** Math.floor(rand() * 40 - 24);
    else if (kind === 1) x[i] = sign * rand() * 2 ** -14; // subnormal in f16
    else if (kind === 2) {
      // Halfway between two f16 values with 10 fraction bits: the tie rule decides.
      const e = Math.floor(rand() * 20) - 10;
      x[i] = sign * (1 + (Math.floor(rand() * 1024) + 0.5) / 1024) * 2 ** e;
    } else x[i] = sign * (F16_MAX - rand() * 64);
  }
  return x;
}

// SwiftShader (VLRL_VK=swiftshader) offers no shader-f16; lavapipe, the default, does.
describe.skipIf(process.env.VLRL_VK === 'swiftshader')('ActivationF16', () => {
  it('rounds f32 to f16 to nearest even as the CPU does, and expands back exactly', async () => {
    const gpu = await testGpu();
    expect(gpu.has('shader-f16'), 'lavapipe offers shader-f16').toBe(true);
    const op = ActivationF16.create(gpu);
    const n = 4096;
    const x = values(n);
    const h = gpu.upload(x, [n], 'f32', 'test.h');
    const h16 = gpu.tensor([n], 'f16', 'test.h16');
    const back = gpu.tensor([n], 'f32', 'test.back');
    const range = gpu.zeros([3], 'u32', 'test.range');
    const rec = gpu.recorder();
    op.pack(rec, h, h16, range, 1);
    op.unpack(rec, h16, back);
    await rec.submit();
    const bits = (await gpu.read(h16)) as Uint16Array;
    const want = Uint16Array.from(x, f32ToF16Bits);
    const wrong = [...bits.keys()].filter((i) => bits[i] !== want[i]);
    expect(wrong.slice(0, 5).map((i) => `${x[i]}: got 0x${bits[i].toString(16)}, want 0x${want[i].toString(16)}`)).toEqual([]);
    const expanded = await gpu.readF32(back);
    expect(Array.from(expanded)).toEqual(Array.from(want, f16BitsToF32));
    expect(Array.from((await gpu.read(range)) as Uint32Array), 'nothing out of range').toEqual([0, 0, 0]);
    for (const t of [h, h16, back, range]) t.release();
  });

  it('reports a value beyond f16 range (1e5) in its slot as the largest |x|, storing it clamped, never as inf', async () => {
    const gpu = await testGpu();
    const op = ActivationF16.create(gpu);
    const n = 1024;
    const x = values(n);
    x[77] = 1e5;
    x[300] = -7e4;
    const h = gpu.upload(x, [n], 'f32', 'test.h');
    const h16 = gpu.tensor([n], 'f16', 'test.h16');
    const range = gpu.zeros([4], 'u32', 'test.range');
    const rec = gpu.recorder();
    op.pack(rec, h, h16, range, 2);
    await rec.submit();
    const reported = (await gpu.read(range)) as Uint32Array;
    expect(reported[0] + reported[1] + reported[3]).toBe(0);
    expect(new Float32Array(reported.buffer)[2]).toBe(1e5);
    const bits = (await gpu.read(h16)) as Uint16Array;
    expect(f16BitsToF32(bits[77])).toBe(F16_MAX);
    expect(f16BitsToF32(bits[300])).toBe(-F16_MAX);
    expect(bits.every((b) => (b & 0x7c00) !== 0x7c00), 'no inf or NaN stored').toBe(true);
    for (const t of [h, h16, range]) t.release();
  });

  it('refuses tensors of the wrong dtype or count', async () => {
    const gpu = await testGpu();
    const op = ActivationF16.create(gpu);
    const a = gpu.tensor([6], 'f32', 'a');
    const b = gpu.tensor([4], 'f16', 'b');
    const range = gpu.tensor([1], 'u32', 'r');
    expect(() => op.pack(gpu.recorder(), a, b, range, 0)).toThrow(/'a' has 6 elements and 'b' 4/);
    expect(() => op.unpack(gpu.recorder(), a, a)).toThrow(/an f32 and an f16 tensor expected/);
    expect(() => op.pack(gpu.recorder(), a, gpu.tensor([6], 'f16', 'c'), range, 1)).toThrow(/slot 1 outside/);
    for (const t of [a, b, range]) t.release();
  });
});
