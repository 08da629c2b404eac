// Resume after a reload, in Chromium on SwiftShader through the engine worker's API: a run on the
// tiny fixture model (byte-level tokenizer, test/helpers/tinyModelFolder.ts) is stopped after a
// step, the page reloads, the run continues from IndexedDB with the adapters it had (read back
// through the API), and its step count goes on from there to max_steps. A pause asked for right
// after the continue lands after the step in flight, which is kept. The run records the data it
// trains on; continuing it on other rows is refused with a DataChangeError unless allowed.
// (Strings for page.evaluate: vitest would rewrite a function's dynamic import.)
import { readdirSync } from 'node:fs';
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { appWithTinyModel, type AppSession } from '../helpers/browser';

const MODEL_DIR = 'test-results/resume-model';

const CONFIG = {
  dataset: { tasks: ['counting'], count: 4, seed: 0, size: 128 },
  system_prompt: 'Answer.',
  num_generations: 2,
  per_device_train_batch_size: 2,
  max_completion_length: 4,
  learning_rate: 0.01,
  lr_scheduler_type: 'constant',
  max_steps: 4,
  save_steps: 1,
  loss_type: 'grpo',
  lora: { r: 2, lora_alpha: 4 },
  // Varies within a group, so lora_B moves away from zero (run in the browser's reward sandbox).
  rewards: [{ name: 'length', weight: 0.1, source: '(c) => c.length' }],
};

/** Start a worker in the page, load the tiny model from the served folder; window.__api, window.__events. */
async function engine(page: Page, app: AppSession): Promise<void> {
  await page.goto(app.url);
  await page.waitForLoadState('networkidle');
  const names = JSON.stringify(readdirSync(MODEL_DIR));
  const script = `(async () => {
    const { startEngine, proxy } = await import('/src/worker/client.ts');
    const api = startEngine();
    const files = await Promise.all(${names}.map(async (n) => new File([await (await fetch('/${MODEL_DIR}/' + n)).blob()], n)));
    await api.loadModel({ kind: 'files', files });
    window.__api = api;
    window.__events = [];
    window.__onEvent = proxy((e) => window.__events.push(e));
  })()`;
  // Vite reloads the page once when its first visit discovers dependencies to pre-bundle.
  for (let attempt = 0; ; attempt++) {
    try {
      return void (await page.evaluate(script));
    } catch (e) {
      if (attempt >= 2 || !/Execution context was destroyed/.test((e as Error).message)) throw e;
      await page.waitForLoadState('networkidle');
    }
  }
}

const events = (page: Page) => page.evaluate(`window.__events.map((e) => ({ type: e.type, state: e.state, step: e.step ?? e.metrics?.step, message: e.message }))`) as Promise<{ type: string; state?: string; step?: number; message?: string }[]>;

async function waitFor(page: Page, what: string, predicate: string, timeoutMs = 240_000): Promise<void> {
  try {
    await page.waitForFunction(predicate, undefined, { timeout: timeoutMs, polling: 250 });
  } catch (e) {
    throw new Error(`${what}: ${(e as Error).message}\nevents: ${JSON.stringify(await events(page))}`);
  }
}

