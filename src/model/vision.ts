// Qwen3-VL's vision tower on the GPU, as transformers' Qwen3VLVisionModel: frozen, but for
// optional LoRA on the mergers' and the blocks' linear layers (VisionLora), whose backward is here too:
//
//   pixel_values [N, C·Tp·P·P] ──patch embed (Conv3d with kernel = stride, i.e. a dense layer over
//   the flattened patch; the processor flattens in (c, t, y, x) order, the conv weight's own order)
//   ──+ position table bilinearly resampled to each image's grid (visionPosEmbed.ts)
//   ──blocks: x += proj(attn(RoPE(qkv(LN1 x)))); x += fc2(gelu_tanh(fc1(LN2 x)))
//       attention bidirectional within each frame of each image (cu_seqlens), 2-D RoPE (θ 1e4) on
//       q and k; after block deepstack_visual_indexes[j], DeepStack merger j reads x
//   ──final merger: LN(hidden) per patch, view [N/4, 4·hidden], fc1, erf-GELU, fc2
//   → image embeds [N/4, out_hidden] and one [N/4, out_hidden] DeepStack feature set per index.
//   A DeepStack merger views x as [N/4, 4·hidden] first and normalises over 4·hidden.
// Patches arrive in 2x2 merge-block order (the processor's), so every "view [N/4, 4·hidden]" is a
// reshape of contiguous rows. All LayerNorms use eps 1e-6.
//
// Weights: the dense matrices as the checkpoint stores them, bf16 or f16 halves (the published
// models' bf16: 0.75 GiB for the 2B, half of f32's bytes; the GEMM widens them exactly as it loads
// them), f32 from an f32 checkpoint; biases, norms and the position table f32. loadVisionWeights'
// quant 'q4' makes the dense matrices 4-bit (src/ops/matmulQ4.ts, groups of 32 along K) where K is
// a multiple of 32 (all of them in the 2B: K = 1536, 1024, 4096; 0.2 GiB). It is not the model
// loader's default: on the tiny fixtures it moves the features by 15-17% relative RMS
// (test/unit/model-vision.test.ts). The fused attn.qkv is split into q, k and v at load; with dense
// weights the product backend joins them again (Projection.joinDense) for one batched GEMM.
//
// LoRA (src/ops/lora.ts: y += s·x·Aᵀ·Bᵀ) on a merger's fc1 and fc2 and on a block's attn.qkv (PEFT
// adapts the fused layer: one A, B's rows q, k, v; splitQkvLora), attn.proj, mlp.linear_fc1/2.
// The backward (VisionTower.backward) starts from the gradients of the mergers' outputs (the
// decoder's at the image rows for the final merger, at the rows of its DeepStack add for the
// others) and walks back through fc2, the erf-GELU and fc1 from what the forward kept (the
// LayerNorm's output, the GELU's input and output, the adapters' u). With adapted blocks, the
// mergers' LayerNorms pass it on into the residual stream at the block they read, and the blocks
// from the last down to the lowest adapted one are recomputed from their kept inputs and walked
// back (LN, attention, RoPE, tanh-GELU), as the decoder's checkpointed backward does.
// Features with LoRA depend on the adapter: they are encoded per forward, not cached.
//
// Also here: loadVisionWeights (checkpoint → VisionWeights on the GPU) and VisionCache, the
// per-image LRU of encoded features (without LoRA) the trainer reuses across the samples and
// iterations of a step.
import { ShapeError, Tensor, type DType, type Gpu, type Recorder } from '../gpu';
import { Activations } from '../ops/activations';
import type { LoraParams } from '../ops/loraParams';
import { Attention } from '../ops/attention';
import type { AttentionF16 } from '../ops/attentionF16';
import { DENSE_DTYPES } from '../ops/matmul';
import { allocQ4, Q4_GROUP } from '../ops/matmulQ4';

import { Norms } from '../ops/norms';
import { Projection, type TensorCoreProducts } from '../ops/projection';
import { QuantizeQ4 } from '../ops/quantizeQ4';
import { Rope } from '../ops/rope';
import type { PreparedImage } from '../rl/policy';
import type { Qwen3VLConfig, Qwen3VLVisionConfig } from './config';
import { sourceFormat, toFloat32, type SafetensorsDtype } from './dtype';
import { visionRopeLayout, visionRopePositions } from './ropeTables';
import type { Checkpoint, Progress } from './safetensors';
import { canonicalWeightName, checkTensorShape, expectedWeights, WeightShapeError } from './weightShapes';
import type { DenseWeight, LinearWeight, NormWeight, PatchMergerWeights, VisionWeights } from './weights';
import { PosEmbedAdd, posEmbedInterpolation, posEmbedSide } from './visionPosEmbed';

/** Qwen3VLVisionRotaryEmbedding's default; the vision config's rope_parameters are not read by transformers. */
const VISION_ROPE_THETA = 10000;
const LN_EPS = 1e-6;
/**
 * The MLP runs over at most this many patches at a time, so its [rows, intermediate] workspaces
 * stay bounded (2B: 2 x 64 MiB) and within the storage-binding limit for any image size.
 */
const MLP_CHUNK_ROWS = 4096;
/**
 * The attention forward's tile here ([query rows, key rows, threads]; AttentionOptions.forwardTile):
 * heads of 64 over a few hundred to a few thousand patches do better on half the threads of the
 * decoder's tile. H100, 16 heads, in stream (`node .bench/attnSpeed.mjs`): 196 patches 29.5 ->
 * 28.6 µs, 784 patches 256 -> 217 µs, 3136 patches 2949 -> 2602 µs.
 */
const VISION_ATTENTION_TILE = [32, 16, 128] as const;
/** With 4-bit MLP weights a chunk is bound at a row offset: a multiple of 64 rows keeps it 256-byte aligned. */
const Q4_CHUNK_ALIGN = 64;

export interface VisionTowerOptions {
  /** Patches per MLP pass (default MLP_CHUNK_ROWS, lowered further to fit the binding limit). */
  mlpChunkRows?: number;
}

export type GridThw = readonly [number, number, number];

/** The tower's outputs for a set of patches: [patches/4, outHidden] each. */
export interface VisionFeatures {
  embeds: Tensor;
  /** One per deepstack_visual_indexes entry, in block order (added after decoder layers 0, 1, …). */
  deepstack: Tensor[];
}

/** A merger's adapters: on linear_fc1, linear_fc2, or both. */
export interface MergerLora {
  fc1?: LoraParams;
  fc2?: LoraParams;
}

/** The adaptable layers of a vision block, as PEFT names them below model.visual.blocks.<i>. */
export const VISION_BLOCK_LORA = { qkv: 'attn.qkv', proj: 'attn.proj', fc1: 'mlp.linear_fc1', fc2: 'mlp.linear_fc2' } as const;
export type VisionBlockLayer = keyof typeof VISION_BLOCK_LORA;

