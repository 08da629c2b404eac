// The reward playground: a completion and a gold answer, the weighted reward terms, and every
// term's value with its reason recomputed as the user types. Built-in terms score on the page at
// once; custom JavaScript terms run in the sandbox worker and fill in when they return. At most one
// sandbox evaluation is in flight: one that comes back for text that has changed since is dropped
// and the latest text evaluated instead, so a slow or hanging custom reward never builds a queue
// of stale work behind the keyboard. No GPU, no model.
import {
  BUILTIN_REWARDS,
  REWARD_PRESETS,
  createBrowserSandbox,
  evaluateAll,
  evaluateBuiltins,
  parseWeight,
  playgroundFromPreset,
  removeTerm,
  setCustomTerm,
  setWeight,
  validateTerms,
  type BuiltinName,
  type PlaygroundRow,
  type PlaygroundState,
  type PlaygroundView,
  type PresetName,
  type RewardTerm,
} from '../../rewards';
import { scoreSamples, type RewardSample } from '../../rewards/registry';
import { latestRollouts, playgroundSample, rewardTerms } from '../appState';
import { saveWorkspace, workspacePart } from '../workspace';
import { CODE_EDITOR_HINT, codeEditor } from '../codeEditor';
import { h } from '../dom';
import { field, select } from '../form';
import { formatNumber } from '../format';

/** Light debounce for typing: scoring is cheap, but a burst of keys needs only the last view. */
const TYPING_DEBOUNCE_MS = 60;

const EXAMPLE_CUSTOM = `// Called per sample; return a finite number.
// completion and answer are strings; context has prompt and index.
(completion, answer) => {
  const words = completion.trim().split(/\\s+/).length;
  return words <= 60 ? 0.5 : 0;
}`;

const PRESET_NAMES = Object.keys(REWARD_PRESETS) as PresetName[];
const BUILTIN_NAMES = Object.keys(BUILTIN_REWARDS) as BuiltinName[];

function termLabel(term: RewardTerm): string {
  if (term.source !== undefined) return 'custom JavaScript';
  const builtin = term.builtin ?? (term.name as BuiltinName);
  const params = Object.entries(term.params ?? {}).map(([k, v]) => `${k} ${v}`);
  return `${BUILTIN_REWARDS[builtin].description}${params.length ? ` (${params.join(', ')})` : ''}`;
}

/** A name for another term of `builtin`: the built-in's own name, else name_2, name_3, ... */
function freeName(terms: readonly RewardTerm[], base: string): string {
  const taken = new Set(terms.map((t) => t.name));
  if (!taken.has(base)) return base;
  let i = 2;
  while (taken.has(`${base}_${i}`)) i++;
  return `${base}_${i}`;
}

interface TermRow {
  row: HTMLTableRowElement;
  value: HTMLElement;
  weighted: HTMLElement;
  why: HTMLElement;
}

interface StoredPlayground {
  preset: PresetName;
  completion: string;
  answer: string;
  customName: string;
  customSource: string;
}

