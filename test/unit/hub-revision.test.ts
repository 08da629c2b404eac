// The hub data set's `revision` (TrainConfig.dataset.revision): validated with a named error,
// 'main' by default (the Hub's current parquet export through its listing), and any other
// revision read from that revision's `{config}/{split}/` tree, in the URLs the loader requests.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadHubDataset } from '../../src/data/loaders';
import { QWEN3_VL_IMAGE_LIMITS } from '../../src/data/image';
import { sharpDecoder } from '../../src/data/node/sharpDecoder';
import { resolveConfig } from '../../src/rl/config';

const fixture = fileURLToPath(new URL('../fixtures/data/geo3k.parquet', import.meta.url));

describe('dataset.revision', () => {
  it('defaults to main and is refused, by its path, when it is not a ref or commit', () => {
    const hub = resolveConfig({ dataset: { kind: 'hub', repo_id: 'org/geo' } }).config.dataset;
    expect(hub.kind === 'hub' && hub.revision).toBe('main');
    const pinned = resolveConfig({ dataset: { kind: 'hub', repo_id: 'org/geo', revision: 'refs/convert/parquet' } }).config.dataset;
    expect(pinned.kind === 'hub' && pinned.revision).toBe('refs/convert/parquet');
    for (const bad of ['', 'two words', '../main', '-x', 7, null]) {
      expect(() => resolveConfig({ dataset: { kind: 'hub', repo_id: 'org/geo', revision: bad as string } }), JSON.stringify(bad)).toThrow(/dataset\.revision must be/);
    }
    expect(() => resolveConfig({ dataset: { kind: 'hub', repo_id: 'org/geo', revison: 'main' } as never })).toThrow(/dataset\.revison: unknown field; did you mean revision\?/);
  });
});

describe('loadHubDataset at a revision', () => {
  /** A fake hub: the export listing (main only), a tree listing and resolve URLs at commit abc123, all with Range. */
  async function fakeHub(requests: string[]): Promise<typeof fetch> {
    const bytes = new Uint8Array(await readFile(fixture));
    const served = new Set(['https://hub.test/api/datasets/org/geo/parquet/default/train/0.parquet', 'https://hub.test/datasets/org/geo/resolve/abc123/default/train/0000.parquet']);
    return (async (input: RequestInfo | URL, init?: RequestInit) => {
      const url = String(input);
      const headers = new Headers(init?.headers);
      requests.push(`${init?.method ?? 'GET'} ${url}`);
      if (url === 'https://hub.test/api/datasets/org/geo/parquet/default/train') return Response.json(['https://hub.test/api/datasets/org/geo/parquet/default/train/0.parquet']);
      if (url === 'https://hub.test/api/datasets/org/geo/tree/abc123/default/train') {
        return Response.json([
          { type: 'file', path: 'default/train/0000.parquet', size: bytes.length },
          { type: 'file', path: 'default/train/README.md', size: 3 },
        ]);
      }
      if (!served.has(url)) return new Response('not found', { status: 404 });
      if (init?.method === 'HEAD') return new Response(null, { headers: { 'Content-Length': String(bytes.length) } });
      const m = /bytes=(\d+)-(\d*)/.exec(headers.get('Range') ?? '');
      if (!m) return new Response(bytes);
      const end = m[2] === '' ? bytes.length : Number(m[2]) + 1;
      return new Response(bytes.slice(Number(m[1]), end), { status: 206 });
    }) as typeof fetch;
  }
  const options = (fetchHub: typeof fetch) => ({ endpoint: 'https://hub.test', fetch: fetchHub, decoder: sharpDecoder, limits: QWEN3_VL_IMAGE_LIMITS, lazy: true });

  it('reads main through the export listing, and another revision through its tree and resolve URLs', async () => {
    const main: string[] = [];
    const a = await loadHubDataset('org/geo', { config: 'default', split: 'train' }, options(await fakeHub(main)));
    expect(main[0]).toBe('GET https://hub.test/api/datasets/org/geo/parquet/default/train');
    const pinned: string[] = [];
    const b = await loadHubDataset('org/geo', { config: 'default', split: 'train', revision: 'abc123' }, options(await fakeHub(pinned)));
    expect(pinned[0]).toBe('GET https://hub.test/api/datasets/org/geo/tree/abc123/default/train');
    expect(pinned.slice(1).every((r) => r.endsWith('https://hub.test/datasets/org/geo/resolve/abc123/default/train/0000.parquet'))).toBe(true);
    expect(b.rows.map((r) => r.answer)).toEqual(a.rows.map((r) => r.answer));
    expect(b.rows).toHaveLength(4);
    await expect(loadHubDataset('org/geo', { config: 'default', split: 'train', revision: 'nope' }, options(await fakeHub([])))).rejects.toThrow(/org\/geo@nope: no such data set, revision, or folder default\/train \(HTTP 404\)/);
  });
});
