// The worker side of the custom-reward sandbox, and the protocol both sides speak.
//
// The functions below run inside the worker, not in this module: they are turned into source text
// with Function.prototype.toString, so each must be self-contained (no imports, no references to
// anything else in this file, nothing but standard JavaScript builtins).
//
// Protocol: every batch gets a worker of its own (a fresh realm: nothing user code changed in one
// batch or one term is seen by another). The worker answers 'ready' once at start; the host posts
// one RunRequest; the worker answers 'compile-error', or one 'item' per sample in order followed
// by 'done'. Results stream per item so that the host can put its time limit on each sample and,
// when one hangs, knows which one it was and re-sends only the samples after it to a fresh worker.
// The worker sends raw values: whether a reward is a finite number is decided by the host
// (sandbox.ts), in a realm user code cannot reach.

export interface SandboxItem {
  completion: string;
  answer: string;
  prompt?: string;
  index?: number;
}

export interface RunRequest {
  type: 'run';
  id: number;
  source: string;
  items: readonly SandboxItem[];
}

export type WorkerMessage =
  | { type: 'ready' }
  | { type: 'compile-error'; id: number; message: string }
  /**
   * `at` is the item's position in the request. `value` is what the reward returned when that was
   * a number (any number: NaN included), else null with `error` saying what came instead.
   */
  | { type: 'item'; id: number; at: number; value: number | null; error: string | null }
  | { type: 'done'; id: number };

/** A compiled user reward, called with primitives only (see makeCaller). */
export type CompiledReward = (completion: string, answer: string, prompt: string | undefined, index: number | undefined) => unknown;

/** How user source is read: first as an expression, failing that as a function body. */
export type SourceForm = 'expression' | 'body';

/**
 * A classic script that stores the user's reward in `slot` (an assignment target such as
 * `self.__reward`) as a strict function of (completion, answer, context). As an expression, the
 * source may be a function (`(completion, answer) => …`, `function (c, a) {…}`), called per
 * sample, or any other value, which is the reward itself (`completion.length / 100`); as a body
 * (`const x = …; return x;`) it runs with `completion`, `answer` and `context` in scope. Loading
 * it as a script (not through eval) lets the page's policy forbid eval everywhere.
 */
export function rewardScript(source: string, form: SourceForm, slot: string): string {
  const body = form === 'expression' ? `return (\n${source}\n);` : source;
  return `${slot} = function (completion, answer, context) {\n"use strict";\n${body}\n};\n`;
}

/**
 * Returns the adapter from a loaded reward to a CompiledReward. It is evaluated in the realm the
 * user code runs in (a browser worker's global, or a Node vm context), so the `context` object it
 * builds belongs to that realm and no object of another realm reaches user code.
 */
export function makeCaller(): (reward: (c: string, a: string, ctx: object) => unknown, isExpression: boolean) => CompiledReward {
  return (reward, isExpression) => (c, a, prompt, index) => {
    const context = { prompt, index };
    const value = reward(c, a, context);
    return isExpression && typeof value === 'function' ? (value as (c: string, a: string, ctx: object) => unknown)(c, a, context) : value;
  };
}

/**
 * The compile step of both workers: the source read as an expression, and as a function body where
 * that is a syntax error. `syntaxError` is the worker realm's own SyntaxError (captured before user
 * code runs).
 */
export function eitherForm<T>(compileAs: (source: string, form: SourceForm) => T, syntaxError: new (message?: string) => Error): (source: string) => T {
  return (source) => {
    try {
      return compileAs(source, 'expression');
    } catch (e) {
      if (!(e instanceof syntaxError)) throw e;
    }
    return compileAs(source, 'body');
  };
}

/** The worker's request loop: compile once per request, run every item, report each. */
export function sandboxMain(
  post: (message: WorkerMessage) => void,
  listen: (handler: (request: RunRequest) => Promise<void>) => void,
  compile: (source: string) => CompiledReward,
): void {
  const describe = (e: unknown): string => {
    let text: string;
    try {
      text = e instanceof Error || (typeof e === 'object' && e !== null && 'message' in e)
        ? `${(e as Error).name ?? 'Error'}: ${(e as Error).message}`
        : String(e);
    } catch {
      text = 'an exception that cannot be printed';
    }
    return text.length > 300 ? `${text.slice(0, 300)}…` : text;
  };
  const kind = (v: unknown): string => {
    if (v === null) return 'null';
    if (typeof v === 'string') return `a string (${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v)})`;
    if (typeof v === 'object' && typeof (v as { then?: unknown }).then === 'function') return 'a Promise (async rewards are not supported)';
    return typeof v === 'undefined' ? 'undefined (no return value?)' : `a ${typeof v}`;
  };
  listen(async (request) => {
    let reward: CompiledReward;
    try {
      reward = compile(request.source);
    } catch (e) {
      post({ type: 'compile-error', id: request.id, message: describe(e) });
      return;
    }
    for (let at = 0; at < request.items.length; at++) {
      const item = request.items[at];
      let value: number | null = null;
      let error: string | null = null;
      try {
        const result = reward(item.completion, item.answer, item.prompt, item.index);
        if (typeof result === 'number') value = result;
        else error = `returned ${kind(result)}, not a finite number`;
      } catch (e) {
        error = `threw ${describe(e)}`;
      }
      // Promise callbacks the sample queued run here, so a hang in one is charged to this sample.
      await undefined;
      post({ type: 'item', id: request.id, at, value, error });
    }
    post({ type: 'done', id: request.id });
  });
}

