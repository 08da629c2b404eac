// Model-level benchmarks through Dawn: a Qwen3-VL-2B-shaped model (4B, 8B with --size) with random weights (4-bit LM,
// the vision tower's matrices in bf16 as the published checkpoints hold them, or 4-bit with --vision-q4; src/model/randomWeights.ts), LoRA r=16 on q/k/v/o/gate/up/down, timed on the
// paths the app runs:
//   prefill   a 512-token prompt holding one 448x448 image (196 image tokens): the vision tower
//             alone, and generate() with one new token (vision + decoder prefill + LM head).
//   decode    generate() for 1 and for 8 samples of the same prompt, 128 new tokens at
//             temperature 1, no stop ids; decode time = generate(128) − generate(1), so only the
//             127 decode steps count (prefill, vision and the first token are subtracted).
//   gspo      one optimizer step on a fixed synthetic batch: 8 prompts (a short prompt with one
//             224x224 image) x 8 completions of 256 random tokens; per prompt the training forward,
//             the GSPO loss (sequence-level ratio, loss_type 'grpo', ε 3e-4/4e-4, on-policy) and
//             the backward (src/rl/microBatch.ts's groupStep, the trainer's path: a group packs
//             its prompt once, 96 + 8 x 256 rows, within the default budget of 4096: one training
//             forward); then
//             clip + AdamW. Generation is not part of it. Where the GPU has subgroup matrices, again
//             on int8 tensor cores with x in two limbs and in one, and how far each moves one
//             group's log-probs and LoRA gradients from the f32 kernels'.
//   memory    the pool's peak (inUse + cached, weights included: every tensor comes from the pool)
//             during the GSPO step, and during the default trainer config's step (src/rl/config.ts:
//             one group of 8 completions, max_prompt_length 512 with a 224x224 image, 256 completion
//             tokens, LoRA r=8), generation of its 8 completions included, the pool switching
//             phases between them as the trainer's does (BufferPool.enterPhase), and the step as
//             the trainer runs it (512 + 8 x 256 rows: one training forward); the second such RL
//             step, timed (the first compiles its pipelines and fills the pool). The largest live
//             buffers at the peak of buffers in use are listed by label (layer numbers folded into '#').
//
//   npm run bench:build
//   node .bench/model.mjs [--quick] [--size 2b|4b|8b] [--json FILE] [--only prefill,decode,gspo,default] [--vision-q4]
//     [--vision-products auto|f32|int8|f16] (the vision tower's products in every section; default auto)
//     [--samples 1,4,8] (decode's numbers of sequences) [--new-tokens N] (decode's tokens a sequence, default 128)
//     [--default-rank R] (the default trainer config's LoRA rank, default 8; bench/torch_model.py takes it too)
//     [--profile] (GPU time by kernel; in the default section also one generation's GPU time in stream and span)
//     [--ablate] (with --profile: what each compiled kernel costs a decode step in stream)
//     [--subsets] (with --ablate: decode's GEMVs and other kernels, alone and together)
//     [--f16] (Dawn's vulkan_enable_f16_on_nvidia: shader-f16 and f16 subgroup matrices on NVIDIA's Vulkan driver)
//     [--activation-storage f16] (with shader-f16: the default config's steps again with the kept hidden
//     states in f16, on the f16 products where offered, else f32: times, memory, and how far the
//     f16 states move the log-probs and LoRA gradients of the GSPO group tensorCoreDrift measures)
//     [--kv-cache auto|f32|f16] (generation's KV cache, EngineConfig.kv_cache; default auto: f32 on the f32 products.
//     With an f16 cache the decode section also measures its drift: the same G x 128 sampled
//     completions (same seed) over an f16 and an f32 cache, |Δ log-prob| of each sampled token up to
//     its sequence's first token that differs)
//     [--dawn-flag FLAG] (repeatable: an extra Dawn flag, e.g. enable-dawn-features=skip_validation)
//     [--phase-buffers keep|release] (the default config's RL steps: the pool keeps both phases'
//     buffers between generation and training, or only the coming phase's; EngineConfig.phase_buffers)
// --quick shrinks the model and the work for a check on software Vulkan:
//   VLRL_VK=lavapipe node .bench/model.mjs --quick
// bench/torch_model.py does the same work in PyTorch + PEFT; bench/report.ts merges the two.
import { writeFileSync } from 'node:fs';
import { performance as nodePerformance } from 'node:perf_hooks';
import { capabilitiesOf, capabilitySummary, type Gpu, type Kernel, type StreamAlterations } from '../src/gpu';
import { createNodeGpu } from '../src/node/gpu';
import { AdamW } from '../src/ops/adamw';
import { Lora } from '../src/ops/lora';
import { createLoraParamSet, type LoraParams } from '../src/ops/loraParams';
import { RlLoss } from '../src/ops/rlLoss';
import { parseQwen3VLConfig, type Qwen3VLConfig } from '../src/model/config';
import { memoryPlan, trainingMemory } from '../src/model/memoryPlan';
import { LORA_PROJECTIONS, loraModuleName } from '../src/model/decoder';
import type { ActivationStorage } from '../src/model/activationStorage';
import { isKvCacheSetting, KV_CACHE_SETTINGS, type KvCacheSetting } from '../src/model/kvCacheSetting';
import { isProducts, type Products, type VisionProducts } from '../src/model/products';
import { chooseVisionProducts, isVisionProductsSetting, VISION_PRODUCTS_SETTINGS, type VisionProductsSetting } from '../src/model/visionProductsSetting';
import { PHASE_BUFFERS as PHASE_BUFFER_VALUES, type PhaseBuffers } from '../src/rl/engineConfig';
import { Qwen3VL } from '../src/model/qwen3vl';
import { randomWeights } from '../src/model/randomWeights';
import { Qwen3VLPolicy } from '../src/model/train';
import { mmaUnsupported } from '../src/ops/matmulQ4Mma';
import { f16UnsupportedOn } from '../src/ops/matmulQ4F16';
import { DEFAULT_MICRO_BATCH_TOKENS, groupStep } from '../src/rl/microBatch';
import { resolveLossConfig, type ResolvedLossConfig } from '../src/rl/lossConfig';
import type { Completion, PreparedPrompt, SamplingOptions, SequenceBatch } from '../src/rl/policy';
import { Filler } from '../src/bench/fill';
import { Rng } from '../src/data/random';
import modelSizes from './model-sizes.json';

const args = process.argv.slice(2);
const QUICK = args.includes('--quick');
const jsonOut = (() => {
  const i = args.indexOf('--json');
  return i >= 0 ? args[i + 1] : undefined;
})();
/** --only SECTIONS: those sections alone, comma-separated (short device runs). */
const only = (() => {
  const i = args.indexOf('--only');
  return i >= 0 ? args[i + 1] : undefined;
})();
const runs = (section: 'prefill' | 'decode' | 'gspo' | 'default') => only === undefined || only.split(',').includes(section);
/** --vision-q4: the vision tower's dense weights in 4-bit (loadVisionWeights' quant 'q4'; not the loader's default). */
const VISION_Q4 = args.includes('--vision-q4');
/** --vision-products auto|f32|int8|f16: where the vision tower's dense products run in every section
 * (ModelOptions.visionProducts; default auto, the engine's default: f16 in the sections on f16
 * products, else f32); prefill times the others beside it. */
const VISION_PRODUCTS = ((): VisionProductsSetting => {
  const i = args.indexOf('--vision-products');
  if (i < 0) return 'auto';
  const v = args[i + 1];
  if (!isVisionProductsSetting(v)) throw new Error(`--vision-products takes ${VISION_PRODUCTS_SETTINGS.join(', ')}; got ${v === undefined ? 'nothing' : `'${v}'`}`);
  return v;
})();

/** --f16: shader-f16 where the driver has it (Dawn hides it on NVIDIA's Vulkan driver without the toggle). */
const F16 = args.includes('--f16');

/** --activation-storage f16|f32: f16 adds the default config's runs with the kept hidden states in f16 (EngineConfig.activation_storage). */
const ACTIVATION_STORAGE = (() => {
  const i = args.indexOf('--activation-storage');
  if (i < 0) return 'f32';
  const v = args[i + 1];
  if (v !== 'f16' && v !== 'f32') throw new Error(`--activation-storage takes f16 or f32; got ${v === undefined ? 'nothing' : `'${v}'`}`);
  return v;
})();

/** --phase-buffers keep|release: what the pool does with generation's and training's buffers at each switch (EngineConfig.phase_buffers; default keep, as the trainer). */
const PHASE_BUFFERS: PhaseBuffers = (() => {
  const i = args.indexOf('--phase-buffers');
  const v = i < 0 ? 'keep' : args[i + 1];
  if (!(PHASE_BUFFER_VALUES as readonly string[]).includes(v)) throw new Error(`--phase-buffers takes ${PHASE_BUFFER_VALUES.join(', ')}; got ${v === undefined ? 'nothing' : `'${v}'`}`);
  return v as PhaseBuffers;
})();
const PHASE_KEEP = PHASE_BUFFERS === 'keep' ? 'all' : 'own';

/** --kv-cache auto|f32|f16: how generation's KV cache stores K and V (ModelOptions.kvCache). */
const KV_CACHE: KvCacheSetting = (() => {
  const i = args.indexOf('--kv-cache');
  if (i < 0) return 'auto';
  const v = args[i + 1];
  if (!isKvCacheSetting(v)) throw new Error(`--kv-cache takes ${KV_CACHE_SETTINGS.join(', ')}; got '${v}'`);
  return v;
})();

