// The Train panel from the keyboard, in Chromium on SwiftShader with the tiny fixture model:
// start, progress inside the step in flight, pause (acknowledged at once; it lands after the step
// in flight, which is kept), resume; the state line, the step line and the runs table agree at
// every stop; a custom reward that throws warns and scores 0; a rollout opens in the reward
// playground, and "Run on the latest rollouts" scores them with the custom term beside the
// built-ins. Then a reload mid-run: the workspace comes back (data set, reward terms, form values,
// open tab), the picked model folder reloads itself from the weight cache (Continue says why it
// waits until then), and, with other rows loaded, it asks before continuing on them; confirmed, it
// finishes the run from its last checkpoint.
import type { Locator, Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { loadModelFiles, generateCounting, openApp, openConfigSections, openPanel, panel, tabTo, typeInto, unlabelledControls } from '../helpers/appPanels';
import { appWithTinyModel, screenshot } from '../helpers/browser';

const MODEL_DIR = 'test-results/ui-train-model';
const LONG = 240_000;
const MAX_STEPS = 3;
const FORM = { num_generations: '2', per_device_train_batch_size: '2', max_completion_length: '4', learning_rate: '0.01', max_steps: String(MAX_STEPS), save_steps: '1', 'lora.r': '2', 'lora.lora_alpha': '4' };

const text = async (l: Locator) => ((await l.textContent()) ?? '').trim();
const focused = (page: Page) => page.evaluate('document.activeElement?.textContent');

async function waitForState(page: Page, pattern: RegExp): Promise<string> {
  await page.waitForFunction(
    (src) => new RegExp(src).test(document.querySelector('[data-testid="train-state"]')!.textContent ?? '') || !document.querySelector<HTMLElement>('[data-testid="train-error"]')!.hidden,
    pattern.source,
    { timeout: LONG, polling: 100 },
  );
  const error = panel(page, 'train').getByTestId('train-error');
  if (await error.isVisible()) throw new Error(`training failed: ${await error.textContent()}`);
  return text(panel(page, 'train').getByTestId('train-state'));
}

/** The state line and the run's row in the table, read in one go, must tell the same state and step. */
async function agreement(page: Page, runId: string): Promise<{ state: string; row: string }> {
  const r = (await page.evaluate((id) => {
    const row = document.querySelector(`[data-testid="train-runs"] tr[data-run="${id}"]`);
    return {
      state: document.querySelector('[data-testid="train-state"]')!.textContent ?? '',
      row: `${row?.querySelector('[data-testid="run-state"]')?.textContent} ${row?.querySelector('[data-testid="run-step"]')?.textContent}`,
    };
  }, runId)) as { state: string; row: string };
  const m = /^(\w+) at step (\d+) of (\d+)$/.exec(r.state);
  expect(m, r.state).not.toBeNull();
  expect(r.row).toBe(`${m![1]} ${m![2]} / ${m![3]}`);
  return r;
}

describe('train panel: progress, pause after the step, state agreement, playground, reload mid-run (tiny model, SwiftShader)', () => {
  const app = appWithTinyModel(MODEL_DIR);

  it('trains, pauses after the step in flight, resumes, restores the workspace after a reload and continues in one click', async () => {
    const started = Date.now();
    const page = await app.page();
    await openApp(page, `${app.url}#model`);
    await loadModelFiles(page, MODEL_DIR);
    await generateCounting(page, 4, 2);

    // A custom term that always throws, applied with Ctrl+Enter in the editor.
    let p = await openPanel(page, 'rewards');
    await typeInto(page, p.getByLabel('Term name'), 'boom');
    await typeInto(page, p.getByLabel('Source'), "(c) => { throw new Error('boom') }");
    await page.keyboard.press('Control+Enter');

    p = await openPanel(page, 'train');
    expect(await text(p.getByTestId('train-rewards'))).toMatch(/·boom\b/);
    await openConfigSections(page, p);
    await typeInto(page, p.locator('[data-key="system_prompt"]'), 'Answer.');
    for (const [k, v] of Object.entries(FORM)) await typeInto(page, p.locator(`[data-key="${k}"]`), v);
    // Selects from the keyboard: Home picks the first option (constant, grpo).
    for (const k of ['lr_scheduler_type', 'loss_type']) {
      await p.locator(`[data-key="${k}"]`).focus();
      await page.keyboard.press('Home');
    }
    expect(await text(p.getByTestId('train-config-summary'))).toMatch(/^GSPO \(grpo\), 1 prompt x 2 completions a step, up to 4 tokens, lr 0\.01 \(constant\), beta 0, LoRA r 2, 3 steps/);

    const button = (name: string) => p.getByRole('group', { name: 'Run controls' }).getByRole('button', { name, exact: true });
    const enabled = async () => Object.fromEntries(await Promise.all(['Start', 'Pause', 'Resume', 'Stop'].map(async (n) => [n, await button(n).isEnabled()] as const)));

    // Start (Enter): the config folds to its summary and locks; focus moves to Pause.
    await tabTo(page, button('Start'), false, 150); // past every field of the opened sections
    await page.keyboard.press('Enter');
    await waitForState(page, /^running/);
    expect(await enabled()).toEqual({ Start: false, Pause: true, Resume: false, Stop: true });
    await expect.poll(() => focused(page)).toBe('Pause');
    expect(await p.getByTestId('train-config').evaluate((d) => (d as HTMLDetailsElement).open)).toBe(false);
    expect(await p.locator('[data-key="max_steps"]').isDisabled()).toBe(true);
    // Progress inside the first step (which compiles its kernels, so it is the longest).
    await page.waitForFunction(`/^Step 1 of 3: (generating|scoring|training)/.test(document.querySelector('[data-testid="train-progress"]').textContent)`, undefined, { timeout: LONG, polling: 100 });
    expect(await text(p.getByTestId('train-progress'))).toMatch(/elapsed/);
    const startedNote = async () => /Run (run-\S+) started\./.exec(await text(p.getByTestId('train-messages')))?.[1];
    await expect.poll(startedNote, { timeout: 30_000 }).toBeDefined();
    const runId = (await startedNote())!;
    await agreement(page, runId);

    // After step 1: Space asks for a pause, acknowledged at once; it lands after step 2 (in flight), which is kept.
    await page.waitForFunction(`/^Step 1 of 3:/.test(document.querySelector('[data-testid="train-stats"]').textContent)`, undefined, { timeout: LONG, polling: 100 });
    await agreement(page, runId);
    await page.keyboard.press('Space');
    expect(await text(p.getByTestId('train-controls-note'))).toMatch(/^Pause requested: it takes effect when step 2 \(in flight\) finishes; that step is kept\.$/);
    expect(await text(p.getByTestId('train-state'))).toBe('pausing after step 2 of 3');
    expect(await waitForState(page, /^paused/)).toBe('paused at step 2 of 3');
    expect((await agreement(page, runId)).row).toBe('paused 2 / 3');
    expect(await text(p.getByTestId('train-stats'))).toMatch(/^Step 2 of 3: (\d+ ms|\d+\.\d\d s|\d+ min \d\d s), /);
    expect(await enabled()).toEqual({ Start: false, Pause: false, Resume: true, Stop: true });
    await expect.poll(() => focused(page)).toBe('Resume');
    // Both steps are on the charts, with their values in the legend.
    expect(await p.locator('figure.chart').first().getAttribute('aria-labelledby')).toBeTruthy();
    expect(await text(p.locator('figure.chart').first().locator('.chart-legend'))).toMatch(/^reward -?\d/);
    // The KL chart says why it is empty.
    expect(await text(p.locator('figure.chart', { hasText: 'KL to the base model' }).locator('.chart-empty'))).toMatch(/beta = 0/);
    await screenshot(page, 'ui-train-paused');

    // Load pressed while the run is paused: refused with the reason, and the model stays loaded.
    const model = await openPanel(page, 'model');
    await model.getByRole('button', { name: 'Load model' }).click();
    await model.getByTestId('model-error').waitFor({ state: 'visible', timeout: 60_000 });
    expect(await text(model.getByTestId('model-error'))).toMatch(/is paused; stop it before loading another model/);
    expect(await text(model.getByTestId('model-loaded'))).toMatch(/^Loaded: /);
    p = await openPanel(page, 'train');
    expect(await text(p.getByTestId('train-model'))).toBe('Model: the picked files.');

    // The throwing term: a warning, and 0 for it in the rollouts; the steps went on.
    expect(await text(p.getByTestId('train-warnings'))).toMatch(/reward 'boom' on prompt \S+: .*boom.* \(scored 0\)/);
    const terms = await p.getByTestId('rollout-inspector').locator('tbody tr td:nth-child(3)').allTextContents();
    expect(terms).toHaveLength(2);
    for (const t of terms) expect(t).toMatch(/boom 0\.0/);
    const completion = (await p.getByTestId('rollout-inspector').locator('tbody tr').first().locator('pre.completion').textContent()) ?? '';

    // One click opens a completion in the playground; the custom term scores the latest rollouts beside the built-ins.
    await p.getByRole('button', { name: 'Open completion 1 in the reward playground' }).click();
    const rewards = panel(page, 'rewards');
    await rewards.locator('section').waitFor();
    expect(await rewards.getByTestId('completion').inputValue()).toBe(completion);
    await typeInto(page, rewards.getByLabel('Term name'), 'chars');
    await typeInto(page, rewards.getByLabel('Source'), '(c) => c.length');
    await rewards.getByTestId('run-on-rollouts').click();
    const scored = rewards.getByTestId('rollout-scores').locator('table');
    await scored.waitFor({ timeout: 30_000 });
    expect(await scored.locator('thead th').allTextContents()).toEqual(['group', '#', 'format', 'correctness', 'chars', 'completion']);
    const firstRow = await scored.locator('tbody tr').first().locator('td').allTextContents();
    expect(Number(firstRow[4])).toBe(completion.length);
    expect(await scored.locator('tbody tr').count()).toBe(2);
    await screenshot(page, 'ui-train-playground-rollouts');

    // Resume: running again from step 2; reload while step 3 is in flight.
    p = await openPanel(page, 'train');
    await button('Resume').click();
    await waitForState(page, /^running/);
    expect((await agreement(page, runId)).row).toBe('running 2 / 3');
    await page.waitForFunction(`/^Step 3 of 3: /.test(document.querySelector('[data-testid="train-progress"]').textContent)`, undefined, { timeout: LONG, polling: 100 });
    await page.reload();
    await page.waitForLoadState('networkidle');
    p = panel(page, 'train');
    await p.locator('section').waitFor();

    // The workspace is back: the open tab, the data set, the terms (the custom one too), the form.
    expect(await page.locator('[role="tab"][aria-selected="true"]').getAttribute('aria-controls')).toBe('panel-train');
    expect(await text(p.getByTestId('train-data'))).toMatch(/^Data: the 2 training rows of synthetic counting/);
    expect(await text(p.getByTestId('train-rewards'))).toMatch(/·boom\b/);
    for (const [k, v] of Object.entries(FORM)) expect(await p.locator(`[data-key="${k}"]`).inputValue(), k).toBe(v);
    expect(await p.locator('[data-key="system_prompt"]').inputValue()).toBe('Answer.');
    const row = p.getByTestId('train-runs').locator(`tr[data-run="${runId}"]`);
    await row.waitFor({ timeout: 30_000 });
    // Cut off mid-step; 'paused' when the reload beat the write of the 'running' state (the checkpoint is the same).
    const cut = await text(row.getByTestId('run-state'));
    expect(cut).toMatch(/^(interrupted|paused)$/);
    expect(await text(row.getByTestId('run-step'))).toBe('2 / 3');
    // The interrupted run is back on the dashboard: its state, its two steps on the charts, its rollouts.
    await expect.poll(() => text(p.getByTestId('train-state')), { timeout: 30_000 }).toBe(`${cut} at step 2 of 3`);
    await agreement(page, runId);
    await expect.poll(() => p.getByTestId('train-charts').locator('[role="img"]').first().getAttribute('aria-label')).toMatch(/at step 2$/);
    expect(await p.getByTestId('rollout-inspector').locator('tbody tr').count()).toBe(2);
    const continueButton = p.getByRole('button', { name: `Continue ${runId}` });
    // The picked model folder reloads itself from the weight cache; until it is loaded, Continue says
    // why it waits (read once: the reload may finish between two reads, and the reason then clears).
    const waiting = await text(p.getByTestId('continue-reason'));
    if (waiting !== '') expect(waiting).toMatch(/needs the model loaded \(Model panel\): the model you had loaded is reloading by itself/);
    await screenshot(page, 'ui-train-after-reload');

    // Nothing picked again: the model reloads itself.
    await expect.poll(() => continueButton.isEnabled(), { timeout: LONG }).toBe(true);
    expect(await text(p.getByTestId('train-model'))).toBe('Model: the picked files.');
    // Other rows than the run trained on (another seed): the page asks first, and goes on when told to.
    const data = await openPanel(page, 'data');
    await typeInto(page, data.getByLabel('Seed', { exact: true }), '2');
    await data.getByRole('button', { name: 'Generate' }).click();
    await data.getByTestId('data-summary').getByText(/seed 2\b/).waitFor({ timeout: 60_000 });
    let asked = '';
    page.once('dialog', (dialog) => {
      asked = dialog.message();
      void dialog.accept();
    });
    p = await openPanel(page, 'train');
    await expect.poll(() => continueButton.isEnabled()).toBe(true);
    await continueButton.click();
    await p.getByTestId('train-messages').getByText(`Run ${runId} continues from step 2.`).waitFor({ timeout: LONG });
    expect(asked).toMatch(new RegExp(`^run ${runId}: the rows differ from those it trained on \\(2 rows with SHA-256 [0-9a-f]{12}… now, 2 with [0-9a-f]{12}… recorded\\)\\.\\n\\nContinue the run on the data loaded now\\?$`));
    await expect.poll(() => text(p.getByTestId('train-warnings'))).toMatch(/continuing on other data \(the rows differ/);
    expect(await text(p.getByTestId('train-rewards'))).toMatch(new RegExp(`^Rewards of run ${runId}: .*·boom\\b`));
    expect(await waitForState(page, /^(finished|stopped|failed)/)).toBe('finished at step 3 of 3');
    await expect.poll(async () => (await agreement(page, runId)).row).toBe('finished 3 / 3');
    expect(await continueButton.count()).toBe(0);
    // The summary no longer says the form is locked; no advice meant for programmers reaches the user.
    expect(await text(p.getByTestId('train-config-summary'))).not.toMatch(/locked/);
    await p.getByTestId('train-messages').getByText(/^(Adapter saved as|The adapter (of \S+ )?was not saved)/).waitFor({ timeout: 60_000 });
    expect(await text(p.getByTestId('train-messages'))).not.toMatch(/force: true/);
    await screenshot(page, 'ui-train-continued');
    expect(await unlabelledControls(page)).toEqual([]);

    // A new run starts from a clean dashboard: no step line, rollouts or chart values of the last run.
    await button('Start').click();
    await waitForState(page, /^running at step 0 of 3$/);
    expect(await text(p.getByTestId('train-stats'))).toBe('No step yet.');
    expect(await text(p.getByTestId('rollout-inspector'))).toBe('The latest rollouts appear here after the first step.');
    for (const label of await p.getByTestId('train-charts').locator('[role="img"]').evaluateAll((els) => els.map((e) => e.getAttribute('aria-label') ?? ''))) {
      expect(label).not.toMatch(/at step/);
    }
    // Only the new run's own warnings (its config's), none of the last run's reward failures.
    expect(await text(p.getByTestId('train-warnings'))).not.toMatch(/boom/);
    console.log(`ui-train: ${((Date.now() - started) / 1000).toFixed(0)} s`);
  }, 900_000);
});
