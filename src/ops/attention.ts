// Grouped-query attention (shaders/attention.wgsl): flash-style forward over packed sequences
// (causal for the decoder, bidirectional within each image for the vision tower), the forward
// over a KV cache (prefill and decode), and the FlashAttention-2 backward for training.
//
// Layouts (row-major f32, after RoPE): q, o, dq [T, Hq·D]; k, v, dk, dv [T, Hkv·D]; lse [T, Hq]
// (natural log of the softmax denominator of the scaled scores); cuSeqlens u32 [nseq + 1] with
// cu[0] = 0 and cu[nseq] = T (a single sequence is [0, T]). Query head h uses kv head
// floor(h / (Hq / Hkv)), as in transformers' repeat_kv. D is any head dim from 1 to 256.
// Memory is O(T·D) in every pass; no [T x T] matrix exists.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import { UNIFORMS, ZERO_UNIFORMS, type KvCache } from './kvCache';

export interface AttentionConfig {
  hq: number;
  hkv: number;
  headDim: number;
}

export interface AttentionForwardArgs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  cuSeqlens: Tensor;
  /** Output [T, Hq·D]. */
  o: Tensor;
  /** Output [T, Hq]: the log-sum-exp the backward needs (training); omit for inference. */
  lse?: Tensor;
  causal: boolean;
  scale: number;
}

export interface AttentionBackwardArgs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  o: Tensor;
  lse: Tensor;
  dout: Tensor;
  cuSeqlens: Tensor;
  causal: boolean;
  scale: number;
  /** Workspace f32 [T, Hq, 2] (see Attention.rowStatsShape); its contents are overwritten. */
  rowStats: Tensor;
  /** Outputs, overwritten (not accumulated): dq [T, Hq·D], dk and dv [T, Hkv·D]. */
  dq: Tensor;
  dk: Tensor;
  dv: Tensor;
}

/** Split-K for cached attention: partial results per key chunk, merged by a second kernel. */
export interface AttentionSplit {
  /** f32 workspace of Attention.splitWorkspaceShape(rows, chunks) or larger; overwritten. */
  workspace: Tensor;
  /** Key chunks per sequence (1 to 64); see Attention.decodeChunks for a default. */
  chunks: number;
}

const FLAT_WG = 256;
const MAX_HEAD_DIM = 256;
const MAX_CHUNKS = 64;
/** Keys per chunk below which splitting costs more (a second pass) than it saves. */
const KEYS_PER_CHUNK = 256;

/**
 * The largest tile B (the workgroup is B x B threads) whose workgroup memory fits the device:
 * the forward keeps q, k and v tiles (3·B·D floats), the backward q, dO, k and v tiles.
 */
export function tileSize(gpu: Gpu, headDim: number, pass: 'forward' | 'backward'): number {
  const lim = gpu.limits;
  for (const b of [16, 8, 4, 2]) {
    const floats = pass === 'forward' ? 3 * b * headDim + b * b : 4 * b * headDim + 2 * b * b + 2 * b;
    if (floats * 4 <= lim.maxComputeWorkgroupStorageSize && b * b <= lim.maxComputeInvocationsPerWorkgroup) return b;
  }
  throw new ShapeError('attention', `head_dim ${headDim} does not fit this device's workgroup memory`);
}

export class Attention {
  private constructor(
    private readonly gpu: Gpu,
    readonly config: AttentionConfig,
    private readonly fwdB: number,
    private readonly bwdB: number,
    private readonly fwd: Kernel,
    private readonly fwdLse: Kernel,
    private readonly fwdCached: Kernel,
    private readonly fwdCachedSplit: Kernel,
    private readonly combine: Kernel,
    private readonly prep: Kernel,
    private readonly dqK: Kernel,
    private readonly dkvK: Kernel,
  ) {}

