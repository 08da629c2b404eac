// The Eval panel: the loaded model, with or without its adapter, over the Data panel's held-out
// rows, greedy or sampled; progress row by row; per-sample records, accuracy and format
// compliance, broken down by the rows' task/category column and image size class (as verl tracks
// accuracy per image type); every run saved in IndexedDB (src/store/evals.ts), exportable as JSON
// with its breakdown, and importable (the CLI's `eval --out`); a before/after table, the same per
// group, and a per-sample diff (fixed, broken, unchanged) of any two saved runs. The answer-match
// toggle (numeric tolerance or strict) decides what counts as correct everywhere it is shown. The
// thinking switch and budget are the Train form's thinking_mode and thinking_budget, for a run.
import type { Remote } from 'comlink';
import { DEFAULT_SYSTEM_PROMPT } from '../../data/prompt';
import { compareRuns, type Change } from '../../eval/diff';
import { breakdown, compareByGroup, evalExportJson, type GroupDiff, type GroupRow } from '../../eval/groups';
import { evalRunFromJson, isCorrect, summarize, type AnswerFormat, type AnswerMatch, type EvalRecord, type EvalRun, type EvalSummary } from '../../eval/records';
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
import { THINKING_MODES, type ThinkingMode } from '../../model/processor/chat';
import type { StatusBar } from '../status';

const pct = formatPercent;

/** A saved eval run with the identity of the adapter it evaluated (kept in the record and its JSON export). */
type IdentifiedEvalRun = EvalRun & { adapterIdentity?: AdapterIdentity | null };

/** Compare rows that are shares (shown as percentages; their change in percentage points). */
const SHARE_METRICS = new Set(['accuracy', 'format compliance', 'rows with a correct sample', 'truncated']);

