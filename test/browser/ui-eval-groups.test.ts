// The Eval panel's breakdown, in Chromium without a model: two eval files (as `eval --out` writes
// them) imported into the saved runs; the shown run's table by task/category and by image size
// class, under numeric tolerance and, after the toggle, strict answers; the before/after diff per
// group; and the JSON export with its summary and breakdown under the chosen match. Expected
// values come from src/eval/groups.ts over the same records, and a few by hand.
import { readFileSync } from 'node:fs';
import type { Locator } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { breakdown, compareByGroup, type EvalBreakdown } from '../../src/eval/groups';
import { evalRunToJson, summarize, type EvalRecord, type EvalRun } from '../../src/eval/records';
import { formatNumber } from '../../src/ui/format';
import { openApp, openPanel, tabTo, unlabelledControls } from '../helpers/appPanels';
import { screenshot, servedApp } from '../helpers/browser';

function record(id: string, task: string | null, size: EvalRecord['image_size'], correct: boolean, strict: boolean, format: boolean, reward: number): EvalRecord {
  return { id, sample: 0, prediction: correct ? '3' : '4', gold: '3', correct, correct_strict: strict, format_ok: format, task, image_size: size, reward, terms: [], completion: '', tokens: 3, terminated: true };
}

const BEFORE: EvalRecord[] = [
  record('a', 'count', 'small', true, true, true, 2),
  record('b', 'count', 'small', true, false, true, 1.3),
  record('c', 'chart', 'large', false, false, false, 0),
  record('d', 'chart', 'medium', false, false, true, 0.3),
];
// c and d fixed; b right either way after; a broken.
const AFTER: EvalRecord[] = [
  record('a', 'count', 'small', false, false, true, 0.3),
  record('b', 'count', 'small', true, true, true, 2),
  record('c', 'chart', 'large', true, true, true, 2),
  record('d', 'chart', 'medium', true, false, true, 1.3),
];

function run(id: string, label: string, records: EvalRecord[], createdAt: number): EvalRun {
  return {
    id,
    label,
    adapter: null,
    createdAt,
    status: 'complete',
    settings: { answerFormat: 'solution', answerMatch: 'numeric', sampling: { temperature: 0, topP: 1, topK: 0, maxNewTokens: 8, seed: 0 }, samplesPerRow: 1, terms: [] },
    records,
    summary: summarize(records),
  };
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const cells = (table: Locator) => table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('th, td')].map((c) => c.textContent)));
const expectedRows = (b: EvalBreakdown['by_task']) => b.map((g) => [g.group, String(g.samples), pct(g.accuracy), pct(g.format_compliance), formatNumber(g.mean_reward)]);

