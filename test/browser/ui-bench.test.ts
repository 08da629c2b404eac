// The benchmark page (bench.html, its own Vite entry and worker) in headless Chromium (WebGPU on SwiftShader): the 4-bit GEMV suite on the
// quick preset's first (smallest) weight without the option sweep (SwiftShader compiles shaders
// slowly), run from the keyboard, fills the table with our rows and onnxruntime-web's
// MatMulNBits beside them, whose output agrees with ours on the same weights and input; the
// result copies as Markdown with the same rows; a second run cancels.
import { describe, expect, it } from 'vitest';
import { benchShapes } from '../../src/bench/shapes';
import { screenshot, servedApp } from '../helpers/browser';

describe('Benchmark page', () => {
  const app = servedApp();

  it('runs the GEMV suite with onnxruntime-web beside it and copies the table', async () => {
    const page = await app.page();
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new URL(app.url).origin });
    await page.goto(`${app.url}bench.html`);
    const panel = page.locator('#panel-bench');
    await panel.locator('section').waitFor();

    // Only the GEMV suite: Space on the GEMM box (checked by default) clears it.
    const gemm = panel.getByRole('checkbox', { name: /4-bit GEMM/ });
    await gemm.focus();
    await page.keyboard.press('Space');
    expect(await gemm.isChecked()).toBe(false);
    expect(await panel.getByRole('checkbox', { name: /4-bit GEMV/ }).isChecked()).toBe(true);
    expect(await panel.getByLabel('Size preset').inputValue()).toBe('quick');
    await panel.getByLabel('GEMV and GEMM weight shapes').selectOption('one');
    const sweep = panel.getByRole('checkbox', { name: 'Try every kernel option' });
    await sweep.focus();
    await page.keyboard.press('Space');
    expect(await sweep.isChecked()).toBe(false);

    const run = panel.getByRole('button', { name: 'Run benchmark' });
    await run.focus();
    await page.keyboard.press('Enter');
    // Run is disabled while running: focus moves to Cancel, and back to Run at the end.
    expect(await page.evaluate(`document.activeElement.textContent`)).toBe('Cancel benchmark');
    await page.getByTestId('bench-progress').filter({ hasText: /^Done:/ }).waitFor({ timeout: 50_000 });
    expect(await page.evaluate(`document.activeElement.textContent`)).toBe('Run benchmark');
    expect(await page.getByTestId('bench-error').isHidden()).toBe(true);
    expect((await page.getByTestId('bench-adapter').textContent())?.toLowerCase()).toContain('swiftshader');

    const quick = benchShapes('quick').gemv;
    const rows = panel.locator('tbody tr[data-suite="gemv-q4"]');
    expect(await rows.count()).toBe(quick.rows.length);
    expect(await rows.first().getAttribute('data-key')).toBe(`gemv-q4|M${quick.rows[0]} N${quick.weights[0][0]} K${quick.weights[0][1]}`);
    // The read at full size, one small dispatch, and the read of the one weight's bytes.
    expect(await panel.locator('tbody tr[data-suite="memory"]').count()).toBe(3);
    const cells = (await rows.evaluateAll((trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent ?? '')))) as string[][];
    for (const c of cells) {
      // shape, ours ms, ours rate, of limit, setting, ORT ms, ORT rate, ratio, max rel diff
      expect(Number(c[2])).toBeGreaterThan(0);
      expect(c[3]).toMatch(/GB\/s$/);
      expect(c[4]).toMatch(/% of read$/);
      expect(Number(c[6]), `ORT ms of ${c[1]}: ${c[6]}`).toBeGreaterThan(0);
      expect(c[7]).toMatch(/GB\/s$/);
      expect(c[8]).toMatch(/×$/);
      expect(Number(c[9]), `ORT vs ours on ${c[1]}`).toBeLessThan(1e-4);
    }
    expect(await page.getByTestId('bench-peer').textContent()).toMatch(/onnxruntime-web 1\.\d+/);
    await screenshot(page, 'bench-gemv');

    await panel.getByRole('button', { name: 'Copy as Markdown' }).click();
    await page.getByTestId('bench-copied').filter({ hasText: 'Copied as Markdown.' }).waitFor();
    const md = (await page.evaluate(`navigator.clipboard.readText()`)) as string;
    expect(md).toContain('| suite | shape | ours ms |');
    expect(md.split('\n').filter((l) => l.startsWith('| gemv-q4 |'))).toHaveLength(cells.length);

    // Enter on Run, then Enter again on Cancel (where focus went): the run stops at its next
    // measurement, and the table keeps what it measured, marked cancelled.
    await run.focus();
    await page.keyboard.press('Enter');
    await page.keyboard.press('Enter');
    // A cancel waits for a shader compile in flight, which on a loaded SwiftShader takes tens of seconds.
    await page.getByTestId('bench-progress').filter({ hasText: /^Cancelled after \d+ rows\.$/ }).waitFor({ timeout: 180_000 });
    expect(await panel.getByTestId('bench-table').getAttribute('data-status')).toBe('cancelled');
    expect(await panel.locator('tbody tr[data-suite="gemv-q4"]').count()).toBeLessThan(quick.rows.length);
    expect(await page.getByTestId('bench-error').isHidden()).toBe(true);
  });
});
