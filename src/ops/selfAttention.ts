// A decoder layer's self-attention from its q/k/v projections on: h += o_proj(attention(rope(q_norm(q)),
// rope(k_norm(k)), v)), and the backward of a training forward down to the projections' gradients.
// The model calls `forward` once a layer; which kernels run is chosen here, from how the layer
// attends (AttendMode) and whether a backward reads the norms' rstd:
//   training (rstd kept)    q/k RMSNorm keeping rstd, RoPE; attention over the packed rows with lse
//   packed inference        q/k norm and RoPE in one dispatch; attention over the packed rows
//   cached (generation)     q/k norm, RoPE and the KV-cache append in one dispatch (with the LoRA
//                           GEMV's q/k/v updates where the device binds them); attention over the
//                           cache, whose split-K combine (or unsplit kernel, for one key chunk)
//                           may start o_proj's LoRA update (a fold)
import type { Recorder, Tensor } from '../gpu';
import type { Attention, AttentionSplit } from './attention';
import type { KvCache } from './kvCache';
import type { Norms } from './norms';
import type { LoraGemvCall, LoraScratch, Product, Projection } from './projection';
import type { QkNormRope } from './qkNormRope';
import type { Rope } from './rope';

/** How a layer attends: over its own packed rows, or through the KV cache. */
export type AttendMode =
  | { kind: 'packed'; cuSeqlens: Tensor; lse?: Tensor; lseKnown?: boolean; recomputed?: boolean; sharedPrefix?: number }
  | { kind: 'cached'; cache: KvCache; slot0: number; count: number; split?: AttentionSplit };

/** A training forward's attention: over its packed rows, keeping the log-sum-exp [T, Hq] for the backward. */
export type PackedAttend = Extract<AttendMode, { kind: 'packed' }> & { lse: Tensor };

/** Buffers of one layer's attention block for T rows. */
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

export interface SelfAttentionConfig {
  hq: number;
  hkv: number;
  headDim: number;
  eps: number;
}

export interface SelfAttentionArgs {
  layer: number;
  /** q_norm and k_norm weights [D]. */
  qNorm: Tensor;
  kNorm: Tensor;
  /** qRaw, kRaw and v hold the projections (less the updates `gemv` still owes); the rest is written. */
  b: AttentionBuffers;
  /** The rope table of the rows [T, D/2, 2]. */
  cs: Tensor;
  attend: AttendMode;
  /** The q, k, v products just made, and the LoRA GEMV call whose up products they still owe, or null. */
  qkv: readonly Product[];
  gemv: LoraGemvCall | null;
  /** o_proj, accumulated into the residual stream. */
  o: Product;
  /** An update still owed to the residual stream (NormProjected.owed), added with o_proj's output. */
  owed?: Tensor | null;
  /** Inference: the LoRA scratch, and whether the 4-bit GEMVs take int8 x. */
  scratch?: LoraScratch;
  int8: boolean;
}

/** The backward of a training forward over packed rows (the buffers hold what it kept). */
export interface SelfAttentionBackwardArgs {
  qNorm: Tensor;
  kNorm: Tensor;
  b: AttentionBuffers;
  cs: Tensor;
  /** The forward's packed rows and its log-sum-exp [T, Hq]. */
  attend: PackedAttend;
  /** Gradient of the attention output (o_proj's input) [T, Hq·D]. */
  dattn: Tensor;
  /** Workspaces: Attention.rowStatsShape, and the gradients of q, k after RoPE. */
  rowStats: Tensor;
  dq: Tensor;
  dk: Tensor;
  /** Outputs, overwritten: the gradients of q_proj's, k_proj's and v_proj's outputs. */
  dqRaw: Tensor;
  dkRaw: Tensor;
  dv: Tensor;
}

export interface SelfAttentionOps {
  attention: Attention;
  projection: Projection;
  norms: Norms;
  rope: Rope;
  qkNormRope: QkNormRope;
}

export class SelfAttention {
  readonly scale: number;

  constructor(
    private readonly ops: SelfAttentionOps,
    readonly config: SelfAttentionConfig,
  ) {
    this.scale = 1 / Math.sqrt(config.headDim);
  }

  /** h += o_proj(attention(...)) given the q/k/v projections; in cached mode k and v go into the cache first. */
  forward(rec: Recorder, a: SelfAttentionArgs): void {
    const { attention, projection } = this.ops;
    const { b, attend } = a;
    this.qkNormRope(rec, a);
    if (attend.kind === 'packed') {
      if (a.owed) projection.settle(rec, a.owed, a.o.y);
      attention.forward(rec, { q: b.q, k: b.k, v: b.v, cuSeqlens: attend.cuSeqlens, o: b.attn, lse: attend.lse, lseKnown: attend.lseKnown, causal: true, scale: this.scale, sharedPrefix: attend.sharedPrefix });
      projection.project(rec, b.attn, [a.o], { int8: a.int8, scratch: a.scratch, accumulate: true });
      return;
    }
    // On the LoRA GEMV path the split combine (or the unsplit decode kernel, for one key chunk)
    // starts o_proj's down product, one partial a head; o_proj's GEMV finishes the update.
    const T = b.q.shape[0];
    const fold = projection.attentionFold(a.gemv, a.o, T, this.config.hq, a.scratch, { quantizes: attention.foldQuantizes, int8: a.int8 });
    const combineFold = fold && { A: fold.p.A, r: fold.p.r, parts: fold.parts, quantized: fold.quantized };
    const folded = attention.forwardCached(rec, b.q, attend.cache, a.layer, b.attn, { slot0: attend.slot0, count: attend.count, scale: this.scale, split: attend.split, fold: combineFold });
    if (folded) {
      projection.projectFolded(rec, b.attn, a.o, fold!, a.int8, { add: a.owed });
      return;
    }
    if (a.owed) projection.settle(rec, a.owed, a.o.y);
    projection.project(rec, b.attn, [a.o], { int8: a.int8, scratch: a.scratch, accumulate: true });
  }