/** A vision block's adapters; qkv is PEFT's fused attn.qkv (B [3·hidden, r]: rows of q, k, then v). */
export type BlockLora = Partial<Record<VisionBlockLayer, LoraParams>>;

/** The tower's adapters: mergers [0] the final one, [1 + j] DeepStack merger j; blocks by index. */
export interface VisionLora {
  mergers: readonly MergerLora[];
  blocks: readonly BlockLora[];
}

/** PEFT's module path of merger `m` (VisionLora.mergers' index)'s linear_fc1 or linear_fc2. */
export function visionLoraModuleName(m: number, fc: 1 | 2): string {
  return m === 0 ? `model.visual.merger.linear_fc${fc}` : `model.visual.deepstack_merger_list.${m - 1}.linear_fc${fc}`;
}

/** PEFT's module path of a layer of vision block `i`. */
export function visionBlockLoraModuleName(i: number, layer: VisionBlockLayer): string {
  return `model.visual.blocks.${i}.${VISION_BLOCK_LORA[layer]}`;
}

/**
 * The fused qkv adapter as three adapters of one output each: A and dA shared (their gradients
 * add up, as the fused layer's do), B and dB row views. Each view starts 4·i·hidden·r bytes in,
 * which must be a multiple of the storage offset alignment (attachLora checks it).
 */
export function splitQkvLora(p: LoraParams, hidden: number): LoraParams[] {
  const rowsView = (t: Tensor, i: number) => new Tensor(t.buffer, [hidden, p.r], 'f32', `${t.label}[${'qkv'[i]}]`, t.byteOffset + 4 * i * hidden * p.r);
  return [0, 1, 2].map((i) => ({ ...p, out: hidden, B: rowsView(p.B, i), dB: rowsView(p.dB, i) }));
}

/** What one merger's backward reads: [merged rows, unit·hidden] each, and the adapters' u [rows, r]. */
export interface MergerActivations {
  /** The LayerNorm's output: fc1's input. */
  xn: Tensor;
  /** fc1's output: the GELU's input. */
  pre: Tensor;
  /** The GELU's output: fc2's input. */
  act: Tensor;
  u1: Tensor | null;
  u2: Tensor | null;
}

/** What a training forward with vision LoRA keeps for VisionTower.backward. */
export interface VisionSaved {
  /** Per merger (VisionLora.mergers' order); null: nothing to take back through it. */
  mergers: (MergerActivations | null)[];
  /**
   * With adapters on blocks: the inputs of blocks `first` (the lowest adapted) to the last and the
   * last block's output ([patches, hidden] each), and the call's cu_seqlens and rope table; the
   * backward recomputes each block from its input.
   */
  blocks: { first: number; xs: Tensor[]; cuSeqlens: Tensor; cs: Tensor } | null;
}

/** A forward with LoRA on the vision tower; `saved` (when given) receives what VisionTower.backward reads. */
export interface VisionLoraCall {
  adapters: VisionLora;
  saved?: VisionSaved;
}

export function releaseVisionSaved(saved: VisionSaved): void {
  for (const a of saved.mergers) if (a) for (const t of [a.xn, a.pre, a.act, a.u1, a.u2]) t?.release();
  const b = saved.blocks;
  if (b) for (const t of [...b.xs, b.cuSeqlens, b.cs]) t.release();
}

/** Rows [row0, row0 + rows) of a row-major [*, width] f32 tensor, as a tensor of its own. */
function rowsOf(t: Tensor, row0: number, rows: number, width: number): Tensor {
  return new Tensor(t.buffer, [rows, width], 'f32', t.label, t.byteOffset + 4 * row0 * width);
}

/** The index of the lowest block with an adapter, or -1. */
function firstAdaptedBlock(lora: VisionLora | undefined): number {
  return lora ? lora.blocks.findIndex((b) => Object.values(b).some(Boolean)) : -1;
}

/** A block's attention-half buffers: q, k and v back to back (the joined GEMM's C), each on the storage offset alignment. */
interface AttentionBuffers {
  xn: Tensor;
  q: Tensor;
  k: Tensor;
  v: Tensor;
  o: Tensor;
  /** [patches, heads] log-sum-exp for the backward; absent in inference. */
  lse?: Tensor;
  /** LoRA u of qkv and proj, [patches, widest r]. */
  u?: { qkv: Tensor; proj: Tensor };
}

export class VisionTower {
  private constructor(
    private readonly gpu: Gpu,
    readonly config: Qwen3VLVisionConfig,
    private readonly weights: VisionWeights,
    private readonly ops: { projection: Projection; norms: Norms; act: Activations; attn: Attention; rope: Rope; pos: PosEmbedAdd },
    private readonly side: number,
    private readonly mlpChunkRows: number,
  ) {}

  /**
   * Run the tower's f32 dense products (all but the patch embedding) on tensor cores through `op`
   * (the caller owns it; int8 or f16, and Projection.useTensorCores rounds each weight to that
   * once), and its attention through `attention` (f16 tensor cores), or, with null, on the f32
   * kernels again.
   */
  async useTensorCores(op: TensorCoreProducts | null, attention: AttentionF16 | null = null): Promise<void> {
    this.ops.attn.useTensorCores(attention);
    const w = this.weights;
    const dense = [...w.blocks.flatMap((b) => [b.q, b.k, b.v, b.proj, b.fc1, b.fc2]), ...[w.merger, ...w.deepstackMergers].flatMap((m) => [m.fc1, m.fc2])];
    await this.ops.projection.useTensorCores(op, dense);
  }

  /** Whether the dense products run on the tensor cores (useTensorCores). */
  get usesTensorCores(): boolean {
    return this.ops.projection.usesTensorCores;
  }

  /** q, k and v workspaces in one buffer (the joined GEMM's layout); release `all`. */
  private qkvBuffers(N: number): { all: Tensor; q: Tensor; k: Tensor; v: Tensor } {
    const H = this.config.hiddenSize;
    const align = this.gpu.limits.minStorageBufferOffsetAlignment;
    const stride = Math.ceil((N * H * 4) / align) * (align / 4);
    const all = this.gpu.tensor([3 * stride], 'f32', 'vision q, k, v');
    const [q, k, v] = [0, 1, 2].map((i) => new Tensor(all.buffer, [N, H], 'f32', all.label, all.byteOffset + 4 * i * stride));
    return { all, q, k, v };
  }

