// Dense f32 matrix products (shaders/matmul.wgsl): the general GEMM, batched and strided, and the
// Linear-layer forms used by the unquantized model and by LoRA. B may be a frozen weight kept in
// 16-bit halves (bf16 or f16, the vision tower's): it is widened to an f32 scratch for the product
// (the kernel reading halves itself ran slower than the f32 one: BENCHMARKS.md, Tried and not kept).
//   Linear:   y = x·Wᵀ (+ b),  x [T, in], W [out, in] (PyTorch layout), y [T, out]
//   backward: dX = dY·W,  dW = dYᵀ·X
import { ShapeError, type DType, type Gpu, type Kernel, type KernelSpec, type Recorder, type Tensor } from '../gpu';
import { Halves } from './halves';

/** Block shapes of C a workgroup computes (shaders/matmul.wgsl: TX x TY invocations, TM x TN each). */
export const GEMM_TILES = {
  /** 64x128, 8x4 per invocation: the most arithmetic per byte of workgroup memory read. A warp's
   * 32 lanes share a row of invocations (TX 32), so B's reads and C's writes are 32 adjacent
   * columns: 3-5% faster than 128x64 on 16x16 invocations (H100, `gemmSpeed --dense`: [8192, 6144]
   * over K 2048 28.5 -> 29.6 TFLOP/s, the vision shapes 15.7 -> 16.5 to 19.9 -> 20.7); 8x8 per
   * invocation spills (2 TFLOP/s). */
  large: { tx: 32, ty: 8, tm: 8, tn: 4 },
  /** 64x64, 4x4: twice the workgroups of `large` where that one would leave SMs idle. */
  square: { tx: 16, ty: 16, tm: 4, tn: 4 },
  /** 256x16: C of few columns (LoRA's x·Aᵀ [T, r], dYᵀ·u [out, r]); a 64-wide block wastes 3/4. */
  tall: { tx: 4, ty: 64, tm: 4, tn: 4 },
  /** 16x256: C of few rows (LoRA's tᵀ·x [r, in], split-K's sum of partials). */
  wide: { tx: 64, ty: 4, tm: 4, tn: 4 },
} as const;
export type GemmTile = keyof typeof GEMM_TILES;
const blockRows = (t: GemmTile) => GEMM_TILES[t].ty * GEMM_TILES[t].tm;
const blockCols = (t: GemmTile) => GEMM_TILES[t].tx * GEMM_TILES[t].tn;
/** `large` when it makes at least this many blocks (batch items included) and K is at least
 * LARGE_MIN_K, else `square`. H100 (`node .bench/gemmSpeed.mjs --dense`, in stream, bias added;
 * measured on 128x64 blocks, whose counts are the same within 8%): [2048, 6144] over K 2048 27
 * TFLOP/s against 24; the vision tower's [784, 1024] (104 blocks) over K 1024 15.7 against 13.1
 * and over K 4096 17.1 against 14.1; [196, 4096] (128 blocks) over K 4096 16.9 against 14.0;
 * [196, 2048] (64 blocks) over K 4096 8.5 against 8.8. */
const LARGE_MIN_BLOCKS = 96;
const LARGE_MIN_K = 256;
/** A product with fewer blocks of C than this and a long K is split along K (LoRA's rank-r
 * products: [T, 2048]·[2048, 16] is 11 blocks of 256x16, each walking all of K), into at most
 * SPLIT_MAX_BLOCKS. H100 (`gemmSpeed --dense`): the vision mergers' [196, 2048] over K 4096 (64
 * blocks) in 8 chunks 0.388 -> 0.199 ms; [784, 1024] (104 blocks) over K 1024 in 4 chunks of 256
 * lost (0.105 -> 0.123 ms), over K 4096 in 4 gained 5%: below 96 blocks only. */
