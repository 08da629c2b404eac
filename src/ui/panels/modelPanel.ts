// The Model panel: pick the bundled demo, a Qwen3-VL from the Hub (2B, 4B, 8B or any repo id, with
// an optional token) or a local folder; see its download size and what its weights take on the
// GPU (src/model/memoryPlan.ts) against this adapter's limits before anything large is fetched;
// load it in the engine worker with byte progress and time left. A plan that cannot fit is refused
// before the download (from config.json alone). Whether the weights came from the browser's weight
// cache is stated after each load. Where the large products run (f32 units or tensor cores,
// src/model/products.ts) is chosen here: the tensor cores by default where the browser offers them;
// so is what training keeps between generating and training (EngineConfig.phase_buffers).
import type { Remote } from 'comlink';
import { DEMO_MODEL_URL_PATH, DEMO_TRAIN_CONFIG } from '../../data/demo';
import { parseQwen3VLConfig, type Qwen3VLConfig } from '../../model/config';
import { hubFiles, hubFileSource } from '../../model/hub';
import type { LoadProgress } from '../../model/loader';
import { capabilitiesFrom, capabilitySummary } from '../../gpu/capabilities';
import { isProducts, productFamily, productPathSummary, PRODUCTS, type Products } from '../../model/products';
import { PHASE_BUFFERS, type PhaseBuffers } from '../../rl/engineConfig';
import { DEFAULT_TRAINING_WORK, defaultEngineStorage, memoryPlan, planProblems, trainingMemoryWith, type EngineStorage, type MemoryPlan } from '../../model/memoryPlan';
import { pickedFiles } from '../../model/safetensors';
import type { EngineApi, ModelSource, ProductsState } from '../../worker/api';
import { proxy } from '../../worker/client';
import { defaultConfig, type TrainConfigInput } from '../../rl/config';
import { loadedModel, trainSettings, type TrainSettings } from '../appState';
import { saveWorkspace, workspacePart } from '../workspace';
import { h } from '../dom';
import { field, select } from '../form';
import { formatBytes } from '../format';
import type { StatusBar } from '../status';

type Choice = 'demo' | 'Qwen/Qwen3-VL-2B-Instruct' | 'Qwen/Qwen3-VL-4B-Instruct' | 'Qwen/Qwen3-VL-8B-Instruct' | 'hub' | 'files';

const CHOICES: { value: Choice; label: string }[] = [
  { value: 'demo', label: 'Bundled demo model (offline)' },
  { value: 'Qwen/Qwen3-VL-2B-Instruct', label: 'Qwen/Qwen3-VL-2B-Instruct' },
  { value: 'Qwen/Qwen3-VL-4B-Instruct', label: 'Qwen/Qwen3-VL-4B-Instruct' },
  { value: 'Qwen/Qwen3-VL-8B-Instruct', label: 'Qwen/Qwen3-VL-8B-Instruct' },
  { value: 'hub', label: 'Another Hugging Face repo id' },
  { value: 'files', label: 'A model folder on this computer' },
];

/**
 * Picked files as kept over a reload: their small files themselves (IndexedDB copies them), the
 * weight files' names and sizes (for the size check), and the fingerprint their weights are cached
 * under. The weights are only in the weight cache: the shards are never copied.
 */
interface StoredPick {
  files: File[];
  weights: { name: string; size: number }[];
  fingerprint: string;
}

interface StoredModel {
  choice: Choice;
  repo: string;
  /** A model of this choice was loaded when the page was left: it reloads itself. */
  loaded: boolean;
  /** For picked files whose weights reached the weight cache. */
  pick?: StoredPick;
  /** What training runs keep between generating and training (EngineConfig.phase_buffers). */
  phaseBuffers?: PhaseBuffers;
}

/** The choices of EngineConfig.phase_buffers as the panel words them. */
const PHASE_BUFFER_CHOICES: readonly { value: PhaseBuffers; label: string; about: string }[] = [
  { value: 'keep', label: 'Keep both (faster steps)', about: 'Generation’s and training’s GPU buffers stay allocated between the two phases of each step: nothing is made again, at about both phases’ memory at the peak.' },
  { value: 'release', label: 'Give the other phase’s back (less memory)', about: 'Each phase gives the other’s buffers back to the GPU: the peak is the larger phase’s, and each step makes its buffers again.' },
];

