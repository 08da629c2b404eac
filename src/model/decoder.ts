// The Qwen3-VL language model's forward (spec B3 step 7-8, B4) on the kernels of src/ops:
//
//   h = embed(ids);  h[image rows] = image embeddings                       (masked_scatter)
//   for each layer l:
//     h += o_proj(attention(rope(q_norm(q_proj(n))), rope(k_norm(k_proj(n))), v_proj(n)))   n = rms(h)
//     h += down(silu(gate(n)) · up(n))                                                       n = rms(h)
//     l < deepstack levels:  h[image rows] += deepstack[l]
//   out = rms(h)                                        (the LM head is src/model/lmHead.ts)
//
// Every projection takes a LoRA update when the call enables it. Attention is either over the
// packed rows themselves (whole sequences: logits, training) or over a KV cache (prefill and
// decode in generation). The two blocks of a layer are functions of their own (attentionBlock,
// mlpBlock) over explicit buffers, so that the training backward can rerun them on its own.
import { ShapeError, Tensor, type Gpu, type Recorder } from '../gpu';
import { Activations } from '../ops/activations';
import { Attention, type AttentionSplit } from '../ops/attention';
import { Elementwise } from '../ops/elementwise';
import { Embedding } from '../ops/embedding';
import type { KvCache } from '../ops/kvCache';
import { Lora, loraScale, type LoraParams } from '../ops/lora';
import { LoraGemv } from '../ops/loraGemv';
import { Norms } from '../ops/norms';
import { QkNormRope } from '../ops/qkNormRope';
import { Rope } from '../ops/rope';
import { TokenIds } from '../ops/tokenIds';
import type { Qwen3VLTextConfig } from './config';
import { Linear } from './linear';
import { mropeLayout } from './ropeTables';
import { allocQ4, GEMV_MAX_ROWS, int8GroupWords, type Q4Weight } from '../ops/matmulQ4';
import type { MmaOutput } from '../ops/matmulQ4Mma';
import type { DecoderLayerWeights, LanguageModelWeights, LinearWeight, TokenTable } from './weights';

/** The adapted projections of a layer, in the order the model's LoRA list uses. */
export const LORA_PROJECTIONS = ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] as const;
export type LoraProjection = (typeof LORA_PROJECTIONS)[number];
export type LayerLora = Record<LoraProjection, LoraParams>;

/** PEFT's module path of a projection, e.g. `model.language_model.layers.0.self_attn.q_proj`. */
export function loraModuleName(layer: number, proj: LoraProjection): string {
  const block = proj === 'gate' || proj === 'up' || proj === 'down' ? 'mlp' : 'self_attn';
  return `model.language_model.layers.${layer}.${block}.${proj}_proj`;
}

/** The kernels one decoder uses, compiled once. */
export interface DecoderOps {
  linear: Linear;
  norms: Norms;
  rope: Rope;
  attention: Attention;
  act: Activations;
  embedding: Embedding;
  elementwise: Elementwise;
  lora: Lora;
  loraGemv: LoraGemv;
  qkNormRope: QkNormRope;
  tokenIds: TokenIds;
}

/** Buffers of one layer's attention block for T rows (the training backward keeps its own). */
export interface AttentionBuffers {
  /** rms(h) [T, hidden] */
  xn: Tensor;
  /** q_proj and k_proj outputs before their norms: [T, Hq·D], [T, Hkv·D] */
  qRaw: Tensor;
  kRaw: Tensor;
  /** After q/k norm and RoPE: q [T, Hq·D], k and v [T, Hkv·D] */
  q: Tensor;
  k: Tensor;
  v: Tensor;
  /** Attention output [T, Hq·D] (o_proj's input) */
  attn: Tensor;
  /** Optional per-row rstd of the input norm [T] and of the q/k norms [T·Hq], [T·Hkv] (training). */
  rstd?: { input: Tensor; q: Tensor; k: Tensor };
}

export interface MlpBuffers {
  xn: Tensor;
  gate: Tensor;
  up: Tensor;
  /** silu(gate)·up [T, intermediate] */
  act: Tensor;
  rstd?: Tensor;
}

/** LoRA for one block: the layer's adapters and where each projection's u = x·Aᵀ goes. */
export interface LoraCall {
  params: LayerLora;
  u: (proj: LoraProjection) => Tensor;
  /**
   * u is scratch, not kept for a backward: a few rows then take the LoRA GEMV, the projections
   * of one input together; `wide(cols)` is a [T, cols] view of scratch for their stacked u.
   */
  transient?: {
    wide: (cols: number) => Tensor;
    /** Scratch of at least `n` elements for the partials of a folded down product (LoraGemv.upSwiglu). */
    parts: (n: number) => Tensor;
  };
}

/** One frozen projection of a block: y (+)= x·Wᵀ, adapted by the layer's LoRA `proj`. */
interface Projection {
  w: LinearWeight;
  y: Tensor;
  proj: LoraProjection;
}

