import { describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { screenshot, servedApp } from '../helpers/browser';

/**
 * Nothing in the app draws a chart yet, so Vite's dev server meets uplot only when the test imports
 * it, and may then optimise the dependency and reload the page mid-evaluation: retry once after that.
 */
async function evaluateSettled(page: Page, expression: string): Promise<unknown> {
  try {
    return await page.evaluate(expression);
  } catch (e) {
    if (!/Execution context was destroyed/.test(String(e))) throw e;
    await page.waitForLoadState('load');
    return page.evaluate(expression);
  }
}

// The live chart component (uPlot) fed by hand in the page: series lengths, gaps, the redraw,
// the accessible name and text alternative, the legend with each series' latest value (visible
// without hovering), the empty-chart note, smoothing, and refused input.
describe('live chart in headless Chromium', () => {
  const app = servedApp();

  it('appends points to named series and redraws once a frame', async () => {
    const page = await app.page();
    await page.goto(`${app.url}#gpu`);
    const out = (await evaluateSettled(page, `import('/src/ui/chart.ts').then(async (m) => {
      const chart = new m.LiveChart({ title: 'Reward', series: [{ name: 'reward' }, { name: 'format' }, { name: 'correctness' }] });
      const host = document.createElement('div');
      host.style.width = '600px';
      document.body.prepend(host);
      host.append(chart.element);
      for (let step = 1; step <= 5; step++) {
        chart.append(step, { reward: step / 2, format: step % 2 ? 1 : null, ...(step > 2 ? { correctness: step } : {}) });
      }
      const beforeFrame = chart.drawnPoints;
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      const errors = [];
      for (const bad of [() => chart.append(5, { reward: 1 }), () => chart.append(6, { rewrd: 1 }), () => chart.values('nope')]) {
        try { bad(); errors.push(null); } catch (e) { errors.push(e.message); }
      }
      const figure = chart.element;
      return {
        lengths: ['reward', 'format', 'correctness'].map((n) => chart.values(n).length),
        format: chart.values('format'),
        correctness: chart.values('correctness'),
        beforeFrame,
        drawn: chart.drawnPoints,
        name: document.getElementById(figure.getAttribute('aria-labelledby')).textContent,
        alt: figure.querySelector('[role="img"]').getAttribute('aria-label'),
        legend: [...figure.querySelectorAll('.chart-legend li')].map((e) => e.textContent),
        emptyHidden: figure.querySelector('.chart-empty').hidden,
        empty: await (async () => {
          const kl = new m.LiveChart({ title: 'KL', series: [{ name: 'kl' }], emptyNote: 'No KL: beta = 0' });
          host.append(kl.element);
          kl.append(1, { kl: null });
          await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
          const note = kl.element.querySelector('.chart-empty');
          return { hidden: note.hidden, text: note.textContent, legend: kl.element.querySelector('.chart-legend').textContent };
        })(),
        smoothed: m.smoothed([1, null, 2, 4], 0.5),
        canvasWidth: figure.querySelector('canvas').getBoundingClientRect().width,
        errors,
      };
    })`)) as Record<string, unknown>;
    expect(out.lengths).toEqual([5, 5, 5]);
    expect(out.format).toEqual([1, null, 1, null, 1]);
    expect(out.correctness).toEqual([null, null, 3, 4, 5]);
    expect(out.beforeFrame).toBe(0);
    expect(out.drawn).toBe(5);
    expect(out.name).toBe('Reward');
    expect(out.alt).toBe('Reward: reward 2.5 at step 5; format 1.0 at step 5; correctness 5.0 at step 5');
    expect(out.legend).toEqual(['reward 2.5', 'format 1.0', 'correctness 5.0']);
    expect(out.emptyHidden).toBe(true);
    expect(out.empty).toEqual({ hidden: false, text: 'No KL: beta = 0', legend: 'kl —' });
    // An exponential moving average that skips gaps: 1, gap, 0.5·1 + 0.5·2, 0.5·1.5 + 0.5·4.
    expect(out.smoothed).toEqual([1, null, 1.5, 2.75]);
    expect(out.canvasWidth).toBeGreaterThan(500);
    expect(out.errors).toEqual([
      "chart 'Reward': x 5 does not follow 5",
      "chart 'Reward': no series 'rewrd' (it has reward, format, correctness)",
      "chart 'Reward': no series 'nope'",
    ]);
    await screenshot(page, 'chart-component');
  });
});
