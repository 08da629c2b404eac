// Data loaders on the committed fixtures (test/fixtures/data, made by make_fixtures.py with
// pyarrow): parquet in the geo3k and MathVista layouts, MathVista's JSON with an image folder,
// JSONL with every image-cell form, the hub listing and Range reads, broken rows by reason.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { loadFile, loadHubDataset, loadJsonText, loadParquet } from '../../src/data/loaders';
import { listHubParquet, hubDatasetFileUrl } from '../../src/data/loaders/hub';
import { detectLayout, GEO3K_MAPPING } from '../../src/data/loaders/mapping';
import { brokenCounts } from '../../src/data/loaders/rows';
import { folderFromDirectory, parquetFromPath } from '../../src/data/node/files';
import { QWEN3_VL_IMAGE_LIMITS } from '../../src/data/image';
import { sharpDecoder } from '../../src/data/node/sharpDecoder';
import type { RgbaImage } from '../../src/data/types';

const dir = fileURLToPath(new URL('../fixtures/data/', import.meta.url));
const decoder = sharpDecoder;
// The fixtures' images are all within the processor's limits; these tests resize some to a few
// pixels, so the minimum side is lifted (test/unit/data-reliability.test.ts covers the limits).
const limits = { ...QWEN3_VL_IMAGE_LIMITS, minSide: 1 };

/** Fixture image k: solid (k*40 mod 256, (255-k*40) mod 256, 100), size (40+k)×(32+k). */
function expectFixtureImage(img: RgbaImage, k: number) {
  expect([img.width, img.height]).toEqual([40 + k, 32 + k]);
  const rgb = [(k * 40) % 256, (((255 - k * 40) % 256) + 256) % 256, 100, 255];
  for (let p = 0; p < img.width * img.height; p++) expect([...img.data.subarray(p * 4, p * 4 + 4)]).toEqual(rgb);
}

describe('parquet: geo3k layout', () => {
  it('reads rows, unboxes answers, keeps image order, counts broken rows by reason', async () => {
    const result = await loadParquet(await parquetFromPath(`${dir}geo3k.parquet`), { decoder, limits });
    expect(result.total).toBe(8);
    expect(result.rows.map((r) => [r.id, r.answer, r.images.length])).toEqual([
      ['row-0', '3', 1],
      ['row-1', '12.6', 1],
      ['row-2', '\\frac{7}{2}', 2],
      ['row-6', 'AB', 1],
    ]);
    expect(result.rows[0].question).toBe('<image>Find x.');
    expect(result.rows[0].meta.answer_raw).toBe('\\boxed{3}');
    expectFixtureImage(result.rows[0].images[0], 0);
    expectFixtureImage(result.rows[2].images[0], 2);
    expectFixtureImage(result.rows[2].images[1], 3);
    expect(result.broken.map((b) => [b.index, b.reason])).toEqual([
      [3, 'undecodable image'],
      [4, 'missing answer'],
      [5, 'missing image'],
      [7, 'placeholder count mismatch'],
    ]);
    expect(result.filtered).toEqual([]);
  });

  it('numeric-only filter moves non-numeric answers to filtered, with the reason', async () => {
    const result = await loadParquet(await parquetFromPath(`${dir}geo3k.parquet`), { decoder, limits, numericOnly: true });
    expect(result.rows.map((r) => r.id)).toEqual(['row-0', 'row-1', 'row-2']);
    expect(result.filtered).toEqual([{ index: 6, id: 'row-6', reason: 'non-numeric answer' }]);
    expect(result.rows.length + result.broken.length + result.filtered.length).toBe(result.total);
  });

  it('reads from a File, honours a limit and an explicit mapping, resizes', async () => {
    const bytes = await readFile(`${dir}geo3k.parquet`);
    const file = new File([bytes], 'geo3k.parquet');
    const result = await loadFile(file, { decoder, limits, mapping: { ...GEO3K_MAPPING, system_prompt: 'Answer briefly.' }, limit: 2, resize: { width: 4, height: 3 } });
    expect(result.total).toBe(2);
    expect(result.rows[1].system_prompt).toBe('Answer briefly.');
    expect([result.rows[1].images[0].width, result.rows[1].images[0].height]).toEqual([4, 3]);
    // A solid image stays the same colour through area resampling.
    expect([...result.rows[1].images[0].data.subarray(0, 4)]).toEqual([40, 215, 100, 255]);
    await expect(loadFile(file, { decoder, limits, mapping: { ...GEO3K_MAPPING, prompt_key: 'nope' } })).rejects.toThrow(/nope/);
  });
});