/** Adapters that take the LoRA GEMV together, and the scratch for their stacked u. */
interface LoraGemvCall {
  ps: LoraParams[];
  u: Tensor;
}

/** How the attention block attends: over its own rows, or through the KV cache. */
export type AttendMode =
  | { kind: 'packed'; cuSeqlens: Tensor; lse?: Tensor; sharedPrefix?: number }
  | { kind: 'cached'; cache: KvCache; slot0: number; count: number; split?: AttentionSplit };

/** Visual rows of the sequence: image embeddings and DeepStack features, one row per <|image_pad|>. */
export interface VisualInputs {
  /** u32 [J]: the rows of hidden holding image tokens, in order. */
  rows: Tensor;
  /** [J, hidden] */
  embeds: Tensor;
  /** One [J, hidden] per DeepStack level, added after layers 0, 1, ... */
  deepstack: readonly Tensor[];
}

export interface ForwardArgs {
  /** Token ids (u32 or i32 [T]) on the GPU. */
  ids: Tensor;
  /** The same ids on the CPU, when at hand: a token table in several blocks then takes them as written, not shifted on the GPU. */
  idsHost?: ArrayLike<number>;
  /**
   * [3, T] (T, H, W) M-RoPE positions (processor/ropeIndex.ts; decode: cache position + rope delta),
   * from the CPU, or an i32 [3, T] tensor already on the GPU (decode steps recorded ahead).
   */
  positions: Int32Array | Tensor;
  attend: AttendMode;
  visual?: VisualInputs;
  /** Adapters of every layer, or null for the base model. */
  lora: readonly LayerLora[] | null;
}

/** A typed view of the first elements of a workspace tensor. */
export function view(t: Tensor, shape: readonly number[], label = t.label): Tensor {
  const need = shape.reduce((a, b) => a * b, 1);
  if (need > t.numel) throw new ShapeError('decoder', `workspace '${t.label}' holds ${t.numel} elements, ${need} needed`);
  return new Tensor(t.buffer, shape, t.dtype, label, t.byteOffset);
}

/** Weights of one input joined by rows: `w` holds the rows of `parts` in order; each part is a view of it. */
export interface FusedWeight {
  w: LinearWeight;
  parts: readonly LinearWeight[];
}

/** Forwards of at least this many rows (prefill, scoring) submit once a layer; a decode step's
 * few rows keep one submit for the whole step (each costs several µs of host time). */
const FLUSH_MIN_ROWS = 64;

/** Joined weights already made, by first part: a second Decoder over the same weights shares them. */
const fusedOf = new WeakMap<LinearWeight, FusedWeight>();

/**
 * Join each layer's q/k/v and gate/up 4-bit weights by rows into one weight apiece and make the
 * parts views of it: no extra memory (the parts' own buffers go back to the device), and one GEMV
 * instead of three (two) for a single row. Only where every part starts on the storage offset
 * alignment, codes and scales alike; other weights stay as they are.
 */
async function fuseLayers(gpu: Gpu, layers: readonly DecoderLayerWeights[]): Promise<Map<LinearWeight, FusedWeight>> {
  const out = new Map<LinearWeight, FusedWeight>();
  for (const [l, w] of layers.entries()) {
    for (const [name, parts] of [['qkv', [w.q, w.k, w.v]], ['gate_up', [w.gate, w.up]]] as const) {
      const known = fusedOf.get(parts[0]);
      const f = known ?? (await fuseRows(gpu, parts, `layers.${l}.${name}`));
      if (!f) continue;
      fusedOf.set(parts[0], f);
      out.set(parts[0], f);
    }
  }
  return out;
}

async function fuseRows(gpu: Gpu, parts: readonly LinearWeight[], label: string): Promise<FusedWeight | null> {
  const align = gpu.limits.minStorageBufferOffsetAlignment;
  const k = parts[0].in;
  const q4: Q4Weight[] = [];
  for (const p of parts) {
    // Each part's codes (n·k/2 bytes) and scales (n·k/16 bytes) must end on the alignment, where the next begins.
    if (p.kind !== 'q4' || p.in !== k || ((p.out * k) / 2) % align || ((p.out * k) / 16) % align) return null;
    q4.push(p.w);
  }
  const n = q4.reduce((a, p) => a + p.n, 0);
  const joined = allocQ4(gpu, n, k, `decoder.${label}`);
  const rec = gpu.recorder('decoder.fuse');
  let row = 0;
  for (const p of q4) {
    rec.copy(p.codes, joined.codes, (p.n * k) / 2, 0, (row * k) / 2);
    rec.copy(p.scales, joined.scales, (p.n * k) / 16, 0, (row * k) / 16);
    row += p.n;
  }
  await rec.submit();
  row = 0;
  parts.forEach((p, i) => {
    const w = q4[i];
    (p as { w: Q4Weight }).w = {
      codes: new Tensor(joined.codes.buffer, w.codes.shape, 'u32', w.codes.label, joined.codes.byteOffset + (row * k) / 2),
      scales: new Tensor(joined.scales.buffer, w.scales.shape, 'u32', w.scales.label, joined.scales.byteOffset + (row * k) / 16),
      n: w.n,
      k,
    };
    row += w.n;
    w.codes.release();
    w.scales.release();
  });
  // The parts' buffers leave the pool's cache now: the weights take no more memory than before.
  gpu.pool.trim();
  return { w: { kind: 'q4', w: joined, out: n, in: k }, parts };
}