/**
 * Removes names from an object and its prototype chain: each is deleted along the chain and then
 * pinned to undefined on the object itself. This is a second line only; the Content-Security-
 * Policy the worker inherits is what stops network access (dynamic import() is syntax and cannot
 * be removed).
 */
export function stripGlobals(scope: object, names: readonly string[]): void {
  for (const name of names) {
    for (let o: object | null = scope; o; o = Object.getPrototypeOf(o)) {
      try {
        delete (o as Record<string, unknown>)[name];
      } catch {
        // A non-configurable property stays; the own property defined below shadows it.
      }
    }
    try {
      Object.defineProperty(scope, name, { value: undefined, writable: false, configurable: false });
    } catch {
      // Already pinned by the platform; nothing more can be done from script.
    }
  }
}

/**
 * What user code must not reach in a browser worker: network (fetch, XMLHttpRequest, WebSocket,
 * WebTransport, EventSource, importScripts, fonts), storage (indexedDB, caches, navigator's
 * storage and locks), other contexts (Worker, SharedWorker, BroadcastChannel, MessageChannel),
 * the worker's own message channel and close(), and timers (work left running after a sample
 * returned).
 */
export const BROWSER_BLOCKED_GLOBALS = [
  'fetch', 'XMLHttpRequest', 'WebSocket', 'WebSocketStream', 'WebTransport', 'EventSource', 'importScripts',
  'FontFace', 'FontFaceSet', 'fonts',
  'indexedDB', 'IDBFactory', 'caches', 'CacheStorage', 'navigator', 'StorageManager', 'requestFileSystem',
  'webkitRequestFileSystem', 'FileSystemHandle',
  'Worker', 'SharedWorker', 'BroadcastChannel', 'MessageChannel',
  'postMessage', 'onmessage', 'onmessageerror', 'close',
  'setTimeout', 'setInterval', 'queueMicrotask', 'requestAnimationFrame',
] as const;

/** The global a loaded reward script stores its function in (read, then deleted, by the harness). */
const REWARD_SLOT = '__vlrlReward';

/**
 * Source of the dedicated Web Worker (loaded from a Blob URL). Everything it needs is captured
 * and the blocked globals are stripped before any user code is parsed; user source is then
 * loaded with importScripts from a Blob URL that is revoked at once (a syntax error there is
 * a catchable SyntaxError), and URL.createObjectURL is gone, so user code cannot make one.
 */
export function browserWorkerSource(): string {
  return `"use strict";
{
  const sandboxMain = (${sandboxMain.toString()});
  const stripGlobals = (${stripGlobals.toString()});
  const rewardScript = (${rewardScript.toString()});
  const eitherForm = (${eitherForm.toString()});
  const call = (${makeCaller.toString()})();
  const post = self.postMessage.bind(self);
  const addListener = self.addEventListener.bind(self);
  const load = self.importScripts.bind(self);
  const BlobType = self.Blob;
  const SyntaxErrorType = self.SyntaxError;
  const createUrl = self.URL.createObjectURL.bind(self.URL);
  const revokeUrl = self.URL.revokeObjectURL.bind(self.URL);
  const slot = ${JSON.stringify(REWARD_SLOT)};
  stripGlobals(self.URL, ['createObjectURL']);
  stripGlobals(self, ${JSON.stringify(BROWSER_BLOCKED_GLOBALS)});
  const compileAs = (source, form) => {
    const url = createUrl(new BlobType([rewardScript(source, form, 'self.' + slot)], { type: 'text/javascript' }));
    try {
      load(url);
    } finally {
      revokeUrl(url);
    }
    const reward = self[slot];
    delete self[slot];
    if (typeof reward !== 'function') throw new TypeError('the source did not load as a reward function');
    return call(reward, form === 'expression');
  };
  const compile = eitherForm(compileAs, SyntaxErrorType);
  sandboxMain(post, (handler) => addListener('message', (event) => handler(event.data)), compile);
  post({ type: 'ready' });
}
`;
}

/**
 * Source of the Node worker_threads worker (eval: true). User code is compiled as a script in a
 * fresh vm context: its global has the language builtins only (no require, process, fetch,
 * timers), string code generation is off there as under the browser's policy, and dynamic
 * import() is refused because the script has no importModuleDynamically hook.
 */
export function nodeWorkerSource(): string {
  return `"use strict";
{
  const { parentPort } = require('node:worker_threads');
  const vm = require('node:vm');
  const sandboxMain = (${sandboxMain.toString()});
  const rewardScript = (${rewardScript.toString()});
  const eitherForm = (${eitherForm.toString()});
  // A promise user code rejected and left behind must not take the worker down with it.
  process.on('unhandledRejection', () => undefined);
  const context = vm.createContext(Object.create(null), { codeGeneration: { strings: false, wasm: false } });
  const call = vm.runInContext(${JSON.stringify(`(${makeCaller.toString()})()`)}, context);
  const compileAs = (source, form) => {
    // Only compiling may throw the SyntaxError that sends the source on to its next form.
    const script = new vm.Script(rewardScript(source, form, 'globalThis.${REWARD_SLOT}'), { filename: 'reward.js' });
    const reward = script.runInContext(context);
    if (typeof reward !== 'function') throw new TypeError('the source did not load as a reward function');
    return call(reward, form === 'expression');
  };
  const compile = eitherForm(compileAs, SyntaxError);
  sandboxMain((message) => parentPort.postMessage(message), (handler) => parentPort.on('message', handler), compile);
  parentPort.postMessage({ type: 'ready' });
}
`;
}
