// What data a CLI run trained on, kept in its folder as data.json: the config's dataset (paths
// absolute), the file's size (a file dataset) and a SHA-256 over the rows the trainer saw (ids,
// texts, answers, image bytes), for synthetic rows too. `train --resume` refuses other data
// (a changed or missing file, other rows, a missing data.json) unless --allow-data-change.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { DatasetRow } from '../data/types';
import type { DatasetSettings } from '../rl/config';

export const DATA_RECORD_FILE = 'data.json';

export interface DataRecord {
  /** The config's dataset, paths absolute. */
  dataset?: DatasetSettings;
  /** Size in bytes of a file dataset's file when the run started. */
  fileBytes?: number;
  /** An older version's data.json: the "data" entry itself (file prompts beside a synthetic dataset). */
  legacy?: Record<string, unknown>;
  rows: number;
  /** SHA-256 (hex) of the rows, see rowsDigest. */
  rowsSha256: string;
}

export class DataProvenanceError extends Error {
  constructor(message: string) {
    super(`${message}; pass --allow-data-change to resume on the data given now`);
    this.name = 'DataProvenanceError';
  }
}

/** SHA-256 over every row's id, texts, answer and images (encoded bytes, or size and pixels), each field length-prefixed. */
export function rowsDigest(rows: readonly DatasetRow[]): string {
  const h = createHash('sha256');
  const field = (s: string | Uint8Array) => {
    const bytes = typeof s === 'string' ? Buffer.from(s, 'utf8') : s;
    h.update(`${bytes.length}:`);
    h.update(bytes);
  };
  for (const r of rows) {
    field(r.id);
    field(r.question);
    field(r.answer);
    field(r.system_prompt ?? '');
    field(String(r.images.length + (r.encoded?.length ?? 0)));
    for (const im of r.encoded ?? []) field(im.bytes);
    for (const im of r.images) {
      field(`${im.width}x${im.height}`);
      field(new Uint8Array(im.data.buffer, im.data.byteOffset, im.data.byteLength));
    }
  }
  return h.digest('hex');
}

export function dataRecordOf(rows: readonly DatasetRow[], dataset: DatasetSettings): DataRecord {
  return { dataset, ...(dataset.kind === 'file' ? { fileBytes: statSync(dataset.path).size } : {}), rows: rows.length, rowsSha256: rowsDigest(rows) };
}

/** Where a dataset's rows come from, in words. */
function sourceOf(d: DatasetSettings | undefined): string {
  if (!d || d.kind === 'synthetic') return "the config's synthetic dataset";
  return d.kind === 'file' ? d.path : `the hub data set ${d.repo_id} (${d.config}/${d.split})`;
}

/** DIR/data.json, or null when there is none; a file that is not a record is a DataProvenanceError. */
export function readDataRecord(dir: string): DataRecord | null {
  const file = join(dir, DATA_RECORD_FILE);
  if (!existsSync(file)) return null;
  let rec: DataRecord;
  try {
    rec = JSON.parse(readFileSync(file, 'utf8')) as DataRecord;
  } catch (e) {
    throw new DataProvenanceError(`${resolve(file)} is not JSON (${(e as Error).message})`);
  }
  // An older version stored the "data" entry itself, paths relative to the working directory then.
  const legacy = rec as unknown as Record<string, unknown>;
  if (typeof rec === 'object' && rec !== null && typeof legacy.path === 'string' && rec.rowsSha256 === undefined) {
    return { legacy, rows: -1, rowsSha256: 'unknown (recorded by an older version)' };
  }
  if (typeof rec !== 'object' || rec === null || typeof rec.rowsSha256 !== 'string') throw new DataProvenanceError(`${resolve(file)} does not record the run's data (no rowsSha256)`);
  return rec;
}

export function writeDataRecord(dir: string, rec: DataRecord): void {
  writeFileSync(join(dir, DATA_RECORD_FILE), JSON.stringify(rec, null, 1));
}

/** How `now` differs from the data `before` recorded, or null when it is the same data. */
export function dataDifference(dir: string, before: DataRecord, now: DataRecord): string | null {
  const where = resolve(join(dir, DATA_RECORD_FILE));
  const [was, is] = [before.legacy ? String(before.legacy.path) : sourceOf(before.dataset), sourceOf(now.dataset)];
  if (was !== is) return `the run trained on ${was} (${where}), not ${is}`;
  if (before.fileBytes !== undefined && before.fileBytes !== now.fileBytes) {
    return `${is} is ${now.fileBytes} bytes now, ${before.fileBytes} when the run started (${where}): the file changed`;
  }
  if (before.rows !== now.rows || before.rowsSha256 !== now.rowsSha256) {
    return `the rows differ from those the run trained on (${now.rows} rows with SHA-256 ${now.rowsSha256.slice(0, 12)}…, recorded ${before.rows} with ${before.rowsSha256.slice(0, 12)}… in ${where})`;
  }
  return null;
}
