// The training half of src/rl/policy.ts's Policy for Qwen3-VL: per-token log-probs and entropies
// of G completions of one prompt, and the backward of a loss on them into the LoRA parameters.
//
// Layout: the G sequences prompt+completion_i are packed row by row ([T, hidden], T = Σ lengths;
// attention stays inside each through cu_seqlens). The rows that predict completion tokens are
// gathered into a [G, maxLen] grid (padding rows point outside the packed rows, so they gather
// zeros and scatter nowhere) before the final norm's output meets the LM head.
//
// Memory is bounded by recomputation (activation checkpointing per layer, the default): the
// forward keeps only each layer's input h_l [T, hidden]; the backward reruns layer l from h_l,
// keeping that one layer's intermediates, and walks back through it. Without checkpointing the
// forward keeps every layer's intermediates (LayerActivations) and the backward only walks back:
//   MLP:        dact = dh·W_down (+LoRA)  → SwiGLU' → dxn2 = dgate·W_gate + dup·W_up (+LoRA)
//               dh  += RMSNorm'(dxn2)                              (h_mid = h_l + attention)
//   attention:  dattn = dh·W_o (+LoRA) → attention' (from the saved log-sum-exp) → RoPE'
//               → q/k RMSNorm' → dxn1 = dq·W_q + dk·W_k + dv·W_v (+LoRA)
//               dh  += RMSNorm'(dxn1)                              (→ gradient of h_l)
// The DeepStack add is a residual add of frozen features: the gradient passes through it.
import { ShapeError, type Tensor } from '../gpu';
import { Attention } from '../ops/attention';
import { LogProb } from '../ops/logprob';
import type { LoraParams } from '../ops/lora';
import type { Completion, ForwardOptions, Policy, PreparedPrompt, SamplingOptions, SequenceBatch, TrainingForward } from '../rl/policy';
import { LORA_PROJECTIONS, view, type AttentionBuffers, type LayerLora, type LoraProjection, type MlpBuffers, type VisualInputs } from './decoder';
import { concat, releaseVisual, type ImageBatch, type Qwen3VL } from './qwen3vl';

/** Where the packed rows and the completion grid come from, built on the CPU. */
export interface PackedBatch {
  /** Token ids of all sequences, back to back [T]. */
  ids: Int32Array;
  /** [3, T] M-RoPE positions, each sequence's own (spec B4). */
  positions: Int32Array;
  /** [G + 1] row offsets of the sequences. */
  cuSeqlens: Uint32Array;
  /** [G·maxLen]: the packed row whose next-token distribution scores completion token j of sequence i (0xffffffff: padding). */
  predictRows: Uint32Array;
  /** [G·maxLen]: that token (0 on padding). */
  targets: Uint32Array;
  /** [G·maxLen]: 1 on completion tokens. */
  mask: Float32Array;
  maxLen: number;
  /** Packed rows of the image tokens, sequence after sequence (the prompt's visual rows repeated G times). */
  visualRows: Uint32Array;
}

const PAD_ROW = 0xffffffff;

/** What a layer's backward reads of its forward: kept per layer, or one set refilled by recomputing. */
interface LayerActivations {
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
}

function layerActivations(gpu: Qwen3VL['gpu'], c: Qwen3VL['config']['text'], T: number, rank: number, label: string): LayerActivations {
  const { hiddenSize: H, numHeads: hq, numKvHeads: hkv, headDim: D, intermediateSize: I } = c;
  const f = (shape: number[], name: string) => gpu.tensor(shape, 'f32', `${label}.${name}`);
  return {
    A: {
      xn: f([T, H], 'xn_attn'), qRaw: f([T, hq * D], 'q_raw'), kRaw: f([T, hkv * D], 'k_raw'),
      q: f([T, hq * D], 'q'), k: f([T, hkv * D], 'k'), v: f([T, hkv * D], 'v'), attn: f([T, hq * D], 'attn'),
      rstd: { input: f([T], 'rstd_in'), q: f([T * hq], 'rstd_q'), k: f([T * hkv], 'rstd_k') },
    },
    M: { xn: f([T, H], 'xn_mlp'), gate: f([T, I], 'gate'), up: f([T, I], 'up'), act: f([T, I], 'act'), rstd: f([T], 'rstd_post') },
    lse: f([T, hq], 'lse'),
    hmid: f([T, H], 'hmid'),
    u: Object.fromEntries(LORA_PROJECTIONS.map((p) => [p, f([T, Math.max(1, rank)], `lora_u.${p}`)])) as Record<LoraProjection, Tensor>,
  };
}

