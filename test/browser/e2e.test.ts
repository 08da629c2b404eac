// Issue 6's acceptance walk through the app's panels, in Chromium with WebGPU on SwiftShader, on
// the bundled demo model (public/demo, the Model panel's default source) and a committed data set
// of the demo's own tasks (test/fixtures/data/demo-rows.jsonl, `npm run cli -- demo-rows`) picked
// in the Data panel's local-file input: load the model; preview the rows and their images; type in
// the reward playground and see the total change; a baseline eval driven from the keyboard alone;
// 2 GSPO steps with live charts; eval with the adapter and the before/after diff; export the
// adapter (PEFT names for Qwen3-VL, A and B non-zero, parsed here); every panel's operable
// controls named in the accessibility tree and reached with Tab; a reload that keeps the run, the
// eval records and the adapter. No request leaves the served origin. A screenshot of each panel
// goes to test-results/.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Locator, Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { openApp, openConfigSections, openPanel, panel, tabTo } from '../helpers/appPanels';
import { accessibleNames, offOrigin, recordRequests, screenshot, servedApp, unreachedByTab } from '../helpers/browser';

const DATA_FILE = resolve('test/fixtures/data/demo-rows.jsonl');
const HELD_OUT = 2;
/**
 * Greedy tokens per eval row: enough to see the demo answer like it was trained ("<REASONING" on
 * counting and bar charts, "The answer is" on triangles), not enough to finish. SwiftShader decodes
 * the demo (a 151,936-word head) at about 3 s a token, so full answers (40 tokens) are out of reach.
 */
const EVAL_TOKENS = 4;
const LONG = 300_000;
/** public/demo/config.json: 4 text layers, hidden 64, 4 query and 2 KV heads of 32, MLP 256. */
const DEMO_LAYERS = 4;
const LORA_R = 2;
const PROJ_SHAPES: Record<string, [number, number]> = {
  'self_attn.q_proj': [128, 64],
  'self_attn.k_proj': [64, 64],
  'self_attn.v_proj': [64, 64],
  'self_attn.o_proj': [64, 128],
  'mlp.gate_proj': [256, 64],
  'mlp.up_proj': [256, 64],
  'mlp.down_proj': [64, 256],
};

interface SafeTensor {
  shape: number[];
  values: Float32Array;
}

/** The tensors of a safetensors file (F32 only, as the engine exports). */
function readSafetensors(bytes: Buffer): Map<string, SafeTensor> {
  const n = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const out = new Map<string, SafeTensor>();
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    expect(t.dtype).toBe('F32');
    const data = bytes.subarray(8 + n + t.data_offsets[0], 8 + n + t.data_offsets[1]);
    out.set(name, { shape: t.shape, values: new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength)) });
  }
  return out;
}

/** Replaces a field's text with keystrokes only: Tab to it, select all, type. */
async function keyIn(page: Page, field: Locator, text: string): Promise<void> {
  await tabTo(page, field);
  await page.keyboard.press('ControlOrMeta+A');
  await page.keyboard.type(text);
}

const seconds = (since: number) => `${((Date.now() - since) / 1000).toFixed(0)} s`;

async function waitForEval(page: Page, label: string): Promise<void> {
  await page.waitForFunction(
    (l) => document.querySelector('[data-testid="eval-summary"]')?.textContent?.startsWith(`${l}:`) || !document.querySelector<HTMLElement>('[data-testid="eval-error"]')!.hidden,
    label,
    { timeout: LONG, polling: 250 },
  );
  expect(await panel(page, 'eval').getByTestId('eval-error').isHidden()).toBe(true);
}

/** Records of the eval table: id, prediction, gold, correct, format_ok, reward terms, completion. */
async function evalRecords(p: Locator): Promise<string[][]> {
  return p.getByTestId('eval-records').locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent ?? '')));
}

