// Grouped-query attention (shaders/attention_*.wgsl, a file per kernel): flash-style forward over packed sequences
// (causal for the decoder, bidirectional within each image for the vision tower), the forward
// over a KV cache (prefill and decode), and the FlashAttention-2 backward for training.
//
// Layouts (row-major f32, after RoPE): q, o, dq [T, Hq·D]; k, v, dk, dv [T, Hkv·D]; lse [T, Hq]
// (natural log of the softmax denominator of the scaled scores); cuSeqlens u32 [nseq + 1] with
// cu[0] = 0 and cu[nseq] = T (a single sequence is [0, T]). Query head h uses kv head
// floor(h / (Hq / Hkv)), as in transformers' repeat_kv. D is any head dim from 1 to 256. The KV
// cache's k and v are f32 or f16 (KvCache.dtype; each cache reader has a kernel for each, read as f32).
// Shared prefix (training G completions of one prompt): with sharedPrefix P, sequence 0 must be
// the prompt, rows [0, P) (cu[1] = P), and every later sequence, a completion, attends to it as
// well as to itself: the result is that of G sequences prompt + completion_i, with the prompt's
// rows computed once, and dk, dv of the prompt summed over every completion that reads it.
// Memory is O(T·D) in every pass; no [T x T] matrix exists.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor, type UniformType } from '../gpu';
import { dkvSplitsOf } from './dkvSplits';
import { checkWrittenInt8Groups, DOT4_I8 } from './matmulQ4';
import { kvDefines, type KvCache, type KvDtype } from './kvCache';
import type { AttentionF16 } from './attentionF16';

/** o_proj's adapter, whose down product u = o·Aᵀ the split decode's combine starts (per head). */
export interface AttentionFold {
  /** lora_A [r, Hq·D] */
  A: Tensor;
  r: number;
  /** Receives [rows, Hq, r] partials (summed by LoraGemv.upFromParts with Hq of them a row). */
  parts: Tensor;
  /** Receives the merged rows (2 to 8) also as int8 groups, the form MatmulQ4.gemv's `xq` takes
   * (u32, int8GroupWords; where Attention.foldQuantizes). */
  quantized?: Tensor;
}

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
  /** `lse` already holds this attention's log-sum-exp (a checkpointed recompute whose first forward
   * wrote it): a kernel that can may read it instead of computing it again. */
  lseKnown?: boolean;
  causal: boolean;
  scale: number;
  /** Rows of a prompt shared by the other sequences (the header says how); 0 or absent: none. */
  sharedPrefix?: number;
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
  /** As in the forward. */
  sharedPrefix?: number;
  /** q, k and v are the last forward's on this op, unchanged since (a checkpointed layer just
   * recomputed): a kernel that keeps converted copies of them may reuse those. */
  inputsOfLastForward?: boolean;
}

/**
 * Split-K for cached attention: partial results per key chunk, merged by a second kernel. When
 * the batch's slots share a prefix (KvCache.share), the chunks are divided between the prefix
 * (each of its chunks read once for all sequences) and each sequence's own keys, in proportion
 * to their lengths at recording time.
 */
export interface AttentionSplit {
  /** f32 workspace of Attention.splitWorkspaceShape(rows, chunks) or larger; overwritten. */
  workspace: Tensor;
  /** Key chunks per sequence (1 to 64); see Attention.decodeChunks for a default. */
  chunks: number;
}

const FLAT_WG = 256;

// The params struct of each kernel file, in order.
const FWD_UNIFORMS = { rows: 'u32', hq: 'u32', hkv: 'u32', causal: 'u32', scale: 'f32', nseq: 'u32', slot0: 'u32', cap: 'u32', prefix_len: 'u32', prefix_slot: 'u32' } as const;
const DECODE_UNIFORMS = { rows: 'u32', hq: 'u32', hkv: 'u32', scale: 'f32', nseq: 'u32', slot0: 'u32', cap: 'u32', splits: 'u32', prefix_len: 'u32', prefix_slot: 'u32', prefix_splits: 'u32', fold_r: 'u32' } as const;
const COMBINE_UNIFORMS = { rows: 'u32', hq: 'u32', nseq: 'u32', splits: 'u32', prefix_splits: 'u32', fold_r: 'u32' } as const;
const PREP_UNIFORMS = { rows: 'u32', hq: 'u32' } as const;
const DQ_UNIFORMS = { rows: 'u32', hq: 'u32', hkv: 'u32', causal: 'u32', scale: 'f32', nseq: 'u32', prefix_len: 'u32' } as const;
const DKV_UNIFORMS = { ...DQ_UNIFORMS, dkv_splits: 'u32', dkv_rows: 'u32', dkv_tile0: 'u32' } as const;
const DKV_SUM_UNIFORMS = { hkv: 'u32', dkv_splits: 'u32', dkv_rows: 'u32' } as const;

