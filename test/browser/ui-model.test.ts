// The Model panel's hub path in Chromium (SwiftShader), operated from the keyboard, against a fake
// huggingface.co (page.route; it also answers the engine worker's requests): the tiny fixture model
// loads with byte progress and, loaded again, comes from the weight cache with no safetensors
// request; a missing repo (404), a gated one (401), another architecture and a model too large for
// the adapter's buffer limits each get a plain message naming the repo, the last two before any
// weight is fetched. Without subgroup matrices the products run on the f32 units, the tensor-core
// settings shown disabled with the reason.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { appWithTinyModel, screenshot } from '../helpers/browser';
import { formatBytes } from '../../src/ui/format';

const MODEL_DIR = 'test-results/ui-model-model';
const LONG = 240_000;

/** Repos the fake hub knows: file name → bytes. org/gated answers 401 to everything; unknown repos 404. */
function fakeRepos(): Record<string, Record<string, Buffer>> {
  const tiny = Object.fromEntries(readdirSync(MODEL_DIR).map((f) => [f, readFileSync(join(MODEL_DIR, f))]));
  const config = JSON.parse(tiny['config.json'].toString('utf8')) as { architectures: string[]; model_type: string; text_config: Record<string, unknown>; vision_config: Record<string, unknown> };
  const llava = { ...config, architectures: ['LlavaForConditionalGeneration'], model_type: 'llava' };
  // A 4M-token vocabulary at hidden 8192: the embedding alone is gigabytes in one buffer.
  const huge = { ...config, text_config: { ...config.text_config, vocab_size: 4_000_000, hidden_size: 8192, intermediate_size: 22016 }, vision_config: { ...config.vision_config, out_hidden_size: 8192 } };
  return {
    'org/tiny': tiny,
    'org/llava': { 'config.json': Buffer.from(JSON.stringify(llava)) },
    'org/huge': { 'config.json': Buffer.from(JSON.stringify(huge)) },
  };
}

async function fakeHub(page: Page, requests: string[]): Promise<void> {
  const repos = fakeRepos();
  const cors = { 'Access-Control-Allow-Origin': '*', 'Access-Control-Allow-Headers': '*', 'Access-Control-Expose-Headers': 'Content-Length, Content-Range' };
  await page.route('https://huggingface.co/**', async (route) => {
    const req = route.request();
    if (req.method() === 'OPTIONS') return route.fulfill({ status: 204, headers: cors });
    const m = /^https:\/\/huggingface\.co\/([^/]+\/[^/]+)\/resolve\/main\/(.+)$/.exec(req.url());
    const range = (await req.allHeaders())['range'] ?? '';
    requests.push(`${req.method()} ${m ? `${m[1]} ${m[2]}` : req.url()} ${range}`);
    if (m?.[1] === 'org/gated') return route.fulfill({ status: 401, body: 'Access to this repo is restricted', headers: cors });
    const bytes = m && repos[m[1]]?.[decodeURIComponent(m[2])];
    if (!bytes) return route.fulfill({ status: 404, body: 'Entry not found', headers: cors });
    if (req.method() === 'HEAD') return route.fulfill({ status: 200, headers: { ...cors, 'Content-Length': String(bytes.length) } });
    const r = /bytes=(\d+)-(\d*)/.exec(range);
    if (!r) return route.fulfill({ status: 200, body: bytes, headers: cors });
    const end = r[2] ? Math.min(Number(r[2]) + 1, bytes.length) : bytes.length;
    return route.fulfill({ status: 206, body: bytes.subarray(Number(r[1]), end), headers: { ...cors, 'Content-Range': `bytes ${r[1]}-${end - 1}/${bytes.length}` } });
  });
}