/** --dawn-flag FLAG (repeatable): an extra Dawn flag for the device, e.g. enable-dawn-features=skip_validation (what
 * Dawn's own checks cost the host; Chrome never runs without them). */
const DAWN_FLAGS: string[] = args.flatMap((a, i) => (a === '--dawn-flag' && args[i + 1] ? [args[i + 1]] : []));

/** --also-products LIST: int8 settings (src/model/products.ts) whose default-config step is timed
 * too, after the int8 and f16 ones (result.defaultConfigAlso), e.g. int8-row,int8-1limb. */
const ALSO_PRODUCTS: Products[] = (() => {
  const i = args.indexOf('--also-products');
  if (i < 0) return [];
  const vs = (args[i + 1] ?? '').split(',');
  for (const v of vs) if (!isProducts(v) || v === 'f32' || v === 'f16' || v === 'int8') throw new Error(`--also-products takes int8-row and int8-1limb; got '${v}'`);
  return vs as Products[];
})();

/** --size 2b|4b|8b: the published Qwen3-VL-{2B,4B,8B}-Instruct shapes (default 2b). */
const SIZE = (() => {
  const i = args.indexOf('--size');
  const v = i >= 0 ? args[i + 1] : '2b';
  if (v !== '2b' && v !== '4b' && v !== '8b') throw new Error(`--size ${v}: expected 2b, 4b or 8b`);
  return v;
})();

/** The shapes of Qwen3-VL-{2B,4B,8B}-Instruct's config.json files as published (spec B1; read by
 * bench/torch_model.py and tools/full_size_parity.py too). */
const SIZES = modelSizes;

/** Training memory targets by size: a 2B trains in 6 GB, a 4B in 8, an 8B in 12 (to fit a 16 GB consumer GPU beside the browser). */
const MEMORY_TARGET_GIB = { '2b': 6, '4b': 8, '8b': 12 } as const;

/** The config.json of the chosen size (spec B1); --quick: the same architecture, shrunk. */
function configJson(): unknown {
  const full = {
    ...SIZES[SIZE],
    tokens: { image: 151655, video: 151656, start: 151652, end: 151653, bos: 151643, eos: 151645 },
  };
  const quick = {
    text: { hidden_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 32, intermediate_size: 256, vocab_size: 4096, mrope_section: [6, 5, 5] },
    vision: { depth: 2, hidden_size: 64, num_heads: 2, intermediate_size: 128, out_hidden_size: 128, num_position_embeddings: 64, deepstack_visual_indexes: [0] },
    tokens: { image: 4000, video: 4001, start: 3998, end: 3999, bos: 4002, eos: 4003 },
    tied: true,
  };
  const s = QUICK ? quick : full;
  const { mrope_section, ...text } = s.text;
  return {
    architectures: ['Qwen3VLForConditionalGeneration'],
    model_type: 'qwen3_vl',
    dtype: 'bfloat16',
    image_token_id: s.tokens.image,
    video_token_id: s.tokens.video,
    vision_start_token_id: s.tokens.start,
    vision_end_token_id: s.tokens.end,
    tie_word_embeddings: s.tied,
    text_config: {
      ...text,
      model_type: 'qwen3_vl_text',
      hidden_act: 'silu',
      attention_bias: false,
      max_position_embeddings: 262144,
      rms_norm_eps: 1e-6,
      bos_token_id: s.tokens.bos,
      eos_token_id: s.tokens.eos,
      tie_word_embeddings: s.tied,
      rope_parameters: { rope_type: 'default', rope_theta: 5000000, mrope_section, mrope_interleaved: true },
    },
    vision_config: {
      ...s.vision,
      model_type: 'qwen3_vl_vision',
      hidden_act: 'gelu_pytorch_tanh',
      in_channels: 3,
      patch_size: 16,
      temporal_patch_size: 2,
      spatial_merge_size: 2,
    },
  };
}

/** --samples 1,4,8: the decode section's numbers of sequences (default 1 and 8, as PyTorch's). */
const samplesFlag = (() => {
  const i = args.indexOf('--samples');
  return i >= 0 ? args[i + 1].split(',').map(Number) : undefined;
})();

/** The work; bench/torch_model.py uses the same numbers (keep them in step). */
const W0 = QUICK
  ? { promptLen: 48, promptImage: 64, newTokens: 8, samples: [1, 8], reps: 2, prompts: 2, G: 4, completion: 16, trainPrompt: 24, trainImage: 64, rank: 16, defaults: { prompt: 48, image: 64, G: 4, completion: 16, rank: 8 } }
  : { promptLen: 512, promptImage: 448, newTokens: 128, samples: [1, 8], reps: 3, prompts: 8, G: 8, completion: 256, trainPrompt: 96, trainImage: 224, rank: 16, defaults: { prompt: 512, image: 224, G: 8, completion: 256, rank: 8 } };
/** The integer after `name` (at least `min`), or undefined when the flag is absent. */
function intFlag(name: string, min: number): number | undefined {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const n = Number(args[i + 1]);
  if (!Number.isInteger(n) || n < min) throw new Error(`${name} takes an integer of at least ${min}; got '${args[i + 1] ?? ''}'`);
  return n;
}
/** --new-tokens N: the decode section's tokens a sequence (default 128, as PyTorch's; the default
 * trainer config generates 256, whose own keys outgrow the shared prompt's share of attention). */
const newTokensFlag = intFlag('--new-tokens', 2);
/** --default-rank R: the default trainer config's LoRA rank (src/rl/config.ts: 8), for its step at larger ranks. */
const defaultRankFlag = intFlag('--default-rank', 1);
const W = { ...W0, samples: samplesFlag ?? W0.samples, newTokens: newTokensFlag ?? W0.newTokens, defaults: { ...W0.defaults, rank: defaultRankFlag ?? W0.defaults.rank } };

/** A seeded generator (src/data/random.ts's Mulberry32): the same synthetic batch on every run. */
function rng(seed: number): () => number {
  const r = new Rng(seed);
  return () => r.next();
}

/** Text ids below every special token of the config. */
const textIds = (c: Qwen3VLConfig, n: number, r: () => number) => Array.from({ length: n }, () => Math.floor(r() * Math.min(c.tokens.visionStart, c.text.vocabSize - 8)));

/** A prompt of `length` tokens: 4 text tokens, <vision_start>, the image's pads, <vision_end>, text to the length. */
function syntheticPrompt(c: Qwen3VLConfig, id: string, length: number, imageSide: number, r: () => number): PreparedPrompt {
  const grid = imageSide / c.vision.patchSize;
  const pads = (grid * grid) / c.vision.spatialMergeSize ** 2;
  const rest = length - 4 - 2 - pads;
  if (rest < 0) throw new Error(`a ${length}-token prompt cannot hold a ${imageSide}x${imageSide} image (${pads} tokens)`);
  const ids = [...textIds(c, 4, r), c.tokens.visionStart, ...new Array<number>(pads).fill(c.tokens.image), c.tokens.visionEnd, ...textIds(c, rest, r)];
  const width = c.vision.inChannels * c.vision.temporalPatchSize * c.vision.patchSize ** 2;
  const pixelValues = Float32Array.from({ length: grid * grid * width }, () => 2 * r() - 1);
  return { id, inputIds: Int32Array.from(ids), images: [{ pixelValues, gridThw: [1, grid, grid], key: id }] };
}

function makeLora(gpu: Gpu, c: Qwen3VLConfig, r: number): LoraParams[] {
  const t = c.text;
  const q = t.numHeads * t.headDim;
  const kv = t.numKvHeads * t.headDim;
  const dims = { q: [q, t.hiddenSize], k: [kv, t.hiddenSize], v: [kv, t.hiddenSize], o: [t.hiddenSize, q], gate: [t.intermediateSize, t.hiddenSize], up: [t.intermediateSize, t.hiddenSize], down: [t.hiddenSize, t.intermediateSize] };
  // As the app's session allocates them: views into flat buffers (the optimizer's multi-tensor path).
  const specs = Array.from({ length: t.numLayers }, (_, l) => LORA_PROJECTIONS.map((p) => ({ name: `base_model.model.${loraModuleName(l, p)}`, out: dims[p][0], in: dims[p][1], r, alpha: 2 * r }))).flat();
  return createLoraParamSet(gpu, specs);
}

/**
 * Live buffers by label, for the list of the largest at the peak. The pool keeps no labels of
 * what it hands out, so its acquire and release are wrapped here (benchmark instrumentation only).
 */
class PoolWatch {
  private live = new Map<GPUBuffer, { label: string; bytes: number }>();
  /** Released buffers the pool keeps, by their last label (until reused or destroyed). */
  private cached = new Map<GPUBuffer, { label: string; bytes: number }>();
  private readonly wrapped = new WeakSet<GPUBuffer>();
  private inUse = 0;
  peakInUse = 0;
  atPeak: { label: string; bytes: number }[] = [];
  /** At the pool's peak (in use + cached): the buffers in use, and those cached. */
  atPoolPeak: { inUse: { label: string; bytes: number }[]; cached: { label: string; bytes: number }[] } = { inUse: [], cached: [] };