const SPLIT_BELOW_BLOCKS = 96;
const SPLIT_MAX_BLOCKS = 512;
/** Shortest K chunk worth a workgroup of its own. */
const SPLIT_MIN_K = 256;
/** C of 16 columns or rows (`tall`: LoRA's x·Aᵀ [T, r], dYᵀ·u [out, r], dY·B [T, r]; `wide`: its
 * dA = tᵀ·x [r, in]) holds few blocks and tiny partials: up to 64 chunks of at least 32, within
 * SPLIT_THIN_BLOCKS workgroups. H100 (`gemmSpeed --split`, in stream): [512, 16] over K 2048 35.5
 * -> 21.9 µs in 64 chunks, over K 6144 74 -> 27 µs; [2816, 16] over K 2048 35.8 -> 31.3 µs in 16;
 * [8192, 16] over 2048 best in 8; [16, 2048] over K 2816 37.8 -> 28.4 µs in 32, over K 8192 88 ->
 * 54 µs; [16, 6144] over K 2816 best in 8. */
const SPLIT_THIN_BLOCKS = 256;
const SPLIT_THIN_MIN_K = 32;

export interface GemmArgs {
  /** op(A) is [m, k]: A is stored [m, k], or [k, m] when transA. */
  a: Tensor;
  /** op(B) is [k, n]: B is stored [k, n], or [n, k] when transB; f32, bf16 or f16 (DENSE_DTYPES: widened first). */
  b: Tensor;
  /** C [m, n]; read only when beta ≠ 0. */
  c: Tensor;
  m: number;
  n: number;
  k: number;
  transA?: boolean;
  transB?: boolean;
  /** Default 1. */
  alpha?: number;
  /** Default 0 (overwrite C); 1 accumulates. */
  beta?: number;
  /** [n] (a batch: strideBias apart), added to every row after alpha and beta. */
  bias?: Tensor;
  /** Number of independent products (default 1). */
  batch?: number;
  /** Elements between rows of each operand as stored; default contiguous. */
  lda?: number;
  ldb?: number;
  ldc?: number;
  /** Elements from the start of each tensor to the first matrix; default 0. */
  offsetA?: number;
  offsetB?: number;
  offsetC?: number;
  /** Elements between consecutive batch items; default one whole matrix (0 broadcasts A or B). */
  strideA?: number;
  strideB?: number;
  strideC?: number;
  /** Elements between consecutive batch items' biases; default 0 (one bias for all). */
  strideBias?: number;
  /** Block shape; default chosen from m, n (tileOf). Tests and benchmarks set it. */
  tile?: GemmTile;
  /** K chunks (a divisor of k; one product, C's rows ld = n, bias only with alpha 1); default by
   * shape (splitOf; never while a tape is captured). Tests and benchmarks set it. */
  split?: number;
}

export interface LinearOptions {
  bias?: Tensor;
  /** Add to the output instead of overwriting it. */
  accumulate?: boolean;
  /** Multiplies the product (not the bias or the accumulated value). */
  alpha?: number;
}

interface Operand {
  what: string;
  t: Tensor;
  rows: number;
  cols: number;
  ld: number;
  offset: number;
  stride: number;
}

export class Matmul {
  /** Vectors of ones [S], by S: the sum of S split-K partials is ones·P. */
  private readonly ones = new Map<number, Tensor>();
  /** Variants by variantKey + tile, each compiled on first use. */
  private readonly kernels = new Map<string, Kernel>();
  /** Widens a B held in halves for the f32 kernel (and for tensor-core copies: projection.ts). */
  readonly halves: Halves;

  private constructor(private readonly gpu: Gpu) {
    this.halves = new Halves(gpu);
  }

  static async create(gpu: Gpu): Promise<Matmul> {
    return new Matmul(gpu);
  }

  private kernel(transA: boolean, transB: boolean, bias: boolean, tile: GemmTile): Kernel {
    const id = kernelId(transA, transB, bias, tile);
    let k = this.kernels.get(id);
    if (!k) this.kernels.set(id, (k = this.gpu.kernelNow(kernelSpec(transA, transB, bias, tile))));
    return k;
  }

