// x as int8 groups left by the kernel that writes it (GemvCall.xq: the norms' LoRA down, the SwiGLU
// fold, the attention combine): the 4-bit GEMV given them must write what it writes quantizing x
// itself, bit for bit.
import { expect } from 'vitest';
import type { Gpu, Tensor } from '../../src/gpu';
import { allocQ4, MatmulQ4 } from '../../src/ops/matmulQ4';
import { quantizeRef } from './q4-reference';
import { randUniform } from './reference';

/** y = x·Wᵀ on a random [70, k] weight, by the default GEMV given xq (2 to 8 rows), and quantizing x itself. */
export async function gemvGivenAndSelfQuantized(gpu: Gpu, x: Tensor, xq: Tensor, seed = 112): Promise<[Float32Array, Float32Array]> {
  const [rows, k] = x.shape;
  const n = 70;
  const q = quantizeRef(randUniform(n * k, seed, -0.1, 0.1), n, k);
  const w = allocQ4(gpu, n, k, 'w');
  gpu.write(w.codes, q.codes);
  gpu.write(w.scales, q.scales);
  const mm = await MatmulQ4.create(gpu);
  expect(mm.takesQuantizedX(rows, w, true)).toBe(true);
  const [y, y2] = [gpu.tensor([rows, n], 'f32', 'y'), gpu.tensor([rows, n], 'f32', 'y2')];
  const rec = gpu.recorder();
  mm.gemv(rec, x, w, y, false, { int8: true, xq });
  mm.gemv(rec, x, w, y2, false, { int8: true });
  await rec.submit();
  const out: [Float32Array, Float32Array] = [await gpu.readF32(y), await gpu.readF32(y2)];
  for (const t of [y, y2, w.codes, w.scales]) t.release();
  return out;
}
