// The app's production bundle holds the product: `vite build` (the repo's vite.config.ts, both
// entries) is run in memory and the chunks of the app's entry (index.html), of its engine worker
// and of the workers it starts are checked for the benchmark page's code (src/bench) and for any
// of onnxruntime-web: its modules (the benchmark's copy or the one @huggingface/transformers
// depends on), its wasm files, or code naming them. transformers.js, the app's tokenizer, stays,
// with its onnxruntime-web import resolved to the stand-in. The benchmark page (bench.html) and
// its worker must hold the real runtime and its wasm, so the check cannot pass by finding nothing.
import { build, type Plugin, type Rollup } from 'vite';
import { describe, expect, it } from 'vitest';

interface Built {
  /** The chunk's entry module (a page's HTML, a worker's script), if it has one. */
  facade: string | null;
  fileName: string;
  modules: string[];
  /** The files of the assets its code refers to (e.g. a wasm through `new URL(..., import.meta.url)`). */
  assets: string[];
  /** Whether its code names one of onnxruntime-web's wasm files. */
  namesOrtWasm: boolean;
  imports: string[];
}

interface Bundle {
  chunks: Built[];
  assets: string[];
}

function recorder(into: Bundle[]): Plugin {
  return {
    name: 'record-chunks',
    generateBundle(_, bundle) {
      const out: Bundle = { chunks: [], assets: [] };
      for (const o of Object.values(bundle) as (Rollup.OutputChunk | Rollup.OutputAsset)[]) {
        if (o.type === 'asset') {
          out.assets.push(o.fileName);
          continue;
        }
        out.chunks.push({
          facade: o.facadeModuleId,
          fileName: o.fileName,
          modules: Object.keys(o.modules),
          assets: [...(o.viteMetadata?.importedAssets ?? [])],
          namesOrtWasm: ORT_WASM.test(o.code),
          imports: [...o.imports, ...o.dynamicImports],
        });
      }
      into.push(out);
    },
  };
}

const ORT_WASM = /ort-wasm-simd-threaded/;
const isOrt = (m: string) => /\/node_modules\/(.+\/)?onnxruntime-web\//.test(m);
const isBench = (m: string) => /\/src\/bench\//.test(m) || m.endsWith('/bench.html');
const ending = (bundles: Bundle[], suffix: string) => bundles.find((b) => b.chunks.some((c) => c.facade?.endsWith(suffix)));

/** A chunk and every chunk it imports, statically or dynamically. */
function reachable(bundle: Bundle, from: Built): Built[] {
  const byFile = new Map(bundle.chunks.map((c) => [c.fileName, c]));
  const seen = new Set<Built>([from]);
  for (const c of seen) for (const f of c.imports) if (byFile.has(f)) seen.add(byFile.get(f)!);
  return [...seen];
}

describe('production bundle', () => {
  it("keeps the benchmark page and every part of onnxruntime-web out of the app's chunks and workers", async () => {
    const main: Bundle[] = [];
    const workers: Bundle[] = [];
    await build({
      configFile: 'vite.config.ts',
      logLevel: 'error',
      plugins: [recorder(main)],
      worker: { plugins: () => [recorder(workers)] },
      build: { write: false, sourcemap: false, minify: false },
    });
    expect(main).toHaveLength(1);
    const [page] = main;
    const appEntry = page.chunks.find((c) => c.facade?.endsWith('/index.html'));
    const benchEntry = page.chunks.find((c) => c.facade?.endsWith('/bench.html'));
    expect(appEntry && benchEntry).toBeTruthy();

    const engine = ending(workers, '/src/worker/engine.worker.ts');
    const bench = ending(workers, '/src/bench/bench.worker.ts');
    expect(engine && bench).toBeTruthy();
    // The app: its page chunks, and every worker bundle but the benchmark's.
    const app = [...reachable(page, appEntry!), ...workers.filter((w) => w !== bench).flatMap((w) => w.chunks)];
    const appModules = app.flatMap((c) => c.modules);
    expect(appModules.some((m) => m.endsWith('/src/worker/engine.worker.ts'))).toBe(true);
    expect(appModules.filter(isBench)).toEqual([]);
    // The tokenizer's package is in the app; onnxruntime-web, which it imports, is not, in any form.
    expect(appModules.some((m) => m.includes('/node_modules/@huggingface/transformers/'))).toBe(true);
    expect(appModules.some((m) => m.endsWith('/src/model/processor/ortStandIn.ts'))).toBe(true);
    expect(appModules.filter(isOrt)).toEqual([]);
    expect(app.flatMap((c) => c.assets).filter((a) => ORT_WASM.test(a))).toEqual([]);
    expect(workers.filter((w) => w !== bench).flatMap((w) => w.assets).filter((a) => ORT_WASM.test(a))).toEqual([]);
    expect(app.filter((c) => c.namesOrtWasm).map((c) => c.fileName)).toEqual([]);

    // The benchmark page holds what the app does not: its suites, its panel, the peer and its wasm.
    const benchModules = [...reachable(page, benchEntry!), ...bench!.chunks].flatMap((c) => c.modules);
    expect(benchModules.some((m) => m.endsWith('/src/bench/suites.ts'))).toBe(true);
    expect(benchModules.some((m) => m.endsWith('/src/bench/benchPanel.ts'))).toBe(true);
    expect(benchModules.some((m) => isOrt(m) && /ort\.webgpu\./.test(m))).toBe(true);
    expect(bench!.assets.some((a) => /ort-wasm-simd-threaded\.asyncify/.test(a))).toBe(true);
  }, 400_000); // a full production build: about 45 s alone on 2 cores
});
