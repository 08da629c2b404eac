// The Data panel: where rows come from (synthetic tasks, a Hugging Face data set read as parquet,
// local parquet/JSON/JSONL files with an optional image folder), how columns map (RLinf's
// prompt_key, answer_key, image_keys, system_prompt), filters and resize, and the seeded
// train/held-out split. The result goes to datasetStore, which the Train and Eval panels read.
// The source fields are the run config's `dataset` (src/ui/datasetConfig.ts): read from it, written
// back on every change. Files and hub data sets are checked against the image processor's limits at
// load (a row whose image it would refuse is a broken row naming file and row) and keep their
// images encoded: a row's images are decoded when it is shown or a batch needs them.
import {
  DEFAULT_IMAGE_SIZE,
  DEFAULT_SYSTEM_PROMPT,
  QWEN3_VL_IMAGE_LIMITS,
  SYNTHETIC_TASK_NAMES,
  browserDecoder,
  generateSynthetic,
  loadFile,
  loadHubDataset,
  resizeArea,
  type ColumnMapping,
  type DatasetRow,
  type ImageFolder,
  type LoadOptions,
  type LoadResult,
} from '../../data';
import type { DatasetKind, DatasetSettings, FileDatasetSettings, HubDatasetSettings, SyntheticDatasetSettings } from '../../rl/dataSource';
import { countingFetch } from '../countingFetch';
import { checkedDataset, datasetConfig } from '../datasetConfig';
import { h } from '../dom';
import { datasetStore, type SplitSettings } from '../datasetStore';
import { checkbox, field, numberInput } from '../form';
import { datasetKept } from '../persistState';
import { persistControls, saveWorkspace, workspacePart } from '../workspace';
import { formatBytes } from '../format';
import type { StatusBar } from '../status';
import { dataPreview } from './dataPreview';

interface Loaded {
  source: string;
  result: LoadResult;
  fileBytes?: number;
  /** Shown after the counts when loading ends (bytes received from the Hub). */
  note?: string;
}

/** Synthetic rows generated between yields to the event loop, so the page stays responsive. */
const SYNTHETIC_CHUNK = 8;

function integer(input: HTMLInputElement, what: string, min: number): number {
  const v = Number(input.value);
  if (!Number.isInteger(v) || v < min) throw new Error(`${what} must be a whole number ≥ ${min}, got '${input.value}'`);
  return v;
}

/** A number field as the config takes it: a number, or the text itself when it is not one (the config's check names it). */
const numberOrText = (input: HTMLInputElement): unknown => (input.value.trim() === '' || !Number.isFinite(Number(input.value)) ? input.value : Number(input.value));

/** "512x512", "512×512" or "512" (square). */
function parseSize(text: string): { width: number; height: number } {
  const m = /^\s*(\d+)\s*(?:[x×]\s*(\d+))?\s*$/i.exec(text);
  const width = m ? Number(m[1]) : NaN;
  const height = m ? Number(m[2] ?? m[1]) : NaN;
  if (!(width > 0 && height > 0)) throw new Error(`resize: '${text}' is not a size like 512x512`);
  return { width, height };
}

/** Held-out: a fraction below 1 (0.1 = 10 %) or a row count. */
function parseHeldOut(text: string): number {
  const v = Number(text);
  if (text.trim() === '' || !Number.isFinite(v) || v < 0 || (v >= 1 && !Number.isInteger(v))) {
    throw new Error(`held-out must be a fraction in [0, 1) or a whole number of rows, got '${text}'`);
  }
  return v;
}

/** Files from a folder input, keyed by path inside the picked folder ("images/1.jpg"). */
function folderFromFiles(files: FileList): ImageFolder {
  const folder = new Map<string, Blob>();
  for (const f of files) {
    const rel = f.webkitRelativePath || f.name;
    folder.set(rel.slice(rel.indexOf('/') + 1), f);
  }
  return folder;
}

const yieldToPage = () => new Promise((r) => setTimeout(r, 0));