  /** C = alpha·op(A)·op(B) + beta·C (+ bias), for `batch` products. */
  gemm(rec: Recorder, g: GemmArgs): void {
    const { m, n, k } = g;
    const transA = g.transA ?? false;
    const transB = g.transB ?? false;
    const batch = g.batch ?? 1;
    for (const [name, v] of Object.entries({ m, n, k, batch })) {
      if (!Number.isInteger(v) || v < 0) throw new ShapeError('gemm', `${name} must be a non-negative integer, got ${v}`);
    }
    const [ar, ac] = transA ? [k, m] : [m, k];
    const [br, bc] = transB ? [n, k] : [k, n];
    const A = operand('A', g.a, ar, ac, g.lda, g.offsetA, g.strideA);
    const B = operand('B', g.b, br, bc, g.ldb, g.offsetB, g.strideB);
    const C = operand('C', g.c, m, n, g.ldc, g.offsetC, g.strideC);
    for (const o of [A, B, C]) checkOperand(o, batch, o === B ? DENSE_DTYPES : F32);
    const strideBias = g.strideBias ?? 0;
    if (g.bias) {
      if (g.bias.dtype !== 'f32') throw new ShapeError('gemm', `bias must be f32, got ${g.bias.dtype}`);
      const need = batch > 0 ? n + (batch - 1) * strideBias : 0;
      if (!Number.isInteger(strideBias) || strideBias < 0 || g.bias.numel < need || (strideBias === 0 && g.bias.numel !== n)) {
        throw new ShapeError('gemm', `bias has ${g.bias.numel} elements, expected ${strideBias === 0 ? `n = ${n}` : `${need} (${batch} of n = ${n}, ${strideBias} apart)`}`);
      }
    }
    if (m === 0 || n === 0 || batch === 0) return;
    const tile = g.tile ?? tileOf(m, n, k, batch);
    // A bias rides on the first K chunk's partial, so it must not be scaled: alpha 1 only.
    const splittable = batch === 1 && (!g.bias || (g.alpha ?? 1) === 1) && C.ld === n && !rec.capturing;
    if (g.split !== undefined && (!Number.isInteger(g.split) || g.split < 1 || k % g.split !== 0 || (g.split > 1 && !splittable))) {
      throw new ShapeError('gemm', `split ${g.split} must divide K = ${k}, for one product with C's rows n apart, a bias only at alpha 1 and no tape being captured`);
    }
    const split = g.split ?? (splittable ? splitOf(m, n, k, tile) : 1);
    // Halves: the product reads an f32 copy, given back as soon as it is recorded (work recorded
    // later runs after it), which a tape could not replay.
    let wide: Tensor | null = null;
    if (B.t.dtype !== 'f32') {
      if (rec.capturing) throw new ShapeError('gemm', `B ('${B.t.label}') in ${B.t.dtype} while a tape is captured: its f32 copy is scratch`);
      wide = this.halves.widen(rec, B.t);
    }
    const Bf = wide ? { ...B, t: wide } : B;
    if (split > 1) this.splitK(rec, { ...g, tile }, A, Bf, C, transA, transB, split);
    else this.run(rec, g, tile, A, Bf, C, transA, transB, batch);
    wide?.release();
  }