function releaseActivations(a: LayerActivations): void {
  const { rstd, ...attn } = a.A;
  for (const t of [...Object.values(attn), rstd!.input, rstd!.q, rstd!.k, ...Object.values(a.M), a.lse, a.hmid, ...Object.values(a.u)]) t.release();
}

/**
 * Pack `completions` after one prompt. The prompt's positions are its rope index (spec B4); a
 * completion token at cache position p gets p + ropeDelta on all three axes, exactly as during
 * sampling, whatever the token is (a sampled <|image_pad|> is text here, not an image slot).
 */
export function packBatch(
  promptIds: Int32Array,
  completions: readonly (readonly number[])[],
  imageTokenId: number,
  prompt: { positions: Int32Array; ropeDelta: number },
): PackedBatch {
  const G = completions.length;
  if (G < 1) throw new ShapeError('train.pack', 'no completions');
  const P = promptIds.length;
  const maxLen = Math.max(1, ...completions.map((c) => c.length));
  const T = completions.reduce((a, c) => a + P + c.length, 0);
  const ids = new Int32Array(T);
  const positions = new Int32Array(3 * T);
  const cuSeqlens = new Uint32Array(G + 1);
  const predictRows = new Uint32Array(G * maxLen).fill(PAD_ROW);
  const targets = new Uint32Array(G * maxLen);
  const mask = new Float32Array(G * maxLen);
  const promptVisual: number[] = [];
  promptIds.forEach((id, i) => id === imageTokenId && promptVisual.push(i));
  const visualRows = new Uint32Array(G * promptVisual.length);
  let off = 0;
  completions.forEach((c, i) => {
    const seq = new Int32Array(P + c.length);
    seq.set(promptIds);
    seq.set(c, P);
    ids.set(seq, off);
    const n = seq.length;
    for (let a = 0; a < 3; a++) {
      positions.set(prompt.positions.subarray(a * P, (a + 1) * P), a * T + off);
      for (let j = 0; j < c.length; j++) positions[a * T + off + P + j] = P + j + prompt.ropeDelta;
    }
    cuSeqlens[i] = off;
    c.forEach((tok, j) => {
      predictRows[i * maxLen + j] = off + P + j - 1;
      targets[i * maxLen + j] = tok;
      mask[i * maxLen + j] = 1;
    });
    promptVisual.forEach((r, j) => (visualRows[i * promptVisual.length + j] = off + r));
    off += n;
  });
  cuSeqlens[G] = T;
  return { ids, positions, cuSeqlens, predictRows, targets, mask, maxLen, visualRows };
}

/** What a `train` forward keeps for the backward (released by it). */
interface Saved {
  batch: PackedBatch;
  temperature: number;
  lora: readonly LayerLora[] | null;
  /** The rope table of the packed rows [T, D/2, 2] (`train` only; the forward's workspace itself is released). */
  cs: Tensor | null;
  /** Inputs of layer 0..L-1 and the final hidden state (before the final norm): L+1 of [T, hidden]. */
  hs: Tensor[];
  /** Every layer's intermediates, without gradient checkpointing; null: the backward recomputes. */
  layers: LayerActivations[] | null;
  ids: Tensor;
  cu: Tensor;
  predictRows: Tensor;
  targets: Tensor;
  /** Final-norm outputs of the predicting rows [G·maxLen, hidden]. */
  hsel: Tensor;
  logp: Tensor;
  entropy: Tensor;
  stats: Tensor;
  mask: Tensor;
  visual: VisualInputs | null;
}

