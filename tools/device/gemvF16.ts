// The decode GEMV on f16 tensor cores (src/ops/gemvQ4F16.ts) on a real GPU: each layout checked
// against the f64 product (plain, joined parts, accumulate, LoRA epilogue against MatmulQ4's f32
// GEMV), then timed in stream on the 2B decoder's weights beside the engine's GEMVs (f32 x at one
// row, int8 x given ready-made at 2..8 rows). Exits non-zero when a check fails.
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/gemvF16.mjs [--layouts KSxRTxBG,...] [--rows 1,8] [--no-check] [--no-speed] [--ablate]
import { parseArgs } from '../../src/node/args';
import { createNodeGpu } from '../../src/node/gpu';
import { capabilitiesOf, compileMatrixKernels, type Recorder, type Tensor } from '../../src/gpu';
import { DEFAULT_GEMV_F16, GEMV_F16_UNIFORMS, GEMV_F16_XS, gemvF16Config, gemvF16Defines, gemvF16Unsupported, GemvQ4F16, type GemvF16Layout } from '../../src/ops/gemvQ4F16';
import { int8GroupWords, MatmulQ4, type Q4Weight } from '../../src/ops/matmulQ4';
import { Filler } from '../../src/bench/fill';
import { measure } from '../../src/bench/harness';
import { q4Bytes, randomQ4Blocks, releaseQ4 } from '../../src/bench/q4';

