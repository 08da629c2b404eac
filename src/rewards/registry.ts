// Built-in rewards by name, reward terms with weights, the presets, and the weighted sum that keeps
// every term (the UI shows each term and the total; the trainer logs rewards/<name>/mean).
import { explainBoxed, GEO3K_BOXED, type BoxedOptions } from './boxed';
import { explainCorrectness, SEEDS_CORRECTNESS, type CorrectnessOptions } from './correctness';
import { explainFormat } from './format';
import type { CustomRewardEvaluator } from './sandbox';
import { splitThinking } from './thinking';
import type { RewardContext, RewardExplanation, RewardFn } from './types';

export interface BuiltinReward {
  description: string;
  /** Parameter names the reward accepts in a term's `params`, with their defaults. */
  defaults: Readonly<Record<string, number>>;
  explain(completion: string, answer: string, context: RewardContext, params: Record<string, number>): RewardExplanation;
}

export const BUILTIN_REWARDS = {
  format: {
    description: '+1 for exactly one <REASONING> block, +1 for exactly one <SOLUTION> block, −2 if degenerate (repeated addCriterion)',
    defaults: {},
    explain: (completion) => explainFormat(completion),
  },
  correctness: {
    description:
      '<SOLUTION> value vs gold: reward_max_val (2.0) on an exact match, reward_numeric_val (1.5) on a numeric match (fractions, %, units, separators), else reward_min_val (0)',
    defaults: { ...SEEDS_CORRECTNESS },
    explain: (completion, answer, _context, params) => explainCorrectness(completion, answer, params as unknown as CorrectnessOptions),
  },
  boxed: {
    description: 'last \\boxed{} vs gold after normalisation (geo3k): reward_max_val on a match, else reward_min_val',
    defaults: { ...GEO3K_BOXED },
    explain: (completion, answer, _context, params) => explainBoxed(completion, answer, params as unknown as BoxedOptions),
  },
} satisfies Record<string, BuiltinReward>;

export type BuiltinName = keyof typeof BUILTIN_REWARDS;

export function isBuiltinName(name: string): name is BuiltinName {
  return Object.hasOwn(BUILTIN_REWARDS, name);
}

/**
 * One weighted term of the total. A term with `source` is a custom JavaScript reward run in the
 * sandbox; otherwise it is the built-in named `builtin`, or `name` when `builtin` is left out.
 * `name` is what metrics and the UI show, so two terms may use one built-in with other params.
 */
export interface RewardTerm {
  name: string;
  weight: number;
  builtin?: BuiltinName;
  params?: Record<string, number>;
  source?: string;
}

export interface RewardPreset {
  description: string;
  terms: readonly RewardTerm[];
}

export const REWARD_PRESETS = {
  seeds: {
    description: "the seeds' rewards: 0.3·format + 1.0·correctness on <REASONING>/<SOLUTION> output",
    terms: [
      { name: 'format', weight: 0.3 },
      { name: 'correctness', weight: 1.0 },
    ],
  },
  geo3k: {
    description: 'geo3k boxed correctness, reward_max_val 1 and reward_min_val 0 (RLinf geo3k config)',
    terms: [{ name: 'boxed', weight: 1.0, params: { reward_max_val: 1, reward_min_val: 0 } }],
  },
} satisfies Record<string, RewardPreset>;

export type PresetName = keyof typeof REWARD_PRESETS;

/** A fresh, editable copy of a preset's terms. */
export function presetTerms(name: PresetName): RewardTerm[] {
  return REWARD_PRESETS[name].terms.map((t) => ({ ...t, ...('params' in t ? { params: { ...t.params } } : {}) }));
}