  /** x += proj(attention(RoPE(qkv(LN1 x)))) with the block's adapters, keeping what `a` holds. */
  private attentionHalf(rec: Recorder, b: VisionWeights['blocks'][number], ad: BlockLora | undefined, x: Tensor, a: AttentionBuffers, cs: Tensor, cuSeqlens: Tensor): void {
    const { projection, norms, rope, attn } = this.ops;
    const [N, H] = x.shape;
    const heads = this.config.numHeads;
    norms.layernorm(rec, x, b.norm1.w, b.norm1.b, a.xn, LN_EPS);
    projection.denseShared(rec, a.xn, [{ d: b.q, y: a.q }, { d: b.k, y: a.k }, { d: b.v, y: a.v }]);
    if (ad?.qkv) splitQkvLora(ad.qkv, H).forEach((p, i) => projection.lora.forward(rec, p, { x: a.xn, y: [a.q, a.k, a.v][i], u: rowsOf(a.u!.qkv, 0, N, p.r) }));
    rope.apply(rec, cs, a.q, heads);
    rope.apply(rec, cs, a.k, heads);
    attn.forward(rec, { q: a.q, k: a.k, v: a.v, o: a.o, lse: a.lse, cuSeqlens, causal: false, scale: 1 / Math.sqrt(H / heads) });
    projection.dense(rec, a.o, b.proj, x, true);
    if (ad?.proj) projection.lora.forward(rec, ad.proj, { x: a.o, y: x, u: rowsOf(a.u!.proj, 0, N, ad.proj.r) });
  }

  /** Rows [r0, r0 + m) of the MLP's fc1 and GELU: mlpIn, mlpAct = gelu(fc1(xn)) in their rows [0, m), with fc1's adapter (u1 [chunk, r]). */
  private mlpUp(rec: Recorder, b: VisionWeights['blocks'][number], ad: BlockLora | undefined, xn: Tensor, r0: number, m: number, mlpIn: Tensor, mlpAct: Tensor, u1: Tensor | null): void {
    const { projection, act } = this.ops;
    const [H, I] = [this.config.hiddenSize, this.config.intermediateSize];
    projection.denseRows(rec, xn, r0, b.fc1, mlpIn, 0, m, false);
    if (ad?.fc1) projection.lora.forward(rec, ad.fc1, { x: rowsOf(xn, r0, m, H), y: rowsOf(mlpIn, 0, m, I), u: rowsOf(u1!, 0, m, ad.fc1.r) });
    act.geluTanh(rec, mlpIn, mlpAct);
  }

  /** MLP row chunk: at most mlpChunkRows, a multiple of 64 with block adapters (their row views stay 256-byte aligned). */
  private chunkRows(N: number, blockLora: boolean): number {
    const c = blockLora ? Math.max(Q4_CHUNK_ALIGN, this.mlpChunkRows - (this.mlpChunkRows % Q4_CHUNK_ALIGN)) : this.mlpChunkRows;
    return Math.min(N, c);
  }

  static async create(gpu: Gpu, config: Qwen3VLConfig, weights: VisionWeights, opts: VisionTowerOptions = {}): Promise<VisionTower> {
    const v = config.vision;
    checkVisionWeights(v, weights);
    const fit = Math.floor(gpu.limits.maxStorageBufferBindingSize / (4 * v.intermediateSize));
    let mlpChunkRows = Math.min(opts.mlpChunkRows ?? MLP_CHUNK_ROWS, fit);
    if (weights.blocks.some((b) => b.fc1.kind === 'q4' || b.fc2.kind === 'q4')) mlpChunkRows = Math.max(Q4_CHUNK_ALIGN, mlpChunkRows - (mlpChunkRows % Q4_CHUNK_ALIGN));
    if (!Number.isInteger(mlpChunkRows) || mlpChunkRows < 1) throw new ShapeError('vision_tower', `MLP chunk of ${mlpChunkRows} rows`);
    const headDim = v.hiddenSize / v.numHeads;
    const [projection, norms, act, attn, rope, pos] = await Promise.all([
      Projection.create(gpu),
      Norms.create(gpu),
      Activations.create(gpu),
      Attention.create(gpu, { hq: v.numHeads, hkv: v.numHeads, headDim }, { forwardTile: VISION_ATTENTION_TILE }),
      Rope.create(gpu, visionRopeLayout(VISION_ROPE_THETA, headDim)),
      PosEmbedAdd.create(gpu),
    ]);
    // One batched GEMM for each block's q, k and v (f32 weights: BENCHMARKS.md, gemmSpeed --dense).
    for (const [i, b] of weights.blocks.entries()) await projection.joinDense([b.q, b.k, b.v], `model.visual.blocks.${i}.attn.qkv`);
    return new VisionTower(gpu, v, weights, { projection, norms, act, attn, rope, pos }, posEmbedSide(v.numPositionEmbeddings), mlpChunkRows);
  }

  /** Width of one flattened patch: in_channels · temporal_patch · patch². */
  get patchWidth(): number {
    const v = this.config;
    return v.inChannels * v.temporalPatchSize * v.patchSize * v.patchSize;
  }