/** The values a dispatch may fill; each kernel reads its own struct's fields. */
type Values = Record<keyof typeof FWD_UNIFORMS | keyof typeof DECODE_UNIFORMS | keyof typeof COMBINE_UNIFORMS | keyof typeof DKV_UNIFORMS, number>;
const ZERO_VALUES: Values = {
  rows: 0,
  hq: 0,
  hkv: 0,
  causal: 0,
  scale: 0,
  nseq: 0,
  slot0: 0,
  cap: 0,
  splits: 0,
  prefix_len: 0,
  prefix_slot: 0,
  prefix_splits: 0,
  fold_r: 0,
  dkv_splits: 0,
  dkv_rows: 0,
  dkv_tile0: 0,
};
const MAX_HEAD_DIM = 256;
const MAX_CHUNKS = 64;
/** Keys per chunk of the default split: many short chunks cost more than they save (each is a
 * workgroup that stages q and writes partials). */
const KEYS_PER_CHUNK = 256;
/** Generation's split decode of one sequence: keys per chunk; a context of at most this many
 * keys takes the unsplit kernel, one dispatch a layer (generateChunks). */
const GENERATE_KEYS_PER_CHUNK = 64;
/** Split decode over a shared prefix: each sequence's own keys in at least two chunks of at most
 * this many keys, and the prefix, which a task reads once for several sequences, in chunks of one
 * staged block (BENCHMARKS.md, Kernel tuning choices: Attention). */
const OWN_KEYS_PER_CHUNK = 128;
const PREFIX_KEYS_PER_CHUNK = 32;

/** Chunks of a sequence's own keys, up to `own` of them, in split decode over a shared prefix. */
const ownChunksOf = (own: number) => Math.max(2, Math.ceil(own / OWN_KEYS_PER_CHUNK));
/** The decode kernel takes up to this many rows (n new tokens x G query heads) per kv head. */
const DECODE_MAX_ROWS = 8;
/** Rows of a task over a shared prefix: the rows of as many sequences as fit. */
const PREFIX_MAX_ROWS = 16;

/** Tile of the tiled kernels (shaders/attention_tiled.wgsl): owned rows, inner rows, threads. */
export interface Tile {
  BO: number;
  BI: number;
  WG: number;
  /** Output-phase lanes across the vec4 columns. */
  CLN: number;
}

/** Decode kernel layout (shaders/attention_decode.wgsl): rows, keys per staged block, threads, output column lanes. */
export interface DecodeTile {
  RMAX: number;
  KB: number;
  DWG: number;
  PCL: number;
}

// Largest first. The forward keeps q (BO rows) and k, v (BI rows) staged; the backward q, dO and
// k, v, so it takes smaller tiles. Every entry has LPR = WG / BO dividing BI and WG >= BI. More
// threads on the same tile hide more of the workgroup-memory latency (BENCHMARKS.md, kernel
// tuning choices).
const FORWARD_TILES: readonly [number, number, number][] = [[32, 16, 256], [32, 16, 128], [16, 16, 64], [16, 8, 64], [8, 8, 32], [4, 4, 16], [2, 2, 4]];
const BACKWARD_TILES: readonly [number, number, number][] = [[16, 16, 128], [16, 16, 64], [8, 8, 32], [4, 4, 16], [2, 2, 4]];
// Wider workgroups first for many rows: shorter chains of workgroup-memory loads per lane.
const DECODE_BLOCKS: readonly [number, number][] = [[32, 256], [32, 128], [32, 64], [16, 32], [8, 16], [4, 8], [2, 8]];

