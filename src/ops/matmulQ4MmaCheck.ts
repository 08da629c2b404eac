// Accuracy of the int8 tensor-core 4-bit GEMM (src/ops/matmulQ4Mma.ts) against dequantize-then-
// f64 on the CPU, on activations shaped like Qwen's: Gaussian with a few outlier channels. Run by
// the unit test (where the device has subgroup matrices), by the gemm benchmark suite, which
// puts the figures beside the speed, and by Qwen3VL before it routes products through a new one.
import { Tensor, type Gpu, type Recorder } from '../gpu';
import { bf16BitsToF32, f32ToBf16Bits } from '../model/dtype';
import { allocQ4, q4Words, Q4_GROUP, type Q4Weight } from './matmulQ4';
import type { MatmulQ4Mma } from './matmulQ4Mma';
import type { F16LoraInput, F16LoraUpdate } from './matmulQ4F16';

/** A 4-bit product under test (the int8 or the f16 tensor-core op). */
export interface Q4Product {
  gemm(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor, accumulate?: boolean): void;
  backwardInput(rec: Recorder, dy: Tensor, w: Q4Weight, dx: Tensor, accumulate?: boolean): void;
}

/** A 4-bit product that adds a LoRA adapter's terms inside it (MatmulQ4F16). */
export interface Q4LoraProduct {
  gemmShared(rec: Recorder, x: Tensor, outs: readonly { w: Q4Weight; y: Tensor; lora?: F16LoraUpdate }[], accumulate?: boolean): void;
  backwardInput(rec: Recorder, dy: Tensor, w: Q4Weight, dx: Tensor, accumulate: boolean, lora: F16LoraInput): void;
}

/** The error one term x·w of the reduction may carry (x at row r of reduction index c, output column j). */
type TermBound = (r: number, c: number, j: number, xv: number, wv: number) => number;

export interface MmaAccuracy {
  shape: string;
  /** max |y − y_ref| / max |y_ref| over the output. */
  relToMax: number;
  /** max over elements of |y − y_ref| / Σ_k |x·w|. */
  relToMagnitude: number;
  /** max over elements of |y − y_ref| / the bound the two-limb rounding (and, past a K block of
   * 32, the weights' re-rounding) allows (≤ 1 when right). */
  ofBound: number;
}

/** Outlier channels of the test activations and their gain. */
export const OUTLIERS = { channels: 4, gain: 50 };

function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 4294967296;
  };
}

function gaussian(next: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - next())) * Math.cos(2 * Math.PI * next());
}

function f16ToNumber(h: number): number {
  const e = (h >> 10) & 31;
  const m = h & 1023;
  const v = e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15);
  return h & 0x8000 ? -v : v;
}

/** A random Q4 weight [n, k] on the host: random codes, and f16 scales of either sign around 2^-8, as
 * Q4 of weights of about 0.01 have. */
interface HostQ4 {
  n: number;
  k: number;
  codes: Uint32Array;
  halves: Uint16Array;
}

function randomQ4(next: () => number, n: number, k: number): HostQ4 {
  const words = q4Words(n, k);
  const codes = new Uint32Array(words.codes).map(() => Math.floor(next() * 4294967296));
  const halves = new Uint16Array(2 * words.scales).map(() => (next() < 0.5 ? 0x8000 : 0) | ((7 + Math.floor(next() * 3)) << 10) | Math.floor(next() * 1024));
  return { n, k, codes, halves };
}

/** Its group scale at (row, col), and its weight there dequantized. */
function q4Scale(q: HostQ4, row: number, col: number): number {
  return f16ToNumber(q.halves[row * (q.k / Q4_GROUP) + (col >> 5)]);
}

function q4At(q: HostQ4, row: number, col: number): number {
  return q4Scale(q, row, col) * (((q.codes[(row * q.k + col) >> 3] >>> (4 * (col & 7))) & 15) - 8);
}

/** It on the GPU. */
function uploadQ4(gpu: Gpu, q: HostQ4, label: string): Q4Weight {
  const w = allocQ4(gpu, q.n, q.k, label);
  gpu.write(w.codes, q.codes);
  gpu.write(w.scales, new Uint32Array(q.halves.buffer));
  return w;
}

/**
 * The int8 tensor-core op against the f64 product (checkQ4Product), each element within the bound
 * x's limbs and, past a K block of 32, the weights' re-rounding allow.
 */