  /**
   * Encode packed images: pixelValues [Σ t·h·w, patchWidth] f32 in the processor's patch order,
   * gridThw one (t, h, w) per image; each frame attends within itself. Returns new tensors the
   * caller owns (release them). `rec` is flushed on entry (the per-call tables go in by
   * writeBuffer) and before returning, when the pooled workspaces go back: a later writeBuffer
   * into a recycled buffer cannot overtake these commands. The largest input is bounded by the
   * [N, hidden] workspaces: maxStorageBufferBindingSize / (4·hidden) patches (32,768 for the 2B
   * at 128 MiB); the MLP runs in row chunks and is not the limit.
   */
  encode(rec: Recorder, pixelValues: Tensor, gridThw: readonly GridThw[], lora?: VisionLoraCall): VisionFeatures {
    const op = 'vision_encode';
    const v = this.config;
    const { gpu, weights: w, ops } = this;
    const N = checkGrids(op, gridThw, v.spatialMergeSize);
    if (pixelValues.dtype !== 'f32' || pixelValues.shape.length !== 2 || pixelValues.shape[0] !== N || pixelValues.shape[1] !== this.patchWidth) {
      throw new ShapeError(op, `pixel values must be f32 [${N}, ${this.patchWidth}] for grids ${JSON.stringify(gridThw)}, got ${pixelValues.dtype} [${pixelValues.shape.join(', ')}]`);
    }
    const H = v.hiddenSize;
    const unit = v.spatialMergeSize * v.spatialMergeSize;
    const M = N / unit;

    const ad = lora?.adapters;
    if (ad && (ad.mergers.length !== 1 + w.deepstackMergers.length || ad.blocks.length !== w.blocks.length)) {
      throw new ShapeError(op, `LoRA for ${ad.mergers.length} mergers and ${ad.blocks.length} blocks, the tower has ${1 + w.deepstackMergers.length} and ${w.blocks.length}`);
    }

    rec.flush();
    // One attention sequence per frame (transformers: repeat_interleave(h·w, t).cumsum()).
    const cu = [0];
    for (const [t, h, w_] of gridThw) for (let f = 0; f < t; f++) cu.push(cu[cu.length - 1] + h * w_);
    const cuSeqlens = gpu.upload(cu, [cu.length], 'u32', 'vision cu_seqlens');
    const positions = gpu.upload(visionRopePositions(gridThw, v.spatialMergeSize), [2, N], 'u32', 'vision rope positions');
    const interp = gpu.upload(posEmbedInterpolation(gridThw, this.side, v.spatialMergeSize), [N, 8], 'u32', 'vision pos-embed interpolation');

    const ws = (shape: number[], label: string) => gpu.tensor(shape, 'f32', `vision ${label}`);
    const first = firstAdaptedBlock(ad);
    const keep = lora?.saved;
    const x = ws([N, H], 'hidden');
    const qkv = this.qkvBuffers(N);
    const rMax = first >= 0 ? Math.max(...ad!.blocks.flatMap((b) => Object.values(b).map((p) => p.r))) : 0;
    const att: AttentionBuffers = { xn: ws([N, H], 'normed'), q: qkv.q, k: qkv.k, v: qkv.v, o: ws([N, H], 'attn out'), u: first >= 0 ? { qkv: ws([N, rMax], 'lora u qkv'), proj: ws([N, rMax], 'lora u proj') } : undefined };
    const cs = ws([N, ops.rope.layout.half, 2], 'rope table');
    const I = v.intermediateSize;
    const chunk = this.chunkRows(N, first >= 0);
    const mlpIn = ws([chunk, I], 'fc1 out');
    const mlpAct = ws([chunk, I], 'gelu out');
    const u1 = first >= 0 ? ws([chunk, rMax], 'lora u fc1') : null;
    const u2 = first >= 0 ? ws([chunk, rMax], 'lora u fc2') : null;
    const merge1 = ws([M, unit * H], 'merger a');
    const merge2 = ws([M, unit * H], 'merger b');
    const workspaces = [positions, interp, x, att.xn, qkv.all, att.o, mlpIn, mlpAct, merge1, merge2, ...(att.u ? [att.u.qkv, att.u.proj, u1!, u2!] : [])];
    // The backward of adapted blocks recomputes them: it keeps the tables and each block's input.
    const xs: Tensor[] = [];
    if (keep) {
      keep.mergers = new Array<MergerActivations | null>(1 + w.deepstackMergers.length).fill(null);
      keep.blocks = first >= 0 ? { first, xs, cuSeqlens, cs } : null;
    }
    if (!keep?.blocks) workspaces.push(cuSeqlens, cs);
    const keepX = () => {
      const t = ws([N, H], `block ${first + xs.length} input`);
      rec.copy(x, t);
      xs.push(t);
    };

    ops.projection.dense(rec, pixelValues, w.patchEmbed, x);
    ops.pos.add(rec, w.posEmbed, interp, x);
    ops.rope.table(rec, positions, cs);

    // A merger reading the output of block `after` takes the gradient back into the blocks when an
    // adapted block comes at or before it.
    const merger = (m: PatchMergerWeights, slot: number, after: number, label: string): Tensor => {
      const ma = ad?.mergers[slot];
      const adapted = !!(ma?.fc1 || ma?.fc2);
      const backward = !!keep && (adapted || (first >= 0 && after >= first));
      // Intermediates the backward reads get tensors of their own; the others share the two workspaces.
      const own = (what: string) => gpu.tensor([M, unit * H], 'f32', `vision ${label} ${what}`);
      const u = (p: LoraParams | undefined, what: string) => (p ? gpu.tensor([M, p.r], 'f32', `vision ${label} ${what}`) : null);
      const xn = adapted || backward ? own('normed') : merge1;
      const pre = adapted || backward ? own('fc1 out') : merge2;
      const act = adapted || backward ? own('gelu out') : merge1;
      const mu1 = u(ma?.fc1, 'lora u fc1');
      const mu2 = u(ma?.fc2, 'lora u fc2');
      if (m.postShuffleNorm) ops.norms.layernorm(rec, x.reshape([M, unit * H]), m.norm.w, m.norm.b, xn, LN_EPS);
      else ops.norms.layernorm(rec, x, m.norm.w, m.norm.b, xn.reshape([N, H]), LN_EPS);
      ops.projection.dense(rec, xn, m.fc1, pre);
      if (ma?.fc1) ops.projection.lora.forward(rec, ma.fc1, { x: xn, y: pre, u: mu1! });
      ops.act.geluErf(rec, pre, act);
      const out = gpu.tensor([M, v.outHiddenSize], 'f32', `vision ${label}`);
      ops.projection.dense(rec, act, m.fc2, out);
      if (ma?.fc2) ops.projection.lora.forward(rec, ma.fc2, { x: act, y: out, u: mu2! });
      if (keep) keep.mergers[slot] = backward ? { xn, pre, act, u1: mu1, u2: mu2 } : null;
      else if (adapted) workspaces.push(...[xn, pre, act, mu1, mu2].filter((t): t is Tensor => t !== null));
      return out;
    };

    const deepstack: Tensor[] = [];
    w.blocks.forEach((b, i) => {
      const ba = ad?.blocks[i];
      if (keep?.blocks && i >= first) keepX();
      this.attentionHalf(rec, b, ba, x, att, cs, cuSeqlens);
      ops.norms.layernorm(rec, x, b.norm2.w, b.norm2.b, att.xn, LN_EPS);
      for (let r0 = 0; r0 < N; r0 += chunk) {
        // A short last chunk leaves stale rows in the workspaces; GELU runs over them harmlessly
        // and fc2 reads only the first `m`.
        const m = Math.min(chunk, N - r0);
        this.mlpUp(rec, b, ba, att.xn, r0, m, mlpIn, mlpAct, u1);
        ops.projection.denseRows(rec, mlpAct, 0, b.fc2, x, r0, m, true);
        if (ba?.fc2) ops.projection.lora.forward(rec, ba.fc2, { x: rowsOf(mlpAct, 0, m, I), y: rowsOf(x, r0, m, H), u: rowsOf(u2!, 0, m, ba.fc2.r) });
      }
      // In block order, as transformers appends them (the same as index order when sorted).
      const j = v.deepstackVisualIndexes.indexOf(i);
      if (j >= 0) deepstack.push(merger(w.deepstackMergers[j], 1 + j, i, `deepstack ${j}`));
      // A submit a block: the GPU starts on the first blocks while the later ones are recorded.
      rec.flush();
    });
    if (keep?.blocks) keepX();
    const embeds = merger(w.merger, 0, w.blocks.length - 1, 'image embeds');

    rec.flush();
    for (const t of workspaces) t.release();
    return { embeds, deepstack };
  }

