// Progress inside a training step, for the dashboard: which phase runs (generating, scoring,
// training), the tokens of each prompt group generated so far (the group in flight too, as the
// sampler's readbacks come in), and which micro-batch trains. It is
// read off the Policy the trainer calls (generate, forward, backward), so the trainer needs no
// hook of its own: a step's generation calls Policy.generate once per prompt, then no-grad
// forwards for old/reference log-probs; its training runs a training forward (or several, for a
// group over the token budget) per prompt group, in micro-batches of whole groups.
import { batchPlan, type TrainConfig } from '../rl/config';
import type { Policy } from '../rl/policy';
import type { TrainerEvent } from '../rl/trainer';

export type StepPhase = 'generating' | 'scoring' | 'training';

export interface StepProgress {
  /** The step in flight (1-based: the one the next 'step' event reports). */
  step: number;
  phase: StepPhase;
  /** Prompt groups this step generates (0 when it trains on an earlier generation batch). */
  groupsToGenerate: number;
  /** Completion tokens of each group generated so far this step (all G completions together). */
  groupTokens: number[];
  /** Tokens sampled so far in the group being generated (all its completions together). */
  tokensInFlight: number;
  /** Prompt groups trained on so far this step (the one in flight included), of trainingGroups. */
  trainingGroup: number;
  trainingGroups: number;
  /** The micro-batch in flight (1-based) of gradient_accumulation_steps; 0 before training starts. */
  microBatch: number;
  microBatches: number;
}

/** What the engine worker sends to the page during a run. */
export type RunEvent = TrainerEvent | { type: 'progress'; progress: StepProgress };

export interface ProgressPolicy {
  policy: Policy;
  /** The trainer reached the end of step `step` (or started at it): the next step is step + 1. */
  stepBoundary(step: number): void;
}

export function progressPolicy(inner: Policy, config: TrainConfig, send: (e: RunEvent) => void): ProgressPolicy {
  const plan = batchPlan(config);
  const trainingGroups = config.gradient_accumulation_steps * plan.promptsPerMicroBatch;
  let p: StepProgress;
  let lastTrained: unknown = null;
  const reset = (done: number) => {
    p = { step: done + 1, phase: 'generating', groupsToGenerate: 0, groupTokens: [], tokensInFlight: 0, trainingGroup: 0, trainingGroups, microBatch: 0, microBatches: config.gradient_accumulation_steps };
    lastTrained = null;
  };
  reset(0);
  const emit = () => send({ type: 'progress', progress: { ...p, groupTokens: [...p.groupTokens] } });

  const policy: Policy = {
    get lora() {
      return inner.lora;
    },
    async generate(prompt, numSamples, opts) {
      p.phase = 'generating';
      p.groupsToGenerate = plan.promptsPerGeneration;
      p.tokensInFlight = 0;
      emit();
      const out = await inner.generate(prompt, numSamples, {
        ...opts,
        onTokens: (n) => {
          p.tokensInFlight = n;
          emit();
        },
      });
      p.groupTokens.push(out.reduce((n, c) => n + c.tokens.length, 0));
      p.tokensInFlight = 0;
      emit();
      return out;
    },
    async forward(batch, opts) {
      if (opts.train) {
        // Chunks of one group share its prompt: a new prompt is the next group.
        if (batch.prompt !== lastTrained) {
          lastTrained = batch.prompt;
          p.trainingGroup++;
          p.microBatch = Math.ceil(p.trainingGroup / plan.promptsPerMicroBatch);
        }
        p.phase = 'training';
        emit();
      } else if (p.phase !== 'training') {
        p.phase = 'scoring';
        emit();
      }
      return inner.forward(batch, opts);
    },
    backward: (gradLogps, gradEntropy) => inner.backward(gradLogps, gradEntropy),
  };
  return { policy, stepBoundary: reset };
}
