// The Qwen3-VL language model's forward (spec B3 step 7-8, B4) and its backward into the LoRA
// adapters, on the kernels of src/ops:
//
//   h = embed(ids);  h[image rows] = image embeddings                       (masked_scatter)
//   for each layer l:
//     h += o_proj(attention(rope(q_norm(q_proj(n))), rope(k_norm(k_proj(n))), v_proj(n)))   n = rms(h)
//     h += down(silu(gate(n)) · up(n))                                                       n = rms(h)
//     l < deepstack levels:  h[image rows] += deepstack[l]
//   out = rms(h)                                        (the LM head is src/model/lmHead.ts)
//
// Every product with a frozen weight goes through src/ops/projection.ts, which picks its path
// (GEMV, GEMM, tensor cores, LoRA GEMV, folds). Every projection takes a LoRA update when the
// layer has an adapter for it. Attention, from the q/k/v projections to o_proj, is one call to
// src/ops/selfAttention.ts, which picks its kernels from how the layer attends: over the packed
// rows themselves (whole sequences: logits, training) or over a KV cache (prefill and decode in
// generation). The two blocks of a layer are functions of their own (attentionBlock,
// mlpBlock) over explicit buffers; the backward walks the layers in reverse through their
// backwards (mlpBlockBackward, attentionBlockBackward), rerunning a layer's blocks first where
// the forward kept only its input (gradient checkpointing).
import { DTYPE_BYTES, ShapeError, Tensor, type Gpu, type Recorder } from '../gpu';
import { ActivationF16 } from '../ops/activationF16';
import { Activations } from '../ops/activations';
import { Attention } from '../ops/attention';
import { Elementwise } from '../ops/elementwise';
import { Embedding } from '../ops/embedding';
import { dropoutSeed, LORA_GROUP_MAX, type Lora } from '../ops/lora';
import type { LoraParams } from '../ops/loraParams';
import { LORA_GEMV_MAX_ROWS, LoraGemv } from '../ops/loraGemv';
import { Norms } from '../ops/norms';
import { QkNormRope } from '../ops/qkNormRope';
import { Rope } from '../ops/rope';
import { TokenIds } from '../ops/tokenIds';
import type { Qwen3VLTextConfig } from './config';
import { Projection, type BackwardProduct, type LoraScratch, type Product } from '../ops/projection';
import { SelfAttention, type AttendMode, type AttentionBuffers, type PackedAttend } from '../ops/selfAttention';
import { mropeLayout } from './ropeTables';
import type { DecoderLayerWeights, LanguageModelWeights, LinearWeight, TokenTable } from './weights';

/** The adapted projections of a layer, in the order the model's LoRA list uses. */
export const LORA_PROJECTIONS = ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] as const;
export type LoraProjection = (typeof LORA_PROJECTIONS)[number];
/** A projection's place among the adapters of its input (q/k/v, o, gate/up, down), which share dispatches. */
const GROUP_SLOT: Record<LoraProjection, number> = { q: 0, k: 1, v: 2, o: 0, gate: 0, up: 1, down: 0 };
/** A layer's adapters by projection: any subset (PEFT's target_modules). */
export type LayerLora = Partial<Record<LoraProjection, LoraParams>>;
/** A layer's LoRA u = x·Aᵀ [T, r] by adapted projection. */
export type LayerLoraU = Partial<Record<LoraProjection, Tensor>>;

/** PEFT's module path of a projection, e.g. `model.language_model.layers.0.self_attn.q_proj`. */
export function loraModuleName(layer: number, proj: LoraProjection): string {
  const block = proj === 'gate' || proj === 'up' || proj === 'down' ? 'mlp' : 'self_attn';
  return `model.language_model.layers.${layer}.${block}.${proj}_proj`;
}

/** The kernels one decoder uses, compiled once. */
export interface DecoderOps {
  /** Every product with a frozen weight, and the path it takes (src/ops/projection.ts). */
  projection: Projection;
  norms: Norms;
  rope: Rope;
  attention: Attention;
  /** A layer's attention from its q/k/v projections to o_proj, and the path it takes. */
  selfAttention: SelfAttention;
  act: Activations;
  embedding: Embedding;
  elementwise: Elementwise;
  lora: Lora;
  loraGemv: LoraGemv;
  tokenIds: TokenIds;
  /** Kept hidden states in f16 and back (activation_storage f16). */
  activationF16: ActivationF16;
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
  /** u is scratch, not kept for a backward (inference): few rows may take the LoRA GEMV. */
  scratch?: LoraScratch;
  /** lora_dropout (training): probability, each projection's mask seed, workspace [T, widest in]. */
  dropout?: { p: number; seed: (proj: LoraProjection) => number; xd: (adapter: LoraParams) => Tensor };
  /** u already holds x·Aᵀ (a checkpointed recompute whose forward kept them: KeptActivations.u). */
  uKept?: boolean;
}

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
  /** A training forward's activations for its backward (packed attention only). */
  keep?: KeptActivations;
  /** lora_dropout on the adapters' inputs (training forwards): masks of (seed, step, layer, module, row, col). */
  dropout?: ForwardDropout;
}

