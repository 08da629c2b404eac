// The Web Worker that owns the GPU device, the model and the trainer; the page stays responsive.
// One model at a time (loadModel replaces it); training runs go through src/worker/trainerApi.ts
// with a policy factory over the loaded model, so checkpoints and resume use IndexedDB.
import * as Comlink from 'comlink';
import { adapterFromModules, exportPeft, readLoraParams, tensorNames, validateAgainstModel } from '../adapter/peft';
import { uploadAdapter } from '../adapter/upload';
import { browserDecoder } from '../data/decodeBrowser';
import { DEMO_MODEL_URL_PATH } from '../data/demo';
import { decodeRowImages, decodingPromptSource } from '../data/encodedImages';
import { imageLimitsFor } from '../data/image';
import type { DatasetRow } from '../data/types';
import { runEval } from '../eval/runner';
import { Gpu } from '../gpu/runtime';
import { capabilitiesOf } from '../gpu/capabilities';
import { hubFiles } from '../model/hub';
import { releaseLoraParams } from '../ops/loraParams';
import { blobSource, MissingFileError, pickedFiles, type ModelFiles } from '../model/safetensors';
import { chooseActivationStorage } from '../model/activationStorage';
import { defaultProducts, productPaths, productFamily, type Products } from '../model/products';
import { configRows, openModel, type ModelSession, type OpenModelOptions } from '../model/session';
import { filesFingerprint, opfsStorage, servedFingerprint, WeightCache } from '../model/weightCache';
import { createBrowserSandbox } from '../rewards/sandboxBrowser';
import type { Policy } from '../rl/policy';
import { rememberAdapter, rememberProducts, storedProducts, type SeenAdapter } from '../store/db';
import { resolveEngineConfig, type PhaseBuffers } from '../rl/engineConfig';
import { BusyError, type EngineApi, type ModelSource, type ProductsState } from './api';
import { createTrainerApi } from './trainerApi';

let gpu: Promise<Gpu> | null = null;

function device(): Promise<Gpu> {
  gpu ??= Gpu.create(navigator.gpu).catch((e: unknown) => {
    gpu = null; // let a later call retry (the user may enable WebGPU and come back)
    throw e;
  });
  return gpu;
}

/** Files the app serves under `base` (public/ in Vite); each fetched whole, once, when first opened. */
function servedFiles(base: string, location: string): ModelFiles {
  const blobs = new Map<string, Promise<Blob>>();
  const fetchBlob = (file: string) => {
    if (!blobs.has(file)) {
      const p = fetch(`${base}/${file}`).then(async (r) => {
        // Vite's dev server (and SPA hosts) answer a missing path with index.html and 200; no model file is HTML.
        if (r.status === 404 || r.headers.get('content-type')?.startsWith('text/html')) throw new MissingFileError(file, location);
        if (!r.ok) throw new Error(`${base}/${file}: HTTP ${r.status}`);
        return r.blob();
      });
      blobs.set(file, p);
      p.catch(() => blobs.delete(file));
    }
    return blobs.get(file)!;
  };
  return {
    location,
    open: async (file) => blobSource(await fetchBlob(file), file),
    async text(file) {
      try {
        return await (await fetchBlob(file)).text();
      } catch (e) {
        if (e instanceof MissingFileError) return null;
        throw e;
      }
    },
  };
}

function filesOf(source: ModelSource): ModelFiles {
  switch (source.kind) {
    case 'demo':
      return servedFiles(DEMO_MODEL_URL_PATH, 'the bundled demo model (public/demo)');
    case 'hub':
      return hubFiles(source.repo, { revision: source.revision, token: source.token });
    case 'files':
    case 'cached-files':
      return pickedFiles(source.files);
  }
}

/** The weight cache entry for `source` (hub: repo@revision; otherwise a fingerprint of the files); none without OPFS. */
async function cacheOf(source: ModelSource, files: ModelFiles): Promise<OpenModelOptions['cache']> {
  if (!navigator.storage?.getDirectory) {
    if (source.kind === 'cached-files') throw new Error('this browser has no weight cache (origin private file system): pick the model\'s files again');
    return undefined;
  }
  const store = (weightCache ??= new WeightCache(opfsStorage()));
  switch (source.kind) {
    case 'demo':
      return { store, source: DEMO_MODEL_URL_PATH, revision: await servedFingerprint(files) };
    case 'hub':
      return { store, source: `hub:${source.repo}`, revision: source.revision ?? 'main' };
    case 'files':
      return { store, source: 'picked files', revision: await filesFingerprint(source.files) };
    case 'cached-files':
      return { store, source: 'picked files', revision: source.fingerprint, required: true };
  }
}