export function rewardsPanel(): HTMLElement {
  const sandbox = createBrowserSandbox();
  const stored = workspacePart<StoredPlayground>('playground');
  const storedPreset = stored?.preset && PRESET_NAMES.includes(stored.preset) ? stored.preset : 'seeds';
  // The terms are the page's (restored from the workspace before any panel was built).
  let state: PlaygroundState = { ...playgroundFromPreset(storedPreset), terms: rewardTerms.current };
  if (typeof stored?.completion === 'string') state.completion = stored.completion;
  if (typeof stored?.answer === 'string') state.answer = stored.answer;

  const preset = select(PRESET_NAMES.map((p) => ({ value: p, label: p })), storedPreset);
  const presetInfo = h('p', { class: 'muted', 'data-testid': 'preset-description' }, REWARD_PRESETS[storedPreset].description);
  const completion = h('textarea', { rows: 6, 'data-testid': 'completion' });
  const answer = h('input', { type: 'text', 'data-testid': 'gold-answer', autocomplete: 'off' });
  const tbody = h('tbody', {});
  const total = h('output', { 'data-testid': 'reward-total', 'aria-live': 'polite' });
  const totalNote = h('span', { class: 'muted' });
  const termsError = h('p', { class: 'error', role: 'alert', hidden: true });
  const rows = new Map<string, TermRow>();

  const addWhich = select(BUILTIN_NAMES.map((b) => ({ value: b, label: b })), 'format');
  const customName = h('input', { type: 'text', value: 'custom', autocomplete: 'off', 'data-testid': 'custom-name' });
  const editor = codeEditor({ id: 'custom-reward-source', value: EXAMPLE_CUSTOM, rows: 9 });
  editor.dataset.testid = 'custom-source';
  if (typeof stored?.customName === 'string') customName.value = stored.customName;
  if (typeof stored?.customSource === 'string') editor.value = stored.customSource;
  const remember = () => {
    saveWorkspace('rewards', { terms: state.terms });
    saveWorkspace('playground', { preset: preset.value as PresetName, completion: state.completion, answer: state.answer, customName: customName.value, customSource: editor.value } satisfies StoredPlayground);
  };
  customName.addEventListener('input', remember);
  editor.addEventListener('input', remember);

  const fillSample = () => {
    completion.value = state.completion;
    answer.value = state.answer;
  };

  const showError = (e: unknown) => {
    termsError.hidden = false;
    termsError.textContent = e instanceof Error ? e.message : String(e);
  };

  /**
   * Applies a change to the terms; a rejected change (e.g. a duplicate name) is shown, not applied.
   * The table is rebuilt only when terms come or go, so a weight field keeps focus while typed in.
   */
  const changeTerms = (change: (s: PlaygroundState) => PlaygroundState, rebuild = true) => {
    try {
      state = change(state);
    } catch (e) {
      showError(e);
      return;
    }
    termsError.hidden = true;
    rewardTerms.set(state.terms);
    remember();
    if (rebuild) buildRows();
    recompute();
  };

  const buildRows = () => {
    rows.clear();
    tbody.replaceChildren(
      ...state.terms.map((term) => {
        const weight = h('input', { type: 'text', inputmode: 'decimal', class: 'weight', 'aria-label': `Weight of ${term.name}`, value: String(term.weight) });
        const weightError = h('small', { class: 'error', id: `weight-${term.name}-error`, 'aria-live': 'polite' });
        weight.setAttribute('aria-describedby', weightError.id);
        weight.addEventListener('input', () => {
          const parsed = parseWeight(weight.value);
          weight.setAttribute('aria-invalid', String('error' in parsed));
          weightError.textContent = 'error' in parsed ? parsed.error : '';
          if ('weight' in parsed) changeTerms((s) => setWeight(s, term.name, parsed.weight), false);
        });
        const value = h('td', { class: 'num', 'data-testid': `value-${term.name}` });
        const weighted = h('td', { class: 'num', 'data-testid': `weighted-${term.name}` });
        const why = h('td', { class: 'why', 'data-testid': `why-${term.name}` });
        const actions = h('td', {});
        if (term.source !== undefined) {
          actions.append(
            h('button', { type: 'button', 'aria-label': `Edit custom term ${term.name}`, onclick: () => {
              customName.value = term.name;
              editor.value = term.source ?? '';
              editor.focus();
            } }, 'Edit'),
          );
        }
        actions.append(h('button', { type: 'button', 'aria-label': `Remove term ${term.name}`, onclick: () => changeTerms((s) => removeTerm(s, term.name)) }, 'Remove'));
        const row = h(
          'tr',
          { 'data-term': term.name },
          h('th', { scope: 'row' }, h('span', { class: 'term-name' }, term.name), h('small', { class: 'muted block' }, termLabel(term))),
          h('td', {}, weight, weightError),
          value,
          weighted,
          why,
          actions,
        );
        rows.set(term.name, { row, value, weighted, why });
        return row;
      }),
    );
  };

  const render = (v: PlaygroundView) => {
    for (const r of v.rows) showRow(r);
    total.textContent = formatNumber(v.total);
    totalNote.textContent = v.pending ? ' (custom terms still running)' : '';
  };

  const showRow = (r: PlaygroundRow) => {
    const cells = rows.get(r.name);
    if (!cells) return;
    cells.value.textContent = r.pending ? '…' : formatNumber(r.value);
    cells.weighted.textContent = r.pending ? '…' : formatNumber(r.weighted);
    cells.why.textContent = r.pending ? 'running in the sandbox' : (r.error ?? r.reason ?? '');
    cells.why.classList.toggle('error', r.error !== undefined);
    cells.row.classList.toggle('failed', r.error !== undefined);
  };

  let sandboxBusy = false;
  const recompute = () => {
    const now = evaluateBuiltins(state);
    render(now);
    if (!now.pending || sandboxBusy) return;
    sandboxBusy = true;
    const asked = state;
    evaluateAll(asked, sandbox).then(
      (full) => {
        sandboxBusy = false;
        if (asked === state) render(full);
        else recompute();
      },
      (e: unknown) => {
        sandboxBusy = false;
        showError(e);
      },
    );
  };

  let typing: ReturnType<typeof setTimeout> | undefined;
  const onType = () => {
    state = { ...state, completion: completion.value, answer: answer.value };
    remember();
    clearTimeout(typing);
    typing = setTimeout(recompute, TYPING_DEBOUNCE_MS);
  };
  completion.addEventListener('input', onType);
  answer.addEventListener('input', onType);

  preset.addEventListener('change', () => {
    const name = preset.value as PresetName;
    presetInfo.textContent = REWARD_PRESETS[name].description;
    changeTerms(() => playgroundFromPreset(name));
    fillSample();
    remember();
  });

  const addBuiltin = () => {
    const builtin = addWhich.value as BuiltinName;
    changeTerms((s) => {
      const name = freeName(s.terms, builtin);
      const terms = [...s.terms, name === builtin ? { name, weight: 1 } : { name, builtin, weight: 1 }];
      validateTerms(terms);
      return { ...s, terms };
    });
  };

  const applyCustom = () => changeTerms((s) => setCustomTerm(s, customName.value.trim(), editor.value));
  editor.addEventListener('keydown', (e: KeyboardEvent) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      applyCustom();
    }
  });

  const rolloutsReason = h('small', { class: 'hint', id: 'rollouts-reason', 'aria-live': 'polite' });
  const runOnRollouts = h('button', { type: 'button', 'aria-describedby': rolloutsReason.id, 'data-testid': 'run-on-rollouts' }, 'Run on the latest rollouts');
  const rolloutScores = h('div', { 'data-testid': 'rollout-scores', 'aria-live': 'polite' });
  latestRollouts.subscribe((samples) => {
    const n = samples.reduce((k, s) => k + s.completions.length, 0);
    // aria-disabled rather than disabled: it stays focusable, so keyboard users hear the reason.
    runOnRollouts.setAttribute('aria-disabled', String(n === 0));
    rolloutsReason.textContent = n
      ? `${n} completions of ${samples.length} prompt group${samples.length === 1 ? '' : 's'}, step ${samples[0].step} (Train panel).`
      : 'No rollouts yet: they come from a training run (Train panel), which needs a model (Model panel).';
  });

  /** The editor's term beside the playground's built-in terms, over every completion of the latest rollouts. */
  const scoreRollouts = async () => {
    const samples = latestRollouts.current;
    if (!samples.length) return;
    const name = customName.value.trim();
    const builtins = state.terms.filter((t) => t.source === undefined && t.name !== name);
    const terms: RewardTerm[] = [...builtins, { name, weight: 1, source: editor.value }];
    const rows: (RewardSample & { group: number; number: number })[] = samples.flatMap((s, g) => s.completions.map((c, i) => ({ completion: c.text, answer: s.answer, prompt: s.prompt, index: i, group: g + 1, number: i + 1 })));
    rolloutScores.replaceChildren(h('p', { class: 'muted' }, `Scoring ${rows.length} completions…`));
    const scores = await scoreSamples(terms, rows, sandbox);
    const custom = scores.map((sc) => sc.terms[sc.terms.length - 1]);
    const failed = custom.filter((t) => t.error).length;
    const mean = custom.reduce((a, t) => a + t.value, 0) / Math.max(custom.length, 1);
    rolloutScores.replaceChildren(
      h('p', {}, `${name} on ${rows.length} completions of step ${samples[0].step}: mean ${formatNumber(mean)}${failed ? `; failed on ${failed} (scored 0)` : ''}.`),
      h(
        'div',
        { class: 'table-scroll' },
        h(
          'table',
          { class: 'rollout-scores' },
          h('thead', {}, h('tr', {}, ...['group', '#', ...terms.map((t) => t.name), 'completion'].map((c) => h('th', { scope: 'col' }, c)))),
          h(
            'tbody',
            {},
            ...rows.map((r, k) =>
              h(
                'tr',
                {},
                h('td', {}, r.group),
                h('td', {}, r.number),
                ...scores[k].terms.map((t, j) => h('td', { class: `num${j === terms.length - 1 ? ' custom' : ''}`, title: t.error ?? t.reason ?? '' }, t.error ? 'error' : formatNumber(t.value))),
                h('td', {}, h('pre', { class: 'completion' }, r.completion)),
              ),
            ),
          ),
        ),
      ),
    );
  };
  runOnRollouts.addEventListener('click', () => {
    if (runOnRollouts.getAttribute('aria-disabled') === 'true') return;
    termsError.hidden = true;
    scoreRollouts().catch((e: unknown) => {
      rolloutScores.replaceChildren();
      showError(e);
    });
  });

  // A completion opened from the Train panel's rollout inspector.
  playgroundSample.subscribe((s) => {
    if (!s) return;
    state = { ...state, completion: s.completion, answer: s.answer };
    fillSample();
    remember();
    recompute();
  });

  fillSample();
  buildRows();
  recompute();

  return h(
    'section',
    { class: 'panel', 'aria-labelledby': 'rewards-h' },
    h('h2', { id: 'rewards-h' }, 'Reward playground'),
    h('p', { class: 'muted' }, 'Edit a completion and a gold answer; every reward term and the weighted total recompute as you type. Runs on this page, without a GPU or a model.'),
    field('Preset', preset, 'Replaces the terms and the sample with the preset’s.'),
    presetInfo,
    field('Completion', completion),
    field('Gold answer', answer),
    h(
      'table',
      { class: 'terms', 'aria-label': 'Reward terms' },
      h('thead', {}, h('tr', {}, ...['Term', 'Weight', 'Value', 'Weighted', 'Why', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))),
      tbody,
      h('tfoot', {}, h('tr', {}, h('th', { scope: 'row', colspan: 3 }, 'Total (weighted sum)'), h('td', { class: 'num total' }, total), h('td', { colspan: 2 }, totalNote))),
    ),
    termsError,
    h('div', { class: 'row' }, field('Built-in reward', addWhich), h('button', { type: 'button', onclick: addBuiltin }, 'Add term')),
    h(
      'fieldset',
      {},
      h('legend', {}, 'Custom JavaScript reward'),
      h('p', { class: 'muted' }, 'Runs in a sandboxed worker without network or storage, with a time limit per sample. An expression, a function (completion, answer, context) => number, or a function body.'),
      field('Term name', customName),
      field('Source', editor, `${CODE_EDITOR_HINT} Ctrl+Enter applies.`),
      h(
        'div',
        { class: 'row' },
        h('button', { type: 'button', onclick: applyCustom }, 'Apply to the playground sample'),
        runOnRollouts,
        rolloutsReason,
      ),
      rolloutScores,
    ),
  );
}
