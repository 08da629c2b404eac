import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, finiteDifferences, randUniform } from '../helpers/reference';
import { Matmul, tileOf, type GemmTile } from '../../src/ops/matmul';
import { ShapeError, type Gpu, type Tensor } from '../../src/gpu';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../../src/model/dtype';

const SIZES = [1, 3, 17, 33, 65];

interface RefGemm {
  a: ArrayLike<number>;
  b: ArrayLike<number>;
  c: ArrayLike<number>;
  m: number;
  n: number;
  k: number;
  transA: boolean;
  transB: boolean;
  alpha: number;
  beta: number;
  bias?: ArrayLike<number>;
}

/** f64 reference of C = alpha·op(A)·op(B) + beta·C + bias, and per element the error scale |alpha|·Σ|a||b| + |beta·c| + |bias|. */
function refGemm(g: RefGemm): { want: Float64Array; scale: Float64Array } {
  const { m, n, k } = g;
  const want = new Float64Array(m * n);
  const scale = new Float64Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let s = 0;
      let abs = 0;
      for (let p = 0; p < k; p++) {
        const av = g.transA ? g.a[p * m + i] : g.a[i * k + p];
        const bv = g.transB ? g.b[j * k + p] : g.b[p * n + j];
        s += av * bv;
        abs += Math.abs(av * bv);
      }
      const cv = g.beta !== 0 ? g.beta * g.c[i * n + j] : 0;
      const bias = g.bias ? g.bias[j] : 0;
      want[i * n + j] = g.alpha * s + cv + bias;
      scale[i * n + j] = Math.abs(g.alpha) * abs + Math.abs(cv) + Math.abs(bias);
    }
  }
  return { want, scale };
}

/** |got - want| ≤ rel · scale elementwise (scale from refGemm); names the worst element on failure. */
function expectWithin(got: ArrayLike<number>, want: ArrayLike<number>, scale: ArrayLike<number>, rel: number, what: string): number {
  expect(got.length, `${what}: length`).toBe(want.length);
  let worst = 0;
  for (let i = 0; i < want.length; i++) {
    const err = Math.abs(got[i] - want[i]);
    const r = err / Math.max(scale[i], 1e-30);
    if (!(err <= rel * scale[i] + 1e-30)) {
      expect.fail(`${what}: element ${i} is ${got[i]}, expected ${want[i]} (error ${err}, scale ${scale[i]})`);
    }
    worst = Math.max(worst, r);
  }
  return worst;
}

async function read(gpu: Gpu, t: Tensor): Promise<Float32Array> {
  return (await gpu.readF32(t)).slice(0, t.numel);
}