  /**
   * C = alpha·op(A)·op(B) + beta·C as S products over K chunks into partials P [S, m, n], then
   * C = alpha·ones[1, S]·P + beta·C: S times the workgroups for a C of few blocks. Deterministic
   * (a fixed order of sums, no atomics). A bias (alpha 1) is added by the first chunk's product:
   * the chunks take biases [bias, 0, ..., 0] from a scratch copy.
   */
  private splitK(rec: Recorder, g: GemmArgs & { tile: GemmTile }, A: Operand, B: Operand, C: Operand, transA: boolean, transB: boolean, S: number): void {
    const { m, n } = g;
    const kc = g.k / S;
    const part = this.gpu.tensor([S, m, n], 'f32', 'matmul.split_k');
    // Chunk s of op(A) starts s·kc columns in (rows of stored Aᵀ), of op(B) s·kc rows in.
    const Ak = { ...A, cols: transA ? A.cols : kc, rows: transA ? kc : A.rows, stride: transA ? kc * A.ld : kc };
    const Bk = { ...B, rows: transB ? B.rows : kc, cols: transB ? kc : B.cols, stride: transB ? kc : kc * B.ld };
    const P: Operand = { what: 'partials', t: part, rows: m, cols: n, ld: n, offset: 0, stride: m * n };
    let biases: Tensor | undefined;
    if (g.bias) {
      biases = this.gpu.tensor([S, n], 'f32', 'matmul.split_k_bias');
      rec.clear(biases);
      rec.copy(g.bias, biases, 4 * n);
    }
    this.run(rec, { ...g, k: kc, alpha: 1, beta: 0, bias: biases, strideBias: n }, g.tile, Ak, Bk, P, transA, transB, S);
    let ones = this.ones.get(S);
    if (!ones) this.ones.set(S, (ones = this.gpu.upload(new Float32Array(S).fill(1), [S], 'f32', `matmul.ones${S}`)));
    const O: Operand = { what: 'ones', t: ones, rows: 1, cols: S, ld: S, offset: 0, stride: S };
    const Pk: Operand = { what: 'partials', t: part, rows: S, cols: m * n, ld: m * n, offset: 0, stride: S * m * n };
    const Cflat: Operand = { what: 'C', t: C.t, rows: 1, cols: m * n, ld: m * n, offset: C.offset, stride: m * n };
    this.run(rec, { ...g, m: 1, n: m * n, k: S, bias: undefined }, 'wide', O, Pk, Cflat, false, false, 1);
    part.release();
    biases?.release();
  }

  private run(rec: Recorder, g: GemmArgs, tile: GemmTile, A: Operand, B: Operand, C: Operand, transA: boolean, transB: boolean, batch: number): void {
    const { m, n, k } = g;
    const kernel = this.kernel(transA, transB, !!g.bias, tile);
    const bindings: Record<string, Tensor> = { a: A.t, b: B.t, c: C.t };
    if (g.bias) bindings.bias = g.bias;
    rec.dispatch(kernel, bindings, [Math.ceil(n / blockCols(tile)), Math.ceil(m / blockRows(tile)), batch], {
      m,
      n,
      k,
      lda: A.ld,
      ldb: B.ld,
      ldc: C.ld,
      off_a: A.offset,
      off_b: B.offset,
      off_c: C.offset,
      stride_a: A.stride,
      stride_b: B.stride,
      stride_c: C.stride,
      stride_bias: g.strideBias ?? 0,
      alpha: g.alpha ?? 1,
      beta: g.beta ?? 0,
    });
  }

  /** y = alpha·x·Wᵀ (+ bias) (+ y when accumulating); x [T, in], W [out, in], y [T, out]. */
  linear(rec: Recorder, x: Tensor, w: Tensor, y: Tensor, opts: LinearOptions = {}): void {
    const [out, inF] = matrix('linear', 'W', w);
    const [t, xin] = matrix('linear', 'x', x);
    const [yt, yout] = matrix('linear', 'y', y);
    if (xin !== inF || yt !== t || yout !== out) {
      throw new ShapeError('linear', `x [${x.shape}] · W [${w.shape}]ᵀ does not give y [${y.shape}]`);
    }
    this.gemm(rec, { a: x, b: w, c: y, m: t, n: out, k: inF, transB: true, alpha: opts.alpha, beta: opts.accumulate ? 1 : 0, bias: opts.bias });
  }

