// The 4-bit GEMV at 2 to 8 rows of x (decode of a few sequences) on the decoder's weights, as a
// decode step runs it: int8 x given ready-made (GemvCall.xq), the layout matmulQ4Tuning.ts picks,
// in stream per call (src/bench/harness.ts's measure), the weight's copies cycled past L2.
// --ablate: the same kernel built without part of its work (shaders/matmul_q4_gemv_rows.wgsl's
// ABLATE builds), to see what bounds it: without the weights' loads (the arithmetic and x's loads
// alone), without the arithmetic (the weight stream alone), without x's loads. The tool's own build
// of the whole kernel must write what the engine's does, bit for bit.
// --layouts: the same kernel in other layouts (lanes per block of 4 rows of W x row blocks per
// workgroup), each checked against the engine's output: what a fatter or thinner workgroup costs.
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/gemvRows.mjs [--ablate] [--layouts] [--head] [--quick]
// --head: the LM head (151936x2048) at 8 rows instead, whose layout is its own (I8Q_HEAD).
// --quick: one small shape, two copies (a check on software Vulkan).
// --warm: also the engine's call at 1 and 8 rows with every call on the first copy (its weight
// left in L2 by the call before): what a weight already in L2 would save the call.
import { createNodeGpu } from '../../src/node/gpu';
import { int8GroupWords, MatmulQ4 } from '../../src/ops/matmulQ4';
import { Filler } from '../../src/bench/fill';
import { measure } from '../../src/bench/harness';
import { DECODER_GEMV_SHAPES, q4Bytes, randomQ4Blocks, releaseQ4 } from '../../src/bench/q4';
import { grid1d } from '../../src/gpu/grid';
import type { Kernel, KernelSpec, Recorder, Tensor } from '../../src/gpu';
import type { Q4Weight } from '../../src/ops/matmulQ4';

const QUICK = process.argv.includes('--quick');
const ABLATE = process.argv.includes('--ablate');
const LAYOUTS = process.argv.includes('--layouts');
const WARM = process.argv.includes('--warm');
const HEAD: [number, number] = [151936, 2048];
// (lanes per block of 4 rows, row blocks per workgroup)
const OTHER_LAYOUTS: [number, number][] = QUICK ? [[8, 8]] : [[32, 2], [32, 4], [32, 8], [16, 4], [16, 8], [16, 16], [16, 32], [8, 4], [8, 8], [8, 16], [8, 32], [4, 16], [4, 32], [64, 1], [64, 2], [64, 4], [128, 1], [128, 2], [128, 4]];
const SHAPES = QUICK ? [[256, 512]] : process.argv.includes('--head') ? [HEAD] : DECODER_GEMV_SHAPES;
// The head's int8 layout takes 5 to 8 rows (matmulQ4Tuning.ts).
const rowsOf = (n: number) => (QUICK || n === HEAD[0] ? [8] : WARM ? [1, 2, 8] : [2, 8]);
// Each ablation's build: its define beside ABLATE.
const ABLATIONS: [string, string][] = [
  ['whole kernel', ''],
  ['no weight loads', 'ABLATE_W'],
  ['no arithmetic', 'ABLATE_ARITH'],
  ['no x loads', 'ABLATE_X'],
];

const gpu = await createNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const fill = await Filler.create(gpu);
const mm = await MatmulQ4.create(gpu);
const rankZero = gpu.tensor([4], 'f32', 'rank_zero');
const noResidual = gpu.tensor([4], 'f32', 'no_residual');
const us = (ms: number) => (1000 * ms).toFixed(2);
let failed = false;

/** A build of the engine's kernel for m rows on w (MatmulQ4.gemvSpec), and its grid. */
interface Build {
  kernel: Kernel;
  groups: number;
  epilogue: boolean;
}

/** The engine's int8 kernel for m rows on w, changed by `vary` (its spec in, the build's spec and
 * grid out); `what` names the mode in the error where the call does not take that kernel. */
function variant(m: number, w: Q4Weight, what: string, vary: (spec: KernelSpec, groups: number) => { spec: KernelSpec; groups: number }): Build {
  const engine = mm.gemvSpec(m, w, true);
  if (engine.spec.entry !== 'gemv_rows_i8' || !engine.spec.defines?.PREQ) throw new Error(`gemvRows ${what}: ${m} rows of [${w.n}, ${w.k}] do not run the int8 kernel on x from quantize_x (${engine.spec.entry})`);
  const { spec, groups } = vary(engine.spec, engine.groups);
  return { kernel: gpu.kernelNow(spec), groups, epilogue: spec.defines?.LORA === true };
}

/** The build with `ablate` (a define beside ABLATE; '': the whole kernel). */
const ablationKernel = (m: number, w: Q4Weight, ablate: string): Build =>
  variant(m, w, '--ablate', (spec, groups) => ({ spec: { ...spec, name: `${spec.name}_ablate${ablate}`, defines: { ...spec.defines, ABLATE: true, ...(ablate ? { [ablate]: true } : {}) } }, groups }));

/** The build in another layout: tpr lanes a block of 4 rows, tg blocks a workgroup (the partial
 * sums' workgroup memory resized). */
const layoutKernel = (m: number, w: Q4Weight, tpr: number, tg: number): Build =>
  variant(m, w, '--layouts', (spec) => ({ spec: { ...spec, name: `${spec.name}_layout${tpr}x${tg}`, constants: { ...spec.constants, TPR: tpr, TG: tg, XS: tpr * tg * m } }, groups: Math.ceil(w.n / (4 * tg)) }));

