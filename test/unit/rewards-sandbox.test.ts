import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { resolveConfig } from 'vite';
import { afterAll, describe, expect, it } from 'vitest';
import { CONTENT_SECURITY_POLICY, HUB_CONNECT_SOURCES } from '../../src/rewards/contentSecurityPolicy';
import { presetTerms, scoreSamples } from '../../src/rewards/registry';
import { CustomRewardSandbox, type SandboxPort } from '../../src/rewards/sandbox';
import { createNodeSandbox, spawnNodeSandbox } from '../../src/rewards/sandboxNode';
import { BROWSER_BLOCKED_GLOBALS, browserWorkerSource, makeCaller, rewardScript } from '../../src/rewards/sandboxWorker';
import { countingServer } from '../helpers/countingServer';

// Room for a fresh worker's start and compile on a busy 2-core CI machine (400 ms was exceeded there).
const TIME_LIMIT_MS = 1500;
const sandbox = createNodeSandbox({ timeLimitMs: TIME_LIMIT_MS });
afterAll(() => sandbox.dispose());

const items = [
  { completion: '<SOLUTION>3</SOLUTION>', answer: '3', index: 0 },
  { completion: 'no tags at all', answer: '4', index: 1 },
];

describe('custom reward sandbox (Node worker_threads)', () => {
  it('runs a good arrow expression, a function body and a bare expression on a batch', async () => {
    const arrow = await sandbox.evaluate('(completion, answer) => completion.includes(answer) ? 1 : -1', items);
    expect(arrow).toEqual([{ value: 1, error: null }, { value: -1, error: null }]);
    const body = await sandbox.evaluate('const n = completion.length;\nreturn n + context.index;', items);
    expect(body.map((r) => r.value)).toEqual([items[0].completion.length, items[1].completion.length + 1]);
    const expr = await sandbox.evaluate('answer.length * 0.5 // trailing comment', items);
    expect(expr.map((r) => r.value)).toEqual([0.5, 0.5]);
    const fn = await sandbox.evaluate('function r(c, a) { return Number(a) }', items);
    expect(fn.map((r) => r.value)).toEqual([3, 4]);
  });

  it('gives 0 and a message for throws, NaN, Infinity, strings, undefined and promises', async () => {
    const cases: [string, RegExp][] = [
      ['() => { throw new Error("bad gold") }', /threw Error: bad gold/],
      ['() => { throw "plain" }', /threw plain/],
      ['() => NaN', /returned NaN, not a finite number/],
      ['() => 1 / 0', /returned Infinity/],
      ['() => "1.0"', /returned a string \("1.0"\)/],
      ['() => {}', /returned undefined/],
      ['async () => 1', /returned a Promise/],
      ['() => true', /returned a boolean/],
    ];
    for (const [source, message] of cases) {
      const [result] = await sandbox.evaluate(source, items.slice(0, 1));
      expect(result.value, source).toBe(0);
      expect(result.error, source).toMatch(message);
    }
  });

  it('reports a compile error for every sample', async () => {
    const results = await sandbox.evaluate('(completion => {', items);
    for (const r of results) {
      expect(r.value).toBe(0);
      expect(r.error).toMatch(/^compile error: SyntaxError/);
    }
  });

  it('stops an endless loop at the time limit, keeps the other samples, and works afterwards', async () => {
    const restarts = sandbox.restarts;
    const source = '(c, a) => { if (a === "loop") for (;;) {} return Number(a); }';
    const batch = [1, 'loop', 2, 'loop', 3].map((a) => ({ completion: '', answer: String(a) }));
    const start = performance.now();
    const results = await sandbox.evaluate(source, batch);
    const elapsed = performance.now() - start;
    expect(results.map((r) => r.value)).toEqual([1, 0, 2, 0, 3]);
    expect(results[1].error).toMatch(`timed out after ${TIME_LIMIT_MS} ms`);
    expect(results[3].error).toMatch(/timed out/);
    expect(sandbox.restarts - restarts).toBe(2);
    expect(elapsed).toBeGreaterThanOrEqual(2 * TIME_LIMIT_MS - 20);
    expect(elapsed).toBeLessThan(2 * TIME_LIMIT_MS + 10_000); // two restarts, not a hang
    const after = await sandbox.evaluate('() => 7', items);
    expect(after.map((r) => r.value)).toEqual([7, 7]);
  });

  it('charges a loop in a promise callback to the sample that queued it', async () => {
    const source = '(c, a) => { if (a === "later") Promise.resolve().then(() => { for (;;) {} }); return 1; }';
    const results = await sandbox.evaluate(source, ['now', 'later', 'now'].map((a) => ({ completion: '', answer: a })));
    expect(results.map((r) => r.value)).toEqual([1, 0, 1]);
    expect(results[1].error).toMatch(/timed out/);
  });

  it('keeps user code away from require, process, fetch, timers, eval and import()', async () => {
    const probes = ['typeof require', 'typeof process', 'typeof fetch', 'typeof setTimeout', 'typeof globalThis.postMessage', 'typeof queueMicrotask'];
    const source = `() => { throw new Error([${probes.join(', ')}].join(',')) }`;
    const [probe] = await sandbox.evaluate(source, items.slice(0, 1));
    expect(probe.error).toBe(`threw Error: ${probes.map(() => 'undefined').join(',')}`);
    // String code generation is off, as under the browser's policy: no way back to the worker's realm.
    const [evaluated] = await sandbox.evaluate("() => (function () {}).constructor('return typeof process')()", items.slice(0, 1));
    expect(evaluated.error).toMatch(/^threw EvalError/);
    const [escape] = await sandbox.evaluate('(c, a, ctx) => ctx.constructor.constructor("return typeof process")()', items.slice(0, 1));
    expect(escape.error).toMatch(/^threw EvalError/);
    const [dynamic] = await sandbox.evaluate('() => { import("node:fs"); return 1 }', items.slice(0, 1));
    expect(dynamic.value).toBe(1); // the import() promise rejects inside the sandbox; it never loads fs
    const [next] = await sandbox.evaluate('() => 3', items.slice(0, 1));
    expect(next).toEqual({ value: 3, error: null });
  });

  it('loads nothing through import(): no module runs, no request reaches a local server', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vlrl-sandbox-'));
    const marker = join(dir, 'ran');
    const module = join(dir, 'side-effect.mjs');
    writeFileSync(module, `import { writeFileSync } from 'node:fs';\nwriteFileSync(${JSON.stringify(marker)}, 'x');\n`);
    const server = await countingServer();
    try {
      const targets = [pathToFileURL(module).href, `${server.url}x.js`];
      const source = `(c, a) => { import(a).catch(() => undefined); return 1 }`;
      const results = await sandbox.evaluate(source, targets.map((answer) => ({ completion: '', answer })));
      expect(results.map((r) => r.value)).toEqual([1, 1]);
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(existsSync(marker)).toBe(false);
      expect(server.requests).toEqual([]);
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('survives user code that kills its worker (out of memory) and carries on', async () => {
    const big = createNodeSandbox({ timeLimitMs: 20_000 });
    try {
      const source = '(c, a) => { if (a === "oom") { const xs = []; for (;;) xs.push(new Array(1e6).fill(1)); } return 1; }';
      const results = await big.evaluate(source, ['x', 'oom', 'y'].map((a) => ({ completion: '', answer: a })));
      expect(results.map((r) => r.value)).toEqual([1, 0, 1]);
      expect(results[1].error).toMatch(/sandbox worker died/);
    } finally {
      big.dispose();
    }
  });

  it('ends a batch in flight when disposed, without starting another worker', async () => {
    const spawned: number[] = [];
    const doomed = new CustomRewardSandbox(() => (spawned.push(1), spawnNodeSandbox()), { timeLimitMs: 60_000 });
    await doomed.evaluate('() => 1', items); // the worker is up
    const running = doomed.evaluate('(c, a) => { if (a === "loop") for (;;) {} return 1 }', ['x', 'loop', 'y'].map((a) => ({ completion: '', answer: a })));
    await new Promise((resolve) => setTimeout(resolve, 300));
    doomed.dispose();
    const results = await running;
    expect(results.map((r) => r.value)).toEqual([1, 0, 0]);
    expect(results[1].error).toMatch(/disposed/);
    expect(results[2].error).toBe('the sandbox was disposed');
    expect(spawned.length).toBe(2); // one worker per batch, none after dispose()
  });

  it('gives every sample a message when no worker starts', async () => {
    const broken = new CustomRewardSandbox(
      () => {
        const port = spawnNodeSandbox();
        return { ...port, onMessage: () => undefined }; // 'ready' never arrives
      },
      { startLimitMs: 300 },
    );
    const results = await broken.evaluate('() => 1', items);
    expect(results).toEqual(items.map(() => ({ value: 0, error: 'the sandbox worker did not start within 300 ms' })));
    broken.dispose();
    await expect(broken.evaluate('() => 1', items)).rejects.toThrow(/after dispose/);
  });

  it('adds custom terms to the weighted sum, errors kept per sample', async () => {
    const terms = [...presetTerms('seeds'), { name: 'short', weight: 0.5, source: '(c) => { if (c.length > 20) throw new Error("too long"); return 1 }' }];
    const scores = await scoreSamples(terms, items, sandbox);
    const [first, second] = scores;
    expect(first.terms.map((t) => t.value)).toEqual([1, 2, 0]);
    expect(first.terms[2].error).toBe('threw Error: too long');
    expect(first.total).toBeCloseTo(0.3 * 1 + 2, 12);
    expect(second.terms.map((t) => t.value)).toEqual([0, 0, 1]);
    expect(second.terms[2].error).toBeUndefined();
    expect(second.total).toBeCloseTo(0.5, 12);
    await expect(scoreSamples(terms, items)).rejects.toThrow(/needs a sandbox/);
  });
});


describe('custom reward isolation (Node worker_threads)', () => {
  it('gives every batch a fresh realm: globals changed in one batch or term are gone in the next', async () => {
    const counter = '(c, a) => (globalThis.n = (globalThis.n ?? 0) + 1)';
    const twice = [{ completion: '', answer: '' }, { completion: '', answer: '' }];
    expect((await sandbox.evaluate(counter, twice)).map((r) => r.value)).toEqual([1, 2]);
    expect((await sandbox.evaluate(counter, twice)).map((r) => r.value)).toEqual([1, 2]);
    const terms = [
      { name: 'poison', weight: 1, source: '() => { Math.max = () => 42; return 0 }' },
      { name: 'max', weight: 1, source: '(c, a) => Math.max(1, Number(a))' },
    ];
    const [score] = await scoreSamples(terms, [{ completion: '', answer: '2' }], sandbox);
    expect(score.terms.map((t) => t.value)).toEqual([0, 2]);
    const [after] = await sandbox.evaluate('(c, a) => Math.max(1, Number(a))', [{ completion: '', answer: '3' }]);
    expect(after).toEqual({ value: 3, error: null });
  });

  it('refuses NaN and Infinity whatever user code does to Number.isFinite', async () => {
    const source = '(c, a) => { Number.isFinite = () => true; globalThis.isFinite = () => true; return Number(a) }';
    const results = await sandbox.evaluate(source, ['NaN', 'Infinity', '-Infinity', '2'].map((answer) => ({ completion: '', answer })));
    expect(results).toEqual([
      { value: 0, error: 'returned NaN, not a finite number' },
      { value: 0, error: 'returned Infinity, not a finite number' },
      { value: 0, error: 'returned -Infinity, not a finite number' },
      { value: 2, error: null },
    ]);
  });

  it('runs terms side by side: one that hangs its worker does not hold up another', async () => {
    const slow = createNodeSandbox({ timeLimitMs: 3000 });
    try {
      const finished: string[] = [];
      const hang = slow.evaluate('() => { for (;;) {} }', items.slice(0, 1)).then((r) => (finished.push('hang'), r));
      const quick = slow.evaluate('() => 5', items.slice(0, 1)).then((r) => (finished.push('quick'), r));
      const [hung, fine] = await Promise.all([hang, quick]);
      expect(finished).toEqual(['quick', 'hang']);
      expect(fine).toEqual([{ value: 5, error: null }]);
      expect(hung[0].error).toMatch(/timed out after 3000 ms/);
    } finally {
      slow.dispose();
    }
  });

  it('leaves no microtask flood behind: the next batch runs at once', async () => {
    const flood = '(c, a) => { const f = () => Promise.resolve().then(f); f(); return 1 }';
    expect(await sandbox.evaluate(flood, items.slice(0, 1))).toEqual([{ value: 1, error: null }]);
    const start = performance.now();
    expect(await sandbox.evaluate('() => 2', items.slice(0, 1))).toEqual([{ value: 2, error: null }]);
    expect(performance.now() - start).toBeLessThan(TIME_LIMIT_MS);
  });
});

/** A port whose worker says 'ready' and then answers each run with `reply(request id)`. */
function scriptedPort(reply: (id: number) => unknown[]): SandboxPort {
  let onMessage: (m: unknown) => void = () => undefined;
  return {
    post: (request) => queueMicrotask(() => reply(request.id).forEach((m) => onMessage(m))),
    onMessage: (handler) => {
      onMessage = handler;
      queueMicrotask(() => handler({ type: 'ready' }));
    },
    onFailure: () => undefined,
    terminate: () => undefined,
  };
}

describe('custom reward results are checked by the host', () => {
  const two = [{ completion: '', answer: '' }, { completion: '', answer: '' }];
  const run = (reply: (id: number) => unknown[]) =>
    new CustomRewardSandbox(() => scriptedPort(reply), { timeLimitMs: 200 }).evaluate('() => 1', two);

  it('refuses non-finite and non-number values a worker reports as rewards', async () => {
    const results = await run((id) => [
      { type: 'item', id, at: 0, value: Number.NaN, error: null },
      { type: 'item', id, at: 1, value: '7', error: null },
    ]);
    expect(results[0]).toEqual({ value: 0, error: 'returned NaN, not a finite number' });
    expect(results[1]).toEqual({ value: 0, error: 'the sandbox worker sent a malformed result (it was stopped)' });
  });

  it('refuses results out of order, a batch ended early and unknown messages, per sample', async () => {
    const skipped = await run((id) => [{ type: 'item', id, at: 1, value: 1, error: null }]);
    expect(skipped[0].error).toBe('the sandbox worker sent a malformed result (it was stopped)');
    const early = await run((id) => [{ type: 'item', id, at: 0, value: 3, error: null }, { type: 'done', id }]);
    expect(early[0]).toEqual({ value: 3, error: null });
    expect(early[1].error).toBe('the sandbox worker ended the batch before this sample (it was stopped)');
    const odd = await run(() => ['ready?', { type: 'item' }]);
    expect(odd.map((r) => r.error)).toEqual([
      'the sandbox worker sent an unexpected message (it was stopped)',
      'the sandbox worker sent an unexpected message (it was stopped)',
    ]);
  });
});

describe('browser worker source', () => {
  /** Runs the generated worker source against a stand-in global with the blocked names on it. */
  function standIn() {
    const posted: unknown[] = [];
    const scripts = new Map<string, string>();
    let handler: ((e: { data: unknown }) => Promise<void>) | undefined;
    class Scope {
      fetch() { return 'network'; }
      close() { return 'closed'; }
    }
    const scope = Object.assign(new Scope(), {
      XMLHttpRequest: class {},
      indexedDB: {},
      caches: {},
      FontFace: class {},
      setTimeout: () => 0,
      SyntaxError,
      Blob: class { constructor(readonly parts: string[]) {} },
      URL: {
        createObjectURL: (blob: { parts: string[] }) => {
          const url = `blob:${scripts.size}`;
          scripts.set(url, blob.parts.join(''));
          return url;
        },
        revokeObjectURL: (url: string) => scripts.delete(url),
      },
      importScripts: (url: string) => new Function('self', scripts.get(url)!)(scope),
      postMessage: (m: unknown) => posted.push(m),
      addEventListener: (_: string, h: (e: { data: unknown }) => Promise<void>) => (handler = h),
    });
    new Function('self', browserWorkerSource())(scope);
    const send = (source: string) => handler!({ data: { type: 'run', id: 1, source, items: [{ completion: 'ab', answer: '' }] } });
    return { scope, posted, scripts, send };
  }

  it('strips network, storage, messaging, close() and Blob URLs before user code runs', () => {
    const { scope, posted } = standIn();
    expect(posted).toEqual([{ type: 'ready' }]);
    for (const name of ['fetch', 'XMLHttpRequest', 'indexedDB', 'caches', 'importScripts', 'postMessage', 'close', 'FontFace', 'setTimeout']) {
      expect(BROWSER_BLOCKED_GLOBALS, name).toContain(name);
      expect(Reflect.get(scope, name), name).toBeUndefined();
    }
    expect(Reflect.get(scope.URL, 'createObjectURL')).toBeUndefined();
  });

  it('loads user code as an expression, else as a body, revokes its Blob URL and posts raw numbers', async () => {
    const { posted, scripts, send } = standIn();
    await send('(c) => c.length');
    await send('const n = completion.length; return n * 2;');
    await send('() => NaN');
    await send('return (');
    expect(scripts.size).toBe(0);
    expect(posted.slice(1)).toEqual([
      { type: 'item', id: 1, at: 0, value: 2, error: null },
      { type: 'done', id: 1 },
      { type: 'item', id: 1, at: 0, value: 4, error: null },
      { type: 'done', id: 1 },
      { type: 'item', id: 1, at: 0, value: Number.NaN, error: null },
      { type: 'done', id: 1 },
      { type: 'compile-error', id: 1, message: expect.stringMatching(/^SyntaxError/) },
    ]);
  });

  it('writes a strict reward of (completion, answer, context), context built in its own realm', () => {
    const load = (source: string, form: 'expression' | 'body') => {
      const slot: { reward?: (c: string, a: string, ctx: object) => unknown } = {};
      new Function('slot', rewardScript(source, form, 'slot.reward'))(slot);
      return makeCaller()(slot.reward!, form === 'expression');
    };
    expect(load('(c, a, ctx) => ctx.index + ctx.prompt.length', 'expression')('', '', 'abc', 2)).toBe(5);
    expect(load('return this === undefined ? 1 : 0', 'body')('', '', undefined, undefined)).toBe(1);
    expect(load('answer.length * 0.5 // trailing comment', 'expression')('', 'ab', undefined, undefined)).toBe(1);
    expect(() => load('return (', 'body')).toThrow(SyntaxError);
  });
});

describe('Content-Security-Policy', () => {
  it('allows only the app, the hub (connect-src) and local data; no eval, no remote script, font or image', () => {
    const directives = new Map(CONTENT_SECURITY_POLICY.split(';').map((d) => {
      const [name, ...sources] = d.trim().split(/\s+/);
      return [name, sources] as const;
    }));
    expect(directives.get('default-src')).toEqual(["'self'"]);
    expect(directives.get('connect-src')).toEqual(["'self'", ...HUB_CONNECT_SOURCES]);
    for (const [name, sources] of directives) {
      if (name === 'connect-src') continue;
      for (const source of sources) expect(["'self'", "'none'", "'wasm-unsafe-eval'", "'unsafe-inline'", 'blob:', 'data:'], `${name} ${source}`).toContain(source);
      if (name !== 'style-src') expect(sources, name).not.toContain("'unsafe-inline'");
    }
    expect(directives.get('script-src')).not.toContain('data:');
  });

  it('is sent by the dev and preview servers that vite.config.ts configures', async () => {
    for (const preview of [false, true]) {
      const config = await resolveConfig({ logLevel: 'silent' }, 'serve', 'production', 'production', preview);
      expect(config.server.headers?.['Content-Security-Policy'], `preview ${preview}`).toBe(CONTENT_SECURITY_POLICY);
      expect(config.preview.headers?.['Content-Security-Policy'], `preview ${preview}`).toBe(CONTENT_SECURITY_POLICY);
    }
  });
});