export class Decoder {
  readonly scale: number;
  /** The joined output of projections, by the first part's output (workspace views are kept per row count). */
  private readonly joinedOut = new WeakMap<Tensor, { y: Tensor; widths: number[] }>();
  /** A GEMV's x as int8 groups, from the kernel that writes x to the GEMV (quantizedInput). */
  private xq: Tensor | null = null;

  private constructor(
    readonly gpu: Gpu,
    readonly config: Qwen3VLTextConfig,
    readonly weights: LanguageModelWeights,
    readonly ops: DecoderOps,
    /** q/k/v and gate/up of a layer as one weight each, by their first part (where they could be joined). */
    private readonly fused: ReadonlyMap<LinearWeight, FusedWeight>,
  ) {
    this.scale = 1 / Math.sqrt(config.headDim);
  }

  /** `int8`: whether decode's GEMVs may take int8 x (ModelOptions.int8Decode). */
  static async create(gpu: Gpu, config: Qwen3VLTextConfig, weights: LanguageModelWeights, opts: { int8?: boolean } = {}): Promise<Decoder> {
    const [linear, norms, rope, attention, act, embedding, elementwise, lora, loraGemv, qkNormRope, tokenIds] = await Promise.all([
      Linear.create(gpu, { int8: opts.int8 }),
      Norms.create(gpu),
      Rope.create(gpu, mropeLayout(config.ropeTheta, config.headDim, config.mropeSection)),
      Attention.create(gpu, { hq: config.numHeads, hkv: config.numKvHeads, headDim: config.headDim }),
      Activations.create(gpu),
      Embedding.create(gpu),
      Elementwise.create(gpu),
      Lora.create(gpu),
      LoraGemv.create(gpu),
      QkNormRope.create(gpu),
      TokenIds.create(gpu),
    ]);
    const fused = await fuseLayers(gpu, weights.layers);
    return new Decoder(gpu, config, weights, { linear, norms, rope, attention, act, embedding, elementwise, lora, loraGemv, qkNormRope, tokenIds }, fused);
  }

  /** y = x·Wᵀ (+ y) (+ LoRA). `int8` (here and below): the 4-bit GEMVs may quantize x (inference). */
  private project(rec: Recorder, w: LinearWeight, x: Tensor, y: Tensor, lora: LoraCall | null, proj: LoraProjection, accumulate: boolean, int8: boolean): void {
    this.projectShared(rec, x, [{ w, y, proj }], lora, accumulate, int8);
  }

  /**
   * Projections of one input x: every y = x·Wᵀ (+ y), then their LoRA updates, on the GEMV path
   * in one pair of dispatches for all of them (the workspace's wide u holds up to three).
   */
  private projectShared(rec: Recorder, x: Tensor, outs: readonly Projection[], lora: LoraCall | null, accumulate: boolean, int8: boolean): void {
    const gemv = this.gemvLora(lora, x, outs);
    const mma = gemv ? null : this.ops.linear.tensorCoreWeights(x, outs.map((o) => o.w));
    if (mma) {
      // On the tensor cores x is quantized once for all of outs; the LoRA updates follow (in the
      // GEMM's epilogue they slowed its main loop by 12-20% on an H100).
      this.ops.linear.forwardShared(rec, x, outs.map((o, i): MmaOutput => ({ w: mma[i], y: o.y })), accumulate);
      if (lora) outs.forEach((o) => this.ops.lora.forward(rec, lora.params[o.proj], { x, y: o.y, u: lora.u(o.proj) }));
      return;
    }
    // One adapter: its down and up after the base projection (LoraGemv.forward); decode's o_proj
    // and down_proj take the folded path in attentionBlock / mlpBlock instead.
    const single = gemv && outs.length === 1;
    if (gemv && !single) this.ops.loraGemv.down(rec, gemv.ps, x, gemv.u);
    this.baseProjections(rec, x, outs, accumulate, int8);
    if (single) this.ops.loraGemv.forward(rec, gemv.ps[0], x, outs[0].y, gemv.u);
    else if (gemv) this.ops.loraGemv.up(rec, gemv.ps, gemv.u, outs.map((o) => o.y));
    else if (lora) outs.forEach((o) => this.ops.lora.forward(rec, lora.params[o.proj], { x, y: o.y, u: lora.u(o.proj) }));
  }

