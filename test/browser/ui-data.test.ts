import { readFileSync } from 'node:fs';
import { crc32, deflateSync } from 'node:zlib';
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { screenshot, servedApp } from '../helpers/browser';

// The Data panel: a synthetic set generated, previewed with its images on canvases, split and
// re-split; the data set lands in the store the Train/Eval panels read; a local JSONL file with
// broken rows shows every broken row with its reason; images the processor would refuse are
// broken rows at load, and images stay encoded until the rows shown need them; the source fields
// are the run config's `dataset`, the hub source with its revision.

/** An RGB PNG of `width` x `height`, each pixel coloured by `rgb(x, y)`; `declared` overrides the header's size (no pixel data then). */
function png(width: number, height: number, rgb: (x: number, y: number) => number[], declared?: [number, number]): Buffer {
  const chunk = (tag: string, data: Buffer) => {
    const body = Buffer.concat([Buffer.from(tag, 'latin1'), data]);
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    body.copy(out, 4);
    out.writeUInt32BE(crc32(body), 8 + data.length);
    return out;
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(declared?.[0] ?? width, 0);
  ihdr.writeUInt32BE(declared?.[1] ?? height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  const raw: number[] = [];
  for (let y = 0; y < height; y++) {
    raw.push(0);
    for (let x = 0; x < width; x++) raw.push(...rgb(x, y));
  }
  const idat = declared ? [] : [chunk('IDAT', deflateSync(Buffer.from(raw)))];
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr), ...idat, chunk('IEND', Buffer.alloc(0))]);
}
const dataUrl = (b: Buffer) => `data:image/png;base64,${b.toString('base64')}`;
/** 64×32: the left half red, the right half blue (the processor's minimum side is 32). */
const RED_BLUE = dataUrl(png(64, 32, (x) => (x < 32 ? [255, 0, 0] : [0, 0, 255])));

