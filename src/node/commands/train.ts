// `npm run cli -- train --config FILE.json [--steps N] [--metrics FILE.jsonl] [--output-dir DIR]`,
// `train --resume DIR [--steps N]` and `train --demo`: GSPO/GRPO training on the GPU, one JSON line
// of metrics per step on stdout (and appended to --metrics).
// --demo also evaluates the first --eval-rows held-out rows greedily before and after (src/node/demoRun.ts):
// --quick is the small version CI runs on software Vulkan (src/data/demo.ts DEMO_QUICK_CONFIG);
// {"eval": "before"|"after", ...} lines, then {"demo": {before, after, rise}}.
//
// The config file is the trainer config (src/rl/config.ts: TRL's names, model_name_or_path, and the
// `dataset`: synthetic, a local file or a hub data set, src/rl/dataSource.ts), plus an optional
// "engine" entry (src/rl/engineConfig.ts: products, vision_products, activation_storage,
// kv_cache, micro_batch_tokens, gradient_checkpointing, phase_buffers; a top-level gradient_checkpointing,
// transformers' name, is read onto it):
//   "dataset": {"kind": "file", "path": "geo3k.parquet" | "rows.jsonl" | "rows.json", "format": null,
//               "mapping": {prompt_key, answer_key, image_keys, ...} | null, "image_folder": "images/",
//               "limit": 500, "numeric_only": true}
//   "dataset": {"kind": "hub", "repo_id": "hiyouga/geometry3k", "config": "default", "split": "train", "revision": "main", "mapping": null}
// (relative paths are read from the working directory and stored absolute in the checkpoints; a
// null mapping recognises the geo3k or MathVista layout; HF_TOKEN for gated data sets and models).
// The former top-level "data" entry is still read, as a file dataset, with a deprecation warning.
// model_name_or_path is a local folder, or a hub id when no such folder exists.
//
// --products auto|f32|f16|int8|int8-1limb|int8-row (default auto: the fastest the GPU offers) picks where the decoder's and the LM head's large
// products run (src/model/products.ts; f16 and int8 on tensor cores through Dawn started with
// allow_unsafe_apis, which offers subgroup matrices, and for f16 vulkan_enable_f16_on_nvidia: an
// error naming what is missing on GPUs without them); --vision-products f32|int8|f16 the vision tower's;
// --activation-storage auto|f32|f16 where training forwards keep the hidden states the backward
// reads (default auto: f16 beside the f16 products where shader-f16 is offered, else f32); --kv-cache
// auto|f32|f16 how generation's KV cache stores K and V (auto: f16 on the f16 products where shader-f16 is
// offered, else f32; src/model/kvCacheSetting.ts); --micro-batch-tokens N the packed rows per
// training forward; --gradient-checkpointing true|false whether the backward recomputes each layer
// (default true). They override the config's "engine" entry. Older flags, kept as aliases:
// --tensor-cores = --products int8, with --tensor-core-limbs 1 = int8-1limb, with
// --tensor-core-steps row = int8-row; --vision-tensor-cores = --vision-products int8.
//
// Checkpoints go to DIR (default runs/<timestamp>) in the format of src/rl/checkpoint.ts:
// DIR/step-NNNNNNNN/{checkpoint.json,tensors.safetensors}, each written to a temporary folder and
// renamed, then DIR/latest (the current folder's name) replaced by rename, so an interrupted write
// leaves the previous checkpoint current. DIR/engine.json keeps the engine config for --resume, and
// DIR/data.json records the data the run trains on (src/node/dataRecord.ts: the dataset with absolute
// paths, the file's size, a hash of the rows): --resume refuses a change (or a missing data.json)
// unless --allow-data-change. (Runs of earlier versions kept their "data" entry itself in
// DIR/data.json; --resume still reads it, with --allow-data-change.) Beside each checkpoint,
// step-NNNNNNNN/adapter/ holds its LoRA in PEFT's format, and DIR/adapter/ the latest one (at the
// end, the run's result): adapter_model.safetensors + adapter_config.json.
import { appendFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve as absolute } from 'node:path';
import { DEMO_MODEL_DIR, DEMO_QUICK_CONFIG, DEMO_TRAIN_CONFIG } from '../../data/demo';
import { loadHubDataset, loadJsonText, loadParquet } from '../../data';
import { folderFromDirectory, parquetFromPath } from '../../data/node/files';
import { BrokenImageError, decodeRowImages, decodingPromptSource } from '../../data/encodedImages';
import { QWEN3_VL_IMAGE_LIMITS } from '../../data/image';
import { DataFileError, utf8Text } from '../../data/loaders/errors';
import { sharpDecoder } from '../../data/node/sharpDecoder';
import type { DatasetRow } from '../../data/types';
import type { Gpu } from '../../gpu';
import type { CustomRewardEvaluator } from '../../rewards/sandbox';
import { createNodeSandbox } from '../../rewards/sandboxNode';
import { hubFiles } from '../../model/hub';
import { nodeDirFiles, type ModelFiles } from '../../model/safetensors';
import { configRows, openModel } from '../../model/session';
import { CheckpointError, decodeCheckpoint, encodeCheckpoint, type Checkpoint } from '../../rl/checkpoint';
import { ConfigError, resolveConfig, type DatasetSettings, type FileDatasetSettings, type HubDatasetSettings, type TrainConfig, type TrainConfigInput } from '../../rl/config';
import { asksTensorCores, defaultEngineConfig, EngineConfigError, resolveActivationStorage, resolveEngineConfig, resolveKvCache, resolveProducts, resolveVisionProducts, usesTensorCores, type ConfigEngineFields, type EngineConfig, PHASE_BUFFERS, type PhaseBuffers } from '../../rl/engineConfig';
import { capabilitiesOf } from '../../gpu';
import { ACTIVATION_STORAGE_SETTINGS } from '../../model/activationStorage';
import { isKvCacheSetting, KV_CACHE_SETTINGS } from '../../model/kvCacheSetting';
import { isProducts, PRODUCTS, type Products } from '../../model/products';
import { isVisionProductsSetting, VISION_PRODUCTS_SETTINGS } from '../../model/visionProductsSetting';
import { isPlainObject } from '../../rl/configKeys';
import { Trainer, type TrainerEvent } from '../../rl/trainer';
import type { PolicyFactory } from '../../worker/trainerApi';
import type { CliArgs } from '../args';
import { createNodeGpu } from '../gpu';
import { writeCheckpointAdapters } from '../adapterDir';
import { DEMO_QUICK_EVAL_ROWS, demoRun } from '../demoRun';
import { dataDifference, DATA_RECORD_FILE, dataRecordOf, DataProvenanceError, readDataRecord, writeDataRecord } from '../dataRecord';

