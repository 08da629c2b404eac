// The training half of src/rl/policy.ts's Policy for Qwen3-VL: per-token log-probs and entropies
// of G completions of one prompt, and the backward of a loss on them into the LoRA parameters.
//
// Layout: the prompt once, then the G completions, packed row by row ([T, hidden], T = P + Σ
// completion lengths). Attention keeps each completion inside itself and the prompt through
// cu_seqlens and the shared prefix (src/ops/attention.ts): the result is that of G sequences
// prompt + completion_i, but the prompt's rows are computed once instead of G times (at the
// default 8 x (512 + 256), 2,560 rows instead of 6,144). Causal attention makes the prompt's rows
// independent of what follows, and in the backward the prompt's rows receive the sum of what every
// completion sends them. The rows that predict completion tokens are gathered into a [G, maxLen]
// grid (padding rows point outside the packed rows, so they gather zeros and scatter nowhere)
// before the final norm's output meets the LM head; the prompt's last row predicts every
// completion's first token, so its gradient is the sum of theirs (Embedding.sumRows).
//
// Memory is bounded by recomputation (activation checkpointing per layer, the default): the
// forward keeps only each layer's input h_l [T, hidden]; the backward (Decoder.backward, beside
// the forward in src/model/decoder.ts) reruns layer l from h_l, keeping that one layer's
// intermediates, and walks back through it. Without checkpointing the forward keeps every layer's
// intermediates (LayerActivations) and the backward only walks back. The kept h_l (and without
// checkpointing each layer's wide intermediates) are f32, or f16 where the model's activation
// storage says so (src/model/activationStorage.ts), expanded back to f32 before the backward
// reads them. A value beyond f16's range makes the policy run that forward and its backward again
// with f32 and keep f32 from then on, with a warning (takeWarnings): the gradients stay those of
// the values the forward computed, where refusing would end the run. The range's readback is queued
// right after the forward and awaited once the backward is submitted, so the GPU never waits for
// the CPU to record the backward; the backward first copies the gradients it accumulates into, and
// a fall-back puts that copy back before it runs again.
// The DeepStack add is a residual add: the gradient passes through it. With LoRA on the vision
// tower (Qwen3VL.visionLora) the gradient at the image rows is also gathered where the features
// enter (the embeddings at h_0, DeepStack level l at h_{l+1}) and goes back through the tower
// (VisionTower.backward) from what the forward's vision pass kept.
import { ShapeError, Tensor, type Recorder } from '../gpu';
import { F16_MAX } from '../ops/activationF16';
import { LogProb } from '../ops/logprob';
import type { LoraParams } from '../ops/loraParams';
import { LOGPROB_CHUNK } from '../ops/productSizes';
import type { Completion, ForwardOptions, Policy, PreparedPrompt, SamplingOptions, SequenceBatch, TrainingForward } from '../rl/policy';
import { layerActivations, rangeSlotName, rangeSlots, releaseActivations, type LayerActivations, type LayerLora, type LayerLoraU, type VisualInputs } from './decoder';
import { releaseVisual, type Qwen3VL } from './qwen3vl';
import { releaseVisionSaved, type VisionSaved } from './vision';

/** Where the packed rows and the completion grid come from, built on the CPU. */
export interface PackedBatch {
  /** Token ids of all sequences, back to back [T]. */
  ids: Int32Array;
  /** [3, T] M-RoPE positions: the prompt's (spec B4), then each completion's, as after the prompt. */
  positions: Int32Array;
  /** [G + 2] row offsets of the sequences: the prompt, then the G completions. */
  cuSeqlens: Uint32Array;
  /** Rows every completion attends to as its own prompt: P, or 0 when no completion has a token. */
  sharedPrefix: number;
  /** [G·maxLen]: the packed row whose next-token distribution scores completion token j of sequence i (0xffffffff: padding). */
  predictRows: Uint32Array;
  /** predictRows without the first tokens' row (the prompt's last, repeated): the backward's scatter. */
  scatterRows: Uint32Array;
  /** The grid entries of the first tokens, whose gradients the prompt's last row sums. */
  firstTokens: Uint32Array;
  /** [G·maxLen]: that token (0 on padding). */
  targets: Uint32Array;
  /** [G·maxLen]: 1 on completion tokens. */
  mask: Float32Array;
  maxLen: number;
}

