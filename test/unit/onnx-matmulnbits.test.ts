// The ONNX writer of the Benchmark page's peer: a MatMulNBits model built from a Q4 weight in our
// format runs in onnxruntime-web (its wasm CPU backend, in Node) and gives x·Wᵀ of our CPU
// dequantization, for every copy of the weight.
import * as ort from 'onnxruntime-web';
import { describe, expect, it } from 'vitest';
import { matMulNBitsModel, q4ToMatMulNBits } from '../../src/bench/onnx';
import { Rng } from '../../src/data/random';
import { dequantizeRef, matmulABt, quantizeRef } from '../helpers/q4-reference';

describe('MatMulNBits model from a Q4 weight', () => {
  it('runs in onnxruntime-web and equals x·Wᵀ of our dequantized weight', async () => {
    const rng = new Rng(7);
    const [m, n, k, copies] = [3, 40, 96, 2];
    const q = quantizeRef(Array.from({ length: n * k }, () => rng.next() * 2 - 1), n, k);
    const model = matMulNBitsModel(q4ToMatMulNBits(q.codes, q.scales, n, k), n, k, copies);
    const session = await ort.InferenceSession.create(model, { executionProviders: ['wasm'] });
    const x = Float32Array.from({ length: m * k }, () => rng.next() * 2 - 1);
    const out = await session.run({ x: new ort.Tensor('float32', x, [m, k]) });
    const ref = matmulABt(x, dequantizeRef(q), m, n, k);
    for (let c = 0; c < copies; c++) {
      const y = out[`y${c}`];
      expect(y.dims).toEqual([m, n]);
      const data = y.data as Float32Array;
      for (let i = 0; i < m * n; i++) expect(Math.abs(data[i] - ref.y[i])).toBeLessThanOrEqual(1e-5 * ref.mag[i] + 1e-6);
    }
    await session.release();
  });

  it('refuses buffers of another shape', () => {
    const q = quantizeRef(new Array(64 * 32).fill(0.5), 64, 32);
    expect(() => q4ToMatMulNBits(q.codes, q.scales, 64, 64)).toThrow(/\[64, 64\]/);
  });
});
