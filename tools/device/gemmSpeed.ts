// A quick A/B timer for the 4-bit GEMMs (forward and dX) on a few shapes, for comparing shader
// variants built into separate bundles in one device run (the kernel benchmark's gemm suite sweeps
// every GEMM family and takes minutes): the K-blocked int8 tensor-core kernels by default, the f32
// kernels (MatmulQ4's gemm and dinput) with --f32, with --dense the dense f32 GEMM (Matmul, the
// vision tower's layers) on a 448x448 image's shapes in each block shape, and with --split the f32
// 4-bit GEMM at prefill's row counts in 1 to 8 K chunks (MatmulQ4Options.gemmSplit) beside its
// default. Times are the benchmarks' (measure in src/bench/harness.ts): in stream per call, after
// the same warm-up.
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/gemmSpeed.mjs [--f32 | --dense | --split] [--only TEXT]
import { parseArgs } from '../../src/node/args';
import { createNodeGpu } from '../../src/node/gpu';
import { MatmulQ4, type Q4Weight } from '../../src/ops/matmulQ4';
import { MatmulQ4Mma, mmaUnsupported, type KBlock, type MmaSteps, type MmaTile } from '../../src/ops/matmulQ4Mma';
import { Filler } from '../../src/bench/fill';
import { inStreamMs, timeQ4Gemms } from './gemmTiming';
import { randomQ4Blocks, releaseQ4 } from '../../src/bench/q4';
import { GEMM_TILES, Matmul, tileOf, type GemmTile } from '../../src/ops/matmul';
import { Lora } from '../../src/ops/lora';
import { createLoraParams } from '../../src/ops/loraParams';
import type { Recorder, Tensor } from '../../src/gpu';

const CONFIGS: { tile: MmaTile; kBlock: KBlock; limbs: 1 | 2; steps?: MmaSteps }[] = [
  { tile: { rows: 64, cols: 128, threads: 256 }, kBlock: 128, limbs: 2 },
  { tile: { rows: 64, cols: 128, threads: 256 }, kBlock: 128, limbs: 2, steps: 'row' },
  { tile: { rows: 128, cols: 64, threads: 256 }, kBlock: 256, limbs: 1 },
];
// [M, N, K]: the headline shape, then a group step's (8 x 352 rows) gate/up and down.
const SHAPES: [number, number, number][] = [
  [8192, 6144, 2048],
  [2816, 12288, 2048],
  [2816, 2048, 6144],
];

// As bench/kernels.ts: Dawn's timestamps unrounded, subgroup matrices exposed.
const gpu = await createNodeGpu({ dawnFlags: ['enable-dawn-features=allow_unsafe_apis', 'disable-dawn-features=timestamp_quantization'] });
const args = parseArgs(process.argv.slice(2));
const F32 = args.bool('f32');
const DENSE = args.bool('dense');
const SPLIT = args.bool('split');
const why = F32 || DENSE || SPLIT ? null : mmaUnsupported(gpu);
if (why) throw new Error(why);
const fill = await Filler.create(gpu);

const time = (kernels: RegExp, run: (rec: Recorder) => void) => inStreamMs(gpu, kernels, run);

interface Gemm {
  gemm(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor): void;
  backwardInput(rec: Recorder, dy: Tensor, w: Q4Weight, dx: Tensor): void;
}

// --only TEXT: the settings whose name contains TEXT.
const only = args.optStr('only');

