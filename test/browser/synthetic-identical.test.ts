// The synthetic tasks draw with the project's own rasterizer (src/data/raster.ts) in the browser
// as in Node, so that an image is the same everywhere (a canvas anti-aliases differently per
// browser and GPU). This checks it where it matters: the demo's held-out rows generated inside
// Chromium hash to the same bytes (id, question, answer, every RGBA pixel) as in Node.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { demoRows } from '../../src/data/demo';
import { servedApp } from '../helpers/browser';

const ROWS = 9;

describe('synthetic images in the browser (headless Chromium)', () => {
  const app = servedApp();

  it(`renders the demo's first ${ROWS} held-out rows byte for byte as Node does`, async () => {
    const node = demoRows('heldOut')
      .slice(0, ROWS)
      .map((row) => {
        const h = createHash('sha256');
        h.update(row.id).update(row.question).update(row.answer);
        for (const img of row.images) h.update(`${img.width}x${img.height}`).update(img.data);
        return h.digest('hex');
      });
    const page = await app.page();
    await page.goto(app.url);
    // (A string, not a function: vitest would rewrite a function's dynamic import.)
    const browser = (await page.evaluate(`import('/src/data/demo.ts').then(async (m) => {
      const enc = new TextEncoder();
      const out = [];
      for (const row of m.demoRows('heldOut').slice(0, ${ROWS})) {
        const parts = [enc.encode(row.id), enc.encode(row.question), enc.encode(row.answer)];
        for (const img of row.images) parts.push(enc.encode(img.width + 'x' + img.height), img.data);
        const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
        let at = 0;
        for (const p of parts) { all.set(p, at); at += p.length; }
        const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', all));
        out.push(Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join(''));
      }
      return out;
    })`)) as string[];
    expect(browser).toEqual(node);
  });
});