const PAD_ROW = 0xffffffff;

/**
 * Pack `completions` after one prompt, which comes once. The prompt's positions are its rope
 * index (spec B4); a completion token at cache position p gets p + ropeDelta on all three axes,
 * exactly as during sampling, whatever the token is (a sampled <|image_pad|> is text here, not an
 * image slot).
 */
export function packBatch(promptIds: Int32Array, completions: readonly (readonly number[])[], prompt: { positions: Int32Array; ropeDelta: number }): PackedBatch {
  const G = completions.length;
  if (G < 1) throw new ShapeError('train.pack', 'no completions');
  const P = promptIds.length;
  if (P < 1) throw new ShapeError('train.pack', 'empty prompt');
  const maxLen = Math.max(1, ...completions.map((c) => c.length));
  const T = completions.reduce((a, c) => a + c.length, P);
  const ids = new Int32Array(T);
  const positions = new Int32Array(3 * T);
  const cuSeqlens = new Uint32Array(G + 2);
  const predictRows = new Uint32Array(G * maxLen).fill(PAD_ROW);
  const targets = new Uint32Array(G * maxLen);
  const mask = new Float32Array(G * maxLen);
  const firstTokens: number[] = [];
  ids.set(promptIds);
  for (let a = 0; a < 3; a++) positions.set(prompt.positions.subarray(a * P, (a + 1) * P), a * T);
  let off = P;
  cuSeqlens[1] = P;
  completions.forEach((c, i) => {
    ids.set(c, off);
    for (let a = 0; a < 3; a++) for (let j = 0; j < c.length; j++) positions[a * T + off + j] = P + j + prompt.ropeDelta;
    c.forEach((tok, j) => {
      predictRows[i * maxLen + j] = j === 0 ? P - 1 : off + j - 1;
      targets[i * maxLen + j] = tok;
      mask[i * maxLen + j] = 1;
    });
    if (c.length > 0) firstTokens.push(i * maxLen);
    off += c.length;
    cuSeqlens[i + 2] = off;
  });
  const scatterRows = predictRows.slice();
  for (const e of firstTokens) scatterRows[e] = PAD_ROW;
  return { ids, positions, cuSeqlens, sharedPrefix: T > P ? P : 0, predictRows, scatterRows, firstTokens: Uint32Array.from(firstTokens), targets, mask, maxLen };
}

/** What a `train` forward keeps for the backward (released by it). */
interface Saved {
  batch: PackedBatch;
  temperature: number;
  lora: readonly LayerLora[] | null;
  /** The forward's lora_dropout (its masks are regenerated in the backward), or null. */
  dropout: { p: number; seed: number; step: number } | null;
  /** The rope table of the packed rows [T, D/2, 2] (`train` only; the forward's workspace itself is released). */
  cs: Tensor | null;
  /** Inputs of layer 0..L-1 and the final hidden state (before the final norm): L+1 of [T, hidden], f32 or f16. */
  hs: Tensor[];
  /** Every layer's intermediates, without gradient checkpointing; null: the backward recomputes. */
  layers: LayerActivations[] | null;
  /** With gradient checkpointing and LoRA, each layer's u = x·Aᵀ per adapted projection (KeptActivations.u). */
  us: LayerLoraU[] | null;
  /** Checkpointed: each layer's attention log-sum-exp, for its recompute. */
  lses: Tensor[] | null;
  ids: Tensor;
  cu: Tensor;
  /** PackedBatch.scatterRows and firstTokens. */
  scatterRows: Tensor;
  firstTokens: Tensor | null;
  targets: Tensor;
  /** Final-norm outputs of the predicting rows [G·maxLen, hidden]. */
  hsel: Tensor;
  logp: Tensor;
  entropy: Tensor;
  stats: Tensor;
  mask: Tensor;
  visual: VisualInputs | null;
  /** What the vision backward reads (training forwards with vision LoRA), else null. */
  visionSaved: VisionSaved | null;
  /** With f16 states, the readback of what ActivationF16.pack reported: which state passed f16's range (null: none). */
  beyond: Promise<string | null> | null;
  /** The forward's arguments, to run it again with f32 states if `beyond` names a state. */
  redo: { batch: SequenceBatch; opts: ForwardOptions };
}