const floorPow2 = (x: number) => 2 ** Math.floor(Math.log2(x));
const ceilPow2 = (x: number) => 2 ** Math.ceil(Math.log2(x));

/** vec4s per staged head row, and its padded stride. */
function vec4s(headDim: number): { NV: number; DSV: number } {
  const NV = Math.ceil(headDim / 4);
  return { NV, DSV: NV + 1 };
}

/** Workgroup bytes of a tiled kernel: staged rows (vec4s) plus probabilities and row statistics. */
function tileBytes(pass: 'forward' | 'backward', headDim: number, [BO, BI, WG]: readonly number[]): number {
  const { DSV } = vec4s(headDim);
  return pass === 'forward' ? 16 * (BO + 2 * BI) * DSV + 4 * (BI * BO + WG + BO) : 16 * (2 * BO + 2 * BI) * DSV + 4 * 2 * BI * BO + 8 * BI;
}

/**
 * The largest tile whose workgroup memory and thread count fit the budget (the device's limits
 * unless a smaller budget is given).
 */
export function tileFor(
  lim: Pick<GPUSupportedLimits, 'maxComputeWorkgroupStorageSize' | 'maxComputeInvocationsPerWorkgroup'>,
  headDim: number,
  pass: 'forward' | 'backward',
  preferred?: readonly [number, number, number],
): Tile {
  if (preferred) {
    const [BO, BI, WG] = preferred;
    if (![BO, BI, WG].every((x) => Number.isInteger(x) && x > 0) || WG % BO !== 0 || BI % (WG / BO) !== 0 || WG < BI) {
      throw new ShapeError('attention', `tile [${preferred.join(', ')}]: WG / BO must divide BI, with WG ≥ BI`);
    }
  }
  for (const t of [...(preferred ? [preferred] : []), ...(pass === 'forward' ? FORWARD_TILES : BACKWARD_TILES)]) {
    const [BO, BI, WG] = t;
    if (tileBytes(pass, headDim, t) > lim.maxComputeWorkgroupStorageSize || WG > lim.maxComputeInvocationsPerWorkgroup) continue;
    const CLN = Math.min(WG, Math.max(WG / BO, Math.min(32, floorPow2(vec4s(headDim).NV))));
    return { BO, BI, WG, CLN };
  }
  throw new ShapeError('attention', `head_dim ${headDim} does not fit this device's workgroup memory`);
}

/** The decode layout for up to `rows` rows per kv head (the engine's: 8, and 16 over a shared prefix). */
export function decodeTileFor(lim: Pick<GPUSupportedLimits, 'maxComputeWorkgroupStorageSize' | 'maxComputeInvocationsPerWorkgroup'>, headDim: number, rows: number): DecodeTile {
  const RMAX = Math.max(2, ceilPow2(rows));
  const { NV, DSV } = vec4s(headDim);
  for (const [KB, DWG] of DECODE_BLOCKS) {
    const bytes = 16 * (RMAX * NV + KB * DSV + KB * NV) + 4 * (RMAX * KB + DWG + 2 * RMAX);
    if (bytes > lim.maxComputeWorkgroupStorageSize || DWG > lim.maxComputeInvocationsPerWorkgroup) continue;
    // Score row groups (DWG / KB) and output row groups (DWG / PCL) must divide RMAX.
    if (RMAX % (DWG / KB) !== 0 || DWG < RMAX) continue;
    const PCL = Math.max(DWG / RMAX, Math.min(DWG, 32, floorPow2(NV)));
    return { RMAX, KB, DWG, PCL };
  }
  throw new ShapeError('attention', `head_dim ${headDim} does not fit this device's workgroup memory`);
}

export interface AttentionOptions {
  /** Workgroup memory budget in bytes (default: the device's limit); smaller budgets pick smaller tiles. */
  workgroupBytes?: number;
  /** The forward's tile [BO, BI, WG] where it fits the budget, else tileFor's pick (the vision
   * tower's shapes prefer another than the decoder's; benchmarks compare them). WG / BO must
   * divide BI, with WG ≥ BI. */
  forwardTile?: readonly [number, number, number];
}

/** A kernel that reads the KV cache, by the cache's element type (each compiled at its first use). */
type ByKvDtype = Record<KvDtype, Kernel>;

