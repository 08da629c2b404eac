import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';
import { cspPlugin } from './src/rewards/contentSecurityPolicy';

// The app is a static site; the engine runs in a module Web Worker. The kernel benchmark page
// (bench.html, src/bench) is a second entry with its own worker, so that the app's bundle holds
// neither it nor onnxruntime-web (test/unit/bundle.test.ts checks the built chunks).
const page = (name: string) => fileURLToPath(new URL(name, import.meta.url));
// transformers.js (the app's tokenizer) imports the bare `onnxruntime-web` for inference the app
// never runs; it gets a stand-in, in the build, the dev server and its pre-bundling alike. The
// benchmark imports `onnxruntime-web/webgpu`, which this exact match leaves to the real package.
const onnxRuntimeStandIn = { find: /^onnxruntime-web$/, replacement: page('src/model/processor/ortStandIn.ts') };

export default defineConfig({
  // The Content-Security-Policy: a header from the dev and preview servers, a <meta> tag in the page.
  plugins: [cspPlugin()],
  resolve: { alias: [onnxRuntimeStandIn] },
  worker: { format: 'es' },
  // Pre-bundled up front: a dependency the dev server discovers late (the worker imports some only
  // when a model loads) makes it reload the page, which would drop a running session.
  // onnxruntime-web/webgpu is the benchmark page's peer (imported when a run starts); its wasm is
  // imported with ?url (src/bench/bench.worker.ts), so pre-bundling does not break its path.
  optimizeDeps: { include: ['uplot', 'comlink', 'idb', 'hyparquet', '@huggingface/transformers', 'onnxruntime-web/webgpu'] },
  build: { target: 'es2022', sourcemap: true, rollupOptions: { input: { app: page('index.html'), bench: page('bench.html') } } },
  server: { host: '127.0.0.1' },
  preview: { host: '127.0.0.1' },
});
