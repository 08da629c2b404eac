// What the device tools for the 4-bit GEMMs share (gemmSpeed, mmaCheck, f16Gemm): the accuracy line
// of a check, and the forward/dX timing of ops on random Q4 weights at [M, N, K] shapes.
import type { Gpu, Recorder, Tensor } from '../../src/gpu';
import { measure, WARM_MS } from '../../src/bench/harness';
import type { Filler } from '../../src/bench/fill';
import { randomQ4Blocks, releaseQ4 } from '../../src/bench/q4';
import type { Q4Weight } from '../../src/ops/matmulQ4';
import type { MmaAccuracy } from '../../src/ops/matmulQ4MmaCheck';

/** Prints one line per check, ok or FAIL (error within its bound or not); `failed` after any FAIL. */
export function accuracyReporter(): { report: (name: string, a: MmaAccuracy) => void; readonly failed: boolean } {
  let failed = false;
  return {
    report(name, a) {
      const ok = a.ofBound <= 1;
      failed ||= !ok;
      console.log(`${ok ? 'ok  ' : 'FAIL'} ${name} ${a.shape}: err/max|y| ${a.relToMax.toExponential(2)}, err/Σ|xw| ${a.relToMagnitude.toExponential(2)}, err/bound ${a.ofBound.toFixed(3)}`);
    },
    get failed() {
      return failed;
    },
  };
}

/** A 4-bit product under timing: y = x·Wᵀ and dX = dY·W. */
export interface TimedGemm {
  gemm(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor): void;
  backwardInput(rec: Recorder, dy: Tensor, w: Q4Weight, dx: Tensor): void;
}

/** Per-call in-stream ms of `kernels`' dispatches (the wall clock where the device has no timestamps),
 * after a full warm-up: a tool's first timing follows its accuracy checks, long host work through
 * which the GPU's clocks fall (a sweep's short warm-up left f16Gemm's first shape reading 3.7x slow). */
export async function inStreamMs(gpu: Gpu, kernels: RegExp, run: (rec: Recorder) => void): Promise<number> {
  const t = await measure(gpu, kernels, run, { maxReps: 20, gpuOnly: true, warmMs: WARM_MS });
  return t.passMs ?? t.ms;
}

/** Each op's forward and dX at `shape` on one random Q4 weight, one line each. */
export async function timeQ4Gemms(gpu: Gpu, fill: Filler, [m, n, k]: [number, number, number], ops: readonly { name: string; kernels: RegExp; op: TimedGemm }[]): Promise<void> {
  const rec = gpu.recorder('setup');
  const [w] = randomQ4Blocks(gpu, rec, fill, n, k, 'w', n);
  const x = gpu.tensor([m, k], 'f32', 'x');
  const dy = gpu.tensor([m, n], 'f32', 'dy');
  fill.fill(rec, x, 'uniform', 1);
  fill.fill(rec, dy, 'uniform', 1);
  const y = gpu.tensor([m, n], 'f32', 'y');
  const dx = gpu.tensor([m, k], 'f32', 'dx');
  await rec.submit();
  const tflops = (ms: number) => ((2 * m * n * k) / ms / 1e9).toFixed(1);
  for (const { name, kernels, op } of ops) {
    const tf = await inStreamMs(gpu, kernels, (r) => op.gemm(r, x, w, y));
    const tb = await inStreamMs(gpu, kernels, (r) => op.backwardInput(r, dy, w, dx));
    console.log(`${name} M${m} N${n} K${k}: forward ${tf.toFixed(3)} ms (${tflops(tf)} TFLOP/s), dX ${tb.toFixed(3)} ms (${tflops(tb)} TFLOP/s)`);
  }
  for (const t of [x, dy, y, dx]) t.release();
  releaseQ4([w]);
}