/** Decode kernels for one row bound: unsplit and split. */
interface DecodeKernels {
  rows: number;
  plain: ByKvDtype;
  /** Unsplit, starting o_proj's LoRA down product (FOLD), and also writing o as int8 groups
   * (FOLD + QUANT: packed dot products, D % 32 = 0; else null). */
  plainFold: ByKvDtype;
  plainFoldQuant: ByKvDtype | null;
  split: ByKvDtype;
}

/** Attention over packed rows takes the f16 tensor cores (useTensorCores) from this many workgroups
 * of their forward (query tiles x heads); on fewer the f32 kernels' forward ran faster (an image of
 * 256 patches, a prompt of 256 tokens: 32 workgroups; BENCHMARKS.md, f16 tensor cores). */
export const F16_ATTENTION_MIN_GROUPS = 64;

export class Attention {
  /** The forward over packed rows on f16 tensor cores, while in use (useTensorCores). */
  private tensorCores: AttentionF16 | null = null;
  /** Its forward's workgroups from which a call takes it (useTensorCores). */
  private f16MinGroups = F16_ATTENTION_MIN_GROUPS;

  private constructor(
    private readonly gpu: Gpu,
    readonly config: AttentionConfig,
    readonly forwardTile: Tile,
    readonly backwardTile: Tile,
    private readonly fwd: Kernel,
    private readonly fwdLse: Kernel,
    private readonly fwdCached: ByKvDtype,
    private readonly decode: readonly DecodeKernels[],
    private readonly combine: Kernel,
    private readonly combineFold: Kernel,
    /** combineFold that also writes the merged rows as int8 groups (packed dot products, D % 32 = 0). */
    private readonly combineFoldQuant: Kernel | null,
    private readonly prep: Kernel,
    private readonly dqK: Kernel,
    private readonly dkvK: Kernel,
    /** The shared prefix's dK/dV, its key tiles' queries in chunks (DKV_SPLIT), and their sum. */
    private readonly dkvSplitK: Kernel,
    private readonly dkvSumK: Kernel,
  ) {}