describe('parquet: MathVista layout', () => {
  it('recognises the layout, uses pid and answer_type, decodes decoded_image', async () => {
    const result = await loadParquet(await parquetFromPath(`${dir}mathvista.parquet`), { decoder, limits });
    expect(result.rows.map((r) => [r.id, r.answer, r.answer_type])).toEqual([
      ['1', '7', 'integer'],
      ['2', '3', 'integer'],
      ['3', 'B', 'text'],
      ['5', '30', 'integer'],
    ]);
    expectFixtureImage(result.rows[3].images[0], 10);
    expect(result.rows[0].meta.image).toBe('images/1.png');
    expect(result.rows[0].meta.question_type).toBe('free_form');
    expect(result.broken).toMatchObject([{ index: 3, id: '4', reason: 'missing image' }]);
    const numeric = await loadParquet(await parquetFromPath(`${dir}mathvista.parquet`), { decoder, limits, numericOnly: true });
    expect(numeric.filtered.map((f) => f.id)).toEqual(['3']);
  });
});

describe('JSON and JSONL with an image folder', () => {
  it('MathVista JSON: file names resolved in the folder (by path or base name), unresolved ones counted', async () => {
    const folder = await folderFromDirectory(dir);
    expect(folder.has('images/11.png')).toBe(true);
    const text = await readFile(`${dir}mathvista.json`, 'utf8');
    const result = await loadJsonText(text, 'json', { decoder, limits, folder });
    expect(result.rows.map((r) => [r.id, r.answer])).toEqual([['11', '4'], ['12', '0.5']]);
    expectFixtureImage(result.rows[0].images[0], 11);
    expectFixtureImage(result.rows[1].images[0], 12);
    expect(result.broken).toMatchObject([{ id: '13', reason: 'unresolved image file' }]);
    const noFolder = await loadJsonText(text, 'json', { decoder, limits });
    expect(brokenCounts(noFolder)).toEqual({ 'unresolved image file': 3 });
  });

  it('JSONL: base64, data URL, file name and byte-list cells; a bad line and bad base64 are counted', async () => {
    const folder = await folderFromDirectory(dir);
    const text = await readFile(`${dir}rows.jsonl`, 'utf8');
    const mapping = { prompt_key: 'prompt', answer_key: 'gold', image_keys: ['img'], id_key: 'id' };
    const result = await loadJsonText(text, 'jsonl', { decoder, limits, folder, mapping });
    expect(result.rows.map((r) => [r.id, r.answer])).toEqual([['a', '2'], ['b', '8'], ['c', '7'], ['d', '1']]);
    expectFixtureImage(result.rows[0].images[0], 13);
    expectFixtureImage(result.rows[1].images[0], 13);
    expectFixtureImage(result.rows[2].images[0], 11);
    expectFixtureImage(result.rows[3].images[0], 12);
    expect(result.broken.map((b) => [b.index, b.reason])).toEqual([[4, 'invalid row'], [5, 'undecodable image']]);
    expect(result.total).toBe(6);
    await expect(loadJsonText(text, 'jsonl', { decoder, limits })).rejects.toThrow(/unknown layout/);
  });
});

describe('layout detection', () => {
  it('knows geo3k and MathVista by their columns and nothing else', () => {
    expect(detectLayout(['images', 'problem', 'answer'])?.layout).toBe('geo3k');
    expect(detectLayout(['pid', 'question', 'image', 'decoded_image', 'answer', 'answer_type'])?.mapping.image_keys).toEqual(['decoded_image']);
    expect(detectLayout(['id', 'question', 'image', 'answer'])?.mapping).toMatchObject({ image_keys: ['image'], id_key: 'id' });
    expect(detectLayout(['text', 'label'])).toBeNull();
  });
});

