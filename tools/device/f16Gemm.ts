// The f16 tensor-core 4-bit products (src/ops/matmulQ4F16.ts) on a real GPU: every tile checked
// against the f64 product on odd shapes (forward and dX, and on expanded weights with a LoRA
// adapter's terms inside the product at ranks 8, 16 and 64, and three outputs joined into one
// product as q/k/v are), then timed at the headline shapes beside
// the default int8 tensor-core setting. Exits non-zero when a check fails.
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/f16Gemm.mjs [--only TEXT] [--no-speed] [--no-check] [--dawn FLAG] [--shapes MxNxK,...] [--ablate] [--wave-slots N] [--joined ROWS,...] [--dense MxNxK,...] [--checks dense]
// (--checks dense: the checks of dense weights alone)
// (--dense: the dense products' shapes, the vision tower's at a 448x448 image by default)
// (--joined: the 2B's q, k and v on one x as the decoder runs them, joined into one product on
// outputs back to back and apart on outputs in buffers of their own, with a rank-8 adapter each, at
// each number of rows)
// (--ablate: the default f16 tile's kernel on f16 weights at M8192 N6144 K2048 without its global
// loads, its staging stores, its MMAs, both the first two, or those two and the barriers: what each
// part of a step costs; at the kernel's staging row stride and without its padding)
// (--dawn: one more Dawn flag, e.g. enable-dawn-features=disable_robustness)
import { parseArgs } from '../../src/node/args';
import { createNodeGpu } from '../../src/node/gpu';
import { DEFAULT_F16_TILES, F16_GEMM_UNIFORMS, F16_TILES, f16GemmDefines, f16UnsupportedOn, MatmulQ4F16, oneTile, ROW_SCALE_UNIFORMS, rowScaleDefines, type F16Tile, type F16Tiles } from '../../src/ops/matmulQ4F16';
import { f16BlockedWords } from '../../src/ops/productSizes';
import { capabilitiesOf, compileMatrixKernels, grid1d, Tensor } from '../../src/gpu';
import { MatmulQ4Mma } from '../../src/ops/matmulQ4Mma';
import { checkF16Dense, checkQ4F16, checkQ4F16Joined, checkQ4F16Lora } from '../../src/ops/matmulQ4MmaCheck';
import { randomQ4Blocks, releaseQ4 } from '../../src/bench/q4';
import { accuracyReporter, inStreamMs, timeQ4Gemms } from './gemmTiming';
import { Matmul } from '../../src/ops/matmul';
import { tensorCoreOptions } from '../../src/ops/projection';
import { Filler } from '../../src/bench/fill';

// Every 16x16 entry of the table: each's f16 tile on expanded weights, its Q4 tile dequantizing in the kernel.
const TILES: readonly F16Tiles[] = F16_TILES[16];
// [M, N, K]: M odd to the tile and to 16, N odd to the tile, K from one group to 2048.
const SHAPES: [number, number, number][] = [
  [1, 16, 32],
  [77, 200, 320],
  [130, 129, 96],
  [300, 515, 2048],
];
// dX = dY [M, N]·W [N, K]: N (the reduction) a multiple of 32.
const DX_SHAPES: [number, number, number][] = [
  [1, 32, 64],
  [45, 96, 192],
  [130, 384, 320],
  [77, 2048, 576],
];
// f32 weights (the vision tower's dense layers at a 448x448 image: 784 patches, 196 merged, and the
// headline shape): rounded to f16 a call (gemmDense, its expansion timed), as int8 copies, or on the
// f32 GEMM.
const DENSE: [number, number, number][] = [
  [784, 3072, 1024],
  [784, 4096, 1024],
  [784, 1024, 4096],
  [196, 4096, 4096],
  [8192, 6144, 2048],
];
const SPEED: [number, number, number][] = [
  [8192, 6144, 2048],
  [2816, 12288, 2048],
  [2816, 2048, 6144],
];