  /** After a forward's last layer: the cache's slots hold the forward's rows. */
  finish(rec: Recorder, attend: AttendMode, rows: number): void {
    if (attend.kind === 'cached') attend.cache.advance(rec, attend.slot0, attend.count, rows / attend.count);
  }

  /**
   * q, k = rope(q_norm(q_proj)), rope(k_norm(k_proj)), with the q/k/v LoRA updates still owed by
   * the LoRA GEMV path, and in cached mode k and v appended to the cache. Training keeps the
   * norms' rstd (separate dispatches); inference takes one fused dispatch.
   */
  private qkNormRope(rec: Recorder, a: SelfAttentionArgs): void {
    const { hq, hkv, headDim: D, eps } = this.config;
    const { b, cs, attend, gemv, layer } = a;
    const T = b.q.shape[0];
    const { norms, rope, qkNormRope } = this.ops;
    const { loraGemv } = this.ops.projection;
    const [qRaw, kRaw, qWeight, kWeight, q] = [b.qRaw, b.kRaw, a.qNorm, a.kNorm, b.q];
    if (b.rstd) {
      norms.rmsnorm(rec, qRaw.reshape([T * hq, D]), qWeight, q.reshape([T * hq, D]), eps, b.rstd.q);
      norms.rmsnorm(rec, kRaw.reshape([T * hkv, D]), kWeight, b.k.reshape([T * hkv, D]), eps, b.rstd.k);
      rope.apply(rec, cs, q, hq);
      rope.apply(rec, cs, b.k, hkv);
      if (attend.kind === 'cached') attend.cache.append(rec, layer, b.k, b.v, attend.slot0, attend.count);
    } else if (attend.kind === 'cached') {
      // No rstd to keep (inference): one dispatch for the q/k/v LoRA updates, the norms, RoPE and
      // the cache append, as far as the device binds enough storage buffers for it.
      const { cache, slot0, count } = attend;
      const fused = gemv && qkNormRope.writesCache(true) ? { q: gemv.ps[0], k: gemv.ps[1], v: gemv.ps[2], u: gemv.u } : undefined;
      if (gemv && !fused) loraGemv.up(rec, gemv.ps, gemv.u, a.qkv.map((o) => o.y));
      if (qkNormRope.writesCache(false)) {
        qkNormRope.applyToCache(rec, { qRaw, kRaw, qWeight, kWeight, cs, q, v: b.v, hq, hkv, eps, cache, layer, slot0, count, lora: fused });
      } else {
        qkNormRope.apply(rec, { qRaw, kRaw, qWeight, kWeight, cs, q, k: b.k, hq, hkv, eps });
        cache.append(rec, layer, b.k, b.v, slot0, count);
      }
    } else {
      if (gemv) loraGemv.up(rec, gemv.ps, gemv.u, a.qkv.map((o) => o.y));
      qkNormRope.apply(rec, { qRaw, kRaw, qWeight, kWeight, cs, q, k: b.k, hq, hkv, eps });
    }
  }

  /** dattn → attention' (from the saved log-sum-exp) → RoPE' → q/k RMSNorm': the gradients of the q, k, v projections. */
  backward(rec: Recorder, a: SelfAttentionBackwardArgs): void {
    const { hq, hkv, headDim: D } = this.config;
    const { norms, rope, attention } = this.ops;
    const { b, cs, attend } = a;
    const T = b.q.shape[0];
    attention.backward(rec, {
      q: b.q, k: b.k, v: b.v, o: b.attn, lse: attend.lse, dout: a.dattn, cuSeqlens: attend.cuSeqlens, sharedPrefix: attend.sharedPrefix,
      causal: true, scale: this.scale, rowStats: a.rowStats, dq: a.dq, dk: a.dk, dv: a.dv, inputsOfLastForward: attend.recomputed,
    });
    rope.applyBackward(rec, cs, a.dq, hq);
    rope.applyBackward(rec, cs, a.dk, hkv);
    norms.rmsnormBackward(rec, a.dq.reshape([T * hq, D]), b.qRaw.reshape([T * hq, D]), a.qNorm, b.rstd!.q, a.dqRaw.reshape([T * hq, D]), false);
    norms.rmsnormBackward(rec, a.dk.reshape([T * hkv, D]), b.kRaw.reshape([T * hkv, D]), a.kNorm, b.rstd!.k, a.dkRaw.reshape([T * hkv, D]), false);
  }
}