export async function checkQ4Mma(gpu: Gpu, mma: MatmulQ4Mma, shape: [number, number, number], seed: number, input = false): Promise<MmaAccuracy> {
  const kb = (red: number) => (mma.steps === 'row' ? red : mma.kBlock);
  return checkQ4Product(gpu, mma, shape, seed, input, ({ x, m, red, out, scale }) => {
    // The two limbs round x to a step of absmax/16256 of its group (its block where kBlock > 32),
    // one limb to absmax/127: an error of at most half of that. Past 32, each weight is also
    // re-rounded to a step t of 8·max|d|/127 over the scales its block shares (its column's groups
    // in the block, or for the input gradient its group's rows in the block): at most t/2 more.
    // With steps 'row' the block is the whole reduction.
    const b = kb(red);
    const blocks = red / b;
    const step = xSteps(mma, x, m, red, b);
    const wstep = new Float64Array(out * blocks);
    if (b > Q4_GROUP)
      for (let j = 0; j < out; j++)
        for (let q = 0; q < blocks; q++) {
          let d = 0;
          for (let c = q * b; c < (q + 1) * b; c += input ? 1 : Q4_GROUP) d = Math.max(d, Math.abs(input ? scale(c, j) : scale(j, c)));
          wstep[j * blocks + q] = (8 * d) / 127;
        }
    return limbBound(step, wstep, b, blocks);
  });
}

/** Gaussian activations [m, width] with OUTLIERS.channels columns scaled by OUTLIERS.gain, as Qwen's have. */
function activations(next: () => number, m: number, width: number): Float32Array {
  const x = new Float32Array(m * width).map(() => gaussian(next));
  const outliers = Array.from({ length: OUTLIERS.channels }, () => Math.floor(next() * width));
  for (let r = 0; r < m; r++) for (const c of outliers) x[r * width + c] *= OUTLIERS.gain;
  return x;
}

/** Relative rounding of a value to f16 (one ulp: WGSL lets a conversion take either neighbour). */
const F16_ULP = 2 ** -10;

/**
 * checkQ4Mma for the f16 tensor-core op (MatmulQ4F16): x (scaled by a power of two per row) and
 * the dequantized weight are each rounded to f16, so each term x·w may be off by about 2 ulps of
 * f16 of its magnitude, plus f16's subnormal step (2^-24 of the row's scale) on x's small values.
 */
export async function checkQ4F16(gpu: Gpu, op: Q4Product, shape: [number, number, number], seed: number, input = false): Promise<MmaAccuracy> {
  return checkQ4Product(gpu, op, shape, seed, input, ({ x, m, red }) => {
    const inv = rowScaleInverses(x, m, red);
    return (r, _c, _j, xv, wv) => Math.abs(xv * wv) * (2 * F16_ULP + F16_ULP ** 2) + 2 ** -24 * inv[r] * Math.abs(wv);
  });
}

/**
 * checkQ4F16 with a LoRA adapter of rank r inside the product: y = x·Wᵀ + s·u·Bᵀ (gemmShared's
 * lora) or, with `input`, dX = dY·W + t·A (backwardInput's), u (t) Gaussian, B (A) Gaussian of 0.05,
 * against the f64 product of the extended reduction [x | s·u]·[W | B]ᵀ with the same per-term bound
 * (the row's scale taken over the extension too).
 */
export async function checkQ4F16Lora(gpu: Gpu, op: Q4LoraProduct, shape: [number, number, number], seed: number, input: boolean, r: number): Promise<MmaAccuracy> {
  return checkQ4Product(gpu, { lora: op, r, scale: input ? 1 : 2 }, shape, seed, input, ({ x, m, red }) => {
    const inv = rowScaleInverses(x, m, red);
    return (row, _c, _j, xv, wv) => Math.abs(xv * wv) * (2 * F16_ULP + F16_ULP ** 2) + 2 ** -24 * inv[row] * Math.abs(wv);
  });
}

/** A product that joins the products of one x into one (MatmulQ4F16.joins). */
export interface Q4JoinedProduct extends Q4LoraProduct {
  joins(outs: readonly { w: Q4Weight; y: Tensor }[], m: number): boolean;
}

/**
 * gemmShared on products of one x joined into one (`ns` columns each, outputs back to back in one
 * buffer, as the decoder's q/k/v), with rank-r adapters on all but the last (whose extension is
 * zeros), against each output's f64 product of the extended reduction [x | s·u₀ | s·u₁ | …], once
 * overwriting y and once accumulating; the worst output's accuracy. Throws where `op` would not
 * join them (the check would not test the joined path).
 */