export class Qwen3VLPolicy implements Policy {
  private logprob: LogProb | null = null;
  private saved: Saved | null = null;
  /** The last forward's outputs, released by the next forward (TrainingForward's contract). */
  private outputs: Tensor[] = [];

  constructor(readonly model: Qwen3VL) {}

  get lora(): readonly LoraParams[] {
    return this.model.lora;
  }

  generate(prompt: PreparedPrompt, numSamples: number, opts: SamplingOptions): Promise<Completion[]> {
    return this.model.generate(prompt, numSamples, opts);
  }

  private async logprobFor(rows: number): Promise<LogProb> {
    if (!this.logprob || this.logprob.maxTokens < rows) {
      this.logprob?.release();
      this.logprob = await LogProb.create(this.model.gpu, { maxTokens: rows, chunk: Math.min(8192, this.model.head.vocab) });
    }
    return this.logprob;
  }

  /** The prompt's images through the vision tower, repeated for every packed sequence. */
  private async visualFor(prompt: PreparedPrompt, rows: Uint32Array, G: number): Promise<VisualInputs | null> {
    if (prompt.images.length === 0) return null;
    const images: ImageBatch = { pixelValues: concat(prompt.images.map((i) => i.pixelValues)), gridThw: prompt.images.map((i) => i.gridThw) };
    const one = await this.model.encodeImages(prompt.inputIds, images);
    const gpu = this.model.gpu;
    const J = one.rows.numel;
    const H = this.model.config.text.hiddenSize;
    const repeat = (t: Tensor, label: string) => {
      const out = gpu.tensor([G * J, H], 'f32', label);
      const rec = gpu.recorder('visual.repeat');
      for (let i = 0; i < G; i++) rec.copy(t, out, J * H * 4, 0, i * J * H * 4);
      rec.flush();
      return out;
    };
    const visual: VisualInputs = {
      rows: gpu.upload(rows, [rows.length], 'u32', 'visual rows'),
      embeds: repeat(one.embeds, 'visual.embeds'),
      deepstack: one.deepstack.map((d, j) => repeat(d, `visual.deepstack${j}`)),
    };
    releaseVisual(one);
    return visual;
  }