const args = parseArgs(process.argv.slice(2));
const extra = args.optStr('dawn');
const gpu = await createNodeGpu({ unsafeApis: true, f16: true, dawnFlags: ['disable-dawn-features=timestamp_quantization', ...(extra ? [extra] : [])] });
const only = args.optStr('only');
const why = f16UnsupportedOn(gpu);
if (why) {
  console.log(`skipped: ${why}`);
  process.exit(0);
}
const checks = accuracyReporter();
const report = checks.report;
let failed = false;
const name = (t: F16Tile) => `${t.rows}x${t.cols}/${t.threads} 2x${t.tn}${t.buffers === 1 ? ' one buffer' : ''}`;
const ops: { name: string; op: MatmulQ4F16 }[] = [];
const seen = new Set<string>();
// Each entry as the engine runs it (small grids of the f16 tile on the q4 tile), its f16 tile on
// every grid (wideFrom 0), and its Q4 tile dequantizing in the kernel.
// The engine's op takes the one-wave tile where it knows the GPU's multiprocessors (`--wave-slots`
// overrides); 'one wave' puts every product on f16 weights on that tile.
const waveSlots = args.optStr('wave-slots') !== undefined ? args.num('wave-slots') : capabilitiesOf(gpu).multiprocessors;
for (const tiles of TILES)
  for (const mode of ['expand', 'wide', 'one wave', 'q4'] as const) {
    if ((mode === 'wide' && oneTile(tiles)) || (mode === 'one wave' && !tiles.oneWave)) continue;
    const n = mode === 'expand' ? `${name(tiles.f16)}${tiles.oneWave && waveSlots ? ` (${name(tiles.oneWave)} for one wave of ${waveSlots})` : ''}` : mode === 'wide' ? `${name(tiles.f16)} on every grid` : mode === 'one wave' ? `${name(tiles.oneWave!)} on every grid` : `${name(tiles.q4)}, W dequantized in the kernel`;
    if (seen.has(n) || (only !== undefined && !n.includes(only))) continue;
    seen.add(n);
    const opts = mode === 'q4' ? { tiles, expandMaxWords: 0 } : mode === 'wide' ? { tiles, wideFrom: 0 } : mode === 'one wave' ? { tiles: { f16: tiles.oneWave!, q4: tiles.q4 }, wideFrom: 0 } : { tiles, waveSlots };
    try {
      ops.push({ name: n, op: await MatmulQ4F16.create(gpu, { maxRows: 8192, maxK: 6144, ...opts }) });
    } catch (e) {
      failed = true;
      console.log(`FAIL ${n}: ${(e as Error).message}`);
    }
  }
const denseChecksOnly = args.optStr('checks') === 'dense';
for (const { name: n, op } of args.bool('no-check') ? [] : ops) {
  for (const [i, shape] of SHAPES.entries()) for (const dtype of ['bf16', 'f32'] as const) report(n, await checkF16Dense(gpu, op, shape, 300 + i, dtype));
  if (denseChecksOnly) continue;
  for (const [i, shape] of SHAPES.entries()) report(n, await checkQ4F16(gpu, op, shape, 100 + i));
  for (const [i, shape] of DX_SHAPES.entries()) report(n, await checkQ4F16(gpu, op, shape, 200 + i, true));
  if (op.expandMaxWords === 0) continue;
  report(n, await checkQ4F16Joined(gpu, op, 77, [512, 256, 256], 320, 600, 16));
  for (const r of [8, 16, 64]) {
    for (const [i, shape] of SHAPES.entries()) report(`${n}, LoRA r ${r}`, await checkQ4F16Lora(gpu, op, shape, 400 + i, false, r));
    for (const [i, shape] of DX_SHAPES.entries()) report(`${n}, LoRA r ${r}`, await checkQ4F16Lora(gpu, op, shape, 500 + i, true, r));
  }
}

if (args.bool('ablate')) await ablate();
const joinedRows = args.optStr('joined');
if (joinedRows) await joined(joinedRows.split(',').map(Number));