/** lora_dropout of one forward: probability, the run's seed and the forward's step (dropoutSeed),
 * and a workspace [T, widest adapter input]. */
export interface ForwardDropout {
  p: number;
  seed: number;
  step: number;
  xd: Tensor;
}

/** The adapters' dropout in layer l (LoraCall.dropout). */
export function layerDropout(d: ForwardDropout, layer: number): NonNullable<LoraCall['dropout']> {
  const rows = d.xd.shape[0];
  return { p: d.p, xd: (a) => view(d.xd, [rows, a.in]), seed: (proj) => dropoutSeed(d.seed, d.step, layer, LORA_PROJECTIONS.indexOf(proj)) };
}

/** What a layer's backward reads of its forward: kept per layer, or one set refilled by recomputing. */
export interface LayerActivations {
  /** With the rstd of the input norm and of the q/k norms. */
  A: AttentionBuffers;
  /** With the rstd of the post-attention norm. */
  M: MlpBuffers;
  /** The attention's log-sum-exp [T, Hq]. */
  lse: Tensor;
  /** The residual stream between the blocks [T, hidden]. */
  hmid: Tensor;
  /** LoRA's x·Aᵀ per projection [T, r] (rank-sized views are taken where read). */
  u: Record<LoraProjection, Tensor>;
  /** The buffer A.qRaw, A.kRaw and A.v lie in back to back (one product writes them), if one. */
  qkv?: Tensor;
}

/** A training forward's keep: every layer's input h_l and the final hidden state (L + 1 of
 * [T, hidden]), and without checkpointing every layer's intermediates. */
export interface KeptActivations {
  /** f32, or f16 (activation_storage f16: rounded once, expanded back in the backward). */
  inputs: readonly Tensor[];
  /** Every layer's intermediates (f32, or their wide ones in f16: layerActivations' `wide`), or null. */
  layers: readonly LayerActivations[] | null;
  /** With layers of f16 wide intermediates: one f32 set the layer runs on before they are rounded. */
  staging?: LayerActivations;
  /** Without layers (gradient checkpointing), each layer's LoRA u = x·Aᵀ per projection [T, ≥ r]:
   * the backward's recompute takes them, not the down products again; optional. */
  u?: readonly LayerLoraU[];
  /** Without layers, each layer's attention log-sum-exp [T, Hq], written by the forward: the
   * recompute reads it (AttentionForwardArgs.lseKnown) instead of finding it again; optional. */
  lse?: readonly Tensor[];
  /** With anything in f16: u32 [rangeSlots(L)], cleared before the forward; an f16 tensor's slot
   * (rangeSlotName says whose) gets the bits of its largest |x| beyond f16's range (ActivationF16.pack), else 0. */
  range?: Tensor;
}

/** A layer's intermediates of [T, width ≥ hidden] (the norms' rstd, the attention's lse and LoRA's u are narrow). */
const WIDE = ['xn_attn', 'q_raw', 'k_raw', 'q', 'k', 'v', 'attn', 'xn_mlp', 'gate', 'up', 'act', 'hmid'] as const;
type WideName = (typeof WIDE)[number];

function wideOf(a: LayerActivations): Record<WideName, Tensor> {
  const { A, M } = a;
  return { xn_attn: A.xn, q_raw: A.qRaw, k_raw: A.kRaw, q: A.q, k: A.k, v: A.v, attn: A.attn, xn_mlp: M.xn, gate: M.gate, up: M.up, act: M.act, hmid: a.hmid };
}

/** `kept` with the wide intermediates of `wide` (an f32 set standing in for f16 ones). */
function withWide(kept: LayerActivations, wide: LayerActivations): LayerActivations {
  return { A: { ...wide.A, rstd: kept.A.rstd }, M: { ...wide.M, rstd: kept.M.rstd }, lse: kept.lse, hmid: wide.hmid, u: kept.u };
}

/** Entries of KeptActivations.range for L layers: each kept hidden state, then each layer's wide intermediates. */
export function rangeSlots(L: number): number {
  return L + 1 + L * WIDE.length;
}

/** What range slot `i` (rangeSlots) reports on, for people. */
export function rangeSlotName(i: number, L: number): string {
  if (i < L) return `the hidden state entering layer ${i}`;
  if (i === L) return 'the final hidden state';
  const j = i - L - 1;
  return `layer ${Math.floor(j / WIDE.length)}'s ${WIDE[j % WIDE.length]}`;
}

/**
 * A layer's intermediates for T rows, with the rstd a backward reads (label: the buffers' prefix).
 * `wide` 'f16': those of [T, width ≥ hidden] in f16 (kept without checkpointing at half the bytes;
 * the layer runs on KeptActivations.staging and its backward on an f32 copy of them).
 */
