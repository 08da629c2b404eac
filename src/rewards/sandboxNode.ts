// The custom-reward sandbox in Node (tests, CLI): a worker_threads Worker per batch, running
// nodeWorkerSource() (user code in a vm context without require, process or timers), with its
// own heap and stack limits. Import this only from Node code; the browser uses sandboxBrowser.ts.
import { Worker } from 'node:worker_threads';
import { CustomRewardSandbox, type SandboxOptions, type SandboxPort } from './sandbox';
import { nodeWorkerSource } from './sandboxWorker';

/** Heap and stack caps for user code, so an allocation loop or deep recursion kills its worker and not the process. */
const WORKER_LIMITS = { maxOldGenerationSizeMb: 256, maxYoungGenerationSizeMb: 32, stackSizeMb: 4 };

export function spawnNodeSandbox(): SandboxPort {
  const worker = new Worker(nodeWorkerSource(), {
    eval: true,
    resourceLimits: WORKER_LIMITS,
    // Nothing of the parent's environment or flags.
    env: {},
    execArgv: [],
  });
  worker.unref(); // an idle sandbox must not keep the CLI alive
  return {
    post: (request) => worker.postMessage(request),
    onMessage: (handler) => worker.on('message', handler),
    onFailure: (handler) => {
      worker.on('error', (e) => handler(e.message));
      worker.on('exit', (code) => handler(`exited with code ${code}`));
    },
    terminate: () => void worker.terminate(),
  };
}

export function createNodeSandbox(options?: SandboxOptions): CustomRewardSandbox {
  return new CustomRewardSandbox(spawnNodeSandbox, options);
}
