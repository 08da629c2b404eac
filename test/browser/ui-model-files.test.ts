// Picked model files over a reload, in Chromium on SwiftShader: the tiny fixture folder picked in
// the Model panel (file input) loads and reaches the weight cache; after a reload it loads again
// by itself, from the cache, with nothing picked. When the cache lost it (the OPFS folder removed
// here, as an eviction would), the reload says so and asks for the files again: no model is
// loaded in its place. Picking them again loads them.
import { readdirSync } from 'node:fs';
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { loadModelFiles, openApp, openPanel, panel } from '../helpers/appPanels';
import { appWithTinyModel, screenshot } from '../helpers/browser';

const MODEL_DIR = 'test-results/ui-model-files-model';
const LONG = 240_000;

const text = async (page: Page, testId: string) => ((await panel(page, 'model').getByTestId(testId).textContent()) ?? '').trim();

/** The Model panel's stored workspace part, as IndexedDB holds it (what a reload reads). */
const storedModel = (page: Page) =>
  page.evaluate(`new Promise((resolve, reject) => {
    const open = indexedDB.open('vlrl');
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const get = open.result.transaction('meta').objectStore('meta').get('workspace/model');
      get.onsuccess = () => {
        const v = get.result;
        open.result.close();
        resolve(v ? { choice: v.choice, loaded: v.loaded, fingerprint: v.pick?.fingerprint ?? null, kept: (v.pick?.files ?? []).map((f) => f instanceof File ? f.name : '?').sort(), weights: (v.pick?.weights ?? []).map((w) => w.name) } : null);
      };
    };
  })`) as Promise<{ choice: string; loaded: boolean; fingerprint: string | null; kept: string[]; weights: string[] } | null>;

/** Waits until the Model panel says Loaded or shows an error; returns which. */
async function loadOutcome(page: Page): Promise<'loaded' | 'error'> {
  await page.waitForFunction(
    `document.querySelector('[data-testid="model-loaded"]')?.textContent.startsWith('Loaded:') || document.querySelector('[data-testid="model-error"]')?.hidden === false`,
    undefined,
    { timeout: LONG, polling: 100 },
  );
  return (await panel(page, 'model').getByTestId('model-error').isVisible()) ? 'error' : 'loaded';
}

describe('model panel: picked files reload themselves from the weight cache (SwiftShader, OPFS)', () => {
  const app = appWithTinyModel(MODEL_DIR);

  it('reloads a picked folder from the cache without picking; after an eviction asks for the files again', async () => {
    const page = await app.page();
    await openApp(page, `${app.url}#model`);
    await loadModelFiles(page, MODEL_DIR);
    expect(await text(page, 'model-cache')).toMatch(/stored in this browser for the next load/);
    // The workspace keeps the small files and the weights' fingerprint, never the shards.
    await expect.poll(async () => (await storedModel(page))?.fingerprint ?? null, { timeout: 10_000 }).toMatch(/^content-[0-9a-f]{32}$/);
    const stored = (await storedModel(page))!;
    expect(stored).toMatchObject({ choice: 'files', loaded: true });
    expect(stored.weights.sort()).toEqual(readdirSync(MODEL_DIR).filter((f) => f.endsWith('.safetensors')).sort());
    expect(stored.weights.length).toBeGreaterThan(0);
    expect(stored.kept).toContain('config.json');
    expect(stored.kept).toContain('tokenizer.json');
    expect(stored.kept.some((f) => f.endsWith('.safetensors'))).toBe(false);

    // Reload: the model comes back by itself, from the weight cache, with nothing picked.
    await page.reload();
    await page.waitForLoadState('networkidle');
    await panel(page, 'model').locator('section').waitFor();
    expect(await loadOutcome(page)).toBe('loaded');
    expect(await text(page, 'model-loaded')).toMatch(/^Loaded: the picked files \(/);
    expect(await text(page, 'model-cache')).toMatch(/loaded from this browser's weight cache/);
    expect(await text(page, 'model-progress')).toMatch(/^Loaded in /);
    expect(await panel(page, 'model').getByLabel('Model files').evaluate((el) => (el as HTMLInputElement).files?.length ?? 0)).toBe(0);
    expect(await panel(page, 'model').getByLabel('Model source').inputValue()).toBe('files');
    const train = await openPanel(page, 'train');
    expect(await train.getByTestId('train-model').textContent()).toBe('Model: the picked files.');
    await screenshot(page, 'ui-model-files-reloaded');

    // The cache loses the weights (as an eviction for another model would): the reload says so and loads nothing else.
    await page.evaluate(`navigator.storage.getDirectory().then((root) => root.removeEntry('weight-cache', { recursive: true }))`);
    await page.reload();
    await page.waitForLoadState('networkidle');
    await panel(page, 'train').locator('section').waitFor();
    await openPanel(page, 'model');
    expect(await loadOutcome(page)).toBe('error');
    expect(await text(page, 'model-error')).toMatch(/weight cache no longer holds the weights of the picked files .*pick the model's files again/);
    expect(await text(page, 'model-loaded')).toBe('No model loaded. Pick the model folder again to load it.');
    expect(await (await openPanel(page, 'train')).getByTestId('train-model').textContent()).toMatch(/^Model: none loaded/);
    await expect.poll(async () => (await storedModel(page))?.loaded, { timeout: 10_000 }).toBe(false);
    await screenshot(page, 'ui-model-files-evicted');

    // Picked again, the files load (read and quantized, stored again).
    await loadModelFiles(page, MODEL_DIR);
    expect(await text(page, 'model-cache')).toMatch(/stored in this browser for the next load/);
  }, 600_000);
});