describe('model panel: the hub path (fake huggingface.co, SwiftShader)', () => {
  const app = appWithTinyModel(MODEL_DIR);

  it('loads a hub repo with byte progress, then from the cache; 404, 401, another architecture and an oversized model are refused naming the repo', async () => {
    const started = Date.now();
    const page = await app.page();
    const requests: string[] = [];
    await fakeHub(page, requests);
    await page.goto(`${app.url}#model`);
    await page.waitForLoadState('networkidle');
    const p = page.locator('#panel-model');
    await p.locator('section').waitFor();
    const error = p.getByTestId('model-error');
    const repo = p.getByLabel('Repo id');

    // Keyboard: the source select (End: the folder, ArrowUp: another repo id), then Tab into the repo field.
    const source = p.getByLabel('Model source');
    await source.focus();
    await page.keyboard.press('End');
    await page.keyboard.press('ArrowUp');
    expect(await source.inputValue()).toBe('hub');
    await page.keyboard.press('Tab');
    await expect.poll(() => repo.evaluate((el) => el === document.activeElement)).toBe(true);

    /** Type a repo id and press Enter on a button reached by Tab; wait for the outcome. */
    const submit = async (id: string, button: 'Check size and memory' | 'Load model', outcome: string, timeout = 30_000) => {
      await repo.fill('');
      await repo.focus();
      await page.keyboard.type(id);
      const target = p.getByRole('button', { name: button });
      for (let i = 0; i < 8 && !(await target.evaluate((el) => el === document.activeElement)); i++) await page.keyboard.press('Tab');
      await page.keyboard.press('Enter');
      try {
        await page.waitForFunction(outcome, undefined, { timeout, polling: 100 });
      } catch (e) {
        await screenshot(page, 'ui-model-failed');
        throw new Error(`${id}, ${button}: ${(e as Error).message}; focus on ${await page.evaluate('document.activeElement?.outerHTML.slice(0, 120)')}; error: ${await error.textContent()}`);
      }
    };
    // Every text the progress line shows during a load (it ends as 'Loaded in ...').
    const recordProgress = () =>
      page.evaluate(`{
        const el = document.querySelector('[data-testid="model-progress"]');
        window.__progress = [];
        new MutationObserver(() => window.__progress.push(el.textContent)).observe(el, { childList: true, characterData: true, subtree: true });
      }`);
    const progressTexts = () => page.evaluate('window.__progress') as Promise<string[]>;
    const errorShown = `!document.querySelector('[data-testid="model-error"]').hidden`;

    // 404 and 401: one plain sentence each, naming the repo.
    await submit('org/missing', 'Check size and memory', errorShown);
    expect(await error.textContent()).toMatch(/^org\/missing: config\.json not found; check the repo id/);
    await submit('org/gated', 'Check size and memory', `/org\\/gated/.test(document.querySelector('[data-testid="model-error"]').textContent)`);
    expect(await error.textContent()).toMatch(/^org\/gated: config\.json needs an access token \(HTTP 401\): the repo is gated or private/);
    expect(await error.getAttribute('role')).toBe('alert');

    // Another architecture: refused, naming the repo and the architecture.
    await submit('org/llava', 'Load model', `/org\\/llava/.test(document.querySelector('[data-testid="model-error"]').textContent)`);
    expect(await error.textContent()).toMatch(/^org\/llava: unsupported model: config\.json describes .*LlavaForConditionalGeneration/);

    // Too large for the adapter's buffers: refused from config.json alone, on Load, before any download.
    await submit('org/huge', 'Load model', `!!document.querySelector('[data-testid="model-refused"]')`);
    expect(await p.getByTestId('model-refused').textContent()).toMatch(/cannot be loaded on this GPU: .*maxBufferSize/);
    expect(await p.getByTestId('model-download-size').textContent()).toBe('not checked (refused)');
    expect(await error.isHidden()).toBe(true);
    expect(await p.getByTestId('model-loaded').textContent()).toBe('No model loaded.');
    await screenshot(page, 'ui-model-refused');
    expect(requests.filter((r) => /org\/(huge|llava) /.test(r)).map((r) => r.split(' ')[2])).toEqual(['config.json', 'config.json']);

    // The tiny model: the plan first, then the load with byte progress.
    await submit('org/tiny', 'Check size and memory', `!!document.querySelector('[data-testid="model-fits"]') || ${errorShown}`);
    expect(await error.isHidden()).toBe(true);
    const total = JSON.parse(readFileSync(join(MODEL_DIR, 'model.safetensors.index.json'), 'utf8')).metadata.total_size as number;
    expect(await p.getByTestId('model-download-size').textContent()).toBe(formatBytes(total));
    expect(await p.getByTestId('model-training-bytes').textContent()).toMatch(/^about [\d.]+ [KMG]iB of GPU memory at its peak$/);
    // The f32 products (no subgroup matrices here): the KV cache and the kept states in f32.
    expect(await p.getByTestId('model-training-storage').textContent()).toBe("the KV cache in f32, the hidden states the backward reads in f32, the vision tower's products on the f32 units, and generation's and training's buffers both kept between the phases");
    // Giving the other phase's buffers back: the estimate drops to the larger phase's, and says so.
    const gib = (t: string | null) => {
      const [, v, unit] = /^about ([\d.]+) ([KMG])iB/.exec(t ?? '')!;
      return Number(v) * { K: 2 ** 10, M: 2 ** 20, G: 2 ** 30 }[unit as 'K' | 'M' | 'G'];
    };
    const kept = gib(await p.getByTestId('model-training-bytes').textContent());
    await p.getByLabel('Between generating and training').selectOption('release');
    expect(await p.getByTestId('model-training-storage').textContent()).toMatch(/each phase's buffers given back before the other's$/);
    expect(gib(await p.getByTestId('model-training-bytes').textContent())).toBeLessThan(kept);
    expect(await p.getByTestId('phase-buffers-note').textContent()).toMatch(/^Each phase gives the other’s buffers back/);
    await p.getByLabel('Between generating and training').selectOption('keep');
    await recordProgress();
    const loadedText = `document.querySelector('[data-testid="model-loaded"]').textContent.startsWith('Loaded:') || ${errorShown}`;
    await submit('org/tiny', 'Load model', loadedText, LONG);
    expect(await progressTexts()).toContainEqual(expect.stringMatching(/^Read and quantized \d+ KiB of \d+ KiB/));
    expect(await error.isHidden()).toBe(true);
    expect(await p.getByTestId('model-loaded').textContent()).toMatch(/^Loaded: org\/tiny@main \(3 layers, hidden 64, vocabulary 1024\)/);
    expect(await p.getByTestId('model-cache').textContent()).toMatch(/not cached before this load: downloaded and quantized; stored/);
    // SwiftShader offers no subgroup matrices: the products stay on the f32 units, the tensor-core
    // settings are listed but disabled, and the note says why.
    expect(await p.getByTestId('model-loaded').textContent()).toMatch(/Products: f32 units \(exact 4-bit products\)\.$/);
    const products = p.getByLabel('Matrix products (prefill, scoring, training)');
    expect(await products.inputValue()).toBe('f32');
    expect(await products.isEnabled()).toBe(true);
    expect(await products.locator('option:disabled').evaluateAll((o) => o.map((x) => (x as HTMLOptionElement).value))).toEqual(['int8', 'int8-1limb', 'int8-row', 'f16']);
    expect(await p.getByTestId('products-note').textContent()).toMatch(/Tensor cores: not offered by this browser on this GPU \(int8: no 'chromium-experimental-subgroup-matrix' feature.*; f16: /);
    // What the GPU offers and which product paths that allows, with the reasons (SwiftShader: f32 only).
    const caps = await p.getByTestId('gpu-capabilities').textContent();
    expect(caps).toMatch(/subgroup matrices: no /);
    expect(caps).toMatch(/f32 products: available/);
    expect(caps).toMatch(/int8 products: unavailable — /);
    expect(caps).toMatch(/f16 products: unavailable — /);
    expect(caps).toMatch(/default products: f32/);
    const safetensorsGets = () => requests.filter((r) => /^GET org\/tiny \S+\.safetensors bytes=/.test(r)).length;
    const coldGets = safetensorsGets();
    expect(coldGets).toBeGreaterThan(0);
    await screenshot(page, 'ui-model-loaded');

    // The same model again: from the weight cache, no tensor bytes fetched.
    await page.evaluate(`document.querySelector('[data-testid="model-loaded"]').textContent = ''`);
    await recordProgress();
    await submit('org/tiny', 'Load model', loadedText, LONG);
    expect(await progressTexts()).toContainEqual(expect.stringMatching(/^Read from the weight cache \S+ \S+ of \S+ \S+/));
    expect(await error.isHidden()).toBe(true);
    expect(await p.getByTestId('model-cache').textContent()).toBe("Cache: loaded from this browser's weight cache (no download, no quantization).");
    expect(safetensorsGets()).toBe(coldGets);
    await screenshot(page, 'ui-model-cached');
    console.log(`ui-model: ${((Date.now() - started) / 1000).toFixed(0)} s`);
  }, 600_000);
});