/**
 * What adapter_config.json names as base_model_name_or_path for the demo: its own name (it is not
 * on the Hub; PEFT loads it from the repository's public/demo folder, which the export message says).
 */
const DEMO_BASE_MODEL = 'vlrl-demo';

/** The base model an adapter names: a hub id PEFT can load, the demo's name, or null for picked files. */
function baseModelOf(source: ModelSource): string | null {
  if (source.kind === 'hub') return source.repo;
  if (source.kind === 'demo') return DEMO_BASE_MODEL;
  // Picked files: the folder they came from (PEFT loads a base model from a local path), when picked as a folder.
  const folder = source.files[0]?.webkitRelativePath.split('/')[0];
  return folder ? folder : null;
}

let weightCache: WeightCache | null = null;
let session: ModelSession | null = null;
/** The Model panel's choice for the next training runs (EngineConfig.phase_buffers). */
let phaseBuffers: PhaseBuffers = 'keep';
let location = '';
let baseModel: string | null = null;
/** The rows handed over with setDataset (images may stay encoded until a batch needs them), and the size of their file. */
let rows: DatasetRow[] | null = null;
let rowsFileBytes: number | undefined;
/** The eval in progress, for cancelEval. */
let evalAbort: AbortController | null = null;
const sandbox = createBrowserSandbox();

/** The products setting loads take: the stored choice where this GPU can run it, else the device's default. */
async function productsSetting(g: Gpu): Promise<Products> {
  const stored = await storedProducts().catch(() => undefined);
  if (stored && productPaths(capabilitiesOf(g)).find((p) => p.path === productFamily(stored))!.available) return stored;
  return defaultProducts(g);
}

/** The app keeps the engine's 'auto' activation storage: f16 hidden states beside the f16 products
 * where shader-f16 is offered (src/model/activationStorage.ts), set again whenever the products change. */
function storageFollowingProducts(s: ModelSession, g: Gpu): void {
  s.model.setActivationStorage(chooseActivationStorage('auto', capabilitiesOf(g), s.model.products).storage);
}

async function productsState(): Promise<ProductsState> {
  const g = await device();
  const paths = Object.fromEntries(productPaths(capabilitiesOf(g)).map((p) => [p.path, p.available ? null : p.why])) as ProductsState['paths'];
  return { current: session ? session.model.products : await productsSetting(g), paths };
}

/** Refuses to change the model under a training run or an eval. */
async function requireIdle(what: string): Promise<void> {
  const state = await trainer.trainingState();
  if (state.state === 'running' || state.state === 'paused') throw new BusyError(`run ${state.runId} is ${state.state}; stop it before ${what}`);
  if (evalAbort) throw new BusyError(`an eval is running; cancel it or let it finish before ${what}`);
}

function requireSession(): ModelSession {
  if (!session) throw new Error('no model loaded: call loadModel first');
  return session;
}

/** The row with its images decoded, down-scaled to the loaded processor's max_pixels. */
const decodedRow = (s: ModelSession, row: DatasetRow) => decodeRowImages(row, browserDecoder, imageLimitsFor(s.processor.image));

const trainer = createTrainerApi({
  gpu: device,
  sandbox,
  // Fresh adapters of the run's LoRA settings on the loaded model (the trainer initialises or restores them);
  // each prompt's images are decoded when its batch needs them.
  openPolicy: async (_gpu, config) => {
    const s = requireSession();
    s.attachLora(config.lora);
    return { policy: s.policy, data: decodingPromptSource(s.promptSource(rows ?? configRows(config.dataset)), browserDecoder, imageLimitsFor(s.processor.image)) };
  },
  dataFileBytes: () => (rows ? rowsFileBytes : undefined),
  products: () => ({ ...(session ? { products: session.model.products, vision_products: session.model.visionProducts, activation_storage: session.model.activationStorage } : {}), phase_buffers: phaseBuffers }),
});

