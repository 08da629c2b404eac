// What a dispatch costs the GPU in stream, apart from its work: raw WebGPU, one compute pass of N
// tiny dispatches between two timestamps, per dispatch. Decode is a chain of about 230-320 such
// dispatches a step, each reading what the one before wrote, so its floor is this cost times the
// count. The cases tell apart what a chain pays for: each dispatch writing the buffer the one before
// wrote, or its own buffer (which Dawn also fences: it was written by the pass before), or nothing
// (no barrier at all); one pipeline or several cycled (a switch of shader program between
// neighbours, as decode's kernels alternate), of a few instructions or of thousands (their fetch);
// one workgroup or a grid that fills the GPU; pipelines with workgroup memory of differing sizes.
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/dispatchCost.mjs [--quick]
// --quick: fewer dispatches and repetitions (a check on software Vulkan).
import { createNodeGpu } from '../../src/node/gpu';
import { passTimer } from './passTimer';

const QUICK = process.argv.includes('--quick');
const DISPATCHES = QUICK ? 64 : 1024;
const REPS = QUICK ? 3 : 9;

interface Case {
  what: string;
  pipelines: number;
  /** Each dispatch writes the buffer the one before wrote (a barrier between them), or its own. */
  chained: boolean;
  workgroups: number;
  /** Workgroup memory of pipeline j in bytes: varied to see whether a change of it costs. */
  shared: (j: number) => number;
  /** Straight-line multiply-adds a thread (0: none): a program of that much code, to see whether
   * cycling large programs costs their instruction fetch at each dispatch. */
  code?: number;
  /** The dispatch binds no writable buffer: Dawn then puts no barrier before it. */
  readOnly?: boolean;
}

const none = () => 0;
const CASES: Case[] = [
  { what: 'one pipeline, chained', pipelines: 1, chained: true, workgroups: 1, shared: none },
  { what: 'one pipeline, each writing its own buffer', pipelines: 1, chained: false, workgroups: 1, shared: none },
  { what: '2 pipelines cycled, chained', pipelines: 2, chained: true, workgroups: 1, shared: none },
  { what: '11 pipelines cycled, chained', pipelines: 11, chained: true, workgroups: 1, shared: none },
  { what: '40 pipelines cycled, chained', pipelines: 40, chained: true, workgroups: 1, shared: none },
  { what: '11 pipelines cycled, each writing its own buffer', pipelines: 11, chained: false, workgroups: 1, shared: none },
  { what: 'one pipeline, chained, 264 workgroups', pipelines: 1, chained: true, workgroups: 264, shared: none },
  { what: '11 pipelines cycled, chained, 264 workgroups', pipelines: 11, chained: true, workgroups: 264, shared: none },
  { what: 'one pipeline with 16 KiB of workgroup memory, chained, 264 workgroups', pipelines: 1, chained: true, workgroups: 264, shared: () => 16384 },
  { what: '11 pipelines, workgroup memory 0 or 16 KiB by turns, chained, 264 workgroups', pipelines: 11, chained: true, workgroups: 264, shared: (j) => (j % 2 ? 16384 : 0) },
  { what: '11 pipelines, workgroup memory 1 to 32 KiB, chained, 264 workgroups', pipelines: 11, chained: true, workgroups: 264, shared: (j) => 1024 + ((j * 3) % 11) * 3072 },
  { what: 'one pipeline, reads only (no barrier), 264 workgroups', pipelines: 1, chained: false, workgroups: 264, shared: none, readOnly: true },
  { what: '11 pipelines cycled, reads only (no barrier), 264 workgroups', pipelines: 11, chained: false, workgroups: 264, shared: none, readOnly: true },
  ...[512, 2048, 8192].flatMap((code): Case[] => [
    { what: `one pipeline of ${code} multiply-adds, chained, 264 workgroups`, pipelines: 1, chained: true, workgroups: 264, shared: none, code },
    { what: `11 pipelines of ${code} multiply-adds cycled, chained, 264 workgroups`, pipelines: 11, chained: true, workgroups: 264, shared: none, code },
    { what: `40 pipelines of ${code} multiply-adds cycled, chained, 264 workgroups`, pipelines: 40, chained: true, workgroups: 264, shared: none, code },
  ]),
];