describe('the app end to end on the bundled demo model (SwiftShader, offline)', () => {
  const app = servedApp();

  it('loads, previews, scores, evaluates, trains, diffs, exports, is named and keyboard-reachable, and keeps it all over a reload', async () => {
    const started = Date.now();
    const page = await app.page();
    const requests = recordRequests(page);
    await openApp(page, app.url);
    const phase = (what: string, since: number) => console.log(`e2e ${what}: ${seconds(since)}`);

    // Model: the default source is the bundled demo, read from this server only.
    let t = Date.now();
    let p = await openPanel(page, 'model');
    expect(await p.getByLabel('Model source').inputValue()).toBe('demo');
    await p.getByRole('button', { name: 'Check size and memory' }).click();
    await page.waitForFunction(`!!document.querySelector('[data-testid="model-fits"], [data-testid="model-refused"]') || !document.querySelector('[data-testid="model-error"]').hidden`, undefined, { timeout: 60_000 });
    expect(await p.getByTestId('model-error').isHidden(), await p.getByTestId('model-error').textContent() ?? '').toBe(true);
    expect(await p.getByTestId('model-fits').isVisible(), await p.textContent() ?? '').toBe(true);
    expect(await p.getByTestId('model-download-size').textContent()).toMatch(/MiB$/);
    await p.getByRole('button', { name: 'Load model' }).click();
    await page.waitForFunction(`document.querySelector('[data-testid="model-loaded"]').textContent.startsWith('Loaded:') || !document.querySelector('[data-testid="model-error"]').hidden`, undefined, { timeout: LONG });
    expect(await p.getByTestId('model-error').isHidden()).toBe(true);
    expect(await p.getByTestId('model-loaded').textContent()).toMatch(/^Loaded: the bundled demo model .*4 layers, hidden 64, vocabulary 151936/);
    expect(await p.getByTestId('model-cache').textContent()).toMatch(/not cached before this load/);
    await screenshot(page, 'e2e-model');
    phase('model', t);

    // Data: the committed JSONL through the local-file input (MathVista layout, ids from pid).
    t = Date.now();
    p = await openPanel(page, 'data');
    await p.getByLabel('Local files').check();
    await p.getByLabel('Data file (parquet, JSON, JSONL)').setInputFiles(DATA_FILE);
    await p.getByLabel('Held out', { exact: true }).fill(String(HELD_OUT));
    await p.getByRole('button', { name: 'Load file' }).click();
    await page.waitForFunction(`document.querySelector('[data-testid="data-summary"] dd')?.textContent === 'demo-rows.jsonl'`, undefined, { timeout: 60_000 });
    expect(await p.getByTestId('data-error').isHidden()).toBe(true);
    expect([await p.getByTestId('count-rows').textContent(), await p.getByTestId('count-broken').textContent(), await p.getByTestId('count-split').textContent()]).toEqual(['8', '0', `${8 - HELD_OUT} / ${HELD_OUT}`]);
    const preview = p.getByTestId('preview-table');
    expect(await preview.locator('tbody tr').count()).toBe(8);
    expect(await preview.locator('tbody tr th').first().textContent()).toBe('counting-7003-0');
    // The rows keep their images encoded; the page shown decodes its own.
    const canvases = preview.locator('canvas');
    await expect.poll(() => canvases.count()).toBe(8);
    expect(await canvases.first().evaluate((c: HTMLCanvasElement) => [c.width, c.height])).toEqual([128, 128]);
    expect(await canvases.first().getAttribute('aria-label')).toBe('image 1 of row counting-7003-0, 128×128');
    await screenshot(page, 'e2e-data');
    phase('data', t);

    // Rewards: the total follows the gold answer as it is typed (0.3·format + 1.0·correctness:
    // format 2; an exact match 2, a numeric one 1.5, none 0). A length term makes rewards differ
    // within a group even when every completion is cut at max_completion_length, so the
    // advantages (and B) move.
    p = await openPanel(page, 'rewards');
    await p.getByLabel('Completion').fill('<REASONING>I count 2.</REASONING>\n<SOLUTION>2</SOLUTION>');
    const total = (v: string) => page.waitForFunction(`document.querySelector('[data-testid="reward-total"]').textContent === '${v}'`, undefined, { timeout: 10_000 });
    await p.getByLabel('Gold answer').focus();
    await page.keyboard.press('ControlOrMeta+A');
    await page.keyboard.type('2');
    await total('2.6');
    await page.keyboard.type('.0');
    await total('2.1');
    await page.keyboard.press('ControlOrMeta+A');
    await page.keyboard.type('5');
    await total('0.6');
    await p.getByLabel('Term name').fill('length');
    await p.getByLabel('Source').fill('(c) => c.length / 100');
    await p.getByRole('button', { name: 'Apply to the playground sample' }).click();
    await page.waitForFunction(`document.querySelector('[data-testid="value-length"]')?.textContent === '0.56'`, undefined, { timeout: 30_000 });
    await screenshot(page, 'e2e-rewards');

    // Baseline eval, greedy, from the keyboard alone: arrows to the tab, Tab to each field, Enter.
    t = Date.now();
    p = await openPanel(page, 'eval');
    expect(await p.getByTestId('eval-rows').textContent()).toBe(`Held-out rows: ${HELD_OUT} of demo-rows.jsonl (Data panel).`);
    await keyIn(page, p.getByLabel('Max new tokens'), String(EVAL_TOKENS));
    await keyIn(page, p.getByLabel('Label'), 'baseline');
    await tabTo(page, p.getByRole('button', { name: 'Run eval' }));
    await page.keyboard.press('Enter');
    await waitForEval(page, 'baseline');
    expect(await p.getByRole('button', { name: 'Run eval' }).evaluate((b) => b === document.activeElement)).toBe(true);
    const baseline = await evalRecords(p);
    expect(baseline).toHaveLength(HELD_OUT);
    // Greedy, the demo starts its counting and bar answers with <REASONING> and its triangle ones
    // with a sentence (public/demo/README.md), as it does on its own rows.
    for (const r of baseline) expect(r[6], r[0]).toMatch(r[0].startsWith('triangle_angle-') ? /^The answer is/ : /^<REASONING/);
    console.log(`e2e baseline: ${JSON.stringify(baseline)}`);
    phase('baseline eval', t);

    // Train 2 GSPO steps (sequence-level ratios), G = 2, one prompt a step.
    t = Date.now();
    p = await openPanel(page, 'train');
    expect(await p.getByTestId('train-model').textContent()).toMatch(/^Model: the bundled demo model/);
    expect(await p.getByTestId('train-data').textContent()).toBe(`Data: the ${8 - HELD_OUT} training rows of demo-rows.jsonl (Data panel).`);
    await openConfigSections(page, p);
    for (const [key, value] of Object.entries({
      num_generations: '2',
      per_device_train_batch_size: '2',
      max_completion_length: '8',
      learning_rate: '0.01',
      lr_scheduler_type: 'constant',
      importance_sampling_level: 'sequence',
      loss_type: 'grpo',
      max_steps: '2',
      save_steps: '1',
      'lora.r': String(LORA_R),
      'lora.lora_alpha': String(2 * LORA_R),
    })) {
      const el = p.locator(`[data-key="${key}"]`);
      if ((await el.evaluate((e) => e.tagName)) === 'SELECT') await el.selectOption(value);
      else await el.fill(value);
    }
    await p.getByRole('button', { name: 'Start', exact: true }).click();
    await page.waitForFunction(`/^Step 1 of 2:/.test(document.querySelector('[data-testid="train-stats"]').textContent)`, undefined, { timeout: LONG, polling: 250 });
    const chartLabels = () => p.getByTestId('train-charts').locator('[role="img"]').evaluateAll((els) => els.map((e) => e.getAttribute('aria-label') ?? ''));
    const atStep = async (n: number) => (await chartLabels()).filter((l) => new RegExp(`at step ${n}\\b`).test(l)).length;
    await expect.poll(() => atStep(1), { timeout: 10_000 }).toBeGreaterThan(4); // every chart but KL (beta 0)
    const charted = await atStep(1);
    await page.waitForFunction(`/^(finished|failed)/.test(document.querySelector('[data-testid="train-state"]').textContent) || !document.querySelector('[data-testid="train-error"]').hidden`, undefined, { timeout: LONG, polling: 250 });
    expect(await p.getByTestId('train-error').isHidden()).toBe(true);
    expect(await p.getByTestId('train-state').textContent()).toBe('finished at step 2 of 2');
    await expect.poll(() => atStep(2), { timeout: 10_000 }).toBe(charted);
    expect(await p.getByTestId('train-stats').textContent()).toMatch(/^Step 2 of 2: .* tokens\/s, reward .*; GPU memory .* in use/);
    const inspector = p.getByTestId('rollout-inspector');
    expect(await inspector.locator('tbody tr').count()).toBe(2);
    await expect.poll(() => inspector.locator('canvas').count()).toBe(1);
    await p.getByTestId('train-messages').getByText(/Adapter saved as run-/).waitFor({ timeout: 60_000 });
    await screenshot(page, 'e2e-train');
    phase('train', t);

    // Eval with the adapter, then the before/after table and the per-sample diff.
    t = Date.now();
    p = await openPanel(page, 'eval');
    await p.getByLabel('Evaluate', { exact: true }).selectOption('adapter');
    await p.getByLabel('Label').fill('after');
    await p.getByRole('button', { name: 'Run eval' }).click();
    await waitForEval(page, 'after');
    const after = await evalRecords(p);
    expect(after.map((r) => r[0])).toEqual(baseline.map((r) => r[0]));
    console.log(`e2e after: ${JSON.stringify(after)}`);
    // The record names the adapter it evaluated: the run, its step and its config's hash.
    await expect.poll(() => p.getByTestId('eval-saved').locator('tbody tr').first().locator('td').nth(1).textContent(), { timeout: 30_000 }).toMatch(/^run-\S+ at step 2 \(config [0-9a-f]{12}\)$/);
    await p.getByRole('button', { name: 'Compare' }).click();
    const counts = (await p.getByTestId('eval-diff-counts').textContent()) ?? '';
    const m = /^Fixed (\d+), broken (\d+), unchanged (\d+)\.$/.exec(counts);
    expect(m, counts).not.toBeNull();
    const correct = (rows: string[][]) => rows.map((r) => r[3] === 'yes');
    const [was, now] = [correct(baseline), correct(after)];
    expect(m!.slice(1).map(Number)).toEqual([
      was.filter((c, i) => !c && now[i]).length,
      was.filter((c, i) => c && !now[i]).length,
      was.filter((c, i) => c === now[i]).length,
    ]);
    expect(await p.getByTestId('eval-before-after').locator('thead th').allTextContents()).toEqual(['metric', 'baseline', 'after', 'change']);
    expect(await p.getByTestId('eval-before-after').locator('tbody th').allTextContents()).toContain('accuracy');
    await screenshot(page, 'e2e-eval');
    phase('eval after', t);

    // Export: both files downloaded; PEFT's names and shapes on every layer and projection, A and B non-zero.
    p = await openPanel(page, 'adapters');
    expect(await p.getByTestId('adapters-list').locator('tbody tr[data-adapter^="run-"]').count()).toBe(1);
    const downloads: Promise<{ name: string; path: string }>[] = [];
    page.on('download', (d) => downloads.push(d.path().then((path) => ({ name: d.suggestedFilename(), path }))));
    await p.getByRole('button', { name: 'Export the adapter on the model' }).click();
    await expect.poll(() => downloads.length, { timeout: 30_000 }).toBe(2);
    const files = Object.fromEntries((await Promise.all(downloads)).map((d) => [d.name, d.path]));
    expect(Object.keys(files).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
    const config = JSON.parse(readFileSync(files['adapter_config.json'], 'utf8')) as { r: number; lora_alpha: number; peft_type: string; target_modules: string[] };
    // The demo is not on the Hub: it is named by its own name, and the message says where it lives.
    expect(config).toMatchObject({ r: LORA_R, lora_alpha: 2 * LORA_R, peft_type: 'LORA', base_model_name_or_path: 'vlrl-demo' });
    expect(await p.getByTestId('adapters-message').textContent()).toMatch(/public\/demo folder/);
    expect([...config.target_modules].sort()).toEqual(['down_proj', 'gate_proj', 'k_proj', 'o_proj', 'q_proj', 'up_proj', 'v_proj']);
    const tensors = readSafetensors(readFileSync(files['adapter_model.safetensors']));
    const expected = new Map<string, number[]>();
    for (let l = 0; l < DEMO_LAYERS; l++) {
      for (const [proj, [out, inp]] of Object.entries(PROJ_SHAPES)) {
        const base = `base_model.model.model.language_model.layers.${l}.${proj}`;
        expected.set(`${base}.lora_A.weight`, [LORA_R, inp]);
        expected.set(`${base}.lora_B.weight`, [out, LORA_R]);
      }
    }
    expect(new Map([...tensors].map(([n, v]) => [n, v.shape]))).toEqual(expected);
    for (const [n, v] of tensors) expect(v.values.some((x) => x !== 0), `${n} is all zeros`).toBe(true);
    await screenshot(page, 'e2e-adapters');

    // Every panel: each operable control has an accessible name (Chromium's accessibility tree),
    // and Tab reaches every visible, enabled control.
    t = Date.now();
    let walked = 0;
    const tabs = await page.getByRole('tablist', { name: 'Panels' }).getByRole('tab').evaluateAll((els) => els.map((e) => e.getAttribute('data-panel') ?? ''));
    expect(tabs).toEqual(expect.arrayContaining(['model', 'data', 'rewards', 'train', 'eval', 'adapters', 'gpu']));
    for (const [i, id] of tabs.entries()) {
      // From the keyboard: Home on the tab list, then ArrowRight to each next tab.
      await page.locator(`#tab-${tabs[Math.max(0, i - 1)]}`).focus();
      await page.keyboard.press(i === 0 ? 'Home' : 'ArrowRight');
      p = panel(page, id);
      await p.locator('section').waitFor();
      const names = await accessibleNames(page);
      expect(names.nameless, `unnamed controls with the ${id} panel open`).toEqual([]);
      expect(names.operable).toBeGreaterThan(tabs.length);
      const walk = await unreachedByTab(page, p);
      expect(walk.unreached, `controls of the ${id} panel that Tab never reached`).toEqual([]);
      walked += walk.controls;
    }
    expect(walked).toBeGreaterThan(60);
    phase(`names and Tab walk (${walked} controls)`, t);

    // Reload: the run, both eval runs with their records, and the adapter are still there (IndexedDB);
    // the demo model reloads itself, from the weight cache.
    await page.reload();
    await page.locator('[role="tab"]').first().waitFor();
    p = await openPanel(page, 'model');
    await page.waitForFunction(`document.querySelector('[data-testid="model-loaded"]').textContent.startsWith('Loaded:')`, undefined, { timeout: LONG, polling: 250 });
    expect(await p.getByTestId('model-cache').textContent()).toMatch(/loaded from this browser's weight cache/);
    p = await openPanel(page, 'train');
    await p.getByTestId('train-runs').locator('tbody tr').first().waitFor({ timeout: 60_000 });
    expect(await p.getByTestId('train-runs').locator('tbody tr').first().textContent()).toMatch(/finished.*2 \/ 2/);
    p = await openPanel(page, 'eval');
    await p.getByTestId('eval-saved').locator('tbody tr').nth(1).waitFor({ timeout: 30_000 });
    expect(await p.getByTestId('eval-saved').locator('tbody tr').allTextContents()).toEqual([expect.stringMatching(/^after/), expect.stringMatching(/^baseline/)]);
    await p.getByRole('button', { name: 'Show the records of baseline' }).click();
    await expect.poll(() => evalRecords(p), { timeout: 30_000 }).toEqual(baseline); // filled after reading IndexedDB
    p = await openPanel(page, 'adapters');
    await p.getByTestId('adapters-list').locator('tbody tr[data-adapter^="run-"]').waitFor({ timeout: 30_000 });
    await screenshot(page, 'e2e-after-reload');

    // Offline: the model, the app and its workers came from this server alone.
    expect(requests.some((u) => u.endsWith('/demo/model.safetensors'))).toBe(true);
    expect(offOrigin(requests, app.url)).toEqual([]);
    console.log(`e2e: ${seconds(started)} in all, ${requests.length} requests, all to ${new URL(app.url).origin}`);
  }, 900_000);
});