  async forward(batch: SequenceBatch, opts: ForwardOptions): Promise<TrainingForward> {
    const { model } = this;
    const gpu = model.gpu;
    const c = model.config.text;
    if (opts.train && this.saved) throw new ShapeError('train', 'a training forward is pending its backward');
    for (const t of this.outputs) t.release();
    this.outputs = [];
    const packed = packBatch(
      batch.prompt.inputIds,
      batch.completions,
      model.config.tokens.image,
      model.positions(batch.prompt.inputIds, batch.prompt.images.map((i) => i.gridThw)),
    );
    const G = batch.completions.length;
    const T = packed.ids.length;
    const N = G * packed.maxLen;
    const lora = opts.lora ? layerAdapters(model.lora) : null;
    const rank = lora ? Math.max(...model.lora.map((p) => p.r)) : 0;
    const logprob = await this.logprobFor(N);
    const visual = await this.visualFor(batch.prompt, packed.visualRows, G);
    const ws = model.decoder.workspace(T, rank);
    const ids = gpu.upload(Uint32Array.from(packed.ids), [T], 'u32', 'train.ids');
    const cu = gpu.upload(packed.cuSeqlens, [G + 1], 'u32', 'train.cu_seqlens');
    const predictRows = gpu.upload(packed.predictRows, [N], 'u32', 'train.predict_rows');
    const targets = gpu.upload(packed.targets, [N], 'u32', 'train.targets');
    const mask = gpu.upload(packed.mask, [G, packed.maxLen], 'f32', 'train.mask');
    const hsel = gpu.tensor([N, c.hiddenSize], 'f32', 'train.hsel');
    const logp = gpu.tensor([G, packed.maxLen], 'f32', 'train.logp');
    const entropy = gpu.tensor([G, packed.maxLen], 'f32', 'train.entropy');
    const stats = gpu.tensor([N, 2], 'f32', 'train.logprob_stats');
    const hs = opts.train ? Array.from({ length: c.numLayers + 1 }, (_, l) => gpu.tensor([T, c.hiddenSize], 'f32', `train.h${l}`)) : [];
    const cs = opts.train ? gpu.tensor([T, c.headDim / 2, 2], 'f32', 'train.rope_cs') : null;
    const layers = opts.train && opts.gradientCheckpointing === false ? Array.from({ length: c.numLayers }, (_, l) => layerActivations(gpu, c, T, rank, `train.layer${l}`)) : null;

    const rec = gpu.recorder('train.forward');
    const dec = model.decoder;
    let final: Tensor;
    if (!opts.train) {
      final = dec.forward(rec, ws, { ids, idsHost: packed.ids, positions: packed.positions, attend: { kind: 'packed', cuSeqlens: cu }, visual: visual ?? undefined, lora });
    } else {
      // The decoder's own loop, keeping each layer's input.
      const b = ws.views(T);
      dec.embed(rec, ws, ids, packed.ids, b.h);
      if (visual) dec.ops.embedding.scatterRows(rec, visual.embeds, visual.rows, b.h);
      gpu.write(b.positions, packed.positions);
      dec.ops.rope.table(rec, b.positions, b.cs);
      dec.weights.layers.forEach((w, l) => {
        rec.copy(b.h, hs[l]);
        const keep = layers?.[l];
        const loraU = (proj: LoraProjection) => (keep ? view(keep.u[proj], [T, lora![l][proj].r]) : b.loraU(lora![0][proj].r));
        const call = lora ? { params: lora[l], u: loraU } : null;
        dec.attentionBlock(rec, l, w, b.h, keep?.A ?? b.attn, b.cs, { kind: 'packed', cuSeqlens: cu, lse: keep?.lse }, call);
        if (keep) rec.copy(b.h, keep.hmid);
        dec.mlpBlock(rec, w, b.h, keep?.M ?? b.mlp, call);
        const ds = visual?.deepstack[l];
        if (ds) dec.ops.embedding.deepstackAdd(rec, ds, visual!.rows, b.h);
        // A layer a submit: the GPU runs it while the next is recorded (one submit a pass left it
        // idle for the whole recording, tens of ms a group).
        rec.flush();
      });
      rec.copy(b.h, hs[c.numLayers]);
      dec.ops.norms.rmsnorm(rec, b.h, dec.weights.finalNorm, b.out, c.rmsNormEps);
      rec.copy(b.cs, cs!);
      final = b.out;
    }
    dec.ops.embedding.gather(rec, final, predictRows, hsel);
    logprob.forward(rec, model.head, hsel, targets, opts.temperature, { logp: logp.reshape([N]), entropy: entropy.reshape([N]), saved: stats });
    await rec.submit();

    // The workspace goes back to the pool now: the backward keeps only what it reads (peak memory).
    ws.release();
    const saved: Saved = { batch: packed, temperature: opts.temperature, lora, cs, hs, layers, ids, cu, predictRows, targets, hsel, logp, entropy, stats, mask, visual };
    if (opts.train) this.saved = saved;
    else this.releaseSaved(saved);
    this.outputs = [logp, entropy, mask];
    return { logps: logp, entropy, mask, maxLen: packed.maxLen };
  }

  private releaseSaved(s: Saved): void {
    s.cs?.release();
    for (const a of s.layers ?? []) releaseActivations(a);
    for (const t of [...s.hs, s.ids, s.cu, s.predictRows, s.targets, s.hsel, s.stats]) t.release();
    if (s.visual) releaseVisual(s.visual);
  }