/** The panel's first `dataset`, before the user changes it: a small synthetic set. */
const INITIAL_DATASET: SyntheticDatasetSettings = { kind: 'synthetic', tasks: [...SYNTHETIC_TASK_NAMES], count: 48, seed: 1, size: DEFAULT_IMAGE_SIZE };

/** The stored `dataset` of the last visit, resolved, or the initial one. */
function storedDataset(): DatasetSettings {
  const stored = workspacePart<{ dataset: Record<string, unknown> }>('data-config')?.dataset;
  const checked = stored ? checkedDataset(stored) : null;
  return checked?.dataset ?? INITIAL_DATASET;
}

export function dataPanel(status: StatusBar): HTMLElement {
  // Where the rows come from.
  const sourceRadios = (['synthetic', 'hub', 'file'] as const).map((value) => {
    const input = h('input', { type: 'radio', name: 'data-source', value, id: `data-source-${value}` });
    input.checked = value === 'synthetic';
    return input;
  });
  const sourceLabels: Record<DatasetKind, string> = { synthetic: 'Synthetic tasks', hub: 'Hugging Face data set', file: 'Local files' };
  const source = () => (sourceRadios.find((r) => r.checked)?.value ?? 'synthetic') as DatasetKind;

  // Synthetic.
  const taskBoxes = SYNTHETIC_TASK_NAMES.map((t) => {
    const input = h('input', { type: 'checkbox', value: t });
    input.checked = true;
    return { task: t, el: checkbox(t.replace('_', ' '), input), input };
  });
  const synSeed = numberInput(1, { min: 0, step: 1 });
  const synCount = numberInput(48, { min: 1, step: 1 });
  const synSize = numberInput(DEFAULT_IMAGE_SIZE, { min: 112, step: 1 });

  // Hugging Face.
  const hubRepo = h('input', { type: 'text', value: 'hiyouga/geometry3k', autocomplete: 'off', spellcheck: 'false' });
  const hubConfig = h('input', { type: 'text', value: 'default', autocomplete: 'off' });
  const hubSplit = h('input', { type: 'text', value: 'train', autocomplete: 'off' });
  const hubRevision = h('input', { type: 'text', value: 'main', autocomplete: 'off', spellcheck: 'false' });
  const hubToken = h('input', { type: 'password', autocomplete: 'off' });

  // Local files. The config names the picked file and folder (kept over a reload; the files are not).
  const fileInput = h('input', { type: 'file', accept: '.parquet,.json,.jsonl,.ndjson' });
  const folderInput = h('input', { type: 'file', webkitdirectory: true, multiple: true });
  let filePath = '';
  let imageFolder: string | null = null;
  const limit = numberInput(200, { min: 1, step: 1 });

  // Mapping and options.
  const promptKey = h('input', { type: 'text', autocomplete: 'off', placeholder: 'auto' });
  const answerKey = h('input', { type: 'text', autocomplete: 'off', placeholder: 'auto' });
  const imageKeys = h('input', { type: 'text', autocomplete: 'off', placeholder: 'auto' });
  const systemPrompt = h('textarea', { rows: 3, placeholder: DEFAULT_SYSTEM_PROMPT });
  const numericOnly = h('input', { type: 'checkbox' });
  const resizeOn = h('input', { type: 'checkbox' });
  const resizeTo = h('input', { type: 'text', value: '512x512', autocomplete: 'off' });
  const heldOut = h('input', { type: 'text', value: '0.2', inputmode: 'decimal', autocomplete: 'off' });
  const splitSeed = numberInput(0, { min: 0, step: 1 });

  const load = h('button', { type: 'button', class: 'primary' }, 'Generate');
  const progress = h('progress', { hidden: true, 'aria-label': 'Loading progress' });
  const progressText = h('span', { 'aria-live': 'polite', 'data-testid': 'data-progress' });
  const error = h('p', { class: 'error', role: 'alert', hidden: true, 'data-testid': 'data-error' });

  const groups: Record<DatasetKind, HTMLElement> = {
    synthetic: h(
      'div',
      {},
      h('fieldset', { class: 'inline' }, h('legend', {}, 'Tasks'), ...taskBoxes.map((b) => b.el)),
      h('div', { class: 'row' }, field('Seed', synSeed), field('Rows', synCount), field('Image size (px)', synSize, 'square, at least 112')),
    ),
    hub: h(
      'div',
      { hidden: true },
      h(
        'div',
        { class: 'row' },
        field('Repo id', hubRepo, 'e.g. hiyouga/geometry3k or AI4Math/MathVista'),
        field('Config', hubConfig),
        field('Split', hubSplit),
        field('Revision', hubRevision, 'main: the current parquet export; a commit of refs/convert/parquet pins the rows'),
      ),
      h('div', { class: 'row' }, field('Access token (gated or private data sets)', hubToken, 'used only for requests to the Hub; not stored')),
    ),
    file: h(
      'div',
      { hidden: true },
      h('div', { class: 'row' }, field('Data file (parquet, JSON, JSONL)', fileInput), field('Image folder', folderInput, 'only needed when image cells are file names')),
    ),
  };
  const limitField = field('Read at most (rows)', limit, 'empty: all');
  const numericField = checkbox('Numeric answers only', numericOnly, 'rows whose answer is not a number are counted as filtered out');

  const updateSource = () => {
    const s = source();
    for (const [k, el] of Object.entries(groups)) el.hidden = k !== s;
    // Synthetic rows are drawn to order and always have numeric answers.
    for (const el of [limitField, numericField, mapping]) el.hidden = s === 'synthetic';
    load.textContent = s === 'synthetic' ? 'Generate' : s === 'hub' ? 'Load from the Hub' : 'Load file';
  };

  const mapping = h(
    'fieldset',
    { hidden: true },
    h('legend', {}, 'Columns'),
    h('p', { class: 'muted' }, 'Leave all three empty to recognise the geo3k (problem, images, answer) or MathVista (question, decoded_image, answer) layout.'),
    h('div', { class: 'row' }, field('prompt_key', promptKey), field('answer_key', answerKey), field('image_keys', imageKeys, 'comma-separated')),
  );

  const columnMapping = (): ColumnMapping | null => {
    const keys = [promptKey.value.trim(), answerKey.value.trim(), imageKeys.value.trim()];
    if (keys.every((k) => k === '')) return null;
    if (keys.some((k) => k === '')) throw new Error('set all of prompt_key, answer_key and image_keys, or none of them');
    return { prompt_key: keys[0], answer_key: keys[1], image_keys: keys[2].split(',').map((k) => k.trim()).filter(Boolean) };
  };

  /** The fields as TrainConfig.dataset (unchecked: checkedDataset names what is wrong). */
  const readDataset = (): Record<string, unknown> => {
    const kind = source();
    if (kind === 'synthetic') {
      return { kind, tasks: taskBoxes.filter((b) => b.input.checked).map((b) => b.task), seed: numberOrText(synSeed), count: numberOrText(synCount), size: numberOrText(synSize) };
    }
    const mapped = { mapping: columnMapping(), limit: limit.value.trim() === '' ? null : numberOrText(limit), numeric_only: numericOnly.checked };
    if (kind === 'hub') return { kind, repo_id: hubRepo.value.trim(), config: hubConfig.value.trim(), split: hubSplit.value.trim(), revision: hubRevision.value.trim(), ...mapped };
    return { kind, path: filePath, format: null, image_folder: imageFolder, ...mapped };
  };

  /** Shows `d` in the fields (those of its kind; the others keep theirs). */
  const writeDataset = (d: DatasetSettings) => {
    for (const r of sourceRadios) r.checked = r.value === d.kind;
    if (d.kind === 'synthetic') {
      for (const b of taskBoxes) b.input.checked = d.tasks.includes(b.task);
      [synSeed.value, synCount.value, synSize.value] = [String(d.seed), String(d.count), String(d.size)];
      return;
    }
    [promptKey.value, answerKey.value, imageKeys.value] = d.mapping ? [d.mapping.prompt_key, d.mapping.answer_key, d.mapping.image_keys.join(', ')] : ['', '', ''];
    limit.value = d.limit === null ? '' : String(d.limit);
    numericOnly.checked = d.numeric_only;
    if (d.kind === 'hub') [hubRepo.value, hubConfig.value, hubSplit.value, hubRevision.value] = [d.repo_id, d.config, d.split, d.revision];
    else [filePath, imageFolder] = [d.path, d.image_folder];
  };

  /** Publishes the fields as the run config's dataset (with its error while one is not valid), and saves a valid one. */
  const publish = () => {
    let checked;
    try {
      checked = checkedDataset(readDataset());
    } catch (e) {
      checked = { dataset: null, error: e instanceof Error ? e.message : String(e) };
    }
    datasetConfig.set(checked);
    if (checked.dataset) saveWorkspace('data-config', { dataset: checked.dataset });
  };

  const splitSettings = (): SplitSettings => ({ heldOut: parseHeldOut(heldOut.value), seed: integer(splitSeed, 'split seed', 0) });

  const showError = (e: unknown) => {
    error.hidden = false;
    error.textContent = e instanceof Error ? e.message : String(e);
  };

  const synthetic = async ({ tasks, seed, count, size }: SyntheticDatasetSettings): Promise<Loaded> => {
    const rows: DatasetRow[] = [];
    progress.max = count;
    for (let i = 0; i < count; i++) {
      rows.push(generateSynthetic(tasks[i % tasks.length], { seed, index: i, size }));
      if ((i + 1) % SYNTHETIC_CHUNK === 0) {
        progress.value = i + 1;
        progressText.textContent = `${i + 1} of ${count} rows`;
        await yieldToPage();
      }
    }
    return { source: `synthetic ${tasks.join('+')}, seed ${seed}, ${size}px`, result: { rows, broken: [], filtered: [], total: rows.length } };
  };

  // Images stay encoded (decoded when shown or trained on); the processor's limits apply at load.
  const loadOptions = (d: HubDatasetSettings | FileDatasetSettings): LoadOptions => ({
    decoder: browserDecoder,
    lazy: true,
    limits: QWEN3_VL_IMAGE_LIMITS,
    mapping: d.mapping ?? undefined,
    numericOnly: d.numeric_only,
    resize: resizeOn.checked ? parseSize(resizeTo.value) : undefined,
    limit: d.limit ?? undefined,
  });

  const hub = async (d: HubDatasetSettings): Promise<Loaded> => {
    let received = '';
    const fetchCounted = countingFetch((p) => (progressText.textContent = received = `${formatBytes(p.bytes)} received in ${p.requests} request(s)`));
    const result = await loadHubDataset(d.repo_id, d, { ...loadOptions(d), token: hubToken.value || undefined, fetch: fetchCounted });
    return { source: `${d.repo_id} (${d.config}/${d.split}${d.revision === 'main' ? '' : `@${d.revision}`})`, result, note: received };
  };

  const files = async (d: FileDatasetSettings): Promise<Loaded> => {
    const file = fileInput.files?.[0];
    if (!file) throw new Error(d.path ? `pick ${d.path} again: the browser does not keep picked files over a reload` : 'pick a data file first');
    const folder = folderInput.files?.length ? folderFromFiles(folderInput.files) : undefined;
    progressText.textContent = `reading ${file.name} (${formatBytes(file.size)})`;
    return { source: file.name, fileBytes: file.size, result: await loadFile(file, { ...loadOptions(d), folder, source: file.name }) };
  };

  /** Resize (synthetic rows; loaders resize while decoding) and the data set's system prompt. */
  const finish = (result: LoadResult): LoadResult => {
    const size = resizeOn.checked && source() === 'synthetic' ? parseSize(resizeTo.value) : null;
    const system = systemPrompt.value.trim();
    if (!size && !system) return result;
    const rows = result.rows.map((r) => ({
      ...r,
      images: size ? r.images.map((img) => resizeArea(img, size.width, size.height)) : r.images,
      ...(system ? { system_prompt: system } : {}),
    }));
    return { ...result, rows };
  };

  load.addEventListener('click', async () => {
    error.hidden = true;
    load.disabled = true;
    progress.hidden = false;
    progress.removeAttribute('value'); // indeterminate until a count is known
    progressText.textContent = '';
    const kind = source();
    const done = status.begin(`Data: ${sourceLabels[kind].toLowerCase()}`);
    try {
      const split = splitSettings();
      publish();
      const { dataset: d, error: invalid } = datasetConfig.current;
      if (!d) throw new Error(kind === 'file' && !fileInput.files?.length ? 'pick a data file first' : invalid);
      const { source: name, result, note, fileBytes } = await (d.kind === 'synthetic' ? synthetic(d) : d.kind === 'hub' ? hub(d) : files(d));
      datasetStore.set({ source: name, settings: d, fileBytes, result: finish(result) }, split);
      progressText.textContent = `done: ${result.rows.length} usable of ${result.total} records${note ? `; ${note}` : ''}`;
      if (!datasetKept()) progressText.textContent += ' (too large to keep over a reload: load it again after one)';
    } catch (e) {
      showError(e);
      progressText.textContent = '';
    } finally {
      done();
      load.disabled = false;
      progress.hidden = true;
    }
  });

  const resplit = () => {
    if (!datasetStore.current) return;
    try {
      datasetStore.resplit(splitSettings());
      error.hidden = true;
    } catch (e) {
      showError(e);
    }
  };
  heldOut.addEventListener('change', resplit);
  splitSeed.addEventListener('change', resplit);

  // The options beyond the config's dataset are the panel's own.
  persistControls('data', { systemPrompt, resizeOn, resizeTo, heldOut, splitSeed });
  writeDataset(storedDataset());
  fileInput.addEventListener('change', () => (filePath = fileInput.files?.[0]?.name ?? ''));
  folderInput.addEventListener('change', () => {
    const first = folderInput.files?.[0];
    imageFolder = first ? (first.webkitRelativePath || first.name).split('/')[0] : null;
  });
  for (const r of sourceRadios) r.addEventListener('change', updateSource);
  const sourceFields = [...sourceRadios, ...taskBoxes.map((b) => b.input), synSeed, synCount, synSize, hubRepo, hubConfig, hubSplit, hubRevision, fileInput, folderInput, limit, promptKey, answerKey, imageKeys, numericOnly];
  for (const el of sourceFields) {
    el.addEventListener('input', publish);
    el.addEventListener('change', publish);
  }
  updateSource();
  publish();
  if (datasetStore.current) progressText.textContent = `Restored from your last visit: ${datasetStore.current.source}.`;
  return h(
    'section',
    { class: 'panel', 'aria-labelledby': 'data-h' },
    h('h2', { id: 'data-h' }, 'Data'),
    h(
      'fieldset',
      { class: 'inline' },
      h('legend', {}, 'Source'),
      ...sourceRadios.map((r) => h('label', { for: r.id }, r, ` ${sourceLabels[r.value as DatasetKind]}`)),
    ),
    groups.synthetic,
    groups.hub,
    groups.file,
    mapping,
    h(
      'fieldset',
      {},
      h('legend', {}, 'Options'),
      h('div', { class: 'row' }, limitField, numericField, checkbox('Resize images', resizeOn), field('Resize to', resizeTo, 'width x height, area resampling')),
      field('System prompt', systemPrompt, 'for every row; empty for the default shown'),
    ),
    h(
      'fieldset',
      {},
      h('legend', {}, 'Train / held-out split'),
      h('div', { class: 'row' }, field('Held out', heldOut, 'fraction (0.2) or number of rows'), field('Split seed', splitSeed)),
    ),
    h('div', { class: 'row' }, load, progress, progressText),
    error,
    h('h3', {}, 'Loaded data set'),
    dataPreview(),
  );
}