  static async create(gpu: Gpu, config: AttentionConfig): Promise<Attention> {
    const { hq, hkv, headDim } = config;
    if (!Number.isInteger(hkv) || hkv < 1 || !Number.isInteger(hq) || hq % hkv !== 0) {
      throw new ShapeError('attention', `Hq (${hq}) must be a positive multiple of Hkv (${hkv})`);
    }
    if (!Number.isInteger(headDim) || headDim < 1 || headDim > MAX_HEAD_DIM) {
      throw new ShapeError('attention', `head_dim ${headDim} outside [1, ${MAX_HEAD_DIM}]`);
    }
    const fwdB = tileSize(gpu, headDim, 'forward');
    const bwdB = tileSize(gpu, headDim, 'backward');
    const spec = (entry: string, name: string, B: number, flags: Record<string, boolean> = {}) => ({
      name: `attention.${name}`,
      shader: 'attention',
      entry,
      defines: { D: headDim, B, ...flags },
      uniforms: UNIFORMS,
    });
    const kernels = await Promise.all([
      gpu.kernel(spec('attn_fwd', 'fwd', fwdB)),
      gpu.kernel(spec('attn_fwd', 'fwd_lse', fwdB, { LSE: true })),
      gpu.kernel(spec('attn_fwd', 'fwd_cached', fwdB, { CACHED: true })),
      gpu.kernel(spec('attn_fwd', 'fwd_cached_split', fwdB, { CACHED: true, SPLIT: true })),
      gpu.kernel(spec('attn_split_combine', 'split_combine', fwdB)),
      gpu.kernel(spec('attn_bwd_prep', 'bwd_prep', bwdB)),
      gpu.kernel(spec('attn_bwd_dq', 'bwd_dq', bwdB)),
      gpu.kernel(spec('attn_bwd_dkv', 'bwd_dkv', bwdB)),
    ]);
    return new Attention(gpu, config, fwdB, bwdB, ...(kernels as [Kernel, Kernel, Kernel, Kernel, Kernel, Kernel, Kernel, Kernel]));
  }

  /** Shape of the backward's workspace for T rows. */
  static rowStatsShape(T: number, hq: number): number[] {
    return [T, hq, 2];
  }

  /** Shape of the split-K workspace for `rows` query rows (count·n) in `chunks` chunks. */
  splitWorkspaceShape(rows: number, chunks: number): number[] {
    return [chunks, rows * this.config.hq, this.config.headDim + 2];
  }

  /**
   * A chunk count for decoding over caches of up to `keys` positions: about 256 keys per chunk.
   * Worth it when few workgroups run (decode: count·Hkv of them); prefill has enough without.
   */
  static decodeChunks(keys: number): number {
    return Math.max(1, Math.min(MAX_CHUNKS, Math.ceil(keys / KEYS_PER_CHUNK)));
  }

  private get group(): number {
    return this.config.hq / this.config.hkv;
  }

  private expect(op: string, t: Tensor, rows: number, cols: number, dtype: 'f32' | 'u32' = 'f32'): void {
    const ok = t.dtype === dtype && t.numel === rows * cols && t.shape[0] === rows;
    if (!ok) throw new ShapeError(op, `'${t.label}' is ${t.dtype} [${t.shape.join(', ')}], expected ${dtype} [${rows}, ${cols}]`);
  }

  /** Checks the packed-sequence inputs; returns T and the number of sequences. */
  private checkPacked(op: string, q: Tensor, k: Tensor, v: Tensor, cuSeqlens: Tensor): { T: number; nseq: number } {
    const { hq, hkv, headDim: D } = this.config;
    const T = q.shape[0];
    if (!(T >= 1)) throw new ShapeError(op, `q '${q.label}' has no rows`);
    this.expect(op, q, T, hq * D);
    this.expect(op, k, T, hkv * D);
    this.expect(op, v, T, hkv * D);
    if (cuSeqlens.dtype !== 'u32' || cuSeqlens.shape.length !== 1 || cuSeqlens.numel < 2) {
      throw new ShapeError(op, `cuSeqlens '${cuSeqlens.label}' must be u32 [nseq + 1], got ${cuSeqlens.dtype} [${cuSeqlens.shape.join(', ')}]`);
    }
    return { T, nseq: cuSeqlens.numel - 1 };
  }

  private uniforms(u: Partial<Record<keyof typeof UNIFORMS, number>>): Record<string, number> {
    return { ...ZERO_UNIFORMS, hq: this.config.hq, hkv: this.config.hkv, ...u };
  }

  /** o = softmax(scale·q·kᵀ + mask)·v within each packed sequence; lse too when given. */
  forward(rec: Recorder, a: AttentionForwardArgs): void {
    const { T, nseq } = this.checkPacked('attention_fwd', a.q, a.k, a.v, a.cuSeqlens);
    const { hq, hkv, headDim: D } = this.config;
    this.expect('attention_fwd', a.o, T, hq * D);
    if (a.lse) this.expect('attention_fwd', a.lse, T, hq);
    const bindings: Record<string, Tensor> = { q: a.q, k: a.k, v: a.v, o: a.o, cu_seqlens: a.cuSeqlens };
    if (a.lse) bindings.lse = a.lse;
    rec.dispatch(
      a.lse ? this.fwdLse : this.fwd,
      bindings,
      [Math.ceil((T * this.group) / this.fwdB), hkv],
      this.uniforms({ rows: T, nseq, causal: a.causal ? 1 : 0, scale: a.scale }),
    );
  }

