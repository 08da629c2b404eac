// The Adapters panel: the adapters saved in this browser (trained runs are saved when they stop or
// finish; imported ones when picked), export of the adapter on the model as PEFT's
// adapter_model.safetensors + adapter_config.json (refused, with the reason, when A or B is all
// zeros), import of a PEFT adapter from picked files, and applying a saved adapter to the loaded
// model so that the Eval panel evaluates with it.
import type { Remote } from 'comlink';
import { ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, exportPeft, importPeft } from '../../adapter/peft';
import { pickedFiles } from '../../model/safetensors';
import { deleteAdapter, listAdapters, loadAdapter, saveAdapter } from '../../store/adapters';
import type { EngineApi } from '../../worker/api';
import { adaptersChanged, loadedModel } from '../appState';
import { adapterOnModel, configHash, describeAdapter } from '../identity';
import { h } from '../dom';
import { downloadBlob } from '../download';
import { userMessage } from '../errors';
import { field } from '../form';
import type { StatusBar } from '../status';

/** The adapter's name from picked files: the folder they were picked in, when there is one. */
function folderName(files: readonly File[]): string | null {
  const rel = files.find((f) => f.webkitRelativePath)?.webkitRelativePath;
  const top = rel?.split('/')[0];
  return top && /^[\w.@-]+$/.test(top) ? top : null;
}