describe('Hugging Face hub', () => {
  const parquetUrl = 'https://hub.test/api/datasets/org/geo/parquet/default/train/0.parquet';

  /** A fake hub: the listing API and one parquet file that honours Range requests. */
  async function fakeHub(requests: string[]): Promise<typeof fetch> {
    const bytes = new Uint8Array(await readFile(`${dir}geo3k.parquet`));
    return (async (input: RequestInfo | URL, init?: RequestInit) => {
      const url = String(input);
      const headers = new Headers(init?.headers);
      requests.push(`${init?.method ?? 'GET'} ${url} ${headers.get('Range') ?? ''} ${headers.get('Authorization') ?? ''}`.trim());
      if (url === 'https://hub.test/api/datasets/org/geo/parquet') return Response.json({ default: { train: [parquetUrl], test: [] } });
      if (url === 'https://hub.test/api/datasets/org/geo/parquet/default/train') return Response.json([parquetUrl]);
      if (url !== parquetUrl) return new Response('not found', { status: 404 });
      if (init?.method === 'HEAD') return new Response(null, { headers: { 'Content-Length': String(bytes.length) } });
      const m = /bytes=(\d+)-(\d*)/.exec(headers.get('Range') ?? '');
      if (!m) return new Response(bytes);
      const end = m[2] === '' ? bytes.length : Number(m[2]) + 1;
      return new Response(bytes.slice(Number(m[1]), end), { status: 206 });
    }) as typeof fetch;
  }

  it('lists parquet files of all configs and splits, or of one split', async () => {
    const requests: string[] = [];
    const fetch = await fakeHub(requests);
    expect(await listHubParquet('org/geo', {}, { endpoint: 'https://hub.test', fetch })).toEqual([{ config: 'default', split: 'train', url: parquetUrl }]);
    expect(await listHubParquet('org/geo', { config: 'default', split: 'train' }, { endpoint: 'https://hub.test', fetch })).toHaveLength(1);
    await expect(listHubParquet('org/none', {}, { endpoint: 'https://hub.test', fetch })).rejects.toThrow(/404/);
    expect(hubDatasetFileUrl('hiyouga/geometry3k', 'data/train-00000-of-00001.parquet')).toBe(
      'https://huggingface.co/datasets/hiyouga/geometry3k/resolve/main/data/train-00000-of-00001.parquet',
    );
  });

  it('loads a split through Range requests, with the token on every request', async () => {
    const requests: string[] = [];
    const fetch = await fakeHub(requests);
    const result = await loadHubDataset('org/geo', { config: 'default', split: 'train' }, { endpoint: 'https://hub.test', fetch, token: 'hf_x', decoder, limits });
    expect(result.rows.map((r) => r.answer)).toEqual(['3', '12.6', '\\frac{7}{2}', 'AB']);
    expect(result.broken).toHaveLength(4);
    const fileRequests = requests.filter((r) => r.includes('0.parquet'));
    expect(fileRequests.some((r) => r.startsWith('HEAD'))).toBe(true);
    expect(fileRequests.filter((r) => r.startsWith('GET')).every((r) => /bytes=\d+-\d+/.test(r))).toBe(true);
    expect(requests.every((r) => r.endsWith('Bearer hf_x'))).toBe(true);
  });
});

describe('Node image decoder (sharp)', () => {
  it('decodes JPEG approximately and greyscale PNG to RGBA', async () => {
    const jpeg = await sharp({ create: { width: 16, height: 8, channels: 3, background: { r: 200, g: 30, b: 60 } } }).jpeg({ quality: 95 }).toBuffer();
    const img = await decoder.decode(new Uint8Array(jpeg));
    expect([img.width, img.height, img.data.length]).toEqual([16, 8, 16 * 8 * 4]);
    for (const [c, v] of [200, 30, 60, 255].entries()) expect(Math.abs(img.data[c] - v)).toBeLessThanOrEqual(4);
    const grey = await sharp({ create: { width: 3, height: 2, channels: 3, background: { r: 90, g: 90, b: 90 } } }).greyscale().png().toBuffer();
    const g = await decoder.decode(new Uint8Array(grey));
    expect([...g.data.subarray(0, 4)]).toEqual([90, 90, 90, 255]);
    await expect(decoder.decode(new TextEncoder().encode('not an image'))).rejects.toThrow();
  });
});