const args = parseArgs(process.argv.slice(2));
const gpu = await createNodeGpu({ unsafeApis: true, f16: true, dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const caps = capabilitiesOf(gpu);
const layouts: GemvF16Layout[] = (args.optStr('layouts')?.split(',') ?? ['4x2x2', '4x1x2', '8x1x2', '8x2x1', '4x2x1', '2x2x4', '8x1x4', '4x1x4'])
  .map((s) => s.split('x').map(Number))
  .map(([ks, rt, bg]) => ({ ks, rt, bg }));
const why = gemvF16Unsupported(caps, DEFAULT_GEMV_F16);
if (why) {
  console.log(`skipped: ${why}`);
  process.exit(0);
}
const fill = await Filler.create(gpu);
const f32 = await MatmulQ4.create(gpu, { int8: false });
const int8 = await MatmulQ4.create(gpu);
const ops: { name: string; op: GemvQ4F16 }[] = [];
for (const l of layouts) {
  const name = `${l.ks}x${l.rt}x${l.bg}`;
  const bad = gemvF16Unsupported(caps, l);
  if (bad) {
    console.log(`layout ${name}: ${bad}`);
    continue;
  }
  ops.push({ name, op: await GemvQ4F16.create(gpu, l) });
}
console.log(`config ${ops[0]?.op.config.M}x${ops[0]?.op.config.N}x${ops[0]?.op.config.K}; layouts ${ops.map((o) => o.name).join(', ')}`);
let failed = false;

async function read(t: Tensor): Promise<Float32Array> {
  return gpu.readF32(t);
}
async function readU32(t: Tensor): Promise<Uint32Array> {
  return (await gpu.read(t)) as Uint32Array;
}
function f16ToNumber(h: number): number {
  const e = (h >> 10) & 31;
  const m = h & 1023;
  const v = e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15);
  return h & 0x8000 ? -v : v;
}

/** The dequantized weight [n, k] in f64. */
async function dequant(w: Q4Weight): Promise<Float64Array> {
  const codes = await readU32(w.codes);
  const scales = await readU32(w.scales);
  const out = new Float64Array(w.n * w.k);
  for (let n = 0; n < w.n; n++)
    for (let k = 0; k < w.k; k++) {
      const s = n * (w.k / 32) + Math.floor(k / 32);
      const d = f16ToNumber((scales[s >> 1] >>> (16 * (s & 1))) & 0xffff);
      const c = (codes[n * (w.k / 8) + Math.floor(k / 8)] >>> (4 * (k % 8))) & 15;
      out[n * w.k + k] = d * (c - 8);
    }
  return out;
}

async function check(o: { name: string; op: GemvQ4F16 }, m: number, n: number, k: number): Promise<void> {
  if (k % (32 * o.op.layout.bg) !== 0) return;
  const rec = gpu.recorder('check');
  const [w] = randomQ4Blocks(gpu, rec, fill, n, k, 'w');
  const x = fill.fill(rec, gpu.tensor([m, k], 'f32', 'x'), 'uniform', 2);
  const y = gpu.tensor([m, n], 'f32', 'y');
  const y0 = fill.fill(rec, gpu.tensor([m, n], 'f32', 'y0'), 'uniform', 1);
  const yAcc = gpu.tensor([m, n], 'f32', 'yacc');
  rec.copy(y0, yAcc);
  o.op.gemv(rec, x, w, y);
  o.op.gemv(rec, x, w, yAcc, true);
  await rec.submit();
  const wd = await dequant(w);
  const xv = await read(x);
  const got = await read(y);
  const acc = await read(yAcc);
  const base = await read(y0);
  let worst = 0;
  let worstAcc = 0;
  for (let r = 0; r < m; r++)
    for (let j = 0; j < n; j++) {
      let ref = 0;
      let bound = 0;
      for (let c = 0; c < k; c++) {
        const t = xv[r * k + c] * wd[j * k + c];
        ref += t;
        // x·xs and W each rounded to f16 (an ulp each: a conversion may take either neighbour),
        // x·xs's subnormal step, and the f32 sum's rounding.
        bound += Math.abs(t) * (2 * 2 ** -10 + 2 ** -20) + (2 ** -24 / GEMV_F16_XS) * Math.abs(wd[j * k + c]) + Math.abs(ref) * 2 ** -23;
      }
      worst = Math.max(worst, Math.abs(got[r * n + j] - ref) / bound);
      worstAcc = Math.max(worstAcc, Math.abs(acc[r * n + j] - base[r * n + j] - ref) / (bound + Math.abs(base[r * n + j]) * 2 ** -23));
    }
  const ok = worst <= 1 && worstAcc <= 1;
  if (!ok) failed = true;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${o.name} M${m} N${n} K${k}: error of its bound ${worst.toFixed(3)} (accumulating ${worstAcc.toFixed(3)})`);
  releaseQ4([w]);
  for (const t of [x, y, y0, yAcc]) t.release();
}

/** Joined parts and the LoRA epilogue against MatmulQ4's f32 GEMV with the same call. */
async function checkEpilogue(o: { name: string; op: GemvQ4F16 }, m: number): Promise<void> {
  const [n, k, r, perRow] = [384, 256, 8, 3];
  const rec = gpu.recorder('check');
  const [w] = randomQ4Blocks(gpu, rec, fill, n, k, 'w');
  const x = fill.fill(rec, gpu.tensor([m, k], 'f32', 'x'), 'uniform', 2);
  const B = fill.fill(rec, gpu.tensor([n, r], 'f32', 'B'), 'uniform', 0.5);
  const parts = fill.fill(rec, gpu.tensor([m * perRow * r], 'f32', 'parts'), 'uniform', 1);
  const outs = Array.from({ length: 4 }, (_, i) => gpu.tensor([m, n], 'f32', `y${i}`));
  const lora = { B, r, scale: 2, parts, perRow };
  o.op.gemv(rec, x, w, outs[0], false, { parts: [128, 64, 192] });
  f32.gemv(rec, x, w, outs[1], false, { parts: [128, 64, 192] });
  o.op.gemv(rec, x, w, outs[2], false, { lora });
  f32.gemv(rec, x, w, outs[3], false, { lora });
  await rec.submit();
  const [a, b, c, d] = await Promise.all(outs.map(read));
  const rel = (p: Float32Array, q: Float32Array) => Math.max(...p.map((v, i) => Math.abs(v - q[i]))) / Math.max(...q.map(Math.abs));
  const [e1, e2] = [rel(a, b), rel(c, d)];
  const ok = e1 < 2e-3 && e2 < 2e-3;
  if (!ok) failed = true;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${o.name} M${m} epilogue against the f32 GEMV (of max |y|): parts ${e1.toExponential(2)}, LoRA ${e2.toExponential(2)}`);
  releaseQ4([w]);
  for (const t of [x, B, parts, ...outs]) t.release();
}

if (!args.bool('no-check')) {
  for (const o of ops) {
    for (const [m, n, k] of [
        [1, 16, 64],
        [3, 200, 256],
        [8, 515, 2048],
        [5, 96, 192],
    ] as const)
      await check(o, m, n, k);
    for (const m of [1, 8]) await checkEpilogue(o, m);
  }
}

