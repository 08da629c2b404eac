// o_proj's LoRA update at 2 to 8 rows of x, two ways, each timed in stream (src/bench/harness.ts's
// measure: the calls back to back as a decode step records them, the weight's copies cycled past
// L2) and a pass per dispatch:
//   separate  the int8 GEMV, then lora_gemv's up product from the partials (the engine's choice)
//   epilogue  the GEMV adding s·u·Bᵀ as it stores (MatmulQ4Options.loraMaxRows)
// Beside the decode step's own figures (--profile --ablate), this separates the kernels' cost in
// stream from their neighbours' in the step (BENCHMARKS.md).
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/loraEpilogue.mjs [--quick]
// --quick: a small shape, two copies (a check on software Vulkan).
import { createNodeGpu } from '../../src/node/gpu';
import { int8GroupWords, MatmulQ4 } from '../../src/ops/matmulQ4';
import { LoraGemv } from '../../src/ops/loraGemv';
import { createLoraParams, loraScale, releaseLoraParams } from '../../src/ops/loraParams';
import { Filler } from '../../src/bench/fill';
import { measure } from '../../src/bench/harness';
import { q4Bytes, randomQ4Blocks, releaseQ4 } from '../../src/bench/q4';
import type { Recorder } from '../../src/gpu';

const QUICK = process.argv.includes('--quick');
// Qwen3-VL-2B's o_proj: N = K = 2048, 16 heads, so 16 partials of u a row; LoRA r 16.
const [N, K] = QUICK ? [256, 256] : [2048, 2048];
const R = 16;
const PER_ROW = 16;
const ROWS = QUICK ? [2, 8] : [2, 4, 8];

const gpu = await createNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const fill = await Filler.create(gpu);
const separate = await MatmulQ4.create(gpu);
const fused = await MatmulQ4.create(gpu, { loraMaxRows: 8 });
const lora = await LoraGemv.create(gpu);
const us = (ms: number) => (1000 * ms).toFixed(2);

const copies = QUICK ? 2 : Math.max(2, Math.min(64, Math.ceil((256 * 2 ** 20) / q4Bytes(N, K))));
const setup = gpu.recorder('setup');
const ws = Array.from({ length: copies }, (_, c) => randomQ4Blocks(gpu, setup, fill, N, K, `w${c}`)[0]);
const p = createLoraParams(gpu, { name: 'o_proj', in: K, out: N, r: R, alpha: 2 * R });
fill.fill(setup, p.B, 'uniform', 0.05);
await setup.submit();

for (const pass of QUICK ? [1] : [0, 1]) {
  for (const m of ROWS) {
    const rec = gpu.recorder('inputs');
    const x = fill.fill(rec, gpu.tensor([m, K], 'f32', 'x'), 'uniform', 0.05);
    const xq = gpu.tensor([int8GroupWords(m, K)], 'u32', 'xq');
    const parts = fill.fill(rec, gpu.tensor([m * PER_ROW * R], 'f32', 'parts'), 'uniform', 0.05);
    const y = gpu.tensor([m, N], 'f32', 'y');
    separate.quantizeX(rec, x, xq);
    await rec.submit();
    if (!separate.takesQuantizedX(m, ws[0], true)) throw new Error(`${m} rows of [${N}, ${K}] do not take int8 x on this device`);
    if (!fused.takesLora(m, ws[0], R, PER_ROW, true)) throw new Error(`${m} rows of [${N}, ${K}] take no LoRA epilogue on this device`);
    const time = async (what: string, f: (r: Recorder, c: number) => void) => {
      const t = await measure(gpu, /./, (r) => ws.forEach((_, c) => f(r, c)), { maxReps: 12, gpuOnly: true, calls: copies });
      return `${what} ${us(t.passMs ?? t.ms)} in stream, ${us(t.ms)} a pass per dispatch`;
    };
    const gemv = (mm: MatmulQ4, r: Recorder, c: number, withLora: boolean) =>
      mm.gemv(r, x, ws[c], y, true, { int8: true, xq, lora: withLora ? { B: p.B, r: R, scale: loraScale(p), parts, perRow: PER_ROW } : undefined });
    const lines = [
      await time('GEMV alone', (r, c) => gemv(separate, r, c, false)),
      await time('separate (GEMV, then the up product)', (r, c) => {
        gemv(separate, r, c, false);
        lora.upFromParts(r, p, parts, PER_ROW, y);
      }),
      await time('epilogue', (r, c) => gemv(fused, r, c, true)),
    ];
    if (pass === 1) console.log(`${m} rows of [${N}, ${K}], r ${R}, ${PER_ROW} partials a row (${copies} copies), µs a call: ${lines.join('; ')}`);
    for (const t of [x, xq, parts, y]) t.release();
  }
}
ws.forEach((w) => releaseQ4([w]));
releaseLoraParams(p);
process.exit(0);