  /**
   * n = rms(h)·w, then the projections of n: on the LoRA GEMV path the norm runs inside the LoRA
   * down dispatch (no dispatch of its own), else as rmsnorm (saving rstd when asked) + projectShared.
   */
  private normProject(rec: Recorder, h: Tensor, norm: Tensor, n: Tensor, rstd: Tensor | undefined, outs: readonly Projection[], lora: LoraCall | null, int8: boolean): LoraGemvCall | null {
    const gemv = rstd ? null : this.gemvLora(lora, n, outs);
    if (!gemv) {
      this.ops.norms.rmsnorm(rec, h, norm, n, this.config.rmsNormEps, rstd);
      this.projectShared(rec, n, outs, lora, false, int8);
      return null;
    }
    const joined = this.joined(outs);
    const xq = joined && this.ops.loraGemv.quantizes(gemv.ps) ? this.quantizedInput(n.shape[0], joined.w, int8) : undefined;
    this.ops.loraGemv.down(rec, gemv.ps, h, gemv.u, { weight: norm, eps: this.config.rmsNormEps, out: n, quantized: xq });
    this.baseProjections(rec, n, outs, false, int8, xq);
    return gemv;
  }

  /**
   * Where the GEMV of `rows` rows on w takes x as int8 groups, which the kernel before it (a
   * norm's LoRA down, the SwiGLU, the attention combine) can write as it writes x: the scratch
   * that carries them, saving the GEMV's quantize dispatch. Else undefined.
   */
  private quantizedInput(rows: number, w: LinearWeight, int8: boolean): Tensor | undefined {
    if (!int8 || w.kind !== 'q4' || !this.ops.linear.q4.takesQuantizedX(rows, w.w, true)) return undefined;
    // One for every such input (each GEMV reads it before the next kernel writes it again), sized
    // once for the widest; never released: calls recorded before (a decode tape) may read it.
    const { hiddenSize, intermediateSize, numHeads, headDim } = this.config;
    const words = int8GroupWords(GEMV_MAX_ROWS, Math.max(hiddenSize, intermediateSize, numHeads * headDim));
    this.xq ??= this.gpu.tensor([words], 'u32', 'decoder.xq');
    return this.xq;
  }

  /**
   * Every y (+)= x·Wᵀ of `outs`: for up to 8 rows, q/k/v (or gate/up) of a fused layer as one
   * GEMV into their back-to-back outputs, each part's rows written apart (a one-row decode step
   * is bound by recording its dispatches; at 8 rows the joined weight also reads faster).
   */
  private baseProjections(rec: Recorder, x: Tensor, outs: readonly Projection[], accumulate: boolean, int8: boolean, xq?: Tensor): void {
    const rows = x.shape[0];
    const joined = outs.length > 1 ? this.joined(outs) : null;
    if (joined?.w.kind === 'q4') {
      // One product for all: the GEMV reads the weights once; the GEMM has more tiles to spread
      // (H100, 512 rows: q/k/v 335 -> 285 µs, gate/up 842 -> 787; gemmSpeed --split).
      const parts = rows > 1 ? joined.widths : undefined;
      if (rows <= GEMV_MAX_ROWS) this.ops.linear.q4.gemv(rec, x, joined.w.w, joined.y, accumulate, { parts, int8, xq });
      else this.ops.linear.q4.gemm(rec, x, joined.w.w, joined.y, accumulate, parts);
      return;
    }
    for (const o of outs) this.ops.linear.forward(rec, x, o.w, o.y, accumulate, int8);
  }

  /**
   * y += x·Wᵀ + s·u·Bᵀ for adapter p, u [rows, r] left as `perRow` partials a row by the kernel
   * before (the folds): inside the 4-bit GEMV's epilogue where it fits, else one dispatch after it.
   */
  private foldedProject(rec: Recorder, x: Tensor, w: LinearWeight, y: Tensor, p: LoraParams, parts: Tensor, perRow: number, int8: boolean, xq?: Tensor): void {
    const q4 = this.ops.linear.q4;
    if (w.kind === 'q4' && q4.takesLora(x.shape[0], w.w, p.r, perRow, int8)) {
      q4.gemv(rec, x, w.w, y, true, { int8, lora: { B: p.B, r: p.r, scale: loraScale(p), parts, perRow }, xq });
      return;
    }
    if (xq && w.kind === 'q4') q4.gemv(rec, x, w.w, y, true, { int8, xq });
    else this.ops.linear.forward(rec, x, w, y, true, int8);
    this.ops.loraGemv.upFromParts(rec, p, parts, perRow, y);
  }