describe('matmul: GEMM', () => {
  for (const transA of [false, true]) {
    for (const transB of [false, true]) {
      const tag = `${transA ? 'Aᵀ' : 'A'}·${transB ? 'Bᵀ' : 'B'}`;
      it(`${tag} matches f64 for M, N, K in {${SIZES}} with alpha/beta`, async () => {
        const gpu = await testGpu();
        const mm = await Matmul.create(gpu);
        const cases: { g: RefGemm; c: Tensor; held: Tensor[] }[] = [];
        const rec = gpu.recorder();
        let seed = 100 * (Number(transA) * 2 + Number(transB));
        // Every (M, N, K) triple; alpha/beta vary so overwrite, accumulate and scale are all covered.
        for (const m of SIZES) {
          for (const n of SIZES) {
            for (const k of SIZES) {
              seed += 3;
              const variant = seed % 3;
              const alpha = [1, -0.75, 2][variant];
              const beta = [0, 1, 0.5][variant];
              const a = randUniform(m * k, seed);
              const b = randUniform(k * n, seed + 1);
              const c = randUniform(m * n, seed + 2);
              const ta = gpu.upload(a, transA ? [k, m] : [m, k], 'f32', 'a');
              const tb = gpu.upload(b, transB ? [n, k] : [k, n], 'f32', 'b');
              const tc = gpu.upload(c, [m, n], 'f32', 'c');
              mm.gemm(rec, { a: ta, b: tb, c: tc, m, n, k, transA, transB, alpha, beta });
              cases.push({ g: { a, b, c, m, n, k, transA, transB, alpha, beta }, c: tc, held: [ta, tb, tc] });
            }
          }
        }
        await rec.submit();
        let worst = 0;
        for (const { g, c, held } of cases) {
          const { want, scale } = refGemm(g);
          const what = `${tag} M=${g.m} N=${g.n} K=${g.k} alpha=${g.alpha} beta=${g.beta}`;
          worst = Math.max(worst, expectWithin(await read(gpu, c), want, scale, 1e-5, what));
          for (const t of held) t.release();
        }
        expect(worst).toBeLessThan(1e-5);
      });
    }
  }

  it('every block shape (64x128, 256x16, 16x256) on shapes spanning several blocks: all four transposes, bias, split-K', async () => {
    const gpu = await testGpu();
    const mm = await Matmul.create(gpu);
    // Edges cut every block dimension, K is not a multiple of the 16-deep step, and [300, 16] over
    // K 2048 splits along K into 256x16 blocks summed by a 16x256 one (LoRA's x·Aᵀ).
    const cases: [GemmTile, number, number, number][] = [
      ['large', 131, 137, 35],
      ['tall', 259, 17, 33],
      ['wide', 17, 259, 33],
      ['tall', 300, 16, 2048],
    ];
    let seed = 4000;
    for (const [tile, m, n, k] of cases) {
      for (const transA of [false, true]) {
        for (const transB of [false, true]) {
          seed += 5;
          const [alpha, beta] = seed % 2 ? [0.5, 0.7] : [1, 0];
          const withBias = transB && !transA && k < 2048;
          const a = randUniform(m * k, seed);
          const b = randUniform(k * n, seed + 1);
          const c = randUniform(m * n, seed + 2);
          const bias = withBias ? randUniform(n, seed + 3) : undefined;
          const ta = gpu.upload(a, transA ? [k, m] : [m, k], 'f32', 'a');
          const tb = gpu.upload(b, transB ? [n, k] : [k, n], 'f32', 'b');
          const tc = gpu.upload(c, [m, n], 'f32', 'c');
          const tbias = bias ? gpu.upload(bias, [n], 'f32', 'bias') : undefined;
          const rec = gpu.recorder();
          mm.gemm(rec, { a: ta, b: tb, c: tc, m, n, k, transA, transB, alpha, beta, bias: tbias, tile });
          await rec.submit();
          const { want, scale } = refGemm({ a, b, c, m, n, k, transA, transB, alpha, beta, bias });
          expectWithin(await read(gpu, tc), want, scale, 1e-5, `${tile} M=${m} N=${n} K=${k} ${transA ? 'Aᵀ' : 'A'}·${transB ? 'Bᵀ' : 'B'}${bias ? ' + bias' : ''}`);
          for (const t of [ta, tb, tc, tbias]) t?.release();
        }
      }
    }
  });

  it('picks thin blocks for thin products and the big block only where it fills the GPU over a long K', () => {
    expect(tileOf(2816, 16, 2048)).toBe('tall');
    expect(tileOf(16, 2048, 2816)).toBe('wide');
    expect(tileOf(1, 45056, 8)).toBe('wide');
    expect(tileOf(2816, 6144, 2048)).toBe('large');
    expect(tileOf(2816, 6144, 16)).toBe('square');
    // 104 blocks of 64x128 (the vision tower's q/k/v/proj at a 448x448 image) take the big block;
    // 64 over a K that splits take it too (split in 8), over a short K not; a batch counts its
    // items' blocks, and is never split.
    expect(tileOf(784, 1024, 1024)).toBe('large');
    expect(tileOf(196, 2048, 4096)).toBe('large');
    expect(tileOf(196, 2048, 384)).toBe('square');
    expect(tileOf(196, 1024, 4096, 2)).toBe('square');
    expect(tileOf(196, 2048, 4096, 2)).toBe('large');
    expect(tileOf(65, 65, 65)).toBe('square');
  });

  it('split along K when C has few blocks and K is long (LoRA rank-r shapes): all four transposes, alpha/beta, a bias (added once), an offset C', async () => {
    const gpu = await testGpu();
    const mm = await Matmul.create(gpu);
    // [37, 16] over K 2048: one block of C, split in 8 chunks of 256; [16, 70] over K 1536: two
    // blocks, split in 4 of 384 (not 8: chunks under 256); K 1000 splits in 2 of 500.
    const shapes = [
      [37, 16, 2048],
      [16, 70, 1536],
      [5, 3, 1000],
    ];
    let seed = 900;
    for (const [m, n, k] of shapes) {
      for (const transA of [false, true]) {
        for (const transB of [false, true]) {
          seed += 7;
          const [alpha, beta] = seed % 2 ? [0.5, 0.7] : [1, 0];
          const a = randUniform(m * k, seed);
          const b = randUniform(k * n, seed + 1);
          const c = randUniform(m * n, seed + 2);
          // A bias with alpha 1 (the chunks' first partial carries it); with alpha 0.5 the product is not split.
          const bias = transA ? randUniform(n, seed + 3) : undefined;
          const off = 13; // C as a view 13 elements into a larger buffer
          const ta = gpu.upload(a, transA ? [k, m] : [m, k], 'f32', 'a');
          const tb = gpu.upload(b, transB ? [n, k] : [k, n], 'f32', 'b');
          const tc = gpu.upload(Float32Array.from([...new Array(off).fill(9), ...c, 9]), [off + m * n + 1], 'f32', 'c');
          const tbias = bias ? gpu.upload(bias, [n], 'f32', 'bias') : undefined;
          const rec = gpu.recorder();
          mm.gemm(rec, { a: ta, b: tb, c: tc, m, n, k, transA, transB, alpha, beta, offsetC: off, bias: tbias });
          await rec.submit();
          const got = await read(gpu, tc);
          const { want, scale } = refGemm({ a, b, c, m, n, k, transA, transB, alpha, beta, bias });
          const what = `split-K M=${m} N=${n} K=${k} ${transA ? 'Aᵀ' : 'A'}·${transB ? 'Bᵀ' : 'B'}`;
          expectWithin(got.slice(off, off + m * n), want, scale, 1e-5, what);
          expect([...got.slice(0, off), got[off + m * n]], `${what}: outside C untouched`).toEqual([...new Array(off).fill(9), 9]);
          for (const t of [ta, tb, tc, tbias]) t?.release();
        }
      }
    }
  });

  it('takes a K split from the caller (benchmarks): a divisor of K, on one product only', async () => {
    const gpu = await testGpu();
    const mm = await Matmul.create(gpu);
    const [m, n, k] = [70, 20, 96];
    const a = randUniform(m * k, 31);
    const b = randUniform(n * k, 32);
    const [ta, tb, tc] = [gpu.upload(a, [m, k], 'f32', 'a'), gpu.upload(b, [n, k], 'f32', 'b'), gpu.tensor([m, n], 'f32', 'c')];
    for (const split of [1, 3, 32]) {
      const rec = gpu.recorder();
      mm.gemm(rec, { a: ta, b: tb, c: tc, m, n, k, transB: true, split });
      await rec.submit();
      const { want, scale } = refGemm({ a, b, c: new Float32Array(m * n), m, n, k, transA: false, transB: true, alpha: 1, beta: 0 });
      expectWithin(await read(gpu, tc), want, scale, 1e-5, `split ${split}`);
    }
    const rec = gpu.recorder();
    expect(() => mm.gemm(rec, { a: ta, b: tb, c: tc, m, n, k, transB: true, split: 5 })).toThrow(/split 5 must divide/);
    expect(() => mm.gemm(rec, { a: ta, b: tb, c: tc, m, n: n / 2, k, transB: true, batch: 2, strideA: 0, strideC: (m * n) / 2, strideB: (n / 2) * k, split: 2 })).toThrow(/one product/);
    for (const t of [ta, tb, tc]) t.release();
  });

  it('adds a bias, and beta = 0 never reads C (NaN there stays out)', async () => {
    const gpu = await testGpu();
    const mm = await Matmul.create(gpu);
    const [m, n, k] = [33, 17, 65];
    const a = randUniform(m * k, 1);
    const b = randUniform(n * k, 2);
    const bias = randUniform(n, 3);
    const ta = gpu.upload(a, [m, k], 'f32', 'a');
    const tb = gpu.upload(b, [n, k], 'f32', 'b');
    const tbias = gpu.upload(bias, [n], 'f32', 'bias');
    const tc = gpu.upload(new Float32Array(m * n).fill(NaN), [m, n], 'f32', 'c');
    const rec = gpu.recorder();
    mm.gemm(rec, { a: ta, b: tb, c: tc, m, n, k, transB: true, alpha: 0.5, bias: tbias });
    await rec.submit();
    const { want, scale } = refGemm({ a, b, c: [], m, n, k, transA: false, transB: true, alpha: 0.5, beta: 0, bias });
    expectWithin(await read(gpu, tc), want, scale, 1e-5, 'gemm + bias');
    for (const t of [ta, tb, tbias, tc]) t.release();
  });

  it('batched, strided and offset: per-head Q·Kᵀ on [T, H·D] activations, and a broadcast operand', async () => {
    const gpu = await testGpu();
    const mm = await Matmul.create(gpu);
    const [T, H, D] = [19, 3, 9];
    const q = randUniform(T * H * D, 11);
    const kv = randUniform(T * H * D, 12);
    const tq = gpu.upload(q, [T, H * D], 'f32', 'q');
    const tk = gpu.upload(kv, [T, H * D], 'f32', 'k');
    // Scores land in a buffer with a leading pad, 2 rows of slack per head and one spare column.
    const off = 5;
    const ldc = T + 1;
    const strideC = (T + 2) * ldc;
    const ts = gpu.upload(new Float32Array(off + H * strideC).fill(7), [off + H * strideC], 'f32', 'scores');
    const rec = gpu.recorder();
    mm.gemm(rec, {
      a: tq, b: tk, c: ts, m: T, n: T, k: D, transB: true, alpha: 0.25, batch: H,
      lda: H * D, ldb: H * D, ldc, strideA: D, strideB: D, strideC, offsetC: off,
    });
    // Broadcast: one [D, 4] matrix applied to every head's rows (strideB 0).
    const w = randUniform(D * 4, 13);
    const tw = gpu.upload(w, [D, 4], 'f32', 'w');
    const tout = gpu.tensor([H, T, 4], 'f32', 'out');
    mm.gemm(rec, { a: tq, b: tw, c: tout, m: T, n: 4, k: D, batch: H, lda: H * D, strideA: D, strideB: 0 });
    await rec.submit();
    const s = await read(gpu, ts);
    const o = await read(gpu, tout);
    for (let h = 0; h < H; h++) {
      const qh = new Float64Array(T * D);
      const kh = new Float64Array(T * D);
      for (let t = 0; t < T; t++) {
        for (let d = 0; d < D; d++) {
          qh[t * D + d] = q[t * H * D + h * D + d];
          kh[t * D + d] = kv[t * H * D + h * D + d];
        }
      }
      const sc = refGemm({ a: qh, b: kh, c: [], m: T, n: T, k: D, transA: false, transB: true, alpha: 0.25, beta: 0 });
      const got = new Float64Array(T * T);
      for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) got[i * T + j] = s[off + h * strideC + i * ldc + j];
      expectWithin(got, sc.want, sc.scale, 1e-5, `scores head ${h}`);
      const ow = refGemm({ a: qh, b: w, c: [], m: T, n: 4, k: D, transA: false, transB: false, alpha: 1, beta: 0 });
      expectWithin(o.subarray(h * T * 4, (h + 1) * T * 4), ow.want, ow.scale, 1e-5, `broadcast head ${h}`);
    }
    // Nothing outside the addressed elements was written.
    expect(s.subarray(0, off).every((v) => v === 7)).toBe(true);
    for (let h = 0; h < H; h++) {
      for (let i = 0; i < T; i++) expect(s[off + h * strideC + i * ldc + T]).toBe(7);
      expect(s[off + h * strideC + T * ldc]).toBe(7);
    }
    for (const t of [tq, tk, ts, tw, tout]) t.release();
  });

  it('batched with a bias per item over one broadcast x (the vision tower\'s joined q/k/v): both big tiles, C items apart by a padded stride', async () => {
    const gpu = await testGpu();
    const mm = await Matmul.create(gpu);
    const [m, n, k, batch] = [70, 67, 40, 3];
    const x = randUniform(m * k, 21);
    const w = randUniform(batch * n * k, 22);
    const bias = randUniform(batch * n, 23);
    const strideC = m * n + 13;
    const tx = gpu.upload(x, [m, k], 'f32', 'x');
    const tw = gpu.upload(w, [batch, n, k], 'f32', 'w');
    const tb = gpu.upload(bias, [batch, n], 'f32', 'bias');
    for (const tile of ['square', 'large'] as const) {
      const tc = gpu.upload(new Float32Array(batch * strideC).fill(7), [batch * strideC], 'f32', 'c');
      const rec = gpu.recorder();
      mm.gemm(rec, { a: tx, b: tw, c: tc, m, n, k, transB: true, batch, strideA: 0, strideB: n * k, strideC, bias: tb, strideBias: n, tile });
      await rec.submit();
      const c = await read(gpu, tc);
      for (let i = 0; i < batch; i++) {
        const r = refGemm({ a: x, b: w.subarray(i * n * k, (i + 1) * n * k), c: [], m, n, k, transA: false, transB: true, alpha: 1, beta: 0, bias: bias.subarray(i * n, (i + 1) * n) });
        expectWithin(c.subarray(i * strideC, i * strideC + m * n), r.want, r.scale, 1e-5, `${tile} item ${i}`);
        // The padding between items is untouched.
        expect(c.subarray(i * strideC + m * n, (i + 1) * strideC).every((v) => v === 7)).toBe(true);
      }
      tc.release();
    }
    const rec = gpu.recorder();
    const tc = gpu.tensor([batch * strideC], 'f32', 'c');
    // Too few biases for three items n apart; a bias stride without a batch of biases.
    expect(() => mm.gemm(rec, { a: tx, b: tw, c: tc, m, n, k, transB: true, batch, strideA: 0, strideC, bias: tb, strideBias: n + 1 })).toThrow(/bias has 201 elements, expected 203/);
    expect(() => mm.gemm(rec, { a: tx, b: tw, c: tc, m, n, k, transB: true, batch, strideA: 0, strideC, bias: tb })).toThrow(/expected n = 67/);
    await rec.submit();
    for (const t of [tx, tw, tb, tc]) t.release();
  });

  it('B held in halves (bf16, f16: a frozen weight as its checkpoint stores it) gives what the f32 GEMM gives on the widened values, bit for bit: every tile, both B layouts, a bias, split-K, a batch, odd offsets and leading dimensions', async () => {
    const gpu = await testGpu();
    const mm = await Matmul.create(gpu);
    // [m, n, k, tile, split]: edges on every block dimension; B one element into its buffer, its
    // rows one element longer than their length (halves straddle words); a split along K; a tall
    // and a wide block.
    const shapes: [number, number, number, GemmTile | undefined, number | undefined][] = [
      [131, 137, 35, 'large', undefined],
      [33, 65, 17, 'square', undefined],
      [259, 17, 33, 'tall', undefined],
      [17, 259, 33, 'wide', undefined],
      [37, 16, 2048, undefined, 8],
    ];
    const narrow = { bf16: f32ToBf16Bits, f16: f32ToF16Bits };
    const widen = { bf16: bf16BitsToF32, f16: f16BitsToF32 };
    const off = 1;
    let seed = 7000;
    for (const dtype of ['bf16', 'f16'] as const) {
      for (const [m, n, k, tile, split] of shapes) {
        for (const transB of [false, true]) {
          seed += 3;
          const [rows, cols] = transB ? [n, k] : [k, n];
          const ld = cols + 1;
          const bias = transB ? randUniform(n, seed + 2) : undefined;
          const a = randUniform(m * k, seed);
          const bits = Uint16Array.from(randUniform(off + rows * ld, seed + 1), (v) => narrow[dtype](v));
          // NaN before B and in each row's padding: a half outside [K, N] is never multiplied, even by zero.
          const nan = narrow[dtype](NaN);
          bits.fill(nan, 0, off);
          for (let r = 0; r < rows; r++) bits[off + r * ld + cols] = nan;
          const stored = Float32Array.from(bits, (h) => widen[dtype](h));
          const b = Float32Array.from({ length: rows * cols }, (_, e) => stored[off + Math.floor(e / cols) * ld + (e % cols)]);
          const ta = gpu.upload(a, [m, k], 'f32', 'a');
          const th = gpu.upload(bits, [bits.length], dtype, 'b halves');
          const tf = gpu.upload(stored, [stored.length], 'f32', 'b widened');
          const tbias = bias ? gpu.upload(bias, [n], 'f32', 'bias') : undefined;
          const outs = [gpu.tensor([m, n], 'f32', 'c halves'), gpu.tensor([m, n], 'f32', 'c f32')];
          const rec = gpu.recorder();
          [th, tf].forEach((tb, i) => mm.gemm(rec, { a: ta, b: tb, c: outs[i], m, n, k, transB, ldb: ld, offsetB: off, bias: tbias, tile, split }));
          await rec.submit();
          const [got, want] = await Promise.all(outs.map((t) => read(gpu, t)));
          const what = `${dtype} M=${m} N=${n} K=${k} ${tile ?? 'default'} ${transB ? 'A·Bᵀ' : 'A·B'}${split ? ` split ${split}` : ''}`;
          expect(got, what).toEqual(want);
          const { want: ref, scale } = refGemm({ a, b, c: [], m, n, k, transA: false, transB, alpha: 1, beta: 0, bias });
          expectWithin(got, ref, scale, 1e-5, what);
          for (const t of [ta, th, tf, tbias, ...outs]) t?.release();
        }
      }
    }
    // The vision tower's joined q/k/v: a batch of three bf16 weights, one broadcast x, a bias each.
    const [m, n, k, batch] = [70, 67, 40, 3];
    const x = randUniform(m * k, 31);
    const bits = Uint16Array.from(randUniform(batch * n * k, 32), f32ToBf16Bits);
    const biases = randUniform(batch * n, 33);
    const tx = gpu.upload(x, [m, k], 'f32', 'x');
    const tw = gpu.upload(bits, [batch, n, k], 'bf16', 'w');
    const tb = gpu.upload(biases, [batch, n], 'f32', 'bias');
    const tc = gpu.tensor([batch, m, n], 'f32', 'c');
    const rec = gpu.recorder();
    mm.gemm(rec, { a: tx, b: tw, c: tc, m, n, k, transB: true, batch, strideA: 0, strideB: n * k, strideC: m * n, bias: tb, strideBias: n });
    await rec.submit();
    const c = await read(gpu, tc);
    const w = Float32Array.from(bits, bf16BitsToF32);
    for (let i = 0; i < batch; i++) {
      const r = refGemm({ a: x, b: w.subarray(i * n * k, (i + 1) * n * k), c: [], m, n, k, transA: false, transB: true, alpha: 1, beta: 0, bias: biases.subarray(i * n, (i + 1) * n) });
      expectWithin(c.subarray(i * m * n, (i + 1) * m * n), r.want, r.scale, 1e-5, `joined bf16 item ${i}`);
    }
    // Halves are B's alone: A and C stay f32. Their f32 copy is scratch, which a tape cannot hold.
    const ah = gpu.tensor([m, k], 'bf16', 'a halves');
    expect(() => mm.gemm(rec, { a: ah, b: tw, c: tc, m, n, k, transB: true })).toThrow(/A \('a halves'\) must be f32, got bf16/);
    const { tape } = rec.capture(() => expect(() => mm.gemm(rec, { a: tx, b: tw, c: tc, m, n, k, transB: true })).toThrow(/'w'\) in bf16 while a tape is captured/));
    tape.release();
    for (const t of [tx, tw, tb, tc, ah]) t.release();
  });

  it('refuses bad shapes and dtypes with ShapeError naming the op', async () => {
    const gpu = await testGpu();
    const mm = await Matmul.create(gpu);
    const a = gpu.tensor([4, 5], 'f32', 'a');
    const b = gpu.tensor([5, 6], 'f32', 'b');
    const c = gpu.tensor([4, 6], 'f32', 'c');
    const ci = gpu.tensor([4, 6], 'i32', 'ci');
    const rec = gpu.recorder();
    expect(() => mm.gemm(rec, { a, b, c, m: 4, n: 6, k: 6 })).toThrow(ShapeError);
    expect(() => mm.gemm(rec, { a, b, c, m: 4, n: 6, k: 5, lda: 4 })).toThrow(/leading dimension/);
    expect(() => mm.gemm(rec, { a, b, c, m: 4, n: 6, k: 5, batch: 2 })).toThrow(/too small/);
    expect(() => mm.gemm(rec, { a, b, c: ci, m: 4, n: 6, k: 5 })).toThrow(/must be f32/);
    expect(() => mm.gemm(rec, { a, b: ci, c, m: 4, n: 6, k: 5 })).toThrow(/B \('ci'\) must be f32, bf16, f16, got i32/);
    expect(() => mm.gemm(rec, { a, b, c, m: 4, n: 6, k: 5, bias: a })).toThrow(/bias/);
    expect(() => mm.linear(rec, a, b, c)).toThrow(/^linear:/);
    expect(() => mm.linearGradInput(rec, c, b, a)).toThrow(/^linearGradInput:/);
    expect(() => mm.linearGradWeight(rec, a, c, c)).toThrow(/^linearGradWeight:/);
    await rec.submit();
    for (const t of [a, b, c, ci]) t.release();
  });
});

