// The training dashboard: the config form (collapsed to a one-line summary while a run uses it),
// start / pause / resume / stop of a run in the engine worker, progress inside the step in flight,
// live charts of TRL's metrics, a rollout inspector over the trainer's latest samples, and the
// runs stored in this browser (continue one after a reload). Prompts are the Data panel's training
// split (else the config's synthetic set); rewards are the playground's current terms. When a run
// stops or finishes, its adapter is saved to the adapters store (src/store/adapters.ts) under the
// run's id.
//
// One record, `run`, holds the state of the run on the dashboard (id, state, last step, config,
// a pause waiting for its step); the state line, the step line, the runs table and the charts are
// all drawn from it, so they cannot disagree.
import type { Remote } from 'comlink';
import { importPeft } from '../../adapter/peft';
import { browserDecoder } from '../../data/decodeBrowser';
import { decodeRowImages } from '../../data/encodedImages';
import { datasetSourceText } from '../../data/provenance';
import type { DatasetRow, RgbaImage } from '../../data/types';
import type { DatasetSettings } from '../../rl/dataSource';
import { pickedFiles } from '../../model/safetensors';
import { imageKey } from '../../model/session';
import { batchPlan, defaultConfig, resolveConfig, type TrainConfig, type TrainConfigInput } from '../../rl/config';
import { DEMO_TRAIN_CONFIG } from '../../data/demo';
import type { RolloutSample, StepMetrics } from '../../rl/metrics';
import type { TrainerState } from '../../rl/trainer';
import type { RewardTerm } from '../../rewards/registry';
import { saveAdapter } from '../../store/adapters';
import type { RunRecord } from '../../store/runs';
import type { EngineApi } from '../../worker/api';
import { proxy } from '../../worker/client';
import type { RunEvent, StepProgress } from '../../worker/stepProgress';
import { adaptersChanged, latestRollouts, loadedModel, playgroundSample, rewardTerms, trainSettings } from '../appState';
import { LiveChart } from '../chart';
import { datasetConfig } from '../datasetConfig';
import { datasetStore } from '../datasetStore';
import { h } from '../dom';
import { field, select } from '../form';
import { formatBytes, formatNumber, formatSeconds } from '../format';
import { userMessage } from '../errors';
import { highlightedCompletion } from '../highlight';
import { adapterOnModel, configHash } from '../identity';
import { imageCanvas } from '../imageCanvas';
import type { StatusBar } from '../status';
import { saveWorkspace, workspacePart } from '../workspace';
import { modelToRestore } from './modelPanel';
import { configForm } from './trainConfigForm';
import { CLIPPED_LOSS_TYPES } from '../../rl/lossConfig';

interface ChartSpec {
  title: string;
  series: Record<string, string>;
  smooth?: boolean;
  emptyNote?: string;
}

/** Chart title → series name → metric key (TRL's names; src/rl/metrics.ts, src/rl/trainer.ts). */
function chartSpecs(termNames: readonly string[], config: TrainConfig | null): ChartSpec[] {
  const beta = config?.beta;
  const loss = config?.loss_type;
  return [
    { title: 'Reward', smooth: true, series: { reward: 'reward', ...Object.fromEntries(termNames.map((n) => [n, `rewards/${n}/mean`])) } },
    { title: 'Entropy', smooth: true, series: { entropy: 'entropy' } },
    {
      title: 'KL to the base model',
      series: { kl: 'kl' },
      emptyNote: beta === 0 ? 'No KL: beta = 0 skips the reference model, so KL is not measured.' : undefined,
    },
    { title: 'Completion length (tokens)', series: { mean: 'completions/mean_length', min: 'completions/min_length', max: 'completions/max_length' } },
    {
      title: 'Clip ratio',
      series: { region: 'clip_ratio/region_mean', low: 'clip_ratio/low_mean', high: 'clip_ratio/high_mean' },
      emptyNote: loss && !CLIPPED_LOSS_TYPES.includes(loss) ? `No clip ratio: loss_type ${loss} does not clip the ratio.` : undefined,
    },
    // The metrics of TRL's other loss types and knobs, where the run's config turns them on.
    ...(loss === 'cispo' ? [{ title: 'CISPO clip ratio', series: { cispo: 'cispo_clip_ratio' } }] : []),
    ...(loss === 'vespo' ? [{ title: 'VESPO φ, sequence mean', series: { phi: 'vespo/phi_seq_mean' } }] : []),
    ...(config && (config.entropy_coef !== 0 || config.use_adaptive_entropy)
      ? [{ title: 'Loss and entropy coefficient', series: { loss: 'loss', policy_loss: 'policy_loss', entropy_coef: 'entropy_coef' } }]
      : []),
    ...(config?.off_policy_mask_threshold != null ? [{ title: 'Off-policy masked fraction', series: { masked: 'off_policy_mask/masked_fraction' } }] : []),
    { title: 'Grad norm', smooth: true, series: { grad_norm: 'grad_norm' } },
    { title: 'Learning rate', series: { learning_rate: 'learning_rate' } },
    { title: 'Rollout/trainer log-prob gap', series: { mean: 'sampling/sampling_logp_difference/mean', max: 'sampling/sampling_logp_difference/max' } },
  ];
}

