// The Train form before a run, in Chromium at 1280 x 800 and 1920 x 1080: it reads at a glance
// (Basics open, the other sections closed to one line of their non-default values) and is short
// enough that the run controls are on the first screen; yet every field of TrainConfig has its
// input, one click away (a section opens from the keyboard), and a changed value shows in its
// section's line. The Model panel's training memory estimate is the form's run, before the Train
// panel was ever opened and after its values change. No model is loaded: this is the form a new user meets.
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { openApp, openPanel } from '../helpers/appPanels';
import { screenshot, servedApp } from '../helpers/browser';
import { defaultConfig, LORA_TARGETS } from '../../src/rl/config';

/**
 * TrainConfig keys with no input in the Train form, each set elsewhere: the data set (Data panel),
 * the reward terms (Rewards panel), the model (Model panel); rollout correction and its TRL
 * aliases only from config files (the CLI), as the form's field table says.
 */
const ELSEWHERE = new Set(['dataset', 'rewards', 'model_name_or_path', 'rollout_correction']);

/** Every input the form must have, by data-key: the flat fields, system_prompt, LoRA's (the
 * decoder's projections as boxes, the vision modules as one text field), and the engine's
 * gradient_checkpointing under transformers' name. */
function expectedKeys(): string[] {
  const c = defaultConfig();
  const flat = Object.keys(c).filter((k) => !ELSEWHERE.has(k) && k !== 'lora' && !k.startsWith('vllm_importance_sampling_'));
  const lora = Object.keys(c.lora).flatMap((k) => (k === 'target_modules' ? [...LORA_TARGETS.map((t) => `lora.target_modules.${t}`), 'lora.target_modules.vision'] : [`lora.${k}`]));
  return [...flat, ...lora, 'gradient_checkpointing'].sort();
}

/** Top of the page: the config block's height and where the Start button ends, in CSS px. */
const geometry = (page: Page) =>
  page.evaluate(() => {
    window.scrollTo(0, 0);
    const config = document.querySelector('[data-testid="train-config"]')!.getBoundingClientRect();
    const start = [...document.querySelectorAll('#panel-train button')].find((b) => b.textContent === 'Start')!.getBoundingClientRect();
    return { configHeight: config.height, startBottom: start.bottom, viewport: window.innerHeight };
  }) as Promise<{ configHeight: number; startBottom: number; viewport: number }>;

