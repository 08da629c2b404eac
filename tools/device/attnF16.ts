// Attention on f16 tensor cores (src/ops/attentionF16.ts) on a real GPU: each variant checked
// against the f32 kernels (src/ops/attention.ts, themselves tested against a CPU reference) on
// packed, shared-prefix and bidirectional shapes, then timed beside them in stream. Exits non-zero
// when a check fails.
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/attnF16.mjs [--no-speed]
import { parseArgs } from '../../src/node/args';
import { createNodeGpu } from '../../src/node/gpu';
import { Attention } from '../../src/ops/attention';
import { AttentionF16, attentionF16Unsupported, checkAttentionF16, DEFAULT_ATTENTION_F16_TILE, type AttentionF16Tile } from '../../src/ops/attentionF16';
import { Filler } from '../../src/bench/fill';
import { measure } from '../../src/bench/harness';
import type { Recorder, Tensor } from '../../src/gpu';

interface Case {
  label: string;
  hq: number;
  hkv: number;
  D: number;
  causal: boolean;
  cu: number[];
  prefix?: number;
}

const packed = (lens: number[]) => lens.reduce((cu, n) => [...cu, cu[cu.length - 1] + n], [0]);
const CASES: Case[] = [
  { label: 'one sequence, 77 rows', hq: 16, hkv: 8, D: 128, causal: true, cu: [0, 77] },
  { label: 'three packed sequences', hq: 16, hkv: 8, D: 128, causal: true, cu: packed([100, 80, 120]) },
  { label: 'shared prefix 40 + 3 x 25', hq: 16, hkv: 8, D: 128, causal: true, cu: packed([40, 25, 25, 25]), prefix: 40 },
  { label: 'shared prefix 512 + 8 x 256 (default config)', hq: 16, hkv: 8, D: 128, causal: true, cu: packed([512, ...Array<number>(8).fill(256)]), prefix: 512 },
  { label: 'vision: two images of 196 patches, D 64', hq: 16, hkv: 16, D: 64, causal: false, cu: packed([196, 196]) },
];
// Besides the headline shapes, the small grids where the f32 kernels may be ahead (the smallest
// image the processor makes, 256 patches; a short prompt's prefill): Attention's
// F16_ATTENTION_MIN_GROUPS comes from these.
const SPEED: Case[] = [
  { label: 'T2048 Hq16 Hkv8 D128 causal', hq: 16, hkv: 8, D: 128, causal: true, cu: [0, 2048] },
  CASES[3],
  { label: 'T512 Hq16 Hkv8 D128 causal', hq: 16, hkv: 8, D: 128, causal: true, cu: [0, 512] },
  { label: 'T256 Hq16 Hkv8 D128 causal', hq: 16, hkv: 8, D: 128, causal: true, cu: [0, 256] },
  ...[256, 400, 576, 784, 1600].map((rows) => ({ label: `vision ${16 * Math.sqrt(rows)}x${16 * Math.sqrt(rows)} (${rows} rows, D 64)`, hq: 16, hkv: 16, D: 64, causal: false, cu: [0, rows] })),
];

const TILES: AttentionF16Tile[] = [DEFAULT_ATTENTION_F16_TILE, { subgroups: 4, keys: 32 }];

