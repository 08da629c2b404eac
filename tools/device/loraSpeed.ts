// A quick timer for LoRA's products on a GSPO group step's shapes (8 x 352 rows, Qwen3-VL-2B's
// q/k/v/o/gate/up/down), for comparing builds in one device run: forward (down product + up
// product) and backward (dB, t, dA, dX) per layer kind, in stream per call (src/bench/harness.ts's
// measure), and the sum over one layer's seven adapters; --kernels adds each kernel's time with
// every dispatch in its own pass (a few µs more a dispatch than in stream).
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/loraSpeed.mjs [--rank 16] [--rows 2816] [--kernels] [--gemm-from R [--gemm-products u,up,t,grads,dx]]
// (--gemm-from R: the products listed (default all) of rank R or more on the GEMM, as Lora's
// gemmFrom; the others as LORA_GEMM_FROM)
import { createNodeGpu } from '../../src/node/gpu';
import { Lora, LORA_GEMM_FROM } from '../../src/ops/lora';
import { createLoraParams, releaseLoraParams } from '../../src/ops/loraParams';
import { Filler } from '../../src/bench/fill';
import { measure } from '../../src/bench/harness';
import type { Recorder } from '../../src/gpu';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const T = arg('--rows', 8 * 352);
const r = arg('--rank', 16);
// [name, in, out, adapters of that shape a layer]
const SHAPES: [string, number, number, number][] = [
  ['q/o', 2048, 2048, 2],
  ['k/v', 2048, 1024, 2],
  ['gate/up', 2048, 6144, 2],
  ['down', 6144, 2048, 1],
];

const gpu = await createNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const fill = await Filler.create(gpu);
const from = arg('--gemm-from', NaN);
const listed = process.argv.includes('--gemm-products') ? process.argv[process.argv.indexOf('--gemm-products') + 1].split(',') : Object.keys(LORA_GEMM_FROM);
const lora = await Lora.create(gpu, Number.isNaN(from) ? {} : { gemmFrom: Object.fromEntries(listed.map((p) => [p, from])) });
const time = async (run: (rec: Recorder) => void) => {
  const t = await measure(gpu, /^(lora|matmul)\./, run, { maxReps: 20, gpuOnly: true });
  return 1000 * (t.passMs ?? t.ms);
};
let layer = 0;
for (const [name, inF, outF, count] of SHAPES) {
  const p = createLoraParams(gpu, { name, in: inF, out: outF, r, alpha: 2 * r });
  const x = gpu.tensor([T, inF], 'f32', 'x');
  const y = gpu.tensor([T, outF], 'f32', 'y');
  const dx = gpu.tensor([T, inF], 'f32', 'dx');
  const u = gpu.tensor([T, r], 'f32', 'u');
  const t = gpu.tensor([T, r], 'f32', 't');
  const rec = gpu.recorder('setup');
  for (const z of [x, y, dx, p.A, p.B]) fill.fill(rec, z, 'uniform', 1);
  await rec.submit();
  const fwd = await time((rc) => lora.forward(rc, p, { x, y, u }));
  const bwd = await time((rc) => lora.backward(rc, p, { x, dy: y, u, dx, t }));
  console.log(`${name} T${T} in ${inF} out ${outF} r${r}: forward ${fwd.toFixed(1)} µs, backward ${bwd.toFixed(1)} µs`);
  if (process.argv.includes('--kernels')) {
    // Every dispatch in its own timestamped pass (adds a few µs each): which kernels the time is in.
    const prof = gpu.startProfiling('dispatch');
    const rc = gpu.recorder('profile');
    for (let i = 0; i < 10; i++) {
      lora.forward(rc, p, { x, y, u });
      lora.backward(rc, p, { x, dy: y, u, dx, t });
    }
    await rc.submit();
    await gpu.sync();
    gpu.stopProfiling();
    console.log(prof.report().map((k) => `  ${k.name} ${((1000 * k.totalMs) / 10).toFixed(1)} µs`).join('\n'));
  }
  layer += count * (fwd + bwd);
  releaseLoraParams(p);
  for (const z of [x, y, dx, u, t]) z.release();
}
console.log(`a layer's seven adapters, forward + backward: ${layer.toFixed(0)} µs (x28 layers: ${((28 * layer) / 1000).toFixed(1)} ms)`);
process.exit(0);
