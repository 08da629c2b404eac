// The int8 tensor-core GEMM's check on a real GPU (software Vulkan has no subgroup matrices): the
// adapter's subgroup-matrix configurations, then every tile on odd shapes against the f64
// reference (src/ops/matmulQ4MmaCheck.ts), the K-blocked ones on f32 weights rounded to int8 too.
// Exits non-zero when a tile fails.
//   npm run bench:build (bundled beside the benchmarks), then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/mmaCheck.mjs [--k-blocked] [--only TEXT]
import { parseArgs } from '../../src/node/args';
import { createNodeGpu } from '../../src/node/gpu';
import { MatmulQ4Mma, mmaUnsupported, type KBlock, type MmaTile } from '../../src/ops/matmulQ4Mma';
import { checkInt8Mma, checkQ4Mma } from '../../src/ops/matmulQ4MmaCheck';
import { accuracyReporter } from './gemmTiming';
import { ShapeError } from '../../src/gpu';

const TILES: MmaTile[] = [
  { rows: 64, cols: 64, threads: 128 },
  { rows: 64, cols: 128, threads: 128 },
  { rows: 128, cols: 64, threads: 128 },
  { rows: 128, cols: 128, threads: 256 },
];
// M not a multiple of 16 or of the tile, N not a multiple of the tile, K from one group to 6144.
const SHAPES: [number, number, number][] = [
  [1, 1, 32],
  [17, 33, 64],
  [77, 200, 320],
  [130, 129, 96],
  [300, 515, 2048],
  [65, 70, 6144],
  [45, 96, 768],
];
// The K-blocked GEMM: tiles of 32x32 per subgroup, blocks of 64..256 along K.
const KB_TILES: MmaTile[] = [
  { rows: 64, cols: 64, threads: 128 },
  { rows: 64, cols: 128, threads: 256 },
  { rows: 128, cols: 64, threads: 256 },
];
const K_BLOCKS: KBlock[] = [64, 128, 256];
// [M, N, K] of dX = dY [M, N]·W [N, K]: N a multiple of the block, K of 64, M and K odd to the tile.
const DX_SHAPES: [number, number, number][] = [
  [1, 128, 64],
  [45, 256, 192],
  [130, 384, 320],
  [77, 2048, 576],
];

const gpu = await createNodeGpu({ dawnFlags: ['enable-dawn-features=allow_unsafe_apis'] });
const info = gpu.device.adapterInfo;
console.log(`adapter: ${gpu.adapter.name}; features: ${[...gpu.features].join(', ')}`);
console.log(`subgroups ${info.subgroupMinSize}..${info.subgroupMaxSize}; workgroup memory ${gpu.limits.maxComputeWorkgroupStorageSize} bytes`);
console.log(`subgroupMatrixConfigs: ${JSON.stringify(gpu.adapter.subgroupMatrixConfigs)}`);
const why = mmaUnsupported(gpu);
if (why) {
  console.log(`skipped: ${why}`);
  process.exit(0);
}
const checks = accuracyReporter();
const report = checks.report;
let failed = false;
const args = parseArgs(process.argv.slice(2));
// --only TEXT: the checks whose name contains TEXT.
const only = args.optStr('only');
async function check(name: string, make: () => Promise<MatmulQ4Mma>): Promise<void> {
  if (only !== undefined && !name.includes(only)) return;
  try {
    const op = await make();
    for (const [i, shape] of SHAPES.entries()) {
      if (shape[2] % op.kBlock !== 0) continue;
      report(name, await checkQ4Mma(gpu, op, shape, 100 + i));
    }
    // The K-blocked input gradient dX = dY·W: blocks along N.
    if (op.kBlock > 32)
      for (const [i, shape] of DX_SHAPES.entries()) if (shape[1] % op.kBlock === 0) report(name, await checkQ4Mma(gpu, op, shape, 200 + i, true));
    // f32 weights rounded to int8 once (quantizeDense, gemmInt8: the vision tower's), steps by block.
    if (op.kBlock > 32 && op.steps === 'block')
      for (const [i, shape] of SHAPES.entries()) if (shape[2] % op.kBlock === 0) report(name, await checkInt8Mma(gpu, op, shape, 300 + i));
    op.release();
  } catch (e) {
    if (e instanceof ShapeError) {
      console.log(`skip ${name}: ${e.message}`);
      return;
    }
    failed = true;
    console.log(`FAIL ${name}: ${(e as Error).message}`);
  }
}
// --k-blocked: the K-blocked variant only.
if (!args.bool('k-blocked'))
  for (const tile of TILES)
    for (const blocked of [true, false])
    await check(`${tile.rows}x${tile.cols}/${tile.threads}${blocked ? ' blocked' : ''}`, () => MatmulQ4Mma.create(gpu, { maxRows: 300, maxK: 6144, tile, blocked }));
for (const tile of KB_TILES)
  for (const kBlock of K_BLOCKS)
    for (const limbs of kBlock === 256 ? ([1] as const) : ([2, 1] as const))
      await check(`${tile.rows}x${tile.cols}/${tile.threads} K block ${kBlock}${limbs === 1 ? ', one limb' : ''}`, () => MatmulQ4Mma.create(gpu, { maxRows: 300, maxK: 6144, tile, kBlock, limbs }));
// One step per row of x and column of W over the whole of K.
for (const tile of KB_TILES) await check(`${tile.rows}x${tile.cols}/${tile.threads} K block 128, steps by row`, () => MatmulQ4Mma.create(gpu, { maxRows: 300, maxK: 6144, tile, kBlock: 128, steps: 'row' }));
// Calls with more rows than the workspace run in slices of maxRows (here 64: M = 77..300 in 2..5).
for (const limbs of [2, 1] as const)
  await check(`128x64/256 K block 128${limbs === 1 ? ', one limb' : ''}, slices of 64 rows`, () => MatmulQ4Mma.create(gpu, { maxRows: 64, maxK: 6144, tile: KB_TILES[2], kBlock: 128, limbs }));
await check('64x128/256 K block 128, steps by row, slices of 64 rows', () => MatmulQ4Mma.create(gpu, { maxRows: 64, maxK: 6144, tile: KB_TILES[1], kBlock: 128, steps: 'row' }));
process.exit(failed || checks.failed ? 1 : 0);