export function layerActivations(gpu: Gpu, c: Qwen3VLTextConfig, T: number, rank: number, label: string, wide: 'f32' | 'f16' = 'f32'): LayerActivations {
  const { hiddenSize: H, numHeads: hq, numKvHeads: hkv, headDim: D, intermediateSize: I } = c;
  const f = (shape: number[], name: string) => gpu.tensor(shape, 'f32', `${label}.${name}`);
  const w = (shape: number[], name: WideName) => gpu.tensor(shape, wide, `${label}.${name}`);
  // q_raw, k_raw and v back to back where every start can be bound: q/k/v's product then writes
  // them as one (MatmulQ4F16.joins), as into DecoderWorkspace's.
  const widths = [hq * D, hkv * D, hkv * D];
  const qkv = stackable(gpu, widths, DTYPE_BYTES[wide], T) ? gpu.tensor([T * (hq + 2 * hkv) * D], wide, `${label}.qkv`) : null;
  const [qRaw, kRaw, v] = qkv ? stacked({ buffer: qkv, widths }, T) : [w([T, hq * D], 'q_raw'), w([T, hkv * D], 'k_raw'), w([T, hkv * D], 'v')];
  return {
    ...(qkv ? { qkv } : {}),
    A: {
      xn: w([T, H], 'xn_attn'), qRaw, kRaw,
      q: w([T, hq * D], 'q'), k: w([T, hkv * D], 'k'), v, attn: w([T, hq * D], 'attn'),
      rstd: { input: f([T], 'rstd_in'), q: f([T * hq], 'rstd_q'), k: f([T * hkv], 'rstd_k') },
    },
    M: { xn: w([T, H], 'xn_mlp'), gate: w([T, I], 'gate'), up: w([T, I], 'up'), act: w([T, I], 'act'), rstd: f([T], 'rstd_post') },
    lse: f([T, hq], 'lse'),
    hmid: w([T, H], 'hmid'),
    u: Object.fromEntries(LORA_PROJECTIONS.map((p) => [p, f([T, Math.max(1, rank)], `lora_u.${p}`)])) as Record<LoraProjection, Tensor>,
  };
}

export function releaseActivations(a: LayerActivations): void {
  const { rstd, ...attn } = a.A;
  const apart = a.qkv ? [attn.xn, attn.q, attn.k, attn.attn, a.qkv] : Object.values(attn);
  for (const t of [...apart, rstd!.input, rstd!.q, rstd!.k, ...Object.values(a.M), a.lse, a.hmid, ...Object.values(a.u)]) t.release();
}

/** The gradients a layer's backward passes through, for T rows; every layer reuses them. */
export interface LayerGradients {
  /** The residual stream's [T, hidden]: of a block's output on entry, of its input on return. */
  dh: Tensor;
  /** Of a block's normed input [T, hidden]. */
  dxn: Tensor;
  /** MLP: of silu(gate)·up, gate and up [T, intermediate]. */
  dact: Tensor;
  dgate: Tensor;
  dup: Tensor;
  /** Attention: of its output and of q [T, Hq·D]; of k and v [T, Hkv·D]; of the projections before the q/k norms. */
  dattn: Tensor;
  dq: Tensor;
  dk: Tensor;
  dv: Tensor;
  dqRaw: Tensor;
  dkRaw: Tensor;
  /** The attention backward's workspace (Attention.rowStatsShape). */
  rowStats: Tensor;
  /** LoRA's backward workspaces dy·B [T, widest rank], one for each adapter of a group (Lora.backwardGroup). */
  loraT: Tensor[];
}

/** What a backward over T rows writes besides the adapters' gradients (Decoder.backwardWorkspace). */
export interface BackwardWorkspace {
  grads: LayerGradients;
  /** The final norm's output and rstd, recomputed [T, hidden], [T]; a recomputed layer's residual stream. */
  h: Tensor;
  rstdFinal: Tensor;
  /** One set of layer intermediates each layer's recompute refills (gradient checkpointing), or null. */
  recompute: LayerActivations | null;
  /** A kept f16 hidden state expanded to f32 [T, hidden], for a forward that kept them in f16; else null. */
  input: Tensor | null;
  release(): void;
}

/** The backward of a training forward (`forward` with `keep`) over its packed rows. */
export interface BackwardArgs {
  /** Gradient of the forward's output rms(h_final) [T, hidden]. */
  dout: Tensor;
  /** What the forward kept; without its layers each layer is recomputed from its input. */
  keep: KeptActivations;
  /** The forward's rope table [T, D/2, 2] and packed rows. */
  cs: Tensor;
  cuSeqlens: Tensor;
  sharedPrefix?: number;
  lora: readonly LayerLora[] | null;
  /** The forward's lora_dropout (the same masks are regenerated). */
  dropout?: ForwardDropout;
  /** Vision LoRA: the gradient at the image rows gathered where the vision features enter,
   * grads[0] at h_0 (the embeddings) and grads[j] at h_j (DeepStack level j − 1's add). */
  visual?: { rows: Tensor; grads: readonly Tensor[] };
}

/** A kept u (KeptActivations.u) of an adapted projection. */
function keptU(us: LayerLoraU, proj: LoraProjection): Tensor {
  const u = us[proj];
  if (!u) throw new ShapeError('decoder', `the kept LoRA u have no ${proj}_proj, which has an adapter`);
  return u;
}

/** A typed view of the first elements of a workspace tensor. */
export function view(t: Tensor, shape: readonly number[], label = t.label): Tensor {
  const need = shape.reduce((a, b) => a * b, 1);
  if (need > t.numel) throw new ShapeError('decoder', `workspace '${t.label}' holds ${t.numel} elements, ${need} needed`);
  return new Tensor(t.buffer, shape, t.dtype, label, t.byteOffset);
}