  /** dX = alpha·dY·W (+ dX when accumulating); dY [T, out], W [out, in], dX [T, in]. */
  linearGradInput(rec: Recorder, dy: Tensor, w: Tensor, dx: Tensor, opts: Omit<LinearOptions, 'bias'> = {}): void {
    const [out, inF] = matrix('linearGradInput', 'W', w);
    const [t, dyout] = matrix('linearGradInput', 'dY', dy);
    const [xt, xin] = matrix('linearGradInput', 'dX', dx);
    if (dyout !== out || xt !== t || xin !== inF) {
      throw new ShapeError('linearGradInput', `dY [${dy.shape}] · W [${w.shape}] does not give dX [${dx.shape}]`);
    }
    this.gemm(rec, { a: dy, b: w, c: dx, m: t, n: inF, k: out, alpha: opts.alpha, beta: opts.accumulate ? 1 : 0 });
  }

  /** dW = alpha·dYᵀ·X (+ dW when accumulating); dY [T, out], X [T, in], dW [out, in]. */
  linearGradWeight(rec: Recorder, dy: Tensor, x: Tensor, dw: Tensor, opts: Omit<LinearOptions, 'bias'> = {}): void {
    const [t, out] = matrix('linearGradWeight', 'dY', dy);
    const [xt, inF] = matrix('linearGradWeight', 'X', x);
    const [wout, win] = matrix('linearGradWeight', 'dW', dw);
    if (xt !== t || wout !== out || win !== inF) {
      throw new ShapeError('linearGradWeight', `dY [${dy.shape}]ᵀ · X [${x.shape}] does not give dW [${dw.shape}]`);
    }
    this.gemm(rec, { a: dy, b: x, c: dw, m: out, n: inF, k: t, transA: true, alpha: opts.alpha, beta: opts.accumulate ? 1 : 0 });
  }
}

/** The block shape for C [m, n] over k: thin sides get thin blocks; long products the big block
 * when it still fills the GPU, or when split along K (H100, the vision mergers' [196, 2048] over
 * K 4096: 0.199 ms in 8 chunks of the big blocks, 0.374 unsplit in 64x64). A short K (LoRA's u·Bᵀ,
 * K = r) is bound by C's bytes: more, smaller blocks (H100, [2816, 2048] over K 16: 31 µs in 64x64
 * blocks, 45 µs in 128x64). */
export function tileOf(m: number, n: number, k: number, batch = 1): GemmTile {
  if (n <= 16 && m >= 256) return 'tall';
  if (m <= 16 && n >= 256) return 'wide';
  if (k < LARGE_MIN_K) return 'square';
  if (batch * Math.ceil(m / blockRows('large')) * Math.ceil(n / blockCols('large')) >= LARGE_MIN_BLOCKS) return 'large';
  // Fewer blocks: the big block still, where the product is split along K (gemm's splitOf).
  return batch === 1 && splitOf(m, n, k, 'large') > 1 ? 'large' : 'square';
}

/** How many K chunks a product [m, n] over k takes: 1 unless C has few blocks and K is long. */
function splitOf(m: number, n: number, k: number, tile: GemmTile): number {
  const blocks = Math.ceil(m / blockRows(tile)) * Math.ceil(n / blockCols(tile));
  if (tile === 'tall' || tile === 'wide') {
    for (const s of [64, 32, 16, 8, 4, 2]) if (k % s === 0 && k / s >= SPLIT_THIN_MIN_K && blocks * s <= SPLIT_THIN_BLOCKS) return s;
    return 1;
  }
  if (blocks >= SPLIT_BELOW_BLOCKS) return 1;
  for (const s of [8, 4, 2]) {
    if (k % s === 0 && k / s >= SPLIT_MIN_K && blocks * s <= SPLIT_MAX_BLOCKS) return s;
  }
  return 1;
}

/** What B may hold: f32, or a frozen dense weight's 16-bit halves (LinearWeight 'dense'). */
export const DENSE_DTYPES = ['f32', 'bf16', 'f16'] as const;
export type DenseDtype = (typeof DENSE_DTYPES)[number];
/** What A, C and a Linear layer's x, y, dY, dX hold. */
const F32 = ['f32'] as const;