export async function checkQ4F16Joined(gpu: Gpu, op: Q4JoinedProduct, m: number, ns: readonly number[], k: number, seed: number, r: number): Promise<MmaAccuracy> {
  const next = rng(seed);
  const adapters = ns.length - 1;
  const scales = [2, 0.5];
  const red = k + adapters * r;
  const xBase = activations(next, m, k);
  const us = Array.from({ length: adapters }, () => new Float32Array(m * r).map(() => gaussian(next)));
  const x = new Float32Array(m * red);
  for (let i = 0; i < m; i++) {
    x.set(xBase.subarray(i * k, (i + 1) * k), i * red);
    us.forEach((u, a) => {
      for (let j = 0; j < r; j++) x[i * red + k + a * r + j] = Math.fround(scales[a] * u[i * r + j]);
    });
  }
  const total = ns.reduce((a, n) => a + n, 0);
  const parts = ns.map((n) => ({ ...randomQ4(next, n, k), B: new Float32Array(n * r).map(() => 0.05 * gaussian(next)) }));
  const y0 = new Float32Array(m * total).map(() => gaussian(next));
  const ws = parts.map((p, i) => uploadQ4(gpu, p, `joined-check.w${i}`));
  const tx = gpu.upload(xBase, [m, k], 'f32', 'joined-check.x');
  const tu = us.map((u, a) => gpu.upload(u, [m, r], 'f32', `joined-check.u${a}`));
  const tB = parts.slice(0, adapters).map((p, a) => gpu.upload(p.B, [p.n, r], 'f32', `joined-check.B${a}`));
  const ty = gpu.tensor([m * total], 'f32', 'joined-check.y');
  const tacc = gpu.upload(y0, [m * total], 'f32', 'joined-check.y0');
  // Output i: m rows of its n columns, after the outputs before it (the decoder's stacked q/k/v).
  const views = (t: Tensor) => {
    let at = 0;
    return ns.map((n) => {
      const v = new Tensor(t.buffer, [m, n], 'f32', t.label, t.byteOffset + 4 * at);
      at += m * n;
      return v;
    });
  };
  const outs = (t: Tensor) => views(t).map((y, i) => ({ w: ws[i], y, lora: i < adapters ? { u: tu[i], B: tB[i], r, scale: scales[i] } : undefined }));
  if (!op.joins(outs(ty), m)) throw new Error(`checkQ4F16Joined: the op does not join outputs of ${ns.join(' + ')} columns at ${m} rows`);
  const rec = gpu.recorder('joined-check');
  op.gemmShared(rec, tx, outs(ty), false);
  op.gemmShared(rec, tx, outs(tacc), true);
  await rec.submit();
  const got = await gpu.readF32(ty);
  const gotAcc = await gpu.readF32(tacc);
  for (const t of [tx, ty, tacc, ...tu, ...tB, ...ws.flatMap((w) => [w.codes, w.scales])] as Tensor[]) t.release();

  const inv = rowScaleInverses(x, m, red);
  const termBound: TermBound = (row, _c, _j, xv, wv) => Math.abs(xv * wv) * (2 * F16_ULP + F16_ULP ** 2) + 2 ** -24 * inv[row] * Math.abs(wv);
  let at = 0;
  let worst: MmaAccuracy | null = null;
  for (const [i, p] of parts.entries()) {
    // Past K, only its own adapter's columns meet a nonzero factor.
    const wAt = (c: number, j: number) => (c < k ? q4At(p, j, c) : i < adapters && c >= k + i * r && c < k + (i + 1) * r ? p.B[j * r + c - k - i * r] : 0);
    const slice = (v: Float32Array) => v.subarray(m * at, m * (at + p.n));
    const a = compare({ x, y0: slice(y0), got: slice(got), gotAcc: slice(gotAcc), m, red, out: p.n, termBound, wAt, shape: `joined output ${i} of ${ns.join(' + ')}: M${m} N${p.n} K${k}` });
    if (!worst || !(a.ofBound <= worst.ofBound)) worst = a;
    at += p.n;
  }
  return worst!;
}

/** An op that multiplies dense weights as they are held, rounding them to f16 a call (MatmulQ4F16's gemmDense). */
export interface F16DenseProduct {
  gemmDense(rec: Recorder, x: Tensor, outs: readonly { w: Tensor; y: Tensor; b?: Tensor | null }[], accumulate?: boolean): void;
}