/** Forwards of at least this many rows (prefill, scoring) submit once a layer; a decode step's
 * few rows keep one submit for the whole step (each costs several µs of host time). */
const FLUSH_MIN_ROWS = 64;

export class Decoder {
  private constructor(
    readonly gpu: Gpu,
    readonly config: Qwen3VLTextConfig,
    readonly weights: LanguageModelWeights,
    readonly ops: DecoderOps,
  ) {}

  /** `int8`: whether decode's GEMVs may take int8 x (ModelOptions.int8Decode). */
  static async create(gpu: Gpu, config: Qwen3VLTextConfig, weights: LanguageModelWeights, opts: { int8?: boolean } = {}): Promise<Decoder> {
    const maxK = Math.max(config.hiddenSize, config.intermediateSize, config.numHeads * config.headDim);
    const [projection, norms, rope, attention, act, embedding, elementwise, qkNormRope, tokenIds] = await Promise.all([
      Projection.create(gpu, { int8: opts.int8, maxK }),
      Norms.create(gpu),
      Rope.create(gpu, mropeLayout(config.ropeTheta, config.headDim, config.mropeSection)),
      Attention.create(gpu, { hq: config.numHeads, hkv: config.numKvHeads, headDim: config.headDim }),
      Activations.create(gpu),
      Embedding.create(gpu),
      Elementwise.create(gpu),
      QkNormRope.create(gpu),
      TokenIds.create(gpu),
    ]);
    for (const [l, w] of weights.layers.entries()) {
      await projection.joinRows([w.q, w.k, w.v], `decoder.layers.${l}.qkv`);
      await projection.joinRows([w.gate, w.up], `decoder.layers.${l}.gate_up`);
    }
    const { lora, loraGemv } = projection;
    const selfAttention = new SelfAttention({ attention, projection, norms, rope, qkNormRope }, { hq: config.numHeads, hkv: config.numKvHeads, headDim: config.headDim, eps: config.rmsNormEps });
    const activationF16 = ActivationF16.create(gpu);
    return new Decoder(gpu, config, weights, { projection, norms, rope, attention, selfAttention, act, embedding, elementwise, lora, loraGemv, tokenIds, activationF16 });
  }

  /** The products of one block's input, each with the layer's adapter of its projection when there is one. */
  private products(lora: LoraCall | null, outs: readonly [LinearWeight, Tensor, LoraProjection][]): Product[] {
    return outs.map(([w, y, proj]) => {
      const p = lora?.params[proj];
      if (!p) return { w, y };
      const d = lora!.dropout;
      return { w, y, lora: { p, u: lora!.u(proj), dropout: d && { p: d.p, seed: d.seed(proj), xd: d.xd(p) }, uKept: lora!.uKept } };
    });
  }

  /**
   * h += o_proj(attention(rope(q_norm(q)), rope(k_norm(k)), v)), q, k, v = q/k/v_proj(rms(h)).
   * `cs` is the rope table of the rows [T, D/2, 2]. `owed`: an update the layer before still owes
   * h (mlpBlock's return), taken in with this block's norm and o_proj.
   */
  attentionBlock(rec: Recorder, layer: number, w: DecoderLayerWeights, h: Tensor, b: AttentionBuffers, cs: Tensor, attend: AttendMode, lora: LoraCall | null, owed: Tensor | null = null): void {
    // Cached attention is inference (prefill and decode of generation): its GEMVs may take int8 x.
    const int8 = attend.kind === 'cached';
    const scratch = lora?.scratch;
    const qkv = this.products(lora, [[w.q, b.qRaw, 'q'], [w.k, b.kRaw, 'k'], [w.v, b.v, 'v']]);
    const normed = this.ops.projection.normProject(rec, h, { weight: w.inputNorm, eps: this.config.rmsNormEps, rstd: b.rstd?.input }, b.xn, qkv, { int8, scratch, owed });
    const [o] = this.products(lora, [[w.o, h, 'o']]);
    this.ops.selfAttention.forward(rec, { layer, qNorm: w.qNorm, kNorm: w.kNorm, b, cs, attend, qkv, gemv: normed.gemv, o, owed: normed.owed, scratch, int8 });
  }

  /**
   * One decoder layer on h: the attention block, then the MLP block (mlpBlock's `int8`,
   * `output` and `residual`), with h between them copied to `hmid` where a backward reads it. The
   * forward's loop and the backward's recompute both run it. `owed`: what the layer before still
   * owes h; returns what this one owes (mlpBlock).
   */
  private layer(rec: Recorder, l: number, w: DecoderLayerWeights, h: Tensor, A: AttentionBuffers, M: MlpBuffers, cs: Tensor, attend: AttendMode, lora: LoraCall | null, o: { hmid?: Tensor; int8?: boolean; output?: boolean; owed?: Tensor | null; residual?: Tensor }): Tensor | null {
    this.attentionBlock(rec, l, w, h, A, cs, attend, lora, o.owed ?? null);
    if (o.hmid) rec.copy(h, o.hmid);
    return this.mlpBlock(rec, w, h, M, lora, { int8: o.int8, output: o.output, residual: o.residual });
  }

