// The training dashboard: the config form, start / pause / resume / stop of a run in the engine
// worker, live charts of TRL's metrics, step time, tokens/s and GPU memory, a rollout inspector
// over the trainer's latest samples, and the runs stored in this browser (continue one after a
// reload). Prompts are the Data panel's training split (else the config's synthetic set); rewards
// are the playground's current terms. When a run stops or finishes, its adapter is saved to the
// adapters store (src/store/adapters.ts) under the run's id.
import type { Remote } from 'comlink';
import { importPeft } from '../../adapter/peft';
import type { DatasetRow, RgbaImage } from '../../data/types';
import { pickedFiles } from '../../model/safetensors';
import { imageKey } from '../../model/session';
import { defaultConfig, resolveConfig, type TrainConfigInput } from '../../rl/config';
import { DEMO_TRAIN_CONFIG } from '../../data/demo';
import type { RolloutSample, StepMetrics } from '../../rl/metrics';
import type { TrainerEvent, TrainerState } from '../../rl/trainer';
import { saveAdapter } from '../../store/adapters';
import type { RunRecord } from '../../store/runs';
import type { EngineApi } from '../../worker/api';
import { proxy } from '../../worker/client';
import { adaptersChanged, loadedModel, rewardTerms } from '../appState';
import { LiveChart } from '../chart';
import { datasetStore } from '../datasetStore';
import { h } from '../dom';
import { field, select } from '../form';
import { formatBytes, formatNumber } from '../format';
import { imageCanvas } from '../imageCanvas';
import type { StatusBar } from '../status';
import { configForm } from './trainConfigForm';

/** Chart title → series name → metric key (TRL's names; src/rl/metrics.ts, src/rl/trainer.ts). */
function chartSpecs(termNames: readonly string[]): { title: string; series: Record<string, string> }[] {
  return [
    { title: 'Reward', series: { reward: 'reward', ...Object.fromEntries(termNames.map((n) => [n, `rewards/${n}/mean`])) } },
    { title: 'Entropy', series: { entropy: 'entropy' } },
    { title: 'KL to the base model', series: { kl: 'kl' } },
    { title: 'Completion length (tokens)', series: { mean: 'completions/mean_length', min: 'completions/min_length', max: 'completions/max_length' } },
    { title: 'Clip ratio', series: { region: 'clip_ratio/region_mean', low: 'clip_ratio/low_mean', high: 'clip_ratio/high_mean' } },
    { title: 'Grad norm', series: { grad_norm: 'grad_norm' } },
    { title: 'Learning rate', series: { learning_rate: 'learning_rate' } },
    { title: 'Rollout/trainer log-prob gap', series: { mean: 'sampling/sampling_logp_difference/mean', max: 'sampling/sampling_logp_difference/max' } },
  ];
}

class Charts {
  readonly element = h('div', { class: 'charts', 'data-testid': 'train-charts' });
  private charts: { chart: LiveChart; series: Record<string, string> }[] = [];

  reset(termNames: readonly string[]): void {
    for (const c of this.charts) c.chart.dispose();
    this.charts = chartSpecs(termNames).map((s) => ({ chart: new LiveChart({ title: s.title, series: Object.keys(s.series).map((name) => ({ name })) }), series: s.series }));
    this.element.replaceChildren(...this.charts.map((c) => c.chart.element));
  }

  append(m: StepMetrics): void {
    for (const { chart, series } of this.charts) {
      chart.append(m.step, Object.fromEntries(Object.entries(series).map(([name, key]) => [name, m[key] ?? null])));
    }
  }
}

/** Images of the rows the page has, by the worker's content key, for the inspector. */
function imageLookup(rows: readonly DatasetRow[]): Map<string, RgbaImage> {
  const map = new Map<string, RgbaImage>();
  for (const r of rows) for (const im of r.images) map.set(imageKey(im), im);
  return map;
}

