// Attention on f16 tensor cores (shaders/attention_f16.wgsl, attention_f16_bwd.wgsl): attention.ts's
// forward and backward over packed sequences (causal or not, the shared prefix, grouped-query
// heads), with q, k, v and dO rounded to f16 once a call (shaders/f16_convert.wgsl) and every
// product accumulated in f32. Needs what the f16
// products need (f16Unsupported in matmulQ4F16.ts) and a head dim that is 4 or 8 fragments wide.
import { capabilitiesOf, compileMatrixKernels, grid1d, MissingFeatureError, ShapeError, type Capabilities, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import type { AttentionBackwardArgs, AttentionConfig, AttentionForwardArgs } from './attention';
import { dkvSplitsOf } from './dkvSplits';
import { f16Config, f16Unsupported } from './matmulQ4F16';
import { SUBGROUP_MATRIX } from './matmulQ4Mma';

/** Subgroups a workgroup (each FR query tokens) and keys a tile. */
export interface AttentionF16Tile {
  subgroups: number;
  keys: number;
}

export const DEFAULT_ATTENTION_F16_TILE: AttentionF16Tile = { subgroups: 8, keys: 32 };

const FWD_UNIFORMS = { rows: 'u32', hq: 'u32', hkv: 'u32', causal: 'u32', scale: 'f32', nseq: 'u32', prefix_len: 'u32' } as const;
const BWD_UNIFORMS = { ...FWD_UNIFORMS, dkv_splits: 'u32', dkv_rows: 'u32', dkv_tile0: 'u32' } as const;

/** An f16 copy of q, k or v, grown on demand, its rows past T kept finite (zero when allocated),
 * and the rows it was last rounded from. */
interface Copy {
  t: Tensor | null;
  label: string;
  from?: { buffer: GPUBuffer; byteOffset: number; rows: number };
}

/** Why `gpu` cannot run attention of head dim `headDim` on f16 tensor cores, or null. */
export function attentionF16Unsupported(gpu: Gpu, headDim: number): string | null {
  return attentionF16UnsupportedBy(capabilitiesOf(gpu), headDim);
}

/** attentionF16Unsupported for a device of `caps`. */
export function attentionF16UnsupportedBy(caps: Capabilities, headDim: number): string | null {
  const why = f16Unsupported(caps);
  if (why) return why;
  const { M, K } = f16Config(caps)!;
  if (K !== M) return `fragments of ${M}x${M}x${K}: the kernels take K = M`;
  if (headDim % M !== 0 || ![4, 8].includes(headDim / M)) return `head dim ${headDim} is not 4 or 8 fragments of ${M}`;
  return null;
}

/** shaders/attention_f16*.wgsl's defines for heads of `D` on fragments of `FR` and `tile` (LSE, LSE_IN, DKV_SPLIT besides). */
export function attentionF16Defines(D: number, FR: number, tile: AttentionF16Tile): { D: number; FR: number; SGS: number; BI: number; KT: number; DF: number; DHF: number } {
  return { D, FR, SGS: tile.subgroups, BI: tile.keys, KT: tile.keys / FR, DF: D / FR, DHF: D / FR / 2 };
}

export class AttentionF16 {
  private readonly copies: Record<'q' | 'k' | 'v' | 'dout', Copy> = { q: { t: null, label: 'q16' }, k: { t: null, label: 'k16' }, v: { t: null, label: 'v16' }, dout: { t: null, label: 'do16' } };

  private constructor(
    private readonly gpu: Gpu,
    readonly config: AttentionConfig,
    private readonly toF16: Kernel,
    private readonly fwd: Kernel,
    private readonly fwdLse: Kernel,
    /** The second pass alone, on the lse a first forward wrote (AttentionForwardArgs.lseKnown). */
    private readonly fwdLseIn: Kernel,
    private readonly bwdDq: Kernel,
    private readonly bwdDkv: Kernel,
    /** The shared prefix's key tiles over chunks of their queries, and the sum of the chunks. */
    private readonly bwdDkvSplit: Kernel,
    private readonly dkvSum: Kernel,
    /** Tokens a workgroup and keys a tile: the f16 copies hold this many rows past T. */
    private readonly pad: number,
    private readonly tokensPerGroup: number,
  ) {}

  /** Workgroups its forward runs over T packed rows: query tiles x heads. */
  groups(T: number): number {
    return Math.ceil(T / this.tokensPerGroup) * this.config.hq;
  }

  static async create(gpu: Gpu, config: AttentionConfig, tile: AttentionF16Tile = DEFAULT_ATTENTION_F16_TILE): Promise<AttentionF16> {
    const { hq, hkv, headDim: D } = config;
    const why = attentionF16Unsupported(gpu, D);
    if (why) throw new MissingFeatureError(capabilitiesOf(gpu).shaderF16 ? SUBGROUP_MATRIX : 'shader-f16', why);
    if (!Number.isInteger(hkv) || hkv < 1 || hq % hkv !== 0) throw new ShapeError('attentionF16', `Hq (${hq}) must be a positive multiple of Hkv (${hkv})`);
    const { M: FR } = f16Config(capabilitiesOf(gpu))!;
    const lim = gpu.limits;
    // Staged rows (each half of D padded by 8), each subgroup's scores (f32) and probabilities (f16), the backward's row stats.
    const bytes = 2 * 2 * tile.keys * (D + 16) + tile.subgroups * FR * (4 * (tile.keys + 4) + 2 * (tile.keys + 8)) + 16 * tile.keys;
    if (tile.keys % FR !== 0 || (32 / FR) * 2 > tile.keys || bytes > lim.maxComputeWorkgroupStorageSize || 32 * tile.subgroups > lim.maxComputeInvocationsPerWorkgroup) {
      throw new ShapeError('attentionF16', `tile of ${tile.subgroups} subgroups x ${tile.keys} keys: needs keys a multiple of ${FR}, ${bytes} bytes of workgroup memory (${lim.maxComputeWorkgroupStorageSize} here) and ${32 * tile.subgroups} threads`);
    }
    const defines = attentionF16Defines(D, FR, tile);
    const entry = { shader: 'attention_f16', entry: 'attn_fwd_f16', uniforms: FWD_UNIFORMS };
    const bwd = (name: string, entry: string, split = false) => compileMatrixKernels(gpu, `attention_f16.${name}`, [{ shader: 'attention_f16_bwd', entry, uniforms: BWD_UNIFORMS }], { ...defines, DKV_SPLIT: split });
    const [[fwd], [fwdLse], [fwdLseIn], [bwdDq], [bwdDkv], [bwdDkvSplit], [toF16]] = await Promise.all([
      compileMatrixKernels(gpu, 'attention_f16.fwd', [entry], defines),
      compileMatrixKernels(gpu, 'attention_f16.fwd_lse', [entry], { ...defines, LSE: true }),
      compileMatrixKernels(gpu, 'attention_f16.fwd_lse_in', [entry], { ...defines, LSE_IN: true }),
      bwd('bwd_dq', 'attn_bwd_dq_f16'),
      bwd('bwd_dkv', 'attn_bwd_dkv_f16'),
      bwd('bwd_dkv_split', 'attn_bwd_dkv_f16', true),
      compileMatrixKernels(gpu, 'attention_f16', [{ shader: 'f16_convert', entry: 'dense_to_f16', uniforms: { count: 'u32' } }], {}),
    ]);
    const tokens = tile.subgroups * FR;
    const dkvSum = gpu.kernelOnUse({ name: 'attention_f16.dkv_sum', shader: 'attention_dkv_sum', entry: 'attn_dkv_sum', defines: { D }, uniforms: { hkv: 'u32', dkv_splits: 'u32', dkv_rows: 'u32' } });
    return new AttentionF16(gpu, config, toF16, fwd, fwdLse, fwdLseIn, bwdDq, bwdDkv, bwdDkvSplit, dkvSum, Math.max(tokens, tile.keys), tokens);
  }

  /** `x` [T, width] rounded to f16 into its copy (rows past T finite). */
  private round(rec: Recorder, which: keyof AttentionF16['copies'], x: Tensor, T: number, width: number): Tensor {
    const c = this.copies[which];
    const words = ((T + this.pad) * width) / 2;
    if (!c.t || c.t.numel < words) {
      if (!rec.capturing) c.t?.release();
      c.t = this.gpu.tensor([words], 'u32', `attention_f16.${c.label}`);
      rec.clear(c.t);
    }
    const count = (T * width) / 2;
    rec.dispatch(this.toF16, { w: x, w16: c.t }, grid1d(count, 256), { count });
    c.from = { buffer: x.buffer, byteOffset: x.byteOffset, rows: T };
    return c.t;
  }

  /** The copy of `x` a forward made, where the caller vouches that x is unchanged since (`unchanged`) and it was the last rounded; else `x` rounded again. */
  private rounded(rec: Recorder, which: 'q' | 'k' | 'v', x: Tensor, T: number, width: number, unchanged: boolean): Tensor {
    const c = this.copies[which];
    if (unchanged && c.t && c.from?.buffer === x.buffer && c.from.byteOffset === x.byteOffset && c.from.rows === T) return c.t;
    return this.round(rec, which, x, T, width);
  }

  /**
   * o = softmax(scale·q·kᵀ + mask)·v as Attention.forward, and lse where given; with `lseKnown`
   * the lse given is read, and only the pass over the keys that sums exp(s − lse)·v runs.
   */
  forward(rec: Recorder, a: AttentionForwardArgs): void {
    const op = 'attention_f16';
    const { hq, hkv, headDim: D } = this.config;
    const T = a.q.shape[0];
    const expect = (t: Tensor, cols: number) => {
      if (t.dtype !== 'f32' || t.numel !== T * cols) throw new ShapeError(op, `'${t.label}' is ${t.dtype} [${t.shape.join(', ')}], expected f32 [${T}, ${cols}]`);
    };
    expect(a.q, hq * D);
    expect(a.k, hkv * D);
    expect(a.v, hkv * D);
    expect(a.o, hq * D);
    if (a.lse) expect(a.lse, hq);
    const nseq = a.cuSeqlens.numel - 1;
    const prefix = a.sharedPrefix ?? 0;
    if (prefix > 0 && (prefix >= T || nseq < 2)) throw new ShapeError(op, `sharedPrefix ${prefix} must be the rows of sequence 0 of 2 or more, within T = ${T}`);
    const q16 = this.round(rec, 'q', a.q, T, hq * D);
    const k16 = this.round(rec, 'k', a.k, T, hkv * D);
    const v16 = this.round(rec, 'v', a.v, T, hkv * D);
    if (a.lseKnown && !a.lse) throw new ShapeError(op, 'lseKnown without an lse to read');
    const kernel = a.lseKnown ? this.fwdLseIn : a.lse ? this.fwdLse : this.fwd;
    const bindings: Record<string, Tensor> = { q16, k16v: k16, v16v: v16, o: a.o, cu_seqlens: a.cuSeqlens };
    if (a.lse) bindings.lse = a.lse;
    const u = { rows: T, hq, hkv, causal: a.causal ? 1 : 0, scale: a.scale, nseq, prefix_len: prefix };
    rec.dispatch(kernel, bindings, [Math.ceil(T / this.tokensPerGroup), hq], u);
  }

  /**
   * dq, dk, dv as Attention.backward, from the row stats its prep pass wrote (lse and delta per
   * row and head), with P recomputed from q, k, v rounded to f16.
   */
  backward(rec: Recorder, a: AttentionBackwardArgs): void {
    const { hq, hkv, headDim: D } = this.config;
    const T = a.q.shape[0];
    const nseq = a.cuSeqlens.numel - 1;
    const same = a.inputsOfLastForward ?? false;
    const copies = {
      q16: this.rounded(rec, 'q', a.q, T, hq * D, same),
      k16: this.rounded(rec, 'k', a.k, T, hkv * D, same),
      v16: this.rounded(rec, 'v', a.v, T, hkv * D, same),
      do16: this.round(rec, 'dout', a.dout, T, hq * D),
    };
    const prefix = a.sharedPrefix ?? 0;
    const u = { rows: T, hq, hkv, causal: a.causal ? 1 : 0, scale: a.scale, nseq, prefix_len: prefix, dkv_splits: 1, dkv_rows: 0, dkv_tile0: 0 };
    const common = { row_stats: a.rowStats, cu_seqlens: a.cuSeqlens };
    const BQ = this.tokensPerGroup;
    const blocks = Math.ceil(T / BQ);
    rec.dispatch(this.bwdDq, { ...common, q16: copies.q16, do16: copies.do16, k16v: copies.k16, v16v: copies.v16, dq: a.dq }, [blocks, hq], u);
    const kv = { ...common, k16: copies.k16, v16: copies.v16, q16v: copies.q16, do16v: copies.do16 };
    const splits = dkvSplitsOf(T, prefix, nseq);
    if (splits === 1 || rec.capturing) {
      rec.dispatch(this.bwdDkv, { ...kv, dk: a.dk, dv: a.dv }, [blocks, hkv, 2], u);
      return;
    }
    // The prefix's key tiles walk every query after them: in chunks, summed in order, so that a
    // few long workgroups do not finish last; the other tiles whole.
    const prefixTiles = Math.ceil(prefix / BQ);
    const rows = Math.min(T, prefixTiles * BQ);
    const su = { ...u, dkv_splits: splits, dkv_rows: rows };
    const part = this.gpu.tensor([2 * splits * rows * hkv * D], 'f32', 'attention_f16.dkv_part');
    rec.dispatch(this.bwdDkvSplit, { ...kv, part }, [prefixTiles, hkv, 2 * splits], su);
    rec.dispatch(this.dkvSum, { part, dk: a.dk, dv: a.dv }, grid1d(rows * hkv * D, 256), { hkv, dkv_splits: splits, dkv_rows: rows });
    if (blocks > prefixTiles) rec.dispatch(this.bwdDkv, { ...kv, dk: a.dk, dv: a.dv }, [blocks - prefixTiles, hkv, 2], { ...su, dkv_tile0: prefixTiles });
    // Back to the pool as recorded: the queue orders these dispatches before any later use.
    part.release();
  }

  release(): void {
    for (const c of Object.values(this.copies)) {
      c.t?.release();
      c.t = null;
    }
  }
}

/**
 * `op`'s forward on a small packed batch (a shared prompt of 24 rows and two completions of 20,
 * causal) against the f64 attention on the CPU, the inputs multiples of 1/64 in [-2, 2] (exact in
 * f16): the error over its bound, 4·2^-11 of max |v| (the probabilities rounded to f16). Above 1
 * means the device computes the kernels wrongly.
 */
export async function checkAttentionF16(gpu: Gpu, op: AttentionF16): Promise<number> {
  const { hq, hkv, headDim: D } = op.config;
  const P = 24;
  const cu = [0, P, P + 20, P + 40];
  const T = cu[3];
  let seed = 12345;
  const rand = () => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return Math.round(((seed >>> 8) / 2 ** 24) * 256 - 128) / 64;
  };
  const host = (n: number) => Float32Array.from({ length: n }, rand);
  const [q, k, v] = [host(T * hq * D), host(T * hkv * D), host(T * hkv * D)];
  const scale = 1 / Math.sqrt(D);
  const tensors = {
    q: gpu.upload(q, [T, hq * D], 'f32', 'attention_f16.check.q'),
    k: gpu.upload(k, [T, hkv * D], 'f32', 'attention_f16.check.k'),
    v: gpu.upload(v, [T, hkv * D], 'f32', 'attention_f16.check.v'),
    o: gpu.tensor([T, hq * D], 'f32', 'attention_f16.check.o'),
    lse: gpu.tensor([T, hq], 'f32', 'attention_f16.check.lse'),
    cu: gpu.upload(cu, [cu.length], 'u32', 'attention_f16.check.cu'),
  };
  try {
    const rec = gpu.recorder('attention_f16.check');
    op.forward(rec, { q: tensors.q, k: tensors.k, v: tensors.v, o: tensors.o, lse: tensors.lse, cuSeqlens: tensors.cu, causal: true, scale, sharedPrefix: P });
    await rec.submit();
    const o = await gpu.readF32(tensors.o);
    let err = 0;
    let vmax = 0;
    for (const x of v) vmax = Math.max(vmax, Math.abs(x));
    const G = hq / hkv;
    for (let t = 0; t < T; t++) {
      const s = cu.findIndex((c, i) => c <= t && t < cu[i + 1]);
      const keys: number[] = [];
      for (let j = 0; j <= t; j++) if (j >= cu[s] || (s > 0 && j < P)) keys.push(j);
      for (let h = 0; h < hq; h++) {
        const kh = Math.floor(h / G);
        const scores = keys.map((j) => {
          let dot = 0;
          for (let d = 0; d < D; d++) dot += q[(t * hq + h) * D + d] * k[(j * hkv + kh) * D + d];
          return dot * scale;
        });
        const m = Math.max(...scores);
        const e = scores.map((x) => Math.exp(x - m));
        const sum = e.reduce((a, b) => a + b, 0);
        for (let d = 0; d < D; d++) {
          let ref = 0;
          keys.forEach((j, i) => (ref += (e[i] / sum) * v[(j * hkv + kh) * D + d]));
          err = Math.max(err, Math.abs(o[(t * hq + h) * D + d] - ref));
        }
      }
    }
    return err / (4 * 2 ** -11 * vmax);
  } finally {
    for (const t of Object.values(tensors)) t.release();
  }
}