  static async create(gpu: Gpu, config: AttentionConfig, opts: AttentionOptions = {}): Promise<Attention> {
    const { hq, hkv, headDim } = config;
    if (!Number.isInteger(hkv) || hkv < 1 || !Number.isInteger(hq) || hq % hkv !== 0) {
      throw new ShapeError('attention', `Hq (${hq}) must be a positive multiple of Hkv (${hkv})`);
    }
    if (!Number.isInteger(headDim) || headDim < 1 || headDim > MAX_HEAD_DIM) {
      throw new ShapeError('attention', `head_dim ${headDim} outside [1, ${MAX_HEAD_DIM}]`);
    }
    const lim = {
      maxComputeWorkgroupStorageSize: Math.min(gpu.limits.maxComputeWorkgroupStorageSize, opts.workgroupBytes ?? Infinity),
      maxComputeInvocationsPerWorkgroup: gpu.limits.maxComputeInvocationsPerWorkgroup,
    };
    const ft = tileFor(lim, headDim, 'forward', opts.forwardTile);
    const bt = tileFor(lim, headDim, 'backward');
    const k = (shader: string, entry: string, name: string, uniforms: Record<string, UniformType>, defines: Record<string, number | boolean>) =>
      gpu.kernelOnUse({ name: `attention.${name}`, shader, entry, defines: { D: headDim, ...defines }, uniforms });
    const ALIGNED = headDim % 4 === 0;
    const tiled = (t: Tile, flags: Record<string, boolean> = {}) => ({ ALIGNED, BO: t.BO, BI: t.BI, WG: t.WG, CLN: t.CLN, ...flags });
    // The cache readers in both element types; an f16 cache's kernels are named with _f16.
    const byKv = (make: (name: (base: string) => string, defines: Record<string, boolean>) => Kernel): ByKvDtype => ({
      f32: make((n) => n, kvDefines('f32')),
      f16: make((n) => `${n}_f16`, kvDefines('f16')),
    });
    // One layout takes a sequence's own rows (G per kv head a new token, up to 8; forwardCached),
    // a second the rows of several sequences over a shared prefix where workgroup memory allows.
    const fits = (rows: number) => {
      try {
        return decodeTileFor(lim, headDim, rows);
      } catch (e) {
        if (e instanceof ShapeError && rows > DECODE_MAX_ROWS) return null;
        throw e;
      }
    };
    const tiles = [DECODE_MAX_ROWS, PREFIX_MAX_ROWS].map(fits).filter((d): d is DecodeTile => d !== null);
    const quantizes = gpu.hasWgsl(DOT4_I8) && headDim % 32 === 0;
    const decode = tiles.map((d) => {
      const defs = { ALIGNED, RMAX: d.RMAX, KB: d.KB, DWG: d.DWG, PCL: d.PCL };
      // Named as the cached forward they stand for (profiles and benchmarks match these names).
      const decodeK = (base: string, flags: Record<string, boolean>) => byKv((name, kv) => k('attention_decode', 'attn_decode', name(base), DECODE_UNIFORMS, { ...defs, ...flags, ...kv }));
      return {
        rows: d.RMAX,
        plain: decodeK('fwd_cached', {}),
        plainFold: decodeK('fwd_cached_fold', { FOLD: true }),
        plainFoldQuant: quantizes ? decodeK('fwd_cached_fold_quant', { FOLD: true, QUANT: true }) : null,
        split: decodeK('fwd_cached_split', { SPLIT: true }),
      };
    });
    return new Attention(
      gpu,
      config,
      ft,
      bt,
      k('attention_fwd', 'attn_fwd', 'fwd', FWD_UNIFORMS, tiled(ft)),
      k('attention_fwd', 'attn_fwd', 'fwd_lse', FWD_UNIFORMS, tiled(ft, { LSE: true })),
      byKv((name, kv) => k('attention_fwd', 'attn_fwd', name('fwd_cached'), FWD_UNIFORMS, tiled(ft, { CACHED: true, ...kv }))),
      decode,
      k('attention_combine', 'attn_split_combine', 'split_combine', COMBINE_UNIFORMS, {}),
      k('attention_combine', 'attn_split_combine', 'split_combine_fold', COMBINE_UNIFORMS, { FOLD: true }),
      quantizes ? k('attention_combine', 'attn_split_combine', 'split_combine_fold_quant', COMBINE_UNIFORMS, { FOLD: true, QUANT: true }) : null,
      k('attention_bwd_prep', 'attn_bwd_prep', 'bwd_prep', PREP_UNIFORMS, {}),
      k('attention_bwd_dq', 'attn_bwd_dq', 'bwd_dq', DQ_UNIFORMS, tiled(bt)),
      k('attention_bwd_dkv', 'attn_bwd_dkv', 'bwd_dkv', DKV_UNIFORMS, tiled(bt)),
      k('attention_bwd_dkv', 'attn_bwd_dkv', 'bwd_dkv_split', DKV_UNIFORMS, tiled(bt, { DKV_SPLIT: true })),
      k('attention_dkv_sum', 'attn_dkv_sum', 'dkv_sum', DKV_SUM_UNIFORMS, {}),
    );
  }

  /** Run attention over packed rows, forward and backward, on `op` (f16 tensor cores) where its
   * grid has `minGroups` workgroups (0: always), or on the f32 kernels (null). The caller owns
   * `op`; cached attention (generation) stays on the f32 kernels. */
  useTensorCores(op: AttentionF16 | null, minGroups = F16_ATTENTION_MIN_GROUPS): void {
    if (op && (op.config.hq !== this.config.hq || op.config.hkv !== this.config.hkv || op.config.headDim !== this.config.headDim)) {
      throw new ShapeError('attention', `tensor-core attention of Hq ${op.config.hq}, Hkv ${op.config.hkv}, D ${op.config.headDim} for attention of ${this.config.hq}, ${this.config.hkv}, ${this.config.headDim}`);
    }
    this.tensorCores = op;
    this.f16MinGroups = minGroups;
  }

  /** Whether attention over packed rows runs on f16 tensor cores (useTensorCores), where large enough. */
  get onTensorCores(): boolean {
    return this.tensorCores !== null;
  }

  /** The f16 op for T packed rows: the same rule for a forward and the backward after it, so that
   * a backward finds the lse and f16 copies of its own path. */
  private f16For(T: number): AttentionF16 | null {
    const op = this.tensorCores;
    return op && op.groups(T) >= this.f16MinGroups ? op : null;
  }