const isChoice = (v: unknown): v is Choice => CHOICES.some((c) => c.value === v);

/** The stored pick when it has the shape this version writes. */
function storedPick(m: Partial<StoredModel> | undefined): StoredPick | null {
  const p = m?.pick;
  if (!p || typeof p.fingerprint !== 'string' || !Array.isArray(p.files) || !Array.isArray(p.weights)) return null;
  return p.files.every((f) => f instanceof File) ? p : null;
}

/** True when the stored workspace had a model loaded that can reload without the user (picked files: from the weight cache). */
export function modelToRestore(): boolean {
  const m = workspacePart<StoredModel>('model');
  return m?.loaded === true && isChoice(m.choice) && (m.choice !== 'files' || storedPick(m) !== null);
}

/** Every file but the weight shards, up to this size, is kept for the reload (config, tokenizer, templates). */
const MAX_KEPT_FILE_BYTES = 32 * 2 ** 20;
const isWeightFile = (f: File) => f.name.endsWith('.safetensors');

function pickToStore(files: readonly File[], fingerprint: string): StoredPick {
  return {
    files: files.filter((f) => !isWeightFile(f) && f.size <= MAX_KEPT_FILE_BYTES),
    weights: files.filter(isWeightFile).map((f) => ({ name: f.name, size: f.size })),
    fingerprint,
  };
}

/** The Train form's sizes from its values (any subset) over its starting values (the demo run's over the trainer's defaults). */
function formSettings(v: TrainConfigInput = {}): TrainSettings {
  const d = defaultConfig();
  const pick = <T,>(...xs: (T | undefined)[]) => xs.find((x) => x !== undefined) as T;
  return {
    num_generations: pick(v.num_generations, DEMO_TRAIN_CONFIG.num_generations, d.num_generations),
    max_completion_length: pick(v.max_completion_length, DEMO_TRAIN_CONFIG.max_completion_length, d.max_completion_length),
    max_prompt_length: pick(v.max_prompt_length, DEMO_TRAIN_CONFIG.max_prompt_length, d.max_prompt_length),
    lora_r: pick(v.lora?.r, DEMO_TRAIN_CONFIG.lora?.r, d.lora.r),
  };
}

/** The Train form's sizes: as it publishes them, else as stored in the workspace, else its starting values (the panel is not built yet). */
function currentTrainSettings(): TrainSettings {
  if (trainSettings.current) return trainSettings.current;
  const v = workspacePart<{ values: TrainConfigInput }>('train')?.values;
  return formSettings(v && typeof v === 'object' ? v : {});
}

/** Context the plan assumes for the KV cache estimate (prompt with an image plus a completion). */
const PLAN_CONTEXT_TOKENS = 2048;

/** Reads a model's small files and file sizes without downloading its weights. */
interface Inspectable {
  source: ModelSource;
  /** Named in messages: the repo id, the demo, or the picked folder. */
  name: string;
  text(file: string): Promise<string | null>;
  size(file: string): Promise<number>;
}

export interface ModelReport {
  config: Qwen3VLConfig;
  /** null when the plan was refused: nothing more is read for a model that cannot load. */
  downloadBytes: number | null;
  plan: MemoryPlan;
  problems: string[];
}

/** Files picked before a reload: small files from the stored pick, weight sizes as recorded, weights from the cache. */
function restoredInspectable(pick: StoredPick): Inspectable {
  const picked = pickedFiles(pick.files);
  return {
    source: { kind: 'cached-files', files: pick.files, fingerprint: pick.fingerprint },
    name: 'the picked files (from the weight cache)',
    text: (f) => picked.text(f),
    async size(f) {
      const w = pick.weights.find((x) => x.name === f);
      if (!w) throw new Error(`${f} was not among the picked files: pick the model's files again`);
      return w.size;
    },
  };
}

