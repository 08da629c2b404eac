// LoRA adapters in PEFT's on-disk format, both ways.
//
//   adapter_model.safetensors  one pair per adapted module, named as PEFT saves them (the
//       adapter name stripped):  base_model.model.<module>.lora_A.weight  [r, in]
//                                base_model.model.<module>.lora_B.weight  [out, r]
//       <module> is the path inside Qwen3VLForConditionalGeneration, e.g.
//       model.language_model.layers.0.self_attn.q_proj (the same string as LoraSpec.name).
//       Tensors are sorted by name and __metadata__ is {"format":"pt"}, as the Python
//       safetensors library writes them; F32 by default, BF16 on request (PEFT casts on load).
//   adapter_config.json  LoraConfig's fields as PEFT 0.21 writes them. Per-module ranks or
//       alphas that differ from r / lora_alpha go to rank_pattern / alpha_pattern under the
//       module's full path.
//
// Import reads the same two files from any ModelFiles (a Node folder, picked Files), converts
// BF16/F16 to f32, and validates names, ranks and shapes, against a model config when given one.
// Variants the engine cannot apply as trained (DoRA, rsLoRA scaling, LoRA biases, modules saved
// in full, transposed fan_in_fan_out weights) are refused by name rather than half-loaded.
import type { Gpu } from '../gpu';
import type { Qwen3VLConfig } from '../model/config';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits } from '../model/dtype';
import { MissingFileError, readAllTensors, serializeSafetensors, type ByteSource, type ModelFiles, type TensorToWrite } from '../model/safetensors';
import { expectedWeights } from '../model/weightShapes';
import type { LoraParams } from '../ops/loraParams';

export const ADAPTER_WEIGHTS_FILE = 'adapter_model.safetensors';
export const ADAPTER_CONFIG_FILE = 'adapter_config.json';
const PREFIX = 'base_model.model.';

/** One adapted linear layer, on the CPU. */
export interface AdapterModule {
  /** Module path as PEFT and LoraSpec name it: model.language_model.layers.0.self_attn.q_proj. */
  module: string;
  in: number;
  out: number;
  r: number;
  alpha: number;
  /** lora_A.weight [r, in], row-major. */
  A: Float32Array;
  /** lora_B.weight [out, r], row-major. */
  B: Float32Array;
}

export interface PeftAdapter {
  /** A display name (the store's key; PEFT itself keeps no name in the files). */
  name: string;
  /** The default rank and alpha (adapter_config.json's r and lora_alpha). */
  r: number;
  alpha: number;
  dropout: number;
  /**
   * Short module names (q_proj, ...) or full module paths, as adapter_config.json lists them; a
   * regex string there comes in as its only element and goes back out as a string.
   */
  targetModules: string[];
  baseModel: string | null;
  modules: AdapterModule[];
  /** adapter_config.json as imported; export writes its keys back so a round trip keeps them. */
  rawConfig?: Record<string, unknown>;
}