export function isDenseDtype(d: DType): d is DenseDtype {
  return (DENSE_DTYPES as readonly DType[]).includes(d);
}

function variantKey(transA: boolean, transB: boolean, bias: boolean): string {
  return `${transA ? 'T' : 'N'}${transB ? 'T' : 'N'}${bias ? '+bias' : ''}`;
}

function kernelId(transA: boolean, transB: boolean, bias: boolean, tile: GemmTile): string {
  return `${variantKey(transA, transB, bias)}/${tile}`;
}

function kernelSpec(transA: boolean, transB: boolean, bias: boolean, tile: GemmTile): KernelSpec {
  const t = GEMM_TILES[tile];
  return {
    // Profiles group by transposes; the tile shows in the name only where it is not the default.
    name: `matmul.gemm[${variantKey(transA, transB, bias)}]${tile === 'square' ? '' : `.${tile}`}`,
    shader: 'matmul',
    entry: 'gemm',
    defines: { TRANS_A: transA, TRANS_B: transB, BIAS: bias, TX: t.tx, TY: t.ty, TM: t.tm, TN: t.tn },
    uniforms: {
      m: 'u32',
      n: 'u32',
      k: 'u32',
      lda: 'u32',
      ldb: 'u32',
      ldc: 'u32',
      off_a: 'u32',
      off_b: 'u32',
      off_c: 'u32',
      stride_a: 'u32',
      stride_b: 'u32',
      stride_c: 'u32',
      stride_bias: 'u32',
      alpha: 'f32',
      beta: 'f32',
    },
  };
}

function operand(what: string, t: Tensor, rows: number, cols: number, ld?: number, offset?: number, stride?: number): Operand {
  const l = ld ?? cols;
  return { what, t, rows, cols, ld: l, offset: offset ?? 0, stride: stride ?? rows * l };
}

/** The operand's dtype is one of `dtypes`; the last element the kernel may touch lies inside the tensor. */
function checkOperand(o: Operand, batch: number, dtypes: readonly DType[]): void {
  if (!dtypes.includes(o.t.dtype)) throw new ShapeError('gemm', `${o.what} ('${o.t.label}') must be ${dtypes.join(', ')}, got ${o.t.dtype}`);
  for (const [name, v] of [['leading dimension', o.ld], ['offset', o.offset], ['batch stride', o.stride]] as const) {
    if (!Number.isInteger(v) || v < 0 || v >= 2 ** 32) throw new ShapeError('gemm', `${o.what} ${name} must be a u32, got ${v}`);
  }
  if (o.ld < o.cols) throw new ShapeError('gemm', `${o.what} leading dimension ${o.ld} is below its ${o.cols} columns`);
  if (o.rows === 0 || o.cols === 0 || batch === 0) return;
  const last = o.offset + (batch - 1) * o.stride + (o.rows - 1) * o.ld + o.cols - 1;
  if (last >= o.t.numel) {
    throw new ShapeError(
      'gemm',
      `${o.what} ('${o.t.label}', ${o.t.numel} elements) is too small for ${batch} x [${o.rows}, ${o.cols}] ` +
        `with leading dimension ${o.ld}, offset ${o.offset}, batch stride ${o.stride}`,
    );
  }
}

/** The two dimensions of a 2-D f32 tensor (W: or its halves, DENSE_DTYPES). */
function matrix(op: string, what: string, t: Tensor): [number, number] {
  const dtypes: readonly DType[] = what === 'W' ? DENSE_DTYPES : F32;
  if (!dtypes.includes(t.dtype)) throw new ShapeError(op, `${what} ('${t.label}') must be ${dtypes.join(', ')}, got ${t.dtype}`);
  if (t.shape.length !== 2) throw new ShapeError(op, `${what} ('${t.label}') must be 2-D, got [${t.shape}]`);
  return [t.shape[0], t.shape[1]];
}