  /**
   * Features of each image, in order, through `cache`: images it holds are not encoded again; the
   * others are encoded together in one packed pass and stored. The returned tensors belong to the
   * cache; they stay valid at least until the next call on it (entries of the current call are
   * never evicted by it, even when they alone exceed the budget).
   */
  async encodeImages(rec: Recorder, images: readonly PreparedImage[], cache: VisionCache): Promise<VisionFeatures[]> {
    const misses = new Map<string, PreparedImage>();
    for (const img of images) if (!cache.has(img.key) && !misses.has(img.key)) misses.set(img.key, img);
    if (misses.size > 0) {
      const list = [...misses.values()];
      const all = await this.encodePacked(rec, list);
      if (list.length === 1) cache.put(list[0].key, all);
      else this.splitInto(rec, cache, list, all);
    }
    const keys = new Set(images.map((img) => img.key));
    const out = images.map((img) => cache.get(img.key)!);
    cache.evict(keys);
    return out;
  }

  /**
   * Encode `images` together in one pass, in order (repeats included), with `lora` when given:
   * the outputs' rows are the images' features back to back, new tensors the caller owns.
   */
  async encodePacked(rec: Recorder, images: readonly PreparedImage[], lora?: VisionLoraCall): Promise<VisionFeatures> {
    const grids = images.map((img) => img.gridThw);
    const total = checkGrids('vision_encode', grids, this.config.spatialMergeSize);
    const width = this.patchWidth;
    for (const img of images) {
      const patches = img.gridThw[0] * img.gridThw[1] * img.gridThw[2];
      if (img.pixelValues.length !== patches * width) {
        throw new ShapeError('vision_encode', `image '${img.key}' has ${img.pixelValues.length} pixel values, its grid ${JSON.stringify(img.gridThw)} needs ${patches * width}`);
      }
    }
    // One image goes up as it is; several are packed first. Megabytes of pixels go through a
    // reused write-mapped buffer (Gpu.uploadMapped), cheaper on the host than a queue write.
    let packed = images[0].pixelValues;
    if (images.length > 1) {
      packed = new Float32Array(total * width);
      let row = 0;
      for (const img of images) {
        packed.set(img.pixelValues, row * width);
        row += img.gridThw[0] * img.gridThw[1] * img.gridThw[2];
      }
    }
    rec.flush();
    const pixels = await this.gpu.uploadMapped(packed, [total, width], 'f32', 'vision pixel values');
    const all = this.encode(rec, pixels, grids, lora); // flushed: the pixels can go back at once
    pixels.release();
    return all;
  }

  /**
   * The backward of the vision adapters: from the gradients of the mergers' outputs (`grads[0]` of
   * the image embeds, `grads[1 + j]` of DeepStack features j, each [merged rows, out_hidden]) into
   * the adapters' dA and dB (accumulated), through what encode kept (`saved`). With adapted
   * blocks, each merger's LayerNorm passes its gradient into the output of the block it reads,
   * and the blocks from the last down to the lowest adapted one are recomputed from their inputs
   * and walked back (the LoRA on fused qkv as three adapters sharing A: splitQkvLora).
   */
  backward(rec: Recorder, adapters: VisionLora, saved: VisionSaved, grads: readonly Tensor[]): void {
    const op = 'vision_lora_backward';
    const v = this.config;
    const w = this.weights;
    const mergers = [w.merger, ...w.deepstackMergers];
    if (adapters.mergers.length !== mergers.length || saved.mergers.length !== mergers.length || grads.length !== mergers.length) {
      throw new ShapeError(op, `${adapters.mergers.length} adapters, ${saved.mergers.length} saved and ${grads.length} gradients for ${mergers.length} mergers`);
    }
    const { projection, act } = this.ops;
    const lora = projection.lora;
    const temps: Tensor[] = [];
    const f = (shape: number[], label: string) => {
      const t = this.gpu.tensor(shape, 'f32', `vision backward ${label}`);
      temps.push(t);
      return t;
    };
    const blocks = saved.blocks;
    // The block each merger reads the output of.
    const after = mergers.map((_, slot) => (slot === 0 ? w.blocks.length - 1 : v.deepstackVisualIndexes[slot - 1]));
    // Gradients of the mergers' LayerNorm outputs, for the blocks' backward.
    const dNormed: (Tensor | null)[] = mergers.map(() => null);
    mergers.forEach((m, slot) => {
      const a = saved.mergers[slot];
      if (!a) return;
      const ad = adapters.mergers[slot];
      const dOut = grads[slot];
      const [M, width] = a.xn.shape;
      if (dOut.shape[0] !== M || dOut.shape[1] !== m.fc2.out) throw new ShapeError(op, `merger ${slot}: gradient [${dOut.shape.join(', ')}], its output is [${M}, ${m.fc2.out}]`);
      const toBlocks = !!blocks && after[slot] >= blocks.first;
      const dAct = ad.fc1 || toBlocks ? f([M, width], `merger ${slot} d gelu out`) : undefined;
      if (dAct) projection.backwardInput(rec, dOut, m.fc2, dAct);
      if (ad.fc2) lora.backward(rec, ad.fc2, { x: a.act, dy: dOut, u: a.u2!, t: f([M, ad.fc2.r], `merger ${slot} lora t fc2`), dx: dAct });
      if (!dAct) return;
      const dPre = f([M, width], `merger ${slot} d fc1 out`);
      act.geluErfBackward(rec, a.pre, dAct, dPre);
      const dxn = toBlocks ? f([M, width], `merger ${slot} d normed`) : undefined;
      if (dxn) projection.backwardInput(rec, dPre, m.fc1, dxn);
      if (ad.fc1) lora.backward(rec, ad.fc1, { x: a.xn, dy: dPre, u: a.u1!, t: f([M, ad.fc1.r], `merger ${slot} lora t fc1`), dx: dxn });
      dNormed[slot] = dxn ?? null;
    });
    if (blocks) this.blocksBackward(rec, adapters, blocks, mergers, after, dNormed, f);
    rec.flush();
    for (const t of temps) t.release();
  }

