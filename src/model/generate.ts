// Generation: prefill one prompt into slot 0 of a KV cache, share its rows with G slots (no copy:
// KvCache.share), then decode all G sequences together, one decoder pass and one sampling step
// (two wide dispatches) per step.
//
// No CPU round trip per token: the sampler writes the next ids into the buffer the next step's
// embedding reads, positions for every step are uploaded once, so each step is submitted as soon as
// it is recorded and the ids and log-probs of STEPS_PER_READBACK steps are read back together, while
// the GPU runs the batches queued behind them; stop ids are checked then, and tokens sampled after
// a sequence stopped are dropped. Each row's draw depends only on (seed, row, step), so the output
// is the same as reading back every step. Every decode step binds the same tensors with the same
// uniforms, so the first is captured on a Tape and the rest replay it: recording a step then costs
// its WebGPU calls and none of the model's JS.
import { Tensor, type Gpu, type Tape } from '../gpu';
import { Attention } from '../ops/attention';
import { KvCache, type KvDtype } from '../ops/kvCache';
import { Sampler, type SamplingConfig } from '../ops/sampling';
import { ThinkingBudget, type ThinkingBudgetSettings } from '../ops/thinkingBudget';
import type { Decoder, LayerLora, VisualInputs } from './decoder';
import type { TableHead } from './lmHead';

/** Decode steps per readback of their ids and log-probs (each step is its own submit). */
export const STEPS_PER_READBACK = 8;
/** Batches of steps submitted and not yet read back: the GPU's queue while the host waits for the
 * oldest (a pause of the host shorter than the queue leaves the GPU busy: BENCHMARKS.md). At most
 * this many batches run past the last stop. */
export const BATCHES_IN_FLIGHT = 4;

export interface GenerateRequest {
  inputIds: Int32Array;
  /** [3, T] M-RoPE positions of the prompt and its rope delta (processor/ropeIndex.ts). */
  positions: Int32Array;
  ropeDelta: number;
  visual?: VisualInputs;
  numSamples: number;
  sampling: SamplingConfig;
  maxNewTokens: number;
  /** u32 seed of the sampler's random streams. */
  seed: number;
  /** A sequence ends after it samples one of these (the token is kept). */
  stopIds: readonly number[];
  /**
   * Stop each sequence's thinking after `budget` tokens by forcing the end sequence on the GPU
   * (src/ops/thinkingBudget.ts); forced tokens are returned like drawn ones, with log-prob 0.
   */
  thinking?: ThinkingBudgetSettings;
  lora: readonly LayerLora[] | null;
  /** Told the tokens kept so far over all sequences after each readback (progress for the UI). */
  onTokens?: (tokens: number) => void;
}

export interface GeneratedSequence {
  tokens: number[];
  /** The sampler's log-prob of each token (Sampler: 'processed' by default). */
  logps: number[];
  /** Ended on a stop id (false: cut at maxNewTokens). */
  terminated: boolean;
}

export interface GenerateParts {
  gpu: Gpu;
  decoder: Decoder;
  head: TableHead;
  sampler: Sampler;
  /** Largest LoRA rank in use (0 without adapters). */
  loraRank: number;
  /** Element type of the KV cache's K and V (src/model/kvCacheSetting.ts chooses it). */
  kvCache: KvDtype;
}