function inspector(): { element: HTMLElement; show(samples: RolloutSample[], images: () => Map<string, RgbaImage>): void } {
  const pick = select([{ value: '0', label: 'no rollouts yet' }], '0');
  const body = h('div', { 'data-testid': 'rollout-inspector' }, h('p', { class: 'muted' }, 'The latest rollouts appear here after the first step.'));
  let current: RolloutSample[] = [];
  let lookup: () => Map<string, RgbaImage> = () => new Map();
  const render = () => {
    const s = current[Number(pick.value)];
    if (!s) return;
    const imgs = lookup();
    body.replaceChildren(
      h(
        'div',
        { class: 'row' },
        ...s.imageKeys.map((k, i) => {
          const im = imgs.get(k);
          return im ? imageCanvas(im, `Image ${i + 1} of the prompt`) : h('span', { class: 'muted' }, `image ${i + 1}: not among the rows on this page`);
        }),
      ),
      h('p', {}, h('strong', {}, 'Gold answer: '), s.answer),
      h('details', {}, h('summary', {}, 'Prompt'), h('pre', { class: 'prompt' }, s.prompt)),
      h(
        'table',
        {},
        h('thead', {}, h('tr', {}, ...['#', 'reward', 'terms', 'advantage', 'tokens', 'completion'].map((c) => h('th', { scope: 'col' }, c)))),
        h(
          'tbody',
          {},
          ...s.completions.map((c, i) =>
            h(
              'tr',
              {},
              h('td', {}, i + 1),
              h('td', { class: 'num' }, formatNumber(c.reward)),
              h('td', { class: 'num' }, Object.entries(c.terms).map(([n, v]) => `${n} ${formatNumber(v)}`).join(', ')),
              h('td', { class: 'num' }, formatNumber(c.advantage)),
              h('td', { class: 'num' }, `${c.length}${c.truncated ? ' (cut)' : ''}`),
              h('td', {}, h('pre', { class: 'completion' }, c.text)),
            ),
          ),
        ),
      ),
    );
  };
  pick.addEventListener('change', render);
  return {
    element: h('div', {}, field('Prompt group', pick), body),
    show(samples, images) {
      current = samples;
      lookup = images;
      const keep = Math.min(Number(pick.value), samples.length - 1);
      pick.replaceChildren(...samples.map((s, i) => h('option', { value: String(i) }, `step ${s.step}, group ${i + 1}: ${s.answer}`)));
      pick.value = String(Math.max(keep, 0));
      render();
    },
  };
}