function inspectable(choice: Choice, repo: string, token: string, files: File[]): Inspectable {
  if (choice === 'demo') {
    const url = (f: string) => `${DEMO_MODEL_URL_PATH}/${f}`;
    return {
      source: { kind: 'demo' },
      name: 'the bundled demo model',
      async text(f) {
        const r = await fetch(url(f));
        // Vite's dev server (and SPA hosts) answer a missing path with index.html and 200; no model file is HTML.
        if (r.status === 404 || r.headers.get('content-type')?.startsWith('text/html')) return null;
        if (!r.ok) throw new Error(`${url(f)}: HTTP ${r.status}`);
        return r.text();
      },
      async size(f) {
        const r = await fetch(url(f), { method: 'HEAD' });
        const n = Number(r.headers.get('content-length'));
        if (!r.ok || !Number.isFinite(n)) throw new Error(`${url(f)}: HTTP ${r.status} (no size): the demo model is not bundled in this build`);
        return n;
      },
    };
  }
  if (choice === 'files') {
    const picked = pickedFiles(files);
    return { source: { kind: 'files', files }, name: 'the picked files', text: (f) => picked.text(f), size: async (f) => (await picked.open(f)).size() };
  }
  const id = choice === 'hub' ? repo.trim() : choice;
  if (!/^[\w.-]+\/[\w.-]+$/.test(id)) throw new Error(`'${id}' is not a Hugging Face repo id (owner/name)`);
  const options = token ? { token } : {};
  const hub = hubFiles(id, options);
  return { source: { kind: 'hub', repo: id, ...options }, name: id, text: (f) => hub.text(f), size: (f) => hubFileSource(id, f, options).size() };
}

/** config.json, the GPU plan and, when it fits, the checkpoint's total size; throws for a model that is not Qwen3-VL. */
async function inspect(model: Inspectable, limits: { maxBufferSize: number; maxStorageBufferBindingSize: number } | null): Promise<ModelReport> {
  const configText = await model.text('config.json');
  if (configText === null) throw new Error(`${model.name}: config.json not found; check the repo id (or folder): it is not a Hugging Face model`);
  let config: Qwen3VLConfig;
  try {
    config = parseQwen3VLConfig(configText);
  } catch (e) {
    throw new Error(`${model.name}: ${e instanceof Error ? e.message : String(e)}`);
  }
  const plan = memoryPlan(config);
  const problems = limits ? planProblems(plan, limits) : [];
  if (problems.length) return { config, downloadBytes: null, plan, problems };
  const indexText = await model.text('model.safetensors.index.json');
  let downloadBytes: number;
  if (indexText !== null) {
    const index = JSON.parse(indexText) as { metadata?: { total_size?: number }; weight_map?: Record<string, string> };
    downloadBytes = index.metadata?.total_size ?? 0;
    if (!downloadBytes) for (const shard of new Set(Object.values(index.weight_map ?? {}))) downloadBytes += await model.size(shard);
  } else {
    downloadBytes = await model.size('model.safetensors');
  }
  return { config, downloadBytes, plan, problems };
}