  async backward(gradLogps: Tensor, gradEntropy?: Tensor): Promise<void> {
    const s = this.saved;
    if (!s) throw new ShapeError('train', 'backward without a training forward');
    this.saved = null;
    const { model } = this;
    const gpu = model.gpu;
    const dec = model.decoder;
    const { norms, linear, act, rope, lora: loraOp, embedding } = dec.ops;
    const c = model.config.text;
    const { hiddenSize: H, numHeads: hq, numKvHeads: hkv, headDim: D, intermediateSize: I, rmsNormEps: eps } = c;
    const T = s.batch.ids.length;
    const N = s.predictRows.numel;
    if (gradLogps.numel !== N || (gradEntropy && gradEntropy.numel !== N)) {
      throw new ShapeError('train.backward', `gradients must have ${N} elements ([G, maxLen]), got ${gradLogps.numel}`);
    }
    const logprob = await this.logprobFor(N);
    const attention = dec.ops.attention;
    const f = (shape: number[], label: string) => gpu.tensor(shape, 'f32', `train.${label}`);
    const bufs = {
      hcur: f([T, H], 'hcur'),
      dh: f([T, H], 'dh'),
      dsel: f([N, H], 'dsel'),
      dout: f([T, H], 'dout'),
      rowStats: gpu.tensor(Attention.rowStatsShape(T, hq), 'f32', 'train.row_stats'),
      rstdFinal: f([T], 'rstd_final'),
      dact: f([T, I], 'dact'),
      dgate: f([T, I], 'dgate'),
      dup: f([T, I], 'dup'),
      dattn: f([T, hq * D], 'dattn'),
      dq: f([T, hq * D], 'dq'),
      dk: f([T, hkv * D], 'dk'),
      dv: f([T, hkv * D], 'dv'),
      dqRaw: f([T, hq * D], 'dq_raw'),
      dkRaw: f([T, hkv * D], 'dk_raw'),
      dxn: f([T, H], 'dxn'),
    };
    const rank = s.lora ? Math.max(...model.lora.map((p) => p.r)) : 0;
    const tLora = f([T, Math.max(1, rank)], 'lora_t');
    // With checkpointing, one set of layer intermediates that each layer's recompute refills.
    const shared = s.layers ? null : layerActivations(gpu, c, T, rank, 'train');
    const cs = s.cs!;
    const tOf = (r: number) => view(tLora, [T, r]);

    try {
      const rec = gpu.recorder('train.backward');
      // Log-probs → the predicting rows of the final norm's output → the final hidden state.
      rec.clear(bufs.dsel);
      logprob.backward(rec, model.head, s.hsel, s.targets, s.temperature, s.stats, gradLogps.reshape([N]), gradEntropy ? gradEntropy.reshape([N]) : null, bufs.dsel);
      rec.clear(bufs.dout);
      embedding.scatterRows(rec, bufs.dsel, s.predictRows, bufs.dout);
      norms.rmsnorm(rec, s.hs[c.numLayers], dec.weights.finalNorm, bufs.hcur, eps, bufs.rstdFinal);
      norms.rmsnormBackward(rec, bufs.dout, s.hs[c.numLayers], dec.weights.finalNorm, bufs.rstdFinal, bufs.dh, false);

      for (let l = c.numLayers - 1; l >= 0; l--) {
        const w = dec.weights.layers[l];
        const ad = s.lora?.[l] ?? null;
        const layer = s.layers?.[l] ?? shared!;
        const { A, M } = layer;
        const rstd = A.rstd!;
        const uOf = (proj: LoraProjection) => view(layer.u[proj], [T, ad![proj].r]);
        const loraBack = (proj: LoraProjection, x: Tensor, dy: Tensor, dx: Tensor) => {
          if (ad) loraOp.backward(rec, ad[proj], { x, dy, u: uOf(proj), dx, t: tOf(ad[proj].r) });
        };
        if (!s.layers) {
          // Recompute the layer from its input, keeping what its backward reads.
          const call = ad ? { params: ad, u: uOf } : null;
          rec.copy(s.hs[l], bufs.hcur);
          dec.attentionBlock(rec, l, w, bufs.hcur, A, cs, { kind: 'packed', cuSeqlens: s.cu, lse: layer.lse }, call);
          rec.copy(bufs.hcur, layer.hmid);
          dec.mlpBlock(rec, w, bufs.hcur, M, call);
        }

        // MLP block: dh is the gradient of the layer's output.
        linear.backwardInput(rec, bufs.dh, w.down, bufs.dact);
        loraBack('down', M.act, bufs.dh, bufs.dact);
        act.swigluBackward(rec, M.gate, M.up, bufs.dact, bufs.dgate, bufs.dup);
        linear.backwardInput(rec, bufs.dgate, w.gate, bufs.dxn);
        linear.backwardInput(rec, bufs.dup, w.up, bufs.dxn, true);
        loraBack('gate', M.xn, bufs.dgate, bufs.dxn);
        loraBack('up', M.xn, bufs.dup, bufs.dxn);
        norms.rmsnormBackward(rec, bufs.dxn, layer.hmid, w.postAttentionNorm, M.rstd!, bufs.dh, true);

        // Attention block: dh is now the gradient of h_mid.
        linear.backwardInput(rec, bufs.dh, w.o, bufs.dattn);
        loraBack('o', A.attn, bufs.dh, bufs.dattn);
        attention.backward(rec, {
          q: A.q, k: A.k, v: A.v, o: A.attn, lse: layer.lse, dout: bufs.dattn, cuSeqlens: s.cu,
          causal: true, scale: dec.scale, rowStats: bufs.rowStats, dq: bufs.dq, dk: bufs.dk, dv: bufs.dv,
        });
        rope.applyBackward(rec, cs, bufs.dq, hq);
        rope.applyBackward(rec, cs, bufs.dk, hkv);
        norms.rmsnormBackward(rec, bufs.dq.reshape([T * hq, D]), A.qRaw.reshape([T * hq, D]), w.qNorm, rstd.q, bufs.dqRaw.reshape([T * hq, D]), false);
        norms.rmsnormBackward(rec, bufs.dk.reshape([T * hkv, D]), A.kRaw.reshape([T * hkv, D]), w.kNorm, rstd.k, bufs.dkRaw.reshape([T * hkv, D]), false);
        linear.backwardInput(rec, bufs.dqRaw, w.q, bufs.dxn);
        linear.backwardInput(rec, bufs.dkRaw, w.k, bufs.dxn, true);
        linear.backwardInput(rec, bufs.dv, w.v, bufs.dxn, true);
        loraBack('q', A.xn, bufs.dqRaw, bufs.dxn);
        loraBack('k', A.xn, bufs.dkRaw, bufs.dxn);
        loraBack('v', A.xn, bufs.dv, bufs.dxn);
        norms.rmsnormBackward(rec, bufs.dxn, s.hs[l], w.inputNorm, rstd.input, bufs.dh, true);
        rec.flush(); // a layer a submit, as in the forward
      }
      await rec.submit();
    } finally {
      for (const t of [...Object.values(bufs), tLora]) t.release();
      if (shared) releaseActivations(shared);
      this.releaseSaved(s);
    }
  }
}

/** model.lora (LORA_PROJECTIONS order, layer after layer) as per-layer records. */
function layerAdapters(params: readonly LoraParams[]): LayerLora[] {
  if (params.length === 0) throw new ShapeError('train', 'LoRA requested but no adapters are attached');
  const layers: LayerLora[] = [];
  for (let i = 0; i < params.length; i += LORA_PROJECTIONS.length) {
    layers.push(Object.fromEntries(LORA_PROJECTIONS.map((p, j) => [p, params[i + j]])) as LayerLora);
  }
  return layers;
}
