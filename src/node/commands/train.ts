// `npm run cli -- train --config FILE.json [--steps N] [--metrics FILE.jsonl] [--output-dir DIR]`,
// `train --resume DIR [--steps N]` and `train --demo`: GSPO/GRPO training on the GPU, one JSON line
// of metrics per step on stdout (and appended to --metrics).
// --demo also evaluates the first --eval-rows held-out rows greedily before and after (src/node/demoRun.ts):
// --quick is the small version CI runs on software Vulkan (src/data/demo.ts DEMO_QUICK_CONFIG);
// {"eval": "before"|"after", ...} lines, then {"demo": {before, after, rise}}.
//
// The config file is the trainer config (src/rl/config.ts: TRL's names, model_name_or_path, the
// synthetic `dataset`), plus, for prompts from a local file instead, a CLI-only "data" entry:
//   "data": {"path": "geo3k.parquet" | "rows.jsonl" | "rows.json", "mapping": {prompt_key, answer_key,
//            image_keys, ...}, "image_folder": "images/", "limit": 500, "numeric_only": true}
// (paths relative to the working directory; without "mapping" the geo3k or MathVista layout is
// recognised). model_name_or_path is a local folder, or a hub id when no such folder exists.
// --tensor-cores runs the decoder's and the LM head's 4-bit GEMMs and input gradients on int8 tensor cores
// (ModelOptions.tensorCoreGemm; Dawn started with allow_unsafe_apis, which offers subgroup
// matrices): faster on GPUs that have them, an error naming what is missing on the others.
// --tensor-core-limbs 1 takes x there in one int8 limb instead of two (ModelOptions.tensorCoreLimbs:
// about 1.4x faster products, coarser log-probs; BENCHMARKS.md gives both). --tensor-core-steps row
// (two limbs) keeps one int8 step per row of x and column of W over the whole of K instead of one
// per block of 128 (ModelOptions.tensorCoreSteps: about 1.2x faster products).
// --vision-tensor-cores runs the vision tower's dense products on them too, its f32 weights rounded
// to int8 once (ModelOptions.visionTensorCores; on an H100 about 1.7x faster, image features within
// what bf16 moves them).
//
// Checkpoints go to DIR (default runs/<timestamp>) in the format of src/rl/checkpoint.ts:
// DIR/step-NNNNNNNN/{checkpoint.json,tensors.safetensors}, each written to a temporary folder and
// renamed, then DIR/latest (the current folder's name) replaced by rename, so an interrupted write
// leaves the previous checkpoint current. DIR/data.json keeps the "data" entry for --resume.
// Beside each checkpoint, step-NNNNNNNN/adapter/ holds its LoRA in PEFT's format, and DIR/adapter/
// the latest one (at the end, the run's result): adapter_model.safetensors + adapter_config.json.
import { appendFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEMO_MODEL_DIR, DEMO_QUICK_CONFIG, DEMO_TRAIN_CONFIG } from '../../data/demo';
import { loadFile, loadParquet, type ColumnMapping } from '../../data';
import { folderFromDirectory, parquetFromPath } from '../../data/node/files';
import { sharpDecoder } from '../../data/node/sharpDecoder';
import type { DatasetRow } from '../../data/types';
import type { Gpu } from '../../gpu';
import type { CustomRewardEvaluator } from '../../rewards/sandbox';
import { createNodeSandbox } from '../../rewards/sandboxNode';
import { hubFiles } from '../../model/hub';
import { nodeDirFiles, type ModelFiles } from '../../model/safetensors';
import { configRows, openModel } from '../../model/session';
import type { MmaSteps } from '../../ops/matmulQ4Mma';
import { decodeCheckpoint, encodeCheckpoint, type Checkpoint } from '../../rl/checkpoint';
import { resolveConfig, type TrainConfig, type TrainConfigInput } from '../../rl/config';
import { Trainer, type TrainerEvent } from '../../rl/trainer';
import type { PolicyFactory } from '../../worker/trainerApi';
import type { CliArgs } from '../args';
import { createNodeGpu } from '../gpu';
import { writeCheckpointAdapters } from '../adapterDir';
import { DEMO_QUICK_EVAL_ROWS, demoRun } from '../demoRun';

export const summary =
  'train a LoRA adapter with GSPO/GRPO (--config FILE.json | --demo [--quick] [--eval-rows N] | --resume DIR) [--steps N] [--metrics FILE.jsonl] [--output-dir DIR] [--quant q4|none] [--tensor-cores [--tensor-core-limbs 1|2] [--tensor-core-steps block|row]] [--vision-tensor-cores]';

/** Prompts from a local parquet/JSON/JSONL file (the config file's "data" entry). */
export interface FileDataSpec {
  path: string;
  mapping?: ColumnMapping;
  image_folder?: string;
  limit?: number;
  numeric_only?: boolean;
}

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
  const latest = join(dir, 'latest');
  if (!existsSync(latest)) return null;
  const folder = join(dir, readFileSync(latest, 'utf8').trim());
  return decodeCheckpoint(readFileSync(join(folder, 'checkpoint.json'), 'utf8'), readFileSync(join(folder, 'tensors.safetensors')));
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
  log: (line: string) => void;
  warn: (line: string) => void;
}