export async function generate(p: GenerateParts, r: GenerateRequest): Promise<GeneratedSequence[]> {
  const { gpu, decoder, head, sampler } = p;
  const c = decoder.config;
  const T = r.inputIds.length;
  const G = r.numSamples;
  if (!Number.isInteger(G) || G < 1) throw new RangeError(`generate: numSamples must be a positive integer, got ${G}`);
  if (!Number.isInteger(r.maxNewTokens) || r.maxNewTokens < 0) throw new RangeError(`generate: maxNewTokens must be a non-negative integer, got ${r.maxNewTokens}`);
  const out: GeneratedSequence[] = Array.from({ length: G }, () => ({ tokens: [], logps: [], terminated: false }));
  if (r.maxNewTokens === 0) return out;
  // First, so that a refused budget leaves nothing allocated.
  const thinking = r.thinking ? ThinkingBudget.create(gpu, G, r.thinking) : undefined;

  // The prompt's positions are stored once, in slot 0, and shared by every sample (share below).
  const cache = await KvCache.create(gpu, { layers: c.numLayers, slots: G, capacity: T + r.maxNewTokens, hkv: c.numKvHeads, headDim: c.headDim, prefix: T, dtype: p.kvCache });
  const ws = decoder.workspace(Math.max(T, G), p.loraRank);
  const promptIds = gpu.upload(Uint32Array.from(r.inputIds), [T], 'u32', 'generate.prompt_ids');
  const last = gpu.tensor([G, c.hiddenSize], 'f32', 'generate.last_hidden');
  const logits = gpu.tensor([G, head.vocab], 'f32', 'generate.logits');
  const ids = gpu.tensor([G], 'u32', 'generate.ids');
  const logp = gpu.tensor([G], 'f32', 'generate.logp');
  // The repetition penalty's record of each sample's tokens, from the prompt's.
  const penalty = r.sampling.repetitionPenalty ?? 1;
  const seen = penalty !== 1 ? Sampler.seenBitmap(gpu, G, head.vocab, Array.from(r.inputIds)) : undefined;
  // Per step of a batch: G ids, then G log-prob bits.
  const packed = gpu.tensor([STEPS_PER_READBACK * 2 * G], 'u32', 'generate.readback');
  // What a step reads from the GPU, one row per step: its [3, G] positions (padded to the storage
  // offset alignment), then the step number. A step starts by copying its row into `current`, so
  // every step binds the same tensors with the same uniforms: its bind groups are the step before's.
  const posBytes = Math.ceil((12 * G) / gpu.limits.minStorageBufferOffsetAlignment) * gpu.limits.minStorageBufferOffsetAlignment;
  const rowWords = posBytes / 4 + 1;
  const steps = gpu.tensor([r.maxNewTokens * rowWords], 'i32', 'generate.steps');
  const current = gpu.tensor([rowWords], 'i32', 'generate.step');
  const stepPositions = new Tensor(current.buffer, [3, G], 'i32', 'generate.positions', current.byteOffset);
  const stepNumber = new Tensor(current.buffer, [1], 'u32', 'generate.step_number', current.byteOffset + posBytes);
  // Decode attention has only G·Hkv workgroups of work: split each sequence's keys into chunks,
  // the shared prompt's apart from the samples' own (BENCHMARKS.md, Kernel tuning choices: Attention).
  const chunks = Attention.generateChunks(T, r.maxNewTokens, G);
  const splitWs = gpu.tensor(decoder.ops.attention.splitWorkspaceShape(G, chunks), 'f32', 'generate.attention_split');
  const stop = new Set(r.stopIds);
  // Steps 2 on record the same commands as step 1: they replay its tape (Recorder.capture).
  let stepTape = null as Tape | null;
  try {
    const host = new Int32Array(steps.numel);
    for (let s = 0; s < r.maxNewTokens; s++) {
      // Each sample's token of step s ≥ 1 sits at cache position T + s - 1, on all three axes.
      if (s > 0) host.fill(T + s - 1 + r.ropeDelta, s * rowWords, s * rowWords + 3 * G);
      host[(s + 1) * rowWords - 1] = s;
    }
    gpu.write(steps, host);
    // Prefill slot 0; every sample starts from the prompt's last hidden row.
    const rec = gpu.recorder('generate');
    const h = decoder.forward(rec, ws, {
      ids: promptIds,
      idsHost: r.inputIds,
      positions: r.positions,
      attend: { kind: 'cached', cache, slot0: 0, count: 1 },
      visual: r.visual,
      lora: r.lora,
    });
    const rowBytes = 4 * c.hiddenSize;
    for (let g = 0; g < G; g++) rec.copy(h, last, rowBytes, (T - 1) * rowBytes, g * rowBytes);
    cache.share(rec, 0, Array.from({ length: G }, (_, g) => g), T);

    const attend = { kind: 'cached', cache, slot0: 0, count: G, split: { workspace: splitWs, chunks } } as const;
    const rng = { seed: r.seed, step: stepNumber };
    const sample = (hidden: Tensor) => {
      head.fullLogits(rec, hidden, logits, true);
      sampler.sample(rec, logits, r.sampling, rng, { ids, logp }, seen, thinking && ((rr) => thinking.record(rr, { ids, logp })));
    };
    const recordStep = (step: number, j: number) => {
      rec.copy(steps, current, 4 * rowWords, 4 * rowWords * step);
      if (step === 0) sample(last);
      else if (stepTape) rec.replay(stepTape);
      else stepTape = rec.capture(() => sample(decoder.forward(rec, ws, { ids, positions: stepPositions, attend, lora: r.lora }))).tape;
      rec.copy(ids, packed, 4 * G, 0, 8 * G * j);
      rec.copy(logp, packed, 4 * G, 0, 8 * G * j + 4 * G);
    };
    /** Record and submit steps [from, from + n), a submit each; resolves to their packed ids and log-probs. */
    const launch = (from: number, n: number) => {
      for (let j = 0; j < n; j++) {
        recordStep(from + j, j);
        if (j < n - 1) rec.flush();
      }
      const done = rec.submit();
      const words = gpu.read(packed);
      return Promise.all([done, words]).then(([, w]) => ({ from, n, words: w as Uint32Array }));
    };
    const take = ({ n, words }: { n: number; words: Uint32Array }): boolean => {
      const lp = new Float32Array(words.buffer, words.byteOffset, words.length);
      for (let j = 0; j < n; j++) {
        out.forEach((s, g) => {
          if (s.terminated) return;
          const id = words[2 * G * j + g];
          s.tokens.push(id);
          s.logps.push(lp[2 * G * j + G + g]);
          if (stop.has(id)) s.terminated = true;
        });
      }
      return out.every((s) => s.terminated);
    };
    const inFlight: ReturnType<typeof launch>[] = [];
    let next = 0;
    const fill = () => {
      while (inFlight.length < BATCHES_IN_FLIGHT && next < r.maxNewTokens) {
        const n = Math.min(STEPS_PER_READBACK, r.maxNewTokens - next);
        const batch = launch(next, n);
        // Awaited below unless an earlier batch fails first.
        batch.catch(() => undefined);
        inFlight.push(batch);
        next += n;
      }
    };
    fill();
    while (inFlight.length > 0) {
      const finished = take(await inFlight.shift()!);
      r.onTokens?.(out.reduce((n, s) => n + s.tokens.length, 0));
      if (finished) {
        await Promise.all(inFlight);
        break;
      }
      fill();
      // The queue is full again: a pause of the host here leaves the GPU busy.
      gpu.collectGarbage();
    }
  } finally {
    stepTape?.release();
    for (const t of [promptIds, last, logits, ids, logp, packed, steps, current, splitWs]) t.release();
    seen?.release();
    thinking?.release();
    ws.release();
    cache.release();
  }
  return out;
}