class Charts {
  readonly element = h('div', { class: 'charts', 'data-testid': 'train-charts' });
  private charts: { chart: LiveChart; series: Record<string, string> }[] = [];

  reset(termNames: readonly string[], config: TrainConfig | null): void {
    for (const c of this.charts) c.chart.dispose();
    this.charts = chartSpecs(termNames, config).map((s) => ({
      chart: new LiveChart({ title: s.title, series: Object.keys(s.series).map((name) => ({ name })), smooth: s.smooth, emptyNote: s.emptyNote }),
      series: s.series,
    }));
    this.element.replaceChildren(...this.charts.map((c) => c.chart.element));
  }

  append(m: StepMetrics): void {
    for (const { chart, series } of this.charts) {
      chart.append(m.step, Object.fromEntries(Object.entries(series).map(([name, key]) => [name, typeof m[key] === 'number' ? m[key] : null])));
    }
  }
}

/** Images of the rows the page has, by the worker's content key, for the inspector. */
function imageLookup(rows: readonly DatasetRow[]): Map<string, RgbaImage> {
  const map = new Map<string, RgbaImage>();
  for (const r of rows) for (const im of r.images) map.set(imageKey(im), im);
  return map;
}

/** Opens a completion in the reward playground. */
function openInPlayground(completion: string, answer: string): void {
  playgroundSample.set({ completion, answer });
  location.hash = 'rewards';
}

/** The image of a sample: by its content key among decoded rows, else decoded now from its row (rows kept encoded). */
function sampleImage(s: RolloutSample, i: number, images: Map<string, RgbaImage>, rows: readonly DatasetRow[]): HTMLElement {
  const im = images.get(s.imageKeys[i]);
  if (im) return imageCanvas(im, `Image ${i + 1} of the prompt`);
  const row = s.promptId === undefined ? undefined : rows.find((r) => r.id === s.promptId && r.encoded?.length);
  const slot = h('span', { class: 'muted' }, row ? `image ${i + 1}: decoding…` : `image ${i + 1}: not among the rows on this page`);
  if (row) {
    decodeRowImages(row, browserDecoder).then(
      (d) => slot.replaceWith(d.images[i] ? imageCanvas(d.images[i], `Image ${i + 1} of the prompt`) : h('span', { class: 'muted' }, `image ${i + 1}: not in row ${row.id}`)),
      (e: unknown) => (slot.textContent = `image ${i + 1}: ${e instanceof Error ? e.message : String(e)}`),
    );
  }
  return slot;
}

function inspector(): { element: HTMLElement; show(samples: RolloutSample[], rows: () => readonly DatasetRow[]): void; clear(): void } {
  const pick = select([{ value: '0', label: 'no rollouts yet' }], '0');
  const placeholder = () => h('p', { class: 'muted' }, 'The latest rollouts appear here after the first step.');
  const body = h('div', { 'data-testid': 'rollout-inspector' }, placeholder());
  let current: RolloutSample[] = [];
  let rowsOf: () => readonly DatasetRow[] = () => [];
  const render = () => {
    const s = current[Number(pick.value)];
    if (!s) return;
    const rows = rowsOf();
    const imgs = imageLookup(rows);
    body.replaceChildren(
      h('div', { class: 'row' }, ...s.imageKeys.map((_, i) => sampleImage(s, i, imgs, rows))),
      h('p', {}, h('strong', {}, 'Gold answer: '), s.answer),
      h('details', {}, h('summary', {}, 'Prompt'), h('pre', { class: 'prompt' }, s.prompt)),
      h('p', { class: 'hint' }, 'Marked in each completion: the format tags, the extracted answer (green when it matches the gold answer, red when not) and any addCriterion.'),
      h(
        'div',
        { class: 'table-scroll' },
        h(
          'table',
          { class: 'rollouts' },
          h('thead', {}, h('tr', {}, ...['#', 'reward', 'terms', 'advantage', 'tokens', 'completion', ''].map((c) => h('th', { scope: 'col' }, c)))),
          h(
            'tbody',
            {},
            ...s.completions.map((c, i) =>
              h(
                'tr',
                {},
                h('td', {}, i + 1),
                h('td', { class: 'num' }, formatNumber(c.reward)),
                h('td', { class: 'num terms' }, ...Object.entries(c.terms).map(([n, v]) => h('span', { class: 'block' }, `${n} ${formatNumber(v)}`))),
                h('td', { class: 'num' }, formatNumber(c.advantage)),
                h('td', { class: 'num' }, `${c.length}${c.truncated ? ' (cut)' : ''}`),
                h('td', { class: 'completion-cell' }, highlightedCompletion(c.text, s.answer)),
                h('td', {}, h('button', { type: 'button', 'aria-label': `Open completion ${i + 1} in the reward playground`, onclick: () => openInPlayground(c.text, s.answer) }, 'Open in playground')),
              ),
            ),
          ),
        ),
      ),
    );
  };
  pick.addEventListener('change', render);
  return {
    element: h('div', {}, field('Prompt group', pick), body),
    show(samples, rows) {
      current = samples;
      rowsOf = rows;
      const keep = Math.min(Number(pick.value), samples.length - 1);
      pick.replaceChildren(...samples.map((s, i) => h('option', { value: String(i) }, `step ${s.step}, group ${i + 1}: ${s.answer}`)));
      pick.value = String(Math.max(keep, 0));
      render();
    },
    clear() {
      current = [];
      pick.replaceChildren(h('option', { value: '0' }, 'no rollouts yet'));
      body.replaceChildren(placeholder());
    },
  };
}