if (!args.bool('no-speed')) {
  const fill = await Filler.create(gpu);
  const int8 = await MatmulQ4Mma.create(gpu, tensorCoreOptions(2, 8192, 6144));
  const timed = [...ops.map((o) => ({ ...o, kernels: /^matmul_q4_f16/ })), { name: 'int8 two limbs (products int8)', kernels: /^matmul_q4_mma\./, op: int8 }];
  const shapes = args.optStr('shapes')?.split(',').map((t) => t.split('x').map(Number) as [number, number, number]) ?? SPEED;
  for (const shape of shapes) await timeQ4Gemms(gpu, fill, shape, timed);
  const mm = await Matmul.create(gpu);
  const f16 = ops.find((o) => o.op.expandMaxWords > 0)?.op;
  const dense = args.optStr('dense')?.split(',').map((t) => t.split('x').map(Number) as [number, number, number]) ?? DENSE;
  for (const [m, n, k] of dense) {
    if (!f16) break;
    const rec = gpu.recorder('setup');
    const w = gpu.tensor([n, k], 'f32', 'w');
    const x = gpu.tensor([m, k], 'f32', 'x');
    const y = gpu.tensor([m, n], 'f32', 'y');
    const b = gpu.tensor([n], 'f32', 'b');
    fill.fill(rec, w, 'uniform', 0.02);
    fill.fill(rec, x, 'uniform', 1);
    fill.fill(rec, b, 'uniform', 1);
    const wb = mm.halves.toBf16(rec, w, 'w.bf16');
    const w8 = int8.quantizeDense(rec, w, n, k, 'w');
    await rec.submit();
    const tflops = (ms: number) => ((2 * m * n * k) / ms / 1e9).toFixed(1);
    // The f16 GEMM with its bias, on W as the tower holds it (bf16) and rounded from f32 a call.
    const t16 = await inStreamMs(gpu, /^matmul_q4_f16/, (r) => f16.gemmDense(r, x, [{ w: wb, y, b }]));
    const t16f = await inStreamMs(gpu, /^matmul_q4_f16/, (r) => f16.gemmDense(r, x, [{ w, y, b }]));
    const t8 = await inStreamMs(gpu, /^matmul_q4_mma\./, (r) => int8.gemmInt8(r, x, [{ w: w8, y }]));
    const t32 = await inStreamMs(gpu, /^matmul\.gemm/, (r) => mm.gemm(r, { a: x, b: w, c: y, m, n, k, transB: true, bias: b }));
    console.log(`dense M${m} N${n} K${k}: f16 on bf16 W with its bias ${t16.toFixed(3)} ms (${tflops(t16)} TFLOP/s), on f32 W ${t16f.toFixed(3)} ms (${tflops(t16f)}), int8 without the bias ${t8.toFixed(3)} ms (${tflops(t8)}), f32 with it ${t32.toFixed(3)} ms (${tflops(t32)})`);
    for (const t of [w, wb, b, x, y, w8.w8, w8.steps]) t.release();
  }
}
process.exit(failed || checks.failed ? 1 : 0);

async function ablate(): Promise<void> {
  const [m, n, k] = [8192, 6144, 2048];
  const tile = DEFAULT_F16_TILES.f16;
  const [rowScale] = await compileMatrixKernels(gpu, 'matmul_q4_f16', [{ shader: 'f16_row_scale', entry: 'row_scale', uniforms: ROW_SCALE_UNIFORMS.plain }], rowScaleDefines(false));
  const op = await MatmulQ4F16.create(gpu, { maxRows: 128, maxK: k });
  const fill = await Filler.create(gpu);
  const rec = gpu.recorder('setup');
  const x = fill.fill(rec, gpu.tensor([m, k], 'f32', 'x'), 'uniform', 1);
  const w = fill.fill(rec, gpu.tensor([n, k], 'f32', 'w'), 'uniform', 0.02);
  const w16 = op.toF16(rec, w, n, k, 'w');
  const rs = gpu.tensor([m], 'f32', 'rs');
  const x16 = gpu.tensor([f16BlockedWords(m, k)], 'u32', 'x16');
  const y = gpu.tensor([m, n], 'f32', 'y');
  rec.dispatch(rowScale, { x, rs, x16 }, grid1d(m, 1), { m, k });
  await rec.submit();
  // Rows of the staged tiles 32 f16 apart (pad 0) and 40 (the kernel's): what bank conflicts cost.
  // Wider pads pass the 48 KiB of workgroup memory.
  for (const pad of [0, 8]) {
    const [kernel] = await compileMatrixKernels(gpu, 'matmul_q4_f16.ablate', [{ shader: 'matmul_q4_f16', entry: 'gemm', uniforms: F16_GEMM_UNIFORMS }], { ...f16GemmDefines(tile, 16, 16), AS_PAD: pad, W16: true, DINPUT: false, ABLATE: true });
    const parts: string[] = [];
    for (const [label, bits] of [['whole kernel', 0], ['no global loads', 2], ['no staging stores', 4], ['no MMAs', 8], ['neither loads nor stores', 6], ['MMAs alone, no barriers', 22], ['barriers alone', 14]] as const) {
      const ms = await inStreamMs(gpu, /ablate/, (r) => r.dispatch(kernel, { x: x16, rs, w16, y, bias_v: rs }, [Math.ceil(n / tile.cols), Math.ceil(m / tile.rows)], { m, n, k, accumulate: bits, split1: n, split2: n, bias: 0 }));
      parts.push(`${label} ${ms.toFixed(3)} ms (${((2 * m * n * k) / ms / 1e9).toFixed(0)} TFLOP/s)`);
    }
    console.log(`ablation, pad ${pad}, ${tile.rows}x${tile.cols}/${tile.threads} on f16 W, M${m} N${n} K${k}: ${parts.join('; ')}`);
  }
  for (const t of [x, w, w16, rs, x16, y]) t.release();
  op.release();
}

