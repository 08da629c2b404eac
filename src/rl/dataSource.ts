// Where a training run's prompts come from: TrainConfig.dataset, one of three kinds.
//   synthetic  the visual tasks of src/data (the demo's data), a pure function of the seed
//   file       a local parquet, JSON or JSONL file, its columns mapped onto question/answer/images
//   hub        one split of a Hugging Face data set, through its parquet export
// The CLI loads file and hub sources itself (src/node/commands/train.ts); the app's Data panel
// loads rows in the page and hands them to the worker.
import type { ColumnMapping } from '../data/loaders/mapping';
import { SYNTHETIC_TASK_NAMES, type SyntheticTask } from '../data/synthetic';
import { ConfigError, isPlainObject } from './configKeys';

/** Prompts from the synthetic visual tasks of src/data. */
export interface SyntheticDatasetSettings {
  kind: 'synthetic';
  /** Tasks in turn; default all three. */
  tasks: SyntheticTask[];
  /** Rows generated. Default 256. */
  count: number;
  /** Data set seed (rows are a pure function of it). Default 0. */
  seed: number;
  /** Square image side in pixels. Default 224. */
  size: number;
}

export type FileFormat = 'parquet' | 'json' | 'jsonl';
export const FILE_FORMATS: readonly FileFormat[] = ['parquet', 'json', 'jsonl'];

/** What the file and hub sources share: how columns become rows, and which rows are kept. */
interface MappedSource {
  /**
   * Columns of the question, the gold answer and the images (src/data/loaders/mapping.ts);
   * `image_keys` may be one column name or a list. null recognises the geo3k or MathVista layout.
   */
  mapping: ColumnMapping | null;
  /** Read at most this many rows (at least 1); null: all. */
  limit: number | null;
  /** Keep only rows whose gold answer reads as a number. Default false. */
  numeric_only: boolean;
}

/** A local parquet, JSON or JSONL file. */
export interface FileDatasetSettings extends MappedSource {
  kind: 'file';
  /** The file; a relative path is read from the working directory. */
  path: string;
  /** null (default): by the file's extension (.parquet, .json, .jsonl or .ndjson). */
  format: FileFormat | null;
  /** Folder that image cells holding file names are read from; null: none. */
  image_folder: string | null;
}

/** One split of a Hugging Face data set (its parquet export; HF_TOKEN for gated ones in the CLI). */
export interface HubDatasetSettings extends MappedSource {
  kind: 'hub';
  /** "org/name". */
  repo_id: string;
  /** The data set's config (subset); default 'default'. */
  config: string;
  /** Default 'train'. */
  split: string;
  /**
   * Default 'main': the Hub's current parquet export. Another branch, tag or commit is read from its
   * tree `{config}/{split}/*.parquet` (the export's layout): a commit of `refs/convert/parquet` pins the rows.
   */
  revision: string;
}

export type DatasetSettings = SyntheticDatasetSettings | FileDatasetSettings | HubDatasetSettings;
export type DatasetKind = DatasetSettings['kind'];

/** Every field a mapping may hold: the known keys of `dataset.mapping` (TypeScript keeps it complete). */
const MAPPING_TEMPLATE: Required<ColumnMapping> = { prompt_key: '', answer_key: '', image_keys: [], system_prompt: '', id_key: '', answer_type_key: '' };

/** Each kind's defaults; `path` and `repo_id` have none and must be given. */
export function defaultDataset<K extends DatasetKind>(kind: K): Extract<DatasetSettings, { kind: K }> {
  const mapped: MappedSource = { mapping: null, limit: null, numeric_only: false };
  const all: { [k in DatasetKind]: Extract<DatasetSettings, { kind: k }> } = {
    synthetic: { kind: 'synthetic', tasks: [...SYNTHETIC_TASK_NAMES], count: 256, seed: 0, size: 224 },
    file: { kind: 'file', path: '', format: null, image_folder: null, ...mapped },
    hub: { kind: 'hub', repo_id: '', config: 'default', split: 'train', revision: 'main', ...mapped },
  };
  return all[kind];
}

export const DATASET_KINDS: readonly DatasetKind[] = ['synthetic', 'file', 'hub'];

/** The known keys of `dataset` of this kind, nested ones included (for findUnknownKey). */
export function datasetTemplate(kind: DatasetKind): Record<string, unknown> {
  const d: Record<string, unknown> = { ...defaultDataset(kind) };
  if ('mapping' in d) d.mapping = MAPPING_TEMPLATE;
  return d;
}

/** The CLI's former top-level "data" entry (before `dataset` had file and hub kinds). */
const LEGACY_DATA_TEMPLATE = { path: '', mapping: MAPPING_TEMPLATE, image_folder: '', limit: 0, numeric_only: false };
export const legacyDataTemplate = (): Record<string, unknown> => ({ ...LEGACY_DATA_TEMPLATE });