export const summary =
  'train a LoRA adapter with GSPO/GRPO (--config FILE.json | --demo [--quick] [--eval-rows N] | --resume DIR [--allow-data-change]) [--steps N] [--metrics FILE.jsonl] [--output-dir DIR] [--quant q4|none] [--products auto|f32|f16|int8|int8-1limb|int8-row] [--vision-products f32|int8|f16] [--kv-cache auto|f32|f16] [--micro-batch-tokens N] [--gradient-checkpointing true|false] [--phase-buffers keep|release] (aliases: --tensor-cores [--tensor-core-limbs 1|2] [--tensor-core-steps block|row], --vision-tensor-cores)';

export async function writeCheckpointDir(dir: string, c: Checkpoint): Promise<string> {
  const { json, safetensors } = encodeCheckpoint(c);
  const name = `step-${String(c.meta.step).padStart(8, '0')}`;
  const tmp = join(dir, `${name}.tmp`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  writeFileSync(join(tmp, 'checkpoint.json'), json);
  writeFileSync(join(tmp, 'tensors.safetensors'), safetensors);
  rmSync(join(dir, name), { recursive: true, force: true });
  renameSync(tmp, join(dir, name));
  writeFileSync(join(dir, 'latest.tmp'), name);
  renameSync(join(dir, 'latest.tmp'), join(dir, 'latest'));
  return join(dir, name);
}

/** The checkpoint DIR/latest names, or null when DIR has none. */
export async function readCheckpointDir(dir: string): Promise<Checkpoint | null> {
  const files = latestCheckpointFiles(dir);
  return files && decodeCheckpoint(readFileSync(files[0], 'utf8'), readFileSync(files[1]));
}

/** checkpoint.json and tensors.safetensors of the folder DIR/latest names, or null before the first checkpoint. */
function latestCheckpointFiles(dir: string): [string, string] | null {
  const latest = join(dir, 'latest');
  if (!existsSync(latest)) return null;
  const name = readFileSync(latest, 'utf8').trim();
  // Only a folder this command writes: never a path elsewhere.
  if (!/^step-\d{8}$/.test(name)) throw new CheckpointError(`${absolute(latest)} names ${JSON.stringify(name.slice(0, 80))}, not a step-NNNNNNNN folder of the run`);
  const folder = join(dir, name);
  const files = ['checkpoint.json', 'tensors.safetensors'].map((f) => join(folder, f));
  const missing = files.filter((f) => !existsSync(f));
  if (missing.length > 0) throw new CheckpointError(`${absolute(latest)} names ${name}, but ${missing.map((f) => absolute(f)).join(' and ')} ${missing.length > 1 ? 'are' : 'is'} missing`);
  return [files[0], files[1]];
}

/** The training config of DIR's latest checkpoint, or {} without one (trainRun says why). */
function latestCheckpointConfig(dir: string): TrainConfigInput {
  const files = latestCheckpointFiles(dir);
  if (!files) return {};
  const meta = readConfigFile(files[0]);
  return isPlainObject(meta.config) ? meta.config : {};
}

export interface TrainRunOptions {
  config: TrainConfigInput;
  /** Overrides max_steps. */
  steps?: number;
  metricsFile?: string;
  outDir: string;
  resume: boolean;
  /** Runs custom reward terms (a worker_threads sandbox in the CLI). */
  sandbox?: CustomRewardEvaluator;
  /** How the engine runs it (micro_batch_tokens, gradient_checkpointing; the products are the policy factory's).
   * Default: the defaults, with the config's own gradient_checkpointing. */
  engine?: EngineConfig;
  /** Resume even when the data differs from what DIR/data.json records (or it is missing), and record the new data. */
  allowDataChange?: boolean;
  log: (line: string) => void;
  warn: (line: string) => void;
}

/** The command's work, with the model behind `openPolicy` (tests give it a small one). */
export async function trainRun(gpu: Gpu, openPolicy: PolicyFactory, o: TrainRunOptions): Promise<{ state: string; config: TrainConfig }> {
  const resumeFrom = o.resume ? await readCheckpointDir(o.outDir) : null;
  if (o.resume && !resumeFrom) throw new Error(`--resume ${o.outDir}: no checkpoint there (no ${join(o.outDir, 'latest')})`);
  const before = o.resume ? readDataRecord(o.outDir) : null;
  if (o.resume && !before && !o.allowDataChange) throw new DataProvenanceError(`${absolute(join(o.outDir, DATA_RECORD_FILE))} is missing: the data the run trained on is unknown`);
  const input = resumeFrom ? { ...resumeFrom.meta.config } : { ...o.config };
  if (o.steps !== undefined) input.max_steps = o.steps;
  const resolved = resolveConfig(input);
  const { loss, warnings } = resolved;
  // Stored absolute in the checkpoints, so that --resume from another directory reads the same data.
  const config = resumeFrom ? resolved.config : { ...resolved.config, dataset: absolutePaths(resolved.config.dataset) };
  for (const w of warnings) o.warn(`warning: ${w}`);
  mkdirSync(o.outDir, { recursive: true });
  const { policy, data } = await openPolicy(gpu, config);
  const now = dataRecordOf(data.rows, config.dataset);
  const changed = before ? dataDifference(o.outDir, before, now) : o.resume ? `${DATA_RECORD_FILE} is missing` : null;
  if (changed && !o.allowDataChange) throw new DataProvenanceError(changed);
  if (changed) o.warn(`warning: resuming on other data (${changed}): the data order starts a new pass`);
  if (!before || changed) writeDataRecord(o.outDir, now);
  const onEvent = (e: TrainerEvent) => {
    if (e.type === 'step') {
      const line = JSON.stringify(e.metrics, (_, v) => (typeof v === 'number' && !Number.isFinite(v) ? null : v));
      o.log(line);
      if (o.metricsFile) appendFileSync(o.metricsFile, `${line}\n`);
      for (const w of e.metrics.warnings ?? []) o.warn(`warning: step ${e.metrics.step}: ${w}`);
    } else if (e.type === 'warning') o.warn(`warning: ${e.message}`);
    else if (e.type === 'checkpoint') o.warn(`checkpoint at step ${e.step} (${e.reason}) in ${o.outDir}`);
  };
  const trainer = await Trainer.create({
    gpu,
    policy,
    data,
    config,
    loss,
    runId: resumeFrom?.meta.runId ?? `cli-${Date.now().toString(36)}`,
    sandbox: o.sandbox,
    engine: o.engine ?? resolveEngineConfig({}, 'engine', resolved.engine),
    onEvent,
    // Each checkpoint also as a PEFT adapter folder beside it and in the run folder (src/node/adapterDir.ts).
    saveCheckpoint: async (c) => writeCheckpointAdapters(o.outDir, await writeCheckpointDir(o.outDir, c), c),
    resume: resumeFrom ?? undefined,
    newData: changed !== null,
  });
  // Ctrl-C ends the step in flight cleanly: rolled back, checkpointed, stopped.
  const onSignal = () => trainer.stop();
  process.once('SIGINT', onSignal);
  try {
    return { state: await trainer.run(), config };
  } finally {
    process.off('SIGINT', onSignal);
  }
}

function absolutePaths(d: DatasetSettings): DatasetSettings {
  return d.kind === 'file' ? { ...d, path: absolute(d.path), image_folder: d.image_folder === null ? null : absolute(d.image_folder) } : d;
}

/** A local folder, or a hub id ("org/name") when no such folder exists. */
export function modelFilesAt(pathOrRepo: string): ModelFiles {
  if (existsSync(pathOrRepo)) return nodeDirFiles(pathOrRepo);
  if (/^[\w.-]+\/[\w.-]+$/.test(pathOrRepo)) return hubFiles(pathOrRepo, { token: process.env.HF_TOKEN });
  throw new Error(`model_name_or_path '${pathOrRepo}' is neither a local folder nor a hub id`);
}

/** The rows of a file or hub dataset, images kept encoded (decoded when a batch needs them) and
 * checked against the processor's limits at load; broken rows are warned about (the first five),
 * none usable is an error. */
export async function loadDatasetRows(d: FileDatasetSettings | HubDatasetSettings, warn: (line: string) => void): Promise<DatasetRow[]> {
  const options = { decoder: sharpDecoder, lazy: true, limits: QWEN3_VL_IMAGE_LIMITS, mapping: d.mapping ?? undefined, limit: d.limit ?? undefined, numericOnly: d.numeric_only };
  let where: string;
  let result;
  if (d.kind === 'hub') {
    where = `${d.repo_id} (${d.config}/${d.split}${d.revision === 'main' ? '' : `@${d.revision}`})`;
    result = await loadHubDataset(d.repo_id, { config: d.config, split: d.split, revision: d.revision }, { ...options, token: process.env.HF_TOKEN, endpoint: process.env.HF_ENDPOINT });
  } else {
    where = d.path;
    if (!existsSync(d.path)) throw new DataFileError(d.path, 'no such file (dataset.path)');
    if (statSync(d.path).isDirectory()) throw new DataFileError(d.path, 'is a folder; dataset.path names a parquet, JSON or JSONL file (images go in dataset.image_folder)');
    if (d.image_folder !== null && !(existsSync(d.image_folder) && statSync(d.image_folder).isDirectory())) throw new DataFileError(d.image_folder, 'is not a folder (dataset.image_folder)');
    const folder = d.image_folder === null ? undefined : await folderFromDirectory(d.image_folder);
    const format = d.format ?? (/\.parquet$/i.test(d.path) ? 'parquet' : /\.(jsonl|ndjson)$/i.test(d.path) ? 'jsonl' : /\.json$/i.test(d.path) ? 'json' : null);
    if (format === null) throw new Error(`dataset.path ${d.path}: not a .parquet, .json, .jsonl or .ndjson file; set dataset.format`);
    const named = { ...options, folder, source: d.path };
    result = format === 'parquet' ? await loadParquet(await parquetFromPath(d.path), named) : await loadJsonText(utf8Text(d.path, readFileSync(d.path)), format, named);
  }
  for (const b of result.broken.slice(0, 5)) warn(`warning: ${where} row ${b.index}: ${b.reason} (${b.detail})`);
  if (result.broken.length > 5) warn(`warning: ${where}: ${result.broken.length} broken rows in all`);
  if (result.rows.length === 0) throw new Error(`${where}: no usable rows (${result.broken.length} broken, ${result.filtered.length} filtered)`);
  return result.rows;
}

/** The dataset's rows: generated for a synthetic one, loaded for a file or hub one. */
export async function datasetRows(d: DatasetSettings, warn: (line: string) => void): Promise<DatasetRow[]> {
  return d.kind === 'synthetic' ? configRows(d) : loadDatasetRows(d, warn);
}

/** The dataset's rows with their images decoded (eval and export read pixels); a row whose image
 * fails to decode is warned about and left out. */
export async function decodedDatasetRows(d: DatasetSettings, warn: (line: string) => void): Promise<DatasetRow[]> {
  const out: DatasetRow[] = [];
  for (const row of await datasetRows(d, warn)) {
    try {
      out.push(await decodeRowImages(row, sharpDecoder));
    } catch (e) {
      if (!(e instanceof BrokenImageError)) throw e;
      warn(`warning: row ${row.id} left out: ${e.message}`);
    }
  }
  return out;
}

/** Qwen3-VL from model_name_or_path with fresh adapters, its products where `engine` says; prompts from `rows`, or the config's dataset. */
export function qwen3vlFactory(opts: { quant: 'q4' | 'none'; rows?: readonly DatasetRow[]; warn: (line: string) => void; engine?: EngineConfig }): PolicyFactory {
  return async (gpu, config) => {
    const rows = opts.rows ?? (await datasetRows(config.dataset, opts.warn));
    opts.warn(`loading ${config.model_name_or_path}`);
    const engine = opts.engine ?? defaultEngineConfig();
    const caps = capabilitiesOf(gpu);
    const { products, why } = resolveProducts(engine, caps);
    opts.warn(`products: ${products} (${why})`);
    const { storage, why: storageWhy } = resolveActivationStorage(engine, caps, products);
    opts.warn(`activation storage: ${storage} (${storageWhy})`);
    const kv = resolveKvCache(engine, products, caps);
    opts.warn(`kv_cache: ${kv.dtype} (${kv.why})`);
    const vision = resolveVisionProducts(engine, products);
    opts.warn(`vision products: ${vision.vision} (${vision.why})`);
    const session = await openModel(gpu, modelFilesAt(config.model_name_or_path), { quant: opts.quant, maxSamples: config.num_generations, products, visionProducts: vision.vision, activationStorage: storage, kvCache: engine.kv_cache });
    session.attachLora(config.lora);
    return { policy: session.policy, data: decodingPromptSource(session.promptSource(rows), sharpDecoder) };
  };
}

/**
 * The engine config: the config file's "engine" entry with the fields the training config set
 * under transformers' names (`fromConfig`), then --products, --vision-products, --kv-cache,
 * --micro-batch-tokens and --gradient-checkpointing over it; the older tensor-core flags map onto
 * `products` and `vision_products` (they cannot be mixed with the new ones).
 */
export function engineFromArgs(args: CliArgs, fromFile: unknown, fromConfig: ConfigEngineFields = {}): EngineConfig {
  const e: Record<string, unknown> = { ...resolveEngineConfig(fromFile ?? {}, 'engine', fromConfig) };
  const tensorCores = args.bool('tensor-cores');
  const limbs = args.optStr('tensor-core-limbs');
  const stepsBy = args.optStr('tensor-core-steps');
  const products = args.optStr('products');
  if (products !== undefined && (tensorCores || limbs !== undefined || stepsBy !== undefined)) {
    throw new EngineConfigError('--products replaces --tensor-cores, --tensor-core-limbs and --tensor-core-steps; give one or the other');
  }
  if (products !== undefined && products !== 'auto' && !isProducts(products)) throw new EngineConfigError(`--products takes auto, ${PRODUCTS.map((p) => p.value).join(', ')}; got '${products}'`);
  if (products !== undefined) e.products = products;
  if (limbs !== undefined && !(tensorCores && (limbs === '1' || limbs === '2'))) throw new Error(`--tensor-core-limbs takes 1 or 2, with --tensor-cores (got '${limbs}'${tensorCores ? '' : ' without --tensor-cores'})`);
  if (stepsBy !== undefined && !(tensorCores && (stepsBy === 'block' || (stepsBy === 'row' && limbs !== '1')))) {
    throw new Error(`--tensor-core-steps takes block or row (row with two limbs), with --tensor-cores (got '${stepsBy}'${tensorCores ? (limbs === '1' ? ' with one limb' : '') : ' without --tensor-cores'})`);
  }
  if (tensorCores) e.products = (limbs === '1' ? 'int8-1limb' : stepsBy === 'row' ? 'int8-row' : 'int8') satisfies Products;
  const vision = args.optStr('vision-products');
  if (vision !== undefined && args.bool('vision-tensor-cores')) throw new EngineConfigError('--vision-products replaces --vision-tensor-cores; give one or the other');
  if (vision !== undefined && !isVisionProductsSetting(vision)) throw new EngineConfigError(`--vision-products takes ${VISION_PRODUCTS_SETTINGS.join(', ')}; got '${vision}'`);
  if (vision !== undefined) e.vision_products = vision;
  if (args.bool('vision-tensor-cores')) e.vision_products = 'int8';
  const storage = args.optStr('activation-storage');
  if (storage !== undefined && !(ACTIVATION_STORAGE_SETTINGS as readonly string[]).includes(storage)) throw new EngineConfigError(`--activation-storage takes ${ACTIVATION_STORAGE_SETTINGS.join(', ')}; got '${storage}'`);
  if (storage !== undefined) e.activation_storage = storage;
  const kvCache = args.optStr('kv-cache');
  if (kvCache !== undefined && !isKvCacheSetting(kvCache)) throw new EngineConfigError(`--kv-cache takes ${KV_CACHE_SETTINGS.join(', ')}; got '${kvCache}'`);
  if (kvCache !== undefined) e.kv_cache = kvCache;
  if (args.optStr('micro-batch-tokens') !== undefined) {
    const n = args.num('micro-batch-tokens');
    if (!Number.isInteger(n) || n < 1) throw new EngineConfigError(`--micro-batch-tokens takes an integer >= 1; got ${n}`);
    e.micro_batch_tokens = n;
  }
  const phaseBuffers = args.optStr('phase-buffers');
  if (phaseBuffers !== undefined && !(PHASE_BUFFERS as readonly string[]).includes(phaseBuffers)) throw new EngineConfigError(`--phase-buffers takes ${PHASE_BUFFERS.join(', ')}; got '${phaseBuffers}'`);
  if (phaseBuffers !== undefined) e.phase_buffers = phaseBuffers as PhaseBuffers;
  const checkpointing = args.flags.get('gradient-checkpointing');
  if (checkpointing !== undefined) {
    if (checkpointing !== true && checkpointing !== 'true' && checkpointing !== 'false') throw new EngineConfigError(`--gradient-checkpointing takes true or false; got '${checkpointing}'`);
    e.gradient_checkpointing = checkpointing !== 'false';
  }
  return resolveEngineConfig(e);
}

/** A JSON object from `file` (`what` names it in every refusal, e.g. "--config FILE"). */
export function readConfigFile(file: string, what = file): Record<string, unknown> {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`${what}: ${(e as Error).message}`);
  }
  if (!isPlainObject(json)) throw new ConfigError(`${what}: the config must be a JSON object; got ${json === null ? 'null' : Array.isArray(json) ? 'an array' : JSON.stringify(json)}`);
  return json;
}

