// The 4-bit GEMV at 2 to 8 rows of x (decode of a few sequences) on the decoder's weights, as a
// decode step runs it: int8 x given ready-made (GemvCall.xq), the layout matmulQ4Tuning.ts picks,
// in stream per call (src/bench/harness.ts's measure), the weight's copies cycled past L2.
// --ablate: the same kernel built without part of its work (shaders/matmul_q4_gemv_rows.wgsl's
// ABLATE builds), to see what bounds it: without the weights' loads (the arithmetic and x's loads
// alone), without the arithmetic (the weight stream alone), without x's loads. The tool's own build
// of the whole kernel must write what the engine's does, bit for bit.
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/gemvRows.mjs [--ablate] [--quick]
// --quick: one small shape, two copies (a check on software Vulkan).
import { createNodeGpu } from '../../src/node/gpu';
import { int8GroupWords, MatmulQ4 } from '../../src/ops/matmulQ4';
import { gemvLayout } from '../../src/ops/matmulQ4Tuning';
import { Filler } from '../../src/bench/fill';
import { measure } from '../../src/bench/harness';
import { q4Bytes, randomQ4Blocks, releaseQ4 } from '../../src/bench/q4';
import { grid1d } from '../../src/gpu/grid';
import type { Kernel, Recorder, Tensor } from '../../src/gpu';
import type { Q4Weight } from '../../src/ops/matmulQ4';

const QUICK = process.argv.includes('--quick');
const ABLATE = process.argv.includes('--ablate');
// Qwen3-VL-2B: o_proj, joined q/k/v, joined gate/up, down_proj.
const SHAPES: [number, number][] = QUICK
  ? [[256, 512]]
  : [
      [2048, 2048],
      [4096, 2048],
      [12288, 2048],
      [2048, 6144],
    ];
const ROWS = QUICK ? [8] : [2, 8];
// Each ablation's build: its define beside ABLATE.
const ABLATIONS: [string, string][] = [
  ['whole kernel', ''],
  ['no weight loads', 'ABLATE_W'],
  ['no arithmetic', 'ABLATE_ARITH'],
  ['no x loads', 'ABLATE_X'],
];
// The int8 GEMV's params struct (shaders/matmul_q4_gemv_rows.wgsl), in order.
const UNIFORMS = { m: 'u32', n: 'u32', k: 'u32', accumulate: 'u32', split1: 'u32', split2: 'u32', lora_r: 'u32', lora_np: 'u32', lora_s: 'f32' } as const;

const gpu = await createNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const fill = await Filler.create(gpu);
const mm = await MatmulQ4.create(gpu);
const rankZero = gpu.tensor([4], 'f32', 'rank_zero');
const us = (ms: number) => (1000 * ms).toFixed(2);
let failed = false;

/** The engine's kernel for m rows on [n, k], built with `ablate` (a define; '': the whole kernel):
 * the layout's pipeline constants as matmulQ4.ts sets them for x from quantize_x, with the LoRA
 * epilogue at rank 0 (the decoder's GEMVs of a few rows run that kernel). */
function ablationKernel(m: number, n: number, k: number, ablate: string): { kernel: Kernel; groups: number } {
  const g = gemvLayout(m, n, k, true);
  if (!g.preq || g.persist) throw new Error(`gemvRows --ablate: the layout for ${m} rows of [${n}, ${k}] is not the int8 one it knows (${JSON.stringify(g)})`);
  const TPR = Math.min(g.threadsPerRow, 2 ** Math.ceil(Math.log2(k / 32)));
  const TG = g.groups;
  const kernel = gpu.kernelNow({
    name: `matmul_q4.gemv_ablate${ablate}`,
    shader: 'matmul_q4_gemv_rows',
    entry: 'gemv_rows_i8',
    uniforms: UNIFORMS,
    constants: { TPR, TG, PERSIST: 0, M: m, XS: TPR * TG * m, XQ: 1 },
    defines: { LORA: true, PREQ: true, ABLATE: true, ...(ablate ? { [ablate]: true } : {}) },
  });
  return { kernel, groups: Math.ceil(n / (4 * TG)) };
}

// The list twice: the first pass runs while the GPU's clocks rise; the second is printed.
for (const pass of QUICK ? [1] : [0, 1]) {
  for (const [n, k] of SHAPES) {
    const copies = QUICK ? 2 : Math.max(2, Math.min(64, Math.ceil((256 * 2 ** 20) / q4Bytes(n, k))));
    const setup = gpu.recorder('setup');
    const ws = Array.from({ length: copies }, (_, c) => randomQ4Blocks(gpu, setup, fill, n, k, `w${c}`)[0]);
    await setup.submit();
    for (const m of ROWS) {
      const rec = gpu.recorder('inputs');
      const x = fill.fill(rec, gpu.tensor([m, k], 'f32', 'x'), 'uniform', 0.05);
      const xq = gpu.tensor([int8GroupWords(m, k)], 'u32', 'xq');
      mm.quantizeX(rec, x, xq);
      await rec.submit();
      if (!mm.takesQuantizedX(m, ws[0], true)) throw new Error(`${m} rows of [${n}, ${k}] do not take int8 x on this device`);
      const y = gpu.tensor([m, n], 'f32', 'y');
      const time = async (f: (r: Recorder, w: Q4Weight) => void) => {
        const t = await measure(gpu, /matmul_q4\.gemv/, (r) => ws.forEach((w) => f(r, w)), { maxReps: 12, gpuOnly: true, calls: copies });
        return us(t.passMs ?? t.ms);
      };
      const parts = [`engine ${await time((r, w) => mm.gemv(r, x, w, y, false, { int8: true, xq }))}`];
      if (ABLATE) {
        const dispatch = (r: Recorder, build: { kernel: Kernel; groups: number }, w: Q4Weight, out: Tensor) =>
          r.dispatch(build.kernel, { codes4: w.codes, scales: w.scales, x, y: out, lora_parts: rankZero, lora_b: rankZero, xq_in: xq }, grid1d(build.groups, 1), { m, n, k, accumulate: 0, split1: n, split2: n, lora_r: 0, lora_np: 0, lora_s: 0 });
        const builds = ABLATIONS.map(([, define]) => ablationKernel(m, n, k, define));
        const whole = gpu.tensor([m, n], 'f32', 'y_ablate');
        const check = gpu.recorder('check');
        mm.gemv(check, x, ws[0], y, false, { int8: true, xq });
        dispatch(check, builds[0], ws[0], whole);
        await check.submit();
        const [a, b] = await Promise.all([gpu.readF32(y), gpu.readF32(whole)]);
        if (a.some((v, i) => !Object.is(v, b[i]))) {
          failed = true;
          console.error(`gemvRows: the tool's build of the whole kernel differs from the engine's on ${m} rows of [${n}, ${k}]`);
        }
        whole.release();
        for (const [i, [label]] of ABLATIONS.entries()) parts.push(`${label} ${await time((r, w) => dispatch(r, builds[i], w, y))}`);
      }
      if (pass === 1) console.log(`${m} rows of ${n}x${k} (${(q4Bytes(n, k) / 2 ** 20).toFixed(2)} MiB, ${copies} copies), µs a call in stream: ${parts.join('; ')}`);
      for (const t of [x, xq, y]) t.release();
    }
    ws.forEach((w) => releaseQ4([w]));
  }
}
rankZero.release();
process.exit(failed ? 1 : 0);