  /** The fused weight whose parts are `outs`' weights, in order, when their outputs lie back to back too. */
  private joined(outs: readonly Projection[]): { w: LinearWeight; y: Tensor; widths: number[] } | null {
    const f = this.fused.get(outs[0].w);
    if (!f || f.parts.length !== outs.length || outs.some((o, i) => o.w !== f.parts[i])) return null;
    const y0 = outs[0].y;
    let j = this.joinedOut.get(y0);
    if (!j) {
      let n = 0;
      for (const o of outs) {
        if (o.y.buffer !== y0.buffer || o.y.byteOffset !== y0.byteOffset + 4 * n) return null;
        n += o.y.numel;
      }
      const widths = outs.map((o) => o.y.shape[o.y.shape.length - 1]);
      this.joinedOut.set(y0, (j = { y: new Tensor(y0.buffer, [y0.shape[0], n / y0.shape[0]], 'f32', 'decoder.joined', y0.byteOffset), widths }));
    }
    return { w: f.w, ...j };
  }

  /** The adapters of `outs` and their wide u when they take the LoRA GEMV together on the rows of x. */
  private gemvLora(lora: LoraCall | null, x: Tensor, outs: readonly Projection[]): LoraGemvCall | null {
    if (!lora?.transient || !LoraGemv.fits(x.shape[0])) return null;
    const ps = outs.map((o) => lora.params[o.proj]);
    return LoraGemv.groupable(ps) ? { ps, u: lora.transient.wide(ps.length * ps[0].r) } : null;
  }

  /**
   * h += o_proj(attention(...)) for one layer. `cs` is the rope table of the rows [T, D/2, 2].
   * In cached mode the layer's k and v are appended to the cache first (by the q/k norm's
   * dispatch itself at inference).
   */
  attentionBlock(rec: Recorder, layer: number, w: DecoderLayerWeights, h: Tensor, b: AttentionBuffers, cs: Tensor, attend: AttendMode, lora: LoraCall | null): void {
    const { numHeads: hq, numKvHeads: hkv, headDim: D, rmsNormEps: eps } = this.config;
    const T = h.shape[0];
    const { norms, rope, attention } = this.ops;
    const outs: Projection[] = [{ w: w.q, y: b.qRaw, proj: 'q' }, { w: w.k, y: b.kRaw, proj: 'k' }, { w: w.v, y: b.v, proj: 'v' }];
    // Cached attention is inference (prefill and decode of generation): its GEMVs may take int8 x.
    const int8 = attend.kind === 'cached';
    const gemv = this.normProject(rec, h, w.inputNorm, b.xn, b.rstd?.input, outs, lora, int8);
    const [qRaw, kRaw, qWeight, kWeight, q] = [b.qRaw, b.kRaw, w.qNorm, w.kNorm, b.q];
    if (b.rstd) {
      norms.rmsnorm(rec, b.qRaw.reshape([T * hq, D]), w.qNorm, b.q.reshape([T * hq, D]), eps, b.rstd.q);
      norms.rmsnorm(rec, b.kRaw.reshape([T * hkv, D]), w.kNorm, b.k.reshape([T * hkv, D]), eps, b.rstd.k);
      rope.apply(rec, cs, b.q, hq);
      rope.apply(rec, cs, b.k, hkv);
      if (attend.kind === 'cached') attend.cache.append(rec, layer, b.k, b.v, attend.slot0, attend.count);
    } else if (attend.kind === 'cached') {
      // No rstd to keep (inference): one dispatch for the q/k/v LoRA updates, the norms, RoPE and
      // the cache append, as far as the device binds enough storage buffers for it.
      const { cache, slot0, count } = attend;
      const { qkNormRope } = this.ops;
      const fused = gemv && qkNormRope.writesCache(true) ? { q: gemv.ps[0], k: gemv.ps[1], v: gemv.ps[2], u: gemv.u } : undefined;
      if (gemv && !fused) this.ops.loraGemv.up(rec, gemv.ps, gemv.u, outs.map((o) => o.y));
      if (qkNormRope.writesCache(false)) {
        qkNormRope.applyToCache(rec, { qRaw, kRaw, qWeight, kWeight, cs, q, v: b.v, hq, hkv, eps, cache, layer, slot0, count, lora: fused });
      } else {
        qkNormRope.apply(rec, { qRaw, kRaw, qWeight, kWeight, cs, q, k: b.k, hq, hkv, eps });
        cache.append(rec, layer, b.k, b.v, slot0, count);
      }
    } else {
      if (gemv) this.ops.loraGemv.up(rec, gemv.ps, gemv.u, outs.map((o) => o.y));
      this.ops.qkNormRope.apply(rec, { qRaw, kRaw, qWeight, kWeight, cs, q, k: b.k, hq, hkv, eps });
    }
    if (attend.kind === 'packed') {
      attention.forward(rec, { q: b.q, k: b.k, v: b.v, cuSeqlens: attend.cuSeqlens, o: b.attn, lse: attend.lse, causal: true, scale: this.scale, sharedPrefix: attend.sharedPrefix });
      this.project(rec, w.o, b.attn, h, lora, 'o', true, int8);
      return;
    }
    // On the LoRA GEMV path the split combine starts o_proj's down product, one partial a head;
    // after the base projection one dispatch finishes the update.
    const oP = lora?.params.o;
    const fold = gemv && oP && LoraGemv.takesParts(oP) ? { A: oP.A, r: oP.r, parts: lora!.transient!.parts(T * hq * oP.r) } : undefined;
    const xq = fold && attend.split && attention.foldQuantizes ? this.quantizedInput(T, w.o, int8) : undefined;
    const folded = attention.forwardCached(rec, b.q, attend.cache, layer, b.attn, { slot0: attend.slot0, count: attend.count, scale: this.scale, split: attend.split, fold: fold && { ...fold, quantized: xq } });
    if (folded) this.foldedProject(rec, b.attn, w.o, h, oP!, fold!.parts, hq, int8, xq);
    else this.project(rec, w.o, b.attn, h, lora, 'o', true, int8);
  }

