// The Adapters panel from the keyboard, in Chromium on SwiftShader with the tiny fixture model
// tiny-a: its PEFT adapter (test/fixtures/tiny/tiny-a/lora, non-zero A and B) imported from picked
// files, applied to the model and evaluated through the Eval panel (seeded sampled completions
// differ from the base model's); the same adapter with every lora_B zeroed imports and applies, but its export
// is refused with the non-zero check's message.
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateCounting, loadModelFiles, openApp, openPanel, tabTo, typeInto, unlabelledControls } from '../helpers/appPanels';
import { screenshot, startApp, type AppSession } from '../helpers/browser';
import { tinyModelFolder } from '../helpers/tinyModelFolder';

const MODEL_DIR = 'test-results/ui-adapters-model';
const ZERO_DIR = 'test-results/ui-adapters-zero-b';
const LORA = 'test/fixtures/tiny/tiny-a/lora';

/** The fixture adapter with every lora_B tensor's bytes zeroed (as PEFT initialises B). */
function zeroBAdapter(dir: string): void {
  mkdirSync(dir, { recursive: true });
  const bytes = readFileSync(join(LORA, 'adapter_model.safetensors'));
  const n = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + n).toString('utf8')) as Record<string, { data_offsets: [number, number] }>;
  let zeroed = 0;
  for (const [name, t] of Object.entries(header)) {
    if (!name.includes('lora_B')) continue;
    bytes.fill(0, 8 + n + t.data_offsets[0], 8 + n + t.data_offsets[1]);
    zeroed++;
  }
  if (zeroed === 0) throw new Error('the fixture adapter has no lora_B tensors');
  writeFileSync(join(dir, 'adapter_model.safetensors'), bytes);
  copyFileSync(join(LORA, 'adapter_config.json'), join(dir, 'adapter_config.json'));
}

/** Picks the two adapter files (and types a name, if given), presses Import from the keyboard; returns the saved adapter's name. */
async function importAdapter(page: Page, dir: string, name?: string): Promise<string> {
  const p = await openPanel(page, 'adapters');
  await p.getByLabel('Adapter files to import').setInputFiles(['adapter_config.json', 'adapter_model.safetensors'].map((f) => resolve(dir, f)));
  if (name) await typeInto(page, p.getByLabel('Name', { exact: true }), name);
  const before = await p.getByTestId('adapters-message').textContent();
  await tabTo(page, p.getByRole('button', { name: 'Import', exact: true }));
  await page.keyboard.press('Enter');
  await page.waitForFunction((b) => document.querySelector('[data-testid="adapters-message"]')?.textContent !== b || !document.querySelector<HTMLElement>('[data-testid="adapters-error"]')!.hidden, before);
  expect(await p.getByTestId('adapters-error').isHidden()).toBe(true);
  const m = /^Imported (\S+): r \d+, (\d+) modules\.$/.exec((await p.getByTestId('adapters-message').textContent()) ?? '');
  expect(m).not.toBeNull();
  // A typed name is kept; without one (and without a folder) the adapter is named by the date.
  expect(m![1]).toMatch(name ? new RegExp(`^${name}$`) : /^imported-\S+$/);
  expect(Number(m![2])).toBe(3 * 7);
  await p.locator(`tr[data-adapter="${m![1]}"]`).waitFor();
  return m![1];
}

/** Presses Apply on a saved adapter's row from the keyboard; waits for the confirmation. */
async function applyAdapter(page: Page, name: string): Promise<void> {
  const p = await openPanel(page, 'adapters');
  await tabTo(page, p.getByRole('button', { name: `Apply ${name} to the model` }));
  await page.keyboard.press('Enter');
  await page.waitForFunction((n) => document.querySelector('[data-testid="adapters-message"]')?.textContent?.startsWith(`${n} is on the model now`) || !document.querySelector<HTMLElement>('[data-testid="adapters-error"]')!.hidden, name);
  expect(await p.getByTestId('adapters-error').isHidden()).toBe(true);
}