// The list twice: the first pass runs while the GPU's clocks rise; the second is printed.
for (const pass of QUICK ? [1] : [0, 1]) {
  for (const [n, k] of SHAPES) {
    const copies = QUICK ? 2 : Math.max(2, Math.min(64, Math.ceil((256 * 2 ** 20) / q4Bytes(n, k))));
    const setup = gpu.recorder('setup');
    const ws = Array.from({ length: copies }, (_, c) => randomQ4Blocks(gpu, setup, fill, n, k, `w${c}`)[0]);
    await setup.submit();
    for (const m of rowsOf(n)) {
      const rec = gpu.recorder('inputs');
      const x = fill.fill(rec, gpu.tensor([m, k], 'f32', 'x'), 'uniform', 0.05);
      const xq = gpu.tensor([int8GroupWords(m, k)], 'u32', 'xq');
      mm.quantizeX(rec, x, xq);
      await rec.submit();
      const y = gpu.tensor([m, n], 'f32', 'y');
      const time = async (f: (r: Recorder, w: Q4Weight) => void) => {
        const t = await measure(gpu, /matmul_q4\.gemv/, (r) => ws.forEach((w) => f(r, w)), { maxReps: 12, gpuOnly: true, calls: copies });
        return us(t.passMs ?? t.ms);
      };
      if (m === 1) {
        // One row: f32 x, the engine's one-row layouts (only with --warm).
        const cold = await time((r, w) => mm.gemv(r, x, w, y, false));
        const warm = await time((r) => mm.gemv(r, x, ws[0], y, false));
        if (pass === 1) console.log(`1 row of ${n}x${k}, µs a call in stream: engine ${cold}; weight in L2 ${warm}`);
        for (const t of [x, xq, y]) t.release();
        continue;
      }
      if (!mm.takesQuantizedX(m, ws[0], true)) throw new Error(`${m} rows of [${n}, ${k}] do not take int8 x on this device`);
      const parts = [`engine ${await time((r, w) => mm.gemv(r, x, w, y, false, { int8: true, xq }))}`];
      if (WARM) parts.push(`weight in L2 ${await time((r) => mm.gemv(r, x, ws[0], y, false, { int8: true, xq }))}`);
      const dispatch = (r: Recorder, build: Build, w: Q4Weight, out: Tensor) =>
        r.dispatch(build.kernel, { codes4: w.codes, scales: w.scales, x, y: out, xq_in: xq, ...(build.epilogue ? { lora_parts: rankZero, lora_b: rankZero, residual: noResidual } : {}) }, grid1d(build.groups, 1), { m, n, k, accumulate: 0, split1: n, split2: n, lora_r: 0, lora_np: 0, lora_s: 0, res_add: 0, res_wg0: 0, res_r: 0, res_np: 0, res_s: 0 });
      /** The engine's y and the build's on the first copy of the weight. */
      const againstEngine = async (build: Build): Promise<[Float32Array, Float32Array]> => {
        const out = gpu.tensor([m, n], 'f32', 'y_build');
        const check = gpu.recorder('check');
        mm.gemv(check, x, ws[0], y, false, { int8: true, xq });
        dispatch(check, build, ws[0], out);
        await check.submit();
        const got = await Promise.all([gpu.readF32(y), gpu.readF32(out)]);
        out.release();
        return got;
      };
      if (ABLATE) {
        const builds = ABLATIONS.map(([, define]) => ablationKernel(m, ws[0], define));
        const [a, b] = await againstEngine(builds[0]);
        if (a.some((v, i) => !Object.is(v, b[i]))) {
          failed = true;
          console.error(`gemvRows: the tool's build of the whole kernel differs from the engine's on ${m} rows of [${n}, ${k}]`);
        }
        for (const [i, [label]] of ABLATIONS.entries()) parts.push(`${label} ${await time((r, w) => dispatch(r, builds[i], w, y))}`);
      }
      if (LAYOUTS) {
        for (const [tpr, tg] of OTHER_LAYOUTS) {
          if (tpr * tg > gpu.limits.maxComputeInvocationsPerWorkgroup || 16 * tpr * tg * m > gpu.limits.maxComputeWorkgroupStorageSize) continue;
          const build = layoutKernel(m, ws[0], tpr, tg);
          const [a, b] = await againstEngine(build);
          // Another layout sums the lanes' partials in another order: equal to rounding.
          const scale = a.reduce((s, v) => Math.max(s, Math.abs(v)), 0);
          const worst = a.reduce((s, v, i) => Math.max(s, Math.abs(v - b[i])), 0);
          if (!(worst <= 1e-5 * scale)) {
            failed = true;
            console.error(`gemvRows: layout ${tpr}x${tg} differs from the engine's on ${m} rows of [${n}, ${k}] by ${worst} (largest |y| ${scale})`);
          }
          parts.push(`${tpr}x${tg} ${await time((r, w) => dispatch(r, build, w, y))}`);
        }
      }
      if (pass === 1) console.log(`${m} rows of ${n}x${k} (${(q4Bytes(n, k) / 2 ** 20).toFixed(2)} MiB, ${copies} copies), µs a call in stream: ${parts.join('; ')}`);
      for (const t of [x, xq, y]) t.release();
    }
    ws.forEach((w) => releaseQ4([w]));
  }
}
rankZero.release();
noResidual.release();
process.exit(failed ? 1 : 0);
