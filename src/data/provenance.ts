// What data a run trained on, as the app records it in the run (src/store/runs.ts) and the CLI in
// data.json (src/node/dataRecord.ts, same fields): the config's dataset, the file's size for a file
// dataset, and a SHA-256 over the rows (ids, texts, answers, image bytes; the same bytes as the
// CLI's rowsDigest), through Web Crypto so that the browser's worker computes it too.
import type { DatasetSettings } from '../rl/dataSource';
import type { DatasetRow } from './types';

export interface DataProvenance {
  /** The config's dataset (a file dataset names the picked file in the app, an absolute path in the CLI). */
  dataset: DatasetSettings;
  /** Size in bytes of a file dataset's file when the run started. */
  fileBytes?: number;
  rows: number;
  /** SHA-256 (hex) of the rows, see rowsSha256. */
  rowsSha256: string;
}

const encoder = new TextEncoder();

/** Every row's fields in order, each as `${byteLength}:` then its bytes (what rowsSha256 hashes). */
function rowFields(r: DatasetRow): Uint8Array[] {
  const fields: Uint8Array[] = [r.id, r.question, r.answer, r.system_prompt ?? '', String(r.images.length + (r.encoded?.length ?? 0))].map((s) => encoder.encode(s));
  for (const im of r.encoded ?? []) fields.push(im.bytes);
  for (const im of r.images) fields.push(encoder.encode(`${im.width}x${im.height}`), new Uint8Array(im.data.buffer, im.data.byteOffset, im.data.byteLength));
  return fields;
}

/** SHA-256 over every row's id, texts, answer and images (encoded bytes, or size and pixels), each field length-prefixed. */
export async function rowsSha256(rows: readonly DatasetRow[]): Promise<string> {
  const parts: Uint8Array[] = [];
  for (const r of rows) for (const f of rowFields(r)) parts.push(encoder.encode(`${f.byteLength}:`), f);
  const all = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.byteLength;
  }
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', all));
  return [...digest].map((b) => b.toString(16).padStart(2, '0')).join('');
}

export async function dataProvenance(rows: readonly DatasetRow[], dataset: DatasetSettings, fileBytes?: number): Promise<DataProvenance> {
  return { dataset, ...(dataset.kind === 'file' && fileBytes !== undefined ? { fileBytes } : {}), rows: rows.length, rowsSha256: await rowsSha256(rows) };
}

/** Where a dataset's rows come from, in words. */
export function datasetSourceText(d: DatasetSettings): string {
  switch (d.kind) {
    case 'synthetic':
      return `the synthetic tasks ${d.tasks.join(', ')} (${d.count} rows, seed ${d.seed}, ${d.size} px)`;
    case 'file':
      return d.path;
    case 'hub':
      return `the hub data set ${d.repo_id} (${d.config}/${d.split}${(d.revision ?? 'main') === 'main' ? '' : `@${d.revision}`})`;
  }
}

/** How the data given now differs from the data `before` records, in words, or null when it is the same data. */
export function provenanceDifference(before: DataProvenance, now: DataProvenance): string | null {
  const [was, is] = [datasetSourceText(before.dataset), datasetSourceText(now.dataset)];
  if (was !== is) return `it trained on ${was}, not ${is}`;
  if (before.fileBytes !== undefined && now.fileBytes !== undefined && before.fileBytes !== now.fileBytes) {
    return `${is} is ${now.fileBytes} bytes now, ${before.fileBytes} when the run started: the file changed`;
  }
  if (before.rows !== now.rows || before.rowsSha256 !== now.rowsSha256) {
    return `the rows differ from those it trained on (${now.rows} rows with SHA-256 ${now.rowsSha256.slice(0, 12)}… now, ${before.rows} with ${before.rowsSha256.slice(0, 12)}… recorded)`;
  }
  return null;
}