// [M, N, K, batch, bias]: two large products for scale, then a 448x448 image's vision tower (784
// patches, 196 after the merge): q, k and v as three products or one batched, the output
// projection, fc1, fc2; the mergers' fc1, fc2.
const DENSE_SHAPES: [number, number, number, number, boolean][] = [
  [8192, 6144, 2048, 1, false],
  [2048, 2048, 2048, 1, false],
  [784, 1024, 1024, 1, true],
  [784, 1024, 1024, 3, true],
  [784, 4096, 1024, 1, true],
  [784, 1024, 4096, 1, true],
  [196, 4096, 4096, 1, true],
  [196, 2048, 4096, 1, true],
];
if (DENSE) {
  const mm = await Matmul.create(gpu);
  for (const [m, n, k, batch, withBias] of DENSE_SHAPES) {
    const rec = gpu.recorder('setup');
    const x = gpu.tensor([m, k], 'f32', 'x');
    const w = gpu.tensor([batch, n, k], 'f32', 'w');
    const b = gpu.tensor([batch, n], 'f32', 'b');
    const y = gpu.tensor([batch, m, n], 'f32', 'y');
    for (const t of [x, w, b]) fill.fill(rec, t, 'uniform', 1);
    await rec.submit();
    const line: string[] = [];
    for (const tile of Object.keys(GEMM_TILES) as GemmTile[]) {
      if (tile === 'tall' || tile === 'wide' || (only !== undefined && !tile.includes(only))) continue;
      const ms = await time(/^matmul\.gemm/, (r) =>
        mm.gemm(r, { a: x, b: w, c: y, m, n, k, transB: true, batch, strideA: 0, strideB: n * k, strideC: m * n, bias: withBias ? b : undefined, strideBias: n, tile }),
      );
      line.push(`${tile} ${ms.toFixed(4)} ms (${((2 * m * n * k * batch) / ms / 1e9).toFixed(1)} TFLOP/s)`);
    }
    console.log(`dense M${m} N${n} K${k}${batch > 1 ? ` x${batch}` : ''}${withBias ? ' +bias' : ''} (default ${tileOf(m, n, k)}): ${line.join(', ')}`);
    for (const t of [x, w, b, y]) t.release();
  }
  process.exit(0);
}
// --split: the decoder's 4-bit weights [N, K] at a prompt's rows: q and o, k and v, gate and up,
// down; then q/k/v and gate/up joined.
const SPLIT_ROWS = [128, 256, 512, 1024, 2048];
const SPLIT_WEIGHTS: [number, number][] = [
  [2048, 2048],
  [1024, 2048],
  [6144, 2048],
  [2048, 6144],
  [4096, 2048],
  [12288, 2048],
];
// --split also times LoRA's thin products x·Aᵀ [T, r] over K = in, in each block shape and K chunks.
const THIN_SHAPES: [number, number, number][] = [
  [512, 16, 2048],
  [512, 16, 6144],
  [2816, 16, 2048],
  [2816, 16, 6144],
  [8192, 16, 2048],
];
if (SPLIT) {
  const mm = await Matmul.create(gpu);
  const lora = await Lora.create(gpu);
  for (const [m, n, k] of THIN_SHAPES) {
    const rec = gpu.recorder('setup');
    const x = gpu.tensor([m, k], 'f32', 'x');
    const a = gpu.tensor([n, k], 'f32', 'a');
    const u = gpu.tensor([m, n], 'f32', 'u');
    for (const t of [x, a]) fill.fill(rec, t, 'uniform', 1);
    await rec.submit();
    const line: string[] = [];
    for (const tile of ['tall', 'square'] as const)
      for (const split of [undefined, 1, 4, 8, 16, 32, 64]) {
        const ms = await time(/^matmul\.gemm/, (r) => mm.gemm(r, { a: x, b: a, c: u, m, n, k, transB: true, tile, split }));
        line.push(`${tile}/${split ?? 'default'} ${(1000 * ms).toFixed(1)}`);
      }
    console.log(`thin M${m} N${n} K${k} (µs): ${line.join(', ')}`);
    // The adapter's up product into y [T, out] for out = K (q_proj-like), in stream.
    const p = createLoraParams(gpu, { name: 'lora', in: k, out: k, r: n, alpha: 2 * n });
    const y = gpu.tensor([m, k], 'f32', 'y');
    const r1 = gpu.recorder('setup');
    for (const t of [p.A, p.B]) fill.fill(r1, t, 'uniform', 1);
    await r1.submit();
    const up = await time(/^lora\.up_add/, (r) => lora.forward(r, p, { x, y, u }));
    console.log(`  lora up_add [${m}, ${n}]·[${n}, ${k}]: ${(1000 * up).toFixed(1)} µs (${((8 * m * k) / up / 1e6).toFixed(0)} GB/s of y read and written)`);
    for (const t of [x, a, u, y, p.A, p.B, p.dA, p.dB]) t.release();
  }
  // LoRA's dA = tᵀ·x [r, in] over K = T rows (C of 16 rows: the wide block).
  for (const [m, n, k] of [[16, 2048, 512], [16, 2048, 2816], [16, 6144, 2816], [16, 2048, 8192]]) {
    const rec = gpu.recorder('setup');
    const t = gpu.tensor([k, m], 'f32', 't');
    const x = gpu.tensor([k, n], 'f32', 'x');
    const dA = gpu.tensor([m, n], 'f32', 'dA');
    for (const v of [t, x]) fill.fill(rec, v, 'uniform', 1);
    await rec.submit();
    const line: string[] = [];
    for (const split of [undefined, 1, 4, 8, 16, 32, 64]) {
      const ms = await time(/^matmul\.gemm/, (r) => mm.gemm(r, { a: t, b: x, c: dA, m, n, k, transA: true, beta: 1, tile: 'wide', split }));
      line.push(`wide/${split ?? 'default'} ${(1000 * ms).toFixed(1)}`);
    }
    console.log(`thin M${m} N${n} K${k} tᵀ·x (µs): ${line.join(', ')}`);
    for (const v of [t, x, dA]) v.release();
  }

  const variants = await Promise.all([undefined, 1, 2, 3, 4, 6, 8].map(async (gemmSplit) => ({ gemmSplit, mm: await MatmulQ4.create(gpu, { gemmSplit }) })));
  for (const [n, k] of SPLIT_WEIGHTS) {
    const rec = gpu.recorder('setup');
    const [w] = randomQ4Blocks(gpu, rec, fill, n, k, 'w', n);
    await rec.submit();
    for (const m of SPLIT_ROWS) {
      if (only !== undefined && !`M${m} N${n} K${k}`.includes(only)) continue;
      const x = gpu.tensor([m, k], 'f32', 'x');
      const y = gpu.tensor([m, n], 'f32', 'y');
      const r0 = gpu.recorder('setup');
      fill.fill(r0, x, 'uniform', 1);
      await r0.submit();
      const line: string[] = [];
      for (const { gemmSplit, mm } of variants) {
        const ms = await time(/^matmul_q4\.gemm$/, (r) => mm.gemm(r, x, w, y));
        line.push(`${gemmSplit ?? 'default'} ${(1000 * ms).toFixed(1)} µs (${((2 * m * n * k) / ms / 1e9).toFixed(1)})`);
      }
      console.log(`split M${m} N${n} K${k} (${Math.ceil(n / 64) * Math.ceil(m / 128)} tiles; chunks, µs, TFLOP/s): ${line.join(', ')}`);
      for (const t of [x, y]) t.release();
    }
    releaseQ4([w]);
  }
  process.exit(0);
}
const ops: { name: string; kernels: RegExp; make: () => Promise<Gemm & { release?: () => void }> }[] = F32
  ? [{ name: 'f32 kernels', kernels: /^matmul_q4\.(gemm|dinput)$/, make: () => MatmulQ4.create(gpu) }]
  : CONFIGS.map((c) => ({
      name: `${c.tile.rows}x${c.tile.cols}/${c.tile.threads} K block ${c.kBlock}, ${c.limbs} limb${c.limbs > 1 ? 's' : ''}${c.steps === 'row' ? ', steps by row' : ''}`,
      kernels: /^matmul_q4_mma\./,
      make: () => MatmulQ4Mma.create(gpu, { maxRows: 8192, maxK: 6144, ...c }),
    }));

for (const { name, kernels, make } of ops) {
  if (only !== undefined && !name.includes(only)) continue;
  const op = await make();
  for (const shape of SHAPES) await timeQ4Gemms(gpu, fill, shape, [{ name, kernels, op }]);
  op.release?.();
}
process.exit(0);
