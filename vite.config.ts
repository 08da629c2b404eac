import { defineConfig } from 'vite';
import { cspPlugin } from './src/rewards/contentSecurityPolicy';

// The app is a static site; the engine runs in a module Web Worker.
export default defineConfig({
  // The Content-Security-Policy: a header from the dev and preview servers, a <meta> tag in the page.
  plugins: [cspPlugin()],
  worker: { format: 'es' },
  // Pre-bundled up front: a dependency the dev server discovers late (the worker imports some only
  // when a model loads) makes it reload the page, which would drop a running session.
  // onnxruntime-web/webgpu is the Benchmark page's peer (imported when a run starts); its wasm is
  // imported with ?url (src/worker/engine.worker.ts), so pre-bundling does not break its path.
  optimizeDeps: { include: ['uplot', 'comlink', 'idb', 'hyparquet', '@huggingface/transformers', 'onnxruntime-web/webgpu'] },
  build: { target: 'es2022', sourcemap: true },
  server: { host: '127.0.0.1' },
  preview: { host: '127.0.0.1' },
});