/** `storage`: what the engine keeps its KV cache and hidden states in with the products chosen here. */
function describeReport(r: ModelReport, limitsNote: string, storage: EngineStorage): HTMLElement {
  const t = r.config.text;
  const kv = memoryPlan(r.config, { kvCacheDtype: storage.kvCache }).kvCacheBytesPerToken * PLAN_CONTEXT_TOKENS;
  // The Train form's values, whether or not its panel was opened yet: the estimate is of the run the form would start.
  const t0 = currentTrainSettings();
  const w = { ...DEFAULT_TRAINING_WORK, generations: t0.num_generations, completionTokens: t0.max_completion_length, promptTokens: t0.max_prompt_length ?? DEFAULT_TRAINING_WORK.promptTokens, loraRank: t0.lora_r };
  const training = trainingMemoryWith(r.config, {}, w, storage);
  return h(
    'div',
    {},
    h(
      'dl',
      { class: 'kv', 'data-testid': 'model-plan' },
      h('dt', {}, 'Architecture'),
      h('dd', {}, `${t.numLayers} layers, hidden ${t.hiddenSize}, vocabulary ${t.vocabSize}`),
      h('dt', {}, 'Download (checkpoint files)'),
      h('dd', { 'data-testid': 'model-download-size' }, r.downloadBytes === null ? 'not checked (refused)' : formatBytes(r.downloadBytes)),
      h('dt', {}, 'Weights on the GPU (4-bit LM)'),
      h('dd', { 'data-testid': 'model-gpu-bytes' }, formatBytes(r.plan.totalBytes)),
      h('dt', {}, `KV cache for ${PLAN_CONTEXT_TOKENS} tokens (${storage.kvCache})`),
      h('dd', {}, formatBytes(kv)),
      h('dt', { 'data-testid': 'model-training-at' }, `Training at the Train form’s settings (${w.generations} x ${w.completionTokens} tokens after a ${w.promptTokens}-token prompt, LoRA r=${w.loraRank})`),
      h('dd', { 'data-testid': 'model-training-bytes' }, `about ${formatBytes(training.peakBytes)} of GPU memory at its peak`),
      h('dt', {}, 'The estimate assumes'),
      h('dd', { 'data-testid': 'model-training-storage' }, `the KV cache in ${storage.kvCache}, the hidden states the backward reads in ${storage.activationStorage}, the vision tower's products on ${storage.visionProducts === 'f32' ? 'the f32 units' : `${storage.visionProducts} tensor cores`}, and ${storage.phaseBuffers === 'keep' ? "generation's and training's buffers both kept between the phases" : "each phase's buffers given back before the other's"}`),
      h('dt', {}, 'Largest buffer'),
      h('dd', {}, `${formatBytes(r.plan.largestBuffer.bytes)} (${r.plan.largestBuffer.name})`),
    ),
    r.problems.length
      ? h('div', { class: 'error', role: 'alert', 'data-testid': 'model-refused' }, h('strong', {}, 'This model cannot be loaded on this GPU: '), h('ul', {}, ...r.problems.map((p) => h('li', {}, p))))
      : h('p', { 'data-testid': 'model-fits' }, `Fits this adapter's buffer limits. ${limitsNote}`),
  );
}