  /**
   * h += down(silu(gate(n))·up(n)), n = rms(h). On the LoRA GEMV path the gate/up updates go
   * straight into the SwiGLU (b.gate and b.up then keep the base projections only). `int8`:
   * decode's int8 x. `output` false stops before down_proj, after the down adapter's u = act·Aᵀ:
   * a training backward's recompute has the layer's output and reads only what comes before it
   * (down_proj is a quarter of the layer's products).
   */
  mlpBlock(rec: Recorder, w: DecoderLayerWeights, h: Tensor, b: MlpBuffers, lora: LoraCall | null, opts: { int8?: boolean; output?: boolean } = {}): void {
    const { int8 = false, output = true } = opts;
    const outs: Projection[] = [{ w: w.gate, y: b.gate, proj: 'gate' }, { w: w.up, y: b.up, proj: 'up' }];
    const gemv = this.normProject(rec, h, w.postAttentionNorm, b.xn, b.rstd, outs, lora, int8);
    if (!output) {
      if (gemv) throw new ShapeError('decoder.mlp', 'a block without its output keeps u for a backward: not on the LoRA GEMV path');
      this.ops.act.swiglu(rec, b.gate, b.up, b.act);
      if (lora) this.ops.lora.down(rec, lora.params.down, b.act, lora.u('down'));
      return;
    }
    // down_proj's down product starts in the SwiGLU dispatch: its update is one dispatch after its GEMV.
    const downP = lora?.params.down;
    const perRow = downP ? LoraGemv.foldParts(downP) : 0;
    const fold = gemv && downP && LoraGemv.canFold(gemv.ps[0], downP) ? { p: downP, parts: lora!.transient!.parts(h.shape[0] * perRow * downP.r) } : undefined;
    const xq = fold && this.ops.loraGemv.foldQuantizes(gemv!.ps[0]) ? this.quantizedInput(h.shape[0], w.down, int8) : undefined;
    if (gemv) this.ops.loraGemv.upSwiglu(rec, gemv.ps[0], gemv.ps[1], gemv.u, b.gate, b.up, b.act, fold && { ...fold, quantized: xq });
    else this.ops.act.swiglu(rec, b.gate, b.up, b.act);
    if (fold) this.foldedProject(rec, b.act, w.down, h, fold.p, fold.parts, perRow, int8, xq);
    else this.project(rec, w.down, b.act, h, lora, 'down', true, int8);
  }

  /** h [T, hidden] = embedding rows of ids (4-bit or f32 table, in blocks). */
  embed(rec: Recorder, ws: DecoderWorkspace, ids: Tensor, idsHost: ArrayLike<number> | undefined, h: Tensor): void {
    const table = this.weights.embed;
    const T = ids.numel;
    if (table.blocks.length === 1) {
      this.gatherBlock(rec, table.blocks[0], ids, h);
      return;
    }
    if (idsHost && idsHost.length !== T) throw new ShapeError('decoder.embed', `${idsHost.length} ids on the CPU for ${T} on the GPU`);
    // Each block gathers its own rows (ids shifted to the block; others fall outside it and give zeros).
    table.blocks.forEach((block, b) => {
      const local = view(ws.blockIds[b], [T]);
      if (idsHost) this.gpu.write(local, Uint32Array.from(idsHost, (id) => (id - table.rowStart[b]) >>> 0));
      else this.ops.tokenIds.shift(rec, ids, table.rowStart[b], local);
      if (b === 0) this.gatherBlock(rec, block, local, h);
      else {
        const part = view(ws.tmp, h.shape);
        this.gatherBlock(rec, block, local, part);
        this.ops.elementwise.axpy(rec, part, h);
      }
    });
  }

  private gatherBlock(rec: Recorder, block: LinearWeight, ids: Tensor, out: Tensor): void {
    if (block.kind === 'q4') this.ops.linear.q4.gather(rec, ids, block.w, out);
    // The f32 gather reads u32 ids; an i32 id is the same bits (a negative one falls outside the table).
    else this.ops.embedding.gather(rec, block.w, ids.dtype === 'u32' ? ids : new Tensor(ids.buffer, ids.shape, 'u32', ids.label, ids.byteOffset), out);
  }

