// Qwen3-VL's vision tower on the GPU, as transformers' Qwen3VLVisionModel: frozen, but for
// optional LoRA on the mergers' linear_fc1/linear_fc2 (VisionLora), whose backward is here too:
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
// Weights: f32 by default. loadVisionWeights' quant 'q4' makes the dense matrices 4-bit
// (src/ops/matmulQ4.ts, groups of 32 along K) where K is a multiple of 32 (all of them in the 2B:
// K = 1536, 1024, 4096; 1.5 GiB of f32 become 0.2 GiB); biases, norms and the position table stay
// f32. It is not the model loader's default: on the tiny fixtures it moves the features by 15-17%
// relative RMS (test/unit/model-vision.test.ts). The fused attn.qkv is split into q, k and v at load;
// with f32 weights the product backend joins them again (Projection.joinDense) for one batched GEMM.
//
// LoRA on a merger: fc1 and fc2 each get y += s·x·Aᵀ·Bᵀ (src/ops/lora.ts). Its backward starts
// from the gradient of the merger's output (the decoder's at the image rows for the final merger,
// at the rows of its DeepStack add for the others) and walks back through fc2, the erf-GELU and
// fc1; nothing flows into the blocks (they are frozen and have no adapters), so the LayerNorm's
// output is all the forward keeps besides the GELU's input and output and the adapters' u.
// Features with LoRA depend on the adapter: they are encoded per forward, not cached.
//
// Also here: loadVisionWeights (checkpoint → VisionWeights on the GPU) and VisionCache, the
// per-image LRU of encoded features (without LoRA) the trainer reuses across the samples and
// iterations of a step.
import { ShapeError, Tensor, type Gpu, type Recorder } from '../gpu';
import { Activations } from '../ops/activations';
import type { LoraParams } from '../ops/lora';
import { Attention } from '../ops/attention';
import { allocQ4, Q4_GROUP } from '../ops/matmulQ4';
import type { MatmulQ4Mma } from '../ops/matmulQ4Mma';
import { Norms } from '../ops/norms';
import { Projection } from '../ops/projection';
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

/** The tower's adapters by merger: [0] the final merger, [1 + j] DeepStack merger j. */
export type VisionLora = readonly MergerLora[];

/** PEFT's module path of merger `m` (VisionLora's index)'s linear_fc1 or linear_fc2. */
export function visionLoraModuleName(m: number, fc: 1 | 2): string {
  return m === 0 ? `model.visual.merger.linear_fc${fc}` : `model.visual.deepstack_merger_list.${m - 1}.linear_fc${fc}`;
}

/** What one adapted merger's backward reads: [merged rows, unit·hidden] each, and the adapters' u [rows, r]. */
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

/** A forward with LoRA on the mergers; `saved` (when given) receives each merger's activations (null: no adapter), for backwardMergers. */
export interface VisionLoraCall {
  adapters: VisionLora;
  saved?: (MergerActivations | null)[];
}