/** gemmDense on a random weight [n, k] (Gaussian, 0.02; `dtype` f32, or bf16 as the published
 * checkpoints hold the vision tower's) with a random bias and checkQ4F16's activations, against
 * the f64 product with that weight plus the bias: x and w each rounded to f16. */
export async function checkF16Dense(gpu: Gpu, op: F16DenseProduct, shape: [number, number, number], seed: number, dtype: 'f32' | 'bf16' = 'bf16'): Promise<MmaAccuracy> {
  return checkDense(gpu, shape, seed, `f16 (${dtype} W)`, dtype, (_rec, tw, b) => ({ run: (r, x, y, acc) => op.gemmDense(r, x, [{ w: tw, y, b }], acc), release: () => undefined }), ({ x, m, k }) => {
    const inv = rowScaleInverses(x, m, k);
    return (r, _c, _j, xv, wv) => Math.abs(xv * wv) * (2 * F16_ULP + F16_ULP ** 2) + 2 ** -24 * inv[r] * Math.abs(wv) + 2 ** -24 * Math.abs(xv);
  });
}

/**
 * A product on a random weight [n, k] (Gaussian, 0.02; with `dtype` bf16 rounded to bf16 and held
 * so) through `copy`, on the activations of checkQ4Product, once overwriting y and once
 * accumulating into a random y0, against the f64 product with that weight and the sum of
 * `bounds`' per-term errors. `copy` gets a random bias [n] where the op adds one (`bias`).
 */
async function checkDense(
  gpu: Gpu,
  [m, n, k]: [number, number, number],
  seed: number,
  what: string,
  dtype: 'f32' | 'bf16',
  copy: (rec: Recorder, w: Tensor, b: Tensor | null, n: number, k: number) => { run: (rec: Recorder, x: Tensor, y: Tensor, accumulate: boolean) => void; release: () => void },
  bounds: (a: { x: Float32Array; w: Float32Array; m: number; n: number; k: number }) => TermBound,
  withBias = true,
): Promise<MmaAccuracy> {
  const next = rng(seed);
  const x = activations(next, m, k);
  const w = new Float32Array(n * k).map(() => 0.02 * gaussian(next));
  // A bf16 weight: its values are those halves, exactly.
  if (dtype === 'bf16') w.forEach((v, i) => (w[i] = bf16BitsToF32(f32ToBf16Bits(v))));
  const bias = withBias ? new Float32Array(n).map(() => gaussian(next)) : null;
  const y0 = new Float32Array(m * n).map(() => gaussian(next));
  const tw = dtype === 'bf16' ? gpu.upload(Uint16Array.from(w, f32ToBf16Bits), [n, k], 'bf16', `${what}-check.w`) : gpu.upload(w, [n, k], 'f32', `${what}-check.w`);
  const tb = bias && gpu.upload(bias, [n], 'f32', `${what}-check.b`);
  const tx = gpu.upload(x, [m, k], 'f32', `${what}-check.x`);
  const ty = gpu.tensor([m, n], 'f32', `${what}-check.y`);
  const tacc = gpu.upload(y0, [m, n], 'f32', `${what}-check.y0`);
  const rec = gpu.recorder(`${what}-check`);
  const c = copy(rec, tw, tb, n, k);
  c.run(rec, tx, ty, false);
  c.run(rec, tx, tacc, true);
  await rec.submit();
  const got = await gpu.readF32(ty);
  const gotAcc = await gpu.readF32(tacc);
  for (const t of [tw, tb, tx, ty, tacc]) t?.release();
  c.release();
  return compare({ x, y0, got, gotAcc, m, red: k, out: n, termBound: bounds({ x, w, m, n, k }), wAt: (col, j) => w[j * k + col], bias, shape: `${what} W M${m} N${n} K${k}${bias ? ' with a bias' : ''}` });
}

/** 1 / row_scale's power of two per row of x [m, red] (the row's largest |x| into [2^14, 2^15)). */
function rowScaleInverses(x: Float32Array, m: number, red: number): Float64Array {
  const inv = new Float64Array(m);
  for (let r = 0; r < m; r++) {
    let a = 0;
    for (let c = 0; c < red; c++) a = Math.max(a, Math.abs(x[r * red + c]));
    inv[r] = a > 0 ? 2 ** (Math.floor(Math.log2(a)) + 1 - 15) : 1;
  }
  return inv;
}

