// The app's Content-Security-Policy: the network barrier of the custom-reward sandbox. Sandbox
// workers come from Blob URLs, and such workers inherit the policy of the page or worker that
// creates them, so this one policy covers user code wherever it runs: the page carries it as a
// <meta> tag (cspPlugin below, so it also ships in the build), and Vite's dev and preview
// servers send it as a header on every response, which is what a same-origin worker script (the
// engine worker) gets its own policy from. A static host of the build must send the header too.
import type { Plugin } from 'vite';

/**
 * Where model and tokenizer files come from besides the app's origin: the Hugging Face hub
 * (src/model/hub.ts; transformers.js's default remoteHost) and the hosts its /resolve/ URLs
 * redirect large files to (cdn-lfs.hf.co, cdn-lfs-us-1.hf.co, cas-bridge.xethub.hf.co, ...).
 */
export const HUB_CONNECT_SOURCES = ['https://huggingface.co', 'https://*.huggingface.co', 'https://*.hf.co'] as const;

export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  // wasm: onnxruntime-web (the Benchmark page's peer). blob: the sandbox loads user code with
  // importScripts from a Blob URL it creates and revokes; user code cannot create Blob URLs.
  "script-src 'self' 'wasm-unsafe-eval' blob:",
  "worker-src 'self' blob:",
  // 'self' also admits the dev server's HMR WebSocket (same host and port).
  `connect-src 'self' ${HUB_CONNECT_SOURCES.join(' ')}`,
  "img-src 'self' data: blob:",
  "font-src 'self'",
  // Vite injects imported CSS (uPlot's) as <style> elements in dev.
  "style-src 'self' 'unsafe-inline'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
].join('; ');

/** Sends the policy from Vite's dev and preview servers and writes it into index.html. */
export function cspPlugin(): Plugin {
  return {
    name: 'vlrl-content-security-policy',
    config: () => ({
      server: { headers: { 'Content-Security-Policy': CONTENT_SECURITY_POLICY } },
      preview: { headers: { 'Content-Security-Policy': CONTENT_SECURITY_POLICY } },
    }),
    transformIndexHtml: () => [
      { tag: 'meta', attrs: { 'http-equiv': 'Content-Security-Policy', content: CONTENT_SECURITY_POLICY }, injectTo: 'head-prepend' },
    ],
  };
}