  /** Workspace for up to `maxRows` rows per forward (and the LoRA rank `rank`, 0 without LoRA). */
  workspace(maxRows: number, rank = 0): DecoderWorkspace {
    return new DecoderWorkspace(this.gpu, this.config, this.weights.embed, maxRows, rank);
  }

  /**
   * Record the whole forward of T = ids.numel rows and return rms(h_final) [T, hidden], a view
   * of the workspace. Host data (positions, block ids from idsHost) is written when this is
   * called: submit the recorder before another forward on the same workspace. With positions as a
   * tensor and no idsHost, everything comes from the GPU and forwards can be recorded back to back.
   */
  forward(rec: Recorder, ws: DecoderWorkspace, a: ForwardArgs): Tensor {
    const c = this.config;
    const T = a.ids.numel;
    if (T < 1 || T > ws.maxRows) throw new ShapeError('decoder', `${T} rows outside [1, ${ws.maxRows}] of the workspace`);
    const positions = a.positions;
    if (positions instanceof Tensor) {
      if (positions.dtype !== 'i32' || positions.numel !== 3 * T) throw new ShapeError('decoder', `positions must be i32 [3, ${T}], got ${positions.dtype} [${positions.shape.join(', ')}]`);
    } else if (positions.length !== 3 * T) throw new ShapeError('decoder', `positions must be [3, ${T}], got ${positions.length} values`);
    if (a.lora && a.lora.length !== c.numLayers) throw new ShapeError('decoder', `LoRA for ${a.lora.length} layers, the model has ${c.numLayers}`);
    if (a.visual && a.visual.deepstack.length > c.numLayers) throw new ShapeError('decoder', `${a.visual.deepstack.length} DeepStack levels for ${c.numLayers} layers`);
    const b = ws.views(T);
    this.embed(rec, ws, a.ids, a.idsHost, b.h);
    if (a.visual) this.ops.embedding.scatterRows(rec, a.visual.embeds, a.visual.rows, b.h);
    if (positions instanceof Tensor) this.ops.rope.table(rec, positions.shape.length === 2 ? positions : positions.reshape([3, T]), b.cs);
    else {
      this.gpu.write(b.positions, positions);
      this.ops.rope.table(rec, b.positions, b.cs);
    }
    const loraU = (proj: LoraProjection): Tensor => b.loraU(a.lora![0][proj].r);
    const transient = { wide: b.loraWide, parts: b.loraParts };
    this.weights.layers.forEach((w, l) => {
      const lora = a.lora ? { params: a.lora[l], u: loraU, transient } : null;
      this.attentionBlock(rec, l, w, b.h, b.attn, b.cs, a.attend, lora);
      this.mlpBlock(rec, w, b.h, b.mlp, lora, { int8: a.attend.kind === 'cached' });
      const ds = a.visual?.deepstack[l];
      if (ds) this.ops.embedding.deepstackAdd(rec, ds, a.visual!.rows, b.h);
      // A prefill submits each layer: the GPU starts on it while the next is recorded.
      if (T >= FLUSH_MIN_ROWS) rec.flush();
    });
    if (a.attend.kind === 'cached') a.attend.cache.advance(rec, a.attend.slot0, a.attend.count, T / a.attend.count);
    this.ops.norms.rmsnorm(rec, b.h, this.weights.finalNorm, b.out, c.rmsNormEps);
    return b.out;
  }
}

type WorkspaceViews = ReturnType<DecoderWorkspace['makeViews']>;

/** [T, width] views of `s.buffer`, one per width, back to back. */
function stacked(s: { buffer: Tensor; widths: number[] }, T: number): Tensor[] {
  let at = s.buffer.byteOffset;
  return s.widths.map((w) => {
    const t = new Tensor(s.buffer.buffer, [T, w], 'f32', s.buffer.label, at);
    at += 4 * T * w;
    return t;
  });
}

/** Buffers for forwards of up to maxRows rows, acquired once; `views(T)` shapes them for a call. */
export class DecoderWorkspace {
  private readonly t: Record<string, Tensor>;
  private readonly byRows = new Map<number, WorkspaceViews>();
  /** One buffer for outputs that lie back to back: T rows of each width in turn. */
  private readonly qkv: { buffer: Tensor; widths: number[] } | null;
  private readonly gateUp: { buffer: Tensor; widths: number[] } | null;
  /** u32 [maxRows] per token-table block (ids shifted into the block). */
  readonly blockIds: Tensor[];
  /** [maxRows, hidden]: another block's embedding rows. */
  readonly tmp: Tensor;

