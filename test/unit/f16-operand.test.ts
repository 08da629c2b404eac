// The operands of LoRA's products on f16 tensor cores (shaders/f16_operand.wgsl, src/ops/loraF16.ts):
// scale·S, S = src or srcᵀ, as f16 in the GEMM's blocks of 32 x 32 or as f32 rows, the reduction
// padded with zeros to a multiple of 32, against the CPU on shapes with partial tiles. (The products
// themselves need subgroup matrices: tools/device/loraSpeed.ts --f16 checks them on the GPU.)
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { randUniform } from '../helpers/reference';
import { toHalfBits } from '../helpers/q4-reference';
import { f16BlockedWords } from '../../src/ops/productSizes';

const blocked = (r: number, c: number, k: number) => (Math.floor(r / 32) * (k / 32) + Math.floor(c / 32)) * 1024 + (r % 32) * 32 + (c % 32);
const UNIFORMS = { n: 'u32', k: 'u32', kp: 'u32', scale: 'f32' } as const;

// SwiftShader (VLRL_VK=swiftshader) offers no shader-f16; lavapipe, the default, does.
describe.skipIf(process.env.VLRL_VK === 'swiftshader')('f16 operands', () => {
  it.each([
    [40, 70, false, 2],
    [33, 45, true, 0.5],
    [64, 64, true, 1],
    [7, 100, false, 0.0625],
  ] as const)('O [N %i, K %i padded to 32] from src (transposed: %s) times %d, in f16 blocks and as f32 rows', async (n, k, trans, scale) => {
    const gpu = await testGpu();
    const kp = Math.ceil(k / 32) * 32;
    const values = randUniform(n * k, n + k, -3, 3);
    const src = gpu.upload(values, [n * k], 'f32', 'src');
    const w16 = gpu.tensor([f16BlockedWords(n, kp)], 'u32', 'w16');
    const f32 = gpu.tensor([n, kp], 'f32', 'f32');
    const kernel = (out32: boolean) => gpu.kernelOnUse({ name: 'test.operand', shader: 'f16_operand', entry: 'operand', defines: { TRANS: trans, OUT32: out32 }, uniforms: UNIFORMS });
    const rec = gpu.recorder('operand');
    rec.clear(w16);
    rec.dispatch(kernel(false), { src, out: w16 }, [kp / 32, Math.ceil(n / 32)], { n, k, kp, scale });
    if (trans) rec.dispatch(kernel(true), { src, out: f32 }, [kp / 32, Math.ceil(n / 32)], { n, k, kp, scale });
    await rec.submit();
    const halves = new Uint16Array((await gpu.read(w16)).buffer);
    const rows = trans ? await gpu.readF32(f32) : null;
    for (let r = 0; r < n; r++)
      for (let c = 0; c < kp; c++) {
        // S (r, c): src [r][c], or transposed src [c][r] (src [K][N]); zero past K.
        const want = c < k ? scale * values[trans ? c * n + r : r * k + c] : 0;
        const bits = halves[blocked(r, c, kp)];
        // One f16 rounding (WGSL lets a conversion take either neighbour).
        if (Math.abs(bits - toHalfBits(want)) > 1) expect.fail(`f16 (${r}, ${c}): half bits ${bits}, expected ${toHalfBits(want)} (${want})`);
        if (rows && rows[r * kp + c] !== Math.fround(want)) expect.fail(`f32 (${r}, ${c}): ${rows[r * kp + c]}, expected ${want}`);
      }
    for (const t of [src, w16, f32]) t.release();
  });
});