  /**
   * Causal attention of q [count·n, Hq·D] (n new rows for each of slots slot0 .. slot0+count-1,
   * already appended to `cache` at this layer) over each slot's positions [0, past + n).
   */
  forwardCached(
    rec: Recorder,
    q: Tensor,
    cache: KvCache,
    layer: number,
    o: Tensor,
    b: { slot0: number; count: number; scale: number; split?: AttentionSplit },
  ): void {
    const { hq, hkv, headDim: D } = this.config;
    const op = 'attention_fwd_cached';
    if (cache.config.hkv !== hkv || cache.config.headDim !== D) {
      throw new ShapeError(op, `cache holds Hkv ${cache.config.hkv} x D ${cache.config.headDim}, attention expects ${hkv} x ${D}`);
    }
    if (!Number.isInteger(layer) || layer < 0 || layer >= cache.config.layers) throw new ShapeError(op, `layer ${layer} outside the cache`);
    const rows = q.shape[0];
    if (!(b.count >= 1) || rows % b.count !== 0 || rows === 0) throw new ShapeError(op, `q has ${rows} rows, not a multiple of count ${b.count}`);
    const n = rows / b.count;
    this.expect(op, q, rows, hq * D);
    this.expect(op, o, rows, hq * D);
    cache.checkBatch(op, b.slot0, b.count, n);
    const chunks = b.split?.chunks ?? 1;
    const u = this.uniforms({ rows: n, nseq: b.count, slot0: b.slot0, cap: cache.config.capacity, causal: 1, scale: b.scale, splits: chunks });
    const tiles = Math.ceil((n * this.group) / this.fwdB);
    const kv = { q, k: cache.k[layer], v: cache.v[layer], lengths: cache.lengths };
    if (!b.split) {
      rec.dispatch(this.fwdCached, { ...kv, o }, [tiles, hkv, b.count], u);
      return;
    }
    const ws = b.split.workspace;
    const need = this.splitWorkspaceShape(rows, chunks).reduce((x, y) => x * y);
    if (!Number.isInteger(chunks) || chunks < 1 || chunks > MAX_CHUNKS) throw new ShapeError(op, `chunks ${chunks} outside [1, ${MAX_CHUNKS}]`);
    if (ws.dtype !== 'f32' || ws.numel < need) throw new ShapeError(op, `split workspace '${ws.label}' needs ${need} f32 elements, has ${ws.numel} ${ws.dtype}`);
    if (b.count * chunks > this.gpu.limits.maxComputeWorkgroupsPerDimension) throw new ShapeError(op, `count·chunks ${b.count * chunks} too large for one grid dimension`);
    rec.dispatch(this.fwdCachedSplit, { ...kv, part: ws }, [tiles, hkv, b.count * chunks], u);
    rec.dispatch(this.combine, { part: ws, o }, grid1d(rows * hq * D, FLAT_WG), u);
  }

  /** dq, dk, dv from dout, recomputing the probabilities tile by tile from lse. */
  backward(rec: Recorder, a: AttentionBackwardArgs): void {
    const op = 'attention_bwd';
    const { T, nseq } = this.checkPacked(op, a.q, a.k, a.v, a.cuSeqlens);
    const { hq, hkv, headDim: D } = this.config;
    this.expect(op, a.o, T, hq * D);
    this.expect(op, a.dout, T, hq * D);
    this.expect(op, a.lse, T, hq);
    this.expect(op, a.rowStats, T, hq * 2);
    this.expect(op, a.dq, T, hq * D);
    this.expect(op, a.dk, T, hkv * D);
    this.expect(op, a.dv, T, hkv * D);
    const u = this.uniforms({ rows: T, nseq, causal: a.causal ? 1 : 0, scale: a.scale });
    rec.dispatch(this.prep, { o: a.o, dout: a.dout, lse: a.lse, row_stats: a.rowStats }, grid1d(T * hq, FLAT_WG), u);
    const common = { q: a.q, k: a.k, v: a.v, dout: a.dout, row_stats: a.rowStats, cu_seqlens: a.cuSeqlens };
    rec.dispatch(this.dqK, { ...common, dq: a.dq }, [Math.ceil((T * this.group) / this.bwdB), hkv], u);
    rec.dispatch(this.dkvK, { ...common, dk: a.dk, dv: a.dv }, [Math.ceil(T / this.bwdB), hkv], u);
  }
}