  constructor(
    gpu: Gpu,
    private readonly c: Qwen3VLTextConfig,
    table: TokenTable,
    readonly maxRows: number,
    readonly rank: number,
  ) {
    const R = maxRows;
    const { hiddenSize: H, numHeads: hq, numKvHeads: hkv, headDim: D, intermediateSize: I } = c;
    const f = (n: number, label: string) => gpu.tensor([n], 'f32', `decoder.${label}`);
    // q/k/v and gate/up outputs back to back in one buffer each where every start can be bound
    // (a fused layer's one-row projection writes them in one GEMV), else apart.
    const align = gpu.limits.minStorageBufferOffsetAlignment;
    const stackable = (widths: number[]) => widths.every((w) => (4 * w) % align === 0);
    this.qkv = stackable([hq * D, hkv * D]) ? { buffer: f(R * (hq + 2 * hkv) * D, 'qkv'), widths: [hq * D, hkv * D, hkv * D] } : null;
    this.gateUp = stackable([I]) ? { buffer: f(2 * R * I, 'gate_up'), widths: [I, I] } : null;
    this.t = {
      h: f(R * H, 'h'),
      out: f(R * H, 'out'),
      xn: f(R * H, 'xn'),
      ...(this.qkv ? {} : { qRaw: f(R * hq * D, 'q_raw'), kRaw: f(R * hkv * D, 'k_raw'), v: f(R * hkv * D, 'v') }),
      q: f(R * hq * D, 'q'),
      k: f(R * hkv * D, 'k'),
      attn: f(R * hq * D, 'attn'),
      ...(this.gateUp ? {} : { gate: f(R * I, 'gate'), up: f(R * I, 'up') }),
      act: f(R * I, 'act'),
      cs: f(R * D, 'rope_cs'),
      // u of up to three adapters at once (q/k/v on the LoRA GEMV path).
      loraU: f(R * 3 * Math.max(1, rank), 'lora_u'),
      // Partial u of down_proj (one per 64 columns of act) or of o_proj (one per head), on that path.
      loraParts: f(R * Math.max(Math.ceil(I / 64), hq) * Math.max(1, rank), 'lora_parts'),
      positions: gpu.tensor([3 * R], 'i32', 'decoder.positions'),
    };
    this.blockIds = table.blocks.length > 1 ? table.blocks.map((_, b) => gpu.tensor([R], 'u32', `decoder.ids[${b}]`)) : [];
    this.tmp = table.blocks.length > 1 ? f(R * H, 'embed_tmp') : this.t.xn;
  }

  /** The views for T rows, made once per T (decode asks every step; equal views bind without lookups). */
  views(T: number): WorkspaceViews {
    let v = this.byRows.get(T);
    if (!v) this.byRows.set(T, (v = this.makeViews(T)));
    return v;
  }

  private makeViews(T: number) {
    const { hiddenSize: H, numHeads: hq, numKvHeads: hkv, headDim: D, intermediateSize: I } = this.c;
    const t = this.t;
    const [qRaw, kRaw, v] = this.qkv ? stacked(this.qkv, T) : [view(t.qRaw, [T, hq * D]), view(t.kRaw, [T, hkv * D]), view(t.v, [T, hkv * D])];
    const [gate, up] = this.gateUp ? stacked(this.gateUp, T) : [view(t.gate, [T, I]), view(t.up, [T, I])];
    const uViews = new Map<number, Tensor>();
    const wideViews = new Map<number, Tensor>();
    const xn = view(t.xn, [T, H]);
    return {
      h: view(t.h, [T, H]),
      out: view(t.out, [T, H]),
      positions: view(t.positions, [3, T]),
      cs: view(t.cs, [T, D / 2, 2]),
      attn: {
        xn,
        qRaw,
        kRaw,
        q: view(t.q, [T, hq * D]),
        k: view(t.k, [T, hkv * D]),
        v,
        attn: view(t.attn, [T, hq * D]),
      } satisfies AttentionBuffers,
      mlp: { xn, gate, up, act: view(t.act, [T, I]) } satisfies MlpBuffers,
      loraU: (r: number) => {
        if (r > this.rank) throw new ShapeError('decoder', `LoRA rank ${r} above the workspace's ${this.rank}`);
        return uViews.get(r) ?? uViews.set(r, view(t.loraU, [T, r])).get(r)!;
      },
      loraParts: (n: number) => {
        if (n > t.loraParts.numel) throw new ShapeError('decoder', `${n} LoRA partials above the workspace's ${t.loraParts.numel}`);
        return t.loraParts;
      },
      /** u of up to three adapters stacked: [T, cols]. */
      loraWide: (cols: number) => {
        if (cols > 3 * this.rank) throw new ShapeError('decoder', `${cols} LoRA columns above the workspace's 3 × rank ${this.rank}`);
        return wideViews.get(cols) ?? wideViews.set(cols, view(t.loraU, [T, cols])).get(cols)!;
      },
    };
  }

  release(): void {
    for (const x of [...Object.values(this.t), ...this.blockIds]) x.release();
    this.qkv?.buffer.release();
    this.gateUp?.buffer.release();
    if (this.blockIds.length) this.tmp.release();
  }
}
