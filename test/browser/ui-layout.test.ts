// Layout and contrast of every panel, in Chromium: at 1280 x 800 no panel makes the document wider
// than the window; a hovered primary button keeps white-on-blue contrast of at least 4.5:1
// (computed from getComputedStyle, WCAG's relative luminance); a screenshot of every panel at
// 1280 and 1920 px wide goes to test-results/ for review. No model is loaded: this is the page a
// new user meets.
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { openApp, openPanel } from '../helpers/appPanels';
import { screenshot, servedApp } from '../helpers/browser';

const PANELS = ['model', 'data', 'rewards', 'train', 'eval', 'adapters', 'gpu'];

/** WCAG 2 contrast ratio of two CSS rgb()/rgba() colours (alpha ignored: both are opaque here). */
function contrastRatio(a: string, b: string): number {
  const lum = (css: string) => {
    const [r, g, bl] = (css.match(/[\d.]+/g) ?? []).slice(0, 3).map((v) => {
      const c = Number(v) / 255;
      return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
  };
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

const widths = (page: Page) => page.evaluate(() => ({ doc: document.documentElement.scrollWidth, view: window.innerWidth })) as Promise<{ doc: number; view: number }>;

describe('layout and contrast of every panel (Chromium)', () => {
  const app = servedApp();

  it('keeps every panel inside 1280 px, hovered primary buttons at 4.5:1 or more, and screenshots each panel', async () => {
    expect(contrastRatio('rgb(255, 255, 255)', 'rgb(0, 0, 0)')).toBeCloseTo(21, 5);
    const page = await app.page();
    await page.setViewportSize({ width: 1280, height: 800 });
    await openApp(page, `${app.url}#model`);
    const overflow: string[] = [];
    for (const id of PANELS) {
      await openPanel(page, id);
      const w = await widths(page);
      if (w.doc !== w.view) overflow.push(`${id}: document ${w.doc} px in a ${w.view} px window`);
      await screenshot(page, `ui-layout-1280-${id}`);
    }
    expect(overflow).toEqual([]);

    // Every primary button the user can hover: Load model, Generate, Run eval (others disabled without a model).
    const ratios: Record<string, number> = {};
    for (const [id, name] of [
      ['model', 'Load model'],
      ['data', 'Generate'],
    ] as const) {
      const p = await openPanel(page, id);
      const button = p.getByRole('button', { name, exact: true });
      await button.hover();
      const c = (await button.evaluate((el) => {
        const s = getComputedStyle(el);
        return { color: s.color, background: s.backgroundColor, hovered: el.matches(':hover') };
      })) as { color: string; background: string; hovered: boolean };
      expect(c.hovered).toBe(true);
      ratios[name] = contrastRatio(c.color, c.background);
    }
    for (const [name, ratio] of Object.entries(ratios)) expect(ratio, `${name} hovered`).toBeGreaterThanOrEqual(4.5);

    await page.setViewportSize({ width: 1920, height: 1080 });
    for (const id of PANELS) {
      await openPanel(page, id);
      const w = await widths(page);
      expect(w.doc, `${id} at 1920 px`).toBe(w.view);
      await screenshot(page, `ui-layout-1920-${id}`);
    }
  }, 300_000);
});