export class Qwen3VLPolicy implements Policy {
  private logprob: LogProb | null = null;
  private saved: Saved | null = null;
  /** The last forward's outputs, released by the next forward (TrainingForward's contract). */
  private outputs: Tensor[] = [];
  /** Why the hidden states are kept in f32 though the model asks for f16 (a state passed f16's range), or null. */
  private f16Refused: string | null = null;
  private warnings: string[] = [];

  constructor(readonly model: Qwen3VL) {}

  get lora(): readonly LoraParams[] {
    return this.model.lora;
  }

  get vocabSize(): number {
    return this.model.config.text.vocabSize;
  }

  /** Rows whose widest f32 training buffer (the MLP's [rows, intermediate], attention's [rows, Hq·D],
   * the log-prob chunk's [rows, ≤ 8192 logits]) fits one storage binding of this device. */
  get maxTrainingRows(): number {
    const t = this.model.config.text;
    const widest = Math.max(t.intermediateSize, t.numHeads * t.headDim, t.hiddenSize, Math.min(LOGPROB_CHUNK, t.vocabSize));
    return Math.floor(this.model.gpu.limits.maxStorageBufferBindingSize / (4 * widest));
  }

  /** Where training forwards keep their hidden states: the model's setting, unless a state passed f16's range. */
  get activationStorage(): 'f32' | 'f16' {
    return this.f16Refused === null ? this.model.activationStorage : 'f32';
  }

  /** What happened since the last call that a run should report (Policy.takeWarnings). */
  takeWarnings(): string[] {
    const w = this.warnings;
    this.warnings = [];
    return w;
  }

  generate(prompt: PreparedPrompt, numSamples: number, opts: SamplingOptions): Promise<Completion[]> {
    return this.model.generate(prompt, numSamples, opts);
  }

  private async logprobFor(rows: number): Promise<LogProb> {
    if (!this.logprob || this.logprob.maxTokens < rows) {
      this.logprob?.release();
      this.logprob = await LogProb.create(this.model.gpu, { maxTokens: rows, chunk: Math.min(LOGPROB_CHUNK, this.model.head.vocab) });
    }
    return this.logprob;
  }

