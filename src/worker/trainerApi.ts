// The trainer as the engine worker exposes it (comlink). The page calls start/pause/resume/stop and
// receives every TrainerEvent, plus progress inside a step (src/worker/stepProgress.ts), through a
// proxied callback; the run itself goes on in the worker, so no call waits for training.
// Checkpoints, metric history and samples go to IndexedDB (src/store/runs.ts), and a run is resumed
// from there after a reload. A pause lands after the step in flight: the trainer's own pause
// abandons that step, so the request is held here and handed to the trainer at the step's end.
// Each run records the data it trains on (src/data/provenance.ts); continuing it on other data is
// refused with a DataChangeError unless the caller allows it (the page asks the user first).
import { dataProvenance, provenanceDifference } from '../data/provenance';
import type { Gpu } from '../gpu';
import type { CustomRewardEvaluator } from '../rewards/sandbox';
import { resolveConfig, type TrainConfig, type TrainConfigInput } from '../rl/config';
import { resolveEngineConfig, type EngineConfig } from '../rl/engineConfig';
import type { StepMetrics, RolloutSample } from '../rl/metrics';
import type { Policy } from '../rl/policy';
import { Trainer, type PromptSource, type TrainerEvent, type TrainerState } from '../rl/trainer';
import { progressPolicy, type RunEvent } from './stepProgress';
import { createRun, getRun, latestSamples, listRuns, loadCheckpoint, metricHistory, saveCheckpoint, setRunData, setRunState, type RunRecord } from '../store/runs';

/** A continued run whose data differs from the data it recorded; continueTraining with allowDataChange goes on. */
export class DataChangeError extends Error {
  constructor(runId: string, detail: string) {
    super(`run ${runId}: ${detail}`);
    this.name = 'DataChangeError';
  }
}

/** What a run trains: the model behind the Policy interface and its prompts. */
export type PolicyFactory = (gpu: Gpu, config: TrainConfig) => Promise<{ policy: Policy; data: PromptSource }>;

export interface TrainerApi {
  /** Start a new run; resolves once it is running, with its id and the config's warnings. */
  startTraining(config: TrainConfigInput, onEvent: (e: RunEvent) => void): Promise<{ runId: string; warnings: string[] }>;
  /**
   * Continue a stored run from its latest checkpoint (after a reload). Data other than the run
   * recorded is refused with a DataChangeError unless `allowDataChange`; then the new data is
   * recorded and its order starts a new pass.
   */
  continueTraining(runId: string, onEvent: (e: RunEvent) => void, options?: { allowDataChange?: boolean }): Promise<{ step: number }>;
  /**
   * Pause after the step in flight (it is kept, not redone); resolves at once with that step's
   * number, or null when no run is running. The 'paused' state event follows once it has landed.
   */
  pauseTraining(): Promise<{ afterStep: number } | null>;
  /** Resume a paused run, or withdraw a pause that has not landed yet. */
  resumeTraining(): Promise<void>;
  stopTraining(): Promise<void>;
  trainingState(): Promise<{ runId: string | null; state: TrainerState; step: number }>;
  trainingMetrics(runId: string): Promise<StepMetrics[]>;
  trainingSamples(runId: string): Promise<RolloutSample[]>;
  trainingRuns(): Promise<RunRecord[]>;
}

export interface TrainerApiDeps {
  gpu: () => Promise<Gpu>;
  openPolicy: PolicyFactory;
  sandbox?: CustomRewardEvaluator;
  /** Size in bytes of the file a file dataset's rows were read from, for the run's data record. */
  dataFileBytes?: () => number | undefined;
  /** Where the loaded model's products run (the Model panel's setting), where it keeps training
   * activations, and what the pool keeps between the phases, for the run's engine config. */
  products?: () => Partial<Pick<EngineConfig, 'products' | 'vision_products' | 'activation_storage' | 'phase_buffers'>>;
}