const api: EngineApi = {
  ...trainer,
  async gpuInfo() {
    const g = await device();
    const seen: SeenAdapter = { summary: g.adapter, enabled: [...g.features], seenAt: Date.now() };
    await rememberAdapter(seen);
    return seen;
  },
  async loadModel(source, onProgress) {
    await requireIdle('loading another model');
    const g = await device();
    const files = filesOf(source);
    session = null;
    const cache = await cacheOf(source, files);
    const opened = await openModel(g, files, { onProgress: onProgress && ((p) => onProgress({ ...p })), cache });
    let productsMessage: string | undefined;
    try {
      await opened.model.setProducts(await productsSetting(g));
    } catch (e) {
      // Offered but failing (a driver that cannot build the kernels): the f32 units still serve.
      await opened.model.setProducts('f32');
      productsMessage = e instanceof Error ? e.message : String(e);
    }
    storageFollowingProducts(opened, g);
    session = opened;
    location = files.location;
    baseModel = baseModelOf(source);
    const t = session.model.config.text;
    const { cached, cacheMessage } = session.model.weightSource;
    const fingerprint = source.kind === 'files' || source.kind === 'cached-files' ? cache?.revision : undefined;
    return { location, baseModel, layers: t.numLayers, hiddenSize: t.hiddenSize, vocabSize: t.vocabSize, cached, cacheMessage, fingerprint, products: session.model.products, productsMessage };
  },
  products: productsState,
  async setPhaseBuffers(v) {
    phaseBuffers = resolveEngineConfig({ phase_buffers: v }).phase_buffers; // checked as a config's
  },
  async setProducts(products) {
    await requireIdle('changing where the products run');
    const g = await device();
    const why = productPaths(capabilitiesOf(g)).find((p) => p.path === productFamily(products))!;
    if (!why.available) throw new Error(`${products} products are not available on this GPU: ${why.why}`);
    if (session) {
      await session.model.setProducts(products);
      storageFollowingProducts(session, g);
    }
    await rememberProducts(products);
    return productsState();
  },
  async setDataset(given, origin) {
    rows = given;
    rowsFileBytes = origin?.fileBytes;
    return { rows: given?.length ?? 0 };
  },
  async runEval(req, onProgress) {
    const s = requireSession();
    const evalRows = req.rows ?? rows;
    if (!evalRows || evalRows.length === 0) throw new Error('eval: no rows (hand some over with setDataset or in the request)');
    const useLora = req.lora ?? s.model.lora.length > 0;
    const policy: Policy = useLora ? s.policy : { lora: [], generate: (p, n, o) => s.model.generate(p, n, o, { lora: false }), forward: (b, o) => s.policy.forward(b, o), backward: (g, e) => s.policy.backward(g, e) };
    const abort = new AbortController();
    evalAbort = abort;
    return runEval({
      signal: abort.signal,
      policy,
      rows: evalRows,
      prepare: async (row) => s.prepare(await decodedRow(s, row), req.systemPrompt ?? null, { thinkingMode: req.thinkingMode }).prompt,
      thinkingMode: req.thinkingMode,
      terms: req.terms,
      sandbox,
      answerFormat: req.answerFormat,
      answerMatch: req.answerMatch,
      sampling: req.sampling,
      samplesPerRow: req.samplesPerRow,
      label: req.label,
      onProgress: onProgress && ((p) => onProgress(p)),
    }).finally(() => {
      if (evalAbort === abort) evalAbort = null;
    });
  },
  async cancelEval() {
    evalAbort?.abort();
  },
  async exportAdapter() {
    const s = requireSession();
    if (s.model.lora.length === 0) throw new Error('no adapter to export: train one first');
    const modules = await readLoraParams(s.model.gpu, s.model.lora);
    const adapter = adapterFromModules('trained', modules, { baseModel, dropout: s.model.loraDropout });
    const { weights, config } = exportPeft(adapter);
    return { weights: new Blob([weights], { type: 'application/octet-stream' }), config: new Blob([config], { type: 'application/json' }) };
  },
  async loraWeights() {
    const s = requireSession();
    const out: Record<string, Float32Array> = {};
    for (const m of await readLoraParams(s.model.gpu, s.model.lora)) {
      const n = tensorNames(m.module);
      out[n.A] = m.A;
      out[n.B] = m.B;
    }
    return out;
  },
  async applyAdapter(adapter) {
    const s = requireSession();
    await requireIdle('applying another adapter');
    validateAgainstModel(adapter, s.model.config);
    const old = s.model.lora;
    s.model.attachLora(uploadAdapter(s.model.gpu, adapter, s.model.config.text.numLayers));
    old.forEach(releaseLoraParams);
  },
  async gpuMemory() {
    return gpu ? { ...(await gpu).pool.stats } : null;
  },
};

Comlink.expose(api);