  async forward(batch: SequenceBatch, opts: ForwardOptions): Promise<TrainingForward> {
    const { model } = this;
    const gpu = model.gpu;
    const c = model.config.text;
    if (opts.train && this.saved) throw new ShapeError('train', 'a training forward is pending its backward');
    for (const t of this.outputs) t.release();
    this.outputs = [];
    const { prompt } = batch;
    const packed = packBatch(prompt.inputIds, batch.completions, model.positions(prompt.inputIds, prompt.images.map((i) => i.gridThw)));
    const G = batch.completions.length;
    const T = packed.ids.length;
    const N = G * packed.maxLen;
    const lora = opts.lora ? model.adapters() : null;
    const rank = lora ? Math.max(...model.lora.map((p) => p.r)) : 0;
    // lora_dropout in the forwards whose loss is trained on (ForwardOptions.dropout), never in scoring.
    const dropout = lora && opts.dropout && model.loraDropout > 0 ? { p: model.loraDropout, ...opts.dropout } : null;
    const logprob = await this.logprobFor(N);
    // The prompt's rows come first, so its image rows are those of the prompt alone; its images'
    // features come from the model's vision cache (encoded once for the group), or with vision
    // LoRA from a pass through the adapted tower (kept for the backward when training).
    const vis =
      prompt.images.length === 0
        ? null
        : lora && opts.train && model.visionLora
          ? await model.encodeImagesWithLora(prompt.inputIds, prompt.images, true)
          : { visual: await model.encodeImages(prompt.inputIds, prompt.images, { lora: !!lora }), saved: null };
    const visual = vis?.visual ?? null;
    const ws = model.decoder.workspace(T, rank);
    const ids = gpu.upload(Uint32Array.from(packed.ids), [T], 'u32', 'train.ids');
    const cu = gpu.upload(packed.cuSeqlens, [G + 2], 'u32', 'train.cu_seqlens');
    const attend = { kind: 'packed', cuSeqlens: cu, sharedPrefix: packed.sharedPrefix } as const;
    const predictRows = gpu.upload(packed.predictRows, [N], 'u32', 'train.predict_rows');
    const scatterRows = gpu.upload(packed.scatterRows, [N], 'u32', 'train.scatter_rows');
    const firstTokens = packed.firstTokens.length > 0 ? gpu.upload(packed.firstTokens, [packed.firstTokens.length], 'u32', 'train.first_tokens') : null;
    const targets = gpu.upload(packed.targets, [N], 'u32', 'train.targets');
    const mask = gpu.upload(packed.mask, [G, packed.maxLen], 'f32', 'train.mask');
    const hsel = gpu.tensor([N, c.hiddenSize], 'f32', 'train.hsel');
    const logp = gpu.tensor([G, packed.maxLen], 'f32', 'train.logp');
    const entropy = gpu.tensor([G, packed.maxLen], 'f32', 'train.entropy');
    const stats = gpu.tensor([N, 2], 'f32', 'train.logprob_stats');
    const f16 = opts.train && this.activationStorage === 'f16';
    const hs = opts.train ? Array.from({ length: c.numLayers + 1 }, (_, l) => gpu.tensor([T, c.hiddenSize], f16 ? 'f16' : 'f32', `train.h${l}`)) : [];
    const range = f16 ? gpu.tensor([rangeSlots(c.numLayers)], 'u32', 'train.f16_range') : null;
    const cs = opts.train ? gpu.tensor([T, c.headDim / 2, 2], 'f32', 'train.rope_cs') : null;
    const keepLayers = opts.train && opts.gradientCheckpointing === false;
    const layers = keepLayers ? Array.from({ length: c.numLayers }, (_, l) => layerActivations(gpu, c, T, rank, `train.layer${l}`, f16 ? 'f16' : 'f32')) : null;
    const staging = keepLayers && f16 ? layerActivations(gpu, c, T, rank, 'train.layer_staging') : null;
    // Checkpointed: every layer's LoRA u still kept (T·r floats an adapter), so the recompute runs the updates alone.
    const us = opts.train && !keepLayers && lora ? loraUs(gpu, lora, T) : null;
    // And each layer's lse (T·Hq floats): the recompute's attention then skips its pass that finds it.
    const lses = opts.train && !keepLayers ? Array.from({ length: c.numLayers }, (_, l) => gpu.tensor([T, c.numHeads], 'f32', `train.lse${l}`)) : null;

    const rec = gpu.recorder('train.forward');
    if (range) rec.clear(range);
    const dec = model.decoder;
    const keep = opts.train ? { inputs: hs, layers, staging: staging ?? undefined, range: range ?? undefined, u: us ?? undefined, lse: lses ?? undefined } : undefined;
    const xd = dropout && dropoutWorkspace(gpu, model.lora, T);
    const final = dec.forward(rec, ws, { ids, idsHost: packed.ids, positions: packed.positions, attend, visual: visual ?? undefined, lora, keep, dropout: xd ? { ...dropout!, xd } : undefined });
    if (cs) rec.copy(ws.views(T).cs, cs);
    dec.ops.embedding.gather(rec, final, predictRows, hsel);
    logprob.forward(rec, model.head, hsel, targets, opts.temperature, { logp: logp.reshape([N]), entropy: entropy.reshape([N]), saved: stats });
    await rec.submit();

    // The workspace goes back to the pool now: the backward keeps only what it reads (peak memory).
    ws.release();
    xd?.release();
    predictRows.release();
    if (staging) releaseActivations(staging);
    // Queued now, awaited after the backward is submitted: by then the forward has long finished.
    const beyond = range && this.beyondF16(range);
    range?.release(); // its copy is queued
    beyond?.catch(() => undefined); // a forward without a backward leaves it unread
    const saved: Saved = { batch: packed, temperature: opts.temperature, lora, dropout, cs, hs, layers, us, lses, ids, cu, scatterRows, firstTokens, targets, hsel, logp, entropy, stats, mask, visual, visionSaved: vis?.saved ?? null, beyond, redo: { batch, opts } };
    this.outputs = [logp, entropy, mask];
    if (opts.train) this.saved = saved;
    else this.releaseSaved(saved);
    return { logps: logp, entropy, mask, maxLen: packed.maxLen };
  }