  /** The blocks' part of backward: dX, the gradient of the residual stream, from the last block's output down to the lowest adapted block's input. */
  private blocksBackward(
    rec: Recorder,
    adapters: VisionLora,
    saved: NonNullable<VisionSaved['blocks']>,
    mergers: PatchMergerWeights[],
    after: number[],
    dNormed: (Tensor | null)[],
    f: (shape: number[], label: string) => Tensor,
  ): void {
    const v = this.config;
    const { projection, act, norms, attn, rope } = this.ops;
    const lora = projection.lora;
    const { first, xs, cuSeqlens, cs } = saved;
    const [N, H] = xs[0].shape;
    const I = v.intermediateSize;
    const heads = v.numHeads;
    const unit = v.spatialMergeSize ** 2;
    const rMax = Math.max(...adapters.blocks.flatMap((b) => Object.values(b).map((p) => p.r)));
    const chunk = this.chunkRows(N, true);
    const qkv = this.qkvBuffers(N);
    const dqkv = this.qkvBuffers(N);
    const a: AttentionBuffers = { xn: f([N, H], 'xn1'), q: qkv.q, k: qkv.k, v: qkv.v, o: f([N, H], 'attn out'), lse: f([N, heads], 'lse'), u: { qkv: f([N, rMax], 'u qkv'), proj: f([N, rMax], 'u proj') } };
    const bufs = {
      dX: f([N, H], 'dx'),
      xmid: f([N, H], 'x mid'),
      xn2: f([N, H], 'xn2'),
      dxn: f([N, H], 'dxn'),
      dO: f([N, H], 'd attn out'),
      rowStats: f([...Attention.rowStatsShape(N, heads)], 'row stats'),
      mlpIn: f([chunk, I], 'fc1 out'),
      mlpAct: f([chunk, I], 'gelu out'),
      dAct: f([chunk, I], 'd gelu out'),
      dIn: f([chunk, I], 'd fc1 out'),
      u1: f([chunk, rMax], 'u fc1'),
      u2: f([chunk, rMax], 'u fc2'),
      t: f([N, rMax], 'lora t'),
    };
    const t = (rows: number, r: number) => rowsOf(bufs.t, 0, rows, r);
    rec.clear(bufs.dX);
    // Merger `slot`'s LayerNorm backward into dX, from the output of the block it reads (xs[after + 1 - first]).
    const intoStream = (slot: number) => {
      const dxn = dNormed[slot];
      if (!dxn) return;
      const m = mergers[slot];
      const x = xs[after[slot] + 1 - first];
      if (m.postShuffleNorm) norms.layernormBackward(rec, dxn, x.reshape([N / unit, unit * H]), m.norm.w, bufs.dX.reshape([N / unit, unit * H]), LN_EPS, true);
      else norms.layernormBackward(rec, dxn.reshape([N, H]), x, m.norm.w, bufs.dX, LN_EPS, true);
    };
    for (let i = this.weights.blocks.length - 1; i >= first; i--) {
      const b = this.weights.blocks[i];
      const ad = adapters.blocks[i];
      mergers.forEach((_, slot) => after[slot] === i && intoStream(slot));
      // Recompute the block from its input: attention half (x_mid), then the MLP chunk by chunk.
      rec.copy(xs[i - first], bufs.xmid);
      this.attentionHalf(rec, b, ad, bufs.xmid, a, cs, cuSeqlens);
      norms.layernorm(rec, bufs.xmid, b.norm2.w, b.norm2.b, bufs.xn2, LN_EPS);
      for (let r0 = 0; r0 < N; r0 += chunk) {
        const m = Math.min(chunk, N - r0);
        const dX = rowsOf(bufs.dX, r0, m, H);
        const mlpAct = rowsOf(bufs.mlpAct, 0, m, I);
        const dAct = rowsOf(bufs.dAct, 0, m, I);
        const dIn = rowsOf(bufs.dIn, 0, m, I);
        this.mlpUp(rec, b, ad, bufs.xn2, r0, m, bufs.mlpIn, bufs.mlpAct, bufs.u1);
        projection.backwardInput(rec, dX, b.fc2, dAct);
        if (ad.fc2) {
          const u2 = rowsOf(bufs.u2, 0, m, ad.fc2.r);
          lora.down(rec, ad.fc2, mlpAct, u2);
          lora.backward(rec, ad.fc2, { x: mlpAct, dy: dX, u: u2, t: t(m, ad.fc2.r), dx: dAct });
        }
        act.geluTanhBackward(rec, rowsOf(bufs.mlpIn, 0, m, I), dAct, dIn);
        projection.backwardInput(rec, dIn, b.fc1, rowsOf(bufs.dxn, r0, m, H));
        if (ad.fc1) lora.backward(rec, ad.fc1, { x: rowsOf(bufs.xn2, r0, m, H), dy: dIn, u: rowsOf(bufs.u1, 0, m, ad.fc1.r), t: t(m, ad.fc1.r), dx: rowsOf(bufs.dxn, r0, m, H) });
      }
      norms.layernormBackward(rec, bufs.dxn, bufs.xmid, b.norm2.w, bufs.dX, LN_EPS, true); // dX: the gradient of x_mid
      projection.backwardInput(rec, bufs.dX, b.proj, bufs.dO);
      if (ad.proj) lora.backward(rec, ad.proj, { x: a.o, dy: bufs.dX, u: rowsOf(a.u!.proj, 0, N, ad.proj.r), t: t(N, ad.proj.r), dx: bufs.dO });
      attn.backward(rec, { q: a.q, k: a.k, v: a.v, o: a.o, lse: a.lse!, dout: bufs.dO, cuSeqlens, causal: false, scale: 1 / Math.sqrt(H / heads), rowStats: bufs.rowStats, dq: dqkv.q, dk: dqkv.k, dv: dqkv.v });
      rope.applyBackward(rec, cs, dqkv.q, heads);
      rope.applyBackward(rec, cs, dqkv.k, heads);
      projection.backwardInput(rec, dqkv.q, b.q, bufs.dxn);
      projection.backwardInput(rec, dqkv.k, b.k, bufs.dxn, true);
      projection.backwardInput(rec, dqkv.v, b.v, bufs.dxn, true);
      if (ad.qkv) {
        const r = ad.qkv.r;
        splitQkvLora(ad.qkv, H).forEach((p, j) => lora.backward(rec, p, { x: a.xn, dy: [dqkv.q, dqkv.k, dqkv.v][j], u: rowsOf(a.u!.qkv, 0, N, r), t: t(N, r), dx: bufs.dxn }));
      }
      norms.layernormBackward(rec, bufs.dxn, xs[i - first], b.norm1.w, bufs.dX, LN_EPS, true); // dX: the gradient of the block's input
      rec.flush();
    }
    rec.flush();
    for (const x of [qkv.all, dqkv.all]) x.release();
  }

  /** Store the packed outputs of `list` per image (each image's rows are contiguous), then release them. */
  private splitInto(rec: Recorder, cache: VisionCache, list: PreparedImage[], all: VisionFeatures): void {
    const out = this.config.outHiddenSize;
    const unit = this.config.spatialMergeSize ** 2;
    let first = 0;
    for (const img of list) {
      const rows = (img.gridThw[0] * img.gridThw[1] * img.gridThw[2]) / unit;
      const slice = (src: Tensor, label: string) => {
        const t = this.gpu.tensor([rows, out], 'f32', `vision ${label} '${img.key}'`);
        rec.copy(src, t, 4 * rows * out, 4 * first * out);
        return t;
      };
      cache.put(img.key, { embeds: slice(all.embeds, 'embeds'), deepstack: all.deepstack.map((d, j) => slice(d, `deepstack ${j}`)) });
      first += rows;
    }
    rec.flush();
    for (const t of [all.embeds, ...all.deepstack]) t.release();
  }

  /** Give back the tensors the tower made (not the weights: releaseVisionWeights does that). */
  release(): void {
    this.ops.rope.release();
    this.ops.projection.release();
  }
}