  /**
   * h += down(silu(gate(n))·up(n)), n = rms(h). On the LoRA GEMV path the gate/up updates go
   * straight into the SwiGLU (b.gate and b.up then keep the base projections only). `int8`:
   * decode's int8 x. `output` false stops before down_proj, after the down adapter's u = act·Aᵀ:
   * a training backward's recompute has the layer's output and reads only what comes before it
   * (down_proj is a quarter of the layer's products). Given `residual` [rows, hidden] (a decode
   * step's layer), down's adapter update may be left there rather than added to h: it is
   * returned, owed to h (Projection.swigluDown), else null.
   */
  mlpBlock(rec: Recorder, w: DecoderLayerWeights, h: Tensor, b: MlpBuffers, lora: LoraCall | null, opts: { int8?: boolean; output?: boolean; residual?: Tensor } = {}): Tensor | null {
    const { int8 = false, output = true } = opts;
    const { projection } = this.ops;
    const call = { int8, scratch: lora?.scratch };
    const outs = this.products(lora, [[w.gate, b.gate, 'gate'], [w.up, b.up, 'up']]);
    const { gemv } = projection.normProject(rec, h, { weight: w.postAttentionNorm, eps: this.config.rmsNormEps, rstd: b.rstd }, b.xn, outs, call);
    const downP = lora?.params.down;
    if (!output) {
      if (gemv) throw new ShapeError('decoder.mlp', 'a block without its output keeps u for a backward: not on the LoRA GEMV path');
      this.ops.act.swiglu(rec, b.gate, b.up, b.act);
      const d = lora!.dropout;
      if (downP) this.ops.lora.down(rec, downP, b.act, lora!.u('down'), d?.xd(downP), { dropout: d?.p, seed: d?.seed('down'), uKept: lora!.uKept });
      return null;
    }
    // h += down(silu(gate)·up): the residual add is the down projection's accumulate.
    const [downOut] = this.products(lora, [[w.down, h, 'down']]);
    return projection.swigluDown(rec, gemv, b, downOut, { ...call, accumulate: true, residual: opts.residual });
  }

  /**
   * The backward of mlpBlock: dh, the gradient of its output, becomes that of its input `h` (h_mid).
   *   dact = dh·W_down (+LoRA) → SwiGLU' → dxn = dgate·W_gate + dup·W_up (+LoRA);  dh += RMSNorm'(dxn)
   */
  mlpBlockBackward(rec: Recorder, w: DecoderLayerWeights, h: Tensor, b: MlpBuffers, g: LayerGradients, lora: LoraCall | null): void {
    const { act, norms } = this.ops;
    this.inputGradients(rec, lora, [['down', w.down, g.dh]], b.act, g.dact, g.loraT);
    act.swigluBackward(rec, b.gate, b.up, g.dact, g.dgate, g.dup);
    this.inputGradients(rec, lora, [['gate', w.gate, g.dgate], ['up', w.up, g.dup]], b.xn, g.dxn, g.loraT);
    norms.rmsnormBackward(rec, g.dxn, h, w.postAttentionNorm, b.rstd!, g.dh, true);
  }

  /**
   * The backward of attentionBlock: dh, the gradient of its output, becomes that of its input `h`.
   *   dattn = dh·W_o (+LoRA) → attention' → RoPE' → q/k RMSNorm' → dxn = dq·W_q + dk·W_k + dv·W_v (+LoRA);
   *   dh += RMSNorm'(dxn)
   */
  attentionBlockBackward(rec: Recorder, w: DecoderLayerWeights, h: Tensor, b: AttentionBuffers, cs: Tensor, attend: PackedAttend, g: LayerGradients, lora: LoraCall | null): void {
    const { norms } = this.ops;
    this.inputGradients(rec, lora, [['o', w.o, g.dh]], b.attn, g.dattn, g.loraT);
    this.ops.selfAttention.backward(rec, { qNorm: w.qNorm, kNorm: w.kNorm, b, cs, attend, dattn: g.dattn, rowStats: g.rowStats, dq: g.dq, dk: g.dk, dqRaw: g.dqRaw, dkRaw: g.dkRaw, dv: g.dv });
    this.inputGradients(rec, lora, [['q', w.q, g.dqRaw], ['k', w.k, g.dkRaw], ['v', w.v, g.dv]], b.xn, g.dxn, g.loraT);
    norms.rmsnormBackward(rec, g.dxn, h, w.inputNorm, b.rstd!.input, g.dh, true);
  }