let failed = false;
const args = parseArgs(process.argv.slice(2));
const gpu = await createNodeGpu({ unsafeApis: true, f16: true, dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const why = attentionF16Unsupported(gpu, 128);
if (why) {
  console.log(`skipped: ${why}`);
  process.exit(0);
}
const fill = await Filler.create(gpu);
// The check the model runs before use (makeAttentionTensorCores): against the f64 attention.
for (const [hq, hkv, D] of [[16, 8, 128], [16, 16, 64]]) {
  const op = await AttentionF16.create(gpu, { hq, hkv, headDim: D });
  const ofBound = await checkAttentionF16(gpu, op);
  if (!(ofBound <= 1)) failed = true;
  console.log(`${ofBound <= 1 ? 'ok  ' : 'FAIL'} f64 check, Hq ${hq} Hkv ${hkv} D ${D}: error ${ofBound.toFixed(3)} of its bound`);
  op.release();
}
const read = async (t: Tensor) => new Float32Array(await gpu.read(t));

async function setup(c: Case) {
  const T = c.cu[c.cu.length - 1];
  const t = (cols: number, label: string) => gpu.tensor([T, cols], 'f32', label);
  const io = {
    q: t(c.hq * c.D, 'q'), k: t(c.hkv * c.D, 'k'), v: t(c.hkv * c.D, 'v'), o: t(c.hq * c.D, 'o'), o16: t(c.hq * c.D, 'o16'), lse: t(c.hq, 'lse'), lse16: t(c.hq, 'lse16'),
    dout: t(c.hq * c.D, 'dout'), stats: t(2 * c.hq, 'row_stats'), dq: t(c.hq * c.D, 'dq'), dk: t(c.hkv * c.D, 'dk'), dv: t(c.hkv * c.D, 'dv'), dq16: t(c.hq * c.D, 'dq16'), dk16: t(c.hkv * c.D, 'dk16'), dv16: t(c.hkv * c.D, 'dv16'),
    cu: gpu.upload(c.cu, [c.cu.length], 'u32', 'cu_seqlens'),
  };
  const rec = gpu.recorder('setup');
  // Scores of a few units, as after the q/k norms: q and k uniform in ±2.
  fill.fill(rec, io.q, 'uniform', 2);
  fill.fill(rec, io.k, 'uniform', 2);
  fill.fill(rec, io.v, 'uniform', 1);
  fill.fill(rec, io.dout, 'uniform', 1);
  await rec.submit();
  const f32 = await Attention.create(gpu, { hq: c.hq, hkv: c.hkv, headDim: c.D });
  const f16 = await AttentionF16.create(gpu, { hq: c.hq, hkv: c.hkv, headDim: c.D });
  // The same f32 op routed to the tensor cores, as the model runs it (Attention.useTensorCores), at every size.
  const routed = await Attention.create(gpu, { hq: c.hq, hkv: c.hkv, headDim: c.D });
  routed.useTensorCores(f16, 0);
  const args = { q: io.q, k: io.k, v: io.v, cuSeqlens: io.cu, causal: c.causal, scale: 1 / Math.sqrt(c.D), sharedPrefix: c.prefix };
  // `recomputed`: right after the forward on the same q, k, v (AttentionBackwardArgs.inputsOfLastForward).
  const grads = (f: Attention, o: Tensor, lse: Tensor, dq: Tensor, dk: Tensor, dv: Tensor, recomputed = false) => (r: Recorder) => f.backward(r, { ...args, o, lse, dout: io.dout, rowStats: io.stats, dq, dk, dv, inputsOfLastForward: recomputed });
  return { T, io, f32, f16, routed, args, grads, release: () => [...Object.values(io)].forEach((x) => x.release()) };
}

const maxAbs = (a: Float32Array) => a.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
const maxDiff = (a: Float32Array, b: Float32Array) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);

for (const c of CASES) {
  const s = await setup(c);
  const rec = gpu.recorder('check');
  s.f32.forward(rec, { ...s.args, o: s.io.o, lse: s.io.lse });
  s.f16.forward(rec, { ...s.args, o: s.io.o16, lse: s.io.lse16 });
  await rec.submit();
  const [o, o16, lse, lse16] = await Promise.all([s.io.o, s.io.o16, s.io.lse, s.io.lse16].map(read));
  const eo = maxDiff(o, o16) / maxAbs(o);
  const el = maxDiff(lse, lse16);
  const rec3 = gpu.recorder('check');
  s.f16.forward(rec3, { ...s.args, o: s.io.o16 });
  await rec3.submit();
  const en = maxDiff(o, await read(s.io.o16)) / maxAbs(o);
  // A checkpointed recompute: the second pass alone, on the lse the first forward wrote.
  const rec5 = gpu.recorder('check');
  s.f16.forward(rec5, { ...s.args, o: s.io.o16, lse: s.io.lse16, lseKnown: true });
  await rec5.submit();
  const ek = maxDiff(o, await read(s.io.o16)) / maxAbs(o);
  // The backward of each path, from its own forward's o and lse.
  const rec4 = gpu.recorder('check');
  s.f32.forward(rec4, { ...s.args, o: s.io.o, lse: s.io.lse });
  s.grads(s.f32, s.io.o, s.io.lse, s.io.dq, s.io.dk, s.io.dv)(rec4);
  s.routed.forward(rec4, { ...s.args, o: s.io.o16, lse: s.io.lse16 });
  s.grads(s.routed, s.io.o16, s.io.lse16, s.io.dq16, s.io.dk16, s.io.dv16, true)(rec4);
  await rec4.submit();
  const eg3 = await Promise.all(([['dq', s.io.dq, s.io.dq16], ['dk', s.io.dk, s.io.dk16], ['dv', s.io.dv, s.io.dv16]] as const).map(async ([n, x, y]) => {
    const [a, b] = [await read(x), await read(y)];
    return { n, e: maxDiff(a, b) / maxAbs(a), finite: b.every(Number.isFinite) };
  }));
  // q, k, v rounded to f16 (2^-11 relative) and p to f16: a few 1e-3 of max |o| at most; the
  // gradients also round dO and dS.
  const ok = [eo, en, ek].every((e) => e < 4e-3) && el < 4e-3 && [o16, lse16].every((x) => x.every(Number.isFinite)) && eg3.every((g) => g.finite && g.e < 1e-2);
  if (!ok) failed = true;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${c.label}: o ${eo.toExponential(2)} of max |o| (without lse ${en.toExponential(2)}, on the lse given ${ek.toExponential(2)}), lse ${el.toExponential(2)}; ${eg3.map((g) => `${g.n} ${g.e.toExponential(2)}`).join(', ')} of max |f32|`);
  s.f16.release();
  s.release();
}

if (!args.bool('no-speed')) {
  for (const c of SPEED) {
    const s = await setup(c);
    // Causal: half the square; the shared prefix: the prompt's triangle, then each completion over
    // the prompt and its own triangle.
    const lens = c.cu.slice(1).map((e, i) => e - c.cu[i]);
    const pairs = c.prefix ? (lens[0] * (lens[0] + 1)) / 2 + lens.slice(1).reduce((n, l) => n + l * lens[0] + (l * (l + 1)) / 2, 0) : lens.reduce((n, l) => n + (c.causal ? (l * (l + 1)) / 2 : l * l), 0);
    const flops = 4 * pairs * c.D * c.hq;
    // The backward counts 2.5 times the forward's products (BENCHMARKS.md's convention).
    const time = async (f: (r: Recorder) => void, times = 1) => {
      const t = await measure(gpu, /^attention/, f, { maxReps: 20 });
      const ms = t.passMs ?? t.ms;
      return `${(1000 * ms).toFixed(0)} µs (${((times * flops) / ms / 1e9).toFixed(1)} TFLOP/s)`;
    };
    const line = [`f32 ${await time((r) => s.f32.forward(r, { ...s.args, o: s.io.o, lse: s.io.lse }))}, backward ${await time(s.grads(s.f32, s.io.o, s.io.lse, s.io.dq, s.io.dk, s.io.dv), 2.5)}`];
    for (const tile of TILES) {
      let f16: AttentionF16;
      try {
        f16 = await AttentionF16.create(gpu, { hq: c.hq, hkv: c.hkv, headDim: c.D }, tile);
      } catch (e) {
        line.push(`${tile.subgroups}x${tile.keys}: ${(e as Error).message}`);
        continue;
      }
      const withLse = await time((r) => f16.forward(r, { ...s.args, o: s.io.o16, lse: s.io.lse16 }));
      const err = maxDiff(await read(s.io.o), await read(s.io.o16)) / maxAbs(await read(s.io.o));
      if (!(err < 4e-3)) failed = true;
      const lseGiven = await time((r) => f16.forward(r, { ...s.args, o: s.io.o16, lse: s.io.lse16, lseKnown: true }));
      const routed = await Attention.create(gpu, { hq: c.hq, hkv: c.hkv, headDim: c.D });
      routed.useTensorCores(f16, 0);
      const backward = await time(s.grads(routed, s.io.o16, s.io.lse16, s.io.dq16, s.io.dk16, s.io.dv16), 2.5);
      line.push(`${tile.subgroups}x${tile.keys} with lse ${withLse} (error ${err.toExponential(1)}), on the lse given ${lseGiven}, backward ${backward}`);
      f16.release();
    }
    console.log(`${c.label}: ${line.join('; ')}`);
    s.f16.release();
    s.release();
  }
}
process.exit(failed ? 1 : 0);