export function createTrainerApi(deps: TrainerApiDeps): TrainerApi {
  let current: { runId: string; trainer: Trainer } | null = null;
  /** A pause asked for while a step runs, handed to the trainer when that step ends. */
  let pauseAfterStep = false;

  /** `stored` undefined: a run of an earlier version, whose config's gradient_checkpointing holds.
   * `resume`: the stored run, and whether other data than it recorded may be used. */
  const launch = async (runId: string, config: TrainConfig, stored: EngineConfig | undefined, onEvent: (e: RunEvent) => void, resume: { run: RunRecord; allowDataChange: boolean } | null) => {
    if (current && ['running', 'paused'].includes(current.trainer.status)) throw new Error(`run ${current.runId} is still ${current.trainer.status}; stop it first`);
    const { loss, engine: fromConfig } = resolveConfig(config);
    const engine = stored ?? resolveEngineConfig({}, 'engine', fromConfig);
    const gpu = await deps.gpu();
    const opened = await deps.openPolicy(gpu, config);
    const given = await dataProvenance(opened.data.rows, config.dataset, deps.dataFileBytes?.());
    const before = resume?.run.data;
    const changed = !resume ? null : before ? provenanceDifference(before, given) : 'it has no record of the data it trained on (a run of an older version)';
    if (changed && !resume?.allowDataChange) throw new DataChangeError(runId, changed);
    if (!before || changed) await setRunData(runId, given);
    const checkpoint = resume ? await loadCheckpoint(runId) : null;
    pauseAfterStep = false;
    // A failing persistence or callback must surface as an event, never stop the run silently.
    const send = (e: RunEvent) => {
      try {
        onEvent(e);
      } catch (err) {
        console.error('trainer event callback failed', err);
      }
    };
    const progress = progressPolicy(opened.policy, config, send);
    const report = (e: TrainerEvent) => {
      // Before the page hears of the step: the trainer's pause (at its next prompt boundary) then
      // falls right after this step, which is kept.
      if (e.type === 'step' && pauseAfterStep) {
        pauseAfterStep = false;
        current?.trainer.pause();
      }
      if (e.type === 'step' || e.type === 'state') progress.stepBoundary(e.type === 'step' ? e.metrics.step : e.step);
      send(e);
      if (e.type === 'state') void setRunState(runId, e.state, e.step).catch((err: unknown) => report({ type: 'warning', message: `could not record the run state: ${String(err)}` }));
    };
    const { data } = opened;
    const policy = progress.policy;
    const trainer = await Trainer.create({
      gpu,
      policy,
      data,
      config,
      loss,
      runId,
      sandbox: deps.sandbox,
      onEvent: report,
      saveCheckpoint: async (c) => void (await saveCheckpoint(c)),
      resume: checkpoint ?? undefined,
      engine,
      newData: changed !== null,
    });
    if (changed) send({ type: 'warning', message: `continuing on other data (${changed}): the data order starts a new pass` });
    // The finished run's optimizer state goes back to the pool (its checkpoint holds what a resume needs).
    current?.trainer.release();
    current = { runId, trainer };
    void gpu.lost.then((e) => report({ type: 'error', message: e.message, name: e.name }));
    // Errors are already reported as 'error' events by Trainer.run.
    void trainer.run().catch(() => undefined);
    return trainer;
  };

  return {
    async startTraining(input, onEvent) {
      // The form's gradient_checkpointing is the engine's (transformers' name), the products those the
      // model runs (the Model panel's); micro_batch_tokens keeps its default here.
      const { config, warnings, engine: fromConfig } = resolveConfig(input);
      const engine = resolveEngineConfig({ ...deps.products?.() }, 'engine', fromConfig);
      const runId = `run-${Date.now().toString(36)}-${Math.floor(Math.random() * 1e6).toString(36)}`;
      await createRun(runId, config, engine);
      for (const message of warnings) onEvent({ type: 'warning', message });
      await launch(runId, config, engine, onEvent, null);
      return { runId, warnings };
    },
    async continueTraining(runId, onEvent, options = {}) {
      const run = await getRun(runId);
      if (!run) throw new Error(`no stored run '${runId}'`);
      const trainer = await launch(runId, run.config, run.engine, onEvent, { run, allowDataChange: options.allowDataChange === true });
      return { step: trainer.currentStep };
    },
    async pauseTraining() {
      if (!current || current.trainer.status !== 'running') return null;
      pauseAfterStep = true;
      return { afterStep: current.trainer.currentStep + 1 };
    },
    async resumeTraining() {
      pauseAfterStep = false;
      current?.trainer.resume();
    },
    async stopTraining() {
      current?.trainer.stop();
    },
    async trainingState() {
      return { runId: current?.runId ?? null, state: current?.trainer.status ?? 'idle', step: current?.trainer.currentStep ?? 0 };
    },
    trainingMetrics: (runId) => metricHistory(runId),
    trainingSamples: (runId) => latestSamples(runId),
    trainingRuns: () => listRuns(),
  };
}