describe('matmul: Linear layer', () => {
  it('forward y = x·Wᵀ + b and backward dX = dY·W, dW = dYᵀ·X match f64 and finite differences', async () => {
    const gpu = await testGpu();
    const mm = await Matmul.create(gpu);
    const [T, IN, OUT] = [5, 17, 3];
    const x = randUniform(T * IN, 21);
    const w = randUniform(OUT * IN, 22);
    const bias = randUniform(OUT, 23);
    const g = randUniform(T * OUT, 24); // dY: the loss is Σ g∘y
    const tx = gpu.upload(x, [T, IN], 'f32', 'x');
    const tw = gpu.upload(w, [OUT, IN], 'f32', 'w');
    const tb = gpu.upload(bias, [OUT], 'f32', 'b');
    const tg = gpu.upload(g, [T, OUT], 'f32', 'dy');
    const ty = gpu.tensor([T, OUT], 'f32', 'y');
    const tdx = gpu.tensor([T, IN], 'f32', 'dx');
    const tdw = gpu.tensor([OUT, IN], 'f32', 'dw');
    const rec = gpu.recorder();
    mm.linear(rec, tx, tw, ty, { bias: tb });
    mm.linearGradInput(rec, tg, tw, tdx);
    mm.linearGradWeight(rec, tg, tx, tdw);
    await rec.submit();

    const forward = (xs: ArrayLike<number>, ws: ArrayLike<number>) =>
      refGemm({ a: xs, b: ws, c: [], m: T, n: OUT, k: IN, transA: false, transB: true, alpha: 1, beta: 0, bias }).want;
    const loss = (y: Float64Array) => y.reduce((s, v, i) => s + v * g[i], 0);
    const fwd = refGemm({ a: x, b: w, c: [], m: T, n: OUT, k: IN, transA: false, transB: true, alpha: 1, beta: 0, bias });
    expectWithin(await read(gpu, ty), fwd.want, fwd.scale, 1e-5, 'linear forward');

    const dx = refGemm({ a: g, b: w, c: [], m: T, n: IN, k: OUT, transA: false, transB: false, alpha: 1, beta: 0 });
    const dw = refGemm({ a: g, b: x, c: [], m: OUT, n: IN, k: T, transA: true, transB: false, alpha: 1, beta: 0 });
    const gotDx = await read(gpu, tdx);
    const gotDw = await read(gpu, tdw);
    expectWithin(gotDx, dx.want, dx.scale, 1e-5, 'dX analytic');
    expectWithin(gotDw, dw.want, dw.scale, 1e-5, 'dW analytic');
    expectClose(gotDx, finiteDifferences((xs) => loss(forward(xs, w)), x), { rtol: 1e-4, atol: 1e-5, what: 'dX vs finite differences' });
    expectClose(gotDw, finiteDifferences((ws) => loss(forward(x, ws)), w), { rtol: 1e-4, atol: 1e-5, what: 'dW vs finite differences' });

    // accumulate: a second backward adds the same gradient again.
    const rec2 = gpu.recorder();
    mm.linearGradInput(rec2, tg, tw, tdx, { accumulate: true });
    mm.linearGradWeight(rec2, tg, tx, tdw, { accumulate: true, alpha: 0.5 });
    await rec2.submit();
    expectWithin(await read(gpu, tdx), dx.want.map((v) => 2 * v), dx.scale.map((v) => 2 * v), 1e-5, 'dX accumulated');
    expectWithin(await read(gpu, tdw), dw.want.map((v) => 1.5 * v), dw.scale.map((v) => 1.5 * v), 1e-5, 'dW accumulated');
    for (const t of [tx, tw, tb, tg, ty, tdx, tdw]) t.release();
  });
});
