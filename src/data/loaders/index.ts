// Loading a data set from where the user has it: a Hugging Face repo, a URL, a picked file
// (parquet, JSON, JSONL) with an optional picked image folder. Columns are mapped by the given
// mapping, or by recognising the geo3k or MathVista layout.
import { InvalidRecord, buildRows, emptyResult, mergeResults, type BuildOptions, type LoadResult } from './rows';
import { HUB_DEFAULT_REVISION, listHubParquetAt, hubHeaders, type HubDatasetOptions } from './hub';
import { parseJsonRecords, parseJsonl } from './json';
import { detectLayout, type ColumnMapping } from './mapping';
import { asyncBufferFromBlob, parquetFromUrl, parquetInfo, readParquetRecords, type AsyncBuffer } from './parquet';
import { DataFileError, utf8Text } from './errors';

export type LoadOptions = Omit<BuildOptions, 'mapping' | 'firstIndex'> & {
  /** Without one, the geo3k or MathVista layout is recognised from the column names. */
  mapping?: ColumnMapping;
  /** Read at most this many rows (a preview, or a small run). */
  limit?: number;
};

/** A limit is a count of rows: -1 must not read as "all but the last" (slice) nor anything else. */
function checkLimit(options: LoadOptions): void {
  const { limit } = options;
  if (limit !== undefined && !(Number.isInteger(limit) && limit >= 0)) throw new DataFileError(options.source ?? 'data set', `limit must be a whole number of rows (0 or more), got ${JSON.stringify(limit)}`);
}

/** The mapping for these columns; a mismatch is a DataFileError naming the file. */
function mappingFor(columns: readonly string[], options: LoadOptions): ColumnMapping {
  try {
    return findMapping(columns, options);
  } catch (e) {
    throw new DataFileError(options.source ?? 'data set', (e as Error).message);
  }
}

function findMapping(columns: readonly string[], options: LoadOptions): ColumnMapping {
  if (options.mapping) {
    const { prompt_key, answer_key, image_keys } = options.mapping as Partial<ColumnMapping>;
    for (const [key, v] of [['prompt_key', prompt_key], ['answer_key', answer_key]] as const) {
      if (typeof v !== 'string' || v === '') throw new Error(`mapping.${key} must name a column, got ${JSON.stringify(v)}`);
    }
    if (!Array.isArray(image_keys) || !image_keys.every((k) => typeof k === 'string')) {
      throw new Error(`mapping.image_keys must be a list of column names (["image"]), got ${JSON.stringify(image_keys)}`);
    }
    const missing = [prompt_key!, answer_key!, ...image_keys].filter((c) => !columns.includes(c));
    if (missing.length > 0) throw new Error(`mapping names column(s) ${missing.join(', ')} that the data set lacks (it has ${columns.join(', ')})`);
    return options.mapping;
  }
  const known = detectLayout(columns);
  if (!known) throw new Error(`unknown layout (columns ${columns.join(', ')}): set prompt_key, answer_key and image_keys`);
  return known.mapping;
}

/** Reads one parquet file, fetching only the mapped columns. */
export async function loadParquet(file: AsyncBuffer, options: LoadOptions, firstIndex = 0): Promise<LoadResult> {
  const name = options.source ?? 'parquet file';
  checkLimit(options);
  if (file.byteLength === 0) throw new DataFileError(name, 'is empty (0 bytes), not a parquet file');
  // hyparquet's own errors ("Offset is outside the bounds of the DataView") name neither file nor cause.
  const info = await parquetInfo(file).catch((e: unknown) => {
    throw new DataFileError(name, `is not a readable parquet file (${(e as Error).message})`);
  });
  const mapping = mappingFor(info.columns, options);
  const rowEnd = options.limit === undefined ? info.rows : Math.min(info.rows, options.limit);
  const records = await readParquetRecords(file, { rowEnd }).catch((e: unknown) => {
    throw new DataFileError(name, `is a corrupt parquet file: reading its rows failed (${(e as Error).message})`);
  });
  return buildRows(records, { ...options, mapping, firstIndex });
}

function columnsOf(records: readonly (Record<string, unknown> | InvalidRecord)[]): string[] {
  const columns = new Set<string>();
  for (const r of records) if (!(r instanceof InvalidRecord)) for (const k of Object.keys(r)) columns.add(k);
  return [...columns];
}

export async function loadJsonText(text: string, format: 'json' | 'jsonl', options: LoadOptions): Promise<LoadResult> {
  const name = options.source ?? `${format.toUpperCase()} data set`;
  checkLimit(options);
  if (text.trim() === '') throw new DataFileError(name, `is empty: no ${format === 'json' ? 'JSON value' : 'JSON lines'}`);
  let records: (Record<string, unknown> | InvalidRecord)[];
  try {
    records = format === 'json' ? parseJsonRecords(text) : parseJsonl(text);
  } catch (e) {
    throw new DataFileError(name, (e as Error).message);
  }
  if (options.limit !== undefined) records = records.slice(0, options.limit);
  return buildRows(records, { ...options, mapping: mappingFor(columnsOf(records), options) });
}

/** A picked file, by its extension: .parquet, .json, .jsonl/.ndjson. */
export async function loadFile(file: Blob & { name: string }, options: LoadOptions): Promise<LoadResult> {
  const name = file.name.toLowerCase();
  const named = { ...options, source: options.source ?? file.name };
  if (name.endsWith('.parquet')) return loadParquet(asyncBufferFromBlob(file), named);
  const text = async () => utf8Text(named.source, new Uint8Array(await file.arrayBuffer()));
  if (name.endsWith('.jsonl') || name.endsWith('.ndjson')) return loadJsonText(await text(), 'jsonl', named);
  if (name.endsWith('.json')) return loadJsonText(await text(), 'json', named);
  throw new Error(`${file.name}: not a parquet, JSON or JSONL file`);
}

/** One split of a hub data set, through its parquet export (at `revision`, default main: listHubParquetAt), shard by shard. */
export async function loadHubDataset(
  repo: string,
  where: { config: string; split: string; revision?: string },
  options: LoadOptions & HubDatasetOptions,
): Promise<LoadResult> {
  const revision = where.revision ?? HUB_DEFAULT_REVISION;
  const files = await listHubParquetAt(repo, { ...where, revision }, options);
  if (files.length === 0) throw new Error(`${repo}${revision === HUB_DEFAULT_REVISION ? '' : `@${revision}`}: no parquet files for ${where.config}/${where.split}`);
  const result = emptyResult();
  for (const f of files) {
    const left = options.limit === undefined ? undefined : options.limit - result.total;
    if (left !== undefined && left <= 0) break;
    const buffer = await parquetFromUrl(f.url, { headers: hubHeaders(options), fetch: options.fetch });
    mergeResults(result, await loadParquet(buffer, { ...options, limit: left, source: options.source ?? f.url }, result.total));
  }
  return result;
}
