// The Eval panel: the loaded model, with or without its adapter, over the Data panel's held-out
// rows, greedy or sampled; progress row by row; per-sample records, accuracy and format
// compliance; every run saved in IndexedDB (src/store/evals.ts) and exportable as JSON; a
// before/after table and a per-sample diff (fixed, broken, unchanged) of any two saved runs.
import type { Remote } from 'comlink';
import { DEFAULT_SYSTEM_PROMPT } from '../../data/prompt';
import { compareRuns, type Change } from '../../eval/diff';
import { evalRunToJson, type AnswerFormat, type EvalRecord, type EvalRun, type EvalSummary } from '../../eval/records';
import type { EvalProgress } from '../../eval/runner';
import { listEvalRuns, loadEvalRun, saveEvalRun } from '../../store/evals';
import type { EngineApi } from '../../worker/api';
import { proxy } from '../../worker/client';
import { latestEval, loadedModel, rewardTerms } from '../appState';
import { datasetStore } from '../datasetStore';
import { h } from '../dom';
import { downloadBlob } from '../download';
import { field, numberInput, select } from '../form';
import { formatNumber, formatPercent } from '../format';
import { adapterOnModel, describeAdapter, type AdapterIdentity } from '../identity';
import { persistControls } from '../workspace';
import type { StatusBar } from '../status';

const pct = formatPercent;

/** A saved eval run with the identity of the adapter it evaluated (kept in the record and its JSON export). */
type IdentifiedEvalRun = EvalRun & { adapterIdentity?: AdapterIdentity | null };

/** Compare rows that are shares (shown as percentages; their change in percentage points). */
const SHARE_METRICS = new Set(['accuracy', 'format compliance', 'rows with a correct sample', 'truncated']);

/** A run's records; a cancelled run's table says that it holds only the rows finished before the cancel. */
function recordsTable(records: readonly EvalRecord[], cancelled = false): HTMLTableElement {
  const cols = ['id', 'prediction', 'gold', 'correct', 'format_ok', 'reward terms', 'completion'];
  return h(
    'table',
    { 'data-testid': 'eval-records', 'data-status': cancelled ? 'cancelled' : 'complete' },
    cancelled ? h('caption', {}, 'Cancelled: only the rows finished before the cancel.') : null,
    h('thead', {}, h('tr', {}, ...cols.map((c) => h('th', { scope: 'col' }, c)))),
    h(
      'tbody',
      {},
      ...records.map((r) =>
        h(
          'tr',
          { 'data-id': r.id },
          h('td', {}, r.sample ? `${r.id} #${r.sample}` : r.id),
          h('td', {}, r.prediction ?? '—'),
          h('td', {}, r.gold),
          h('td', {}, r.correct ? 'yes' : 'no'),
          h('td', {}, r.format_ok ? 'yes' : 'no'),
          h('td', { class: 'num' }, r.terms.map((t) => `${t.name} ${formatNumber(t.value)}`).join(', ')),
          h('td', {}, h('pre', { class: 'completion' }, r.completion)),
        ),
      ),
    ),
  );
}

/** "label: ..." for a finished run, "label (cancelled): ..." for a cancelled one. */
function runHeading(r: EvalRun): string {
  return `${r.label}${r.status === 'cancelled' ? ' (cancelled)' : ''}`;
}

function summaryLine(s: EvalSummary): string {
  return `${s.samples} samples over ${s.rows} rows: accuracy ${pct(s.accuracy)}, format compliance ${pct(s.formatCompliance)}, mean reward ${formatNumber(s.meanReward)}.`;
}

