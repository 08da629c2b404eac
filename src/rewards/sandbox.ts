// Host side of the custom-reward sandbox: user JavaScript runs in a separate worker (a Blob-URL
// Web Worker in the browser, a worker_threads Worker in Node; see sandboxBrowser.ts and
// sandboxNode.ts). Every batch of every term gets a fresh worker, stopped when the batch ends, so
// nothing user code does (changing builtins, closing its worker, leaving work queued) reaches
// another term or a later batch; batches of different terms run side by side. Each sample has a
// time limit. What the worker reports is checked here, in a realm user code never runs in:
// whatever user code does (throws, loops, returns a non-number or a non-finite one, fails to
// compile, kills its worker), every sample gets a defined reward (0) and a message saying why;
// nothing is thrown at the caller.
import type { RunRequest, SandboxItem, WorkerMessage } from './sandboxWorker';

export type { SandboxItem } from './sandboxWorker';

/** A started worker, as the host needs it; one per environment (browser, Node). */
export interface SandboxPort {
  post(request: RunRequest): void;
  /** Every message the worker posts, unchecked (the host validates each one). */
  onMessage(handler: (message: unknown) => void): void;
  /** The worker died or could not start (Node: 'error' or 'exit'). */
  onFailure(handler: (reason: string) => void): void;
  terminate(): void;
}

export type SpawnSandbox = () => SandboxPort;

export interface CustomRewardResult {
  /** The reward, or 0 when `error` is set. */
  value: number;
  error: string | null;
}

/** What scoring needs from a sandbox (registry.ts depends on this, not on the class). */
export interface CustomRewardEvaluator {
  evaluate(source: string, items: readonly SandboxItem[]): Promise<CustomRewardResult[]>;
}

export interface SandboxOptions {
  /** Milliseconds one sample may run before its worker is stopped (the rest go to a fresh one). */
  timeLimitMs?: number;
  /** Milliseconds a fresh worker may take to start. */
  startLimitMs?: number;
}

export const DEFAULT_TIME_LIMIT_MS = 1000;
export const DEFAULT_START_LIMIT_MS = 15_000;

type Event = { kind: 'message'; message: unknown } | { kind: 'failure'; reason: string };

interface LiveWorker {
  port: SandboxPort;
  /** Where the worker's events go; replaced for each wait. */
  sink: (event: Event) => void;
}

/** How one pass over the remaining samples ended. */
type PassEnd =
  | { kind: 'done' }
  | { kind: 'compile-error'; message: string }
  /** No worker could be started; `reason` says why. */
  | { kind: 'unavailable'; reason: string }
  /** The sample at `at` hung, crashed the worker or broke the protocol; `reason` says which. */
  | { kind: 'stopped'; at: number; reason: string };

/** The item message for sample `at` of request `id`, checked field by field; null if malformed. */
function itemOf(message: unknown, id: number, at: number): CustomRewardResult | null {
  const m = message as Partial<Extract<WorkerMessage, { type: 'item' }>>;
  if (m.id !== id || m.at !== at) return null;
  if (typeof m.error === 'string') return { value: 0, error: m.error.slice(0, 400) };
  if (m.error !== null || typeof m.value !== 'number') return null;
  // Number.isFinite of this realm: user code cannot have replaced it.
  return Number.isFinite(m.value) ? { value: m.value, error: null } : { value: 0, error: `returned ${m.value}, not a finite number` };
}

const typeOf = (message: unknown): unknown =>
  typeof message === 'object' && message !== null ? (message as { type?: unknown }).type : undefined;

export class CustomRewardSandbox implements CustomRewardEvaluator {
  /** Workers of the batches in flight, for dispose(). */
  private readonly live = new Set<LiveWorker>();
  private nextId = 1;
  private disposed = false;
  private restartCount = 0;
  readonly timeLimitMs: number;
  readonly startLimitMs: number;

  constructor(private readonly spawn: SpawnSandbox, options: SandboxOptions = {}) {
    this.timeLimitMs = options.timeLimitMs ?? DEFAULT_TIME_LIMIT_MS;
    this.startLimitMs = options.startLimitMs ?? DEFAULT_START_LIMIT_MS;
  }

  /** Workers replaced inside a batch after a time-out, crash or protocol breach so far. */
  get restarts(): number {
    return this.restartCount;
  }

  /** Rewards for many samples in one round trip, in a worker of this batch's own. */
  evaluate(source: string, items: readonly SandboxItem[]): Promise<CustomRewardResult[]> {
    if (this.disposed) return Promise.reject(new Error('custom reward sandbox: used after dispose()'));
    return this.evaluateAll(source, items);
  }