/** Something about an adapter's files or contents is wrong; the message says what. */
export class AdapterError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** Export refused: some A or B is all zeros (an untrained adapter is a no-op; PEFT's B starts at 0). */
export class UntrainedAdapterError extends AdapterError {
  constructor(readonly zeroA: string[], readonly zeroB: string[]) {
    const list = (what: string, mods: string[]) => (mods.length ? `${what} is all zeros in ${mods.length} module(s) (${mods.slice(0, 3).join(', ')}${mods.length > 3 ? ', ...' : ''})` : '');
    super(
      `refusing to export: ${[list('lora_A', zeroA), list('lora_B', zeroB)].filter(Boolean).join('; ')}. ` +
        'An adapter with a zero A or B changes nothing (was it trained?); pass force: true to export it anyway.',
    );
  }
}

export function tensorNames(module: string): { A: string; B: string } {
  return { A: `${PREFIX}${module}.lora_A.weight`, B: `${PREFIX}${module}.lora_B.weight` };
}

/** Copy LoRA parameters back from the GPU (one readback per tensor). */
export async function readLoraParams(gpu: Gpu, params: readonly LoraParams[]): Promise<AdapterModule[]> {
  const out: AdapterModule[] = [];
  for (const p of params) {
    out.push({ module: p.name, in: p.in, out: p.out, r: p.r, alpha: p.alpha, A: await gpu.readF32(p.A), B: await gpu.readF32(p.B) });
  }
  return out;
}

/**
 * PEFT's target_modules rule for one module path: a string is a regex the whole path must match;
 * a list entry matches the path itself or a "."-separated suffix of it.
 */
export function matchesTargetModules(module: string, targets: string | readonly string[]): boolean {
  if (typeof targets === 'string') return new RegExp(`^(?:${targets})$`).test(module);
  return targets.some((t) => module === t || module.endsWith(`.${t}`));
}

/**
 * The usual target_modules of the modules adapted, sorted: the decoder's by short name (q_proj,
 * ...), the vision tower's by their path below model.visual (merger.linear_fc1,
 * deepstack_merger_list.0.linear_fc1): a bare linear_fc1 would match the vision blocks' too.
 */
export function shortTargetNames(modules: readonly AdapterModule[]): string[] {
  const VISUAL = 'model.visual.';
  const entry = (m: string) => (m.startsWith(VISUAL) ? m.slice(VISUAL.length) : m.slice(m.lastIndexOf('.') + 1));
  return [...new Set(modules.map((m) => entry(m.module)))].sort();
}

export interface AdapterHealth {
  zeroA: string[];
  zeroB: string[];
  nonFinite: string[];
}

/** Which modules have an all-zero A or B, or a NaN/infinite value. */
export function checkAdapter(modules: readonly AdapterModule[]): AdapterHealth {
  const health: AdapterHealth = { zeroA: [], zeroB: [], nonFinite: [] };
  for (const m of modules) {
    if (!m.A.some((v) => v !== 0)) health.zeroA.push(m.module);
    if (!m.B.some((v) => v !== 0)) health.zeroB.push(m.module);
    if (!m.A.every(Number.isFinite) || !m.B.every(Number.isFinite)) health.nonFinite.push(m.module);
  }
  return health;
}

function checkModuleShapes(m: AdapterModule): void {
  for (const k of ['in', 'out', 'r'] as const) {
    if (!Number.isInteger(m[k]) || m[k] <= 0) throw new AdapterError(`${m.module}: ${k} must be a positive integer, got ${m[k]}`);
  }
  if (!(m.alpha > 0)) throw new AdapterError(`${m.module}: lora_alpha must be positive, got ${m.alpha}`);
  if (m.A.length !== m.r * m.in) throw new AdapterError(`${m.module}: lora_A has ${m.A.length} values, expected [${m.r}, ${m.in}]`);
  if (m.B.length !== m.out * m.r) throw new AdapterError(`${m.module}: lora_B has ${m.B.length} values, expected [${m.out}, ${m.r}]`);
}

/** The value most modules share (ties to the smaller), for r and lora_alpha. */
function mostCommon(values: number[]): number {
  const counts = new Map<number, number>();
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1] || a[0] - b[0])[0][0];
}

/**
 * LoraConfig as PEFT 0.21 saves it, every field at PEFT's default except those we set.
 * peft_version is left out: it records the library that wrote the file, and PEFT loads without it.
 */
function defaultConfig(): Record<string, unknown> {
  return {
    alora_invocation_tokens: null,
    alpha_pattern: {},
    arrow_config: null,
    auto_mapping: { base_model_class: 'Qwen3VLForConditionalGeneration', parent_library: 'transformers.models.qwen3_vl.modeling_qwen3_vl' },
    base_model_name_or_path: null,
    bias: 'none',
    corda_config: null,
    ensure_weight_tying: false,
    eva_config: null,
    exclude_modules: null,
    fan_in_fan_out: false,
    inference_mode: true,
    init_lora_weights: true,
    kasa_config: null,
    layer_replication: null,
    layers_pattern: null,
    layers_to_transform: null,
    loftq_config: {},
    lora_alpha: 8,
    lora_bias: false,
    lora_dropout: 0.0,
    lora_ga_config: null,
    megatron_config: null,
    megatron_core: 'megatron.core',
    modules_to_save: null,
    monteclora_config: null,
    peft_type: 'LORA',
    qalora_group_size: 16,
    r: 8,
    rank_pattern: {},
    revision: null,
    target_modules: [],
    target_parameters: null,
    task_type: 'CAUSAL_LM',
    trainable_token_indices: null,
    use_bdlora: null,
    use_dora: false,
    use_qalora: false,
    use_rslora: false,
    velora_config: null,
  };
}