describe('eval panel: by task and image size, strict or numeric answers, per-group diff (no model)', () => {
  const app = servedApp();

  it('imports two runs, breaks each down by group under either match, diffs them per group and exports the breakdown', async () => {
    const page = await app.page();
    await openApp(page, `${app.url}#eval`);
    const p = await openPanel(page, 'eval');
    const importer = p.getByLabel('Import eval JSON');
    const before = run('eval-before', 'before', BEFORE, 1000);
    const after = run('eval-after', 'after', AFTER, 2000);
    for (const r of [before, after]) await importer.setInputFiles({ name: `${r.id}.json`, mimeType: 'application/json', buffer: Buffer.from(evalRunToJson(r)) });
    await p.getByTestId('eval-saved').locator('tbody tr').nth(1).waitFor();
    expect(await p.getByTestId('eval-error').isHidden()).toBe(true);

    // The last import is shown: its breakdown under numeric tolerance.
    await expect.poll(() => p.getByTestId('eval-summary').textContent()).toMatch(/^after: 4 samples over 4 rows: accuracy 75\.0%.*\(numeric tolerance\)$/);
    expect(await cells(p.getByTestId('eval-by-task'))).toEqual(expectedRows(breakdown(AFTER, 'numeric').by_task));
    expect(await cells(p.getByTestId('eval-by-image-size'))).toEqual(expectedRows(breakdown(AFTER, 'numeric').by_image_size));
    // By hand: chart is right on both rows with tolerance; small holds a and b; sizes smallest first.
    expect((await cells(p.getByTestId('eval-by-task')))[1].slice(0, 3)).toEqual(['chart', '2', '100.0%']);
    expect((await cells(p.getByTestId('eval-by-image-size'))).map((r) => r[0])).toEqual(['small', 'medium', 'large']);
    const dCorrect = p.getByTestId('eval-records').locator('tr[data-id="d"] td').nth(3);
    expect(await dCorrect.textContent()).toBe('yes');

    // Strict answers: d's 3.0-style answer no longer counts.
    const match = p.getByLabel('Answer match');
    await match.selectOption('strict');
    await expect.poll(() => p.getByTestId('eval-summary').textContent()).toMatch(/accuracy 50\.0%.*\(strict answers\)$/);
    expect(await cells(p.getByTestId('eval-by-task'))).toEqual(expectedRows(breakdown(AFTER, 'strict').by_task));
    expect((await cells(p.getByTestId('eval-by-task')))[1].slice(0, 3)).toEqual(['chart', '2', '50.0%']);
    expect(await dCorrect.textContent()).toBe('no');

    // Before/after per group, under strict answers.
    await p.getByLabel('Before', { exact: true }).selectOption('eval-before');
    await p.getByLabel('After', { exact: true }).selectOption('eval-after');
    await tabTo(page, p.getByRole('button', { name: 'Compare' }));
    await page.keyboard.press('Enter');
    const byTask = p.getByTestId('eval-diff-by-task');
    await byTask.waitFor();
    const diff = compareByGroup(before, after, 'task', 'strict');
    const signedPp = (d: number) => `${d >= 0 ? '+' : ''}${(100 * d).toFixed(1)} pp`;
    expect((await cells(byTask)).map((r) => r.slice(0, 5))).toEqual(diff.map((g) => [g.group, `${g.samples.before} / ${g.samples.after}`, pct(g.accuracy.before), pct(g.accuracy.after), signedPp(g.accuracy.delta)]));
    // By hand: count 50% → 50% (a broken, b fixed), chart 0% → 50% (c fixed).
    expect((await cells(byTask)).map((r) => [r[0], r[2], r[3], r[4]])).toEqual([
      ['count', '50.0%', '50.0%', '+0.0 pp'],
      ['chart', '0.0%', '50.0%', '+50.0 pp'],
    ]);
    expect((await cells(p.getByTestId('eval-diff-by-image-size'))).map((r) => r[0])).toEqual(['small', 'medium', 'large']);
    expect(await p.getByTestId('eval-diff-counts').textContent()).toBe('Fixed 2, broken 1, unchanged 1.');
    // Back to numeric tolerance: the comparison is counted again (d was fixed there too).
    await match.selectOption('numeric');
    await expect.poll(async () => (await cells(byTask)).map((r) => [r[0], r[3]])).toEqual([
      ['count', '50.0%'],
      ['chart', '100.0%'],
    ]);
    expect(await p.getByTestId('eval-diff-counts').textContent()).toBe('Fixed 2, broken 1, unchanged 1.');
    await screenshot(page, 'ui-eval-groups');
    expect(await unlabelledControls(page)).toEqual([]);

    // Export under strict answers: summary and breakdown counted that way.
    await match.selectOption('strict');
    const download = page.waitForEvent('download');
    await tabTo(page, p.getByRole('button', { name: 'Export before as JSON' }));
    await page.keyboard.press('Enter');
    const file = await download;
    const exported = JSON.parse(readFileSync((await file.path())!, 'utf8')) as EvalRun & { breakdown: EvalBreakdown };
    expect(exported.settings.answerMatch).toBe('strict');
    expect(exported.summary.accuracy).toBe(0.25);
    expect(exported.breakdown).toEqual(breakdown(BEFORE, 'strict'));
  }, 300_000);
});