describe('data panel in headless Chromium', () => {
  const app = servedApp();

  it('generates a synthetic set, previews rows with images, splits it', async () => {
    const page = await app.page();
    await page.goto(`${app.url}#data`);
    await page.getByLabel('Rows', { exact: true }).fill('12');
    await page.getByLabel('Seed', { exact: true }).fill('7');
    await page.getByLabel('Image size (px)').fill('112');
    await page.getByRole('button', { name: 'Generate' }).click();
    await page.getByTestId('data-summary').waitFor({ timeout: 60_000 });
    expect(await page.getByTestId('count-rows').textContent()).toBe('12');
    expect(await page.getByTestId('count-broken').textContent()).toBe('0');
    // 0.2 of 12 held out: round(2.4) = 2.
    expect(await page.getByTestId('count-split').textContent()).toBe('10 / 2');

    // The first page: 8 rows, one 112×112 canvas each, with drawn (non-white) pixels.
    const table = page.getByTestId('preview-table');
    expect(await table.locator('tbody tr').count()).toBe(8);
    expect(await page.getByTestId('preview-range').textContent()).toBe('rows 1–8 of 12');
    const canvases = (await page.evaluate(`[...document.querySelectorAll('[data-testid="preview-table"] canvas')].map((c) => {
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let ink = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200) ink++;
      return { w: c.width, h: c.height, ink, label: c.getAttribute('aria-label') };
    })`)) as { w: number; h: number; ink: number; label: string }[];
    expect(canvases).toHaveLength(8);
    for (const c of canvases) {
      expect([c.w, c.h]).toEqual([112, 112]);
      expect(c.ink).toBeGreaterThan(50);
      expect(c.label).toMatch(/^image 1 of row /);
    }
    await page.getByRole('button', { name: 'Next page of rows' }).click();
    expect(await page.getByTestId('preview-range').textContent()).toBe('rows 9–12 of 12');
    expect(await table.locator('tbody tr').count()).toBe(4);
    await screenshot(page, 'data-synthetic');

    // Re-split: half held out, then the held-out view lists exactly those rows.
    const heldOut = page.getByLabel('Held out', { exact: true });
    await heldOut.fill('0.5');
    await heldOut.press('Enter');
    await page.waitForFunction(`document.querySelector('[data-testid="count-split"]').textContent === '6 / 6'`);
    await page.getByLabel('Rows to preview').selectOption('heldOut');
    expect(await page.getByTestId('preview-range').textContent()).toBe('rows 1–6 of 6');
    const parts = await table.locator('tbody tr td:nth-child(2)').allTextContents();
    expect(parts).toEqual(Array(6).fill('held-out'));

    // The store holds the same split, for the Train and Eval panels (same module instance as the app's).
    const stored = (await page.evaluate(`import('/src/ui/datasetStore.ts').then((m) => {
      const d = m.datasetStore.current;
      return { train: d.split.train.length, heldOut: d.split.heldOut.length, ids: d.result.rows.map((r) => r.id) };
    })`)) as { train: number; heldOut: number; ids: string[] };
    expect(stored.train).toBe(6);
    expect(stored.heldOut).toBe(6);
    expect(new Set(stored.ids).size).toBe(12);

    // An impossible split is refused with a message and the old split kept.
    await heldOut.fill('20');
    await heldOut.press('Enter');
    await expect.poll(() => page.getByTestId('data-error').textContent()).toMatch(/cannot hold out 20 of 12/);
    expect(await page.getByTestId('count-split').textContent()).toBe('6 / 6');

    // The Train panel sees the training rows.
    await page.goto(`${app.url}#train`);
    expect(await page.getByTestId('train-data').textContent()).toMatch(/^Data: the 6 training rows of /);
  });

  it('loads a local JSONL file and lists its broken rows with reasons', async () => {
    const page = await app.page();
    await page.goto(`${app.url}#data`);
    await page.getByLabel('Local files').check();
    await page.getByRole('button', { name: 'Load file' }).click();
    await expect.poll(() => page.getByTestId('data-error').textContent()).toMatch(/pick a data file first/);

    const lines = [
      JSON.stringify({ id: 'a', question: 'How many pixels are blue?', answer: '1', image: RED_BLUE }),
      JSON.stringify({ id: 'b', question: 'What colour is the left pixel?', answer: 'red', image: RED_BLUE }),
      JSON.stringify({ id: 'c', question: 'No answer here', image: RED_BLUE }),
      '{not json',
      JSON.stringify({ id: 'e', question: 'Where is the picture?', answer: '2', image: 'pictures/missing.png' }),
    ];
    await page.getByLabel('Data file (parquet, JSON, JSONL)').setInputFiles({ name: 'rows.jsonl', mimeType: 'application/jsonl', buffer: Buffer.from(lines.join('\n')) });
    await page.getByLabel('Numeric answers only').check();
    await page.getByLabel('Held out', { exact: true }).fill('0');
    await page.getByRole('button', { name: 'Load file' }).click();
    await page.waitForFunction(`document.querySelector('[data-testid="data-summary"] dd')?.textContent === 'rows.jsonl'`, undefined, { timeout: 60_000 });
    expect(await page.getByTestId('data-error').isVisible()).toBe(false);
    expect(await page.getByTestId('count-rows').textContent()).toBe('1');
    expect(await page.getByTestId('count-filtered').textContent()).toBe('1 (non-numeric answer)');
    expect(await page.getByTestId('count-broken').textContent()).toBe('3 (missing answer: 1, invalid row: 1, unresolved image file: 1)');
    await page.getByTestId('broken-rows').locator('summary').click();
    const reasons = await page.getByTestId('broken-rows').locator('tbody tr td:nth-child(3)').allTextContents();
    expect(reasons).toEqual(['missing answer', 'invalid row', 'unresolved image file']);
    await page.locator('[data-testid="preview-table"] canvas').waitFor();
    const canvas = (await page.evaluate(`(() => {
      const c = document.querySelector('[data-testid="preview-table"] canvas');
      const g = c.getContext('2d');
      return [c.width, c.height, ...g.getImageData(0, 0, 1, 1).data, ...g.getImageData(63, 31, 1, 1).data];
    })()`)) as number[];
    expect(canvas).toEqual([64, 32, 255, 0, 0, 255, 0, 0, 255, 255]);
    await screenshot(page, 'data-broken-rows');
  });

  it('resolves image file names in a picked folder (MathVista JSON) and resizes the images', async () => {
    const page = await app.page();
    await page.goto(`${app.url}#data`);
    await page.getByLabel('Local files').check();
    await page.getByLabel('Data file (parquet, JSON, JSONL)').setInputFiles('test/fixtures/data/mathvista.json');
    await page.getByLabel('Image folder').setInputFiles('test/fixtures/data/images');
    await page.getByLabel('Resize images').check();
    await page.getByLabel('Resize to').fill('64x32');
    await page.getByLabel('Held out', { exact: true }).fill('1');
    await page.getByRole('button', { name: 'Load file' }).click();
    await page.waitForFunction(`document.querySelector('[data-testid="data-summary"] dd')?.textContent === 'mathvista.json'`, undefined, { timeout: 60_000 });
    expect(await page.getByTestId('count-rows').textContent()).toBe('2');
    expect(await page.getByTestId('count-broken').textContent()).toBe('1 (unresolved image file: 1)');
    expect(await page.getByTestId('count-split').textContent()).toBe('1 / 1');
    const ids = await page.getByTestId('preview-table').locator('tbody th').allTextContents();
    expect(ids).toEqual(['11', '12']);
    await page.waitForFunction(`document.querySelectorAll('[data-testid="preview-table"] canvas').length === 2`);
    const sizes = await page.evaluate(`[...document.querySelectorAll('[data-testid="preview-table"] canvas')].map((c) => [c.width, c.height])`);
    expect(sizes).toEqual([[64, 32], [64, 32]]);
    await screenshot(page, 'data-folder');
  });

  it('maps columns by prompt_key, answer_key and image_keys, and applies the system prompt', async () => {
    const page = await app.page();
    await page.goto(`${app.url}#data`);
    await page.getByLabel('Local files').check();
    const line = (q: string, a: string) => JSON.stringify({ q, a, pic: RED_BLUE, extra: 'kept' });
    const file = { name: 'custom.jsonl', mimeType: 'application/jsonl', buffer: Buffer.from([line('<image> How many?', '\\boxed{2}'), line('Which?', '1')].join('\n')) };
    await page.getByLabel('Data file (parquet, JSON, JSONL)').setInputFiles(file);
    await page.getByRole('button', { name: 'Load file' }).click();
    await expect.poll(() => page.getByTestId('data-error').textContent()).toMatch(/unknown layout \(columns q, a, pic, extra\)/);

    await page.getByLabel('prompt_key').fill('q');
    await page.getByLabel('answer_key').fill('a');
    await page.getByRole('button', { name: 'Load file' }).click();
    await expect.poll(() => page.getByTestId('data-error').textContent()).toMatch(/set all of prompt_key, answer_key and image_keys/);

    await page.getByLabel('image_keys').fill('pic');
    await page.getByLabel('System prompt').fill('Answer with a number.');
    await page.getByRole('button', { name: 'Load file' }).click();
    await page.waitForFunction(`document.querySelector('[data-testid="data-summary"] dd')?.textContent === 'custom.jsonl'`, undefined, { timeout: 60_000 });
    expect(await page.getByTestId('data-error').isVisible()).toBe(false);
    const rows = (await page.evaluate(`import('/src/ui/datasetStore.ts').then((m) =>
      m.datasetStore.current.result.rows.map((r) => [r.question, r.answer, r.encoded.length, r.system_prompt, r.meta.extra]))`)) as unknown[];
    expect(rows).toEqual([
      ['<image> How many?', '2', 1, 'Answer with a number.', 'kept'],
      ['Which?', '1', 1, 'Answer with a number.', 'kept'],
    ]);
  });

  it('refuses at load, as broken rows naming file and row, images the processor would refuse; decodes only the rows shown', async () => {
    const page = await app.page();
    await page.goto(`${app.url}#data`);
    // Every decode the page makes, counted (the panel's decoder is this module's object).
    await page.evaluate(`import('/src/data/decodeBrowser.ts').then((m) => {
      const decode = m.browserDecoder.decode;
      window.__decodes = 0;
      m.browserDecoder.decode = (...args) => (window.__decodes++, decode.apply(m.browserDecoder, args));
    })`);
    const good = Array.from({ length: 20 }, (_, i) => ({ id: `g${i}`, question: 'How many?', answer: String(i), image: RED_BLUE }));
    const bad = [
      { id: 'small', question: 'Tiny?', answer: '1', image: dataUrl(png(20, 40, () => [9, 9, 9])) },
      { id: 'thin', question: 'Thin?', answer: '2', image: dataUrl(png(32 * 201, 32, () => [9, 9, 9])) },
      { id: 'bomb', question: 'Huge?', answer: '3', image: dataUrl(png(1, 1, () => [0, 0, 0], [100_000, 100_000])) },
    ];
    const lines = [...good.slice(0, 10), ...bad, ...good.slice(10)].map((r) => JSON.stringify(r));
    await page.getByLabel('Local files').check();
    await page.getByLabel('Data file (parquet, JSON, JSONL)').setInputFiles({ name: 'limits.jsonl', mimeType: 'application/jsonl', buffer: Buffer.from(lines.join('\n')) });
    await page.getByRole('button', { name: 'Load file' }).click();
    await page.waitForFunction(`document.querySelector('[data-testid="data-summary"] dd')?.textContent === 'limits.jsonl'`, undefined, { timeout: 60_000 });
    expect(await page.getByTestId('count-rows').textContent()).toBe('20');
    expect(await page.getByTestId('count-broken').textContent()).toBe('3 (unusable image size: 2, image too large: 1)');
    await page.getByTestId('broken-rows').locator('summary').click();
    const broken = await page.getByTestId('broken-rows').locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
    expect(broken.map((b) => b.slice(0, 3))).toEqual([
      ['limits.jsonl row 10', 'small', 'unusable image size'],
      ['limits.jsonl row 11', 'thin', 'unusable image size'],
      ['limits.jsonl row 12', 'bomb', 'image too large'],
    ]);
    expect(broken[0][3]).toMatch(/image 20x40 is too small: each side must be at least 32 pixels/);
    expect(broken[1][3]).toMatch(/aspect ratio of 201\.0:1, over 200:1/);
    expect(broken[2][3]).toMatch(/image 100000x100000 declares 10000 M pixels.*refused undecoded \(a decompression bomb\)/);

    // The rows keep their images encoded; only the first page's 8 rows were decoded, to be shown.
    const kept = (await page.evaluate(`import('/src/ui/datasetStore.ts').then((m) => m.datasetStore.current.result.rows.map((r) => [r.images.length, r.encoded?.length]))`)) as number[][];
    expect(kept).toEqual(Array(20).fill([0, 1]));
    await page.waitForFunction(`document.querySelectorAll('[data-testid="preview-table"] canvas').length === 8`);
    expect(await page.evaluate('window.__decodes')).toBe(8);
    await page.getByRole('button', { name: 'Next page of rows' }).click();
    await page.waitForFunction(`document.querySelectorAll('[data-testid="preview-table"] canvas').length === 8 && window.__decodes === 16`);
  });

  it('reads a Hugging Face data set as parquet with Range requests, showing bytes received, and shows a missing repo as an error', async () => {
    const page = await app.page();
    const requests = await fakeHub(page);
    await page.goto(`${app.url}#data`);
    await page.getByLabel('Hugging Face data set').check();
    await page.getByLabel('Repo id').fill('org/geo');
    await page.getByRole('button', { name: 'Load from the Hub' }).click();
    await page.waitForFunction(`document.querySelector('[data-testid="data-summary"] dd')?.textContent === 'org/geo (default/train)'`, undefined, { timeout: 60_000 });
    // The fixture's geo3k rows: 4 usable (answers unboxed), 4 broken.
    expect(await page.getByTestId('count-rows').textContent()).toBe('4');
    expect(await page.getByTestId('count-broken').textContent()).toMatch(/^4 /);
    expect(await page.getByTestId('data-progress').textContent()).toMatch(/^done: 4 usable of 8 records; \d+(\.\d)? (B|KiB) received in [3-9] request\(s\)$/);
    expect(requests.some((r) => r.startsWith('GET') && /bytes=\d+-\d+/.test(r))).toBe(true);
    await screenshot(page, 'data-hub');

    await page.getByLabel('Repo id').fill('org/none');
    await page.getByRole('button', { name: 'Load from the Hub' }).click();
    await page.getByTestId('data-error').waitFor();
    await expect.poll(() => page.getByTestId('data-error').textContent()).toMatch(/org\/none: no such data set/);
    // The previous data set stays.
    expect(await page.getByTestId('count-rows').textContent()).toBe('4');
  });

  it('reads and writes the run config\'s dataset: the hub source with its revision, checked, kept over a reload', async () => {
    const page = await app.page();
    const requests = await fakeHub(page);
    await page.goto(`${app.url}#data`);
    await page.getByLabel('Hugging Face data set').check();
    await page.getByLabel('Repo id').fill('org/geo');
    const config = () => page.evaluate(`import('/src/ui/datasetConfig.ts').then((m) => m.datasetConfig.current)`) as Promise<{ dataset: Record<string, unknown> | null; error: string | null }>;
    expect((await config()).dataset).toEqual({ kind: 'hub', repo_id: 'org/geo', config: 'default', split: 'train', revision: 'main', mapping: null, limit: 200, numeric_only: false });

    await page.getByLabel('Revision').fill('two words');
    expect((await config()).error).toMatch(/dataset\.revision must be a branch, tag or commit of the data set \(e\.g\. "main"\); got "two words"/);
    await page.getByRole('button', { name: 'Load from the Hub' }).click();
    await expect.poll(() => page.getByTestId('data-error').textContent()).toMatch(/dataset\.revision must be/);

    // Another revision is read from its tree (the fake hub has none: a named 404).
    await page.getByLabel('Revision').fill('abc123');
    await page.getByRole('button', { name: 'Load from the Hub' }).click();
    await expect.poll(() => page.getByTestId('data-error').textContent()).toMatch(/org\/geo@abc123: no such data set, revision, or folder default\/train/);
    expect(requests.some((r) => r.startsWith('GET https://huggingface.co/api/datasets/org/geo/tree/abc123/default/train'))).toBe(true);

    // The fields come back from the stored config after a reload.
    await page.getByLabel('Read at most (rows)').fill('');
    await page.getByLabel('prompt_key').fill('problem');
    await page.getByLabel('answer_key').fill('answer');
    await page.getByLabel('image_keys').fill('images');
    const want = { kind: 'hub', repo_id: 'org/geo', config: 'default', split: 'train', revision: 'abc123', mapping: { prompt_key: 'problem', answer_key: 'answer', image_keys: ['images'] }, limit: null, numeric_only: false };
    expect((await config()).dataset).toEqual(want);
    await page.evaluate(`import('/src/ui/workspace.ts').then((m) => m.flushWorkspace())`);
    await page.reload();
    await page.getByLabel('Revision').waitFor();
    expect(await page.getByLabel('Hugging Face data set').isChecked()).toBe(true);
    expect(await page.getByLabel('Revision').inputValue()).toBe('abc123');
    expect(await page.getByLabel('image_keys').inputValue()).toBe('images');
    expect((await config()).dataset).toEqual(want);
  });
});