describe('training run: stop, reload, resume (worker API, IndexedDB)', () => {
  const app = appWithTinyModel(MODEL_DIR);

  it('continues after a reload with the same adapters and the next step', async () => {
    const page = await app.page();
    await engine(page, app);
    // The Model panel's "Between generating and training" choice reaches the run's engine config.
    await page.evaluate(`window.__api.setPhaseBuffers('release')`);
    const runId = (await page.evaluate(`window.__api.startTraining(${JSON.stringify(CONFIG)}, window.__onEvent).then((r) => r.runId)`)) as string;
    await waitFor(page, 'first step', `window.__events.some((e) => e.type === 'step' && e.metrics.step >= 1)`);
    await page.evaluate(`window.__api.stopTraining()`);
    await waitFor(page, 'stopped', `window.__events.some((e) => e.type === 'state' && e.state === 'stopped')`);
    const before = await events(page);
    const k = before.filter((e) => e.type === 'step').length;
    expect(k).toBeGreaterThanOrEqual(1);
    expect(k).toBeLessThan(CONFIG.max_steps);
    expect(before.filter((e) => e.type === 'error')).toEqual([]);
    expect(before.some((e) => e.type === 'checkpoint' && e.step === k)).toBe(true);
    const weightsJs = `window.__api.loraWeights().then((w) => Object.fromEntries(Object.entries(w).map(([n, v]) => [n, Array.from(v)])))`;
    const stopped = (await page.evaluate(weightsJs)) as Record<string, number[]>;
    const bName = 'base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_B.weight';
    expect(Object.keys(stopped)).toHaveLength(3 * 7 * 2);
    expect(stopped[bName].some((v) => v !== 0)).toBe(true);

    await page.reload();
    await engine(page, app);
    const runs = (await page.evaluate(`window.__api.trainingRuns().then((rs) => rs.map((r) => ({ runId: r.runId, step: r.step, state: r.state })))`)) as { runId: string; step: number; state: string }[];
    expect(runs.find((r) => r.runId === runId)).toMatchObject({ step: k, state: 'stopped' });
    const recorded = (await page.evaluate(`window.__api.trainingRuns().then((rs) => rs.find((r) => r.runId === ${JSON.stringify(runId)}).data)`)) as { dataset: { kind: string; seed: number }; rows: number; rowsSha256: string };
    expect(recorded).toMatchObject({ dataset: { kind: 'synthetic', seed: 0 }, rows: 4 });
    expect(recorded.rowsSha256).toMatch(/^[0-9a-f]{64}$/);
    // The run's engine config names the products the model ran (SwiftShader: the f32 units).
    const engineConfig = await page.evaluate(`window.__api.trainingRuns().then((rs) => rs.find((r) => r.runId === ${JSON.stringify(runId)}).engine)`);
    expect(engineConfig).toMatchObject({ products: 'f32', vision_products: 'f32', gradient_checkpointing: true, phase_buffers: 'release' });
    // Other rows (another seed) are refused, naming the difference; the config's own rows go on below.
    const otherRows = `import('/src/data/index.ts').then((m) => window.__api.setDataset(m.syntheticDataset({ seed: 1, count: 4, tasks: ['counting'], size: 128 })))`;
    await page.evaluate(otherRows);
    const refused = (await page.evaluate(`window.__api.continueTraining(${JSON.stringify(runId)}, window.__onEvent).then(() => null, (e) => [e.name, e.message])`)) as [string, string] | null;
    expect(refused?.[0]).toBe('DataChangeError');
    expect(refused?.[1]).toMatch(new RegExp(`^run ${runId}: the rows differ from those it trained on \\(4 rows with SHA-256 [0-9a-f]{12}… now, 4 with ${recorded.rowsSha256.slice(0, 12)}… recorded\\)$`));
    await page.evaluate(`window.__api.setDataset(null)`);
    // Pause at once: acknowledged with the step it waits for, it lands after that step (in flight
    // when asked), which is kept: the adapters have moved on from the stopped ones.
    const resumed = (await page.evaluate(`window.__api.continueTraining(${JSON.stringify(runId)}, window.__onEvent).then(async (r) => ({ ...r, pause: await window.__api.pauseTraining() }))`)) as { step: number; pause: { afterStep: number } | null };
    expect(resumed.step).toBe(k);
    expect(resumed.pause).toEqual({ afterStep: k + 1 });
    await waitFor(page, 'paused', `window.__events.some((e) => e.type === 'state' && e.state === 'paused')`);
    const paused = await events(page);
    expect(paused.find((e) => e.state === 'paused')?.step).toBe(k + 1);
    expect(paused.filter((e) => e.type === 'step').map((e) => e.step)).toEqual([k + 1]);
    // Progress inside the kept step: generation of its one prompt group, then training.
    const phases = (await page.evaluate(`window.__events.filter((e) => e.type === 'progress' && e.progress.step === ${k + 1}).map((e) => e.progress.phase)`)) as string[];
    expect(phases[0]).toBe('generating');
    expect(phases.at(-1)).toBe('training');
    // The sampler's readbacks report the group's tokens while it generates (2 completions of at most 4 tokens).
    const inFlight = (await page.evaluate(`window.__events.filter((e) => e.type === 'progress' && e.progress.step === ${k + 1}).map((e) => e.progress.tokensInFlight)`)) as number[];
    expect(Math.max(...inFlight)).toBeGreaterThan(0);
    expect(Math.max(...inFlight)).toBeLessThanOrEqual(2 * CONFIG.max_completion_length);
    expect(await page.evaluate(weightsJs)).not.toEqual(stopped);
    await page.evaluate(`window.__api.resumeTraining()`);
    await waitFor(page, 'finished', `window.__events.some((e) => e.type === 'state' && (e.state === 'finished' || e.state === 'failed'))`);
    const after = await events(page);
    expect(after.filter((e) => e.type === 'error')).toEqual([]);
    expect(after.filter((e) => e.type === 'step').map((e) => e.step)).toEqual(Array.from({ length: CONFIG.max_steps - k }, (_, i) => k + 1 + i));
    const history = (await page.evaluate(`window.__api.trainingMetrics(${JSON.stringify(runId)}).then((ms) => ms.map((m) => m.step))`)) as number[];
    expect(history).toEqual([1, 2, 3, 4]);
    const data = `window.__api.trainingRuns().then((rs) => rs.find((r) => r.runId === ${JSON.stringify(runId)}).data.rowsSha256)`;
    expect(await page.evaluate(data)).toBe(recorded.rowsSha256);

    // Allowed (the page asks the user first), the other rows are recorded and said so.
    await page.evaluate(otherRows);
    await page.evaluate(`window.__api.continueTraining(${JSON.stringify(runId)}, window.__onEvent, { allowDataChange: true })`);
    await waitFor(page, 'finished again', `window.__events.filter((e) => e.type === 'state' && e.state === 'finished').length >= 2`);
    expect((await events(page)).some((e) => e.type === 'warning' && /^continuing on other data \(the rows differ/.test(e.message ?? ''))).toBe(true);
    expect(await page.evaluate(data)).not.toBe(recorded.rowsSha256);
  }, 600_000);
});
