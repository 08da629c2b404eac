// The custom-reward sandbox in the browser: a dedicated Web Worker from a Blob URL per batch. Such
// a worker inherits the Content-Security-Policy of the page or worker that creates it
// (contentSecurityPolicy.ts), which is what keeps user code off the network; its global scope is
// also stripped of network, storage and messaging before user code runs (sandboxWorker.ts).
import { CustomRewardSandbox, type SandboxOptions, type SandboxPort } from './sandbox';
import { browserWorkerSource } from './sandboxWorker';

let workerUrl: string | null = null;

/** One Blob URL for every sandbox worker of the page; kept for later batches, so never revoked. */
function sandboxUrl(): string {
  workerUrl ??= URL.createObjectURL(new Blob([browserWorkerSource()], { type: 'text/javascript' }));
  return workerUrl;
}

export function spawnBrowserSandbox(): SandboxPort {
  const worker = new Worker(sandboxUrl(), { name: 'custom-reward-sandbox' });
  let ready = false;
  return {
    post: (request) => worker.postMessage(request),
    onMessage: (handler) =>
      worker.addEventListener('message', (e: MessageEvent) => {
        if (typeof e.data === 'object' && e.data !== null && e.data.type === 'ready') ready = true;
        handler(e.data);
      }),
    // An error before 'ready' means the worker could not start (a policy that refuses blob:
    // workers, say). An uncaught error after it does not stop a Web Worker, so then only
    // undeliverable messages count; a worker that hangs or closes is caught by the time limit.
    onFailure: (handler) => {
      worker.addEventListener('error', (e: ErrorEvent) => {
        if (!ready) handler(e.message || 'the worker script failed to load');
      });
      worker.addEventListener('messageerror', () => handler('a message could not be deserialised'));
    },
    terminate: () => worker.terminate(),
  };
}

export function createBrowserSandbox(options?: SandboxOptions): CustomRewardSandbox {
  return new CustomRewardSandbox(spawnBrowserSandbox, options);
}
