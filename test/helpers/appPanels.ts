// Steps the panel tests share: open a panel from the tab list, load the tiny model folder as picked
// files through the Model panel, generate a synthetic data set in the Data panel, and press a
// control from the keyboard (focus reached with Tab, then Enter or Space).
import { readdirSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Locator, Page } from 'playwright-core';

export const panel = (page: Page, id: string): Locator => page.locator(`#panel-${id}`);

/** Opens a panel by clicking nothing: focus the selected tab, then arrow keys to the wanted one. */
export async function openPanel(page: Page, id: string): Promise<Locator> {
  const selected = page.locator('[role="tab"][aria-selected="true"]');
  await selected.focus();
  // Tabs control their panels (aria-controls), whatever their title ('GPU' for 'gpu').
  for (let i = 0; i < 12 && (await selected.getAttribute('aria-controls')) !== `panel-${id}`; i++) await page.keyboard.press('ArrowRight');
  await panel(page, id).locator('section').waitFor();
  return panel(page, id);
}

/** Moves focus with Tab (Shift+Tab when `back`) until `target` has it; throws when it never does. */
export async function tabTo(page: Page, target: Locator, back = false, limit = 60): Promise<void> {
  for (let i = 0; i < limit; i++) {
    if (await target.evaluate((el) => el === document.activeElement)) return;
    await page.keyboard.press(back ? 'Shift+Tab' : 'Tab');
  }
  throw new Error(`Tab never reached ${target}`);
}

/** Opens every closed section of the Train panel's config form (Enter on its summary), so that all its fields can be typed into. */
export async function openConfigSections(page: Page, train: Locator): Promise<void> {
  const closed = await train.locator('details.form-section:not([open])').evaluateAll((els) => els.map((e) => e.getAttribute('data-section')!));
  for (const id of closed) {
    await train.locator(`details[data-section="${id}"] > summary`).focus();
    await page.keyboard.press('Enter');
  }
}

/** Replaces the value of a text or number field from the keyboard. */
export async function typeInto(page: Page, field: Locator, text: string): Promise<void> {
  await field.focus();
  await page.keyboard.press('ControlOrMeta+A');
  await page.keyboard.type(text);
}

/** Loads the model folder `dir` as picked files; resolves once the panel says Loaded (throws its error otherwise). */
export async function loadModelFiles(page: Page, dir: string, timeout = 240_000): Promise<void> {
  const p = await openPanel(page, 'model');
  await p.getByLabel('Model source').selectOption('files');
  await p.getByLabel('Model files').setInputFiles(readdirSync(dir).map((f) => resolve(dir, f)));
  await p.getByRole('button', { name: 'Load model' }).focus();
  await page.keyboard.press('Enter');
  await page.waitForFunction(`document.querySelector('[data-testid="model-loaded"]').textContent.startsWith('Loaded:') || !document.querySelector('[data-testid="model-error"]').hidden`, undefined, { timeout });
  if (await p.getByTestId('model-error').isVisible()) throw new Error(`model load failed: ${await p.getByTestId('model-error').textContent()}`);
}

/** A synthetic counting set of `rows` rows (112 px images), `heldOut` of them held out. */
export async function generateCounting(page: Page, rows: number, heldOut: number): Promise<void> {
  const p = await openPanel(page, 'data');
  for (const t of ['bar value', 'triangle angle']) await p.getByLabel(t, { exact: true }).uncheck();
  await typeInto(page, p.getByLabel('Rows', { exact: true }), String(rows));
  await typeInto(page, p.getByLabel('Image size (px)'), '112');
  await typeInto(page, p.getByLabel('Held out', { exact: true }), String(heldOut));
  await p.getByRole('button', { name: 'Generate' }).focus();
  await page.keyboard.press('Enter');
  await p.getByTestId('data-summary').waitFor({ timeout: 60_000 });
  const split = await p.getByTestId('count-split').textContent();
  if (split !== `${rows - heldOut} / ${heldOut}`) throw new Error(`data split is ${split}, expected ${rows - heldOut} / ${heldOut}`);
}

/** Goes to the app and waits for it to settle (Vite may reload the page once on its first visit). */
export async function openApp(page: Page, url: string): Promise<void> {
  await page.goto(url);
  await page.waitForLoadState('networkidle');
  await page.locator('[role="tab"]').first().waitFor();
}

/** Controls on the page without an accessible name (label, aria-label(ledby), or a button's text), as HTML snippets. */
export function unlabelledControls(page: Page): Promise<string[]> {
  return page.evaluate(`(() => {
    const named = (el) => (el.labels && el.labels.length > 0) || el.getAttribute('aria-label') || el.getAttribute('aria-labelledby') ||
      (el.tagName === 'BUTTON' && el.textContent.trim() !== '');
    return [...document.querySelectorAll('input, select, textarea, button')].filter((el) => !named(el)).map((el) => el.outerHTML.slice(0, 120));
  })()`) as Promise<string[]>;
}