  constructor(private readonly gpu: Gpu) {
    const pool = gpu.pool;
    const acquire = pool.acquire.bind(pool);
    const release = pool.release.bind(pool);
    pool.acquire = (bytes, label) => {
      const before = pool.stats.inUse;
      const peak = pool.stats.peak;
      const buf = acquire(bytes, label);
      const cls = pool.stats.inUse - before;
      this.cached.delete(buf);
      this.live.set(buf, { label, bytes: cls });
      this.inUse += cls;
      if (this.inUse > this.peakInUse) {
        this.peakInUse = this.inUse;
        this.atPeak = [...this.live.values()];
      }
      if (pool.stats.peak > peak) this.atPoolPeak = { inUse: [...this.live.values()], cached: [...this.cached.values()] };
      return buf;
    };
    pool.release = (buf) => {
      const e = this.live.get(buf);
      if (e) {
        this.inUse -= e.bytes;
        // The pool destroys what it trims: such a buffer is no longer cached (wrapped once a buffer).
        if (!this.wrapped.has(buf)) {
          this.wrapped.add(buf);
          const destroy = buf.destroy.bind(buf);
          buf.destroy = () => {
            this.cached.delete(buf);
            destroy();
          };
        }
        this.cached.set(buf, e);
      }
      this.live.delete(buf);
      release(buf);
    };
  }

  /** Forget earlier peaks: the pool's cached buffers are destroyed, the peaks restart from what is in use. */
  reset(): void {
    this.gpu.pool.trim();
    this.gpu.pool.stats.peak = this.gpu.pool.stats.inUse;
    this.peakInUse = this.inUse;
    this.atPeak = [...this.live.values()];
    this.atPoolPeak = { inUse: [...this.live.values()], cached: [...this.cached.values()] };
  }