/** Answers the Hub's parquet listing and serves the geo3k fixture with HEAD and Range, as the Hub does. */
async function fakeHub(page: Page): Promise<string[]> {
  const bytes = readFileSync('test/fixtures/data/geo3k.parquet');
  const parquetUrl = 'https://huggingface.co/api/datasets/org/geo/parquet/default/train/0.parquet';
  const cors = { 'Access-Control-Allow-Origin': '*', 'Access-Control-Allow-Headers': '*', 'Access-Control-Expose-Headers': 'Content-Length, Content-Range' };
  const requests: string[] = [];
  await page.route('https://huggingface.co/**', async (route) => {
    const req = route.request();
    const url = req.url();
    const range = (await req.allHeaders())['range'] ?? '';
    requests.push(`${req.method()} ${url} ${range}`);
    if (req.method() === 'OPTIONS') return route.fulfill({ status: 204, headers: cors });
    if (url === 'https://huggingface.co/api/datasets/org/geo/parquet/default/train') return route.fulfill({ json: [parquetUrl], headers: cors });
    if (url !== parquetUrl) return route.fulfill({ status: 404, body: 'not found', headers: cors });
    if (req.method() === 'HEAD') return route.fulfill({ status: 200, headers: { ...cors, 'Content-Length': String(bytes.length) } });
    const m = /bytes=(\d+)-(\d*)/.exec(range);
    if (!m) return route.fulfill({ status: 200, body: bytes, headers: cors });
    const end = m[2] === '' ? bytes.length : Number(m[2]) + 1;
    return route.fulfill({ status: 206, body: bytes.subarray(Number(m[1]), end), headers: { ...cors, 'Content-Range': `bytes ${m[1]}-${end - 1}/${bytes.length}` } });
  });
  return requests;
}
