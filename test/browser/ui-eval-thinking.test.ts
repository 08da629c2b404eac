// The Eval panel's thinking fields, in Chromium on SwiftShader with the tiny fixture model (its
// byte-level tokenizer has no <think> token): a bad budget is refused before the run; a budget on
// a model without <think> fails naming why; with the switch set and no budget the run completes and
// its export records the thinking mode.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { EvalRun } from '../../src/eval/records';
import { generateCounting, loadModelFiles, openApp, openPanel, typeInto } from '../helpers/appPanels';
import { appWithTinyModel } from '../helpers/browser';

const MODEL_DIR = 'test-results/ui-eval-thinking-model';

describe('eval panel: thinking switch and budget (tiny model, SwiftShader)', () => {
  const app = appWithTinyModel(MODEL_DIR);

  it('refuses a bad budget, names a model without <think>, and records the thinking mode', async () => {
    const page = await app.page();
    await openApp(page, `${app.url}#model`);
    await loadModelFiles(page, MODEL_DIR);
    await generateCounting(page, 4, 2);
    const p = await openPanel(page, 'eval');
    await typeInto(page, p.getByLabel('Max new tokens'), '2');
    await typeInto(page, p.getByLabel('Label'), 'thinking-off');
    const run = p.getByRole('button', { name: 'Run eval' });
    const error = p.getByTestId('eval-error');
    const budget = p.getByLabel('Thinking budget');

    await typeInto(page, budget, '-1');
    await run.click();
    await expect.poll(() => error.textContent()).toBe('Thinking budget must be an integer >= 0 or empty; got -1');
    expect(await run.isDisabled()).toBe(false);

    await typeInto(page, budget, '2');
    await run.click();
    await page.waitForFunction(`/thinking budget: '<think>' is not a single token/.test(document.querySelector('[data-testid="eval-error"]').textContent)`, undefined, { timeout: 180_000, polling: 250 });

    await budget.fill('');
    await p.getByLabel('Thinking', { exact: true }).selectOption('off');
    await run.click();
    await page.waitForFunction(`/^thinking-off: /.test(document.querySelector('[data-testid="eval-summary"]').textContent) || !document.querySelector('[data-testid="eval-error"]').hidden`, undefined, { timeout: 240_000, polling: 250 });
    expect(await error.isHidden()).toBe(true);
    const download = page.waitForEvent('download');
    await p.getByRole('button', { name: 'Export thinking-off as JSON' }).click();
    const exported = JSON.parse(readFileSync((await (await download).path())!, 'utf8')) as EvalRun;
    expect(exported.settings.thinkingMode).toBe('off');
    expect(exported.settings.sampling.thinkingBudget).toBeUndefined();
    expect(exported.records).toHaveLength(2);
  }, 600_000);
});
