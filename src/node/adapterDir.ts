// PEFT adapter folders on disk for the CLI: written beside each training checkpoint and by
// `export-adapter`, read by `logits`, `generate`, `eval` and `merge`. The files themselves are the
// app's PEFT export (src/adapter/peft.ts); this module adds where they go, what the base model is
// called in them, and the checks that name what is wrong with a folder or an adapter.
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, AdapterError, exportPeft, importPeft, validateAgainstModel, type AdapterModule, type PeftAdapter } from '../adapter/peft';
import { DEMO_MODEL_DIR } from '../data/demo';
import type { Qwen3VLConfig } from '../model/config';
import { loraModuleName, LORA_PROJECTIONS } from '../model/decoder';
import { nodeDirFiles } from '../model/safetensors';
import { decodeCheckpoint, tensorNames, type Checkpoint } from '../rl/checkpoint';

/** The folder name of an adapter beside a checkpoint and in a run's folder. */
export const ADAPTER_DIR = 'adapter';

/** An output (folder or file) that already exists, refused without --overwrite. */
export class OutputExistsError extends Error {
  constructor(readonly path: string) {
    super(`${path} already exists; pass --overwrite to replace it`);
    this.name = 'OutputExistsError';
  }
}

/** A folder given as a checkpoint that holds none. */
export class NoCheckpointError extends Error {
  constructor(readonly path: string, detail: string) {
    super(`${path}: no checkpoint there (${detail})`);
    this.name = 'NoCheckpointError';
  }
}

/** Refuse an existing `path` unless `overwrite`; writers replace it only once the new output is complete. */
export function checkOutputFree(path: string, overwrite: boolean): void {
  if (existsSync(path) && !overwrite) throw new OutputExistsError(path);
}

/** Put the finished folder `tmp` in place of `dir` (whatever was there goes). */
export function replaceDir(tmp: string, dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
}

export interface BaseModelName {
  /** adapter_config.json's base_model_name_or_path. */
  name: string;
  /** A line for the folder's README.md when the name needs explaining; null when it does not. */
  note: string | null;
}

/**
 * What adapter_config.json calls the base model so that PEFT can load it: a hub id as it is; the
 * bundled demo by its folder in this repository (a path from the repository root, with a note);
 * any other local folder by its absolute path.
 */
export function baseModelName(modelNameOrPath: string): BaseModelName {
  if (resolve(modelNameOrPath) === resolve(DEMO_MODEL_DIR)) {
    return {
      name: DEMO_MODEL_DIR,
      note:
        `The base model is vlrl's bundled demo model, the folder \`${DEMO_MODEL_DIR}\` of the vlrl repository ` +
        '(run from the repository root, or point base_model_name_or_path at that folder\'s absolute path).',
    };
  }
  if (existsSync(modelNameOrPath)) return { name: resolve(modelNameOrPath), note: null };
  return { name: modelNameOrPath, note: null };
}

/** The trained adapter a checkpoint holds, in PEFT's terms (no GPU needed). */
export function adapterFromCheckpoint(c: Checkpoint): PeftAdapter {
  const { lora, model_name_or_path } = c.meta.config;
  const modules: AdapterModule[] = c.meta.adapters.map((a) => {
    const n = tensorNames(a.name);
    const A = c.tensors.get(n.A);
    const B = c.tensors.get(n.B);
    if (!A || !B) throw new AdapterError(`checkpoint of step ${c.meta.step}: tensors of ${a.name} are missing`);
    return { module: a.name, in: a.in, out: a.out, r: a.r, alpha: lora.lora_alpha, A, B };
  });
  if (modules.length === 0) throw new AdapterError(`checkpoint of step ${c.meta.step} holds no adapter`);
  return {
    name: `step-${c.meta.step}`,
    r: lora.r,
    alpha: lora.lora_alpha,
    dropout: lora.lora_dropout,
    targetModules: [...lora.target_modules],
    baseModel: baseModelName(model_name_or_path).name,
    modules,
  };
}

/**
 * Write `adapter` to `dir` as PEFT's two files (through a temporary folder, then renamed, so a
 * reader never sees half a folder), with a README.md when the base model's name needs a note.
 * `force`: write even when some lora_A or lora_B is all zeros (a checkpoint before any update).
 */
