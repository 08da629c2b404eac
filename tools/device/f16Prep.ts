// What the f16 tensor-core products spend before their GEMM, at the default config's shapes (2560
// rows, the 2B's decoder weights, LoRA r 8 inside the products): x's row scaling into its blocked
// f16 copy (shaders/f16_row_scale.wgsl, with the adapters' s·u columns) and the expansion of each
// Q4 weight to f16 (shaders/f16_convert.wgsl), as it is and transposed for the input gradient. Each
// in stream a call, with the bytes it reads and writes as GB/s.
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/f16Prep.mjs [--rows M] [--rank R] [--hold H,...]
// --hold: the row scaling with each number of vec4s a thread holds (ROW_SCALE_HOLD by default).
import { parseArgs } from '../../src/node/args';
import { createNodeGpu } from '../../src/node/gpu';
import { compileMatrixKernels, grid1d } from '../../src/gpu';
import { f16UnsupportedOn, ROW_SCALE_HOLD, ROW_SCALE_UNIFORMS, rowScaleDefines } from '../../src/ops/matmulQ4F16';
import { Q4ToF16 } from '../../src/ops/q4ToF16';
import { f16BlockedWords, loraColumns } from '../../src/ops/productSizes';
import { DECODER_GEMV_SHAPES, randomQ4Blocks, releaseQ4 } from '../../src/bench/q4';
import { Filler } from '../../src/bench/fill';
import { inStreamMs } from './gemmTiming';

const args = parseArgs(process.argv.slice(2));
const rows = args.num('rows', 2560);
const rank = args.num('rank', 8);
const gpu = await createNodeGpu({ unsafeApis: true, f16: true, dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const why = f16UnsupportedOn(gpu);
if (why) {
  console.log(`skipped: ${why}`);
  process.exit(0);
}
const fill = await Filler.create(gpu);
const convert = Q4ToF16.create(gpu);
const holds = (args.optStr('hold') ?? String(ROW_SCALE_HOLD)).split(',').map(Number);
const rowScales = await Promise.all(holds.map(async (hold) => (await compileMatrixKernels(gpu, `matmul_q4_f16.lora_hold${hold}`, [{ shader: 'f16_row_scale', entry: 'row_scale', uniforms: ROW_SCALE_UNIFORMS.ext }], rowScaleDefines(true, hold)))[0]));
const gbs = (bytes: number, ms: number) => (bytes / ms / 1e6).toFixed(0);
const total = { expand: 0, transposed: 0 };
const totalRowScale = holds.map(() => 0);

// Each weight [N, K] with the adapters sharing its input: q/k/v 3, gate/up 2, o and down 1.
const adaptersOf = (n: number) => (n === 4096 ? 3 : n === 12288 ? 2 : 1);
for (const [n, k] of DECODER_GEMV_SHAPES) {
  const rec = gpu.recorder('setup');
  const [w] = randomQ4Blocks(gpu, rec, fill, n, k, 'w', n);
  const factor = fill.fill(rec, gpu.tensor([rank * Math.max(n, k)], 'f32', 'factor'), 'uniform', 0.1);
  // The extensions the engine writes: the forward's B of every adapter sharing x, the transpose's Aᵀ.
  const [ef, et] = [loraColumns(adaptersOf(n), rank), loraColumns(1, rank)];
  const out = gpu.tensor([Math.max(Q4ToF16.words(w, false, ef), Q4ToF16.words(w, true, et))], 'u32', 'w16');
  // The forward's input [rows, K] and the input gradient's dY [rows, N], each with its u columns.
  const x = fill.fill(rec, gpu.tensor([rows, Math.max(n, k)], 'f32', 'x'), 'uniform', 1);
  const u = fill.fill(rec, gpu.tensor([rows, rank], 'f32', 'u'), 'uniform', 1);
  const rs = gpu.tensor([rows], 'f32', 'rs');
  const x16 = gpu.tensor([f16BlockedWords(rows, Math.max(n, k) + 96)], 'u32', 'x16');
  await rec.submit();
  const wBytes = (n * k) / 2 + (n * k) / 16;
  const tf = await inStreamMs(gpu, /q4_to_f16/, (r) => convert.expand(r, w, out, false, { factor, e: ef, r: rank, off: 0 }));
  const tt = await inStreamMs(gpu, /q4_to_f16/, (r) => convert.expand(r, w, out, true, { factor, e: et, r: rank, off: 0 }));
  const line = [`W ${n}x${k}: expand ${(tf * 1e3).toFixed(1)} µs (${gbs(wBytes + 2 * n * (k + ef), tf)} GB/s), transposed ${(tt * 1e3).toFixed(1)} µs (${gbs(wBytes + 2 * k * (n + et), tt)} GB/s)`];
  total.expand += tf;
  total.transposed += tt;
  for (const [label, width, adapters] of [['x', k, adaptersOf(n)], ['dY', n, 1]] as const) {
    const ee = loraColumns(adapters, rank);
    const each: string[] = [];
    for (const [h, rowScale] of rowScales.entries()) {
      const ms = await inStreamMs(gpu, /row_scale/, (r) => r.dispatch(rowScale, { x, rs, x16, u0: u, u1: u, u2: u }, grid1d(rows, 1), { m: rows, k: width, e: ee, r: rank, adapters, s0: 2, s1: 2, s2: 2 }));
      each.push(`${holds.length > 1 ? `hold ${holds[h]} ` : ''}${(ms * 1e3).toFixed(1)} µs (${gbs(rows * (4 * width + 2 * (width + ee)), ms)} GB/s)`);
      totalRowScale[h] += ms;
    }
    line.push(`row scale of ${label} [${rows}, ${width}] + ${ee}: ${each.join(', ')}`);
  }
  console.log(line.join('; '));
  releaseQ4([w]);
  for (const t of [factor, out, x, u, rs, x16]) t.release();
}
console.log(`a layer's set (each once): row scales ${totalRowScale.map((t, h) => `${holds.length > 1 ? `hold ${holds[h]} ` : ''}${(t * 1e3).toFixed(1)} µs`).join(', ')}, expansions ${(total.expand * 1e3).toFixed(1)} µs, transposed ${(total.transposed * 1e3).toFixed(1)} µs`);
process.exit(0);