  /** Whether a split decode's combine can also leave its merged rows as int8 groups (AttentionFold.quantized). */
  get foldQuantizes(): boolean {
    return this.combineFoldQuant !== null;
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

  /**
   * A chunk count for decoding several sequences that share a prefix of `prefix` positions, each
   * with up to `own` positions of its own (the cache's capacity past the prefix): forwardCached
   * gives their own keys at least two chunks of at most OWN_KEYS_PER_CHUNK, the prefix the rest.
   */
  static sharedDecodeChunks(prefix: number, own: number): number {
    return Math.min(MAX_CHUNKS, ownChunksOf(own) + Math.ceil(prefix / PREFIX_KEYS_PER_CHUNK));
  }

  /**
   * The chunk count generation decodes with: `sequences` samples of a `prompt`-position prompt
   * (shared when more than one) and up to `newTokens` positions each.
   */
  static generateChunks(prompt: number, newTokens: number, sequences: number): number {
    const keys = prompt + newTokens;
    if (keys <= GENERATE_KEYS_PER_CHUNK) return 1;
    return sequences > 1 ? Attention.sharedDecodeChunks(prompt, newTokens) : Math.min(MAX_CHUNKS, Math.ceil(keys / GENERATE_KEYS_PER_CHUNK));
  }

  /** Binding names of q, k, v, dO for the tiled and decode kernels: their vec4 views when D % 4 == 0. */
  private views(t: Partial<Record<'q' | 'k' | 'v' | 'dout', Tensor>>): Record<string, Tensor> {
    if (this.config.headDim % 4 !== 0) return t as Record<string, Tensor>;
    const name = { q: 'q4', k: 'k4', v: 'v4', dout: 'do4' } as const;
    return Object.fromEntries(Object.entries(t).map(([key, x]) => [name[key as keyof typeof name], x]));
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

  /** A shared prefix's row count (0: none); it must leave rows for other sequences after it. */
  private checkPrefix(op: string, prefix: number | undefined, T: number, nseq: number): number {
    const p = prefix ?? 0;
    if (p === 0) return 0;
    if (!Number.isInteger(p) || p < 0 || p >= T || nseq < 2) {
      throw new ShapeError(op, `sharedPrefix ${p} must be the rows of sequence 0 of 2 or more, within T = ${T}`);
    }
    return p;
  }

  private uniforms(u: Partial<Values>): Values {
    return { ...ZERO_VALUES, hq: this.config.hq, hkv: this.config.hkv, ...u };
  }

  /** o = softmax(scale·q·kᵀ + mask)·v within each packed sequence; lse too when given. */
  forward(rec: Recorder, a: AttentionForwardArgs): void {
    const { T, nseq } = this.checkPacked('attention_fwd', a.q, a.k, a.v, a.cuSeqlens);
    const { hq, hkv, headDim: D } = this.config;
    this.expect('attention_fwd', a.o, T, hq * D);
    if (a.lse) this.expect('attention_fwd', a.lse, T, hq);
    const prefix = this.checkPrefix('attention_fwd', a.sharedPrefix, T, nseq);
    const f16 = this.f16For(T);
    if (f16) {
      f16.forward(rec, a);
      return;
    }
    const bindings: Record<string, Tensor> = { ...this.views({ q: a.q, k: a.k, v: a.v }), o: a.o, cu_seqlens: a.cuSeqlens };
    if (a.lse) bindings.lse = a.lse;
    rec.dispatch(
      a.lse ? this.fwdLse : this.fwd,
      bindings,
      [Math.ceil((T * this.group) / this.forwardTile.BO), hkv],
      this.uniforms({ rows: T, nseq, causal: a.causal ? 1 : 0, scale: a.scale, prefix_len: prefix }),
    );
  }

  /**
   * Causal attention of q [count·n, Hq·D] (n new rows for each of slots slot0 .. slot0+count-1,
   * already appended to `cache` at this layer) over each slot's positions [0, past + n). With
   * `fold`, the kernel that normalises the rows also leaves the partials of o_proj's LoRA down
   * product (AttentionFold): the split's combine, or with one key chunk (or none given) the
   * unsplit decode kernel, which then takes the combine's place; returns whether it did (prefill's
   * tiled kernel does not).
   */
  forwardCached(
    rec: Recorder,
    q: Tensor,
    cache: KvCache,
    layer: number,
    o: Tensor,
    b: { slot0: number; count: number; scale: number; split?: AttentionSplit; fold?: AttentionFold },
  ): boolean {
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
    const prefix = cache.prefixOf(b.slot0, b.count);
    const rps = n * this.group;
    const kv = { ...this.views({ q, k: cache.k[layer], v: cache.v[layer] }), lengths: cache.lengths };
    const common = { rows: n, nseq: b.count, slot0: b.slot0, cap: cache.stride, causal: 1, scale: b.scale, prefix_len: prefix.length, prefix_slot: prefix.from };
    // A sequence's own rows take the 8-row layout: a 2-row task computes on a quarter of its
    // threads, but all of them load each block of keys, and the next block during this one
    // (BENCHMARKS.md, Kernel tuning choices: Attention).
    const own = rps <= DECODE_MAX_ROWS ? this.decode[0] : undefined;
    const dt = cache.dtype;
    if (!own) {
      // Prefill-sized batches have enough rows to fill the GPU unsplit: `split` is not needed.
      rec.dispatch(this.fwdCached[dt], { ...kv, o }, [Math.ceil(rps / this.forwardTile.BO), hkv, b.count], this.uniforms(common));
      return false;
    }
    const f = b.fold;
    if (f) this.checkFold(op, f, rows);
    // One chunk of keys (or no split): the unsplit kernel, which does what the split and its combine would.
    if (!b.split || b.split.chunks === 1) {
      if (!f) {
        rec.dispatch(own.plain[dt], { ...kv, o }, [1, hkv, b.count], this.uniforms(common));
        return false;
      }
      const u = this.uniforms({ ...common, fold_r: f.r });
      if (f.quantized) {
        if (!own.plainFoldQuant) throw new ShapeError(op, 'fold.quantized needs packed dot products in WGSL and D a multiple of 32 (foldQuantizes)');
        checkWrittenInt8Groups(op, 'fold.quantized', f.quantized, rows, hq * D);
        rec.dispatch(own.plainFoldQuant[dt], { ...kv, o, a_fold: f.A, fold_parts: f.parts, xq: f.quantized }, [1, hkv, b.count], u);
      } else rec.dispatch(own.plainFold[dt], { ...kv, o, a_fold: f.A, fold_parts: f.parts }, [1, hkv, b.count], u);
      return true;
    }
    const chunks = b.split.chunks;
    const ws = b.split.workspace;
    const need = this.splitWorkspaceShape(rows, chunks).reduce((x, y) => x * y);
    if (!Number.isInteger(chunks) || chunks < 1 || chunks > MAX_CHUNKS) throw new ShapeError(op, `chunks ${chunks} outside [1, ${MAX_CHUNKS}]`);
    if (ws.dtype !== 'f32' || ws.numel < need) throw new ShapeError(op, `split workspace '${ws.label}' needs ${need} f32 elements, has ${ws.numel} ${ws.dtype}`);
    // Each sequence's own keys take ownChunksOf what its cache holds when full, the shared prefix
    // the rest (sharedDecodeChunks sizes the count so; one sequence reads the prefix once either
    // way: its own chunks cover it). Not the lengths at recording time: a decode step is recorded
    // once and replayed while each sequence's own keys grow from none to the capacity's.
    let prefixChunks = 0;
    if (prefix.length > 0 && chunks > 1 && b.count > 1) {
      prefixChunks = chunks - Math.min(chunks - 1, ownChunksOf(cache.config.capacity - prefix.length));
    }
    const ownChunks = chunks - prefixChunks;
    // Prefix tasks take as many sequences' rows as the widest kernel holds; own tasks one sequence's.
    const kernel = prefixChunks > 0 ? (this.decode.find((d) => d.rows >= b.count * rps) ?? this.decode[this.decode.length - 1]) : own;
    const groups = Math.ceil(b.count / Math.floor(kernel.rows / rps));
    const tasks = prefixChunks * groups + b.count * ownChunks;
    if (tasks > this.gpu.limits.maxComputeWorkgroupsPerDimension) throw new ShapeError(op, `${tasks} decode tasks too many for one grid dimension`);
    const u = this.uniforms({ ...common, splits: ownChunks, prefix_splits: prefixChunks, fold_r: f?.r ?? 0 });
    rec.dispatch(kernel.split[dt], { ...kv, part: ws }, [1, hkv, tasks], u);
    const grid = grid1d(rows * hq * FLAT_WG, FLAT_WG);
    if (f?.quantized) {
      if (!this.combineFoldQuant) throw new ShapeError(op, 'fold.quantized needs packed dot products in WGSL and D a multiple of 32 (foldQuantizes)');
      checkWrittenInt8Groups(op, 'fold.quantized', f.quantized, rows, hq * D);
      rec.dispatch(this.combineFoldQuant, { part: ws, o, a_fold: f.A, fold_parts: f.parts, xq: f.quantized }, grid, u);
    } else if (f) rec.dispatch(this.combineFold, { part: ws, o, a_fold: f.A, fold_parts: f.parts }, grid, u);
    else rec.dispatch(this.combine, { part: ws, o }, grid, u);
    return f !== undefined;
  }

  /** Throws ShapeError unless fold's A is [r, Hq·D] (r up to the combine's threads) and its parts hold `rows` rows of Hq. */
  private checkFold(op: string, f: AttentionFold, rows: number): void {
    const { hq, headDim: D } = this.config;
    if (!(f.r >= 1 && f.r <= FLAT_WG) || f.A.dtype !== 'f32' || f.A.numel !== f.r * hq * D) throw new ShapeError(op, `fold: A must be f32 [r ≤ ${FLAT_WG}, ${hq * D}], got ${f.A.dtype} [${f.A.shape.join(', ')}] for r ${f.r}`);
    if (f.parts.dtype !== 'f32' || f.parts.numel < rows * hq * f.r) throw new ShapeError(op, `fold: parts need ${rows * hq * f.r} f32 elements, got ${f.parts.numel}`);
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
    const prefix = this.checkPrefix(op, a.sharedPrefix, T, nseq);
    const layout = { rows: T, nseq, causal: a.causal ? 1 : 0, scale: a.scale, prefix_len: prefix };
    const u = this.uniforms(layout);
    rec.dispatch(this.prep, { o: a.o, dout: a.dout, lse: a.lse, row_stats: a.rowStats }, grid1d(T * hq, FLAT_WG), u);
    const f16 = this.f16For(T);
    if (f16) {
      f16.backward(rec, a);
      return;
    }
    const common = { ...this.views({ q: a.q, k: a.k, v: a.v, dout: a.dout }), row_stats: a.rowStats, cu_seqlens: a.cuSeqlens };
    const BO = this.backwardTile.BO;
    rec.dispatch(this.dqK, { ...common, dq: a.dq }, [Math.ceil((T * this.group) / BO), hkv], u);
    const splits = dkvSplitsOf(T, prefix, nseq);
    const tiles = Math.ceil(T / BO);
    if (splits === 1 || rec.capturing) {
      rec.dispatch(this.dkvK, { ...common, dk: a.dk, dv: a.dv }, [tiles, hkv], u);
      return;
    }
    // The prefix's key tiles in query chunks, their partials summed; the other tiles as usual.
    const prefixTiles = Math.ceil(prefix / BO);
    const rows = Math.min(T, prefixTiles * BO);
    const su = this.uniforms({ ...layout, dkv_splits: splits, dkv_rows: rows, dkv_tile0: prefixTiles });
    const part = this.gpu.tensor([2 * splits * rows * hkv * D], 'f32', 'attention.dkv_part');
    rec.dispatch(this.dkvSplitK, { ...common, part }, [prefixTiles, hkv, splits], su);
    rec.dispatch(this.dkvSumK, { part, dk: a.dk, dv: a.dv }, grid1d(rows * hkv * D, FLAT_WG), su);
    if (tiles > prefixTiles) rec.dispatch(this.dkvK, { ...common, dk: a.dk, dv: a.dv }, [tiles - prefixTiles, hkv], su);
    // Back to the pool as recorded: the queue orders these dispatches before any later use.
    part.release();
  }
}