  /**
   * dx = Σ dy·W over the projections of one input x (`outs`: each with its weight and its
   * output's gradient), with each adapter's backward: dA, dB, and its dy·B·A·s in dx (its input's
   * dropout mask applied). Each adapter takes its own workspace of `t`.
   */
  private inputGradients(rec: Recorder, lora: LoraCall | null, outs: readonly [LoraProjection, LinearWeight, Tensor][], x: Tensor, dx: Tensor, t: readonly Tensor[]): void {
    const T = x.shape[0];
    const d = lora?.dropout;
    let adapters = 0;
    const items = outs.map(([proj, w, dy]): BackwardProduct => {
      const p = lora?.params[proj];
      if (!lora || !p) return { w, dy };
      const dropout = d && { p: d.p, seed: d.seed(proj), xd: d.xd(p) };
      return { w, dy, lora: { p, u: lora.u(proj), t: view(t[adapters++], [T, p.r]), dropout } };
    });
    this.ops.projection.backwardProducts(rec, x, dx, items);
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
    if (block.kind === 'q4') this.ops.projection.q4.gather(rec, ids, block.w, out);
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
    if (a.keep && (a.attend.kind !== 'packed' || a.keep.inputs.length !== c.numLayers + 1)) throw new ShapeError('decoder', `a kept forward attends over its packed rows and keeps ${c.numLayers + 1} hidden states`);
    if (a.keep) this.checkKeep(a.keep);
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
    const keep = a.keep;
    // Kept for a backward or dropped out: u goes to the layer's own tensors (or the shared
    // scratch, recomputed later), never through the inference-only LoRA GEMV.
    const scratch = keep || a.dropout ? undefined : { wide: b.loraWide, parts: b.loraParts };
    let owed: Tensor | null = null;
    this.weights.layers.forEach((w, l) => {
      const held = keep?.layers?.[l];
      // Wide intermediates kept in f16: the layer runs on the f32 staging set, rounded after it.
      const kept = held && held.hmid.dtype === 'f16' ? withWide(held, keep!.staging!) : held;
      const adapters = a.lora?.[l];
      const u = (proj: LoraProjection): Tensor => {
        const r = adapters![proj]!.r;
        if (kept) return view(kept.u[proj], [T, r]);
        return keep?.u ? view(keptU(keep.u[l], proj), [T, r]) : b.loraU(r, GROUP_SLOT[proj]);
      };
      const lora = adapters ? { params: adapters, u, scratch, dropout: a.dropout && layerDropout(a.dropout, l) } : null;
      if (keep) this.keepState(rec, b.h, keep, l);
      const lse = kept?.lse ?? keep?.lse?.[l];
      const attend = lse && a.attend.kind === 'packed' ? { ...a.attend, lse } : a.attend;
      const ds = a.visual?.deepstack[l];
      // A decode step's layer may leave its down_proj update owed to the next layer (mlpBlock), the
      // last to the final norm; one before a DeepStack add settles its own.
      const residual = scratch && !ds && (l + 1 < c.numLayers || Norms.takesAdd(c.hiddenSize)) ? b.residual : undefined;
      owed = this.layer(rec, l, w, b.h, kept?.A ?? b.attn, kept?.M ?? b.mlp, b.cs, attend, lora, { hmid: kept?.hmid, int8: a.attend.kind === 'cached', owed, residual });
      if (held && kept !== held) this.keepWide(rec, kept!, held, keep!.range!, l);
      if (ds) this.ops.embedding.deepstackAdd(rec, ds, a.visual!.rows, b.h);
      // A prefill or a training forward submits each layer: the GPU starts on it while the next is recorded.
      if (T >= FLUSH_MIN_ROWS || keep) rec.flush();
    });
    this.ops.selfAttention.finish(rec, a.attend, T);
    if (keep) this.keepState(rec, b.h, keep, c.numLayers);
    // What the last layer still owes h goes in with the final norm (h itself is read no more).
    this.ops.norms.rmsnorm(rec, b.h, this.weights.finalNorm, b.out, c.rmsNormEps, undefined, owed);
    return b.out;
  }

  /** A kept forward's buffers agree: f16 ones come with a range buffer, f16 layers with an f32 staging set. */
  private checkKeep(keep: KeptActivations): void {
    const L = this.config.numLayers;
    if (keep.u && keep.u.length !== L) throw new ShapeError('decoder', `kept LoRA u for ${keep.u.length} layers, the model has ${L}`);
    if (keep.lse && keep.lse.length !== L) throw new ShapeError('decoder', `kept lse for ${keep.lse.length} layers, the model has ${L}`);
    const f16Layers = keep.layers?.some((a) => a.hmid.dtype === 'f16') ?? false;
    if (!(f16Layers || keep.inputs.some((t) => t.dtype === 'f16'))) return;
    if (keep.range?.dtype !== 'u32' || keep.range.numel !== rangeSlots(L)) throw new ShapeError('decoder', `activations kept in f16 need a u32 range buffer of ${rangeSlots(L)} entries`);
    if (f16Layers && keep.staging?.hmid.dtype !== 'f32') throw new ShapeError('decoder', 'layer intermediates kept in f16 need an f32 staging set to run on');
  }

  /** Layer l's wide intermediates, computed into `from` (f32), rounded into `to` (f16). */
  private keepWide(rec: Recorder, from: LayerActivations, to: LayerActivations, range: Tensor, l: number): void {
    const src = wideOf(from);
    const dst = wideOf(to);
    const L = this.config.numLayers;
    WIDE.forEach((name, j) => this.ops.activationF16.pack(rec, src[name], dst[name], range, L + 1 + l * WIDE.length + j));
  }