export function releaseMergerActivations(saved: readonly (MergerActivations | null)[]): void {
  for (const a of saved) if (a) for (const t of [a.xn, a.pre, a.act, a.u1, a.u2]) t?.release();
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
   * Run the tower's f32 dense products (all but the patch embedding) on int8 tensor cores through
   * `mma` (K-blocked, steps by block; the caller owns it), or, with null, on the f32 GEMM again
   * (Projection.useTensorCores rounds each weight to int8 once).
   */
  async useTensorCores(mma: MatmulQ4Mma | null): Promise<void> {
    const w = this.weights;
    const dense = [...w.blocks.flatMap((b) => [b.q, b.k, b.v, b.proj, b.fc1, b.fc2]), ...[w.merger, ...w.deepstackMergers].flatMap((m) => [m.fc1, m.fc2])];
    await this.ops.projection.useTensorCores(mma, dense);
  }

  /** Whether the dense products run on the tensor cores (useTensorCores). */
  get usesTensorCores(): boolean {
    return this.ops.projection.usesTensorCores;
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
    const heads = v.numHeads;
    const unit = v.spatialMergeSize * v.spatialMergeSize;
    const M = N / unit;

    rec.flush();
    // One attention sequence per frame (transformers: repeat_interleave(h·w, t).cumsum()).
    const cu = [0];
    for (const [t, h, w_] of gridThw) for (let f = 0; f < t; f++) cu.push(cu[cu.length - 1] + h * w_);
    const cuSeqlens = gpu.upload(cu, [cu.length], 'u32', 'vision cu_seqlens');
    const positions = gpu.upload(visionRopePositions(gridThw, v.spatialMergeSize), [2, N], 'u32', 'vision rope positions');
    const interp = gpu.upload(posEmbedInterpolation(gridThw, this.side, v.spatialMergeSize), [N, 8], 'u32', 'vision pos-embed interpolation');

    const ws = (shape: number[], label: string) => gpu.tensor(shape, 'f32', `vision ${label}`);
    const x = ws([N, H], 'hidden');
    const xn = ws([N, H], 'normed');
    // q, k and v back to back (the batched GEMM's C), each starting on the storage offset alignment.
    const qkvStride = Math.ceil((N * H * 4) / gpu.limits.minStorageBufferOffsetAlignment) * (gpu.limits.minStorageBufferOffsetAlignment / 4);
    const qkv = ws([3 * qkvStride], 'q, k, v');
    const [q, k, vv] = [0, 1, 2].map((i) => new Tensor(qkv.buffer, [N, H], 'f32', qkv.label, qkv.byteOffset + 4 * i * qkvStride));
    const o = ws([N, H], 'attn out');
    const cs = ws([N, ops.rope.layout.half, 2], 'rope table');
    const I = v.intermediateSize;
    const chunk = Math.min(N, this.mlpChunkRows);
    const mlpIn = ws([chunk, I], 'fc1 out');
    const mlpAct = ws([chunk, I], 'gelu out');
    const merge1 = ws([M, unit * H], 'merger a');
    const merge2 = ws([M, unit * H], 'merger b');
    const workspaces = [cuSeqlens, positions, interp, x, xn, qkv, o, cs, mlpIn, mlpAct, merge1, merge2];

    ops.projection.dense(rec, pixelValues, w.patchEmbed, x);
    ops.pos.add(rec, w.posEmbed, interp, x);
    ops.rope.table(rec, positions, cs);

    if (lora && lora.adapters.length !== 1 + w.deepstackMergers.length) throw new ShapeError(op, `LoRA for ${lora.adapters.length} mergers, the tower has ${1 + w.deepstackMergers.length}`);
    const merger = (m: PatchMergerWeights, slot: number, label: string): Tensor => {
      const ad = lora?.adapters[slot];
      const adapted = !!(ad?.fc1 || ad?.fc2);
      // With adapters, the merger's intermediates get tensors of their own (kept for the backward
      // when asked); without, they share the two workspaces.
      const own = (what: string) => gpu.tensor([M, unit * H], 'f32', `vision ${label} ${what}`);
      const u = (p: LoraParams | undefined, what: string) => (p ? gpu.tensor([M, p.r], 'f32', `vision ${label} ${what}`) : null);
      const xn = adapted ? own('normed') : merge1;
      const pre = adapted ? own('fc1 out') : merge2;
      const act = adapted ? own('gelu out') : merge1;
      const u1 = u(ad?.fc1, 'lora u fc1');
      const u2 = u(ad?.fc2, 'lora u fc2');
      if (m.postShuffleNorm) ops.norms.layernorm(rec, x.reshape([M, unit * H]), m.norm.w, m.norm.b, xn, LN_EPS);
      else ops.norms.layernorm(rec, x, m.norm.w, m.norm.b, xn.reshape([N, H]), LN_EPS);
      ops.projection.dense(rec, xn, m.fc1, pre);
      if (ad?.fc1) ops.projection.lora.forward(rec, ad.fc1, { x: xn, y: pre, u: u1! });
      ops.act.geluErf(rec, pre, act);
      const out = gpu.tensor([M, v.outHiddenSize], 'f32', `vision ${label}`);
      ops.projection.dense(rec, act, m.fc2, out);
      if (ad?.fc2) ops.projection.lora.forward(rec, ad.fc2, { x: act, y: out, u: u2! });
      if (lora?.saved) lora.saved[slot] = adapted ? { xn, pre, act, u1, u2 } : null;
      else if (adapted) workspaces.push(...[xn, pre, act, u1, u2].filter((t): t is Tensor => t !== null));
      return out;
    };

    const deepstack: Tensor[] = [];
    w.blocks.forEach((b, i) => {
      ops.norms.layernorm(rec, x, b.norm1.w, b.norm1.b, xn, LN_EPS);
      ops.projection.denseShared(rec, xn, [{ d: b.q, y: q }, { d: b.k, y: k }, { d: b.v, y: vv }]);
      ops.rope.apply(rec, cs, q, heads);
      ops.rope.apply(rec, cs, k, heads);
      ops.attn.forward(rec, { q, k, v: vv, o, cuSeqlens, causal: false, scale: 1 / Math.sqrt(H / heads) });
      ops.projection.dense(rec, o, b.proj, x, true);
      ops.norms.layernorm(rec, x, b.norm2.w, b.norm2.b, xn, LN_EPS);
      for (let r0 = 0; r0 < N; r0 += chunk) {
        // A short last chunk leaves stale rows in the workspaces; GELU runs over them harmlessly
        // and fc2 reads only the first `m`.
        const m = Math.min(chunk, N - r0);
        ops.projection.denseRows(rec, xn, r0, b.fc1, mlpIn, 0, m, false);
        ops.act.geluTanh(rec, mlpIn, mlpAct);
        ops.projection.denseRows(rec, mlpAct, 0, b.fc2, x, r0, m, true);
      }
      // In block order, as transformers appends them (the same as index order when sorted).
      const j = v.deepstackVisualIndexes.indexOf(i);
      if (j >= 0) deepstack.push(merger(w.deepstackMergers[j], 1 + j, `deepstack ${j}`));
      // A submit a block: the GPU starts on the first blocks while the later ones are recorded.
      rec.flush();
    });
    const embeds = merger(w.merger, 0, 'image embeds');

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
   * The backward of the adapted mergers: from the gradients of their outputs (`grads[0]` of the
   * image embeds, `grads[1 + j]` of DeepStack features j, each [merged rows, out_hidden]) into
   * the adapters' dA and dB (accumulated), through the activations encode kept (`saved`).
   */
  backwardMergers(rec: Recorder, adapters: VisionLora, saved: readonly (MergerActivations | null)[], grads: readonly Tensor[]): void {
    const op = 'vision_merger_backward';
    const w = this.weights;
    const mergers = [w.merger, ...w.deepstackMergers];
    if (adapters.length !== mergers.length || saved.length !== mergers.length || grads.length !== mergers.length) {
      throw new ShapeError(op, `${adapters.length} adapters, ${saved.length} saved and ${grads.length} gradients for ${mergers.length} mergers`);
    }
    const { projection, act } = this.ops;
    const temps: Tensor[] = [];
    const f = (shape: number[], label: string) => {
      const t = this.gpu.tensor(shape, 'f32', `vision backward ${label}`);
      temps.push(t);
      return t;
    };
    mergers.forEach((m, slot) => {
      const a = saved[slot];
      const ad = adapters[slot];
      if (!a) return;
      const dOut = grads[slot];
      const [M, width] = a.xn.shape;
      if (dOut.shape[0] !== M || dOut.shape[1] !== m.fc2.out) throw new ShapeError(op, `merger ${slot}: gradient [${dOut.shape.join(', ')}], its output is [${M}, ${m.fc2.out}]`);
      const dAct = ad.fc1 ? f([M, width], `merger ${slot} d gelu out`) : undefined;
      if (dAct) projection.backwardInput(rec, dOut, m.fc2, dAct);
      if (ad.fc2) projection.lora.backward(rec, ad.fc2, { x: a.act, dy: dOut, u: a.u2!, t: f([M, ad.fc2.r], `merger ${slot} lora t fc2`), dx: dAct });
      if (ad.fc1) {
        const dPre = f([M, width], `merger ${slot} d fc1 out`);
        act.geluErfBackward(rec, a.pre, dAct!, dPre);
        projection.lora.backward(rec, ad.fc1, { x: a.xn, dy: dPre, u: a.u1!, t: f([M, ad.fc1.r], `merger ${slot} lora t fc1`) });
      }
    });
    rec.flush();
    for (const t of temps) t.release();
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
  const mat = (what: string, t: Tensor, rows: number, cols: number) => {
    if (t.dtype !== 'f32' || t.numel !== rows * cols) throw new ShapeError(op, `${what} must be f32 [${rows}, ${cols}], got ${t.dtype} [${t.shape.join(', ')}]`);
  };
  const dense = (what: string, d: DenseWeight, out: number, inF: number, bias: boolean) => {
    if (d.kind === 'f32') mat(`${what}.weight`, d.w, out, inF);
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
 * (as src/model/loader.ts does the decoder's); everything else, and all of 'none' (the default), is f32.
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
    if (!quantizer || inF % Q4_GROUP !== 0) return { kind: 'f32', w: gpu.upload(toFloat32(bytes, dtype), [out, inF], 'f32', label), out, in: inF };
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
