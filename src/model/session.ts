// A model folder (local, hub, picked files or a served URL) opened for training and evaluation:
// config + 4-bit weights on the GPU, the folder's tokenizer and chat template, its image
// preprocessing, and `prepare`, which turns a dataset row into what Policy.generate/forward take
// (src/data/prompt.ts's chat → chat template → image preprocessing → image-pad expansion → ids).
// Works the same in Node and in the engine worker: files come through ModelFiles only.
import { AutoTokenizer, PreTrainedTokenizer } from '@huggingface/transformers';
import { buildPrompt } from '../data/prompt';
import { syntheticDataset } from '../data/synthetic';
import type { DatasetRow, RgbaImage } from '../data/types';
import type { Gpu } from '../gpu';
import { createLoraParamSet, releaseLoraParams, type LoraParams, type LoraSpec } from '../ops/loraParams';
import { matchesTargetModules } from '../adapter/peft';
import { LORA_TARGETS, VISION_LORA_TARGET, type DatasetSettings, type LoraSettings, type LoraTarget } from '../rl/config';
import type { PreparedImage, PreparedPrompt } from '../rl/policy';
import type { PromptOptions, PromptSource } from '../rl/trainer';
import { LORA_PROJECTIONS, loraModuleName } from './decoder';
import type { LoadProgress, Quantization } from './loader';
import type { ActivationStorage } from './activationStorage';
import type { KvCacheSetting } from './kvCacheSetting';
import { productOptions, type Products } from './products';
import type { VisionProductsSetting } from './visionProductsSetting';
import { parsePreprocessorConfig, promptOpensThinking, QWEN3_VL_IMAGE_PROCESSOR, Qwen3VLProcessor, Qwen3VLTokenizer, readChatTemplate } from './processor';
import { Qwen3VL, readModelConfig } from './qwen3vl';
import { visionBlockLoraModuleName, visionLoraModuleName, type VisionBlockLayer } from './vision';
import { MissingFileError, type ModelFiles } from './safetensors';
import { Qwen3VLPolicy } from './train';
import type { CachedLoadOptions } from './weightCache';

export interface OpenModelOptions {
  /** 'q4' (default) or 'none'. */
  quant?: Quantization;
  /** Bytes of weights read so far (the tokenizer and configs are small and not counted). */
  onProgress?: (p: LoadProgress) => void;
  signal?: AbortSignal;
  /** Completions sampled per prompt at most (the LM head's full-logit rows); default 16. */
  maxSamples?: number;
  /** Read the weights from this cache when it holds them, else store them there after loading. */
  cache?: CachedLoadOptions['cache'];
  /** Where the decoder's and the LM head's large products run (EngineConfig.products); default 'f32'. */
  products?: Products;
  /** Where the vision tower's dense products run (EngineConfig.vision_products); default 'auto' (f16 beside f16 products, else f32). */
  visionProducts?: VisionProductsSetting;
  /** Where training forwards keep their hidden states (EngineConfig.activation_storage, resolved); default 'f32'. */
  activationStorage?: ActivationStorage;
  /** How generation's KV cache stores K and V (EngineConfig.kv_cache); default 'auto'. */
  kvCache?: KvCacheSetting;
}

export interface PreparedRow {
  prompt: PreparedPrompt;
  /** The rendered chat, one <|image_pad|> per image (what rewards and the UI see as the prompt). */
  text: string;
}

export interface ModelSession {
  model: Qwen3VL;
  policy: Qwen3VLPolicy;
  processor: Qwen3VLProcessor;
  /** Row → model inputs; `systemPrompt` applies to rows without their own (null: none); `options.thinkingMode` sets the template's thinking switch. */
  prepare(row: DatasetRow, systemPrompt: string | null, options?: PromptOptions): PreparedRow;
  /** Fresh adapters on the target modules of every layer (with their lora_dropout), replacing (and releasing) any attached; the trainer initialises A and B. */
  attachLora(settings: LoraSettings): readonly LoraParams[];
  /** The trainer's data interface over `rows`. */
  promptSource(rows: readonly DatasetRow[]): PromptSource;
}

export class SessionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SessionError';
  }
}