export function modelPanel(engine: Remote<EngineApi>, status: StatusBar): HTMLElement {
  const stored = workspacePart<StoredModel>('model');
  const choice = select(CHOICES, stored && isChoice(stored.choice) ? stored.choice : 'demo');
  const repo = h('input', { type: 'text', placeholder: 'owner/name', spellcheck: 'false', autocomplete: 'off' });
  if (typeof stored?.repo === 'string') repo.value = stored.repo;
  // The token is never stored.
  let wasLoaded = stored?.loaded === true;
  // The pick a reload loads from the weight cache, until the user picks other files.
  let restoredPick = choice.value === 'files' ? storedPick(stored) : null;
  let keptPick: StoredPick | undefined = restoredPick ?? undefined;
  const phaseBuffers = select(PHASE_BUFFER_CHOICES, stored?.phaseBuffers && PHASE_BUFFERS.includes(stored.phaseBuffers) ? stored.phaseBuffers : 'keep');
  const remember = () => saveWorkspace('model', { choice: choice.value as Choice, repo: repo.value, loaded: wasLoaded, ...(keptPick ? { pick: keptPick } : {}), phaseBuffers: phaseBuffers.value as PhaseBuffers } satisfies StoredModel);
  repo.addEventListener('change', remember);
  const token = h('input', { type: 'password', autocomplete: 'off' });
  const filesInput = h('input', { type: 'file', multiple: true });
  const folderInput = h('input', { type: 'file', webkitdirectory: true });
  const repoField = field('Repo id', repo, 'A Qwen3-VL model on huggingface.co, e.g. Qwen/Qwen3-VL-2B-Instruct or a fine-tune of it.');
  const tokenField = field('Access token (optional)', token, 'Only for gated or private repos; it stays in this tab and goes to huggingface.co only.');
  const filesField = h(
    'div',
    { class: 'row' },
    field('Model files', filesInput, 'config.json, the .safetensors shards (and their index), tokenizer files, preprocessor_config.json.'),
    field('or a model folder', folderInput),
  );
  const check = h('button', { type: 'button' }, 'Check size and memory');
  const load = h('button', { type: 'button', class: 'primary' }, 'Load model');
  const progress = h('progress', { max: 1, value: 0, 'aria-label': 'Model loading progress', hidden: true });
  const progressText = h('span', { 'data-testid': 'model-progress', 'aria-live': 'polite' });
  const report = h('div', { 'aria-live': 'polite' });
  /** The size and memory report on screen (null while none is). */
  let shownReport: { report: ModelReport; note: string } | null = null;
  const error = h('p', { class: 'error', role: 'alert', 'data-testid': 'model-error', hidden: true });
  const loaded = h('p', { 'data-testid': 'model-loaded' }, 'No model loaded.');
  const cache = h('p', { class: 'muted', 'data-testid': 'model-cache', 'aria-live': 'polite' }, 'Cache: a loaded model is kept in this browser, and its next load reads no files.');

  const phaseBuffersField = field('Between generating and training', phaseBuffers, ' ');
  const phaseBuffersNote = phaseBuffersField.querySelector('small')!;
  phaseBuffersNote.dataset.testid = 'phase-buffers-note';
  const products = select(PRODUCTS, 'f32');
  products.disabled = true;
  const productsField = field('Matrix products (prefill, scoring, training)', products, 'Checking what this GPU offers…');
  const productsNote = productsField.querySelector('small')!;
  productsNote.dataset.testid = 'products-note';
  productsNote.setAttribute('aria-live', 'polite');

  let picked: File[] = [];
  const onPick = (input: HTMLInputElement) => () => {
    picked = [...(input.files ?? [])];
    restoredPick = null;
  };
  filesInput.addEventListener('change', onPick(filesInput));
  folderInput.addEventListener('change', onPick(folderInput));
  const choiceField = field('Model source', choice, ' ');
  const choiceHint = choiceField.querySelector('small')!;
  const showFields = () => {
    // Only the bundled demo trains in a minute; the hub models take a real GPU and minutes a step.
    choiceHint.textContent =
      choice.value === 'demo'
        ? 'The demo is a tiny Qwen3-VL bundled with the app: it works offline and trains in a minute.'
        : choice.value === 'files'
          ? 'A Qwen3-VL folder in Hugging Face’s layout; once loaded, its weights are kept in this browser’s weight cache and a reload loads them from there.'
          : 'Downloaded once from huggingface.co, then kept in this browser’s weight cache.';
    repoField.hidden = choice.value !== 'hub';
    tokenField.hidden = !['hub', 'Qwen/Qwen3-VL-2B-Instruct', 'Qwen/Qwen3-VL-4B-Instruct', 'Qwen/Qwen3-VL-8B-Instruct'].includes(choice.value);
    filesField.hidden = choice.value !== 'files';
    shownReport = null;
    report.replaceChildren();
  };
  choice.addEventListener('change', () => {
    wasLoaded = false;
    restoredPick = null;
    keptPick = undefined;
    remember();
    showFields();
  });
  showFields();

  const showError = (e: unknown) => {
    error.hidden = false;
    error.textContent = e instanceof Error ? e.message : String(e);
  };

  // What the GPU offers (shader-f16, subgroup-matrix configs, packed int8 dot products) and which
  // product paths that allows, and why (src/gpu/capabilities.ts, src/model/products.ts).
  const gpuDetails = h('details', { 'data-testid': 'gpu-capabilities' }, h('summary', {}, 'What this GPU offers'));
  const info = engine.gpuInfo();
  info.then(
    (seen) => {
      const caps = capabilitiesFrom(seen.summary, seen.enabled);
      gpuDetails.append(h('ul', {}, ...[...capabilitySummary(caps), ...productPathSummary(caps)].map((line) => h('li', {}, line))));
    },
    () => gpuDetails.remove(),
  );
  const limits = info.then(
    (seen) => ({ limits: { maxBufferSize: seen.summary.limits.maxBufferSize, maxStorageBufferBindingSize: seen.summary.limits.maxStorageBufferBindingSize }, note: '' }),
    (e: unknown) => ({ limits: null, note: `(Not checked: the GPU is unavailable: ${e instanceof Error ? e.message : String(e)}.)` }),
  );
  const limitsNote = 'WebGPU does not report free GPU memory: the browser may still refuse buffers when other tabs hold memory.';

  // The engine's storage with the products chosen here (the 'auto' settings follow them), once the
  // GPU's shader-f16 and the products are known; f32 until then.
  let shaderF16: boolean | null = null;
  const storage = () => defaultEngineStorage(productsState && shaderF16 !== null ? productsState.current : 'f32', shaderF16 ?? false, phaseBuffers.value as PhaseBuffers);
  const redraw = () => {
    if (shownReport) report.replaceChildren(describeReport(shownReport.report, shownReport.note, storage()));
  };
  info.then(
    (seen) => {
      shaderF16 = capabilitiesFrom(seen.summary, seen.enabled).shaderF16;
      redraw();
    },
    () => undefined,
  );
  // The report on screen is drawn again when the Train form changes, so its training estimate is the form's.
  trainSettings.subscribe(redraw);
  // The worker holds the choice for the next runs; set again at each start of the page.
  const applyPhaseBuffers = () => {
    const v = phaseBuffers.value as PhaseBuffers;
    phaseBuffersNote.textContent = PHASE_BUFFER_CHOICES.find((c) => c.value === v)!.about;
    engine.setPhaseBuffers(v).catch(showError);
  };
  applyPhaseBuffers();
  phaseBuffers.addEventListener('change', () => {
    applyPhaseBuffers();
    remember();
    redraw();
  });
  const checkModel = async (): Promise<{ model: Inspectable; report: ModelReport } | null> => {
    error.hidden = true;
    shownReport = null;
    report.replaceChildren(h('p', { class: 'muted' }, 'Reading config.json…'));
    try {
      if (choice.value === 'files' && picked.length === 0 && !restoredPick) throw new Error('pick the model folder or its files first');
      const model = choice.value === 'files' && restoredPick ? restoredInspectable(restoredPick) : inspectable(choice.value as Choice, repo.value, token.value, picked);
      const l = await limits;
      const r = await inspect(model, l.limits);
      shownReport = { report: r, note: l.limits ? limitsNote : l.note };
      report.replaceChildren(describeReport(r, shownReport.note, storage()));
      return { model, report: r };
    } catch (e) {
      report.replaceChildren();
      showError(e);
      return null;
    }
  };

  let busy = false;
  let productsState: ProductsState | null = null;
  let focusedBefore: Element | null = null;
  const setBusy = (on: boolean) => {
    busy = on;
    if (on) focusedBefore = document.activeElement;
    for (const el of [check, load, choice]) el.toggleAttribute('disabled', on);
    if (productsState) products.disabled = on;
    // Disabling the pressed button drops keyboard focus to <body>: give it back.
    if (!on && focusedBefore instanceof HTMLElement && document.activeElement === document.body) focusedBefore.focus();
  };

  const showProducts = (state: ProductsState, message?: string) => {
    productsState = state;
    products.value = state.current;
    for (const option of products.options) option.disabled = state.paths[productFamily(option.value as Products)] !== null;
    products.disabled = busy;
    const about = PRODUCTS.find((p) => p.value === state.current)?.about ?? '';
    const { int8, f16 } = state.paths;
    const offered = int8 === null || f16 === null ? '' : ` Tensor cores: not offered by this browser on this GPU (int8: ${int8}; f16: ${f16}); Chromium exposes them to pages with unsafe WebGPU features enabled (chrome://flags/#enable-unsafe-webgpu).`;
    productsNote.textContent = `${message ? `${message} ` : ''}${about}${offered}`;
    redraw();
  };
  engine.products().then(
    (state) => showProducts(state),
    (e: unknown) => (productsNote.textContent = `Not checked: the GPU is unavailable: ${e instanceof Error ? e.message : String(e)}.`),
  );
  products.addEventListener('change', () => {
    const chosen = products.value;
    if (!isProducts(chosen)) return;
    products.disabled = true;
    engine.setProducts(chosen).then(
      (state) => showProducts(state),
      (e: unknown) => {
        if (productsState) showProducts(productsState, `Not changed: ${e instanceof Error ? e.message : String(e)}.`);
      },
    );
  });

  check.addEventListener('click', () => {
    if (busy) return;
    setBusy(true);
    void checkModel().finally(() => setBusy(false));
  });

  load.addEventListener('click', () => {
    if (busy) return;
    setBusy(true);
    const done = status.begin('Model: loading');
    void (async () => {
      const checked = await checkModel();
      if (!checked || checked.report.problems.length) return;
      progress.hidden = false;
      progress.value = 0;
      const started = performance.now();
      const onProgress = (p: LoadProgress) => {
        progress.max = Math.max(p.bytesTotal, 1);
        progress.value = p.bytesDone;
        const elapsed = (performance.now() - started) / 1000;
        const rate = p.bytesDone / Math.max(elapsed, 1e-3);
        const left = rate > 0 && p.bytesDone > 0 ? Math.ceil((p.bytesTotal - p.bytesDone) / rate) : null;
        progressText.textContent = `${p.fromCache ? 'Read from the weight cache' : 'Read and quantized'} ${formatBytes(p.bytesDone)} of ${formatBytes(p.bytesTotal)}${left !== null ? `, about ${left} s left` : ''}`;
      };
      const before = loadedModel.current;
      try {
        loadedModel.set(null);
        const info = await engine.loadModel(checked.model.source, proxy(onProgress));
        const seconds = ((performance.now() - started) / 1000).toFixed(1);
        progressText.textContent = `Loaded in ${seconds} s.`;
        loaded.textContent = `Loaded: ${info.location} (${info.layers} layers, hidden ${info.hiddenSize}, vocabulary ${info.vocabSize}).`;
        cache.textContent = info.cached
          ? 'Cache: loaded from this browser\'s weight cache (no download, no quantization).'
          : `Cache: not cached before this load: downloaded and quantized${info.cacheMessage ? `; not stored: ${info.cacheMessage}` : '; stored in this browser for the next load'}.`;
        const ran = PRODUCTS.find((p) => p.value === info.products)?.label ?? info.products;
        loaded.textContent += ` Products: ${ran}${info.productsMessage ? ` (the tensor cores could not start: ${info.productsMessage})` : ''}.`;
        if (productsState) showProducts({ ...productsState, current: info.products });
        loadedModel.set(info);
        wasLoaded = true;
        // Picked files reload from the weight cache only when their weights got there.
        if (checked.model.source.kind === 'files') keptPick = info.fingerprint && !info.cacheMessage ? pickToStore(picked, info.fingerprint) : undefined;
        remember();
        const mem = await engine.gpuMemory();
        if (mem) status.setMemory(`${formatBytes(mem.inUse)} (pool peak ${formatBytes(mem.peak)})`);
      } catch (e) {
        progressText.textContent = '';
        showError(e);
        if (e instanceof Error && e.name === 'BusyError') {
          // Refused before anything changed (a run or an eval in progress): the loaded model stays.
          loadedModel.set(before);
          return;
        }
        // The engine dropped the model it had: a reload must not bring back one that is not loaded now.
        wasLoaded = false;
        keptPick = undefined;
        remember();
        loaded.textContent = 'No model loaded.';
        if (checked.model.source.kind === 'cached-files') {
          // The cache lost the weights: the files must be picked again (no other model is loaded instead).
          restoredPick = null;
          loaded.textContent = 'No model loaded. Pick the model folder again to load it.';
        }
      } finally {
        progress.hidden = true;
      }
    })().finally(() => {
      done();
      setBusy(false);
    });
  });

  if (modelToRestore()) {
    progressText.textContent = restoredPick ? 'Reloading the model folder you had picked, from the weight cache…' : 'Reloading the model you had loaded…';
    queueMicrotask(() => load.click());
  } else if (stored?.loaded && stored.choice === 'files') {
    loaded.textContent = 'No model loaded. You had a model folder loaded whose weights could not be kept in this browser: pick it again to reload it.';
  }

  return h(
    'section',
    { class: 'panel', 'aria-labelledby': 'model-h' },
    h('h2', { id: 'model-h' }, 'Model'),
    choiceField,
    repoField,
    tokenField,
    filesField,
    productsField,
    phaseBuffersField,
    gpuDetails,
    h('div', { class: 'row' }, check, load, progress, progressText),
    error,
    report,
    loaded,
    cache,
  );
}
