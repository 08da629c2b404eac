// What recording a dispatch costs the host in Dawn for Node, apart from the engine: raw WebGPU calls
// (setPipeline when it changes, setBindGroup, dispatchWorkgroups) into one compute pass, then
// finish and submit, per dispatch. A decode step replays about 230-350 such dispatches
// (Recorder.replay), so this is the floor its recording stands on. Kernels of 1 to 14 storage
// bindings (one written; decode's kernels bind 3 to 15 in all) with and without a uniform block,
// cycling through 1 to 40 pipelines, a distinct bind group per dispatch as decode binds; the GPU
// work itself is one workgroup each. The read bindings are distinct buffers, or ranges of one
// shared buffer: Dawn tracks usage per buffer, so the two tell a binding's cost from a buffer's.
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/hostCost.mjs [--dawn-flag enable-dawn-features=skip_validation] [--quick]
// --quick: fewer dispatches and repetitions (a check on software Vulkan).
import { createNodeGpu } from '../../src/node/gpu';

const QUICK = process.argv.includes('--quick');
const dawnFlags = process.argv.flatMap((a, i) => (a === '--dawn-flag' && process.argv[i + 1] ? [process.argv[i + 1]] : []));
/** Dispatches a measured pass records: ten decode steps of one sequence. */
const DISPATCHES = QUICK ? 232 : 2320;
const REPS = QUICK ? 3 : 8;
/** [storage bindings, a uniform block, pipelines cycled, read bindings on one shared buffer]. */
type Case = [number, boolean, number, boolean];
const CASES: Case[] = [
  [1, false, 1, false],
  [6, false, 1, false],
  [6, true, 1, false],
  [6, true, 8, false],
  // Decode's shape: a uniform block and 40 pipelines, by bindings; then read ranges of one buffer.
  ...[6, 7, 8, 9, 10, 14].map((b): Case => [b, true, 40, false]),
  [10, true, 40, true],
  [14, true, 40, true],
];

const gpu = await createNodeGpu({ dawnFlags });
const device = gpu.device;
const storageMax = device.limits.maxStorageBuffersPerShaderStage;

function pipeline(bindings: number, uniform: boolean, salt: number): GPUComputePipeline {
  let code = uniform ? `struct P { a: u32, b: f32 }\n@group(0) @binding(${bindings}) var<uniform> params: P;\n` : '';
  for (let i = 0; i < bindings; i++) code += `@group(0) @binding(${i}) var<storage, ${i === 0 ? 'read_write' : 'read'}> b${i}: array<f32>;\n`;
  code += `@compute @workgroup_size(32) fn main(@builtin(global_invocation_id) g: vec3u) {\n  var t = ${salt}.0;\n`;
  for (let i = 1; i < bindings; i++) code += `  t += b${i}[g.x];\n`;
  if (uniform) code += '  t += params.b;\n';
  code += '  b0[g.x] = t;\n}\n';
  return device.createComputePipeline({ layout: 'auto', compute: { module: device.createShaderModule({ code }), entryPoint: 'main' } });
}

const STEP = 232;
const buffers = Array.from({ length: 300 }, () => device.createBuffer({ size: 4096, usage: GPUBufferUsage.STORAGE }));
/** Read ranges of 4 KiB each, one per binding and dispatch slot, in one buffer. */
const shared = device.createBuffer({ size: 4096 * 16 * 8, usage: GPUBufferUsage.STORAGE });
const uniforms = device.createBuffer({ size: 256 * STEP, usage: GPUBufferUsage.UNIFORM });
const us = (ms: number) => ((1000 * ms) / DISPATCHES).toFixed(2);
console.log(`Dawn flags: ${dawnFlags.join(' ') || 'none'}; ${DISPATCHES} dispatches a pass, median of ${REPS - 2} passes after two`);
for (const [bindings, uniform, pipelines, oneBuffer] of CASES) {
  if (bindings > storageMax) {
    console.log(`${bindings} storage bindings: skipped (this device allows ${storageMax} a stage)`);
    continue;
  }
  const pipes = Array.from({ length: pipelines }, (_, j) => pipeline(bindings, uniform, j));
  const groups = Array.from({ length: STEP }, (_, j) =>
    device.createBindGroup({
      layout: pipes[j % pipelines].getBindGroupLayout(0),
      entries: [
        ...Array.from({ length: bindings }, (_, i) => ({
          binding: i,
          resource: oneBuffer && i > 0 ? { buffer: shared, offset: 4096 * (16 * (j % 8) + i), size: 4096 } : { buffer: buffers[(j + 37 * i) % buffers.length] },
        })),
        ...(uniform ? [{ binding: bindings, resource: { buffer: uniforms, offset: 256 * j, size: 16 } }] : []),
      ],
    }),
  );
  const runs: [number, number, number][] = [];
  for (let rep = 0; rep < REPS; rep++) {
    const t0 = performance.now();
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    let last: GPUComputePipeline | null = null;
    for (let i = 0; i < DISPATCHES; i++) {
      const j = i % STEP;
      const p = pipes[j % pipelines];
      if (p !== last) pass.setPipeline((last = p));
      pass.setBindGroup(0, groups[j]);
      pass.dispatchWorkgroups(1);
    }
    pass.end();
    const t1 = performance.now();
    const commands = encoder.finish();
    const t2 = performance.now();
    device.queue.submit([commands]);
    const t3 = performance.now();
    await device.queue.onSubmittedWorkDone();
    if (rep >= 2) runs.push([t1 - t0, t2 - t1, t3 - t2]);
  }
  const median = (k: number) => runs.map((r) => r[k]).sort((a, b) => a - b)[Math.floor(runs.length / 2)];
  const where = oneBuffer ? ' (read ones ranges of one buffer)' : '';
  console.log(`${bindings} storage bindings${where}${uniform ? ' + uniform' : ''}, ${pipelines} pipeline${pipelines > 1 ? 's' : ''}: µs a dispatch: encode ${us(median(0))}, finish ${us(median(1))}, submit ${us(median(2))}`);
}
gpu.destroy();
process.exit(0);