/** Σ t·h·w of the grids, after checking each is positive and a multiple of the merge size. */
function checkGrids(op: string, gridThw: readonly GridThw[], merge: number): number {
  if (gridThw.length === 0) throw new ShapeError(op, 'no images');
  let n = 0;
  for (const g of gridThw) {
    const [t, h, w] = g;
    if (g.length !== 3 || ![t, h, w].every((d) => Number.isInteger(d) && d > 0) || h % merge || w % merge) {
      throw new ShapeError(op, `grid (t, h, w) = ${JSON.stringify(g)} must be positive integers with h and w multiples of ${merge}`);
    }
    n += t * h * w;
  }
  return n;
}

function checkVisionWeights(v: Qwen3VLVisionConfig, w: VisionWeights): void {
  const op = 'vision_tower';
  const H = v.hiddenSize;
  const merged = H * v.spatialMergeSize * v.spatialMergeSize;
  if (!Number.isInteger(H / v.numHeads)) throw new ShapeError(op, `hidden ${H} is not a multiple of ${v.numHeads} heads`);
  const mat = (what: string, t: Tensor, rows: number, cols: number, dtypes: readonly DType[] = ['f32']) => {
    if (!dtypes.includes(t.dtype) || t.numel !== rows * cols) throw new ShapeError(op, `${what} must be ${dtypes.join(' or ')} [${rows}, ${cols}], got ${t.dtype} [${t.shape.join(', ')}]`);
  };
  const dense = (what: string, d: DenseWeight, out: number, inF: number, bias: boolean) => {
    if (d.kind === 'dense') mat(`${what}.weight`, d.w, out, inF, DENSE_DTYPES);
    else if (d.w.n !== out || d.w.k !== inF) throw new ShapeError(op, `${what}.weight must be [${out}, ${inF}], got 4-bit [${d.w.n}, ${d.w.k}]`);
    if (bias) {
      if (!d.b) throw new ShapeError(op, `${what} needs a bias`);
      mat(`${what}.bias`, d.b, 1, out);
    }
  };
  const norm = (what: string, n: NormWeight, width: number) => {
    mat(`${what}.weight`, n.w, 1, width);
    mat(`${what}.bias`, n.b, 1, width);
  };
  dense('patch_embed', w.patchEmbed, H, v.inChannels * v.temporalPatchSize * v.patchSize * v.patchSize, true);
  mat('pos_embed', w.posEmbed, v.numPositionEmbeddings, H);
  if (w.posEmbed.shape.length !== 2) throw new ShapeError(op, `pos_embed must be 2-D, got [${w.posEmbed.shape.join(', ')}]`);
  if (w.blocks.length !== v.depth) throw new ShapeError(op, `${w.blocks.length} blocks, config depth is ${v.depth}`);
  w.blocks.forEach((b, i) => {
    const p = `blocks.${i}`;
    norm(`${p}.norm1`, b.norm1, H);
    norm(`${p}.norm2`, b.norm2, H);
    dense(`${p}.attn.q`, b.q, H, H, true);
    dense(`${p}.attn.k`, b.k, H, H, true);
    dense(`${p}.attn.v`, b.v, H, H, true);
    dense(`${p}.attn.proj`, b.proj, H, H, true);
    dense(`${p}.mlp.linear_fc1`, b.fc1, v.intermediateSize, H, true);
    dense(`${p}.mlp.linear_fc2`, b.fc2, H, v.intermediateSize, true);
  });
  const merger = (what: string, m: PatchMergerWeights, postShuffle: boolean) => {
    if (m.postShuffleNorm !== postShuffle) throw new ShapeError(op, `${what} must${postShuffle ? '' : ' not'} use the post-shuffle norm`);
    norm(`${what}.norm`, m.norm, postShuffle ? merged : H);
    dense(`${what}.linear_fc1`, m.fc1, merged, merged, true);
    dense(`${what}.linear_fc2`, m.fc2, v.outHiddenSize, merged, true);
  };
  merger('merger', w.merger, false);
  if (w.deepstackMergers.length !== v.deepstackVisualIndexes.length) {
    throw new ShapeError(op, `${w.deepstackMergers.length} DeepStack mergers, config lists ${v.deepstackVisualIndexes.length} indexes`);
  }
  v.deepstackVisualIndexes.forEach((idx, j) => {
    if (!Number.isInteger(idx) || idx < 0 || idx >= v.depth) throw new ShapeError(op, `deepstack_visual_indexes[${j}] = ${idx} is not a block index below ${v.depth}`);
    merger(`deepstack_merger_list.${j}`, w.deepstackMergers[j], true);
  });
}

/**
 * Read the vision tower's tensors (model.visual.*, or the older visual.* names) from a checkpoint
 * onto the GPU, checking every shape against config.json. One pass over those tensors in file
 * order; only one tensor's bytes are held on the CPU at a time. The Conv3d patch weight
 * [hidden, C, Tp, P, P] becomes the dense [hidden, C·Tp·P·P] it is, unpermuted. With quant 'q4'
 * the dense matrices whose K is a multiple of 32 are quantized on the GPU from the raw bytes
 * (as src/model/loader.ts does the decoder's). Every other dense matrix (all of them under 'none',
 * the default) keeps a bf16 or f16 checkpoint's halves as they are; the rest is f32.
 */