/** q, k and v of the 2B (2048, 1024, 1024 columns, K 2048) on one x with rank-8 adapters: joined, then apart. */
async function joined(rowCounts: readonly number[]): Promise<void> {
  const [k, r, ns] = [2048, 8, [2048, 1024, 1024]];
  const op = await MatmulQ4F16.create(gpu, { maxRows: 8192, maxK: 6144, waveSlots });
  const fill = await Filler.create(gpu);
  const rec = gpu.recorder('setup');
  const ws = ns.map((n, i) => randomQ4Blocks(gpu, rec, fill, n, k, `w${i}`, n)[0]);
  const Bs = ns.map((n, i) => fill.fill(rec, gpu.tensor([n, r], 'f32', `B${i}`), 'uniform', 0.05));
  await rec.submit();
  for (const m of rowCounts) {
    const setup = gpu.recorder('setup');
    const x = fill.fill(setup, gpu.tensor([m, k], 'f32', 'x'), 'uniform', 1);
    const us = ns.map((_, i) => fill.fill(setup, gpu.tensor([m, r], 'f32', `u${i}`), 'uniform', 1));
    const stacked = gpu.tensor([m * 4096], 'f32', 'qkv');
    const apart = ns.map((n, i) => gpu.tensor([m, n], 'f32', `y${i}`));
    await setup.submit();
    let at = 0;
    const views = ns.map((n) => {
      const v = new Tensor(stacked.buffer, [m, n], 'f32', 'qkv', stacked.byteOffset + 4 * at);
      at += m * n;
      return v;
    });
    const outs = (ys: readonly Tensor[]) => ys.map((y, i) => ({ w: ws[i], y, lora: { u: us[i], B: Bs[i], r, scale: 2 } }));
    if (!op.joins(outs(views), m) || op.joins(outs(apart), m)) throw new Error('joined: the op does not join the stacked outputs, or joins the apart ones');
    const tj = await inStreamMs(gpu, /^matmul_q4_f16/, (rr) => op.gemmShared(rr, x, outs(views)));
    const ta = await inStreamMs(gpu, /^matmul_q4_f16/, (rr) => op.gemmShared(rr, x, outs(apart)));
    const tflops = (ms: number) => ((2 * m * 4096 * (k + 32)) / ms / 1e9).toFixed(1);
    console.log(`q/k/v at ${m} rows, LoRA r ${r}, expansions and row scaling included: joined ${tj.toFixed(3)} ms (${tflops(tj)} TFLOP/s), apart ${ta.toFixed(3)} ms (${tflops(ta)})`);
    for (const t of [x, ...us, stacked, ...apart]) t.release();
  }
  releaseQ4(ws);
  for (const t of Bs) t.release();
  op.release();
}
