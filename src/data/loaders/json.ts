// JSON and JSONL records. JSON may be an array of rows, {data|rows: [...]}, or an object keyed by
// id (MathVista's testmini.json: {"1": {...}, ...}), whose keys become the `id` field when the row
// has none.
import { InvalidRecord } from './rows';

export function parseJsonRecords(text: string): Record<string, unknown>[] {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Error(`is not JSON (${(e as Error).message})`);
  }
  if (Array.isArray(value)) return value as Record<string, unknown>[];
  if (typeof value === 'object' && value !== null) {
    const obj = value as Record<string, unknown>;
    for (const key of ['data', 'rows']) if (Array.isArray(obj[key])) return obj[key] as Record<string, unknown>[];
    const entries = Object.entries(obj);
    if (entries.length > 0 && entries.every(([, v]) => typeof v === 'object' && v !== null && !Array.isArray(v))) {
      return entries.map(([key, v]) => ({ id: key, ...(v as Record<string, unknown>) }));
    }
  }
  throw new Error('expected an array of rows, {"data": [...]}, or an object of rows keyed by id');
}

/**
 * One record per non-blank line; a line that is not a JSON object becomes an InvalidRecord, which
 * buildRows reports as broken in its place, so row indices match the non-blank lines.
 */
export function parseJsonl(text: string): (Record<string, unknown> | InvalidRecord)[] {
  const records: (Record<string, unknown> | InvalidRecord)[] = [];
  for (const line of text.split(/\r?\n/)) {
    if (line.trim() === '') continue;
    try {
      const value: unknown = JSON.parse(line);
      if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error('not a JSON object');
      records.push(value as Record<string, unknown>);
    } catch (e) {
      records.push(new InvalidRecord(`JSONL line ${records.length + 1}: ${(e as Error).message}`));
    }
  }
  return records;
}