/** A run's records, correct under `match`; a cancelled run's table says that it holds only the rows finished before the cancel. */
function recordsTable(records: readonly EvalRecord[], match: AnswerMatch, cancelled = false): HTMLTableElement {
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
          h('td', {}, isCorrect(r, match) ? 'yes' : 'no'),
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

const MATCH_NOTE: Record<AnswerMatch, string> = { numeric: 'numeric tolerance', strict: 'strict answers' };

/** A run's accuracy, format compliance and mean reward per group. */
function groupTable(testId: string, title: string, rows: readonly GroupRow[]): HTMLTableElement {
  return h(
    'table',
    { 'data-testid': testId },
    h('caption', {}, title),
    h('thead', {}, h('tr', {}, ...['group', 'samples', 'accuracy', 'format compliance', 'mean reward'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, ...rows.map((r) => h('tr', { 'data-group': r.group }, h('th', { scope: 'row' }, r.group), h('td', { class: 'num' }, r.samples), h('td', { class: 'num' }, pct(r.accuracy)), h('td', { class: 'num' }, pct(r.format_compliance)), h('td', { class: 'num' }, formatNumber(r.mean_reward))))),
  );
}

/** A share and its change in percentage points, or a number and its change; '—' where a run lacks the group. */
const shareCell = (x: number) => (Number.isNaN(x) ? '—' : pct(x));
const numberCell = (x: number) => (Number.isNaN(x) ? '—' : formatNumber(x));
const changeCell = (d: number, share: boolean) => (Number.isNaN(d) ? '—' : `${d >= 0 ? '+' : ''}${share ? `${(100 * d).toFixed(1)} pp` : formatNumber(d)}`);

/** Before/after per group: each metric before, after and its change. */
function groupDiffTable(testId: string, title: string, diffs: readonly GroupDiff[]): HTMLTableElement {
  const metrics = [
    ['accuracy', (g: GroupDiff) => g.accuracy, true],
    ['format compliance', (g: GroupDiff) => g.formatCompliance, true],
    ['mean reward', (g: GroupDiff) => g.meanReward, false],
  ] as const;
  return h(
    'table',
    { 'data-testid': testId },
    h('caption', {}, title),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'group'), h('th', { scope: 'col' }, 'samples before / after'), ...metrics.flatMap(([m]) => [`${m} before`, `${m} after`, `${m} change`].map((c) => h('th', { scope: 'col' }, c))))),
    h(
      'tbody',
      {},
      ...diffs.map((g) =>
        h(
          'tr',
          { 'data-group': g.group },
          h('th', { scope: 'row' }, g.group),
          h('td', { class: 'num' }, `${g.samples.before} / ${g.samples.after}`),
          ...metrics.flatMap(([, f, share]) => {
            const v = f(g);
            const cell = share ? shareCell : numberCell;
            return [h('td', { class: 'num' }, cell(v.before)), h('td', { class: 'num' }, cell(v.after)), h('td', { class: 'num' }, changeCell(v.delta, share))];
          }),
        ),
      ),
    ),
  );
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
  const answerMatch = select<AnswerMatch>(
    [
      { value: 'numeric', label: 'Numeric tolerance (3 = 3.0, 3/4 = 0.75)' },
      { value: 'strict', label: 'Strict (exact answers only)' },
    ],
    'numeric',
  );
  const thinkingMode = select<ThinkingMode>(THINKING_MODES.map((m) => ({ value: m, label: m })), 'auto');
  const thinkingBudget = h('input', { type: 'number', step: '1', min: 0, value: '' });
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
  persistControls('eval', { decoding, temperature, topP, samples, seed, maxNew, format, answerMatch, thinkingMode, thinkingBudget, label, systemPrompt });
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
  const groups = h('div', { 'data-testid': 'eval-groups' });
  const records = h('div', {});
  const importFile = h('input', { type: 'file', accept: '.json,application/json' });

  const savedBody = h('tbody', {});
  const before = select([{ value: '', label: '—' }], '');
  const after = select([{ value: '', label: '—' }], '');
  const compare = h('button', { type: 'button' }, 'Compare');
  const comparison = h('div', { 'data-testid': 'eval-compare', 'aria-live': 'polite' });
  /** The run whose records are shown, and the two runs compared: redrawn when the answer match changes. */
  let shown: EvalRun | null = null;
  let compared: { b: EvalRun; a: EvalRun } | null = null;
  const match = () => answerMatch.value as AnswerMatch;

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
  /** A run's summary and breakdown under the answer match chosen now, and its records. */
  const showRun = (r: EvalRun) => {
    shown = r;
    summary.textContent = `${runHeading(r)}: ${summaryLine(summarize(r.records, match()))} (${MATCH_NOTE[match()]})`;
    const b = breakdown(r.records, match());
    groups.replaceChildren(groupTable('eval-by-task', 'By task / category', b.by_task), groupTable('eval-by-image-size', 'By image size (largest image: small < 256², medium < 768²)', b.by_image_size));
    records.replaceChildren(recordsTable(r.records, match(), r.status === 'cancelled'));
  };
  const show = async (id: string) => {
    const r = await loadEvalRun(id);
    if (r) showRun(r);
  };
  const exportRun = async (id: string) => {
    const r = await loadEvalRun(id);
    if (r) downloadBlob(new Blob([evalExportJson(r, match())], { type: 'application/json' }), `eval-${(r.label || r.id).replace(/[^\w.-]+/g, '_')}.json`);
  };
  importFile.addEventListener('change', () => {
    const file = importFile.files?.[0];
    if (!file) return;
    error.hidden = true;
    void (async () => {
      let run: EvalRun;
      try {
        run = evalRunFromJson(await file.text());
      } catch (e) {
        throw new Error(`${file.name}: ${(e as Error).message}`);
      }
      await saveEvalRun(run);
      await refreshSaved();
      showRun(run);
    })()
      .catch(showError)
      .finally(() => (importFile.value = ''));
  });

  run.addEventListener('click', () => {
    const rows = datasetStore.current?.split.heldOut;
    if (!rows?.length || busy) return;
    error.hidden = true;
    const budget = thinkingBudget.value.trim() === '' ? null : Number(thinkingBudget.value);
    if (budget !== null && !(Number.isInteger(budget) && budget >= 0)) return showError(new Error(`Thinking budget must be an integer >= 0 or empty; got ${thinkingBudget.value}`));
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
    const sofar: EvalRecord[] = [];
    const onProgress = (p: EvalProgress) => {
      progress.value = p.done;
      progressText.textContent = `${p.done} of ${p.total} rows`;
      sofar.push(...p.records);
      summary.textContent = summaryLine(p.summary);
      records.replaceChildren(recordsTable(sofar, match()));
    };
    void (async () => {
      try {
        await engine.setDataset(rows);
        const result: EvalRun = await engine.runEval(
          {
            terms: rewardTerms.current,
            answerFormat: format.value as AnswerFormat,
            answerMatch: match(),
            sampling: { temperature: sampled ? Number(temperature.value) : 0, topP: sampled ? Number(topP.value) : 1, topK: 0, maxNewTokens: Number(maxNew.value), seed: Number(seed.value), ...(budget !== null ? { thinkingBudget: budget } : {}) },
            thinkingMode: thinkingMode.value as ThinkingMode,
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
        showRun(saved);
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

  const renderComparison = () => {
    if (!compared) return;
    const { b, a } = compared;
    const c = compareRuns(b, a, match());
    const changed = (kind: Change) => c.samples.filter((x) => x.change === kind);
    comparison.replaceChildren(
      h('p', { class: 'hint' }, `Correct means ${MATCH_NOTE[match()]}.`),
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
            return h('tr', {}, h('th', { scope: 'row' }, r.metric), h('td', { class: 'num' }, v(r.before)), h('td', { class: 'num' }, v(r.after)), h('td', { class: 'num' }, changeCell(r.delta, share)));
          }),
        ),
      ),
      groupDiffTable('eval-diff-by-task', 'Before and after by task / category', compareByGroup(b, a, 'task', match())),
      groupDiffTable('eval-diff-by-image-size', 'Before and after by image size', compareByGroup(b, a, 'image_size', match())),
      h('p', { 'data-testid': 'eval-diff-counts' }, `Fixed ${c.counts.fixed}, broken ${c.counts.broken}, unchanged ${c.counts.unchanged}` + (c.onlyBefore.length || c.onlyAfter.length ? `; ${c.onlyBefore.length} samples only before, ${c.onlyAfter.length} only after` : '') + '.'),
      ...(['fixed', 'broken'] as const).map((kind) =>
        h(
          'details',
          { open: changed(kind).length > 0 },
          h('summary', {}, `${kind} (${changed(kind).length})`),
          h('ul', {}, ...changed(kind).map((x) => h('li', {}, `${x.id}: ${x.before.prediction ?? '—'} → ${x.after.prediction ?? '—'} (gold ${x.before.gold})`))),
        ),
      ),
    );
  };
  compare.addEventListener('click', () => {
    void (async () => {
      const [b, a] = await Promise.all([loadEvalRun(before.value), loadEvalRun(after.value)]);
      if (!b || !a) {
        compared = null;
        comparison.replaceChildren(h('p', { class: 'error' }, 'Pick two saved runs.'));
        return;
      }
      compared = { b, a };
      renderComparison();
    })().catch((e: unknown) => comparison.replaceChildren(h('p', { class: 'error' }, String(e))));
  });
  answerMatch.addEventListener('change', () => {
    if (shown && !busy) showRun(shown);
    renderComparison();
  });

  void refreshSaved().catch(showError);
  sync();

  return h(
    'section',
    { class: 'panel', 'aria-labelledby': 'eval-h' },
    h('h2', { id: 'eval-h' }, 'Eval'),
    rowsNote,
    h('div', { class: 'row' }, field('Evaluate', withAdapter), field('Decoding', decoding), field('Answer format', format, 'Decides prediction, correct and format_ok; the reward terms (Rewards panel) are recorded beside them.'), field('Max new tokens', maxNew), field('Seed', seed), field('Label', label)),
    h(
      'div',
      { class: 'row' },
      field('Answer match', answerMatch, 'What counts as correct in the summaries, the breakdowns, the comparison and the export; each record keeps both.'),
      field('Thinking', thinkingMode, 'The chat template’s enable_thinking (as the Train form’s thinking_mode): auto renders the template as the model ships it.'),
      field('Thinking budget', thinkingBudget, 'Force </think> after this many thinking tokens in each completion (as thinking_budget); empty: none.'),
    ),
    sampledFields,
    field('System prompt', systemPrompt, 'For rows without their own (as in training); empty for none.'),
    h('div', { class: 'row' }, run, cancel, progress, progressText, cancelNote),
    runReason,
    error,
    summary,
    groups,
    records,
    h('h3', {}, 'Saved eval runs'),
    field('Import eval JSON', importFile, 'An export of this panel or of `npm run cli -- eval --out`; it joins the saved runs.'),
    h('table', { 'data-testid': 'eval-saved' }, h('thead', {}, h('tr', {}, ...['label', 'adapter', 'when', 'accuracy', 'format', 'samples', ''].map((x) => h('th', { scope: 'col' }, x)))), savedBody),
    h('h3', {}, 'Before and after'),
    h('div', { class: 'row' }, field('Before', before), field('After', after), compare),
    comparison,
  );
}
