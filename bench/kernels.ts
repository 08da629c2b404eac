// Kernel benchmarks through Dawn: the suites of src/bench/suites.ts (every family on the shapes of
// Qwen3-VL-2B, bench/shapes.json; rates beside the read bandwidth measured in the same run or the
// card's fp32 datasheet peak, bench/peaks.ts; option sweeps with the best reported, all tries in
// the JSON). The app's Benchmark page runs the same suites in the browser.
//
//   npm run bench:build
//   node .bench/kernels.mjs [--quick] [--json FILE] [--reps N] [--only gemv,gemm,...]
//     [--gemv-weights NxK,... --gemv-rows M,...]  (the GEMV suite on other shapes)
// --quick shrinks every shape (and the option sweeps) for a check on software Vulkan:
//   VLRL_VK=lavapipe node .bench/kernels.mjs --quick
// bench/torch_kernels.py times the same shapes in PyTorch; bench/report.ts merges the two.
import { writeFileSync } from 'node:fs';
import { rowsMarkdown } from '../src/bench/harness';
import { runSuites, SUITES, type RunResult, type Suite } from '../src/bench/suites';
import { createNodeGpu } from '../src/node/gpu';
import { cardPeak } from './peaks';

const args = process.argv.slice(2);
const flag = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const QUICK = args.includes('--quick');
const reps = flag('reps');
const only = flag('only')?.split(',');
const unknown = only?.filter((s) => !(SUITES as readonly string[]).includes(s));
if (unknown?.length) throw new Error(`--only: unknown suites ${unknown.join(', ')} (known: ${SUITES.join(', ')})`);

/** --gemv-weights 4096x2048,12288x2048 and --gemv-rows 2,8: the GEMV suite on other shapes. */
function gemvShapes(): { weights?: [number, number][]; rows?: number[] } | undefined {
  const w = flag('gemv-weights');
  const r = flag('gemv-rows');
  if (!w && !r) return undefined;
  return {
    weights: w?.split(',').map((s) => s.split('x').map(Number) as [number, number]),
    rows: r?.split(',').map(Number),
  };
}

async function main(): Promise<void> {
  // Dawn rounds timestamps down to multiples of 2^16 ns unless timestamp_quantization is off:
  // useless for kernels of 10 to 100 µs. allow_unsafe_apis exposes subgroup matrices.
  // --dawn-enable adds toggles (e.g. disable_robustness, an upper bound Chrome never ships).
  const enable = ['allow_unsafe_apis', ...(flag('dawn-enable')?.split(',') ?? [])];
  const gpu = await createNodeGpu({ dawnFlags: [`enable-dawn-features=${enable.join(',')}`, 'disable-dawn-features=timestamp_quantization'] });
  const peak = cardPeak(`${gpu.adapter.name} ${gpu.adapter.description}`);
  console.log(`adapter: ${gpu.adapter.name}; features: ${[...gpu.features].join(', ')}${QUICK ? '; QUICK shapes' : ''}`);
  const t0 = performance.now();
  const out = flag('json');
  // Written after every suite, so a run cut short still leaves what it measured.
  const save = ({ readGBs, rows, sweeps }: RunResult) => {
    if (!out) return;
    const result = {
      tool: 'webgpu (Dawn)',
      command: `node .bench/kernels.mjs ${args.join(' ')}`,
      adapter: gpu.adapter,
      features: [...gpu.features],
      date: new Date().toISOString(),
      quick: QUICK,
      peak,
      readGBs,
      seconds: (performance.now() - t0) / 1000,
      rows,
      sweeps,
    };
    writeFileSync(out, JSON.stringify(result, null, 1));
  };
  const result = await runSuites(gpu, {
    preset: QUICK ? 'quick' : 'full',
    suites: only as Suite[] | undefined,
    maxReps: reps === undefined ? undefined : Number(reps),
    fp32Tflops: peak?.fp32Tflops,
    int8Tops: peak?.int8Tops,
    gemv: gemvShapes(),
    onSuiteDone: (name, seconds, soFar) => {
      save(soFar);
      console.error(`${name}: ${seconds.toFixed(1)} s`);
    },
  });
  save(result);
  console.log(rowsMarkdown(result.rows).join('\n'));
  process.exit(0);
}

await main();