  /** Which kept state passed f16's range and by how much (ActivationF16.pack's report), or null when all fit. The
   * readback is queued before this returns: `range` may be released then. */
  private async beyondF16(range: Tensor): Promise<string | null> {
    const bits = (await this.model.gpu.read(range)) as Uint32Array;
    const i = bits.findIndex((b) => b !== 0);
    if (i < 0) return null;
    return `${rangeSlotName(i, this.model.config.text.numLayers)} reaches |x| = ${new Float32Array(bits.buffer)[i].toPrecision(6)}, beyond f16's ${F16_MAX}`;
  }

  private releaseSaved(s: Saved): void {
    s.cs?.release();
    for (const a of s.layers ?? []) releaseActivations(a);
    for (const u of s.us ?? []) for (const t of Object.values(u)) t!.release();
    for (const t of s.lses ?? []) t.release();
    for (const t of [...s.hs, s.ids, s.cu, s.scatterRows, s.targets, s.hsel, s.stats]) t.release();
    s.firstTokens?.release();
    if (s.visual) releaseVisual(s.visual);
    if (s.visionSaved) releaseVisionSaved(s.visionSaved);
  }

  async backward(gradLogps: Tensor, gradEntropy?: Tensor): Promise<void> {
    const s = this.saved;
    if (!s) throw new ShapeError('train', 'backward without a training forward');
    this.saved = null;
    const { model } = this;
    const gpu = model.gpu;
    const dec = model.decoder;
    const { embedding } = dec.ops;
    const { hiddenSize: H } = model.config.text;
    const T = s.batch.ids.length;
    const N = s.targets.numel;
    if (gradLogps.numel !== N || (gradEntropy && gradEntropy.numel !== N)) {
      throw new ShapeError('train.backward', `gradients must have ${N} elements ([G, maxLen]), got ${gradLogps.numel}`);
    }
    const logprob = await this.logprobFor(N);
    const dsel = gpu.tensor([N, H], 'f32', 'train.dsel');
    const dout = gpu.tensor([T, H], 'f32', 'train.dout');
    const rank = s.lora ? Math.max(...model.lora.map((p) => p.r)) : 0;
    const f16Layers = s.layers?.[0]?.hmid.dtype === 'f16';
    const ws = dec.backwardWorkspace(T, rank, !s.layers || f16Layers, s.hs[0].dtype === 'f16');
    const xd = s.dropout && dropoutWorkspace(gpu, model.lora, T);
    // The gradients of the image features (embeds, then each DeepStack level) for the vision adapters.
    const dVisual = s.visionSaved && s.visual ? [s.visual.embeds, ...s.visual.deepstack].map((t, j) => gpu.tensor([...t.shape], 'f32', j === 0 ? 'train.d_image_embeds' : `train.d_deepstack${j - 1}`)) : null;

    let beyond: string | null = null;
    let grads: GradientCopy | null = null;
    try {
      const rec = gpu.recorder('train.backward');
      // With f16 states not yet known to fit: what the gradients held before this backward adds to them.
      if (s.beyond) grads = GradientCopy.record(gpu, rec, model.lora);
      // Log-probs → the predicting rows of the final norm's output → all its rows.
      rec.clear(dsel);
      logprob.backward(rec, model.head, s.hsel, s.targets, s.temperature, s.stats, gradLogps.reshape([N]), gradEntropy ? gradEntropy.reshape([N]) : null, dsel);
      rec.clear(dout);
      embedding.scatterRows(rec, dsel, s.scatterRows, dout);
      if (s.firstTokens) embedding.sumRows(rec, dsel, s.firstTokens, dout, s.batch.sharedPrefix - 1);
      dec.backward(rec, ws, {
        dout, keep: { inputs: s.hs, layers: s.layers, u: s.us ?? undefined, lse: s.lses ?? undefined }, cs: s.cs!, cuSeqlens: s.cu, sharedPrefix: s.batch.sharedPrefix,
        lora: s.lora, dropout: s.dropout && xd ? { ...s.dropout, xd } : undefined,
        visual: dVisual ? { rows: s.visual!.rows, grads: dVisual } : undefined,
      });
      if (dVisual) model.vision.backward(rec, model.visionLora!, s.visionSaved!, dVisual);
      await rec.submit();
      // The GPU runs the whole backward now: a pause of the host costs nothing.
      gpu.collectGarbage();
      if (s.beyond) beyond = await s.beyond;
      if (beyond) await grads!.restore();
    } finally {
      for (const t of [dsel, dout, ...(dVisual ?? [])]) t.release();
      ws.release();
      xd?.release();
      grads?.release();
      this.releaseSaved(s);
    }
    if (!beyond) return;
    // The f16 states were clamped: the forward and this backward again with f32 states (the same
    // dropout masks), the gradients as they were before. The caller's outputs stay its own (the
    // same values: the forward computes in f32), so `gradLogps` may be one of them.
    this.f16Refused = beyond;
    this.warnings.push(`activation_storage f16: ${beyond}; hidden states are kept in f32 from now on (this forward and its backward ran again with them)`);
    const outputs = this.outputs;
    this.outputs = [];
    await this.forward(s.redo.batch, s.redo.opts);
    for (const t of this.outputs) t.release();
    this.outputs = outputs;
    await this.backward(gradLogps, gradEntropy);
  }
}