/** The tokenizer in the folder's tokenizer.json + tokenizer_config.json, with its chat template if it ships one. */
export async function readTokenizer(files: ModelFiles): Promise<Qwen3VLTokenizer> {
  const [json, cfg] = await Promise.all([files.text('tokenizer.json'), files.text('tokenizer_config.json')]);
  if (json === null) throw new MissingFileError('tokenizer.json', files.location, 'a training or evaluation session needs the model\'s tokenizer');
  const config = cfg === null ? {} : (JSON.parse(cfg) as { tokenizer_class?: string; chat_template?: unknown });
  // As AutoTokenizer.from_pretrained picks the class, without transformers.js fetching files itself.
  const name = config.tokenizer_class?.replace(/Fast$/, '') ?? 'PreTrainedTokenizer';
  const Cls = (AutoTokenizer.TOKENIZER_CLASS_MAPPING as Record<string, typeof PreTrainedTokenizer>)[name] ?? PreTrainedTokenizer;
  const inner = new Cls(JSON.parse(json), config);
  const template = (await readChatTemplate((f) => files.text(f))) ?? (typeof config.chat_template === 'string' ? config.chat_template : undefined);
  return new Qwen3VLTokenizer(inner, template);
}

/**
 * A content key for the per-image vision cache: two 32-bit FNV-1a hashes (different offsets) over
 * the size and the RGBA bytes. Equal pixels give equal keys, so a row seen again reuses its features.
 */
export function imageKey(image: RgbaImage): string {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ 0x5bd1e995;
  const mix = (byte: number) => {
    a = Math.imul(a ^ byte, 0x01000193);
    b = Math.imul(b ^ byte, 0x01000193) + 0x9e3779b9;
  };
  for (const v of [image.width, image.height]) for (let s = 0; s < 32; s += 8) mix((v >>> s) & 0xff);
  const d = image.data;
  for (let i = 0; i < d.length; i++) mix(d[i]);
  const hex = (x: number) => (x >>> 0).toString(16).padStart(8, '0');
  return `img-${image.width}x${image.height}-${hex(a)}${hex(b)}`;
}

/** The rows a synthetic `dataset` describes; file and hub sources are loaded by their caller (the CLI, the Data panel). */
export function configRows(d: DatasetSettings): DatasetRow[] {
  if (d.kind !== 'synthetic') throw new SessionError(`dataset.kind '${d.kind}': its rows are loaded before training (the CLI's train command, or the app's Data panel), and none were given`);
  return syntheticDataset({ seed: d.seed, count: d.count, tasks: d.tasks, size: d.size });
}