export function adaptersPanel(engine: Remote<EngineApi>, status: StatusBar): HTMLElement {
  const exportCurrent = h('button', { type: 'button', class: 'primary' }, 'Export the adapter on the model');
  const message = h('p', { 'data-testid': 'adapters-message', 'aria-live': 'polite' });
  const error = h('p', { class: 'error', role: 'alert', 'data-testid': 'adapters-error', hidden: true });
  const importInput = h('input', { type: 'file', multiple: true, accept: '.json,.safetensors' });
  const importFolder = h('input', { type: 'file', webkitdirectory: true });
  const importName = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'the folder’s name' });
  const importButton = h('button', { type: 'button' }, 'Import');
  let importFiles: File[] = [];
  for (const input of [importInput, importFolder]) {
    input.addEventListener('change', () => {
      importFiles = [...(input.files ?? [])];
      const folder = folderName(importFiles);
      if (folder && !importName.value.trim()) importName.value = folder;
    });
  }
  const listBody = h('tbody', {});

  const showError = (e: unknown) => {
    error.hidden = false;
    error.textContent = userMessage(e);
  };
  const ok = (text: string) => {
    error.hidden = true;
    message.textContent = text;
  };

  loadedModel.subscribe((m) => (exportCurrent.disabled = !m));

  exportCurrent.addEventListener('click', () => {
    const done = status.begin('Adapters: export');
    engine
      .exportAdapter()
      .then(({ weights, config }) => {
        downloadBlob(weights, ADAPTER_WEIGHTS_FILE);
        downloadBlob(config, ADAPTER_CONFIG_FILE);
        const a = adapterOnModel.current;
        const base = loadedModel.current?.baseModel;
        const picked = loadedModel.current?.fingerprint !== undefined;
        const baseNote =
          base === 'vlrl-demo'
            ? ' base_model_name_or_path is “vlrl-demo”, the bundled demo model: it is not on the Hub, so load the base from the public/demo folder of the vlrl repository.'
            : base && picked
              ? ` base_model_name_or_path is “${base}”, the folder picked here: PEFT loads the base from that path (set it to the Hub id if the folder came from there).`
              : base
                ? ` base_model_name_or_path is ${base}.`
                : ' base_model_name_or_path is empty (model files picked one by one): set it to your model’s Hub id or path.';
        ok(`Exported ${a ? describeAdapter(a) : 'the adapter'} as ${ADAPTER_WEIGHTS_FILE} and ${ADAPTER_CONFIG_FILE}.${baseNote}`);
      }, showError)
      .finally(done);
  });

  importButton.addEventListener('click', () => {
    const files = importFiles;
    void (async () => {
      try {
        if (files.length === 0) throw new Error(`pick ${ADAPTER_CONFIG_FILE} and ${ADAPTER_WEIGHTS_FILE}, or their folder`);
        const typed = importName.value.trim();
        if (typed && !/^[\w.@-]+$/.test(typed)) throw new Error(`adapter name '${typed}': use letters, digits, '_', '.', '@' or '-'`);
        const name = typed || folderName(files) || `imported-${new Date().toISOString().replace(/[:.]/g, '-')}`;
        const adapter = await importPeft(pickedFiles(files), name);
        await saveAdapter(adapter, { origin: 'imported' });
        adaptersChanged.set(adaptersChanged.current + 1);
        ok(`Imported ${name}: r ${adapter.r}, ${adapter.modules.length} modules.`);
      } catch (e) {
        showError(e);
      }
    })();
  });

  const download = async (name: string) => {
    const adapter = await loadAdapter(name);
    if (!adapter) throw new Error(`no saved adapter '${name}'`);
    const { weights, config } = exportPeft(adapter);
    downloadBlob(new Blob([weights]), ADAPTER_WEIGHTS_FILE);
    downloadBlob(new Blob([config], { type: 'application/json' }), ADAPTER_CONFIG_FILE);
    ok(`Exported ${name}.`);
  };
  const apply = async (name: string) => {
    const adapter = await loadAdapter(name);
    if (!adapter) throw new Error(`no saved adapter '${name}'`);
    await engine.applyAdapter(adapter);
    // A trained adapter names its run, the step it was saved at, and the run's config.
    const saved = (await listAdapters()).find((a) => a.name === name);
    const runRecord = saved?.runId ? (await engine.trainingRuns()).find((r) => r.runId === saved.runId) : undefined;
    adapterOnModel.set({ name, runId: saved?.runId, step: runRecord?.step, configHash: runRecord ? await configHash(runRecord.config) : undefined });
    message.replaceChildren(`${name} is on the model now: `, h('a', { href: '#eval' }, 'evaluate it'), ' with “With the adapter on the model”.');
    error.hidden = true;
  };

  const refresh = async () => {
    const list = await listAdapters();
    listBody.replaceChildren(
      ...(list.length === 0
        ? [h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'No adapters saved yet: a training run saves its adapter when it stops or finishes; or import one.'))]
        : list.map((a) =>
            h(
              'tr',
              { 'data-adapter': a.name },
              h('td', {}, a.name),
              h('td', {}, a.origin),
              h('td', {}, new Date(a.savedAt).toLocaleString()),
              h('td', { class: 'num' }, `r ${a.r}, α ${a.alpha}`),
              h('td', { class: 'num' }, `${a.modules} modules, ${a.parameters.toLocaleString()} values`),
              h(
                'td',
                {},
                h('button', { type: 'button', 'aria-label': `Apply ${a.name} to the model`, disabled: !loadedModel.current, onclick: () => void apply(a.name).catch(showError) }, 'Apply'),
                h('button', { type: 'button', 'aria-label': `Export ${a.name}`, onclick: () => void download(a.name).catch(showError) }, 'Export'),
                h('button', { type: 'button', 'aria-label': `Delete ${a.name}`, onclick: () => void deleteAdapter(a.name).then(() => adaptersChanged.set(adaptersChanged.current + 1), showError) }, 'Delete'),
              ),
            ),
          )),
    );
  };
  adaptersChanged.subscribe(() => void refresh().catch(showError));
  loadedModel.subscribe(() => void refresh().catch(showError));

  return h(
    'section',
    { class: 'panel', 'aria-labelledby': 'adapters-h' },
    h('h2', { id: 'adapters-h' }, 'Adapters'),
    h('p', {}, 'PEFT’s layout for Qwen3-VL: load the two files with PeftModel.from_pretrained(model, folder). An adapter whose A or B is all zeros is refused: it changes nothing.'),
    h('div', { class: 'row' }, exportCurrent),
    h(
      'div',
      { class: 'row' },
      field('Adapter files to import', importInput, `${ADAPTER_CONFIG_FILE} and ${ADAPTER_WEIGHTS_FILE} (F32, BF16 or F16).`),
      field('or their folder', importFolder),
      field('Name', importName, 'Kept in this browser under this name; empty: the folder’s name, else imported-<date>.'),
      importButton,
    ),
    error,
    message,
    h('h3', {}, 'Saved adapters'),
    h('table', { 'data-testid': 'adapters-list' }, h('thead', {}, h('tr', {}, ...['name', 'origin', 'saved', 'rank', 'size', ''].map((x) => h('th', { scope: 'col' }, x)))), listBody),
  );
}