/** Sampled eval (seed 0) of the held-out rows, base or with the adapter (Evaluate chosen with arrow keys); the completions. */
async function runEval(page: Page, label: string, withAdapter: boolean): Promise<string[]> {
  const p = await openPanel(page, 'eval');
  const which = p.getByLabel('Evaluate', { exact: true });
  await which.focus();
  await page.keyboard.press(withAdapter ? 'End' : 'Home');
  expect(await which.inputValue()).toBe(withAdapter ? 'adapter' : 'base');
  // Sampled at temperature 1 with a fixed seed: the same draws, so different logits show as different
  // tokens (greedy completions of this tiny model are mostly ids past the byte range: empty text).
  const decoding = p.getByLabel('Decoding');
  await decoding.focus();
  await page.keyboard.press('End');
  expect(await decoding.inputValue()).toBe('sampled');
  await typeInto(page, p.getByLabel('Max new tokens'), '12');
  await typeInto(page, p.getByLabel('Label'), label);
  await typeInto(page, p.getByLabel('System prompt'), 'Answer.');
  await tabTo(page, p.getByRole('button', { name: 'Run eval' }));
  await page.keyboard.press('Enter');
  await page.waitForFunction((l) => document.querySelector('[data-testid="eval-summary"]')?.textContent?.startsWith(`${l}:`) || !document.querySelector<HTMLElement>('[data-testid="eval-error"]')!.hidden, label, { timeout: 240_000, polling: 250 });
  expect(await p.getByTestId('eval-error').isHidden()).toBe(true);
  return p.getByTestId('eval-records').locator('tbody tr td:last-child').allTextContents();
}

describe('adapters panel: import, apply, evaluate, refused export (tiny-a, SwiftShader)', () => {
  let app: AppSession;
  beforeAll(async () => {
    for (const d of [MODEL_DIR, ZERO_DIR]) rmSync(d, { recursive: true, force: true });
    tinyModelFolder(MODEL_DIR, 'tiny-a', true);
    zeroBAdapter(ZERO_DIR);
    app = await startApp();
  });
  afterAll(async () => {
    await app?.close();
  });

  it('imports the PEFT fixture adapter, applies and evaluates it; an all-zero-B adapter is refused on export', async () => {
    const started = Date.now();
    const page = await app.page();
    await openApp(page, `${app.url}#model`);
    await loadModelFiles(page, MODEL_DIR);
    await generateCounting(page, 4, 2);
    const base = await runEval(page, 'base', false);
    expect(base).toHaveLength(2);

    const trained = await importAdapter(page, LORA);
    await applyAdapter(page, trained);
    const adapted = await runEval(page, 'with-fixture-adapter', true);
    expect(adapted).toHaveLength(2);
    expect(adapted).not.toEqual(base);
    const saved = (await openPanel(page, 'eval')).getByTestId('eval-saved').locator('tbody tr').first();
    // The record names the adapter it evaluated.
    expect(await saved.locator('td').nth(1).textContent()).toBe(trained);
    await screenshot(page, 'ui-adapters-eval');

    // All-zero B: import and apply work (an adapter may be applied untrained), export is refused.
    const zero = await importAdapter(page, ZERO_DIR, 'zero-b');
    await applyAdapter(page, zero);
    const p = await openPanel(page, 'adapters');
    let downloads = 0;
    page.on('download', () => downloads++);
    await tabTo(page, p.getByRole('button', { name: 'Export the adapter on the model' }), true);
    await page.keyboard.press('Enter');
    await p.getByTestId('adapters-error').waitFor({ state: 'visible' });
    expect(await p.getByTestId('adapters-error').textContent()).toMatch(/^refusing to export: lora_B is all zeros in 21 module\(s\) \(.*\)\. An adapter with a zero A or B changes nothing \(was it trained\?\); train it first \(Train panel\), then export it\.$/);
    // The saved copy is refused the same way (the old message cleared first, so this one is new).
    await p.getByTestId('adapters-error').evaluate((el: HTMLElement) => ((el.textContent = ''), (el.hidden = true)));
    await tabTo(page, p.getByRole('button', { name: `Export ${zero}`, exact: true }));
    await page.keyboard.press('Enter');
    await p.getByTestId('adapters-error').waitFor({ state: 'visible' });
    expect(await p.getByTestId('adapters-error').textContent()).toMatch(/^refusing to export: lora_B is all zeros in 21 module/);
    await page.waitForTimeout(500);
    expect(downloads).toBe(0);
    await screenshot(page, 'ui-adapters-refused');
    // The controls that appeared with the model, the runs and the records are labelled too.
    expect(await unlabelledControls(page)).toEqual([]);
    console.log(`ui-adapters: ${((Date.now() - started) / 1000).toFixed(0)} s`);
  }, 600_000);
});