export async function openModel(gpu: Gpu, files: ModelFiles, opts: OpenModelOptions = {}): Promise<ModelSession> {
  const config = await readModelConfig(files);
  const tokenizer = await readTokenizer(files);
  const pre = await files.text('preprocessor_config.json');
  const processor = new Qwen3VLProcessor(tokenizer, config, pre === null ? QWEN3_VL_IMAGE_PROCESSOR : parsePreprocessorConfig(pre));
  const imagePad = tokenizer.tokenId('<|image_pad|>');
  if (imagePad !== config.tokens.image) {
    throw new SessionError(`${files.location}: the tokenizer's <|image_pad|> is ${imagePad} but config.json's image_token_id is ${config.tokens.image}; tokenizer and model do not belong together`);
  }
  const model = await Qwen3VL.load(gpu, files, { quant: opts.quant ?? 'q4', onProgress: opts.onProgress, signal: opts.signal, maxLogitRows: opts.maxSamples ?? 16, cache: opts.cache, activationStorage: opts.activationStorage, kvCache: opts.kvCache, ...productOptions(opts.products ?? 'f32', opts.visionProducts ?? 'auto') });
  model.tokenizer = tokenizer;
  const policy = new Qwen3VLPolicy(model);
  const t = config.text;

  const prepare = (row: DatasetRow, systemPrompt: string | null, options: PromptOptions = {}): PreparedRow => {
    const { messages, images } = buildPrompt(row, { systemPrompt });
    const text = tokenizer.renderChat(messages, true, options.thinkingMode ?? 'auto');
    const out = processor.processText(text, images);
    const vocabBad = out.inputIds.findIndex((id) => id >= t.vocabSize);
    if (vocabBad >= 0) throw new SessionError(`row ${row.id}: token ${out.inputIds[vocabBad]} is outside the model's vocabulary of ${t.vocabSize}`);
    const patches = out.imageGridThw.map(([a, b, c]) => a * b * c);
    const width = out.pixelValues.length / Math.max(1, patches.reduce((x, y) => x + y, 0));
    let at = 0;
    const prepared: PreparedImage[] = out.imageGridThw.map((gridThw, k) => {
      const pixelValues = out.pixelValues.subarray(at * width, (at + patches[k]) * width);
      at += patches[k];
      return { pixelValues, gridThw, key: imageKey(images[k]) };
    });
    return { prompt: { id: row.id, inputIds: out.inputIds, images: prepared, thinking: promptOpensThinking(text) }, text };
  };

  const attachLora = (s: LoraSettings): readonly LoraParams[] => {
    const vision = s.target_modules.filter((m) => VISION_LORA_TARGET.test(m));
    const unknown = s.target_modules.filter((m) => !(LORA_TARGETS as readonly string[]).includes(m) && !vision.includes(m));
    if (unknown.length > 0 || s.target_modules.length === 0) {
      throw new SessionError(`lora.target_modules: ${unknown.length > 0 ? `${unknown.join(', ')} not among` : 'name at least one of'} ${LORA_TARGETS.join(', ')} and the vision modules`);
    }
    const q = t.numHeads * t.headDim;
    const kv = t.numKvHeads * t.headDim;
    const dims: Record<(typeof LORA_PROJECTIONS)[number], [number, number]> = {
      q: [q, t.hiddenSize],
      k: [kv, t.hiddenSize],
      v: [kv, t.hiddenSize],
      o: [t.hiddenSize, q],
      gate: [t.intermediateSize, t.hiddenSize],
      up: [t.intermediateSize, t.hiddenSize],
      down: [t.hiddenSize, t.intermediateSize],
    };
    // Specs first, then one allocation: every adapter's tensors as views into few flat buffers, so
    // that the optimizer steps them all in a constant number of dispatches (createLoraParamSet).
    const specs: LoraSpec[] = [];
    for (let l = 0; l < t.numLayers; l++) {
      for (const proj of LORA_PROJECTIONS) {
        if (!s.target_modules.includes(`${proj}_proj` as LoraTarget)) continue;
        const [out, inF] = dims[proj];
        specs.push({ name: loraModuleName(l, proj), in: inF, out, r: s.r, alpha: s.lora_alpha });
      }
    }
    // Vision modules, as PEFT matches list entries against module paths (every entry must match one).
    const v = config.vision;
    const H = v.hiddenSize;
    const merged = H * v.spatialMergeSize ** 2;
    const matched = new Set<string>();
    const add = (name: string, inF: number, out: number) => {
      const hits = vision.filter((t) => matchesTargetModules(name, [t]));
      if (hits.length === 0) return;
      hits.forEach((t) => matched.add(t));
      specs.push({ name, in: inF, out, r: s.r, alpha: s.lora_alpha });
    };
    const block: Record<VisionBlockLayer, [number, number]> = { qkv: [H, 3 * H], proj: [H, H], fc1: [H, v.intermediateSize], fc2: [v.intermediateSize, H] };
    for (let m = 0; m <= v.deepstackVisualIndexes.length; m++) for (const fc of [1, 2] as const) add(visionLoraModuleName(m, fc), merged, fc === 1 ? merged : v.outHiddenSize);
    for (let i = 0; i < v.depth; i++) for (const l of Object.keys(block) as VisionBlockLayer[]) add(visionBlockLoraModuleName(i, l), ...block[l]);
    const none = vision.filter((t) => !matched.has(t));
    if (none.length > 0) {
      throw new SessionError(
        `lora.target_modules: ${none.join(', ')} name no module of this model (its vision tower has ${v.depth} blocks and ${v.deepstackVisualIndexes.length} DeepStack mergers, deepstack_merger_list.0 to .${v.deepstackVisualIndexes.length - 1})`,
      );
    }
    const params = createLoraParamSet(gpu, specs);
    const old = model.lora;
    model.attachLora(params, { dropout: s.lora_dropout });
    old.forEach(releaseLoraParams);
    return params;
  };

  return {
    model,
    policy,
    processor,
    prepare,
    attachLora,
    promptSource: (rows) => ({ rows, prepare: async (row, systemPrompt, options) => prepare(row, systemPrompt, options) }),
  };
}