/** A copy of the adapters' gradient buffers (each flat buffer up to its last view), to put back. */
class GradientCopy {
  private constructor(
    private readonly gpu: Qwen3VL['gpu'],
    private readonly pairs: { grads: Tensor; copy: Tensor }[],
  ) {}

  /** Record the copy on `rec`, before anything there adds to the gradients. */
  static record(gpu: Qwen3VL['gpu'], rec: Recorder, params: readonly LoraParams[]): GradientCopy {
    const extent = new Map<GPUBuffer, number>();
    for (const t of params.flatMap((p) => [p.dA, p.dB])) extent.set(t.buffer, Math.max(extent.get(t.buffer) ?? 0, t.byteOffset + t.byteSize));
    const pairs = [...extent].map(([buffer, bytes]) => ({ grads: new Tensor(buffer, [bytes / 4], 'f32', 'lora.grads'), copy: gpu.tensor([bytes / 4], 'f32', 'train.grads_copy') }));
    for (const { grads, copy } of pairs) rec.copy(grads, copy);
    return new GradientCopy(gpu, pairs);
  }

  /** Put the gradients back as they were when the copy was recorded. */
  restore(): Promise<void> {
    const rec = this.gpu.recorder('train.grads_restore');
    for (const { grads, copy } of this.pairs) rec.copy(copy, grads);
    return rec.submit();
  }

  release(): void {
    for (const { copy } of this.pairs) copy.release();
  }
}

/** Each layer's u [T, r] for each of its adapters. */
function loraUs(gpu: Qwen3VL['gpu'], lora: readonly LayerLora[], T: number): LayerLoraU[] {
  return lora.map((ad, l) => Object.fromEntries(Object.entries(ad).map(([proj, p]) => [proj, gpu.tensor([T, p.r], 'f32', `train.lora_u${l}.${proj}`)])));
}

/** dropout(x) of any adapter's input, [T, widest in] (down_proj's intermediate at most). */
function dropoutWorkspace(gpu: Qwen3VL['gpu'], params: readonly LoraParams[], T: number): Tensor {
  return gpu.tensor([T, Math.max(...params.map((p) => p.in))], 'f32', 'train.lora_dropout');
}
