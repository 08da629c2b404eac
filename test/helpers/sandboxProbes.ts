// Browser-side helpers of the sandbox tests (test/browser/rewards-sandbox.test.ts), imported by
// the page and by cspProbeWorker.ts: a sandbox whose workers outlive their batch (so that a
// request user code started has time to go out, were it allowed), and a Blob-URL worker that
// tries the network with nothing stripped, so only the Content-Security-Policy it inherits can
// stop it.
import { CustomRewardSandbox } from '../../src/rewards/sandbox';
import { spawnBrowserSandbox } from '../../src/rewards/sandboxBrowser';

/** A browser sandbox whose workers are stopped `holdMs` after their batch ends. */
export function heldSandbox(holdMs: number, timeLimitMs: number): CustomRewardSandbox {
  return new CustomRewardSandbox(() => {
    const port = spawnBrowserSandbox();
    return { ...port, terminate: () => void setTimeout(() => port.terminate(), holdMs) };
  }, { timeLimitMs });
}

/** What the probe worker reports: each attempt 'reached' or 'blocked', and the directives violated. */
export interface ProbeReport {
  attempts: Record<string, string>;
  violations: string[];
}

/** Classic worker source that tries every way out to `target` (an http:// URL ending in /). */
export function probeSource(target: string): string {
  return `"use strict";
const target = ${JSON.stringify(target)};
const attempts = {};
const violations = [];
self.addEventListener('securitypolicyviolation', (e) => violations.push(e.effectiveDirective));
const attempt = async (name, f) => {
  try {
    await f();
    attempts[name] = 'reached';
  } catch {
    attempts[name] = 'blocked';
  }
};
const settles = (open) => new Promise((resolve, reject) => open(resolve, reject));
(async () => {
  await attempt('import', () => import(target + 'import.js'));
  await attempt('import-data', () => import('data:text/javascript,export default 1'));
  await attempt('fetch', () => fetch(target + 'fetch'));
  await attempt('font', () => new FontFace('probe', 'url(' + target + 'font)').load());
  await attempt('importScripts', () => importScripts(target + 'script.js'));
  await attempt('xhr', () => settles((ok, fail) => {
    const x = new XMLHttpRequest();
    x.open('GET', target + 'xhr');
    x.onload = ok;
    x.onerror = fail;
    x.send();
  }));
  await attempt('websocket', () => settles((ok, fail) => {
    const ws = new WebSocket(target.replace('http', 'ws') + 'ws');
    ws.onopen = ok;
    ws.onerror = fail;
  }));
  await attempt('eventsource', () => settles((ok, fail) => {
    const es = new EventSource(target + 'events');
    es.onopen = ok;
    es.onerror = fail;
  }));
  postMessage({ attempts, violations });
})();
`;
}

/** Runs probeSource(target) in a Blob-URL worker made here (page or worker) and returns its report. */
export function probeInBlobWorker(target: string): Promise<ProbeReport> {
  const url = URL.createObjectURL(new Blob([probeSource(target)], { type: 'text/javascript' }));
  const worker = new Worker(url);
  return new Promise<ProbeReport>((resolve, reject) => {
    worker.onmessage = (e: MessageEvent<ProbeReport>) => resolve(e.data);
    worker.onerror = (e) => reject(new Error(`probe worker: ${e.message}`));
  }).finally(() => {
    worker.terminate();
    URL.revokeObjectURL(url);
  });
}
