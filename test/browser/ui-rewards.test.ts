import { describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { screenshot, servedApp } from '../helpers/browser';

// The reward playground in the page: numbers follow the text as it is typed, weights are
// editable, terms come and go, and a custom reward runs in the sandbox worker (its error shown,
// the other terms unaffected).
const text = async (page: Page, testId: string) => ((await page.getByTestId(testId).textContent()) ?? '').trim();

async function expectText(page: Page, testId: string, expected: string | RegExp): Promise<void> {
  const locator = page.getByTestId(testId);
  await locator.waitFor();
  await page
    .waitForFunction(
      ([id, want, isRe]) => {
        const t = document.querySelector(`[data-testid="${id}"]`)?.textContent?.trim() ?? '';
        return isRe ? new RegExp(want).test(t) : t === want;
      },
      [testId, expected instanceof RegExp ? expected.source : expected, expected instanceof RegExp] as const,
      { timeout: 15_000 },
    )
    .catch(() => undefined);
  const actual = await text(page, testId);
  if (expected instanceof RegExp) expect(actual).toMatch(expected);
  else expect(actual).toBe(expected);
}

describe('reward playground in headless Chromium', () => {
  const app = servedApp();

  it('recomputes every term and the total as the sample, the weights and the terms change', async () => {
    const page = await app.page();
    await page.goto(`${app.url}#rewards`);
    // The seeds' preset example: format 2 (×0.3), correctness 1.5 (3.0 vs 3, a numeric match).
    await expectText(page, 'value-format', '2.0');
    await expectText(page, 'value-correctness', '1.5');
    await expectText(page, 'reward-total', '2.1');

    // Make the SOLUTION match the gold exactly: correctness 2.0, total 0.6 + 2.0.
    const completion = page.getByLabel('Completion', { exact: true });
    await completion.fill('<REASONING>The tallest bar is 3.</REASONING>\n<SOLUTION>3</SOLUTION>');
    await expectText(page, 'value-correctness', '2.0');
    await expectText(page, 'why-correctness', "exact match '3'");
    await expectText(page, 'reward-total', '2.6');

    // Type a wrong gold answer key by key: correctness drops to 0.
    await page.getByLabel('Gold answer').fill('');
    await page.getByLabel('Gold answer').pressSequentially('42');
    await expectText(page, 'value-correctness', '0.0');
    await expectText(page, 'reward-total', '0.6');
    await page.getByLabel('Gold answer').fill('3');
    await expectText(page, 'reward-total', '2.6');

    // Weights: correctness 0.5 gives 0.6 + 1.0; a non-number is flagged and not applied.
    const weight = page.getByLabel('Weight of correctness');
    await weight.fill('0.5');
    await expectText(page, 'reward-total', '1.6');
    await expectText(page, 'weighted-correctness', '1.0');
    await weight.fill('half');
    expect(await weight.getAttribute('aria-invalid')).toBe('true');
    await expectText(page, 'reward-total', '1.6');
    await weight.fill('1');
    await expectText(page, 'reward-total', '2.6');

    // A second format term (weight 1) and its removal.
    await page.getByLabel('Built-in reward').selectOption('format');
    await page.getByRole('button', { name: 'Add term' }).click();
    await expectText(page, 'value-format_2', '2.0');
    await expectText(page, 'reward-total', '4.6');
    await page.getByRole('button', { name: 'Remove term format_2' }).click();
    await expectText(page, 'reward-total', '2.6');
    expect(await page.getByTestId('value-format_2').count()).toBe(0);

    // The geo3k preset: boxed correctness, 1 on a match.
    await page.getByLabel('Preset').selectOption('geo3k');
    await expectText(page, 'value-boxed', '1.0');
    await expectText(page, 'reward-total', '1.0');
    await page.getByLabel('Gold answer').fill('0.25');
    await expectText(page, 'value-boxed', '0.0');
    await page.getByLabel('Preset').selectOption('seeds');
    await expectText(page, 'reward-total', '2.1');
  });

  it('runs a custom reward in the sandbox: its value joins the total, its error is shown when it throws', async () => {
    const page = await app.page();
    await page.goto(`${app.url}#rewards`);
    await expectText(page, 'reward-total', '2.1');
    const editor = page.getByLabel('Source');
    const name = page.getByLabel('Term name');

    // Tab inside the editor inserts two spaces instead of leaving it.
    await editor.fill('');
    await editor.press('Tab');
    expect(await editor.inputValue()).toBe('  ');
    expect(await page.evaluate(`document.activeElement.id`)).toBe('custom-reward-source');

    await name.fill('len');
    await editor.fill('(completion, answer) => completion.length > 10 ? 0.25 : 0');
    await page.getByRole('button', { name: 'Apply to the playground sample' }).click();
    await expectText(page, 'value-len', '0.25');
    await expectText(page, 'reward-total', '2.35');

    await name.fill('boom');
    await editor.fill('() => { throw new Error("kaput") }');
    await editor.press('Control+Enter');
    await expectText(page, 'why-boom', /kaput/);
    await expectText(page, 'value-boom', '0.0');
    // The other terms still compute, and keep doing so as the text changes.
    await expectText(page, 'value-format', '2.0');
    await expectText(page, 'value-len', '0.25');
    await expectText(page, 'reward-total', '2.35');
    await page.getByLabel('Completion', { exact: true }).fill('<REASONING>x</REASONING><SOLUTION>3</SOLUTION>');
    await expectText(page, 'value-correctness', '2.0');
    await expectText(page, 'reward-total', '2.85');
    await expectText(page, 'why-boom', /kaput/);

    // A reward that never returns is stopped at the sandbox's time limit.
    await name.fill('hang');
    await editor.fill('() => { for (;;) {} }');
    await editor.press('Control+Enter');
    await expectText(page, 'why-hang', /timed out/);
    await expectText(page, 'reward-total', '2.85');

    // Rollouts are not there yet: the button says why and does nothing.
    const rollouts = page.getByTestId('run-on-rollouts');
    expect(await rollouts.getAttribute('aria-disabled')).toBe('true');
    expect(await page.locator(`#${await rollouts.getAttribute('aria-describedby')}`).textContent()).toMatch(/No rollouts yet/);
    await screenshot(page, 'rewards-custom');
  });
});