export async function loadVisionWeights(
  gpu: Gpu,
  checkpoint: Checkpoint,
  config: Qwen3VLConfig,
  opts: { quant?: 'q4' | 'none'; signal?: AbortSignal; onProgress?: (p: Progress) => void } = {},
): Promise<VisionWeights> {
  const prefix = 'model.visual.';
  const shapes = expectedWeights(config);
  const expected = [...shapes.keys()].filter((n) => n.startsWith(prefix));
  const byCanonical = new Map<string, string>();
  for (const name of checkpoint.tensors.keys()) {
    const c = canonicalWeightName(name);
    if (c.startsWith(prefix)) byCanonical.set(c, name);
  }
  const missing = expected.filter((n) => !byCanonical.has(n));
  if (missing.length > 0) {
    throw new WeightShapeError(`checkpoint lacks ${missing.length} vision tensor(s): ${missing.slice(0, 3).join(', ')}${missing.length > 3 ? ` and ${missing.length - 3} more` : ''}`);
  }
  for (const [c, name] of byCanonical) checkTensorShape(config, name, checkpoint.tensors.get(name)!.shape, shapes.get(c) ?? null);

  const quantizer = opts.quant === 'q4' ? await QuantizeQ4.create(gpu) : null;
  const rec = gpu.recorder('load vision weights');
  const matrix = (bytes: Uint8Array, dtype: SafetensorsDtype, out: number, inF: number, label: string): LinearWeight => {
    if (!quantizer || inF % Q4_GROUP !== 0) {
      // A checkpoint's halves stay as they are (the GEMM widens them exactly): half of f32's bytes.
      const halves = dtype === 'BF16' ? 'bf16' : dtype === 'F16' ? 'f16' : null;
      const w = halves ? gpu.upload(bytes, [out, inF], halves, label) : gpu.upload(toFloat32(bytes, dtype), [out, inF], 'f32', label);
      return { kind: 'dense', w, out, in: inF };
    }
    const w = allocQ4(gpu, out, inF, label);
    const src = gpu.upload(bytes, [bytes.byteLength / 4], 'u32', `${label} (raw)`);
    quantizer.quantize(rec, src, sourceFormat(label, dtype), w);
    rec.flush();
    src.release(); // queue order: a later write into this buffer lands after the quantization
    return { kind: 'q4', w, out, in: inF };
  };
  const vectors = new Map<string, Tensor>();
  const matrices = new Map<string, LinearWeight>();
  const qkv = /\.attn\.qkv\.(weight|bias)$/;
  const release = () => {
    for (const t of vectors.values()) t.release();
    for (const m of matrices.values()) releaseMatrix(m);
  };
  const names = new Set(expected.map((c) => byCanonical.get(c)!));
  try {
    for await (const { tensor, bytes } of checkpoint.stream({ names, signal: opts.signal, onProgress: opts.onProgress })) {
      const c = canonicalWeightName(tensor.name);
      const [out, ...rest] = tensor.shape;
      const inF = rest.reduce((a, b) => a * b, 1);
      const split = qkv.exec(c);
      if (split) {
        // Rows [0, H), [H, 2H), [2H, 3H) of the fused weight (and bias) are q, k and v.
        const part = bytes.byteLength / 3;
        ['q', 'k', 'v'].forEach((p, i) => {
          const name = c.replace(qkv, `.attn.${p}.${split[1]}`);
          const b = bytes.subarray(i * part, (i + 1) * part);
          if (split[1] === 'bias') vectors.set(name, gpu.upload(toFloat32(b, tensor.dtype), [out / 3], 'f32', name));
          else matrices.set(name, matrix(b, tensor.dtype, out / 3, inF, name));
        });
      } else if (tensor.shape.length >= 2 && c !== `${prefix}pos_embed.weight`) matrices.set(c, matrix(bytes, tensor.dtype, out, inF, c));
      else vectors.set(c, gpu.upload(toFloat32(bytes, tensor.dtype), tensor.shape, 'f32', c));
    }
    await rec.submit();
  } catch (e) {
    release();
    throw e;
  }
  const get = (name: string) => vectors.get(`${prefix}${name}`)!;
  const dense = (p: string): DenseWeight => ({ ...matrices.get(`${prefix}${p}.weight`)!, b: get(`${p}.bias`) });
  const norm = (p: string): NormWeight => ({ w: get(`${p}.weight`), b: get(`${p}.bias`) });
  const merger = (p: string, postShuffleNorm: boolean): PatchMergerWeights => ({
    norm: norm(`${p}.norm`),
    postShuffleNorm,
    fc1: dense(`${p}.linear_fc1`),
    fc2: dense(`${p}.linear_fc2`),
  });
  const v = config.vision;
  return {
    patchEmbed: dense('patch_embed.proj'),
    posEmbed: get('pos_embed.weight'),
    blocks: Array.from({ length: v.depth }, (_, i) => ({
      norm1: norm(`blocks.${i}.norm1`),
      norm2: norm(`blocks.${i}.norm2`),
      q: dense(`blocks.${i}.attn.q`),
      k: dense(`blocks.${i}.attn.k`),
      v: dense(`blocks.${i}.attn.v`),
      proj: dense(`blocks.${i}.attn.proj`),
      fc1: dense(`blocks.${i}.mlp.linear_fc1`),
      fc2: dense(`blocks.${i}.mlp.linear_fc2`),
    })),
    merger: merger('merger', false),
    deepstackMergers: v.deepstackVisualIndexes.map((_, j) => merger(`deepstack_merger_list.${j}`, true)),
  };
}

function releaseMatrix(m: LinearWeight): void {
  if (m.kind === 'q4') for (const t of [m.w.codes, m.w.scales]) t.release();
  else m.w.release();
}

/** Give every tensor of the vision weights back to the pool. */
export function releaseVisionWeights(w: VisionWeights): void {
  const dense = (d: DenseWeight) => {
    releaseMatrix(d);
    d.b?.release();
  };
  const norm = (n: NormWeight) => [n.w, n.b].forEach((t) => t.release());
  const merger = (m: PatchMergerWeights) => {
    norm(m.norm);
    dense(m.fc1);
    dense(m.fc2);
  };
  dense(w.patchEmbed);
  w.posEmbed.release();
  for (const b of w.blocks) {
    norm(b.norm1);
    norm(b.norm2);
    // Joined q/k/v: the parts' weights are views (their release does nothing); the joined tensors go.
    Projection.releaseJoined([b.q]);
    for (const d of [b.q, b.k, b.v, b.proj, b.fc1, b.fc2]) dense(d);
  }
  merger(w.merger);
  w.deepstackMergers.forEach(merger);
}

/**
 * Encoded images by key (PreparedImage.key), least recently used first out once the tensors
 * held exceed `byteBudget`. Evicted tensors go back to the GPU pool.
 */
export class VisionCache {
  private readonly entries = new Map<string, VisionFeatures>();
  private held = 0;

  constructor(readonly byteBudget: number) {
    if (!(byteBudget >= 0)) throw new RangeError(`VisionCache: byte budget must be ≥ 0, got ${byteBudget}`);
  }

  /** Bytes of GPU tensors held now. */
  get bytes(): number {
    return this.held;
  }

  get size(): number {
    return this.entries.size;
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** The features for `key`, marked most recently used; undefined when absent. */
  get(key: string): VisionFeatures | undefined {
    const e = this.entries.get(key);
    if (e) {
      this.entries.delete(key);
      this.entries.set(key, e);
    }
    return e;
  }

  /** Store (replacing and releasing an older entry under the same key); evicts nothing. */
  put(key: string, features: VisionFeatures): void {
    this.drop(key);
    this.entries.set(key, features);
    this.held += featureBytes(features);
  }

  /** Release least recently used entries, except those in `keep`, until within the budget. */
  evict(keep: ReadonlySet<string> = new Set()): void {
    for (const key of [...this.entries.keys()]) {
      if (this.held <= this.byteBudget) return;
      if (!keep.has(key)) this.drop(key);
    }
  }

  clear(): void {
    for (const key of [...this.entries.keys()]) this.drop(key);
  }

  private drop(key: string): void {
    const e = this.entries.get(key);
    if (!e) return;
    this.entries.delete(key);
    this.held -= featureBytes(e);
    for (const t of [e.embeds, ...e.deepstack]) t.release();
  }
}

function featureBytes(f: VisionFeatures): number {
  return [f.embeds, ...f.deepstack].reduce((s, t) => s + t.byteSize, 0);
}