  /** The largest label groups live at the in-use peak (digits folded, so the 28 layers' copies add up). */
  largest(n: number, at: readonly { label: string; bytes: number }[] = this.atPeak): { label: string; count: number; bytes: number }[] {
    const groups = new Map<string, { label: string; count: number; bytes: number }>();
    for (const { label, bytes } of at) {
      const key = label.replace(/\d+/g, '#');
      const g = groups.get(key) ?? { label: key, count: 0, bytes: 0 };
      g.count++;
      g.bytes += bytes;
      groups.set(key, g);
    }
    return [...groups.values()].sort((a, b) => b.bytes - a.bytes).slice(0, n);
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function timed(gpu: Gpu, f: () => Promise<unknown>): Promise<number> {
  await gpu.sync();
  const t0 = performance.now();
  await f();
  await gpu.sync();
  return (performance.now() - t0) / 1000;
}

/** Warm-up runs take at least this long in all. */
const WARM_UP_S = 0.3;

/**
 * Median seconds of `reps` runs after warm-up runs of WARM_UP_S in all (at least one): the GPU's
 * clocks drop while the host works alone (a tensor-core check against f64 takes seconds), and
 * then its first few hundred ms of work run up to 5x slower in stream (BENCHMARKS.md, Findings).
 */
async function seconds(gpu: Gpu, reps: number, f: () => Promise<unknown>): Promise<number> {
  for (let warm = 0; warm < WARM_UP_S; ) warm += await timed(gpu, f);
  const ts: number[] = [];
  for (let i = 0; i < reps; i++) ts.push(await timed(gpu, f));
  return median(ts);
}

interface StepSetup {
  policy: Qwen3VLPolicy;
  rl: RlLoss;
  adamw: AdamW;
  loss: ResolvedLossConfig;
  prompts: PreparedPrompt[];
  completions: number[][][];
  rewards: number[][];
}

/**
 * One optimizer step: per prompt forward, loss, backward (gradients add up), then clip + AdamW.
 * Each group goes through the trainer's groupStep, in micro-batches of its default token budget.
 */
async function gspoStep(gpu: Gpu, s: StepSetup, step: number, prompts = s.prompts.length, gradientCheckpointing = true): Promise<void> {
  for (let i = 0; i < prompts; i++) {
    const batch = { prompt: s.prompts[i], completions: s.completions[i] };
    const T = Math.max(...batch.completions.map((c) => c.length));
    const mask = new Float32Array(batch.completions.length * T);
    batch.completions.forEach((c, g) => mask.fill(1, g * T, g * T + c.length));
    await groupStep(gpu, s.policy, s.rl, {
      batch,
      temperature: 1,
      loss: { mask, old: null, ref: null, sampling: null, scores: { rewards: s.rewards[i] }, config: s.loss },
      tokenBudget: DEFAULT_MICRO_BATCH_TOKENS,
      gradientCheckpointing,
    });
  }
  const rec = gpu.recorder('bench.adamw');
  s.adamw.step(rec, { lr: 1e-5, step });
  s.adamw.zeroGrad(rec);
  await rec.submit();
}

/**
 * Where the wall time of one gspoStep goes on the host: when the policy's forward and backward
 * calls start and return (the policy's methods wrapped for the one step), the main thread's busy
 * time (event-loop utilisation), the process's CPU time, the dispatches encoded, and the buffers
 * and bind groups made.
 */
async function stepPhases(gpu: Gpu, s: StepSetup, step: number) {
  const policy = s.policy;
  const created0 = gpu.pool.stats.created;
  const groups0 = gpu.bindingCache.stats.groupsCreated;
  const marks: Record<string, number> = {};
  const forward = policy.forward.bind(policy);
  const backward = policy.backward.bind(policy);
  const t0 = performance.now();
  const at = (name: string) => (marks[name] = performance.now() - t0);
  policy.forward = async (...a: Parameters<typeof forward>) => {
    at('forward called');
    const r = await forward(...a);
    at('forward returned');
    return r;
  };
  policy.backward = async (...a: Parameters<typeof backward>) => {
    at('backward called');
    await backward(...a);
    at('backward returned');
  };
  const host0 = { ...gpu.hostStats };
  const cpu0 = process.cpuUsage();
  const elu0 = nodePerformance.eventLoopUtilization();
  try {
    await gspoStep(gpu, s, step);
    await gpu.sync();
  } finally {
    policy.forward = forward;
    policy.backward = backward;
  }
  at('end');
  const cpu = process.cpuUsage(cpu0);
  return {
    marksMs: marks,
    mainThreadBusyMs: nodePerformance.eventLoopUtilization(elu0).active,
    processCpuMs: (cpu.user + cpu.system) / 1000,
    dispatches: gpu.hostStats.dispatches - host0.dispatches,
    submitMs: gpu.hostStats.submitMs - host0.submitMs,
    buffersCreated: gpu.pool.stats.created - created0,
    bindGroupsCreated: gpu.bindingCache.stats.groupsCreated - groups0,
  };
}

async function stepSetup(gpu: Gpu, policy: Qwen3VLPolicy, params: LoraParams[], n: { prompts: number; G: number; completion: number; prompt: number; image: number }, seed: number): Promise<StepSetup> {
  const r = rng(seed);
  const c = policy.model.config;
  const [rl, adamw] = await Promise.all([RlLoss.create(gpu), AdamW.create(gpu, params.flatMap((p) => [{ param: p.A, grad: p.dA }, { param: p.B, grad: p.dB }]), { maxGradNorm: 1 })]);
  const rec = gpu.recorder('bench.zero');
  adamw.zeroGrad(rec);
  await rec.submit();
  const prompts = Array.from({ length: n.prompts }, (_, i) => syntheticPrompt(c, `train${i}`, n.prompt, n.image, r));
  return {
    policy,
    rl,
    adamw,
    // GSPO as TRL's paper config runs it (spec rl-loss.md A2): sequence ratio, 'grpo' normalisation.
    loss: resolveLossConfig({
      importance_sampling_level: 'sequence',
      loss_type: 'grpo',
      epsilon: 3e-4,
      epsilon_high: 4e-4,
      beta: 0,
      num_generations: n.G,
      max_completion_length: n.completion,
      gradient_accumulation_steps: n.prompts,
    }),
    prompts,
    completions: prompts.map(() => Array.from({ length: n.G }, () => textIds(c, n.completion, r))),
    rewards: prompts.map(() => Array.from({ length: n.G }, () => r())),
  };
}

/**
 * How far the tensor-core GEMM moves one group's training forward and backward: completion
 * log-probs and d(Σ log-probs)/d(LoRA A, B), computed with the decoder on the f32 kernels and then
 * on int8 tensor cores. The adapters' B is filled with random values first (at PEFT's B = 0 the
 * gradients of A vanish); they are left that way (this runs after the timed steps).
 */
async function tensorCoreDrift(gpu: Gpu, model: Qwen3VL, policy: Qwen3VLPolicy, params: LoraParams[], batch: SequenceBatch, filler: Filler, noF16: string | null) {
  await randomB(gpu, params, filler);
  const run = async (products: Products) => {
    await model.setProducts(products);
    return trainingGrads(gpu, model, policy, params, batch);
  };
  const ref = await run('f32');
  const two = await run('int8');
  const one = await run('int8-1limb');
  const byRow = await run('int8-row');
  const f16 = noF16 ? null : await run('f16');
  await model.setProducts('f32');
  return { two: driftOf(ref, two), one: driftOf(ref, one), byRow: driftOf(ref, byRow), f16: f16 && driftOf(ref, f16) };
}

/** The adapters' B filled with random values: at PEFT's B = 0 the gradients of A vanish. */
async function randomB(gpu: Gpu, params: LoraParams[], filler: Filler): Promise<void> {
  const rec = gpu.recorder('bench.lora_b');
  for (const p of params) filler.fill(rec, p.B, 'uniform', 0.02);
  await rec.submit();
}

/** One group's completion log-probs and d(Σ log-probs)/d(every A, B), on the model's current settings. */
async function trainingGrads(gpu: Gpu, model: Qwen3VL, policy: Qwen3VLPolicy, params: LoraParams[], batch: SequenceBatch) {
  const fwd = await policy.forward(batch, { temperature: 1, lora: true, train: true, gradientCheckpointing: true });
  const [logps, mask] = [await gpu.readF32(fwd.logps), await gpu.readF32(fwd.mask)];
  const zero = gpu.recorder('bench.zero');
  for (const p of params) model.decoder.ops.lora.zeroGrad(zero, p);
  await zero.submit();
  await policy.backward(fwd.mask); // d(Σ log-probs): gradient 1 on every completion token
  const grads: Float32Array[] = [];
  for (const p of params) grads.push(await gpu.readF32(p.dA), await gpu.readF32(p.dB));
  return { logps, mask, grads };
}

/**
 * How far keeping the hidden states in f16 moves one group's log-probs and LoRA gradients: on
 * `products`, f16 states against f32 ones (the storage alone), and the f16 path whole (`products`
 * with f16 states) against f32 products with f32 states, the figure PyTorch's bf16-against-fp32
 * drift (torch_model.py) answers. B random first, as tensorCoreDrift.
 */
async function activationStorageDrift(gpu: Gpu, model: Qwen3VL, policy: Qwen3VLPolicy, params: LoraParams[], batch: SequenceBatch, filler: Filler, products: Products) {
  await randomB(gpu, params, filler);
  const run = async (p: Products, storage: 'f32' | 'f16') => {
    await model.setProducts(p);
    model.setActivationStorage(storage);
    return trainingGrads(gpu, model, policy, params, batch);
  };
  const ref = await run('f32', 'f32');
  const kept32 = await run(products, 'f32');
  const kept16 = await run(products, 'f16');
  await model.setProducts('f32');
  model.setActivationStorage('f32');
  return { products, storageOnly: driftOf(kept32, kept16), againstF32Path: driftOf(ref, kept16), productsOnly: driftOf(ref, kept32) };
}

/** How far `tc`'s log-probs and gradients are from `ref`'s (tensorCoreDrift). */
function driftOf(ref: { logps: Float32Array; mask: Float32Array; grads: Float32Array[] }, tc: { logps: Float32Array; grads: Float32Array[] }) {
  let maxLogp = 0;
  let sumLogp = 0;
  let tokens = 0;
  ref.logps.forEach((v, i) => {
    if (!ref.mask[i]) return;
    const d = Math.abs(tc.logps[i] - v);
    maxLogp = Math.max(maxLogp, d);
    sumLogp += d;
    tokens++;
  });
  // Per gradient tensor: the largest difference over the tensor's largest entry, and ‖Δ‖/‖ref‖.
  const perTensor = ref.grads.map((g, j) => {
    let [dmax, gmax, d2, g2] = [0, 0, 0, 0];
    g.forEach((v, i) => {
      const d = tc.grads[j][i] - v;
      dmax = Math.max(dmax, Math.abs(d));
      gmax = Math.max(gmax, Math.abs(v));
      d2 += d * d;
      g2 += v * v;
    });
    return { ofMax: dmax / gmax, norm: Math.sqrt(d2 / g2) };
  });
  const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
  const ofMax = sorted(perTensor.map((t) => t.ofMax));
  const norm = sorted(perTensor.map((t) => t.norm));
  return {
    tokens,
    logpMaxAbs: maxLogp,
    logpMeanAbs: sumLogp / tokens,
    gradTensors: perTensor.length,
    gradOfMaxMedian: ofMax[ofMax.length >> 1],
    gradOfMaxWorst: ofMax[ofMax.length - 1],
    gradNormMedian: norm[norm.length >> 1],
    gradNormWorst: norm[norm.length - 1],
  };
}

interface KernelTime {
  name: string;
  calls: number;
  us: number;
}

/** The profiler's report of what `f` records: every dispatch in its own pass, or the passes as recorded. */
async function profiled(gpu: Gpu, mode: 'pass' | 'dispatch', f: () => Promise<unknown>) {
  const prof = gpu.startProfiling(mode);
  await f();
  await gpu.sync();
  const r = prof.report();
  gpu.stopProfiling();
  return r;
}

/** GPU time by kernel of what `f` records (every dispatch in its own pass), slowest first. */
async function kernelTimes(gpu: Gpu, f: () => Promise<unknown>): Promise<KernelTime[]> {
  const rows = (await profiled(gpu, 'dispatch', f)).map((k) => ({ name: k.name, calls: k.calls, us: 1000 * k.totalMs }));
  return rows.sort((x, y) => y.us - x.us);
}

/** The GPU time in stream (ms) of what `f` records (its passes as the engine records them), and
 * the dispatches of each kernel, the stream altered by `alter` (Gpu.startProfiling). */
async function passProfile(gpu: Gpu, f: () => Promise<unknown>, alter: StreamAlterations = {}) {
  const prof = gpu.startProfiling('pass', alter);
  await f();
  await gpu.sync();
  const r = { ms: prof.report().reduce((t, k) => t + k.totalMs, 0), dispatched: new Map(prof.dispatched) };
  gpu.stopProfiling();
  return r;
}

/** The GPU time in stream (ms) of what `f` records. */
async function gpuMsInStream(gpu: Gpu, f: () => Promise<unknown>): Promise<number> {
  return (await passProfile(gpu, f)).ms;
}

/**
 * `f`'s GPU time in stream (its passes as the engine records them) and span (first pass's begin to
 * last one's end, idle included); the main thread's busy time (event-loop utilisation: JS and the
 * synchronous Dawn calls that record, plus polling); the process's CPU time (every thread, a
 * driver's spin-waits included); the wall time; and of the main thread's time, what
 * Recorder.replay and finishing + submitting took (Gpu.hostStats), with the dispatches encoded.
 */
async function hostAndStream(gpu: Gpu, f: () => Promise<unknown>) {
  const prof = gpu.startProfiling('pass');
  const host0 = { ...gpu.hostStats };
  const cpu0 = process.cpuUsage();
  const elu0 = nodePerformance.eventLoopUtilization();
  const w0 = performance.now();
  await f();
  await gpu.sync();
  const wallMs = performance.now() - w0;
  const cpu = process.cpuUsage(cpu0);
  const mainMs = nodePerformance.eventLoopUtilization(elu0).active;
  const gpuMs = prof.report().reduce((t, k) => t + k.totalMs, 0);
  const spanMs = prof.spanMs();
  gpu.stopProfiling();
  const host = gpu.hostStats;
  return {
    gpuMs,
    spanMs,
    cpuMs: (cpu.user + cpu.system) / 1000,
    mainMs,
    wallMs,
    dispatches: host.dispatches - host0.dispatches,
    replayMs: host.replayMs - host0.replayMs,
    submitMs: host.submitMs - host0.submitMs,
  };
}

const GiB = 2 ** 30;

/**
 * How far an f16 KV cache moves sampled log-probs from the f32 cache's: `generate` (same prompt,
 * same seed) over the model's f16 cache, then over an f32 cache; |Δ log-prob| of each sampled
 * token while both drew the same tokens (a sequence is compared up to its first token that differs:
 * past it the two continue different texts).
 */
async function kvCacheDrift(model: Qwen3VL, generate: () => Promise<Completion[]>) {
  const setting = model.kvCacheSetting;
  const f16 = await generate();
  model.setKvCache('f32');
  const f32 = await generate();
  model.setKvCache(setting);
  const diffs: number[] = [];
  let diverged = 0;
  f16.forEach((a, i) => {
    const b = f32[i];
    let j = 0;
    for (; j < Math.min(a.tokens.length, b.tokens.length) && a.tokens[j] === b.tokens[j]; j++) diffs.push(Math.abs(a.samplingLogps[j] - b.samplingLogps[j]));
    if (j < Math.max(a.tokens.length, b.tokens.length)) diverged++;
  });
  const meanAbs = diffs.reduce((x, y) => x + y, 0) / Math.max(1, diffs.length);
  return { compared: 'same sampled tokens, up to each sequence\'s first difference', tokens: diffs.length, diverged, meanAbs, maxAbs: Math.max(0, ...diffs) };
}

async function main(): Promise<void> {
  const t0 = performance.now();
  const gpu = await createNodeGpu({ unsafeApis: true, f16: F16, dawnFlags: ['disable-dawn-features=timestamp_quantization', ...DAWN_FLAGS] });
  console.log(`adapter: ${gpu.adapter.name}; features: ${[...gpu.features].join(', ')}${QUICK ? '; QUICK model' : ''}`);
  console.log(`capabilities: ${capabilitySummary(capabilitiesOf(gpu)).join('; ')}`);
  const watch = new PoolWatch(gpu);
  const config = parseQwen3VLConfig(configJson());
  const filler = await Filler.create(gpu);
  const tw = performance.now();
  const weights = await randomWeights(gpu, config, (rec, t, scale) => filler.fill(rec, t, 'uniform', scale), { visionQuant: VISION_Q4 ? 'q4' : 'none' });
  await gpu.sync();
  gpu.pool.trim();
  const weightBytes = gpu.pool.stats.inUse;
  console.error(`random weights: ${(weightBytes / GiB).toFixed(2)} GiB in ${((performance.now() - tw) / 1000).toFixed(1)} s`);
  const model = await Qwen3VL.create(gpu, config, weights, { maxLogitRows: Math.max(...W.samples), kvCache: KV_CACHE, visionProducts: VISION_PRODUCTS });
  console.error(`kv_cache: ${model.kvCache.dtype} (${model.kvCache.why})`);
  const lora16 = makeLora(gpu, config, W.rank);
  const loraOp = await Lora.create(gpu);
  const init = (params: LoraParams[]) => {
    const rec = gpu.recorder('bench.lora');
    params.forEach((p, i) => loraOp.init(rec, p, i + 1));
    return rec.submit();
  };
  await init(lora16);
  model.attachLora(lora16);

  const result: Record<string, unknown> = {
    tool: 'webgpu (Dawn)',
    command: `node .bench/model.mjs ${args.join(' ')}`,
    adapter: gpu.adapter,
    features: [...gpu.features],
    date: new Date().toISOString(),
    quick: QUICK,
    size: SIZE,
    work: W,
    weightsGiB: weightBytes / GiB,
    kvCache: model.kvCache,
  };
  const save = () => {
    result.seconds = (performance.now() - t0) / 1000;
    if (jsonOut) writeFileSync(jsonOut, JSON.stringify(result, null, 1));
  };

  // (a) prefill, the vision tower on its own.
  const prompt = syntheticPrompt(config, 'prefill', W.promptLen, W.promptImage, rng(1));
  const sampling = (maxNewTokens: number): SamplingOptions => ({ temperature: 1, topP: 1, topK: 0, maxNewTokens, seed: 7 });
  // Each run encodes the image again, as a new prompt does (the model's vision cache would keep it).
  const gen = (G: number, n: number) => {
    model.visionCache.clear();
    return model.generate(prompt, G, sampling(n), { stopIds: [] });
  };
  let visionS = NaN;
  let prefillS = NaN;
  /** The image through the tower, its outputs given back. */
  const encode = async () => {
    model.visionCache.clear();
    const v = await model.encodeImages(prompt.inputIds, prompt.images);
    for (const t of [v.rows, v.embeds, ...v.deepstack]) t.release();
  };
  if (runs('prefill')) {
    visionS = await seconds(gpu, W.reps, encode);
    prefillS = await seconds(gpu, W.reps, () => gen(1, 1));
    result.prefill = {
      tokens: W.promptLen,
      imageTokens: (W.promptImage / 16) ** 2 / 4,
      visionS,
      totalS: prefillS,
      tokensPerS: W.promptLen / prefillS,
      lmTokensPerS: W.promptLen / (prefillS - visionS),
    };
    save();
    console.error(`prefill: ${prefillS.toFixed(3)} s (vision ${visionS.toFixed(3)} s)`);
    // The vision tower on int8, then f16 tensor cores (ModelOptions.visionProducts), where offered:
    // its time, the prefill's, its GPU time in stream, and how far its features move from the f32
    // tower's (relative RMS of the merged embeds, then of each deepstack feature).
    const features = async () => {
      model.visionCache.clear();
      const v = await model.encodeImages(prompt.inputIds, prompt.images);
      const out = await Promise.all([v.embeds, ...v.deepstack].map((t) => gpu.readF32(t)));
      for (const t of [v.rows, v.embeds, ...v.deepstack]) t.release();
      return out;
    };
    const offered: [VisionProducts, string | null][] = [['int8', mmaUnsupported(gpu)], ['f16', f16UnsupportedOn(gpu)]];
    await model.setVisionProducts('f32');
    const ref = offered.some(([, why]) => why === null) ? await features() : [];
    for (const [setting, why] of offered) {
      if (why !== null) continue;
      await model.setVisionProducts(setting);
      const got = await features();
      const relRms = got.map((g, i) => {
        let num = 0;
        let den = 0;
        g.forEach((x, j) => ((num += (x - ref[i][j]) ** 2), (den += ref[i][j] ** 2)));
        return Math.sqrt(num / den);
      });
      const tcVisionS = await seconds(gpu, W.reps, encode);
      const tcPrefillS = await seconds(gpu, W.reps, () => gen(1, 1));
      const inStreamMs = await gpuMsInStream(gpu, encode);
      await model.setVisionProducts('f32');
      result[setting === 'int8' ? 'visionTensorCores' : 'visionF16'] = { visionS: tcVisionS, prefillS: tcPrefillS, tokensPerS: W.promptLen / tcPrefillS, inStreamMs, relRms };
      save();
      console.error(`vision on ${setting} tensor cores: ${(1000 * tcVisionS).toFixed(1)} ms (${inStreamMs.toFixed(2)} ms GPU in stream), prefill ${(1000 * tcPrefillS).toFixed(1)} ms; features' relative RMS against f32 ${relRms.map((r) => r.toExponential(2)).join(', ')}`);
    }
    await model.setVisionProducts(VISION_PRODUCTS);
    // --profile: the GPU time of the vision tower, and of the whole prefill, in stream and by
    // kernel (a pass per dispatch); after the timings above, which ran slower after these passes.
    if (args.includes('--profile')) {
      const profile = async (what: string, work: () => Promise<unknown>) => {
        const inStreamMs = await gpuMsInStream(gpu, work);
        const rows = await kernelTimes(gpu, work);
        console.error(`${what} GPU time: ${inStreamMs.toFixed(2)} ms in stream; by kernel ${(rows.reduce((t, r) => t + r.us, 0) / 1000).toFixed(2)} ms in ${rows.reduce((t, r) => t + r.calls, 0)} dispatches`);
        for (const r of rows.slice(0, 10)) console.error(`  ${r.us.toFixed(0).padStart(6)} us  ${String(r.calls).padStart(4)} x ${r.name}`);
        return { inStreamMs, kernels: rows };
      };
      result.visionProfile = await profile('vision tower', encode);
      result.prefillProfile = await profile('prefill (vision included)', () => gen(1, 1));
    }
  }

  // (b) decode: the difference between 128 new tokens and 1 is 127 decode steps.
  const decode: Record<string, unknown>[] = [];
  // The host's part of a step: Recorder.replay and finish + submit (Gpu.hostStats), per call of
  // seconds() (its warm-up calls included); a step whose wall time is above it waited for the GPU.
  const hostMs = () => gpu.hostStats.replayMs + gpu.hostStats.submitMs;
  for (const G of runs('decode') ? W.samples : []) {
    const calls = [0, 0];
    const h0 = hostMs();
    const firstS = await seconds(gpu, W.reps, () => (calls[0]++, gen(G, 1)));
    const h1 = hostMs();
    const fullS = await seconds(gpu, W.reps, () => (calls[1]++, gen(G, W.newTokens)));
    const h2 = hostMs();
    const steps = W.newTokens - 1;
    const s = fullS - firstS;
    const hostMsPerStep = ((h2 - h1) / calls[1] - (h1 - h0) / calls[0]) / steps;
    decode.push({ samples: G, steps, decodeS: s, msPerStep: (1000 * s) / steps, tokensPerS: (G * steps) / s, hostMsPerStep });
    console.error(`decode x${G}: ${((1000 * s) / steps).toFixed(2)} ms/step (recording and submitting it: ${hostMsPerStep.toFixed(2)} ms)`);
  }
  result.decode = decode;
  if (runs('decode') && model.kvCache.dtype === 'f16') {
    const G = Math.max(...W.samples);
    const drift = await kvCacheDrift(model, () => gen(G, W.newTokens));
    result.kvCacheDrift = { samples: G, newTokens: W.newTokens, ...drift };
    save();
    console.error(`f16 vs f32 KV cache, ${G} x ${W.newTokens} sampled tokens: |Δ log-prob| mean ${drift.meanAbs.toExponential(2)}, max ${drift.maxAbs.toExponential(2)} over ${drift.tokens} tokens (${drift.diverged} of ${G} sequences drew another token at some step)`);
  }
  // --profile: GPU time per decode step by kernel (timestamps around every dispatch), the
  // difference between all new tokens and 1 as above: the same steps, over the same contexts, as
  // the timed decode.
  if (runs('decode') && args.includes('--profile')) {
    const byKernel = async (G: number, n: number) => new Map((await profiled(gpu, 'dispatch', () => gen(G, n))).map((k) => [k.name, k]));
    // The same difference in 'pass' mode (hostAndStream): the GPU time of a step as the engine
    // records it (no pass per dispatch) beside the host's. A step whose wall time sits above its
    // GPU time is bound by recording.
    const inStream = (G: number, n: number) => hostAndStream(gpu, () => gen(G, n));
    // Each side's median of three runs, field by field: one slow prefill (a pause of the host) in
    // a single pair would leave a difference below the step's GPU time.
    const medianRuns = async (G: number, n: number) => {
      const runs = [await inStream(G, n), await inStream(G, n), await inStream(G, n)];
      const out = { ...runs[0] };
      for (const k of Object.keys(out) as (keyof typeof out)[]) out[k] = median(runs.map((r) => r[k]));
      return out;
    };
    const steps = W.newTokens - 1;
    for (const G of W.samples) {
      await inStream(G, steps + 1);
      const a = await medianRuns(G, 1);
      const b = await medianRuns(G, steps + 1);
      const per = (k: keyof typeof a) => (b[k] - a[k]) / steps;
      const perStep = { gpuMs: per('gpuMs'), spanMs: per('spanMs'), cpuMs: per('cpuMs'), mainMs: per('mainMs'), wallMs: per('wallMs'), dispatches: per('dispatches'), replayMs: per('replayMs'), submitMs: per('submitMs') };
      console.error(
        `decode x${G} per step: GPU ${perStep.gpuMs.toFixed(2)} ms in stream (its span, idle included, ${perStep.spanMs.toFixed(2)} ms), main thread busy ${perStep.mainMs.toFixed(2)} ms (replay ${perStep.replayMs.toFixed(2)}, submit ${perStep.submitMs.toFixed(2)}; ${perStep.dispatches.toFixed(0)} dispatches), process CPU ${perStep.cpuMs.toFixed(2)} ms, wall ${perStep.wallMs.toFixed(2)} ms`,
      );
      (result as Record<string, unknown>)[`decodeStep${G}`] = perStep;
    }
    for (const G of W.samples) {
      const a = await byKernel(G, 1);
      const b = await byKernel(G, steps + 1);
      const rows = [...b.values()].map((k) => ({ name: k.name, calls: (k.calls - (a.get(k.name)?.calls ?? 0)) / steps, us: (1000 * (k.totalMs - (a.get(k.name)?.totalMs ?? 0))) / steps }));
      rows.sort((x, y) => y.us - x.us);
      const total = rows.reduce((t, r) => t + r.us, 0);
      console.error(`decode x${G} GPU time per step by kernel: ${(total / 1000).toFixed(2)} ms in ${rows.reduce((t, r) => t + r.calls, 0)} dispatches`);
      for (const r of rows.slice(0, 14)) console.error(`  ${r.us.toFixed(0).padStart(6)} us  ${r.calls.toFixed(0).padStart(4)} x ${r.name}`);
      (result as Record<string, unknown>)[`decodeProfile${G}`] = rows;
    }
    // What each kernel costs a step in stream: the step's GPU time in stream less its time with
    // that kernel's dispatches left out (Gpu.startProfiling's omit; the outputs are then wrong,
    // the times are not). A pass per dispatch adds several µs to every dispatch; this does not.
    // Kernels here are compiled variants (one name covers several: a GEMV's layouts and M).
    // Over the first 16 steps only: every kernel is timed with three alterations, three runs each.
    const ablateSteps = 16;
    const perStepInStream = async (G: number, alter: StreamAlterations) => {
      const run = (n: number) => passProfile(gpu, () => gen(G, n), alter);
      const one = [await run(1), await run(1), await run(1)];
      const all = [await run(ablateSteps + 1), await run(ablateSteps + 1), await run(ablateSteps + 1)];
      const perStep = new Map<Kernel, { calls: number; grid: number[] }>();
      for (const [k, d] of all[0].dispatched) {
        const calls = (d.calls - (one[0].dispatched.get(k)?.calls ?? 0)) / ablateSteps;
        if (calls > 0) perStep.set(k, { calls, grid: d.grid });
      }
      return { ms: (median(all.map((r) => r.ms)) - median(one.map((r) => r.ms))) / ablateSteps, perStep };
    };
    for (const G of args.includes('--ablate') ? W.samples : []) {
      const full = await perStepInStream(G, {});
      const rows: { name: string; id: number; calls: number; grid: string; us: number; aloneUs: number; againUs: number }[] = [];
      for (const [k, d] of full.perStep) {
        const without = await perStepInStream(G, { omit: new Set([k]) });
        const alone = await perStepInStream(G, { omit: new Set([...full.perStep.keys()].filter((o) => o !== k)) });
        const twice = await perStepInStream(G, { twice: new Set([k]) });
        rows.push({ name: k.name, id: k.id, calls: d.calls, grid: d.grid.join('x'), us: 1000 * (full.ms - without.ms), aloneUs: 1000 * alone.ms, againUs: 1000 * (twice.ms - full.ms) });
      }
      rows.sort((a, b) => b.us - a.us);
      console.error(`decode x${G} in stream: ${full.ms.toFixed(3)} ms a step; what each compiled kernel's dispatches cost it (the step less the step without them; their time alone; each dispatch run again right after itself, warm):`);
      for (const r of rows) console.error(`  ${r.us.toFixed(0).padStart(6)} us ${r.aloneUs.toFixed(0).padStart(6)} us ${r.againUs.toFixed(0).padStart(6)} us  ${r.calls.toFixed(0).padStart(3)} x ${r.name}#${r.id} (grid ${r.grid})`);
      (result as Record<string, unknown>)[`decodeInStream${G}`] = { fullMs: full.ms, byKernel: rows };
      if (!args.includes('--subsets')) continue;
      // --subsets: the GEMVs (their quantize dispatches and the LM head's included) and the
      // other kernels, each set alone and both together; then with one set's dispatches cut to a
      // single workgroup each (their code runs, their data barely moves).
      const kernels = [...full.perStep.keys()];
      // The GEMVs with their input's norm (matmul_q4.gemv_norm*) count as GEMVs.
      const gemvs = kernels.filter((k) => k.name.startsWith('matmul_q4.gemv'));
      const others = kernels.filter((k) => !k.name.startsWith('matmul_q4.gemv'));
      const keep = async (kept: Kernel[], small: Kernel[] = []) => 1000 * (await perStepInStream(G, { omit: new Set(kernels.filter((o) => !kept.includes(o))), shrink: new Set(small) })).ms;
      const subsets = {
        gemvsAloneUs: await keep(gemvs),
        othersAloneUs: await keep(others),
        allUs: 1000 * full.ms,
        othersAsOneWorkgroupUs: await keep(kernels, others),
        othersAloneAsOneWorkgroupUs: await keep(others, others),
        gemvsAsOneWorkgroupUs: await keep(kernels, gemvs),
        gemvsAloneAsOneWorkgroupUs: await keep(gemvs, gemvs),
        // Every dispatch run again right after itself: the step plus each one's warm repeat.
        allTwiceUs: 1000 * (await perStepInStream(G, { twice: new Set(kernels) })).ms,
      };
      console.error(`  subsets (us a step): ${JSON.stringify(subsets)}`);
      (result as Record<string, unknown>)[`decodeSubsets${G}`] = subsets;
    }
  }
  save();
  if (!runs('gspo') && !runs('default')) process.exit(0);

  // One policy for every step below: its log-prob workspace is reused, not held twice.
  const policy = new Qwen3VLPolicy(model);
  const completionTokens = W.prompts * W.G * W.completion;
  const allTokens = W.prompts * W.G * (W.trainPrompt + W.completion);
  // A run's memory, and at the pool's peak the largest groups of buffers in use and cached (what
  // the memory plan must count), those also on stderr.
  const memory = (what: string) => {
    const mib = (gs: { label: string; count: number; bytes: number }[]) => gs.map((g) => ({ ...g, MiB: g.bytes / 2 ** 20 }));
    const gib = (bs: { bytes: number }[]) => bs.reduce((a, b) => a + b.bytes, 0) / GiB;
    const at = watch.atPoolPeak;
    const m = {
      what,
      poolPeakGiB: gpu.pool.stats.peak / GiB,
      inUsePeakGiB: watch.peakInUse / GiB,
      weightsGiB: weightBytes / GiB,
      targetGiB: MEMORY_TARGET_GIB[SIZE],
      largest: mib(watch.largest(24)),
      poolPeak: { inUseGiB: gib(at.inUse), cachedGiB: gib(at.cached), inUse: mib(watch.largest(40, at.inUse)), cached: mib(watch.largest(40, at.cached)) },
    };
    const list = (gs: typeof m.largest) => gs.map((b) => `${b.MiB.toFixed(0)} ${b.count}x${b.label}`).join(', ');
    console.error(`${what}: pool peak ${m.poolPeakGiB.toFixed(3)} GiB, at it in use ${m.poolPeak.inUseGiB.toFixed(3)} and cached ${m.poolPeak.cachedGiB.toFixed(3)}\n  in use (MiB): ${list(m.poolPeak.inUse)}\n  cached (MiB): ${list(m.poolPeak.cached)}`);
    return m;
  };
  let stepS = NaN;
  let keptS = NaN;
  const noMma = mmaUnsupported(gpu);
  const noF16 = f16UnsupportedOn(gpu);
  // (c) + (d) one GSPO step on the synthetic batch, and its memory.
  if (runs('gspo')) {
    const setup = await stepSetup(gpu, policy, lora16, { prompts: W.prompts, G: W.G, completion: W.completion, prompt: W.trainPrompt, image: W.trainImage }, 2);
    await gspoStep(gpu, setup, 1, 1); // warm-up on one prompt: pipelines compiled, log-prob workspace sized
    watch.reset();
    stepS = await timed(gpu, () => gspoStep(gpu, setup, 2));
    result.gspo = {
      prompts: W.prompts,
      completionsPerPrompt: W.G,
      promptTokens: W.trainPrompt,
      completionTokens: W.completion,
      seconds: stepS,
      tokensPerS: allTokens / stepS,
      completionTokensPerS: completionTokens / stepS,
      memory: memory(`GSPO step, ${W.prompts} prompts x ${W.G} x ${W.completion}, LoRA r=${W.rank}`),
    };
    save();
    console.error(`gspo step: ${stepS.toFixed(2)} s`);
    // --profile: GPU time of one prompt's group step by kernel (every dispatch in its own pass).
    if (args.includes('--profile')) {
      let rows: KernelTime[] = [];
      const wall = await timed(gpu, async () => (rows = await kernelTimes(gpu, () => gspoStep(gpu, setup, 3, 1))));
      const total = rows.reduce((t, r) => t + r.us, 0);
      console.error(`gspo group step (1 prompt x ${W.G}) GPU time by kernel: ${(total / 1000).toFixed(1)} ms in ${rows.reduce((t, r) => t + r.calls, 0)} dispatches (wall ${(1000 * wall).toFixed(0)} ms profiled)`);
      for (const r of rows.slice(0, 24)) console.error(`  ${(r.us / 1000).toFixed(1).padStart(8)} ms  ${String(r.calls).padStart(6)} x ${r.name}`);
      result.gspoProfile = rows;
      save();
    }
    // The same step without gradient checkpointing (every layer's activations kept), as PyTorch runs it.
    await gspoStep(gpu, setup, 4, 1, false); // warm-up: the kept activations' buffers made once
    watch.reset();
    keptS = await timed(gpu, () => gspoStep(gpu, setup, 5, W.prompts, false));
    result.gspoNoCheckpointing = {
      seconds: keptS,
      tokensPerS: allTokens / keptS,
      completionTokensPerS: completionTokens / keptS,
      memory: memory(`GSPO step without gradient checkpointing, ${W.prompts} prompts x ${W.G} x ${W.completion}, LoRA r=${W.rank}`),
    };
    save();
    console.error(`gspo step without gradient checkpointing: ${keptS.toFixed(2)} s`);
    // The same steps with the decoder's and the LM head's 4-bit GEMMs and input gradients on int8 tensor cores
    // (Qwen3VL.setProducts), where the GPU offers subgroup matrices; then how far that moves one
    // group's log-probs and LoRA gradients.
    if (noMma) console.error(`gspo on tensor cores: skipped (${noMma})`);
    else {
      // Two limbs of x, then one ('int8-1limb'), then two with steps by row ('int8-row'), then f16
      // where offered; the profile of a group step with the setting `auto` takes (f16, else int8).
      const timings = [];
      let profile: KernelTime[] | undefined;
      const settings: Products[] = ['int8', 'int8-1limb', 'int8-row', ...(noF16 ? [] : (['f16'] as const))];
      const profiledSetting: Products = noF16 ? 'int8' : 'f16';
      for (const [i, products] of settings.entries()) {
        await model.setProducts(products); // as the app and the CLI set them
        const seed = 20 + 10 * i;
        await gspoStep(gpu, setup, seed, 1); // warm-up: the tensor-core pipelines compiled
        const tcS = await timed(gpu, () => gspoStep(gpu, setup, seed + 1));
        await gspoStep(gpu, setup, seed + 2, 1, false);
        const tcKeptS = await timed(gpu, () => gspoStep(gpu, setup, seed + 3, W.prompts, false));
        if (products === profiledSetting && args.includes('--profile')) {
          profile = await kernelTimes(gpu, () => gspoStep(gpu, setup, seed + 4, 1));
          const total = profile.reduce((t, r) => t + r.us, 0);
          console.error(`gspo group step on ${products} (1 prompt x ${W.G}) GPU time by kernel: ${(total / 1000).toFixed(1)} ms in ${profile.reduce((t, r) => t + r.calls, 0)} dispatches`);
          for (const r of profile.slice(0, 24)) console.error(`  ${(r.us / 1000).toFixed(1).padStart(8)} ms  ${String(r.calls).padStart(6)} x ${r.name}`);
        }
        timings.push({ seconds: tcS, tokensPerS: allTokens / tcS, noCheckpointingSeconds: tcKeptS, noCheckpointingTokensPerS: allTokens / tcKeptS });
        console.error(`gspo step on tensor cores, products ${products}: ${tcS.toFixed(2)} s; without gradient checkpointing ${tcKeptS.toFixed(2)} s`);
      }
      await model.setProducts('f32');
      const drift = await tensorCoreDrift(gpu, model, policy, lora16, { prompt: setup.prompts[0], completions: setup.completions[0] }, filler, noF16);
      result.gspoTensorCores = { ...timings[0], drift: drift.two, profile: profiledSetting === 'int8' ? profile : undefined };
      result.gspoTensorCoresOneLimb = { ...timings[1], drift: drift.one };
      result.gspoTensorCoresRowSteps = { ...timings[2], drift: drift.byRow };
      if (drift.f16) result.gspoF16 = { ...timings[3], drift: drift.f16, profile };
      save();
      console.error(`tensor-core drift: ${JSON.stringify(drift)}`);
    }
    setup.adamw.release();
  }

  if (!runs('default')) process.exit(0);
  // --activation-storage f16: the drift of f16 kept states on the GSPO group tensorCoreDrift and
  // torch_model.py's drift use (its prompts drawn as stepSetup draws them, seed 2; LoRA r=16).
  const noF16Storage = ACTIVATION_STORAGE === 'f16' && !gpu.has('shader-f16') ? 'no shader-f16 on this device (on NVIDIA: --f16)' : null;
  const storageProducts: Products = noF16 ? 'f32' : 'f16';
  if (noF16Storage) console.error(`activation storage f16: skipped (${noF16Storage})`);
  let storageDrift: Awaited<ReturnType<typeof activationStorageDrift>> | null = null;
  if (ACTIVATION_STORAGE === 'f16' && !noF16Storage) {
    const r = rng(2);
    const prompts = Array.from({ length: W.prompts }, (_, i) => syntheticPrompt(config, `train${i}`, W.trainPrompt, W.trainImage, r));
    const completions = Array.from({ length: W.G }, () => textIds(config, W.completion, r)); // the first prompt's
    storageDrift = await activationStorageDrift(gpu, model, policy, lora16, { prompt: prompts[0], completions }, filler, storageProducts);
    console.error(`activation storage drift: ${JSON.stringify(storageDrift)}`);
  }
  // The default trainer config: generation of one group, then its training step, LoRA r=8.
  const d = W.defaults;
  const lora8 = makeLora(gpu, config, d.rank);
  await init(lora8);
  model.attachLora(lora8);
  for (const p of lora16) for (const t of [p.A, p.B, p.dA, p.dB]) t.release();
  const def = await stepSetup(gpu, policy, lora8, { prompts: 1, G: d.G, completion: d.completion, prompt: d.prompt, image: d.image }, 3);
  const rlStep = async (step: number) => {
    gpu.pool.enterPhase('generation', PHASE_KEEP); // as the trainer does (src/rl/trainer.ts)
    model.visionCache.clear(); // a step's prompts are new: generation encodes their images, the step reuses them
    const gen = await timed(gpu, () => model.generate(def.prompts[0], d.G, sampling(d.completion), { stopIds: [] }));
    gpu.pool.enterPhase('training', PHASE_KEEP);
    return { gen, step: await timed(gpu, () => gspoStep(gpu, def, step)) };
  };
  // One RL step first, as a run's first (the r=8 pipelines compiled, the pool holding the step's
  // buffers), then the medians of three more: the steady state of a training run (one step's wall
  // time moved with the host by up to a fifth between runs of the same code).
  const rlSteps = async (first: number) => {
    const runs = [await rlStep(first), await rlStep(first + 1), await rlStep(first + 2)];
    return { gen: median(runs.map((r) => r.gen)), step: median(runs.map((r) => r.step)) };
  };
  // Generation's part that does not grow with the completions: vision, the prompt's prefill and the
  // first token (generate with one new token; the median of three after warm-up runs), the vision cache
  // cleared as in rlStep.
  const firstTokenS = () =>
    seconds(gpu, 3, () => {
      model.visionCache.clear();
      return model.generate(def.prompts[0], d.G, sampling(1), { stopIds: [] });
    });
  // --profile: one generation of the group as an RL step runs it (after its training step), its
  // GPU time in stream and span (idle included) beside the main thread's busy time and the wall
  // time: where a generation's time goes when it moves between processes.
  const generationInStream = async (seed: number) => {
    await gspoStep(gpu, def, seed);
    gpu.pool.enterPhase('generation', PHASE_KEEP);
    model.visionCache.clear();
    const r = await hostAndStream(gpu, () => model.generate(def.prompts[0], d.G, sampling(d.completion), { stopIds: [] }));
    gpu.pool.enterPhase('training', PHASE_KEEP);
    return r;
  };
  // --profile: that part's GPU time in stream and by kernel (a pass per dispatch).
  const firstTokenKernels = async () => {
    const firstToken = () => {
      model.visionCache.clear();
      return model.generate(def.prompts[0], d.G, sampling(1), { stopIds: [] });
    };
    const inStreamMs = await gpuMsInStream(gpu, firstToken);
    const kernels = await kernelTimes(gpu, firstToken);
    console.error(`generation's first token (vision, prefill, LM head, sampling): ${inStreamMs.toFixed(2)} ms of GPU in stream; by kernel ${(kernels.reduce((t, r) => t + r.us, 0) / 1000).toFixed(2)} ms in ${kernels.reduce((t, r) => t + r.calls, 0)} dispatches`);
    for (const r of kernels.slice(0, 16)) console.error(`  ${r.us.toFixed(0).padStart(6)} us  ${String(r.calls).padStart(4)} x ${r.name}`);
    return { inStreamMs, kernels };
  };
  // A products setting's RL steps: one warm-up with its pipelines compiled, then the medians of three.
  const warmedSteps = async (products: Products, first: number) => {
    await model.setProducts(products);
    await rlStep(first);
    watch.reset();
    return rlSteps(first + 1);
  };
  // --profile: a step's GPU time by kernel (a pass per dispatch), and in stream (its passes as
  // recorded) beside its wall time `wallS`: the rest is the host's.
  const stepProfile = async (what: string, seed: number, wallS: number) => {
    if (!args.includes('--profile')) return { profile: undefined, gpuInStreamS: undefined };
    const profile = await kernelTimes(gpu, () => gspoStep(gpu, def, seed));
    const gpuInStreamS = (await passProfile(gpu, () => gspoStep(gpu, def, seed + 1))).ms / 1000;
    console.error(`default config on ${what}: the step's GPU time in stream ${gpuInStreamS.toFixed(3)} s (wall ${wallS.toFixed(3)} s)`);
    return { profile, gpuInStreamS };
  };
  await rlStep(1);
  watch.reset();
  // What the Model panel predicts for this config and work on `products` (src/model/memoryPlan.ts).
  const planGiB = (products: Products, activationStorage: ActivationStorage = 'f32') =>
    trainingMemory(config, memoryPlan(config, { kvCacheDtype: model.kvCache.dtype }), { generations: d.G, promptTokens: d.prompt, completionTokens: d.completion, loraRank: d.rank, microBatchTokens: DEFAULT_MICRO_BATCH_TOKENS, activationStorage, phaseBuffers: PHASE_BUFFERS, products, visionProducts: chooseVisionProducts(VISION_PRODUCTS, products).vision }).peakBytes / GiB;
  const { gen: genS, step: defStepS } = await rlSteps(2);
  const defProfile = args.includes('--profile') ? await kernelTimes(gpu, () => gspoStep(gpu, def, 5)) : undefined;
  result.defaultConfig = {
    config: `src/rl/config.ts defaults: num_generations ${d.G}, per_device_train_batch_size ${d.G}, max_prompt_length ${d.prompt} (filled, one ${d.image}x${d.image} image), max_completion_length ${d.completion}, LoRA r=${d.rank}; phase_buffers ${PHASE_BUFFERS}`,
    generateS: genS,
    stepS: defStepS,
    memory: memory('default trainer config: generation + training step of one group'),
    planGiB: planGiB('f32'),
    profile: defProfile,
  };
  save();
  // The same on int8 tensor cores, the app's setting where the browser offers them
  // (src/model/products.ts).
  if (!noMma) {
    const tc = await warmedSteps('int8', 6);
    const mem = memory('default trainer config on int8 tensor cores: generation + training step of one group');
    const { profile, gpuInStreamS } = await stepProfile('int8 tensor cores', 10, tc.step);
    const hostPhases = args.includes('--profile') ? await stepPhases(gpu, def, 12) : undefined;
    if (hostPhases) console.error(`default config on tensor cores, the step on the host: ${JSON.stringify(hostPhases)}`);
    result.defaultConfigTensorCores = { generateS: tc.gen, stepS: tc.step, gpuInStreamS, hostPhases, memory: mem, planGiB: planGiB('int8'), profile };
    await model.setProducts('f32');
    save();
    console.error(`default config on tensor cores: generation ${tc.gen.toFixed(2)} s, step ${tc.step.toFixed(2)} s`);
  }
  // The same on f16 tensor cores, where the device offers them (Dawn's f16 toggle: --f16).
  if (!noF16) {
    const tc = await warmedSteps('f16', 11);
    const mem = memory('default trainer config on f16 tensor cores: generation + training step of one group');
    const { profile, gpuInStreamS } = await stepProfile('f16 tensor cores', 15, tc.step);
    const hostPhases = args.includes('--profile') ? await stepPhases(gpu, def, 17) : undefined;
    if (hostPhases) console.error(`default config on f16 tensor cores, the step on the host: ${JSON.stringify(hostPhases)}`);
    const generateFirstTokenS = await firstTokenS();
    const firstTokenProfile = args.includes('--profile') ? await firstTokenKernels() : undefined;
    const generationStream = args.includes('--profile') ? await generationInStream(19) : undefined;
    if (generationStream) console.error(`default config on f16 tensor cores, one generation after a step: ${JSON.stringify(generationStream)}`);
    result.defaultConfigF16 = { generateS: tc.gen, generateFirstTokenS, firstTokenProfile, generationStream, stepS: tc.step, gpuInStreamS, hostPhases, memory: mem, planGiB: planGiB('f16'), profile };
    await model.setProducts('f32');
    save();
    console.error(`default config on f16 tensor cores: generation ${tc.gen.toFixed(2)} s (its first token ${generateFirstTokenS.toFixed(3)} s), step ${tc.step.toFixed(2)} s`);
  }
  // Other int8 settings (--also-products): their step beside the default's.
  for (const [i, products] of ALSO_PRODUCTS.entries()) {
    if (noMma) break;
    const tc = await warmedSteps(products, 30 + 4 * i);
    ((result.defaultConfigAlso ??= {}) as Record<string, unknown>)[products] = { generateS: tc.gen, stepS: tc.step };
    await model.setProducts('f32');
    save();
    console.error(`default config on ${products}: generation ${tc.gen.toFixed(2)} s, step ${tc.step.toFixed(2)} s`);
  }
  // The same with the kept hidden states in f16 (--activation-storage f16), on the f16 products
  // where offered ('auto' pairs them), else f32. A state beyond f16's range would fall back to
  // f32 (the policy's warnings, and its storage at the end, say so).
  if (storageDrift) {
    await model.setProducts(storageProducts);
    model.setActivationStorage('f16');
    await rlStep(16);
    watch.reset();
    const tc = await rlSteps(17);
    const { profile, gpuInStreamS } = await stepProfile(`${storageProducts} products, f16 hidden states`, 21, tc.step);
    const hostPhases = args.includes('--profile') ? await stepPhases(gpu, def, 23) : undefined;
    if (hostPhases) console.error(`default config, f16 hidden states, the step on the host: ${JSON.stringify(hostPhases)}`);
    const mem = memory(`default trainer config, ${storageProducts} products, hidden states kept in f16: generation + training step of one group`);
    const plan = planGiB(storageProducts, 'f16');
    result.defaultConfigActivationsF16 = { products: storageProducts, generateS: tc.gen, stepS: tc.step, gpuInStreamS, hostPhases, profile, memory: mem, planGiB: plan, drift: storageDrift, storageAtEnd: policy.activationStorage, warnings: policy.takeWarnings() };
    await model.setProducts('f32');
    model.setActivationStorage('f32');
    save();
    console.error(`default config, ${storageProducts} products, f16 hidden states: generation ${tc.gen.toFixed(2)} s, step ${tc.step.toFixed(2)} s, pool peak ${mem.poolPeakGiB.toFixed(2)} GiB (in use ${mem.inUsePeakGiB.toFixed(2)}; plan ${plan.toFixed(2)})`);
  }

  const rows: [string, string][] = [
    ['weights on the GPU', `${(weightBytes / GiB).toFixed(2)} GiB`],
    [`vision tower, ${W.promptImage}x${W.promptImage} image`, `${(1000 * visionS).toFixed(1)} ms`],
    [`prefill ${W.promptLen} tokens (vision included)`, `${(W.promptLen / prefillS).toFixed(0)} tok/s (${(1000 * prefillS).toFixed(1)} ms)`],
    ...decode.map((x): [string, string] => [`decode x${x.samples}`, `${(x.tokensPerS as number).toFixed(1)} tok/s (${(x.msPerStep as number).toFixed(2)} ms/step)`]),
    [`GSPO step ${W.prompts}x${W.G}x${W.completion}`, `${stepS.toFixed(2)} s, ${(allTokens / stepS).toFixed(0)} tok/s`],
    [`GSPO step without gradient checkpointing`, `${keptS.toFixed(2)} s, ${(allTokens / keptS).toFixed(0)} tok/s`],
    ['GSPO step pool peak', `${(gpu.pool.stats.peak / GiB).toFixed(2)} GiB`],
  ];
  const g = result.gspo as { memory: ReturnType<typeof memory> } | undefined;
  const dc = result.defaultConfig as { memory: ReturnType<typeof memory>; planGiB: number };
  const dm = dc.memory;
  rows[rows.length - 1][1] = g ? `${g.memory.poolPeakGiB.toFixed(2)} GiB (in use ${g.memory.inUsePeakGiB.toFixed(2)})` : 'not run';
  rows.push(['default config pool peak', `${dm.poolPeakGiB.toFixed(2)} GiB (in use ${dm.inUsePeakGiB.toFixed(2)}; plan ${dc.planGiB.toFixed(2)}; target ${MEMORY_TARGET_GIB[SIZE]})`]);
  console.log('| measure | ours |\n|---|---|');
  for (const [k, v] of rows) console.log(`| ${k} | ${v} |`);
  console.log('\nlargest buffers at the default config peak:');
  for (const b of dm.largest) console.log(`  ${b.MiB.toFixed(1)} MiB  ${b.count} x ${b.label}`);
  save();
  process.exit(0);
}

await main();