describe('train form: sections at a glance, every field reachable (Chromium)', () => {
  const app = servedApp();

  it('fits the first screen at 1280 x 800 and 1920 x 1080, has an input for every TrainConfig field, and summarises changed values', async () => {
    const page = await app.page();
    await page.setViewportSize({ width: 1280, height: 800 });
    await openApp(page, `${app.url}#train`);
    const p = await openPanel(page, 'train');

    // Every TrainConfig field has exactly one input, and the form has no input that is not one.
    const keys = expectedKeys();
    expect(keys).toContain('logging_steps');
    const present = (await p.locator('[data-key]').evaluateAll((els) => els.map((e) => e.getAttribute('data-key')!))).sort();
    expect(present).toEqual(keys);

    // At a glance: Basics open, every other section closed to one line; the run controls on the first screen.
    const sections = p.locator('details.form-section');
    const open = await sections.evaluateAll((els) => els.map((e) => `${e.getAttribute('data-section')}:${(e as HTMLDetailsElement).open}`));
    expect(open[0]).toBe('basics:true');
    expect(open.slice(1).every((s) => s.endsWith(':false'))).toBe(true);
    expect(open.length).toBeGreaterThanOrEqual(6);
    for (const k of ['loss_type', 'learning_rate', 'max_steps', 'num_generations', 'max_completion_length']) expect(await p.locator(`[data-key="${k}"]`).isVisible(), k).toBe(true);
    expect(await p.getByTestId('train-rewards').isVisible()).toBe(true);
    // Bound: half the 800 px window for the config, so that the rewards line above it and the run
    // controls below it are on the first screen with room to spare (the form was ~1000 px tall).
    const g = await geometry(page);
    expect(g.configHeight, 'config height at 1280 x 800').toBeLessThanOrEqual(g.viewport / 2);
    expect(g.startBottom, 'Start at 1280 x 800').toBeLessThanOrEqual(g.viewport);
    await screenshot(page, 'ui-train-form-1280');

    // Non-default values show in their closed section's line: the demo's loss settings, then a change.
    expect(await p.getByTestId('config-section-sampling').textContent()).toBe('defaults');
    expect(await p.getByTestId('config-section-prompt').textContent()).toBe('default');
    // Opened from the keyboard (Enter on its summary), a section's fields are visible and editable.
    const sampling = p.locator('details[data-section="sampling"] > summary');
    await sampling.focus();
    await page.keyboard.press('Enter');
    const temperature = p.locator('[data-key="temperature"]');
    expect(await temperature.isVisible()).toBe(true);
    await temperature.fill('0.7');
    await p.locator('[data-key="top_k"]').fill('20');
    await sampling.focus();
    await page.keyboard.press('Enter');
    expect(await temperature.isVisible()).toBe(false);
    expect(await p.getByTestId('config-section-sampling').textContent()).toBe('temperature 0.7, top_k 20');
    await p.locator('details[data-section="lora"] > summary').click();
    await p.locator('[data-key="lora.r"]').fill('4');
    await p.locator('[data-key="lora.target_modules.gate_proj"]').uncheck();
    expect(await p.getByTestId('config-section-lora').textContent()).toBe(`r 4, target_modules ${LORA_TARGETS.filter((t) => t !== 'gate_proj').join(' ')}`);
    // The one-line config summary follows the form.
    expect(await p.getByTestId('train-config-summary').textContent()).toMatch(/LoRA r 4/);

    // Every section opens: then every input of the form is visible (none is out of reach).
    const closed = await p.locator('details.form-section:not([open])').evaluateAll((els) => els.map((e) => e.getAttribute('data-section')!));
    expect(closed.length).toBeGreaterThan(0);
    for (const id of closed) await p.locator(`details[data-section="${id}"] > summary`).click();
    const hidden = await p.locator('[data-key]').evaluateAll((els) => els.filter((e) => !(e as HTMLElement).checkVisibility()).map((e) => e.getAttribute('data-key')));
    expect(hidden).toEqual([]);
    await screenshot(page, 'ui-train-form-1280-open');

    // Left with Basics and the checkpoint section open: after a reload at 1920 x 1080 the values and
    // the open sections come back, and the bounds still hold.
    const all = await sections.evaluateAll((els) => els.map((e) => e.getAttribute('data-section')!));
    for (const id of all) if (id !== 'basics' && id !== 'run') await p.locator(`details[data-section="${id}"] > summary`).click();
    expect(await sections.evaluateAll((els) => els.filter((e) => (e as HTMLDetailsElement).open).map((e) => e.getAttribute('data-section')))).toEqual(['basics', 'run']);
    await page.waitForTimeout(500); // the workspace writes the form after 300 ms
    await page.setViewportSize({ width: 1920, height: 1080 });
    await page.reload();
    await page.waitForLoadState('networkidle');
    await page.locator('#panel-train section').waitFor();
    expect(await p.getByTestId('config-section-sampling').textContent()).toBe('temperature 0.7, top_k 20');
    expect(await sections.evaluateAll((els) => els.filter((e) => (e as HTMLDetailsElement).open).map((e) => e.getAttribute('data-section')))).toEqual(['basics', 'run']);
    const g2 = await geometry(page);
    expect(g2.configHeight, 'config height at 1920 x 1080').toBeLessThanOrEqual(g2.viewport / 2);
    expect(g2.startBottom, 'Start at 1920 x 1080').toBeLessThanOrEqual(g2.viewport);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBe(1920);
    await screenshot(page, 'ui-train-form-1920');
  }, 300_000);

  it('estimates training memory at the Train form’s settings, before the Train panel is opened and after the form changes', async () => {
    const page = await app.page();
    await openApp(page, `${app.url}#model`);
    const m = await openPanel(page, 'model');
    // The bundled demo's config.json and sizes are enough for the estimate; nothing is loaded.
    await m.getByRole('button', { name: 'Check size and memory' }).click();
    const at = m.getByTestId('model-training-at');
    await at.waitFor({ timeout: 60_000 });
    const demo = defaultConfig();
    expect(await at.textContent()).toBe(`Training at the Train form’s settings (8 x 64 tokens after a ${demo.max_prompt_length}-token prompt, LoRA r=${demo.lora.r})`);
    const before = await m.getByTestId('model-training-bytes').textContent();

    // The form changes: the estimate on screen follows, with no new check.
    const t = await openPanel(page, 'train');
    expect(await t.locator('[data-key="max_completion_length"]').inputValue()).toBe('64');
    await t.locator('[data-key="max_completion_length"]').fill('512');
    await openPanel(page, 'model');
    expect(await at.textContent()).toBe(`Training at the Train form’s settings (8 x 512 tokens after a ${demo.max_prompt_length}-token prompt, LoRA r=${demo.lora.r})`);
    expect(await m.getByTestId('model-training-bytes').textContent()).not.toBe(before);
  }, 120_000);
});