  /** Layer intermediates as the backward reads them: `kept` itself, or with its f16 wide ones expanded into `ws.recompute`. */
  private keptLayer(rec: Recorder, ws: BackwardWorkspace, kept: LayerActivations): LayerActivations {
    if (kept.hmid.dtype !== 'f16') return kept;
    if (!ws.recompute) throw new ShapeError('decoder.backward', 'layer intermediates kept in f16; the backward workspace has no f32 set to expand them into');
    const src = wideOf(kept);
    const dst = wideOf(ws.recompute);
    for (const name of WIDE) this.ops.activationF16.unpack(rec, src[name], dst[name]);
    return withWide(kept, ws.recompute);
  }

  /** Hidden state i of a kept forward: copied, or rounded to f16 where the keep holds f16. */
  private keepState(rec: Recorder, h: Tensor, keep: KeptActivations, i: number): void {
    const dst = keep.inputs[i];
    if (dst.dtype === 'f16') this.ops.activationF16.pack(rec, h, dst, keep.range!, i);
    else rec.copy(h, dst);
  }

  /** Kept hidden state `h` as f32: itself, or expanded from f16 into the workspace (valid until the next call). */
  private keptState(rec: Recorder, ws: BackwardWorkspace, h: Tensor): Tensor {
    if (h.dtype !== 'f16') return h;
    if (!ws.input) throw new ShapeError('decoder.backward', `'${h.label}' is kept in f16; the backward workspace has no f32 state to expand it into`);
    this.ops.activationF16.unpack(rec, h, ws.input);
    return ws.input;
  }

  /**
   * Buffers of a backward over T rows with LoRA rank up to `rank`; `recompute`: the forward kept
   * no layers, or kept their wide intermediates in f16 (the f32 set they are expanded into);
   * `keptF16`: it kept its hidden states in f16.
   */
  backwardWorkspace(T: number, rank: number, recompute: boolean, keptF16 = false): BackwardWorkspace {
    const gpu = this.gpu;
    const { hiddenSize: H, numHeads: hq, numKvHeads: hkv, headDim: D, intermediateSize: I } = this.config;
    const f = (shape: number[], label: string) => gpu.tensor(shape, 'f32', `decoder.backward.${label}`);
    const grads: LayerGradients = {
      dh: f([T, H], 'dh'), dxn: f([T, H], 'dxn'),
      dact: f([T, I], 'dact'), dgate: f([T, I], 'dgate'), dup: f([T, I], 'dup'),
      dattn: f([T, hq * D], 'dattn'), dq: f([T, hq * D], 'dq'), dk: f([T, hkv * D], 'dk'), dv: f([T, hkv * D], 'dv'),
      dqRaw: f([T, hq * D], 'dq_raw'), dkRaw: f([T, hkv * D], 'dk_raw'),
      rowStats: f(Attention.rowStatsShape(T, hq), 'row_stats'),
      loraT: Array.from({ length: LORA_GROUP_MAX }, (_, i) => f([T, Math.max(1, rank)], `lora_t${i}`)),
    };
    const h = f([T, H], 'h');
    const rstdFinal = f([T], 'rstd_final');
    const shared = recompute ? layerActivations(gpu, this.config, T, rank, 'decoder.backward') : null;
    const input = keptF16 ? f([T, H], 'h_input') : null;
    return {
      grads,
      h,
      rstdFinal,
      recompute: shared,
      input,
      release: () => {
        const { loraT, ...rest } = grads;
        for (const t of [...Object.values(rest), ...loraT, h, rstdFinal]) t.release();
        if (shared) releaseActivations(shared);
        input?.release();
      },
    };
  }

  /**
   * Record the backward of a training forward from d rms(h_final) into the adapters' gradients
   * (dA, dB accumulate): the final norm's, then one reverse loop over the layers, each the
   * backward of its MLP block, then of its attention block. Without kept layers (gradient
   * checkpointing) each layer is first rerun from its input with the forward's masks, keeping
   * what its backward reads. The DeepStack add is a residual add of frozen features: the gradient
   * passes through it.
   */
  backward(rec: Recorder, ws: BackwardWorkspace, a: BackwardArgs): void {
    const c = this.config;
    const L = c.numLayers;
    const T = a.dout.shape[0];
    const { inputs, layers } = a.keep;
    const g = ws.grads;
    if (inputs.length !== L + 1 || (!layers && !ws.recompute)) throw new ShapeError('decoder.backward', `a backward reads ${L + 1} hidden states, and every layer's intermediates or a workspace to recompute them`);
    const hFinal = this.keptState(rec, ws, inputs[L]);
    this.ops.norms.rmsnorm(rec, hFinal, this.weights.finalNorm, ws.h, c.rmsNormEps, ws.rstdFinal);
    this.ops.norms.rmsnormBackward(rec, a.dout, hFinal, this.weights.finalNorm, ws.rstdFinal, g.dh, false);
    const gatherVisual = (level: number) => {
      if (a.visual && level < a.visual.grads.length) this.ops.embedding.gather(rec, g.dh, a.visual.rows, a.visual.grads[level]);
    };
    for (let l = L - 1; l >= 0; l--) {
      gatherVisual(l + 1); // dh is the gradient of h_{l+1}, DeepStack level l's add included
      const w = this.weights.layers[l];
      const kept = layers ? this.keptLayer(rec, ws, layers[l]) : ws.recompute!;
      const keptLse = layers ? undefined : a.keep.lse?.[l];
      const attend = { kind: 'packed', cuSeqlens: a.cuSeqlens, sharedPrefix: a.sharedPrefix, lse: keptLse ?? kept.lse, lseKnown: !!keptLse, recomputed: !layers } as const;
      const ad = a.lora?.[l];
      // A recompute takes the u its forward kept (KeptActivations.u), where it kept them.
      const us = layers ? undefined : a.keep.u?.[l];
      const u = (proj: LoraProjection) => view(us ? keptU(us, proj) : kept.u[proj], [T, ad![proj]!.r]);
      const lora = ad ? { params: ad, u, dropout: a.dropout && layerDropout(a.dropout, l), uKept: !!us } : null;
      const input = this.keptState(rec, ws, inputs[l]);
      if (!layers) {
        // The forward's layer again; h_{l+1} is kept, so its MLP stops before down_proj.
        rec.copy(input, ws.h);
        this.layer(rec, l, w, ws.h, kept.A, kept.M, a.cs, attend, lora, { hmid: kept.hmid, output: false });
      }
      this.mlpBlockBackward(rec, w, kept.hmid, kept.M, g, lora);
      this.attentionBlockBackward(rec, w, input, kept.A, a.cs, attend, g, lora);
      rec.flush(); // a layer a submit, as in the forward
    }
    gatherVisual(0);
  }
}

