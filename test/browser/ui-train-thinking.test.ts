// The Train form's thinking fields, in Chromium without a model: thinking_mode (auto, on, off) and
// thinking_budget are there with their defaults in the help, and the form's config check names a
// bad budget before any start (the summary line says why the config is not valid).
import { describe, expect, it } from 'vitest';
import { openApp, openConfigSections, openPanel, typeInto } from '../helpers/appPanels';
import { servedApp } from '../helpers/browser';

describe('train form: thinking_mode and thinking_budget (no model)', () => {
  const app = servedApp();

  it('offers the thinking switch and budget, and names a bad budget', async () => {
    const page = await app.page();
    await openApp(page, `${app.url}#train`);
    const p = await openPanel(page, 'train');
    await openConfigSections(page, p);
    const mode = p.locator('[data-key="thinking_mode"]');
    const budget = p.locator('[data-key="thinking_budget"]');
    expect(await mode.locator('option').evaluateAll((os) => os.map((o) => (o as HTMLOptionElement).value))).toEqual(['auto', 'on', 'off']);
    expect(await mode.inputValue()).toBe('auto');
    expect(await budget.inputValue()).toBe('');
    expect(await p.getByLabel('thinking_budget').getAttribute('data-key')).toBe('thinking_budget');
    expect(await p.getByText(/Force <\/think> after this many thinking tokens.*Default empty\./).count()).toBe(1);
    const summary = p.getByTestId('train-config-summary');
    await typeInto(page, budget, '-1');
    await expect.poll(() => summary.textContent()).toBe('not valid: train config: thinking_budget must be an integer >= 0; got -1');
    await typeInto(page, budget, '32');
    await mode.selectOption('off');
    await expect.poll(() => summary.textContent()).not.toMatch(/^not valid/);
    await typeInto(page, budget, '2.5');
    await expect.poll(() => summary.textContent()).toBe('not valid: train config: thinking_budget must be an integer >= 0; got 2.5');
  }, 180_000);
});