/**
 * Run `op.gemm` on random [m, k] activations (Gaussian, OUTLIERS.channels columns scaled by
 * OUTLIERS.gain) and a random Q4 weight [n, k], once overwriting y and once accumulating into a
 * random y0, and compare both with the f64 product of the dequantized weight, each element's error
 * against the sum of `bounds`' per-term errors. With `input`, the same for `op.backwardInput`:
 * dX [m, k] = dY [m, n]·W.
 */
async function checkQ4Product(
  gpu: Gpu,
  subject: Q4Product | { lora: Q4LoraProduct; r: number; scale: number },
  [m, n, k]: [number, number, number],
  seed: number,
  input: boolean,
  bounds: (a: { x: Float32Array; m: number; red: number; out: number; scale: (row: number, col: number) => number }) => TermBound,
): Promise<MmaAccuracy> {
  const lora = 'lora' in subject ? subject : null;
  // The product reduces over `red` (k, or n for the input gradient) into `out` columns; an
  // adapter's terms go on for r more (u, or t, against B, or A).
  const [base, out] = input ? [n, k] : [k, n];
  const lr = lora?.r ?? 0;
  const red = base + lr;
  const next = rng(seed);
  const xBase = activations(next, m, base);
  const u = new Float32Array(m * lr).map(() => gaussian(next));
  const factor = new Float32Array(lr * out).map(() => 0.05 * gaussian(next)); // B [n, r] or A [r, k]
  // [x | s·u] as the product sees it (s·u rounded to f32 as the GPU forms it).
  const x = new Float32Array(m * red);
  for (let i = 0; i < m; i++) {
    x.set(xBase.subarray(i * base, (i + 1) * base), i * red);
    for (let j = 0; j < lr; j++) x[i * red + base + j] = Math.fround(lora!.scale * u[i * lr + j]);
  }
  const q = randomQ4(next, n, k);
  const y0 = new Float32Array(m * out).map(() => gaussian(next));

  const w = uploadQ4(gpu, q, 'mma-check.w');
  const tx = gpu.upload(xBase, [m, base], 'f32', 'mma-check.x');
  const ty = gpu.tensor([m, out], 'f32', 'mma-check.y');
  const tacc = gpu.upload(y0, [m, out], 'f32', 'mma-check.y0');
  // The adapter's u (or t) and B (or A).
  const lt = lora && { u: gpu.upload(u, [m, lr], 'f32', 'mma-check.u'), f: gpu.upload(factor, input ? [lr, k] : [n, lr], 'f32', 'mma-check.factor') };
  const rec = gpu.recorder('mma-check');
  // Once overwriting y, once accumulating into y0.
  for (const [y, acc] of [[ty, false], [tacc, true]] as const) {
    if ('lora' in subject) {
      if (input) subject.lora.backwardInput(rec, tx, w, y, acc, { t: lt!.u, A: lt!.f, r: lr });
      else subject.lora.gemmShared(rec, tx, [{ w, y, lora: { u: lt!.u, B: lt!.f, r: lr, scale: subject.scale } }], acc);
    } else if (input) subject.backwardInput(rec, tx, w, y, acc);
    else subject.gemm(rec, tx, w, y, acc);
  }
  await rec.submit();
  const got = await gpu.readF32(ty);
  const gotAcc = await gpu.readF32(tacc);
  for (const t of [tx, ty, tacc, w.codes, w.scales, ...(lt ? [lt.u, lt.f] : [])] as Tensor[]) t.release();

  const scale = (row: number, col: number) => q4Scale(q, row, col);
  const deq = new Float64Array(n * k);
  for (let r = 0; r < n; r++) for (let c = 0; c < k; c++) deq[r * k + c] = q4At(q, r, c);
  // The weight meeting x[., c] in output column j (past W's reduction, the adapter's factor).
  const wAt = (c: number, j: number) => {
    if (c >= base) return input ? factor[(c - base) * k + j] : factor[j * lr + c - base];
    return input ? deq[c * k + j] : deq[j * k + c];
  };
  const termBound = bounds({ x, m, red, out, scale });
  return compare({ x, y0, got, gotAcc, m, red, out, termBound, wAt, shape: `${input ? 'dX ' : ''}M${m} N${n} K${k}` });
}

/** x rounded to `step` per (row, K block of kb) and each weight to `wstep` per (output column,
 * block), `blocks` blocks a row: half a step of each on a term, and their product. */