const gpu = await createNodeGpu({});
const device = gpu.device;
if (!device.features.has('timestamp-query')) {
  console.log('no timestamp-query on this device: nothing to measure');
  process.exit(0);
}

function pipeline(salt: number, sharedBytes: number, fmas: number, readOnly: boolean): GPUComputePipeline {
  const words = sharedBytes / 4;
  const sh = words ? `var<workgroup> sh: array<f32, ${words}>;\n` : '';
  // The workgroup memory is touched so that the compiler keeps it.
  let body = words ? `  sh[l % ${words}u] = t;\n  workgroupBarrier();\n  t += sh[(l + 1u) % ${words}u];\n` : '';
  // Four independent chains of distinct constants: the compiler can neither fold nor loop them.
  if (fmas) {
    body += '  var c = vec4f(t, t + 1.0, t + 2.0, t + 3.0);\n';
    for (let i = 0; i < fmas / 4; i++) body += `  c = fma(c, vec4f(${(1 + i * 1e-6).toFixed(7)}), vec4f(${(salt + i * 1e-3).toFixed(4)}));\n`;
    body += '  t = c.x + c.y + c.z + c.w;\n';
  }
  // Reads only: nothing is written (the compiler may drop the arithmetic: the cases without code).
  const store = readOnly ? '  _ = t;\n' : '  out[g.x % 1024u] = t;\n';
  const outDecl = readOnly ? '' : '@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n';
  const code = `${outDecl}@group(0) @binding(1) var<storage, read> src: array<f32>;
${sh}@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3u, @builtin(local_invocation_index) l: u32) {
  var t = src[g.x % 1024u] + ${salt}.0;
${body}${store}}
`;
  return device.createComputePipeline({ layout: 'auto', compute: { module: device.createShaderModule({ code }), entryPoint: 'main' } });
}

const buffer = () => device.createBuffer({ size: 4096, usage: GPUBufferUsage.STORAGE });
const src = buffer();
const own = Array.from({ length: DISPATCHES }, buffer);
const timer = passTimer(device);

console.log(`${DISPATCHES} dispatches a pass, GPU time between the pass's timestamps, median of ${REPS - 2} passes after two`);
for (const c of CASES) {
  const pipes = Array.from({ length: c.pipelines }, (_, j) => pipeline(j, c.shared(j), c.code ?? 0, c.readOnly ?? false));
  // A chained dispatch writes own[0] (each one then waits for the one before); an independent one its own buffer.
  const groups = Array.from({ length: DISPATCHES }, (_, i) =>
    device.createBindGroup({
      layout: pipes[i % c.pipelines].getBindGroupLayout(0),
      entries: [...(c.readOnly ? [] : [{ binding: 0, resource: { buffer: own[c.chained ? 0 : i] } }]), { binding: 1, resource: { buffer: src } }],
    }),
  );
  const t = await timer.median(REPS, (pass) => {
    for (let i = 0; i < DISPATCHES; i++) {
      if (c.pipelines > 1 || i === 0) pass.setPipeline(pipes[i % c.pipelines]);
      pass.setBindGroup(0, groups[i]);
      pass.dispatchWorkgroups(c.workgroups);
    }
  });
  const perDispatch = (ns: number) => ns / 1000 / DISPATCHES;
  const [med, lo, hi] = [perDispatch(t.median), perDispatch(t.min), perDispatch(t.max)];
  console.log(`${c.what}: ${med.toFixed(3)} µs a dispatch (passes ${lo.toFixed(3)}-${hi.toFixed(3)})`);
}
gpu.destroy();
process.exit(0);