export function trainPanel(engine: Remote<EngineApi>, status: StatusBar): HTMLElement {
  // The demo run's settings (GSPO, 4 prompts x 8) are the starting values: the bundled model is the app's default.
  const form = configForm(DEMO_TRAIN_CONFIG);
  const systemPrompt = h('textarea', { rows: 3, 'data-key': 'system_prompt' });
  systemPrompt.value = defaultConfig().system_prompt ?? '';
  const data = h('p', { 'data-testid': 'train-data' });
  const rewards = h('p', { 'data-testid': 'train-rewards' });
  const model = h('p', { 'data-testid': 'train-model' });
  const start = h('button', { type: 'button', class: 'primary' }, 'Start');
  const pause = h('button', { type: 'button', disabled: true }, 'Pause');
  const resume = h('button', { type: 'button', disabled: true }, 'Resume');
  const stop = h('button', { type: 'button', disabled: true }, 'Stop');
  const state = h('span', { 'data-testid': 'train-state', 'aria-live': 'polite' }, 'idle');
  const stats = h('p', { 'data-testid': 'train-stats', 'aria-live': 'polite' }, 'No step yet.');
  const messages = h('ul', { 'data-testid': 'train-messages', 'aria-live': 'polite' });
  const error = h('p', { class: 'error', role: 'alert', 'data-testid': 'train-error', hidden: true });
  const charts = new Charts();
  const inspect = inspector();
  const runsBody = h('tbody', {});
  charts.reset(rewardTerms.current.map((t) => t.name));
  let trainerState: TrainerState = 'idle';
  let runId: string | null = null;
  /** The run control last pressed: when it becomes disabled (or its row is rebuilt), focus moves on from it. */
  let pressed: HTMLButtonElement | null = null;

  datasetStore.subscribe((d) => {
    data.textContent = d
      ? `Data: the ${d.split.train.length} training rows of ${d.source} (Data panel).`
      : 'Data: none loaded in the Data panel, so the config’s synthetic set (all three tasks, 256 rows) is used.';
  });
  rewardTerms.subscribe((terms) => {
    rewards.replaceChildren(`Rewards (from the Rewards panel): ${terms.map((t) => `${formatNumber(t.weight)}·${t.name}`).join(' + ')}. `, h('a', { href: '#rewards' }, 'Edit them'));
  });
  loadedModel.subscribe((m) => {
    model.textContent = m ? `Model: ${m.location}.` : 'Model: none loaded; load one in the Model panel first.';
    syncButtons();
  });

  const rowImages = () => imageLookup(datasetStore.current?.split.train ?? []);

  function syncButtons() {
    const live = trainerState === 'running' || trainerState === 'paused';
    start.disabled = live || !loadedModel.current;
    pause.disabled = trainerState !== 'running';
    resume.disabled = trainerState !== 'paused';
    stop.disabled = !live;
    for (const b of runsBody.querySelectorAll('button[data-continue]')) (b as HTMLButtonElement).disabled = live || !loadedModel.current;
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

  const showError = (e: unknown) => {
    error.hidden = false;
    error.textContent = e instanceof Error ? e.message : String(e);
  };
  const note = (text: string) => messages.append(h('li', {}, text));

  let endActivity: (() => void) | null = null;
  const onEvent = (e: TrainerEvent) => {
    switch (e.type) {
      case 'state':
        trainerState = e.state;
        state.textContent = `${e.state} at step ${e.step}`;
        if (e.state === 'running') endActivity ??= status.begin('Training');
        else {
          endActivity?.();
          endActivity = null;
        }
        if ((e.state === 'stopped' || e.state === 'finished') && runId) void saveTrained(runId);
        syncButtons();
        void refreshRuns();
        break;
      case 'step': {
        const m = e.metrics;
        charts.append(m);
        if (e.samples.length) inspect.show(e.samples, rowImages);
        void engine.gpuMemory().then((mem) => {
          const memText = mem ? `${formatBytes(mem.inUse)} in use (pool peak ${formatBytes(mem.peak)})` : 'unknown';
          if (mem) status.setMemory(`${formatBytes(mem.inUse)} (pool peak ${formatBytes(mem.peak)})`);
          stats.textContent = `Step ${m.step}: ${formatNumber(m.step_time)} s, ${formatNumber(m.tokens_per_second)} tokens/s, reward ${formatNumber(m.reward)}; GPU memory ${memText}.`;
        });
        break;
      }
      case 'checkpoint':
        note(`Checkpoint saved at step ${e.step} (${e.reason}).`);
        break;
      case 'warning':
        note(`Warning: ${e.message}`);
        break;
      case 'error':
        showError(`${e.name}: ${e.message}`);
        break;
    }
  };
  const eventProxy = proxy(onEvent);

  /** The adapter of a stopped or finished run into the adapters store (under the run id). */
  const saveTrained = async (id: string) => {
    try {
      const { weights, config } = await engine.exportAdapter();
      const adapter = await importPeft(pickedFiles([new File([weights], 'adapter_model.safetensors'), new File([config], 'adapter_config.json')]), id);
      await saveAdapter(adapter, { origin: 'trained', runId: id });
      adaptersChanged.set(adaptersChanged.current + 1);
      note(`Adapter saved as ${id} (Adapters panel).`);
    } catch (e) {
      note(`The adapter was not saved: ${e instanceof Error ? e.message : String(e)}`);
    }
  };

  const configInput = (): TrainConfigInput => ({ ...form.read(), system_prompt: systemPrompt.value.trim() === '' ? null : systemPrompt.value, rewards: rewardTerms.current });

  start.addEventListener('click', () => {
    pressed = start;
    error.hidden = true;
    messages.replaceChildren();
    let input: TrainConfigInput;
    try {
      input = configInput();
      resolveConfig(input);
    } catch (e) {
      showError(e);
      return;
    }
    start.disabled = true;
    void (async () => {
      try {
        await engine.setDataset(datasetStore.current ? datasetStore.current.split.train : null);
        charts.reset((input.rewards ?? []).map((t) => t.name));
        const r = await engine.startTraining(input, eventProxy);
        runId = r.runId;
        note(`Run ${r.runId} started.`);
      } catch (e) {
        showError(e);
      } finally {
        syncButtons();
      }
    })();
  });
  for (const [button, action] of [
    [pause, () => engine.pauseTraining()],
    [resume, () => engine.resumeTraining()],
    [stop, () => engine.stopTraining()],
  ] as const) {
    button.addEventListener('click', () => {
      pressed = button;
      void action();
    });
  }

  const continueRun = async (run: RunRecord, button: HTMLButtonElement) => {
    pressed = button;
    error.hidden = true;
    try {
      await engine.setDataset(datasetStore.current ? datasetStore.current.split.train : null);
      charts.reset(run.config.rewards.map((t) => t.name));
      for (const m of await engine.trainingMetrics(run.runId)) charts.append(m);
      runId = run.runId;
      const r = await engine.continueTraining(run.runId, eventProxy);
      note(`Run ${run.runId} continues from step ${r.step}.`);
    } catch (e) {
      showError(e);
    }
  };
  const showRun = async (run: RunRecord) => {
    charts.reset(run.config.rewards.map((t) => t.name));
    for (const m of await engine.trainingMetrics(run.runId)) charts.append(m);
    const samples = await engine.trainingSamples(run.runId);
    if (samples.length) inspect.show(samples, rowImages);
  };

  const refreshRuns = async () => {
    const runs = await engine.trainingRuns();
    runsBody.replaceChildren(
      ...runs.map((run) =>
        h(
          'tr',
          { 'data-run': run.runId },
          h('td', {}, run.runId),
          h('td', {}, new Date(run.createdAt).toLocaleString()),
          h('td', {}, run.state),
          h('td', { class: 'num' }, `${run.step} / ${run.config.max_steps}`),
          h(
            'td',
            {},
            h('button', { type: 'button', 'aria-label': `Show the metrics of ${run.runId}`, onclick: () => void showRun(run) }, 'Show'),
            run.state !== 'finished' ? h('button', { type: 'button', 'data-continue': run.runId, 'aria-label': `Continue ${run.runId}`, onclick: (e: Event) => void continueRun(run, e.currentTarget as HTMLButtonElement) }, 'Continue') : null,
          ),
        ),
      ),
    );
    syncButtons();
  };
  void refreshRuns().catch(showError);

  return h(
    'section',
    { class: 'panel', 'aria-labelledby': 'train-h' },
    h('h2', { id: 'train-h' }, 'Train'),
    model,
    data,
    rewards,
    field('system_prompt', systemPrompt, 'For rows without their own; empty for none. Default: the seeds’ <REASONING>/<SOLUTION> prompt.'),
    form.element,
    h('div', { class: 'row', role: 'group', 'aria-label': 'Run controls' }, start, pause, resume, stop, h('span', {}, 'State: ', state)),
    error,
    stats,
    messages,
    h('h3', {}, 'Metrics'),
    charts.element,
    h('h3', {}, 'Latest rollouts'),
    inspect.element,
    h('h3', {}, 'Runs in this browser'),
    h('table', { 'data-testid': 'train-runs' }, h('thead', {}, h('tr', {}, ...['run', 'started', 'state', 'step', ''].map((c) => h('th', { scope: 'col' }, c)))), runsBody),
  );
}
