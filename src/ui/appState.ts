// Page state the panels share beyond the data set (datasetStore.ts): the loaded model, the reward
// playground's current terms (what a training run or an eval scores with), and a signal when the
// saved adapters or eval runs change. Each is a value with listeners that hear every change.
import type { EvalRun } from '../eval/records';
import type { RolloutSample } from '../rl/metrics';
import { presetTerms, type RewardTerm } from '../rewards/registry';
import type { LoadedModel } from '../worker/api';

export class Observable<T> {
  private readonly listeners = new Set<(value: T) => void>();
  constructor(private value: T) {}

  get current(): T {
    return this.value;
  }

  set(value: T): void {
    this.value = value;
    for (const l of this.listeners) l(value);
  }

  /** Calls `listener` now and on every change; returns the unsubscribe function. */
  subscribe(listener: (value: T) => void): () => void {
    this.listeners.add(listener);
    listener(this.value);
    return () => this.listeners.delete(listener);
  }
}

/** The model in the engine worker, as loadModel described it; null before one is loaded. */
export const loadedModel = new Observable<LoadedModel | null>(null);

/** The playground's terms (valid ones only: the playground publishes after validating). */
export const rewardTerms = new Observable<RewardTerm[]>(presetTerms('seeds'));

/** The latest eval run made on this page (the adapters panel evaluates through the eval panel). */
export const latestEval = new Observable<EvalRun | null>(null);

/** The rollouts on the Train dashboard (the latest step's, or a stored run's), for the playground. */
export const latestRollouts = new Observable<RolloutSample[]>([]);

/** A completion the user opened in the reward playground (from the rollout inspector). */
export const playgroundSample = new Observable<{ completion: string; answer: string } | null>(null);

/** The Train form's settings that size a run's memory (the Model panel's estimate uses them). */
export interface TrainSettings {
  num_generations: number;
  max_completion_length: number;
  max_prompt_length: number | null;
  lora_r: number;
}
export const trainSettings = new Observable<TrainSettings | null>(null);

/** Bumped when an adapter is saved, imported or deleted, so lists refresh. */
export const adaptersChanged = new Observable<number>(0);