if (args.bool('ablate')) {
  // The first layout's kernel with parts of each step left out, at M 8 on gate/up and the LM head.
  const cfg = gemvF16Config(caps)!;
  const [kernel] = await compileMatrixKernels(gpu, 'matmul_q4.gemv_f16_ablate', [{ shader: 'matmul_q4_gemv_f16', entry: 'gemv_f16', uniforms: GEMV_F16_UNIFORMS }], { ...gemvF16Defines(layouts[0], cfg), LORA: false, ABLATE: true });
  const rowsPer = layouts[0].rt * cfg.M;
  for (const [n, k] of [
    [12288, 2048],
    [151936, 2048],
  ] as const) {
    const copies = Math.max(2, Math.min(64, Math.ceil((256 * 2 ** 20) / q4Bytes(n, k))));
    const setup = gpu.recorder('setup');
    const ws = Array.from({ length: copies }, (_, c) => randomQ4Blocks(gpu, setup, fill, n, k, `w${c}`)[0]);
    const x = fill.fill(setup, gpu.tensor([8, k], 'f32', 'x'), 'uniform', 1);
    const y = gpu.tensor([8, n], 'f32', 'y');
    await setup.submit();
    const blocks = Math.ceil(n / rowsPer);
    const grid: [number, number] = [Math.min(blocks, 65535), Math.ceil(blocks / Math.min(blocks, 65535))];
    const parts: string[] = [];
    for (const [label, bits] of [['whole', 0], ['no next loads', 2], ['no staging', 4], ['no MMAs', 8], ['no loads, no staging', 6], ['none of the three', 14]] as const) {
      const r = await measure(gpu, /./, (rec) => ws.forEach((w) => rec.dispatch(kernel, { codes4: w.codes, scales: w.scales, x, y }, grid, { m: 8, n, k, accumulate: bits, split1: n, split2: n, lora_r: 0, lora_np: 0, lora_s: 0, xs: 1 })), { maxReps: 12, gpuOnly: true, calls: copies });
      parts.push(`${label} ${(1000 * (r.passMs ?? r.ms)).toFixed(2)}`);
    }
    console.log(`ablation ${layouts[0].ks}x${layouts[0].rt}x${layouts[0].bg} N${n} K${k} M8, µs: ${parts.join('; ')}`);
    releaseQ4(ws);
    x.release();
    y.release();
  }
}

if (!args.bool('no-speed')) {
  const rows = args.optStr('rows')?.split(',').map(Number) ?? [1, 8];
  // The 2B decoder's weights: o_proj, joined q/k/v, joined gate/up, down_proj; the LM head.
  const shapes: [number, number][] = [
    [2048, 2048],
    [4096, 2048],
    [12288, 2048],
    [2048, 6144],
    [151936, 2048],
  ];
  const us = (ms: number) => (1000 * ms).toFixed(2);
  for (const pass of [0, 1])
    for (const [n, k] of shapes) {
      const copies = Math.max(2, Math.min(64, Math.ceil((256 * 2 ** 20) / q4Bytes(n, k))));
      const setup = gpu.recorder('setup');
      const ws = Array.from({ length: copies }, (_, c) => randomQ4Blocks(gpu, setup, fill, n, k, `w${c}`, 64)[0]);
      const whole = ws.every((w) => w.n === n);
      const xq = gpu.tensor([int8GroupWords(8, k)], 'u32', 'xq');
      await setup.submit();
      for (const m of rows) {
        if (!whole) break;
        const q = gpu.recorder('quantize');
        const xm = fill.fill(q, gpu.tensor([m, k], 'f32', 'x'), 'uniform', 1);
        const ym = gpu.tensor([m, n], 'f32', 'y');
        int8.quantizeX(q, xm, xq);
        await q.submit();
        const t = async (f: (r: Recorder, c: number) => void) => {
          const r = await measure(gpu, /./, (rec) => ws.forEach((_, c) => f(rec, c)), { maxReps: 12, gpuOnly: true, calls: copies });
          return r.passMs ?? r.ms;
        };
        const parts: string[] = [];
        if (m === 1) parts.push(`f32 (engine) ${us(await t((r, c) => f32.gemv(r, xm, ws[c], ym)))}`);
        else parts.push(`int8 x given (engine) ${us(await t((r, c) => int8.gemv(r, xm, ws[c], ym, false, { int8: true, xq })))}`);
        for (const o of ops) if (o.op.takes(ws[0])) parts.push(`f16 ${o.name} ${us(await t((r, c) => o.op.gemv(r, xm, ws[c], ym)))}`);
        const gbs = (best: number) => (q4Bytes(n, k) / best / 1e3).toFixed(0);
        if (pass === 1) console.log(`N${n} K${k} M${m} (${(q4Bytes(n, k) / 2 ** 20).toFixed(2)} MiB, ${copies} copies), µs a call in stream: ${parts.join('; ')}  [the best: ${gbs(Math.min(...parts.map((p) => Number(p.split(' ').pop()))))} GB/s]`);
        xm.release();
        ym.release();
      }
      ws.forEach((w) => releaseQ4([w]));
      xq.release();
    }
}
process.exit(failed ? 1 : 0);