export async function run(args: CliArgs): Promise<void> {
  const resumeDir = args.optStr('resume');
  const sources = [args.bool('demo'), args.optStr('config') !== undefined, resumeDir !== undefined].filter(Boolean).length;
  if (sources !== 1) throw new Error('train: give exactly one of --config FILE.json, --demo or --resume DIR');
  let config: TrainConfigInput = {};
  let engineInput: unknown;
  if (args.bool('demo')) {
    if (!existsSync(join(DEMO_MODEL_DIR, 'config.json'))) throw new Error(`--demo: the bundled demo model is not in ${DEMO_MODEL_DIR} (no config.json there); train one with tools/ or use --config`);
    config = { ...DEMO_TRAIN_CONFIG, ...(args.bool('quick') ? DEMO_QUICK_CONFIG : {}) };
  } else if (resumeDir === undefined) {
    const file = args.str('config');
    ({ engine: engineInput, ...config } = readConfigFile(file, `--config ${file}`) as TrainConfigInput & { engine?: unknown });
  }
  const model = args.optStr('model');
  if (model) config.model_name_or_path = model;
  // Refuse a bad config before touching the GPU.
  let fromConfig = resumeDir === undefined ? resolveConfig(config).engine : {};
  const quant = args.optStr('quant') ?? 'q4';
  if (quant !== 'q4' && quant !== 'none') throw new Error(`--quant must be 'q4' or 'none', got '${quant}'`);
  const outDir = resumeDir ?? args.optStr('output-dir') ?? join('runs', new Date().toISOString().replace(/[:.]/g, '-'));
  // The engine config a run started with (DIR/engine.json) holds on --resume; flags given then override it for that session.
  const engineFile = join(outDir, 'engine.json');
  if (resumeDir !== undefined && existsSync(engineFile)) engineInput = readConfigFile(engineFile);
  // A run of an earlier version kept gradient_checkpointing in its config, not in engine.json.
  if (resumeDir !== undefined && !(isPlainObject(engineInput) && 'gradient_checkpointing' in engineInput)) fromConfig = resolveConfig(latestCheckpointConfig(resumeDir)).engine;
  const engine = engineFromArgs(args, engineInput, fromConfig);
  if (args.bool('demo') && asksTensorCores(engine)) throw new Error('tensor-core products (--products, --vision-products, --tensor-cores, --vision-tensor-cores) go with --config or --resume, not --demo');
  if (args.bool('demo') && engine.activation_storage === 'f16') throw new Error('--activation-storage f16 goes with --config or --resume, not --demo (the demo model runs the f32 path)');
  if (args.bool('demo') && engine.kv_cache !== 'auto') throw new Error('--kv-cache goes with --config or --resume, not --demo (the demo keeps the f32 cache)');
  const allowDataChange = args.bool('allow-data-change');
  if (allowDataChange && resumeDir === undefined) throw new Error('--allow-data-change goes with --resume');
  if (resumeDir === undefined) {
    mkdirSync(outDir, { recursive: true });
    writeFileSync(engineFile, `${JSON.stringify(engine)}\n`);
  }
  const warn = (line: string) => console.error(line);
  // A run of an earlier version kept its file source itself in DIR/data.json, beside a synthetic `dataset`.
  const legacy = resumeDir === undefined ? undefined : readDataRecord(resumeDir)?.legacy;
  let rows: DatasetRow[] | undefined;
  if (legacy) {
    const { config: old } = resolveConfig({ data: legacy });
    warn(`warning: reading the data set from ${join(outDir, DATA_RECORD_FILE)} (a run of an earlier version)`);
    rows = await datasetRows(old.dataset, warn);
  }
  const steps = args.optStr('steps') === undefined ? undefined : args.num('steps');
  // Tensor cores need Dawn's unsafe APIs, and f16 (products or kept activations) on NVIDIA's Vulkan driver its f16 toggle (a no-op elsewhere).
  const tensorCores = usesTensorCores(engine);
  const gpu = await createNodeGpu({ driver: args.optStr('driver'), unsafeApis: tensorCores, f16: tensorCores || engine.activation_storage === 'f16' });
  if (args.bool('demo')) {
    const evalRows = args.optStr('eval-rows') === undefined ? (args.bool('quick') ? DEMO_QUICK_EVAL_ROWS : undefined) : args.num('eval-rows');
    const result = await demoRun(gpu, { config, steps, evalRows, modelDir: DEMO_MODEL_DIR, quant, metricsFile: args.optStr('metrics'), outDir, engine, sandbox: createNodeSandbox(), log: (line) => console.log(line), warn });
    console.log(JSON.stringify({ demo: result }));
    warn(`demo: held-out reward ${result.before.reward.toFixed(3)} -> ${result.after.reward.toFixed(3)}, accuracy ${result.before.accuracy.toFixed(3)} -> ${result.after.accuracy.toFixed(3)}, format ${result.before.format.toFixed(3)} -> ${result.after.format.toFixed(3)} over ${result.evalRows} rows after ${result.steps} steps; checkpoints in ${outDir}`);
    return;
  }
  const { state } = await trainRun(gpu, qwen3vlFactory({ quant, rows, warn, engine }), {
    config,
    steps,
    metricsFile: args.optStr('metrics'),
    outDir,
    resume: resumeDir !== undefined,
    allowDataChange,
    sandbox: createNodeSandbox(),
    engine,
    log: (line) => console.log(line),
    warn,
  });
  warn(`${state}; checkpoints in ${outDir}`);
  if (state === 'failed') throw new Error('training failed');
}