export function evalPanel(engine: Remote<EngineApi>, status: StatusBar): HTMLElement {
  const withAdapter = select(
    [
      { value: 'base', label: 'Base model (no adapter)' },
      { value: 'adapter', label: 'With the adapter on the model (trained or applied)' },
    ],
    'base',
  );
  const decoding = select(
    [
      { value: 'greedy', label: 'Greedy' },
      { value: 'sampled', label: 'Sampled' },
    ],
    'greedy',
  );
  const temperature = numberInput(1, { step: 'any', min: 0 });
  const topP = numberInput(1, { step: 'any', min: 0, max: 1 });
  const samples = numberInput(1, { step: '1', min: 1 });
  const seed = numberInput(0, { step: '1', min: 0 });
  const maxNew = numberInput(256, { step: '1', min: 1 });
  const format = select<AnswerFormat>(
    [
      { value: 'solution', label: '<SOLUTION> block (the seeds’ prompt)' },
      { value: 'boxed', label: '\\boxed{} (geo3k)' },
    ],
    'solution',
  );
  const label = h('input', { type: 'text', value: 'baseline' });
  const systemPrompt = h('textarea', { rows: 2 });
  systemPrompt.value = DEFAULT_SYSTEM_PROMPT;
  const sampledFields = h(
    'div',
    { class: 'row', hidden: true },
    field('Temperature', temperature),
    field('top_p', topP),
    field('Samples per row', samples, 'More than one gives pass@k in “rows with a correct sample”.'),
  );
  decoding.addEventListener('change', () => (sampledFields.hidden = decoding.value !== 'sampled'));
  // Not "Evaluate": after a reload the model starts without the adapter that choice meant.
  persistControls('eval', { decoding, temperature, topP, samples, seed, maxNew, format, label, systemPrompt });
  sampledFields.hidden = decoding.value !== 'sampled';
  // The adapter option names the adapter it would evaluate.
  adapterOnModel.subscribe((a) => (withAdapter.options[1].textContent = a ? `With the adapter on the model: ${describeAdapter(a)}` : 'With the adapter on the model (trained or applied)'));

  const run = h('button', { type: 'button', class: 'primary' }, 'Run eval');
  const cancel = h('button', { type: 'button', disabled: true }, 'Cancel eval');
  const runReason = h('p', { class: 'hint', 'data-testid': 'eval-run-reason', 'aria-live': 'polite' });
  const cancelNote = h('small', { class: 'hint' }, 'Cancel stops after the row in flight; the rows finished so far are kept, marked cancelled.');
  const progress = h('progress', { max: 1, value: 0, 'aria-label': 'Eval progress', hidden: true });
  const progressText = h('span', { 'data-testid': 'eval-progress', 'aria-live': 'polite' });
  const rowsNote = h('p', { 'data-testid': 'eval-rows' });
  const error = h('p', { class: 'error', role: 'alert', 'data-testid': 'eval-error', hidden: true });
  const summary = h('p', { 'data-testid': 'eval-summary', 'aria-live': 'polite' });
  const records = h('div', {});

  const savedBody = h('tbody', {});
  const before = select([{ value: '', label: '—' }], '');
  const after = select([{ value: '', label: '—' }], '');
  const compare = h('button', { type: 'button' }, 'Compare');
  const comparison = h('div', { 'data-testid': 'eval-compare', 'aria-live': 'polite' });

  const showError = (e: unknown) => {
    error.hidden = false;
    error.textContent = e instanceof Error ? e.message : String(e);
  };
  const sync = () => {
    run.disabled = busy || !loadedModel.current || !datasetStore.current?.split.heldOut.length;
    // A disabled Run says why.
    runReason.textContent = busy ? '' : !loadedModel.current ? 'Run eval needs a model: load one in the Model panel.' : !datasetStore.current?.split.heldOut.length ? 'Run eval needs held-out rows: load a data set in the Data panel.' : '';
    runReason.hidden = runReason.textContent === '';
    cancel.disabled = !busy;
  };
  let busy = false;
  datasetStore.subscribe((d) => {
    rowsNote.textContent = d ? `Held-out rows: ${d.split.heldOut.length} of ${d.source} (Data panel).` : 'Held-out rows: none; load a data set in the Data panel first.';
    sync();
  });
  loadedModel.subscribe(sync);

  const refreshSaved = async () => {
    const runs = await listEvalRuns();
    const options = runs.map((r) => ({ value: r.id, label: `${r.label || r.id} (${new Date(r.createdAt).toLocaleTimeString()}, accuracy ${pct(r.summary.accuracy)})` }));
    for (const [sel, pick] of [
      [before, runs[1]?.id ?? runs[0]?.id ?? ''],
      [after, runs[0]?.id ?? ''],
    ] as const) {
      sel.replaceChildren(h('option', { value: '' }, '—'), ...options.map((o) => h('option', { value: o.value }, o.label)));
      sel.value = pick;
    }
    savedBody.replaceChildren(
      ...runs.map((r) =>
        h(
          'tr',
          { 'data-eval': r.id },
          h('td', {}, r.status === 'cancelled' ? `${r.label || '—'} (cancelled)` : r.label || '—'),
          h('td', {}, r.adapter ?? 'base model'),
          h('td', {}, new Date(r.createdAt).toLocaleString()),
          h('td', { class: 'num' }, pct(r.summary.accuracy)),
          h('td', { class: 'num' }, pct(r.summary.formatCompliance)),
          h('td', { class: 'num' }, r.summary.samples),
          h(
            'td',
            {},
            h('button', { type: 'button', 'aria-label': `Show the records of ${r.label || r.id}`, onclick: () => void show(r.id) }, 'Show'),
            h('button', { type: 'button', 'aria-label': `Export ${r.label || r.id} as JSON`, onclick: () => void exportRun(r.id) }, 'Export JSON'),
          ),
        ),
      ),
    );
  };
  const show = async (id: string) => {
    const r = await loadEvalRun(id);
    if (!r) return;
    summary.textContent = `${runHeading(r)}: ${summaryLine(r.summary)}`;
    records.replaceChildren(recordsTable(r.records, r.status === 'cancelled'));
  };
  const exportRun = async (id: string) => {
    const r = await loadEvalRun(id);
    if (r) downloadBlob(new Blob([evalRunToJson(r)], { type: 'application/json' }), `eval-${(r.label || r.id).replace(/[^\w.-]+/g, '_')}.json`);
  };

  run.addEventListener('click', () => {
    const rows = datasetStore.current?.split.heldOut;
    if (!rows?.length || busy) return;
    error.hidden = true;
    const pressedRun = document.activeElement === run;
    busy = true;
    sync();
    // Run is disabled now; a keyboard user lands on Cancel, the one thing left to do.
    if (pressedRun) cancel.focus();
    const done = status.begin('Eval');
    const sampled = decoding.value === 'sampled';
    const useAdapter = withAdapter.value === 'adapter';
    progress.hidden = false;
    progress.max = rows.length;
    progress.value = 0;
    const shown: EvalRecord[] = [];
    const onProgress = (p: EvalProgress) => {
      progress.value = p.done;
      progressText.textContent = `${p.done} of ${p.total} rows`;
      shown.push(...p.records);
      summary.textContent = summaryLine(p.summary);
      records.replaceChildren(recordsTable(shown));
    };
    void (async () => {
      try {
        await engine.setDataset(rows);
        const result: EvalRun = await engine.runEval(
          {
            terms: rewardTerms.current,
            answerFormat: format.value as AnswerFormat,
            sampling: { temperature: sampled ? Number(temperature.value) : 0, topP: sampled ? Number(topP.value) : 1, topK: 0, maxNewTokens: Number(maxNew.value), seed: Number(seed.value) },
            samplesPerRow: sampled ? Number(samples.value) : 1,
            lora: useAdapter,
            systemPrompt: systemPrompt.value.trim() === '' ? null : systemPrompt.value,
            label: label.value,
          },
          proxy(onProgress),
        );
        const identity = useAdapter ? adapterOnModel.current : null;
        const saved: IdentifiedEvalRun = { ...result, adapter: useAdapter ? (identity ? describeAdapter(identity) : 'an unnamed adapter on the model') : null, adapterIdentity: identity };
        await saveEvalRun(saved);
        latestEval.set(saved);
        summary.textContent = `${runHeading(saved)}: ${summaryLine(saved.summary)}`;
        records.replaceChildren(recordsTable(saved.records, saved.status === 'cancelled'));
        if (saved.status === 'cancelled') progressText.textContent = `Cancelled after ${new Set(saved.records.map((r) => r.id)).size} of ${rows.length} rows.`;
        await refreshSaved();
      } catch (e) {
        showError(e);
      } finally {
        progress.hidden = true;
        // Disabling the focused Cancel button drops keyboard focus to <body>: move it to Run.
        const hadFocus = document.activeElement === cancel;
        busy = false;
        sync();
        if (hadFocus) run.focus();
        done();
      }
    })();
  });
  cancel.addEventListener('click', () => {
    progressText.textContent = 'Cancelling after the row in flight…';
    void engine.cancelEval();
  });

  compare.addEventListener('click', () => {
    void (async () => {
      const [b, a] = await Promise.all([loadEvalRun(before.value), loadEvalRun(after.value)]);
      if (!b || !a) {
        comparison.replaceChildren(h('p', { class: 'error' }, 'Pick two saved runs.'));
        return;
      }
      const c = compareRuns(b, a);
      const changed = (kind: Change) => c.samples.filter((s) => s.change === kind);
      comparison.replaceChildren(
        h(
          'table',
          { 'data-testid': 'eval-before-after' },
          h('thead', {}, h('tr', {}, ...['metric', b.label || 'before', a.label || 'after', 'change'].map((x) => h('th', { scope: 'col' }, x)))),
          h(
            'tbody',
            {},
            ...c.table.map((r) => {
              const share = SHARE_METRICS.has(r.metric);
              const v = share ? pct : formatNumber;
              const delta = share ? `${(100 * r.delta).toFixed(1)} pp` : formatNumber(r.delta);
              return h('tr', {}, h('th', { scope: 'row' }, r.metric), h('td', { class: 'num' }, v(r.before)), h('td', { class: 'num' }, v(r.after)), h('td', { class: 'num' }, `${r.delta >= 0 ? '+' : ''}${delta}`));
            }),
          ),
        ),
        h('p', { 'data-testid': 'eval-diff-counts' }, `Fixed ${c.counts.fixed}, broken ${c.counts.broken}, unchanged ${c.counts.unchanged}` + (c.onlyBefore.length || c.onlyAfter.length ? `; ${c.onlyBefore.length} samples only before, ${c.onlyAfter.length} only after` : '') + '.'),
        ...(['fixed', 'broken'] as const).map((kind) =>
          h(
            'details',
            { open: changed(kind).length > 0 },
            h('summary', {}, `${kind} (${changed(kind).length})`),
            h('ul', {}, ...changed(kind).map((s) => h('li', {}, `${s.id}: ${s.before.prediction ?? '—'} → ${s.after.prediction ?? '—'} (gold ${s.before.gold})`))),
          ),
        ),
      );
    })().catch((e: unknown) => comparison.replaceChildren(h('p', { class: 'error' }, String(e))));
  });

  void refreshSaved().catch(showError);
  sync();

  return h(
    'section',
    { class: 'panel', 'aria-labelledby': 'eval-h' },
    h('h2', { id: 'eval-h' }, 'Eval'),
    rowsNote,
    h('div', { class: 'row' }, field('Evaluate', withAdapter), field('Decoding', decoding), field('Answer format', format, 'Decides prediction, correct and format_ok; the reward terms (Rewards panel) are recorded beside them.'), field('Max new tokens', maxNew), field('Seed', seed), field('Label', label)),
    sampledFields,
    field('System prompt', systemPrompt, 'For rows without their own (as in training); empty for none.'),
    h('div', { class: 'row' }, run, cancel, progress, progressText, cancelNote),
    runReason,
    error,
    summary,
    records,
    h('h3', {}, 'Saved eval runs'),
    h('table', { 'data-testid': 'eval-saved' }, h('thead', {}, h('tr', {}, ...['label', 'adapter', 'when', 'accuracy', 'format', 'samples', ''].map((x) => h('th', { scope: 'col' }, x)))), savedBody),
    h('h3', {}, 'Before and after'),
    h('div', { class: 'row' }, field('Before', before), field('After', after), compare),
    comparison,
  );
}