export interface ExportOptions {
  /** Tensor dtype in the file: 'F32' (default, exact) or 'BF16' (half the size). */
  dtype?: 'F32' | 'BF16';
  /** Export even when some A or B is all zeros. */
  force?: boolean;
}

export interface ExportedAdapter {
  /** adapter_model.safetensors */
  weights: Uint8Array<ArrayBuffer>;
  /** adapter_config.json (pretty-printed like PEFT's, 2-space indent, keys sorted). */
  config: string;
}

/** The adapter's adapter_config.json as an object (keys sorted, as PEFT writes them). */
export function adapterConfig(adapter: PeftAdapter): Record<string, unknown> {
  const r = adapter.r;
  const alpha = adapter.alpha;
  const rankPattern: Record<string, number> = {};
  const alphaPattern: Record<string, number> = {};
  for (const m of adapter.modules) {
    if (m.r !== r) rankPattern[m.module] = m.r;
    if (m.alpha !== alpha) alphaPattern[m.module] = m.alpha;
  }
  // A string target_modules is a regex PEFT full-matches (a list matches name suffixes): keep it a string.
  const rawTargets = adapter.rawConfig?.target_modules;
  const keepString = typeof rawTargets === 'string' && adapter.targetModules.length === 1 && adapter.targetModules[0] === rawTargets;
  const merged: Record<string, unknown> = {
    ...defaultConfig(),
    ...adapter.rawConfig,
    peft_type: 'LORA',
    r,
    lora_alpha: alpha,
    lora_dropout: adapter.dropout,
    target_modules: keepString ? rawTargets : adapter.targetModules,
    base_model_name_or_path: adapter.baseModel,
    rank_pattern: rankPattern,
    alpha_pattern: alphaPattern,
  };
  return Object.fromEntries(Object.entries(merged).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** Serialize to PEFT's two files. Throws UntrainedAdapterError (unless forced) and AdapterError. */
export function exportPeft(adapter: PeftAdapter, options: ExportOptions = {}): ExportedAdapter {
  if (adapter.modules.length === 0) throw new AdapterError('the adapter has no modules');
  const seen = new Set<string>();
  for (const m of adapter.modules) {
    checkModuleShapes(m);
    if (seen.has(m.module)) throw new AdapterError(`module ${m.module} appears twice`);
    seen.add(m.module);
  }
  const health = checkAdapter(adapter.modules);
  if (health.nonFinite.length) throw new AdapterError(`refusing to export: NaN or infinite values in ${health.nonFinite.join(', ')}`);
  if (!options.force && (health.zeroA.length || health.zeroB.length)) throw new UntrainedAdapterError(health.zeroA, health.zeroB);

  const dtype = options.dtype ?? 'F32';
  const encode = (v: Float32Array): Uint8Array => {
    if (dtype === 'F32') return new Uint8Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
    return new Uint8Array(Uint16Array.from(v, f32ToBf16Bits).buffer);
  };
  const tensors: TensorToWrite[] = [];
  for (const m of adapter.modules) {
    const names = tensorNames(m.module);
    tensors.push({ name: names.A, dtype, shape: [m.r, m.in], data: encode(m.A) });
    tensors.push({ name: names.B, dtype, shape: [m.out, m.r], data: encode(m.B) });
  }
  tensors.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return {
    weights: serializeSafetensors(tensors, { format: 'pt' }),
    config: JSON.stringify(adapterConfig(adapter), null, 2),
  };
}

/** An adapter from the trainer's LoRA parameters (as read back with readLoraParams). */
export function adapterFromModules(
  name: string,
  modules: AdapterModule[],
  options: { baseModel?: string | null; dropout?: number; targetModules?: string[] } = {},
): PeftAdapter {
  if (modules.length === 0) throw new AdapterError('the adapter has no modules');
  return {
    name,
    r: mostCommon(modules.map((m) => m.r)),
    alpha: mostCommon(modules.map((m) => m.alpha)),
    dropout: options.dropout ?? 0,
    targetModules: options.targetModules ?? shortTargetNames(modules),
    baseModel: options.baseModel ?? null,
    modules,
  };
}

// ------------------------------------------------------------------------------------------------
// Import

/** PEFT's lookup of rank_pattern / alpha_pattern: the first key that matches the module path's end. */
function patternValue(pattern: Record<string, unknown>, module: string, fallback: number, what: string): number {
  for (const [key, value] of Object.entries(pattern)) {
    let re: RegExp;
    try {
      re = new RegExp(`^(.*\\.)?(${key})$`);
    } catch {
      throw new AdapterError(`${what} key '${key}' is not a valid pattern`);
    }
    if (re.test(module)) {
      if (typeof value !== 'number' || !(value > 0)) throw new AdapterError(`${what}['${key}'] must be a positive number, got ${JSON.stringify(value)}`);
      return value;
    }
  }
  return fallback;
}

function positive(config: Record<string, unknown>, key: string): number {
  const v = config[key];
  if (typeof v !== 'number' || !(v > 0)) throw new AdapterError(`${ADAPTER_CONFIG_FILE}: ${key} must be a positive number, got ${JSON.stringify(v)}`);
  return v;
}

/** Refuse LoRA variants whose saved tensors would not mean what the engine computes. */
function checkSupported(config: Record<string, unknown>): void {
  const refuse = (detail: string) => {
    throw new AdapterError(`${ADAPTER_CONFIG_FILE}: ${detail}; the engine applies plain LoRA (y += (lora_alpha/r)·x·Aᵀ·Bᵀ) only`);
  };
  if (config.peft_type !== 'LORA') refuse(`peft_type is ${JSON.stringify(config.peft_type)}, not "LORA"`);
  if (config.use_dora === true) refuse('use_dora is true (DoRA keeps a magnitude vector)');
  if (config.use_rslora === true) refuse('use_rslora is true (scaling lora_alpha/√r)');
  if (config.fan_in_fan_out === true) refuse('fan_in_fan_out is true (transposed weights, a GPT-2 Conv1D layout)');
  if (config.bias !== undefined && config.bias !== 'none') refuse(`bias is ${JSON.stringify(config.bias)} (trained biases)`);
  if (config.lora_bias === true) refuse('lora_bias is true (a bias on lora_B)');
  const saved = config.modules_to_save;
  if (Array.isArray(saved) && saved.length) refuse(`modules_to_save lists ${saved.join(', ')} (full weights saved beside the adapter)`);
}

function toF32(name: string, dtype: string, bytes: Uint8Array): Float32Array {
  const copy = bytes.slice();
  if (dtype === 'F32') return new Float32Array(copy.buffer);
  if (dtype === 'BF16') return Float32Array.from(new Uint16Array(copy.buffer), bf16BitsToF32);
  if (dtype === 'F16') return Float32Array.from(new Uint16Array(copy.buffer), f16BitsToF32);
  throw new AdapterError(`${ADAPTER_WEIGHTS_FILE}: tensor '${name}' is ${dtype}; LoRA weights must be F32, BF16 or F16`);
}

/** Parse adapter_config.json and the safetensors bytes' tensors into an adapter. */
export function parsePeft(
  name: string,
  configText: string,
  tensors: ReadonlyMap<string, { info: { dtype: string; shape: number[] }; bytes: Uint8Array }>,
): PeftAdapter {
  let config: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(configText);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('not a JSON object');
    config = parsed as Record<string, unknown>;
  } catch (e) {
    throw new AdapterError(`${ADAPTER_CONFIG_FILE} is not valid: ${(e as Error).message}`);
  }
  checkSupported(config);
  const r = positive(config, 'r');
  if (!Number.isInteger(r)) throw new AdapterError(`${ADAPTER_CONFIG_FILE}: r must be an integer, got ${r}`);
  const alpha = positive(config, 'lora_alpha');
  const dropout = typeof config.lora_dropout === 'number' ? config.lora_dropout : 0;
  const tm = config.target_modules;
  const targetModules = typeof tm === 'string' ? [tm] : Array.isArray(tm) && tm.every((t) => typeof t === 'string') ? (tm as string[]) : null;
  if (!targetModules) throw new AdapterError(`${ADAPTER_CONFIG_FILE}: target_modules must be a string or a list of strings, got ${JSON.stringify(tm)}`);
  const rankPattern = (config.rank_pattern ?? {}) as Record<string, unknown>;
  const alphaPattern = (config.alpha_pattern ?? {}) as Record<string, unknown>;

  const pairs = new Map<string, { A?: string; B?: string }>();
  for (const tensorName of tensors.keys()) {
    const m = /^base_model\.model\.(.+)\.lora_([AB])\.weight$/.exec(tensorName);
    if (!m) {
      throw new AdapterError(
        `${ADAPTER_WEIGHTS_FILE}: unexpected tensor '${tensorName}'; PEFT LoRA tensors are named base_model.model.<module>.lora_A.weight / lora_B.weight`,
      );
    }
    const entry = pairs.get(m[1]) ?? {};
    entry[m[2] as 'A' | 'B'] = tensorName;
    pairs.set(m[1], entry);
  }
  if (pairs.size === 0) throw new AdapterError(`${ADAPTER_WEIGHTS_FILE} holds no LoRA tensors`);

  const modules: AdapterModule[] = [];
  for (const [module, names] of [...pairs].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (!names.A || !names.B) throw new AdapterError(`${ADAPTER_WEIGHTS_FILE}: module ${module} has lora_${names.A ? 'A' : 'B'} but no lora_${names.A ? 'B' : 'A'}`);
    const a = tensors.get(names.A)!;
    const b = tensors.get(names.B)!;
    const mr = patternValue(rankPattern, module, r, 'rank_pattern');
    const malpha = patternValue(alphaPattern, module, alpha, 'alpha_pattern');
    if (a.info.shape.length !== 2 || b.info.shape.length !== 2) {
      throw new AdapterError(`${module}: lora_A [${a.info.shape}] and lora_B [${b.info.shape}] must be 2-D`);
    }
    const [ar, inDim] = a.info.shape;
    const [outDim, br] = b.info.shape;
    if (ar !== mr || br !== mr) {
      throw new AdapterError(`${module}: lora_A is [${a.info.shape}] and lora_B [${b.info.shape}], but the config gives this module r = ${mr}`);
    }
    modules.push({ module, in: inDim, out: outDim, r: mr, alpha: malpha, A: toF32(names.A, a.info.dtype, a.bytes), B: toF32(names.B, b.info.dtype, b.bytes) });
  }
  const base = config.base_model_name_or_path;
  return { name, r, alpha, dropout, targetModules, baseModel: typeof base === 'string' ? base : null, modules, rawConfig: config };
}

/** Read adapter_config.json and adapter_model.safetensors from a folder or picked files. */
export async function importPeft(files: ModelFiles, name = files.location): Promise<PeftAdapter> {
  const configText = await files.text(ADAPTER_CONFIG_FILE);
  if (configText === null) throw new MissingFileError(ADAPTER_CONFIG_FILE, files.location, 'a PEFT adapter has adapter_config.json beside its weights');
  let source: ByteSource;
  try {
    source = await files.open(ADAPTER_WEIGHTS_FILE);
    await source.size();
  } catch (e) {
    if (!(e instanceof MissingFileError)) throw e;
    const legacy = await files.text('adapter_model.bin');
    throw new MissingFileError(
      ADAPTER_WEIGHTS_FILE,
      files.location,
      legacy !== null ? 'only adapter_model.bin (a pickle) is there; re-save it with safe_serialization=True' : '',
    );
  }
  return parsePeft(name, configText, await readAllTensors(source));
}

/**
 * Check the adapter against a model: every module must be a linear layer of that model with the
 * adapter's [out, in]. Throws an AdapterError listing every mismatch.
 */
export function validateAgainstModel(adapter: PeftAdapter, config: Qwen3VLConfig): void {
  const weights = expectedWeights(config);
  const problems: string[] = [];
  for (const m of adapter.modules) {
    const shape = weights.get(`${m.module}.weight`);
    if (!shape || shape.length !== 2) {
      problems.push(`${m.module} is not a linear layer of this model`);
    } else if (shape[0] !== m.out || shape[1] !== m.in) {
      problems.push(`${m.module} is [${shape.join(', ')}] in the model but the adapter is for [${m.out}, ${m.in}]`);
    }
  }
  if (problems.length) {
    const shown = problems.slice(0, 5).join('; ');
    throw new AdapterError(`the adapter does not fit this model: ${shown}${problems.length > 5 ? `; and ${problems.length - 5} more` : ''}`);
  }
}
