import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONTENT_SECURITY_POLICY } from '../../src/rewards/contentSecurityPolicy';
import { startApp, type AppSession } from '../helpers/browser';
import { countingServer, type CountingServer } from '../helpers/countingServer';

// The custom-reward sandbox in headless Chromium, in the app as Vite serves it (its real
// Content-Security-Policy). An HTTP server on another port of 127.0.0.1 stands for the outside
// world and counts what reaches it: user code, the page and workers under the policy reach it
// zero times. Sandbox workers here outlive their batch by HOLD_MS (test/helpers/sandboxProbes.ts),
// so that a request started by user code would have time to go out were it allowed.
// (Browser code is passed as strings, not functions: vitest would rewrite a function's import().)
const HOLD_MS = 1500;

describe('custom reward sandbox in Chromium', () => {
  let app: AppSession;
  let outside: CountingServer;
  beforeAll(async () => {
    app = await startApp();
    outside = await countingServer();
  });
  afterAll(async () => {
    await app?.close();
    await outside?.close();
  });

  /** A page of the app under its policy; 'Refused to' console lines are collected. */
  async function appPage(): Promise<{ page: Page; refused: string[] }> {
    const page = await app.page({ enforceCsp: true });
    const refused: string[] = [];
    page.on('console', (m) => m.text().includes('Refused to') && refused.push(m.text()));
    await page.goto(app.url);
    return { page, refused };
  }

  /** Waits for requests that are on their way, then returns what reached the outside server. */
  async function reached(): Promise<string[]> {
    await new Promise((resolve) => setTimeout(resolve, HOLD_MS + 500));
    return [...outside.requests];
  }

  it('serves the page and worker scripts with the policy, and the app starts under it', async () => {
    const page = await fetch(app.url);
    expect(page.headers.get('content-security-policy')).toBe(CONTENT_SECURITY_POLICY);
    const worker = await fetch(`${app.url}src/worker/engine.worker.ts?worker_file&type=module`);
    expect(worker.status).toBe(200);
    expect(worker.headers.get('content-security-policy')).toBe(CONTENT_SECURITY_POLICY);

    const { page: tab, refused } = await appPage();
    // The engine worker starts and reaches the GPU. (Polled from here: waitForFunction uses eval.)
    const gpu = tab.getByTestId('status-gpu');
    await expect.poll(async () => (await gpu.textContent())?.toLowerCase(), { timeout: 120_000, interval: 500 }).toContain('swiftshader');
    // The page carries the policy as a <meta> tag too, ahead of every script (so the build has it).
    expect(await tab.evaluate(`document.head.firstElementChild.outerHTML.startsWith('<meta http-equiv="Content-Security-Policy"') && document.head.firstElementChild.content`)).toBe(CONTENT_SECURITY_POLICY);
    expect(refused).toEqual([]);
  });

  it('lets user code reach nothing: import(), fetch, FontFace, Image, importScripts, XHR, WebSocket, beacons', async () => {
    const { page } = await appPage();
    const before = outside.requests.length;
    const source = `(c, t) => {
      const tries = [
        () => import(t + 'import.js'),
        () => fetch(t + 'fetch'),
        () => new FontFace('f', 'url(' + t + 'font)').load(),
        () => { const image = new Image(); image.src = t + 'image'; },
        () => importScripts(t + 'script.js'),
        () => new XMLHttpRequest(),
        () => new WebSocket(t.replace('http', 'ws') + 'ws'),
        () => new EventSource(t + 'events'),
        () => navigator.sendBeacon(t + 'beacon'),
      ];
      let thrown = 0;
      for (const f of tries) {
        try {
          const p = f();
          if (p && typeof p.catch === 'function') p.catch(() => undefined);
        } catch {
          thrown++;
        }
      }
      return thrown;
    }`;
    const results = await page.evaluate(`import('/test/helpers/sandboxProbes.ts').then(async (m) => {
      const sandbox = m.heldSandbox(${HOLD_MS}, 2000);
      const results = await sandbox.evaluate(${JSON.stringify(source)}, [{ completion: '', answer: ${JSON.stringify(outside.url)} }]);
      await new Promise((resolve) => setTimeout(resolve, ${HOLD_MS + 200}));
      return results;
    })`);
    // Everything but import() is gone from the worker's scope; import() is syntax, refused by the policy.
    expect(results).toEqual([{ value: 8, error: null }]);
    expect((await reached()).slice(before)).toEqual([]);
  });

  it('the policy alone stops every way out: in the page, and in Blob workers of the page and of a module worker', async () => {
    const { page } = await appPage();
    const before = outside.requests.length;
    const target = JSON.stringify(outside.url);
    const inPage = await page.evaluate(`(async () => {
      const t = ${target};
      const out = {};
      const attempt = async (name, f) => {
        try { await f(); out[name] = 'reached'; } catch { out[name] = 'blocked'; }
      };
      const loads = (element, url) => new Promise((ok, fail) => {
        element.onload = ok;
        element.onerror = fail;
        element.src = url;
        if (!element.isConnected && element instanceof HTMLElement) document.body.append(element);
      });
      await attempt('import', () => import(t + 'page-import.js'));
      await attempt('fetch', () => fetch(t + 'page-fetch', { mode: 'no-cors' }));
      await attempt('font', () => new FontFace('p', 'url(' + t + 'page-font)').load());
      await attempt('Image()', () => loads(new Image(), t + 'page-image'));
      await attempt('img', () => loads(document.createElement('img'), t + 'page-img'));
      await attempt('script', () => loads(document.createElement('script'), t + 'page-script.js'));
      return out;
    })()`);
    expect(inPage).toEqual({ import: 'blocked', fetch: 'blocked', font: 'blocked', 'Image()': 'blocked', img: 'blocked', script: 'blocked' });

    const blocked = { import: 'blocked', 'import-data': 'blocked', fetch: 'blocked', font: 'blocked', importScripts: 'blocked', xhr: 'blocked', websocket: 'blocked', eventsource: 'blocked' };
    const fromPage = (await page.evaluate(`import('/test/helpers/sandboxProbes.ts').then((m) => m.probeInBlobWorker(${target}))`)) as { attempts: object; violations: string[] };
    expect(fromPage.attempts).toEqual(blocked);
    expect(new Set(fromPage.violations)).toEqual(new Set(['script-src-elem', 'connect-src', 'font-src']));

    const inModuleWorker = (request: object) =>
      page.evaluate(`new Promise((resolve, reject) => {
        const worker = new Worker('/test/helpers/cspProbeWorker.ts', { type: 'module' });
        worker.onmessage = (e) => { resolve(e.data); worker.terminate(); };
        worker.onerror = (e) => reject(new Error(e.message));
        worker.postMessage(${JSON.stringify(request)});
      })`);
    const fromWorker = (await inModuleWorker({ kind: 'probe', target: outside.url })) as { attempts: object };
    expect(fromWorker.attempts).toEqual(blocked);
    const sandboxed = await inModuleWorker({
      kind: 'sandbox',
      source: '(c, t) => { import(t + "from-module-worker.js").catch(() => undefined); return 1 }',
      answers: [outside.url],
      holdMs: HOLD_MS,
    });
    expect(sandboxed).toEqual([{ value: 1, error: null }]);
    expect((await reached()).slice(before)).toEqual([]);
  });

  it('keeps terms and batches apart, checks results outside user code, and enforces the time limit', async () => {
    const { page } = await appPage();
    const out = (await page.evaluate(`import('/src/rewards/sandboxBrowser.ts').then(async (m) => {
      const sandbox = m.createBrowserSandbox({ timeLimitMs: 1500 });
      const items = (...answers) => answers.map((answer) => ({ completion: '', answer }));
      const finite = await sandbox.evaluate('(c, a) => { Number.isFinite = () => true; self.isFinite = () => true; return Number(a) }', items('NaN', 'Infinity', '2'));
      const [poison, max] = await Promise.all([
        sandbox.evaluate('() => { Math.max = () => 42; return 0 }', items('')),
        sandbox.evaluate('(c, a) => Math.max(1, Number(a))', items('2')),
      ]);
      const maxLater = await sandbox.evaluate('(c, a) => Math.max(1, Number(a))', items('3'));
      const counter = '() => (self.n = (self.n ?? 0) + 1)';
      const counts = [await sandbox.evaluate(counter, items('', '')), await sandbox.evaluate(counter, items('', ''))];
      const [closed, beside] = await Promise.all([
        sandbox.evaluate('() => { self.close(); return 1 }', items('')),
        sandbox.evaluate('() => 4', items('', '')),
      ]);
      const flood = await sandbox.evaluate('() => { const f = () => Promise.resolve().then(f); f(); return 1 }', items(''));
      const start = performance.now();
      const afterFlood = await sandbox.evaluate('() => 2', items(''));
      const afterFloodMs = performance.now() - start;
      const loop = await sandbox.evaluate('(c, a) => { if (a === "loop") for (;;) {} return Number(a) * 2 }', items('1', 'loop', '3'));
      const restarts = sandbox.restarts;
      sandbox.dispose();
      return { finite, poison, max, maxLater, counts, closed, beside, flood, afterFlood, afterFloodMs, loop, restarts };
    })`)) as Record<string, { value: number; error: string | null }[]> & { afterFloodMs: number; restarts: number; counts: { value: number }[][] };
    expect(out.finite).toEqual([
      { value: 0, error: 'returned NaN, not a finite number' },
      { value: 0, error: 'returned Infinity, not a finite number' },
      { value: 2, error: null },
    ]);
    expect(out.poison).toEqual([{ value: 0, error: null }]);
    expect(out.max).toEqual([{ value: 2, error: null }]);
    expect(out.maxLater).toEqual([{ value: 3, error: null }]);
    expect(out.counts.map((batch) => batch.map((r) => r.value))).toEqual([[1, 2], [1, 2]]);
    expect(out.closed).toEqual([{ value: 0, error: 'threw TypeError: self.close is not a function' }]);
    expect(out.beside).toEqual([{ value: 4, error: null }, { value: 4, error: null }]);
    expect(out.flood).toEqual([{ value: 1, error: null }]);
    expect(out.afterFlood).toEqual([{ value: 2, error: null }]);
    expect(out.afterFloodMs).toBeLessThan(1500);
    expect(out.loop.map((r) => r.value)).toEqual([2, 0, 6]);
    expect(out.loop[1].error).toMatch(/^timed out after 1500 ms/);
    expect(out.restarts).toBe(1);
  });
});
