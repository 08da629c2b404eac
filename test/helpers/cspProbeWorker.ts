// A module worker served by the app's server, as the engine worker is: its policy comes from its
// own response's Content-Security-Policy header (a page's <meta> tag does not reach it), and
// sandbox workers it starts inherit that policy. It runs, on request, the network probe in a
// Blob-URL worker of its own, or a batch of user reward code in a sandbox of its own, and posts
// the outcome back.
import { heldSandbox, probeInBlobWorker } from './sandboxProbes';

type Request = { kind: 'probe'; target: string } | { kind: 'sandbox'; source: string; answers: string[]; holdMs: number };

self.onmessage = async (e: MessageEvent<Request>) => {
  const request = e.data;
  if (request.kind === 'probe') {
    postMessage(await probeInBlobWorker(request.target));
    return;
  }
  const sandbox = heldSandbox(request.holdMs, 2000);
  postMessage(await sandbox.evaluate(request.source, request.answers.map((answer) => ({ completion: '', answer }))));
};
