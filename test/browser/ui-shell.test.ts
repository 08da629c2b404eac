import { describe, expect, it } from 'vitest';
import { screenshot, servedApp } from '../helpers/browser';

// The shell: every panel reached from the keyboard (arrow keys across the tabs), the hash follows,
// and every control of every panel has an accessible name.
// The Model panel opens by default; ArrowRight from it walks the rest and wraps around to it.
const ORDER = ['data', 'rewards', 'train', 'eval', 'adapters', 'gpu', 'model'];

describe('app shell in headless Chromium', () => {
  const app = servedApp();

  it('moves across the panels with the arrow keys, follows the hash, and labels every control', async () => {
    const page = await app.page();
    await page.goto(app.url);
    await page.getByRole('tab', { name: 'GPU' }).waitFor();
    // Tab: the skip link, then the selected tab (a roving tabindex keeps the others out of the Tab order).
    await page.keyboard.press('Tab');
    await page.keyboard.press('Tab');
    expect(await page.evaluate(`document.activeElement.id`)).toBe('tab-model');

    for (const id of ORDER) {
      await page.keyboard.press('ArrowRight');
      expect(await page.evaluate(`[location.hash, document.activeElement.id]`)).toEqual([`#${id}`, `tab-${id}`]);
      const panel = page.locator(`#panel-${id}`);
      expect(await panel.isVisible()).toBe(true);
      expect(await page.getByRole('tab', { selected: true }).getAttribute('id')).toBe(`tab-${id}`);
      expect(await page.locator('[role="tabpanel"]:visible').count()).toBe(1);
      await screenshot(page, `panel-${id}`);
    }
    await page.keyboard.press('End');
    expect(await page.evaluate(`location.hash`)).toBe('#gpu');
    await page.keyboard.press('Home');
    expect(await page.evaluate(`location.hash`)).toBe('#model');
    await page.keyboard.press('ArrowLeft');
    expect(await page.evaluate(`location.hash`)).toBe('#gpu');

    // A hash in the URL opens its panel; the status bar names the GPU once the worker has it.
    await page.goto(`${app.url}#rewards`);
    expect(await page.locator('#panel-rewards').isVisible()).toBe(true);
    await page.waitForFunction(`document.querySelector('[data-testid="status-gpu"]').textContent !== 'starting…'`, undefined, { timeout: 120_000 });
    expect((await page.getByTestId('status-gpu').textContent())?.toLowerCase()).toContain('swiftshader');

    // Panels are built on first visit (same-document hash navigations keep them), then every
    // control of every panel must have an accessible name.
    for (const id of ORDER) {
      await page.goto(`${app.url}#${id}`);
      await page.locator(`#panel-${id} section`).waitFor();
    }
    const unlabelled = (await page.evaluate(`(() => {
      const named = (el) => (el.labels && el.labels.length > 0) || el.getAttribute('aria-label') || el.getAttribute('aria-labelledby') ||
        (el.tagName === 'BUTTON' && el.textContent.trim() !== '');
      return [...document.querySelectorAll('input, select, textarea, button')].filter((el) => !named(el)).map((el) => el.outerHTML.slice(0, 120));
    })()`)) as string[];
    expect(unlabelled).toEqual([]);
  });
});
