// How fast the GPU retires the instructions a few-row GEMV spends per weight, through WGSL as Dawn
// compiles it: packed int8 dot products (dot4I8Packed), packed f16 multiply-adds (vec2<f16> fma)
// and f32 multiply-adds, each in a loop of independent chains long enough that issue, not
// latency, bounds it. The 8-row int8 GEMV's arithmetic alone (gemvRows.ts --ablate) is what this
// explains: it tells which of the three a kernel should spend its work on.
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/aluRate.mjs [--quick]
// --quick: a small grid (a check on software Vulkan).
import { createNodeGpu } from '../../src/node/gpu';
import { passTimer } from './passTimer';

const QUICK = process.argv.includes('--quick');
const REPS = QUICK ? 3 : 7;
const WORKGROUPS = QUICK ? 8 : 132 * 64;
const ITERS = QUICK ? 64 : 4096;
const CHAINS = 16;

interface Probe {
  what: string;
  /** WGSL: the chains' declarations, one round of the loop body (CHAINS operations), the fold to t. */
  init: string;
  round: string;
  fold: string;
  /** Scalar multiply-adds one operation of a round does. */
  macs: number;
  f16?: boolean;
}

const range = (n: number) => Array.from({ length: n }, (_, i) => i);
const PROBES: Probe[] = [
  {
    what: 'dot4I8Packed (4 int8 multiply-adds)',
    init: range(CHAINS).map((i) => `var c${i} = i32(s) + ${i};`).join('\n'),
    // b changes every round (one add) so that the compiler cannot hoist the products.
    round: range(CHAINS).map((i) => `c${i} += dot4I8Packed(a${i % 4}, b);`).join('\n'),
    fold: range(CHAINS).map((i) => `f32(c${i})`).join(' + '),
    macs: 4,
  },
  {
    what: 'vec2<f16> fma (2 f16 multiply-adds)',
    init: range(CHAINS).map((i) => `var c${i} = vec2<f16>(f16(s) + ${i}.0h);`).join('\n'),
    round: range(CHAINS).map((i) => `c${i} = fma(c${i}, hb, ha${i % 4});`).join('\n'),
    fold: range(CHAINS).map((i) => `f32(c${i}.x + c${i}.y)`).join(' + '),
    macs: 2,
    f16: true,
  },
  {
    what: 'vec4<f16> fma (4 f16 multiply-adds)',
    init: range(CHAINS).map((i) => `var c${i} = vec4<f16>(f16(s) + ${i}.0h);`).join('\n'),
    round: range(CHAINS).map((i) => `c${i} = fma(c${i}, vec4<f16>(hb, hb), vec4<f16>(ha${i % 4}, ha${(i + 1) % 4}));`).join('\n'),
    fold: range(CHAINS).map((i) => `f32(c${i}.x + c${i}.w)`).join(' + '),
    macs: 4,
    f16: true,
  },
  {
    what: 'f32 fma',
    init: range(CHAINS).map((i) => `var c${i} = f32(s) + ${i}.0;`).join('\n'),
    round: range(CHAINS).map((i) => `c${i} = fma(c${i}, fb, fa${i % 4});`).join('\n'),
    fold: range(CHAINS).map((i) => `c${i}`).join(' + '),
    macs: 1,
  },
  {
    // Half of each: whether the two run on separate pipes (then this is faster than either alone).
    what: 'dot4I8Packed and f32 fma by turns (per operation: 2.5 multiply-adds)',
    init: range(CHAINS).map((i) => (i % 2 ? `var c${i} = f32(s) + ${i}.0;` : `var c${i} = i32(s) + ${i};`)).join('\n'),
    round: range(CHAINS).map((i) => (i % 2 ? `c${i} = fma(c${i}, fb, fa${i % 4});` : `c${i} += dot4I8Packed(a${i % 4}, b);`)).join('\n'),
    fold: range(CHAINS).map((i) => (i % 2 ? `c${i}` : `f32(c${i})`)).join(' + '),
    macs: 2.5,
  },
];

const gpu = await createNodeGpu({ f16: true, unsafeApis: true });
const device = gpu.device;
if (!device.features.has('timestamp-query')) {
  console.log('no timestamp-query on this device: nothing to measure');
  process.exit(0);
}
const hasF16 = device.features.has('shader-f16');

function shader(p: Probe): string {
  return `${p.f16 ? 'enable f16;\n' : ''}
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<uniform> iters: vec4u;
@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3u) {
  let s = g.x;
  let a0 = s * 0x01010101u; let a1 = a0 ^ 0x5A5A5A5Au; let a2 = a0 + 0x03050709u; let a3 = a1 ^ 0x11223344u;
  let fa0 = f32(s & 7u) * 0.125; let fa1 = fa0 + 0.5; let fa2 = fa0 - 0.25; let fa3 = fa0 * 0.5;
  ${p.f16 ? 'let ha0 = vec2<f16>(f16(fa0), f16(fa1)); let ha1 = ha0.yx; let ha2 = ha0 * 0.5h; let ha3 = ha1 * 0.25h;' : ''}
  ${p.init}
  // Loop-invariant multipliers for the floats (each chain depends on itself, so nothing hoists);
  // nothing converted in the loop (a conversion is a quarter-rate instruction).
  let fb = 1.0 - f32(s & 3u) * 1e-3;
  ${p.f16 ? 'let hb = vec2<f16>(f16(fb), f16(fb));' : ''}
  var b = s * 0x01030507u;
  for (var i = 0u; i < iters.x; i++) {
    b += 0x01010101u;
    ${p.round}
  }
  out[g.x] = ${p.fold};
}`;
}

const threads = WORKGROUPS * 256;
const out = device.createBuffer({ size: threads * 4, usage: GPUBufferUsage.STORAGE });
const uni = device.createBuffer({ size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
device.queue.writeBuffer(uni, 0, new Uint32Array([ITERS, 0, 0, 0]));
const timer = passTimer(device);

console.log(`${WORKGROUPS} workgroups of 256 threads, ${ITERS} rounds of ${CHAINS} independent operations a thread; median of ${REPS - 2} passes after two`);
for (const p of PROBES) {
  if (p.f16 && !hasF16) {
    console.log(`${p.what}: skipped (no shader-f16 on this device)`);
    continue;
  }
  device.pushErrorScope('validation');
  const pipe = device.createComputePipeline({ layout: 'auto', compute: { module: device.createShaderModule({ code: shader(p) }), entryPoint: 'main' } });
  const group = device.createBindGroup({ layout: pipe.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: out } }, { binding: 1, resource: { buffer: uni } }] });
  const invalid = await device.popErrorScope();
  if (invalid) throw new Error(`${p.what}: ${invalid.message}`);
  const sec = (
    await timer.median(REPS, (pass) => {
      pass.setPipeline(pipe);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(WORKGROUPS);
    })
  ).median / 1e9;
  const ops = threads * ITERS * CHAINS;
  console.log(`${p.what}: ${(ops / sec / 1e12).toFixed(2)} T operations/s, ${((ops * p.macs) / sec / 1e12).toFixed(2)} T multiply-adds/s (${(sec * 1e3).toFixed(3)} ms)`);
}
gpu.destroy();
process.exit(0);