/** The config in one line: what a glance needs to tell runs apart. */
function configSummary(c: TrainConfig): string {
  const plan = batchPlan(c);
  const algo = c.importance_sampling_level === 'sequence' ? 'GSPO' : 'GRPO';
  const prompts = plan.promptsPerMicroBatch * c.gradient_accumulation_steps;
  return (
    `${algo} (${c.loss_type}), ${prompts} prompt${prompts === 1 ? '' : 's'} x ${c.num_generations} completions a step, ` +
    `up to ${c.max_completion_length} tokens, lr ${c.learning_rate} (${c.lr_scheduler_type}), beta ${c.beta}, LoRA r ${c.lora.r}, ${c.max_steps} steps, seed ${c.seed}`
  );
}

const termsText = (terms: readonly RewardTerm[]) => terms.map((t) => `${formatNumber(t.weight)}·${t.name}`).join(' + ');

/** The state of the run on the dashboard. */
interface RunView {
  runId: string | null;
  state: TrainerState;
  /** Steps done (the last 'step' or 'state' event's). */
  step: number;
  config: TrainConfig | null;
  /** The step after which a requested pause lands, while it has not landed yet. */
  pauseAfter: number | null;
  /** Whether the dashboard shows a run that trains in this page now (vs. a stored one shown). */
  live: boolean;
}

/** What a stored run's state means when no page is training it (a tab closed mid-run). */
function storedState(run: RunRecord): string {
  return run.state === 'running' ? 'interrupted' : run.state;
}

