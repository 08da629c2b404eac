// The 4-bit GEMV at one row of x (decode of one sequence) on the decoder's weights: f32 x in the
// layouts matmulQ4.ts chooses among (the default first), and x in two int8 limbs, given ready-made
// (GemvCall.xq) or quantized by the GEMV's own quantize_x2 dispatch.
// In stream per call (src/bench/harness.ts's measure), the weight's copies cycled past L2.
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/gemvOneRow.mjs [--quick]
// --quick: one small shape, two copies (a check on software Vulkan).
import { createNodeGpu } from '../../src/node/gpu';
import { int8GroupWords, MatmulQ4, type GemvShape } from '../../src/ops/matmulQ4';
import { Filler } from '../../src/bench/fill';
import { measure } from '../../src/bench/harness';
import { DECODER_GEMV_SHAPES, q4Bytes, randomQ4Blocks, releaseQ4 } from '../../src/bench/q4';
import type { Recorder } from '../../src/gpu';

const QUICK = process.argv.includes('--quick');
// The decoder's weights, and gate alone (one part of the joined gate/up).
const SHAPES = QUICK ? [[256, 512]] : [...DECODER_GEMV_SHAPES, [6144, 2048]];
const F32: (GemvShape | undefined)[] = [
  undefined, // the default choice
  { threadsPerRow: 64, groups: 4 },
  { threadsPerRow: 32, groups: 4 },
  { threadsPerRow: 16, groups: 8 },
  { threadsPerRow: 8, groups: 16 },
  { threadsPerRow: 64, groups: 2, xDirect: true },
  { threadsPerRow: 32, groups: 4, xDirect: true },
];
const I8X2: GemvShape[] = [16, 32, 64].flatMap((threadsPerRow) => (threadsPerRow === 64 ? [1, 2, 4] : [1, 2, 4, 8]).map((groups) => ({ threadsPerRow, groups, int8: true, preq: true })));
const name = (g?: GemvShape) => (g ? `${g.threadsPerRow}x${g.groups}${g.xDirect ? ' direct' : ''}` : 'default');

const gpu = await createNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const fill = await Filler.create(gpu);
const f32s = await Promise.all(F32.map((g) => MatmulQ4.create(gpu, g ? { gemv: g } : { int8: false })));
const i8s = await Promise.all(I8X2.map((g) => MatmulQ4.create(gpu, { gemv: g })));
const quantizer = await MatmulQ4.create(gpu);
const us = (ms: number) => (1000 * ms).toFixed(2);

// The list twice: the first pass runs while the GPU's clocks rise; the second is printed.
for (const pass of QUICK ? [1] : [0, 1]) {
  for (const [n, k] of SHAPES) {
    const copies = QUICK ? 2 : Math.max(2, Math.min(64, Math.ceil((256 * 2 ** 20) / q4Bytes(n, k))));
    const setup = gpu.recorder('setup');
    const ws = Array.from({ length: copies }, (_, c) => randomQ4Blocks(gpu, setup, fill, n, k, `w${c}`)[0]);
    const x = fill.fill(setup, gpu.tensor([1, k], 'f32', 'x'), 'uniform', 0.05);
    const y = gpu.tensor([1, n], 'f32', 'y');
    await setup.submit();
    // x in two limbs, as the kernel before the GEMV writes them in decode.
    const xq = gpu.tensor([int8GroupWords(1, k)], 'u32', 'xq');
    const q = gpu.recorder('quantize');
    quantizer.quantizeX(q, x, xq);
    await q.submit();
    const t = async (f: (r: Recorder, c: number) => void) => {
      const m = await measure(gpu, /./, (r) => ws.forEach((_, c) => f(r, c)), { maxReps: 12, gpuOnly: true, calls: copies });
      return us(m.passMs ?? m.ms);
    };
    const parts: string[] = [];
    for (const [i, mm] of f32s.entries()) parts.push(`f32 ${name(F32[i])} ${await t((r, c) => mm.gemv(r, x, ws[c], y))}`);
    for (const [i, mm] of i8s.entries()) {
      const own = await t((r, c) => mm.gemv(r, x, ws[c], y));
      const given = await t((r, c) => mm.gemv(r, x, ws[c], y, false, { xq }));
      parts.push(`i8x2 ${name(I8X2[i])} given ${given} (own quantize ${own})`);
    }
    if (pass === 1) console.log(`${n}x${k} (${(q4Bytes(n, k) / 2 ** 20).toFixed(2)} MiB, ${copies} copies), µs a call in stream: ${parts.join('; ')}`);
    ws.forEach((w) => releaseQ4([w]));
    for (const tt of [x, y, xq]) tt.release();
  }
}
process.exit(0);