/** The command's work, with the model behind `openPolicy` (tests give it a small one). */
export async function trainRun(gpu: Gpu, openPolicy: PolicyFactory, o: TrainRunOptions): Promise<{ state: string; config: TrainConfig }> {
  const resumeFrom = o.resume ? await readCheckpointDir(o.outDir) : null;
  if (o.resume && !resumeFrom) throw new Error(`--resume ${o.outDir}: no checkpoint there (no ${join(o.outDir, 'latest')})`);
  const input = resumeFrom ? { ...resumeFrom.meta.config } : { ...o.config };
  if (o.steps !== undefined) input.max_steps = o.steps;
  const { config, loss, warnings } = resolveConfig(input);
  for (const w of warnings) o.warn(`warning: ${w}`);
  mkdirSync(o.outDir, { recursive: true });
  const { policy, data } = await openPolicy(gpu, config);
  const onEvent = (e: TrainerEvent) => {
    if (e.type === 'step') {
      const line = JSON.stringify(e.metrics, (_, v) => (typeof v === 'number' && !Number.isFinite(v) ? null : v));
      o.log(line);
      if (o.metricsFile) appendFileSync(o.metricsFile, `${line}\n`);
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
    onEvent,
    // Each checkpoint also as a PEFT adapter folder beside it and in the run folder (src/node/adapterDir.ts).
    saveCheckpoint: async (c) => writeCheckpointAdapters(o.outDir, await writeCheckpointDir(o.outDir, c), c),
    resume: resumeFrom ?? undefined,
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

/** A local folder, or a hub id ("org/name") when no such folder exists. */
export function modelFilesAt(pathOrRepo: string): ModelFiles {
  if (existsSync(pathOrRepo)) return nodeDirFiles(pathOrRepo);
  if (/^[\w.-]+\/[\w.-]+$/.test(pathOrRepo)) return hubFiles(pathOrRepo, { token: process.env.HF_TOKEN });
  throw new Error(`model_name_or_path '${pathOrRepo}' is neither a local folder nor a hub id`);
}

export async function loadFileRows(spec: FileDataSpec, warn: (line: string) => void): Promise<DatasetRow[]> {
  if (typeof spec.path !== 'string') throw new Error('config "data" needs a "path" (a parquet, JSON or JSONL file)');
  if (!existsSync(spec.path)) throw new Error(`data.path: no file ${spec.path}`);
  const options = {
    decoder: sharpDecoder,
    mapping: spec.mapping,
    limit: spec.limit,
    numericOnly: spec.numeric_only,
    folder: spec.image_folder ? await folderFromDirectory(spec.image_folder) : undefined,
  };
  const result = spec.path.toLowerCase().endsWith('.parquet')
    ? await loadParquet(await parquetFromPath(spec.path), options)
    : await loadFile(Object.assign(new Blob([readFileSync(spec.path)]), { name: spec.path }), options);
  for (const b of result.broken.slice(0, 5)) warn(`warning: ${spec.path} row ${b.index}: ${b.reason} (${b.detail})`);
  if (result.broken.length > 5) warn(`warning: ${spec.path}: ${result.broken.length} broken rows in all`);
  if (result.rows.length === 0) throw new Error(`${spec.path}: no usable rows (${result.broken.length} broken, ${result.filtered.length} filtered)`);
  return result.rows;
}

/** Qwen3-VL from model_name_or_path with fresh adapters; prompts from `rows`, or the config's dataset. */
export function qwen3vlFactory(opts: { quant: 'q4' | 'none'; rows?: readonly DatasetRow[]; warn: (line: string) => void; tensorCoreGemm?: boolean; tensorCoreLimbs?: 1 | 2; tensorCoreSteps?: MmaSteps; visionTensorCores?: boolean }): PolicyFactory {
  return async (gpu, config) => {
    opts.warn(`loading ${config.model_name_or_path}`);
    const session = await openModel(gpu, modelFilesAt(config.model_name_or_path), { quant: opts.quant, maxSamples: config.num_generations, tensorCoreGemm: opts.tensorCoreGemm, tensorCoreLimbs: opts.tensorCoreLimbs, tensorCoreSteps: opts.tensorCoreSteps, visionTensorCores: opts.visionTensorCores });
    session.attachLora(config.lora);
    return { policy: session.policy, data: session.promptSource(opts.rows ?? configRows(config.dataset)) };
  };
}

export async function run(args: CliArgs): Promise<void> {
  const resumeDir = args.optStr('resume');
  const sources = [args.bool('demo'), args.optStr('config') !== undefined, resumeDir !== undefined].filter(Boolean).length;
  if (sources !== 1) throw new Error('train: give exactly one of --config FILE.json, --demo or --resume DIR');
  let config: TrainConfigInput = {};
  let data: FileDataSpec | undefined;
  if (args.bool('demo')) {
    if (!existsSync(join(DEMO_MODEL_DIR, 'config.json'))) throw new Error(`--demo: the bundled demo model is not in ${DEMO_MODEL_DIR} (no config.json there); train one with tools/ or use --config`);
    config = { ...DEMO_TRAIN_CONFIG, ...(args.bool('quick') ? DEMO_QUICK_CONFIG : {}) };
  } else if (resumeDir === undefined) {
    const file = args.str('config');
    ({ data, ...config } = JSON.parse(readFileSync(file, 'utf8')) as TrainConfigInput & { data?: FileDataSpec });
  }
  const model = args.optStr('model');
  if (model) config.model_name_or_path = model;
  if (resumeDir === undefined) resolveConfig(config); // refuse a bad config before touching the GPU
  const quant = args.optStr('quant') ?? 'q4';
  if (quant !== 'q4' && quant !== 'none') throw new Error(`--quant must be 'q4' or 'none', got '${quant}'`);
  const outDir = resumeDir ?? args.optStr('output-dir') ?? join('runs', new Date().toISOString().replace(/[:.]/g, '-'));
  const dataFile = join(outDir, 'data.json');
  if (resumeDir !== undefined && existsSync(dataFile)) data = JSON.parse(readFileSync(dataFile, 'utf8')) as FileDataSpec;
  const warn = (line: string) => console.error(line);
  const rows = data ? await loadFileRows(data, warn) : undefined;
  if (data && resumeDir === undefined) {
    mkdirSync(outDir, { recursive: true });
    writeFileSync(dataFile, JSON.stringify(data));
  }
  const steps = args.optStr('steps') === undefined ? undefined : args.num('steps');
  const tensorCoreGemm = args.bool('tensor-cores');
  if (tensorCoreGemm && args.bool('demo')) throw new Error('--tensor-cores goes with --config or --resume, not --demo');
  const limbs = args.optStr('tensor-core-limbs');
  if (limbs !== undefined && !(tensorCoreGemm && (limbs === '1' || limbs === '2'))) throw new Error(`--tensor-core-limbs takes 1 or 2, with --tensor-cores (got '${limbs}'${tensorCoreGemm ? '' : ' without --tensor-cores'})`);
  const tensorCoreLimbs = limbs === undefined ? undefined : (Number(limbs) as 1 | 2);
  const stepsBy = args.optStr('tensor-core-steps');
  if (stepsBy !== undefined && !(tensorCoreGemm && (stepsBy === 'block' || (stepsBy === 'row' && tensorCoreLimbs !== 1)))) {
    throw new Error(`--tensor-core-steps takes block or row (row with two limbs), with --tensor-cores (got '${stepsBy}'${tensorCoreGemm ? (tensorCoreLimbs === 1 ? ' with one limb' : '') : ' without --tensor-cores'})`);
  }
  const tensorCoreSteps = stepsBy as MmaSteps | undefined;
  const visionTensorCores = args.bool('vision-tensor-cores');
  if (visionTensorCores && args.bool('demo')) throw new Error('--vision-tensor-cores goes with --config or --resume, not --demo');
  const gpu = await createNodeGpu({ driver: args.optStr('driver'), dawnFlags: tensorCoreGemm || visionTensorCores ? ['enable-dawn-features=allow_unsafe_apis'] : [] });
  if (args.bool('demo')) {
    const evalRows = args.optStr('eval-rows') === undefined ? (args.bool('quick') ? DEMO_QUICK_EVAL_ROWS : undefined) : args.num('eval-rows');
    const result = await demoRun(gpu, { config, steps, evalRows, modelDir: DEMO_MODEL_DIR, quant, metricsFile: args.optStr('metrics'), outDir, sandbox: createNodeSandbox(), log: (line) => console.log(line), warn });
    console.log(JSON.stringify({ demo: result }));
    warn(`demo: held-out reward ${result.before.reward.toFixed(3)} -> ${result.after.reward.toFixed(3)}, accuracy ${result.before.accuracy.toFixed(3)} -> ${result.after.accuracy.toFixed(3)}, format ${result.before.format.toFixed(3)} -> ${result.after.format.toFixed(3)} over ${result.evalRows} rows after ${result.steps} steps; checkpoints in ${outDir}`);
    return;
  }
  const { state } = await trainRun(gpu, qwen3vlFactory({ quant, rows, warn, tensorCoreGemm, tensorCoreLimbs, tensorCoreSteps, visionTensorCores }), {
    config,
    steps,
    metricsFile: args.optStr('metrics'),
    outDir,
    resume: resumeDir !== undefined,
    sandbox: createNodeSandbox(),
    log: (line) => console.log(line),
    warn,
  });
  warn(`${state}; checkpoints in ${outDir}`);
  if (state === 'failed') throw new Error('training failed');
}