/** Equal settings, whatever the order of their keys. */
function sameSettings(a: unknown, b: unknown): boolean {
  const canonical = (v: unknown): unknown =>
    Array.isArray(v) ? v.map(canonical) : v !== null && typeof v === 'object' ? Object.fromEntries(Object.entries(v).sort(([x], [y]) => x.localeCompare(y)).map(([k, x]) => [k, canonical(x)])) : v;
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

interface StoredForm {
  values: TrainConfigInput;
  configOpen: boolean;
  /** The form's sections left open. */
  sections?: string[];
}

export function trainPanel(engine: Remote<EngineApi>, status: StatusBar): HTMLElement {
  // The demo run's settings (GSPO, 4 prompts x 8) are the starting values: the bundled model is the app's default.
  const form = configForm(DEMO_TRAIN_CONFIG);
  const storedForm = workspacePart<StoredForm>('train');
  if (storedForm?.values && typeof storedForm.values === 'object') form.write(storedForm.values);
  if (Array.isArray(storedForm?.sections)) form.setOpenSections(storedForm.sections);

  const data = h('p', { 'data-testid': 'train-data' });
  const rewards = h('p', { 'data-testid': 'train-rewards' });
  const model = h('p', { 'data-testid': 'train-model' });
  const summaryText = h('span', { 'data-testid': 'train-config-summary' });
  const config = h(
    'details',
    { class: 'config', 'data-testid': 'train-config', open: storedForm?.configOpen ?? true },
    h('summary', {}, h('strong', {}, 'Config: '), summaryText),
    form.element,
  );
  const start = h('button', { type: 'button', class: 'primary' }, 'Start');
  const pause = h('button', { type: 'button', disabled: true }, 'Pause');
  const resume = h('button', { type: 'button', disabled: true }, 'Resume');
  const stop = h('button', { type: 'button', disabled: true }, 'Stop');
  const state = h('span', { 'data-testid': 'train-state', 'aria-live': 'polite' }, 'idle');
  const controlsNote = h('p', { class: 'hint', 'data-testid': 'train-controls-note', 'aria-live': 'polite' });
  const progressBar = h('progress', { max: 1, value: 0, 'aria-label': 'Progress of the step in flight', hidden: true });
  const progressText = h('span', { 'data-testid': 'train-progress', 'aria-live': 'off' });
  const stats = h('p', { 'data-testid': 'train-stats', 'aria-live': 'polite' }, 'No step yet.');
  const warnings = h('ul', { class: 'warnings', 'data-testid': 'train-warnings', 'aria-live': 'polite' });
  const messages = h('ul', { 'data-testid': 'train-messages', 'aria-live': 'polite' });
  const error = h('div', { class: 'error run-error', role: 'alert', 'data-testid': 'train-error', hidden: true });
  const charts = new Charts();
  const inspect = inspector();
  const runsBody = h('tbody', {});
  const continueReason = h('p', { class: 'hint', id: 'continue-reason', 'data-testid': 'continue-reason', 'aria-live': 'polite' });
  const run: RunView = { runId: null, state: 'idle', step: 0, config: null, pauseAfter: null, live: false };
  let stored: RunRecord[] = [];
  /** The run control last pressed: when it becomes disabled (or its row is rebuilt), focus moves on from it. */
  let pressed: HTMLButtonElement | null = null;

  // --- the form: summary, persistence, the settings the Model panel's memory estimate reads ---
  const formInput = (): TrainConfigInput => form.read();
  /** The run's dataset: the Data panel's config.dataset, whose rows (a file or hub data set) must be loaded with these settings. */
  const runDataset = (): DatasetSettings => {
    const { dataset, error: invalid } = datasetConfig.current;
    if (!dataset) throw new Error(`the Data panel's settings are not valid: ${invalid}`);
    const loaded = datasetStore.current;
    if (loaded && !sameSettings(loaded.settings, dataset)) throw new Error(`the Data panel's settings changed since ${loaded.source} was loaded: load it again, or put them back`);
    if (!loaded && dataset.kind !== 'synthetic') throw new Error(`${datasetSourceText(dataset)} is not loaded: load it in the Data panel first`);
    return dataset;
  };
  /** The Data panel's training rows to the worker (none: it generates the config's synthetic set). */
  const handOverRows = () => {
    const d = datasetStore.current;
    return engine.setDataset(d ? d.split.train : null, { fileBytes: d?.fileBytes });
  };
  const onFormChange = () => {
    const input = formInput();
    saveWorkspace('train', { values: input, configOpen: config.open, sections: form.openSections() } satisfies StoredForm);
    if (typeof input.num_generations === 'number' && typeof input.max_completion_length === 'number') {
      trainSettings.set({ num_generations: input.num_generations, max_completion_length: input.max_completion_length, max_prompt_length: input.max_prompt_length ?? null, lora_r: input.lora?.r ?? defaultConfig().lora.r });
    }
    renderSummary();
  };
  const renderSummary = () => {
    if (run.config && liveNow()) return void (summaryText.textContent = `${configSummary(run.config)} (run ${run.runId}; the form is locked while it runs)`);
    try {
      summaryText.textContent = configSummary(resolveConfig({ ...formInput(), rewards: rewardTerms.current }).config);
    } catch (e) {
      summaryText.textContent = `not valid: ${e instanceof Error ? e.message : String(e)}`;
    }
  };
  config.addEventListener('input', onFormChange);
  config.addEventListener('change', onFormChange);
  // 'toggle' does not bubble: the capture phase hears the sections' toggles too.
  config.addEventListener('toggle', onFormChange, true);

  const renderData = () => {
    const d = datasetStore.current;
    const { dataset, error: invalid } = datasetConfig.current;
    if (d) data.textContent = `Data: the ${d.split.train.length} training rows of ${d.source} (Data panel).`;
    else if (!dataset) data.textContent = `Data: the Data panel’s settings are not valid: ${invalid}`;
    else if (dataset.kind === 'synthetic') data.textContent = `Data: none loaded in the Data panel, so the config’s dataset is generated: ${datasetSourceText(dataset)}.`;
    else data.textContent = `Data: ${datasetSourceText(dataset)} is not loaded yet: load it in the Data panel.`;
  };
  datasetStore.subscribe(renderData);
  datasetConfig.subscribe(renderData);
  const renderRewards = () => {
    if (run.config && run.runId) {
      rewards.replaceChildren(`Rewards of run ${run.runId}: ${termsText(run.config.rewards)}.`, run.live ? '' : ' ', run.live ? '' : h('a', { href: '#rewards' }, 'Edit the terms of the next run'));
    } else {
      rewards.replaceChildren(`Rewards (from the Rewards panel): ${termsText(rewardTerms.current)}. `, h('a', { href: '#rewards' }, 'Edit them'));
    }
  };
  rewardTerms.subscribe(() => {
    renderRewards();
    renderSummary();
  });
  loadedModel.subscribe((m) => {
    // A model (re)load starts without adapters.
    if (!m) adapterOnModel.set(null);
    model.textContent = m ? `Model: ${m.location}.` : 'Model: none loaded; load one in the Model panel first.';
    sync();
  });

  const trainRows = () => datasetStore.current?.split.train ?? [];

  // --- one render of the run state: state line, buttons, runs table, continue reason ---
  function liveNow(): boolean {
    return run.live && (run.state === 'running' || run.state === 'paused');
  }
  function stateText(): string {
    if (!run.runId && !run.live) return 'idle';
    const of = run.config ? ` of ${run.config.max_steps}` : '';
    if (run.state === 'running' && run.pauseAfter !== null) return `pausing after step ${run.pauseAfter}${of}`;
    // A stored run shown here that no page is training: "running" in storage means cut off.
    const label = !run.live && run.state === 'running' ? 'interrupted' : run.state;
    return `${label} at step ${run.step}${of}`;
  }
  function sync() {
    const live = liveNow();
    state.textContent = stateText();
    start.disabled = live || !loadedModel.current;
    pause.disabled = run.state !== 'running' || !run.live || run.pauseAfter !== null;
    resume.disabled = !run.live || !(run.state === 'paused' || (run.state === 'running' && run.pauseAfter !== null));
    stop.disabled = !live;
    form.setDisabled(live);
    renderRuns();
    // A disabled or removed button drops keyboard focus to <body>; give it to the control that
    // does the next thing (Pause while running, Resume when paused, Start after the end).
    // (Chromium moves focus off a disabled element only at the next rendering update, hence either check.)
    const lost = document.activeElement === document.body || document.activeElement === pressed;
    if (pressed && lost && (pressed.disabled || !pressed.isConnected)) {
      const next = [pause, resume, stop, start].find((b) => !b.disabled);
      if (next) {
        next.focus();
        pressed = null;
      }
    }
  }

  function continueBlocked(r: RunRecord): string | null {
    if (r.state === 'finished') return null;
    if (liveNow()) return `Continue is off while run ${run.runId} is ${run.state}: stop it first.`;
    if (!loadedModel.current) return `Continue needs the model loaded (Model panel)${modelToRestore() ? ': the model you had loaded is reloading by itself.' : '.'}`;
    return null;
  }

  function renderRuns() {
    let reason: string | null = null;
    if (stored.length === 0) return void runsBody.replaceChildren(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'No runs yet: Start one above; it is kept in this browser and can be continued after a reload.')));
    runsBody.replaceChildren(
      ...stored.map((r) => {
        const isLive = run.live && r.runId === run.runId;
        const stateCell = isLive ? (run.pauseAfter !== null && run.state === 'running' ? 'pausing' : run.state) : storedState(r);
        const step = isLive ? run.step : r.step;
        const canContinue = r.state !== 'finished' && !isLive;
        const blocked = canContinue ? continueBlocked(r) : null;
        reason ??= blocked;
        return h(
          'tr',
          { 'data-run': r.runId, class: isLive ? 'live' : '' },
          h('td', { class: 'mono' }, r.runId),
          h('td', {}, new Date(r.createdAt).toLocaleString()),
          h('td', { 'data-testid': 'run-state' }, stateCell),
          h('td', { class: 'num', 'data-testid': 'run-step' }, `${step} / ${r.config.max_steps}`),
          h(
            'td',
            { class: 'actions' },
            h('button', { type: 'button', 'aria-label': `Show the metrics of ${r.runId}`, onclick: () => void showRun(r).catch(showError) }, 'Show'),
            canContinue
              ? h(
                  'button',
                  { type: 'button', 'data-continue': r.runId, 'aria-label': `Continue ${r.runId}`, 'aria-describedby': continueReason.id, disabled: blocked !== null, title: blocked ?? '', onclick: (e: Event) => void continueRun(r, e.currentTarget as HTMLButtonElement) },
                  'Continue',
                )
              : null,
          ),
        );
      }),
    );
    continueReason.textContent = reason ?? '';
    continueReason.hidden = reason === null;
  }

  const refreshRuns = async () => {
    stored = await engine.trainingRuns();
    sync();
  };

  // --- errors, notes, warnings ---
  const showError = (e: unknown, name?: string) => {
    error.hidden = false;
    const message = e instanceof Error ? e.message : String(e);
    const title = name ?? (e instanceof Error && e.name !== 'Error' ? e.name : null);
    error.replaceChildren(title ? h('strong', {}, `${title}: `) : '', message);
  };
  const note = (text: string) => messages.append(h('li', {}, text));
  const warn = (text: string, step?: number) => warnings.append(h('li', {}, step === undefined ? text : `Step ${step}: ${text}`));

  // --- progress inside a step ---
  let stepStarted = performance.now();
  let latest: StepProgress | null = null;
  const stepTimes: number[] = [];
  const phaseText = (p: StepProgress): string => {
    if (p.phase === 'generating') {
      const at = Math.min(p.groupTokens.length + 1, p.groupsToGenerate);
      const inFlight = p.groupTokens.length < p.groupsToGenerate ? [`group ${at}: ${p.tokensInFlight} tokens so far`] : [];
      const tokens = [...p.groupTokens.map((n, i) => `group ${i + 1}: ${n} tokens`), ...inFlight].join(', ');
      return `generating group ${at} of ${p.groupsToGenerate} (${tokens})`;
    }
    if (p.phase === 'scoring') return `scoring the ${p.groupTokens.length} groups (log-probs for the loss)`;
    return `training micro-batch ${p.microBatch} of ${p.microBatches} (group ${p.trainingGroup} of ${p.trainingGroups})`;
  };
  /** Seconds left in the step: the recent steps' mean time, or (first step) the share of the work done so far. */
  const timeLeft = (p: StepProgress | null, elapsed: number): number | null => {
    if (stepTimes.length) {
      const recent = stepTimes.slice(-3);
      return Math.max(0, recent.reduce((a, b) => a + b, 0) / recent.length - elapsed);
    }
    if (!p) return null;
    const units = p.groupsToGenerate + p.trainingGroups;
    const done = p.groupTokens.length + Math.max(0, p.trainingGroup - 1);
    return done > 0 && units > 0 ? (elapsed * (units - done)) / done : null;
  };
  const renderProgress = () => {
    const running = run.live && run.state === 'running';
    progressBar.hidden = !running;
    if (!running) return void (progressText.textContent = '');
    const elapsed = (performance.now() - stepStarted) / 1000;
    const left = timeLeft(latest, elapsed);
    const max = run.config?.max_steps;
    const p = latest;
    if (p) {
      const units = p.groupsToGenerate + p.trainingGroups;
      progressBar.max = Math.max(units, 1);
      progressBar.value = p.groupTokens.length + Math.max(0, p.trainingGroup - (p.phase === 'training' ? 1 : 0));
    } else progressBar.removeAttribute('value');
    progressText.textContent =
      `Step ${run.step + 1}${max ? ` of ${max}` : ''}: ${p ? phaseText(p) : 'starting'}; ${formatSeconds(elapsed)} elapsed` +
      (left === null ? '' : left > 0 ? `, about ${formatSeconds(left)} left` : ', finishing');
  };
  // Elapsed time moves on between progress events (a long generation sends none for a while).
  setInterval(() => {
    if (run.live && run.state === 'running') renderProgress();
  }, 1000);

  // --- the dashboard for a run: cleared at a new run, filled from storage when shown or continued ---
  const clearDashboard = (terms: readonly string[], cfg: TrainConfig | null) => {
    error.hidden = true;
    messages.replaceChildren();
    warnings.replaceChildren();
    stats.textContent = 'No step yet.';
    charts.reset(terms, cfg);
    inspect.clear();
    latestRollouts.set([]);
    stepTimes.length = 0;
    latest = null;
  };
  const showStep = (m: StepMetrics) => {
    charts.append(m);
    stepTimes.push(m.step_time);
    const w = (m as { warnings?: unknown }).warnings;
    if (Array.isArray(w)) for (const text of w) warn(String(text), m.step);
  };
  const showSamples = (samples: RolloutSample[]) => {
    if (!samples.length) return;
    inspect.show(samples, trainRows);
    latestRollouts.set(samples);
  };

  let endActivity: (() => void) | null = null;
  const onEvent = (e: RunEvent) => {
    switch (e.type) {
      case 'state':
        run.state = e.state;
        run.step = e.step;
        if (e.state !== 'running') run.pauseAfter = null;
        if (e.state === 'running') {
          stepStarted = performance.now();
          latest = null;
          endActivity ??= status.begin('Training');
        } else {
          endActivity?.();
          endActivity = null;
        }
        if (e.state === 'paused') controlsNote.textContent = `Paused after step ${e.step}; a checkpoint is saved. Resume goes on with step ${e.step + 1}.`;
        else if (e.state !== 'running') controlsNote.textContent = '';
        if ((e.state === 'stopped' || e.state === 'finished') && run.runId) void saveTrained(run.runId);
        renderSummary();
        renderRewards();
        renderProgress();
        sync();
        void refreshRuns().catch(showError);
        break;
      case 'step': {
        const m = e.metrics;
        run.step = m.step;
        stepStarted = performance.now();
        latest = null;
        showStep(m);
        showSamples(e.samples);
        publishAdapter();
        const line = `Step ${m.step}${run.config ? ` of ${run.config.max_steps}` : ''}: ${formatSeconds(m.step_time)}, ${Math.round(m.tokens_per_second)} tokens/s, reward ${formatNumber(m.reward)}`;
        stats.textContent = `${line}.`;
        void engine.gpuMemory().then((mem) => {
          if (!mem) return;
          status.setMemory(`${formatBytes(mem.inUse)} (pool peak ${formatBytes(mem.peak)})`);
          if (run.step === m.step) stats.textContent = `${line}; GPU memory ${formatBytes(mem.inUse)} in use (pool peak ${formatBytes(mem.peak)}).`;
        });
        if (run.pauseAfter === m.step) controlsNote.textContent = `Step ${m.step} is done; pausing now (saving a checkpoint)…`;
        sync();
        renderProgress();
        break;
      }
      case 'progress':
        latest = e.progress;
        renderProgress();
        break;
      case 'checkpoint':
        note(`Checkpoint saved at step ${e.step} (${e.reason}).`);
        void refreshRuns().catch(showError);
        break;
      case 'warning':
        warn(e.message);
        break;
      case 'error':
        showError(e.message, e.name === 'Error' ? 'The run failed' : `The run failed (${e.name})`);
        break;
    }
  };
  const eventProxy = proxy(onEvent);

  /** The adapter of a stopped or finished run into the adapters store (under the run id). */
  const saveTrained = async (id: string) => {
    try {
      const { weights, config: cfg } = await engine.exportAdapter();
      const adapter = await importPeft(pickedFiles([new File([weights], 'adapter_model.safetensors'), new File([cfg], 'adapter_config.json')]), id);
      await saveAdapter(adapter, { origin: 'trained', runId: id });
      adaptersChanged.set(adaptersChanged.current + 1);
      note(`Adapter saved as ${id} (Adapters panel).`);
    } catch (e) {
      // A run's adapter whose B never moved: say why a trained run can end so, not the export's advice.
      if (e instanceof Error && e.name === 'UntrainedAdapterError') {
        note(
          `The adapter of ${id} was not saved: its lora_B is still all zeros, so it would change nothing. ` +
            'That happens when every completion of a prompt got the same reward at every step (zero advantages): ' +
            'use reward terms that tell completions apart (Rewards panel), more completions per prompt, or more steps.',
        );
        return;
      }
      note(`The adapter was not saved: ${userMessage(e)}`);
    }
  };

  /** The live run's adapter is the one on the model: eval records and exports name it by run, step and config. */
  let runHash: string | undefined;
  const publishAdapter = () => {
    if (run.live && run.runId) adapterOnModel.set({ name: run.runId, runId: run.runId, step: run.step, configHash: runHash });
  };

  /** Puts a run on the dashboard: its config in the (locked or not) form and its terms in the rewards line. */
  const adopt = (runId: string, cfg: TrainConfig, live: boolean) => {
    Object.assign(run, { runId, config: cfg, live, pauseAfter: null });
    if (live) {
      runHash = undefined;
      publishAdapter();
      void configHash(cfg).then((hash) => {
        if (run.runId !== runId) return;
        runHash = hash;
        publishAdapter();
      });
    }
    form.write(cfg);
    renderRewards();
    renderSummary();
  };

  start.addEventListener('click', () => {
    pressed = start;
    let input: TrainConfigInput;
    let cfg: TrainConfig;
    try {
      input = { ...formInput(), dataset: runDataset(), rewards: rewardTerms.current };
      cfg = resolveConfig(input).config;
    } catch (e) {
      error.hidden = true;
      showError(e);
      return;
    }
    start.disabled = true;
    clearDashboard(cfg.rewards.map((t) => t.name), cfg);
    Object.assign(run, { runId: null, state: 'idle', step: 0, config: cfg, live: true, pauseAfter: null });
    config.open = false;
    controlsNote.textContent = 'Starting: the first step compiles the GPU kernels it uses, which takes longest.';
    void (async () => {
      try {
        await handOverRows();
        // Events may arrive before the reply; the run id they belong to comes with it.
        const r = await engine.startTraining(input, eventProxy);
        run.runId = r.runId;
        adopt(r.runId, cfg, true);
        // The runs table shows the new run before the note says it started: the two never disagree.
        await refreshRuns();
        note(`Run ${r.runId} started.`);
      } catch (e) {
        run.live = false;
        showError(e);
      } finally {
        sync();
      }
    })();
  });

  pause.addEventListener('click', () => {
    pressed = pause;
    // Acknowledged at once; the worker answers with the step the pause waits for.
    controlsNote.textContent = `Pause requested: it takes effect when step ${run.step + 1} (in flight) finishes; that step is kept.`;
    run.pauseAfter = run.step + 1;
    sync();
    void engine.pauseTraining().then((r) => {
      if (!r) return;
      if (run.state === 'running' && run.pauseAfter !== null) {
        run.pauseAfter = r.afterStep;
        controlsNote.textContent = `Pause requested: it takes effect when step ${r.afterStep} (in flight) finishes; that step is kept.`;
        sync();
      }
    }, showError);
  });
  resume.addEventListener('click', () => {
    pressed = resume;
    if (run.state === 'running') controlsNote.textContent = 'Pause withdrawn: the run goes on.';
    run.pauseAfter = null;
    sync();
    void engine.resumeTraining().catch(showError);
  });
  stop.addEventListener('click', () => {
    pressed = stop;
    controlsNote.textContent = 'Stopping: the step in flight is abandoned (parameters change only at a step’s end); a checkpoint of the last finished step is saved.';
    void engine.stopTraining().catch(showError);
  });

  /** Shows a stored run's metrics, rollouts and config on the dashboard. */
  const fillFromStore = async (r: RunRecord) => {
    clearDashboard(r.config.rewards.map((t) => t.name), r.config);
    for (const m of await engine.trainingMetrics(r.runId)) showStep(m);
    showSamples(await engine.trainingSamples(r.runId));
  };

  const continueRun = async (r: RunRecord, button: HTMLButtonElement) => {
    pressed = button;
    button.disabled = true;
    try {
      if (r.config.dataset.kind !== 'synthetic' && !datasetStore.current) throw new Error(`run ${r.runId} trained on ${datasetSourceText(r.config.dataset)}: load it in the Data panel first`);
      await handOverRows();
      await fillFromStore(r);
      adopt(r.runId, r.config, true);
      Object.assign(run, { state: 'idle', step: r.step });
      config.open = false;
      let c;
      try {
        c = await engine.continueTraining(r.runId, eventProxy);
      } catch (e) {
        // Other data than the run trained on: only on the user's word (its order then starts a new pass).
        if (!(e instanceof Error && e.name === 'DataChangeError' && confirm(`${e.message}.\n\nContinue the run on the data loaded now?`))) throw e;
        c = await engine.continueTraining(r.runId, eventProxy, { allowDataChange: true });
      }
      note(`Run ${r.runId} continues from step ${c.step}.`);
    } catch (e) {
      run.live = false;
      showError(e);
    } finally {
      sync();
    }
  };
  const showRun = async (r: RunRecord) => {
    if (liveNow() && r.runId !== run.runId) throw new Error(`run ${run.runId} is ${run.state}: its dashboard stays until it stops`);
    if (liveNow()) return;
    await fillFromStore(r);
    adopt(r.runId, r.config, false);
    Object.assign(run, { state: r.state, step: r.step });
    stats.textContent = `Run ${r.runId} (stored): ${storedState(r)} at step ${r.step} of ${r.config.max_steps}.`;
    sync();
  };

  onFormChange();
  // Before any run the charts follow the form (e.g. the KL chart says when beta = 0 leaves it empty).
  let formConfig: TrainConfig | null = null;
  try {
    formConfig = resolveConfig({ ...formInput(), rewards: rewardTerms.current }).config;
  } catch {
    formConfig = null;
  }
  charts.reset(rewardTerms.current.map((t) => t.name), formConfig);
  // After a reload, the latest run that can go on is back on the dashboard, with its config and terms.
  void refreshRuns()
    .then(() => {
      const last = stored[0];
      if (last && !run.runId && !run.live && ['running', 'paused', 'stopped'].includes(last.state)) return showRun(last);
    })
    .catch(showError);

  return h(
    'section',
    { class: 'panel', 'aria-labelledby': 'train-h' },
    h('h2', { id: 'train-h' }, 'Train'),
    model,
    data,
    rewards,
    config,
    h('div', { class: 'row', role: 'group', 'aria-label': 'Run controls' }, start, pause, resume, stop, h('span', {}, 'State: ', state)),
    controlsNote,
    h('div', { class: 'row step-progress' }, progressBar, progressText),
    error,
    stats,
    warnings,
    messages,
    h('h3', {}, 'Metrics'),
    charts.element,
    h('h3', {}, 'Latest rollouts'),
    inspect.element,
    h('h3', {}, 'Runs in this browser'),
    h('div', { class: 'table-scroll' }, h('table', { 'data-testid': 'train-runs' }, h('thead', {}, h('tr', {}, ...['run', 'started', 'state', 'step', ''].map((c) => h('th', { scope: 'col' }, c)))), runsBody)),
    continueReason,
  );
}