function limbBound(step: Float64Array, wstep: Float64Array, kb: number, blocks: number): TermBound {
  return (r, c, j, xv, wv) => {
    const q = Math.floor(c / kb);
    const t = wstep[j * blocks + q];
    return 0.5 * step[r * blocks + q] * (Math.abs(wv) + 0.5 * t) + 0.5 * t * Math.abs(xv);
  };
}

/** x's rounding step per (row, K block of kb): half of it is x's error (two limbs or one). */
function xSteps(mma: MatmulQ4Mma, x: Float32Array, m: number, red: number, kb: number): Float64Array {
  const blocks = red / kb;
  const step = new Float64Array(m * blocks);
  for (let r = 0; r < m; r++)
    for (let b = 0; b < blocks; b++) {
      let a = 0;
      for (let c = 0; c < kb; c++) a = Math.max(a, Math.abs(x[r * red + b * kb + c]));
      step[r * blocks + b] = a / (mma.limbs === 2 ? 16256 : 127);
    }
  return step;
}

/** The GEMM's results (`got`, and `gotAcc` on top of y0) against the f64 product, and against the
 * sum over the reduction of `termBound`. */
function compare(a: {
  x: Float32Array;
  y0: Float32Array;
  got: Float32Array;
  gotAcc: Float32Array;
  m: number;
  red: number;
  out: number;
  termBound: TermBound;
  wAt: (c: number, j: number) => number;
  /** [out], added to each row's product in f32 (one rounding of the sum). */
  bias?: Float32Array | null;
  shape: string;
}): MmaAccuracy {
  const { x, y0, got, gotAcc, m, red, out, termBound, wAt, bias } = a;
  let maxRef = 0;
  let maxErr = 0;
  let relToMagnitude = 0;
  let ofBound = 0;
  for (let r = 0; r < m; r++)
    for (let j = 0; j < out; j++) {
      let ref = 0;
      let mag = 0;
      let bound = 0;
      for (let c = 0; c < red; c++) {
        const xv = x[r * red + c];
        const wv = wAt(c, j);
        ref += xv * wv;
        mag += Math.abs(xv * wv);
        bound += termBound(r, c, j, xv, wv);
      }
      if (bias) {
        ref += bias[j];
        mag += Math.abs(bias[j]);
      }
      // f32 accumulation over the scaled partials: a few ulps of the magnitude on top.
      bound += 1e-6 * mag;
      const yAcc = ref + y0[r * out + j];
      const err = Math.max(Math.abs(got[r * out + j] - ref), Math.abs(gotAcc[r * out + j] - yAcc) - 1e-6 * Math.abs(y0[r * out + j]));
      maxRef = Math.max(maxRef, Math.abs(ref));
      maxErr = Math.max(maxErr, Math.abs(got[r * out + j] - ref));
      relToMagnitude = Math.max(relToMagnitude, err / (mag || 1));
      ofBound = Math.max(ofBound, Number.isFinite(err) ? err / bound : Infinity);
    }
  return { shape: a.shape, relToMax: maxErr / (maxRef || 1), relToMagnitude, ofBound };
}

/**
 * `mma.quantizeDense` then `mma.gemmInt8` on a random f32 weight [n, k] (Gaussian, 0.02) and the
 * same activations as checkQ4Mma, against the f64 product with the f32 weight: each weight is
 * rounded to a step of its (row, K block)'s largest |w| / 127.
 */
export async function checkInt8Mma(gpu: Gpu, mma: MatmulQ4Mma, shape: [number, number, number], seed: number): Promise<MmaAccuracy> {
  const kb = mma.kBlock;
  return checkDense(gpu, shape, seed, 'int8', 'f32', (rec, tw, _b, n, k) => {
    const w8 = mma.quantizeDense(rec, tw, n, k, 'int8-check.w');
    return { run: (r, x, y, acc) => mma.gemmInt8(r, x, [{ w: w8, y }], acc), release: () => [w8.w8, w8.steps].forEach((t) => t.release()) };
  }, ({ x, w, m, n, k }) => {
    const blocks = k / kb;
    const wstep = new Float64Array(n * blocks);
    for (let j = 0; j < n; j++)
      for (let b = 0; b < blocks; b++) {
        let d = 0;
        for (let c = b * kb; c < (b + 1) * kb; c++) d = Math.max(d, Math.abs(w[j * k + c]));
        wstep[j * blocks + b] = d / 127;
      }
    return limbBound(xSteps(mma, x, m, k, kb), wstep, kb, blocks);
  }, false);
}
