// Rewards: built-ins, normalisation, registry and weighted sum, the playground's logic, and the
// custom-reward sandbox. Node code gets its sandbox from './sandboxNode' (kept out of this index
// so that the browser bundle never sees node:worker_threads).
export type { RewardContext, RewardExplanation, RewardFn } from './types';
export { explainFormat, formatReward, isDegenerate, DEGENERATE_MIN_REPEATS, DEGENERATE_MIN_SHARE, DEGENERATE_PENALTY } from './format';
export { correctnessReward, explainCorrectness, EXACT_MATCH_REWARD, NUMERIC_MATCH_REWARD } from './correctness';
export { boxedReward, explainBoxed, GEO3K_BOXED, type BoxedOptions } from './boxed';
export { splitThinking, THINK_CLOSE, THINK_OPEN, type ThinkingSplit } from './thinking';
export { answersEqual, evalLatexNumber, extractTagged, lastBoxed, normalizeAnswer, numericValue, numbersMatch } from './normalize';
export {
  BUILTIN_REWARDS,
  REWARD_PRESETS,
  builtinRewardFn,
  isBuiltinName,
  presetTerms,
  scoreBuiltins,
  scoreSamples,
  validateTerms,
  type BuiltinName,
  type PresetName,
  type RewardPreset,
  type RewardSample,
  type RewardTerm,
  type SampleScore,
  type TermScore,
} from './registry';
export {
  evaluateAll,
  evaluateBuiltins,
  liveScorer,
  parseWeight,
  playgroundFromPreset,
  removeTerm,
  setCustomTerm,
  setWeight,
  type PlaygroundRow,
  type PlaygroundState,
  type PlaygroundView,
} from './playground';
export {
  CustomRewardSandbox,
  DEFAULT_TIME_LIMIT_MS,
  type CustomRewardEvaluator,
  type CustomRewardResult,
  type SandboxItem,
  type SandboxOptions,
  type SandboxPort,
  type SpawnSandbox,
} from './sandbox';
export { createBrowserSandbox, spawnBrowserSandbox } from './sandboxBrowser';