  /** Stops every worker; batches in flight end at once, their unfinished samples marked as such. */
  dispose(): void {
    this.disposed = true;
    for (const worker of [...this.live]) {
      this.retire(worker);
      worker.sink({ kind: 'failure', reason: 'the sandbox was disposed' });
    }
  }

  private async evaluateAll(source: string, items: readonly SandboxItem[]): Promise<CustomRewardResult[]> {
    const results: CustomRewardResult[] = items.map(() => ({ value: 0, error: 'not evaluated' }));
    let from = 0;
    while (from < items.length) {
      if (this.disposed) {
        for (let i = from; i < items.length; i++) results[i] = { value: 0, error: 'the sandbox was disposed' };
        break;
      }
      const end = await this.pass(source, items, from, results);
      if (end.kind === 'done') break;
      if (end.kind === 'compile-error' || end.kind === 'unavailable') {
        const error = end.kind === 'compile-error' ? `compile error: ${end.message}` : end.reason;
        for (let i = from; i < items.length; i++) results[i] = { value: 0, error };
        break;
      }
      // at === items.length: the worker hung after the last sample's result; nothing to charge.
      if (end.at < items.length) results[end.at] = { value: 0, error: end.reason };
      this.restartCount++;
      from = end.at + 1;
    }
    return results;
  }

  /** Sends items[from..] to a fresh worker, collects results until it ends, then stops it. */
  private async pass(source: string, items: readonly SandboxItem[], from: number, results: CustomRewardResult[]): Promise<PassEnd> {
    let worker: LiveWorker;
    try {
      worker = await this.started();
    } catch (e) {
      return { kind: 'unavailable', reason: e instanceof Error ? e.message : String(e) };
    }
    const id = this.nextId++;
    const end = await new Promise<PassEnd>((resolve) => {
      let current = from;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const finish = (end: PassEnd) => {
        clearTimeout(timer);
        worker.sink = () => undefined;
        resolve(end);
      };
      const arm = () => {
        clearTimeout(timer);
        timer = setTimeout(
          () => finish({ kind: 'stopped', at: current, reason: `timed out after ${this.timeLimitMs} ms (its worker was stopped)` }),
          this.timeLimitMs,
        );
      };
      const breach = (what: string) =>
        finish({ kind: 'stopped', at: current, reason: `the sandbox worker ${what} (it was stopped)` });
      worker.sink = (event) => {
        if (event.kind === 'failure') {
          finish({ kind: 'stopped', at: current, reason: `the sandbox worker died: ${event.reason}` });
          return;
        }
        const m = event.message as Partial<Record<string, unknown>>;
        const type = typeOf(m);
        if (type === 'compile-error' && m.id === id && current === from && typeof m.message === 'string') {
          finish({ kind: 'compile-error', message: m.message.slice(0, 400) });
        } else if (type === 'done' && m.id === id) {
          if (current === items.length) finish({ kind: 'done' });
          else breach('ended the batch before this sample');
        } else if (type === 'item') {
          const result = itemOf(m, id, current - from);
          if (!result) {
            breach('sent a malformed result');
            return;
          }
          results[current] = result;
          current++;
          arm();
        } else {
          breach('sent an unexpected message');
        }
      };
      arm();
      worker.port.post({ type: 'run', id, source, items: items.slice(from) });
    });
    this.retire(worker);
    return end;
  }

  /** A fresh worker, once it has said 'ready'. */
  private started(): Promise<LiveWorker> {
    const port = this.spawn();
    const worker: LiveWorker = { port, sink: () => undefined };
    this.live.add(worker);
    port.onMessage((message) => worker.sink({ kind: 'message', message }));
    port.onFailure((reason) => worker.sink({ kind: 'failure', reason }));
    return new Promise<LiveWorker>((resolve, reject) => {
      const timer = setTimeout(() => fail(`the sandbox worker did not start within ${this.startLimitMs} ms`), this.startLimitMs);
      const fail = (reason: string) => {
        clearTimeout(timer);
        worker.sink = () => undefined;
        this.retire(worker);
        reject(new Error(reason));
      };
      worker.sink = (event) => {
        if (event.kind === 'failure') fail(event.reason === 'the sandbox was disposed' ? event.reason : `the sandbox worker failed to start: ${event.reason}`);
        else if (typeOf(event.message) === 'ready') {
          clearTimeout(timer);
          worker.sink = () => undefined;
          resolve(worker);
        } else fail('the sandbox worker sent a message before it was ready');
      };
    });
  }

  private retire(worker: LiveWorker): void {
    if (this.live.delete(worker)) worker.port.terminate();
  }
}