/** Throws an Error saying what is wrong with a list of terms (the config form shows it). */
export function validateTerms(terms: readonly RewardTerm[]): void {
  if (terms.length === 0) throw new Error('rewards: at least one reward term is needed');
  const seen = new Set<string>();
  for (const t of terms) {
    if (!t.name || !/^[\w.-]+$/.test(t.name)) {
      throw new Error(`rewards: term name '${t.name}' must be non-empty letters, digits, '_', '.' or '-'`);
    }
    if (seen.has(t.name)) throw new Error(`rewards: two terms are named '${t.name}'`);
    seen.add(t.name);
    if (!Number.isFinite(t.weight)) throw new Error(`rewards: term '${t.name}' has weight ${t.weight}, not a finite number`);
    if (t.source !== undefined) {
      if (t.builtin !== undefined || t.params !== undefined) {
        throw new Error(`rewards: term '${t.name}' has custom source, so it takes neither builtin nor params`);
      }
      continue;
    }
    const builtin = t.builtin ?? t.name;
    if (!isBuiltinName(builtin)) {
      throw new Error(`rewards: no built-in reward '${builtin}' (built-ins: ${Object.keys(BUILTIN_REWARDS).join(', ')})`);
    }
    const defaults: Readonly<Record<string, number>> = BUILTIN_REWARDS[builtin].defaults;
    for (const [key, value] of Object.entries(t.params ?? {})) {
      if (!Object.hasOwn(defaults, key)) {
        const known = Object.keys(defaults);
        throw new Error(`rewards: '${builtin}' has no parameter '${key}'${known.length ? ` (it takes ${known.join(', ')})` : ''}`);
      }
      if (!Number.isFinite(value)) throw new Error(`rewards: parameter ${key} of '${t.name}' is ${value}, not a finite number`);
    }
  }
}

/** The built-in behind a term as a plain reward function (throws for custom terms). */
export function builtinRewardFn(term: RewardTerm): RewardFn {
  const explain = builtinExplainer(term);
  return (completion, answer, context) => explain(completion, answer, context).value;
}

function builtinExplainer(term: RewardTerm): (completion: string, answer: string, context: RewardContext) => RewardExplanation {
  if (term.source !== undefined) throw new Error(`rewards: term '${term.name}' is a custom reward; it runs in the sandbox`);
  const name = term.builtin ?? term.name;
  if (!isBuiltinName(name)) throw new Error(`rewards: no built-in reward '${name}'`);
  const reward: BuiltinReward = BUILTIN_REWARDS[name];
  const params = { ...reward.defaults, ...term.params };
  return (completion, answer, context) => reward.explain(completion, answer, context, params);
}

export interface RewardSample {
  completion: string;
  answer: string;
  prompt?: string;
  index?: number;
  /** The prompt opened a <think> block (a thinking model): a completion without </think> has no answer yet. */
  thinking?: boolean;
}

export interface TermScore {
  name: string;
  weight: number;
  /** The term's own value (0 when it failed). */
  value: number;
  /** weight · value, this term's share of the total. */
  weighted: number;
  /** Why the built-in gave this value. */
  reason?: string;
  /** Why a custom reward gave no usable number; its value is then 0. */
  error?: string;
}

export interface SampleScore {
  terms: TermScore[];
  total: number;
}

function sampleScore(terms: TermScore[]): SampleScore {
  return { terms, total: terms.reduce((sum, t) => sum + t.weighted, 0) };
}

// Built-ins score the answer after a thinking block (src/rewards/thinking.ts); custom terms get the whole completion.
function builtinScore(term: RewardTerm, explain: ReturnType<typeof builtinExplainer>, s: RewardSample): TermScore {
  const split = splitThinking(s.completion, s.thinking);
  const { value, reason } = explain(split.answer, s.answer, { prompt: s.prompt, index: s.index });
  return { name: term.name, weight: term.weight, value, weighted: term.weight * value, reason: split.unfinished ? `thinking block not closed; ${reason}` : reason };
}

/** Score one sample with built-in terms only, synchronously (the playground, as the user types). */
export function scoreBuiltins(terms: readonly RewardTerm[], sample: RewardSample): SampleScore {
  validateTerms(terms);
  return sampleScore(terms.map((t) => builtinScore(t, builtinExplainer(t), sample)));
}

/**
 * Score a batch: built-ins in place, each custom term in one sandbox round trip for the whole
 * batch. A custom reward that fails scores 0 for that sample, with the error kept on the term.
 */
export async function scoreSamples(
  terms: readonly RewardTerm[],
  samples: readonly RewardSample[],
  sandbox?: CustomRewardEvaluator,
): Promise<SampleScore[]> {
  validateTerms(terms);
  const columns = await Promise.all(
    terms.map(async (term): Promise<TermScore[]> => {
      if (term.source === undefined) {
        const explain = builtinExplainer(term);
        return samples.map((s) => builtinScore(term, explain, s));
      }
      if (!sandbox) throw new Error(`rewards: term '${term.name}' is a custom reward and needs a sandbox`);
      const results = await sandbox.evaluate(term.source, samples);
      return results.map((r) => ({
        name: term.name,
        weight: term.weight,
        value: r.value,
        weighted: term.weight * r.value,
        ...(r.error !== null ? { error: r.error } : {}),
      }));
    }),
  );
  return samples.map((_, i) => sampleScore(columns.map((column) => column[i])));
}