function text(name: string, v: unknown): string {
  if (typeof v !== 'string' || v === '') throw new ConfigError(`${name} must be a non-empty string; got ${JSON.stringify(v)}`);
  return v;
}

function checkMapping(name: string, m: unknown): ColumnMapping | null {
  if (m === null) return null;
  if (!isPlainObject(m)) throw new ConfigError(`${name} must be an object with prompt_key, answer_key and image_keys, or null to recognise the layout; got ${JSON.stringify(m)}`);
  for (const key of ['prompt_key', 'answer_key', 'image_keys'] as const) {
    if (m[key] === undefined) throw new ConfigError(`${name}.${key} is missing (a mapping names prompt_key, answer_key and image_keys)`);
  }
  // One column name is taken as a list of one.
  const images = typeof m.image_keys === 'string' ? [m.image_keys] : m.image_keys;
  if (!Array.isArray(images)) throw new ConfigError(`${name}.image_keys must be a column name or a list of them; got ${JSON.stringify(m.image_keys)}`);
  images.forEach((k, i) => text(`${name}.image_keys[${i}]`, k));
  const out: ColumnMapping = { prompt_key: text(`${name}.prompt_key`, m.prompt_key), answer_key: text(`${name}.answer_key`, m.answer_key), image_keys: images as string[] };
  for (const key of ['system_prompt', 'id_key', 'answer_type_key'] as const) {
    if (m[key] !== undefined) out[key] = text(`${name}.${key}`, m[key]);
  }
  return out;
}

function checkMapped(name: string, d: MappedSource): MappedSource {
  const { limit } = d;
  if (limit !== null && (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1)) {
    throw new ConfigError(`${name}.limit must be an integer >= 1 (the rows to read), or null for all; got ${JSON.stringify(limit)}`);
  }
  if (typeof d.numeric_only !== 'boolean') throw new ConfigError(`${name}.numeric_only must be true or false`);
  return { mapping: checkMapping(`${name}.mapping`, d.mapping), limit, numeric_only: d.numeric_only };
}

function int(name: string, v: unknown, min: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) throw new ConfigError(`${name} must be an integer >= ${min}; got ${JSON.stringify(v)}`);
  return v;
}

/** `input` (keys already checked) merged over its kind's defaults, every field checked; `name` is its path. */
export function resolveDataset(input: Record<string, unknown>, name = 'dataset'): DatasetSettings {
  const kind = input.kind ?? 'synthetic';
  if (!DATASET_KINDS.includes(kind as DatasetKind)) throw new ConfigError(`${name}.kind must be one of ${DATASET_KINDS.join(', ')}; got ${JSON.stringify(kind)}`);
  const d = { ...defaultDataset(kind as DatasetKind), ...input } as DatasetSettings;
  switch (d.kind) {
    case 'synthetic': {
      if (!Array.isArray(d.tasks) || d.tasks.length === 0) throw new ConfigError(`${name}.tasks must list at least one task`);
      for (const t of d.tasks) {
        if (!SYNTHETIC_TASK_NAMES.includes(t)) throw new ConfigError(`${name}.tasks: no task '${t}' (tasks: ${SYNTHETIC_TASK_NAMES.join(', ')})`);
      }
      int(`${name}.count`, d.count, 1);
      int(`${name}.seed`, d.seed, 0);
      int(`${name}.size`, d.size, 112);
      return d;
    }
    case 'file': {
      text(`${name}.path`, d.path);
      if (d.format !== null && !FILE_FORMATS.includes(d.format)) throw new ConfigError(`${name}.format must be one of ${FILE_FORMATS.join(', ')}, or null (by extension); got ${JSON.stringify(d.format)}`);
      if (d.image_folder !== null) text(`${name}.image_folder`, d.image_folder);
      return { ...d, ...checkMapped(name, d) };
    }
    case 'hub': {
      if (!/^[\w.-]+\/[\w.-]+$/.test(text(`${name}.repo_id`, d.repo_id))) throw new ConfigError(`${name}.repo_id must be "org/name"; got ${JSON.stringify(d.repo_id)}`);
      text(`${name}.config`, d.config);
      text(`${name}.split`, d.split);
      // A git ref or commit: no spaces, no "..", not starting with "/" or "-".
      if (!/^(?![/-])(?!.*\.\.)[^\s~^:?*[\\]+$/.test(text(`${name}.revision`, d.revision))) throw new ConfigError(`${name}.revision must be a branch, tag or commit of the data set (e.g. "main"); got ${JSON.stringify(d.revision)}`);
      return { ...d, ...checkMapped(name, d) };
    }
  }
}