type WorkspaceViews = ReturnType<DecoderWorkspace['makeViews']>;

/**
 * Whether outputs of `widths` columns can lie back to back in one buffer of `rows` rows: every
 * part's start on the binding alignment at `alignRows` rows (any row count that is a multiple of
 * it then aligns too), the whole within one binding (apart where it would pass it: long prefills,
 * large micro-batches). `bytes`: an element's.
 */
function stackable(gpu: Gpu, widths: readonly number[], bytes: number, rows: number, alignRows = rows): boolean {
  const { minStorageBufferOffsetAlignment: align, maxStorageBufferBindingSize, maxBufferSize } = gpu.limits;
  const total = bytes * rows * widths.reduce((a, b) => a + b, 0);
  return widths.every((w) => (bytes * alignRows * w) % align === 0) && total <= Math.min(maxStorageBufferBindingSize, maxBufferSize);
}

/** [T, width] views of `s.buffer` (of its element type), one per width, back to back. */
function stacked(s: { buffer: Tensor; widths: number[] }, T: number): Tensor[] {
  const bytes = DTYPE_BYTES[s.buffer.dtype];
  let at = s.buffer.byteOffset;
  return s.widths.map((w) => {
    const t = new Tensor(s.buffer.buffer, [T, w], s.buffer.dtype, s.buffer.label, at);
    at += bytes * T * w;
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
  /** Floats between the slots of lora_u: [maxRows, rank] rounded up to the storage offset alignment. */
  private readonly uSlot: number;

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
    // Views of any T ≤ R rows: each width's start aligned at one row.
    const align = gpu.limits.minStorageBufferOffsetAlignment;
    this.uSlot = Math.ceil((4 * R * Math.max(1, rank)) / align) * (align / 4);
    const qkvWidths = [hq * D, hkv * D, hkv * D];
    this.qkv = stackable(gpu, qkvWidths, 4, R, 1) ? { buffer: f(R * (hq + 2 * hkv) * D, 'qkv'), widths: qkvWidths } : null;
    this.gateUp = stackable(gpu, [I, I], 4, R, 1) ? { buffer: f(2 * R * I, 'gate_up'), widths: [I, I] } : null;
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
      // u of up to three adapters at once: stacked [R, 3·rank] (q/k/v on the LoRA GEMV path), or
      // one slot each starting on the binding alignment (a group of Lora.forwardGroup).
      loraU: f(LORA_GROUP_MAX * this.uSlot, 'lora_u'),
      // Partial u of down_proj (one per 64 columns of act) or of o_proj (one per head), on that path.
      loraParts: f(R * Math.max(Math.ceil(I / 64), hq) * Math.max(1, rank), 'lora_parts'),
      // The update a decode step's layer leaves owed to h (mlpBlock's residual).
      residual: f(Math.min(R, LORA_GEMV_MAX_ROWS) * H, 'residual'),
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
      /** [T, hidden] for the few rows of a decode step (LoRA GEMV path), else undefined. */
      residual: T <= LORA_GEMV_MAX_ROWS ? view(t.residual, [T, H]) : undefined,
      /** u [T, r] of the adapter in slot `slot` of its group (GROUP_SLOT): apart from the others'. */
      loraU: (r: number, slot: number) => {
        if (r > this.rank) throw new ShapeError('decoder', `LoRA rank ${r} above the workspace's ${this.rank}`);
        const key = r * LORA_GROUP_MAX + slot;
        const at = t.loraU.byteOffset + 4 * slot * this.uSlot;
        return uViews.get(key) ?? uViews.set(key, new Tensor(t.loraU.buffer, [T, r], 'f32', t.loraU.label, at)).get(key)!;
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
