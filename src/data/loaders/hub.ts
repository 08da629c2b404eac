// Data sets on the Hugging Face hub, read as parquet. The hub's /api/datasets/{repo}/parquet
// lists the parquet export of every config and split as {config: {split: [url, ...]}}; with
// /{config}/{split} appended it returns just that split's [url, ...]. Each url
// (…/parquet/{config}/{split}/{n}.parquet) redirects to the file on the refs/convert/parquet
// branch, which serves HTTP Range requests. Files of the repo itself are at
// {endpoint}/datasets/{repo}/resolve/{revision}/{path}. The listing knows only the current export;
// another revision (a commit of refs/convert/parquet pins the rows) is listed through
// /api/datasets/{repo}/tree/{revision}/{config}/{split}, the export's own layout.
import { HF_ENDPOINT } from '../../model/hub';

export interface HubDatasetOptions {
  endpoint?: string;
  /** For gated or private repos. */
  token?: string;
  fetch?: typeof fetch;
}

export interface HubParquetFile {
  config: string;
  split: string;
  url: string;
}

export function hubHeaders(options: HubDatasetOptions): Record<string, string> {
  return options.token ? { Authorization: `Bearer ${options.token}` } : {};
}

function base(options: HubDatasetOptions): string {
  return (options.endpoint ?? HF_ENDPOINT).replace(/\/+$/, '');
}

const encodePath = (path: string) => path.split('/').map(encodeURIComponent).join('/');

export function hubDatasetFileUrl(repo: string, path: string, revision = 'main', options: HubDatasetOptions = {}): string {
  return `${base(options)}/datasets/${repo}/resolve/${encodeURIComponent(revision)}/${encodePath(path)}`;
}

/** The revision that reads the Hub's current parquet export through its listing. */
export const HUB_DEFAULT_REVISION = 'main';

/**
 * The parquet files of one config and split at `revision`: 'main' lists the current export; any
 * other revision lists the tree `{config}/{split}/` of that branch, tag or commit, shard by name.
 */
export async function listHubParquetAt(repo: string, where: { config: string; split: string; revision: string }, options: HubDatasetOptions = {}): Promise<HubParquetFile[]> {
  if (where.revision === HUB_DEFAULT_REVISION) return listHubParquet(repo, where, options);
  const folder = `${where.config}/${where.split}`;
  const url = `${base(options)}/api/datasets/${repo}/tree/${encodeURIComponent(where.revision)}/${encodePath(folder)}`;
  const res = await (options.fetch ?? fetch)(url, { headers: hubHeaders(options) });
  if (res.status === 401 || res.status === 403) throw new Error(`${repo}@${where.revision}: access denied (HTTP ${res.status}); the data set is gated or private: pass a token`);
  if (res.status === 404) throw new Error(`${repo}@${where.revision}: no such data set, revision, or folder ${folder} (HTTP 404)`);
  if (!res.ok) throw new Error(`${repo}@${where.revision}: listing ${folder} failed (HTTP ${res.status})`);
  const entries = (await res.json()) as { type?: string; path?: string }[];
  if (!Array.isArray(entries)) throw new Error(`${repo}@${where.revision}: unexpected answer from ${url}`);
  return entries
    .filter((e) => e.type === 'file' && typeof e.path === 'string' && e.path.endsWith('.parquet'))
    .map((e) => e.path!)
    .sort()
    .map((path) => ({ config: where.config, split: where.split, url: hubDatasetFileUrl(repo, path, where.revision, options) }));
}

/** The parquet files of a data set, optionally of one config and split, in shard order. */
export async function listHubParquet(repo: string, where: { config?: string; split?: string } = {}, options: HubDatasetOptions = {}): Promise<HubParquetFile[]> {
  if (where.split !== undefined && where.config === undefined) throw new Error('listHubParquet: a split needs its config');
  const suffix = where.config === undefined ? '' : `/${encodeURIComponent(where.config)}${where.split === undefined ? '' : `/${encodeURIComponent(where.split)}`}`;
  const url = `${base(options)}/api/datasets/${repo}/parquet${suffix}`;
  const res = await (options.fetch ?? fetch)(url, { headers: hubHeaders(options) });
  if (res.status === 401 || res.status === 403) throw new Error(`${repo}: access denied (HTTP ${res.status}); the data set is gated or private: pass a token`);
  if (res.status === 404) throw new Error(`${repo}: no such data set, config or split, or it has no parquet export (HTTP 404)`);
  if (!res.ok) throw new Error(`${repo}: listing parquet files failed (HTTP ${res.status})`);
  const body: unknown = await res.json();
  if (Array.isArray(body)) {
    if (where.config === undefined || where.split === undefined) throw new Error(`${repo}: unexpected list from ${url}`);
    return body.map((u) => ({ config: where.config!, split: where.split!, url: String(u) }));
  }
  const files: HubParquetFile[] = [];
  const configs = where.config === undefined ? (body as Record<string, Record<string, string[]>>) : { [where.config]: body as Record<string, string[]> };
  for (const [config, splits] of Object.entries(configs)) {
    for (const [split, urls] of Object.entries(splits)) for (const u of urls) files.push({ config, split, url: u });
  }
  return files;
}
