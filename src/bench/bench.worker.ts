// The benchmark page's worker: the kernel suites and the onnxruntime-web peer, on a GPU device of
// their own. Its own worker (not the app's engine worker), so the app ships neither.
import * as Comlink from 'comlink';
import ortWasmUrl from 'onnxruntime-web/ort-wasm-simd-threaded.asyncify.wasm?url';
import { Gpu } from '../gpu/runtime';
import { createBenchApi } from './benchApi';

let gpu: Promise<Gpu> | null = null;
Comlink.expose(
  createBenchApi({
    // Timed by wall clock: Chrome rounds timestamp queries to 100 µs for web pages.
    gpu: () =>
      (gpu ??= Gpu.create(navigator.gpu, { disableFeatures: ['timestamp-query'] }).catch((e: unknown) => {
        gpu = null;
        throw e;
      })),
    ortWasmUrl,
  }),
);