export function writeAdapterDir(dir: string, adapter: PeftAdapter, options: { force?: boolean; note?: string | null; dtype?: 'F32' | 'BF16' } = {}): void {
  const { weights, config } = exportPeft(adapter, { force: options.force, dtype: options.dtype });
  const tmp = join(dirname(dir), `.${basename(dir)}.tmp`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  writeFileSync(join(tmp, ADAPTER_WEIGHTS_FILE), weights);
  writeFileSync(join(tmp, ADAPTER_CONFIG_FILE), config);
  if (options.note) writeFileSync(join(tmp, 'README.md'), `# LoRA adapter (PEFT)\n\n${options.note}\n`);
  replaceDir(tmp, dir);
}

/**
 * After the trainer saved checkpoint `c` into `checkpointDir`: its adapter into
 * `checkpointDir/adapter`, and the same into `runDir/adapter` (the run's latest adapter; after the
 * last step, the run's result).
 */
export function writeCheckpointAdapters(runDir: string, checkpointDir: string, c: Checkpoint): void {
  const adapter = adapterFromCheckpoint(c);
  const { note } = baseModelName(c.meta.config.model_name_or_path);
  writeAdapterDir(join(checkpointDir, ADAPTER_DIR), adapter, { force: true, note });
  writeAdapterDir(join(runDir, ADAPTER_DIR), adapter, { force: true, note });
}

/**
 * The checkpoint in `dir`: a run folder (its `latest` names the checkpoint) or one step's folder
 * (checkpoint.json + tensors.safetensors). Throws NoCheckpointError when there is none.
 */
export async function readCheckpointAt(dir: string): Promise<Checkpoint> {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new NoCheckpointError(dir, 'not a folder');
  let folder = dir;
  const latest = join(dir, 'latest');
  if (existsSync(latest)) folder = join(dir, readFileSync(latest, 'utf8').trim());
  const json = join(folder, 'checkpoint.json');
  const tensors = join(folder, 'tensors.safetensors');
  if (!existsSync(json) || !existsSync(tensors)) {
    throw new NoCheckpointError(dir, `neither a run folder with a 'latest' file nor a step folder with checkpoint.json and tensors.safetensors${folder !== dir ? `; 'latest' names ${folder}, which lacks them` : ''}`);
  }
  return decodeCheckpoint(readFileSync(json, 'utf8'), readFileSync(tensors));
}

/** A PEFT adapter folder (adapter_config.json + adapter_model.safetensors). */
export async function readAdapterDir(dir: string): Promise<PeftAdapter> {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new AdapterError(`--adapter ${dir}: not a folder (a PEFT adapter folder holds ${ADAPTER_CONFIG_FILE} and ${ADAPTER_WEIGHTS_FILE})`);
  return importPeft(nodeDirFiles(dir), dir);
}

/**
 * Check that the adapter fits the model: every module a linear layer of it with the adapter's
 * shape (validateAgainstModel), and, when `engine` (the engine applies it), every projection of
 * every decoder layer present, since the engine adapts all seven. Throws an AdapterError naming
 * the folder and what does not fit.
 */
export function checkAdapterFits(adapter: PeftAdapter, config: Qwen3VLConfig, options: { engine: boolean }): void {
  try {
    validateAgainstModel(adapter, config);
  } catch (e) {
    if (e instanceof AdapterError) throw new AdapterError(`${adapter.name}: ${e.message} (r = ${adapter.r}, target_modules ${JSON.stringify(adapter.targetModules)})`);
    throw e;
  }
  if (!options.engine) return;
  const have = new Set(adapter.modules.map((m) => m.module));
  const missing = new Set<string>();
  for (let l = 0; l < config.text.numLayers; l++) {
    for (const proj of LORA_PROJECTIONS) {
      const name = loraModuleName(l, proj);
      if (!have.has(name)) missing.add(name.slice(name.lastIndexOf('.') + 1));
    }
  }
  if (missing.size) {
    throw new AdapterError(
      `${adapter.name}: target_modules ${JSON.stringify(adapter.targetModules)} lack ${[...missing].join(', ')} in some of the model's ${config.text.numLayers} layers; ` +
        'the engine applies adapters on q, k, v, o, gate, up and down of every layer (merge takes any subset)',
    );
  }
}
