import { describe, expect, it } from 'vitest';
import { screenshot, servedApp } from '../helpers/browser';

describe('app in headless Chromium (WebGPU on SwiftShader)', () => {
  const app = servedApp();

  it('shows the GPU adapter obtained in the worker, and remembers it across reloads', async () => {
    const page = await app.page();
    await page.goto(`${app.url}#gpu`);
    const name = page.getByTestId('adapter-name');
    await name.waitFor({ timeout: 120_000 });
    const text = (await name.textContent()) ?? '';
    expect(text.toLowerCase()).toContain('swiftshader');
    expect(await page.getByTestId('enabled-features').textContent()).toContain('subgroups');
    await screenshot(page, 'gpu-panel');

    // The worker stored it in IndexedDB; the page reads it back on its own.
    // (A string, not a function: vitest would rewrite a function's dynamic import.)
    const stored = await page.evaluate(`import('/src/store/db.ts').then(async (m) => (await m.lastAdapter())?.summary.name)`);
    expect(stored).toBe(text);
  });
});
