// Per-sample eval records, their aggregates, and the JSON the eval panel exports.
//
// Whether a sample is correct and well formatted is a fixed criterion of the answer format,
// independent of the reward terms (which the user may reweight or replace): the terms are kept on
// each record beside it, as the playground shows them.
//   'solution' (the seeds' prompt): prediction = the one <SOLUTION> block (null unless exactly
//       one); correct = the correctness reward's exact or numeric match; format_ok = exactly one
//       <REASONING> and one <SOLUTION> block and not degenerate (the format reward at its max, 2).
//   'boxed' (geo3k): prediction = the last \boxed{}; correct = answersEqual after normalisation;
//       format_ok = a \boxed{} is there and the output is not degenerate.
// `correct` allows numeric tolerance (3 vs 3.0, 3/4 vs 0.75, 50% vs 0.5); `correct_strict` does
// not: the exact match of the seeds' correctness reward, or equal normalised text for boxed.
// Summaries count one or the other (AnswerMatch).
import { answersEqual, EXACT_MATCH_REWARD, splitThinking, explainCorrectness, explainFormat, extractTagged, isDegenerate, lastBoxed, normalizeAnswer, type RewardTerm, type TermScore } from '../rewards';
import { SOLUTION_TAG } from '../rewards/format';
import type { ThinkingMode } from '../model/processor/chat';
import type { SamplingOptions } from '../rl/policy';

export type AnswerFormat = 'solution' | 'boxed';
/** 'numeric' (default): numeric tolerance counts as correct; 'strict': exact answers only. */
export type AnswerMatch = 'strict' | 'numeric';
/** A row's images by the pixels of its largest: none, small (< 256²), medium (< 768²), large. */
export type ImageSizeClass = 'none' | 'small' | 'medium' | 'large';

export interface EvalRecord {
  /** The dataset row's id. */
  id: string;
  /** Which of the row's samples (0 when one completion per row). */
  sample: number;
  /** The extracted answer, or null when the completion has none in the expected form. */
  prediction: string | null;
  gold: string;
  correct: boolean;
  /** Correct without numeric tolerance (absent in older files: taken as `correct`). */
  correct_strict?: boolean;
  format_ok: boolean;
  /** The row's task or category column (meta.task, else meta.category), null without one. */
  task?: string | null;
  /** The row's image size class (absent in older files). */
  image_size?: ImageSizeClass;
  /** Weighted sum of the terms. */
  reward: number;
  terms: TermScore[];
  completion: string;
  /** Completion length in tokens. */
  tokens: number;
  /** False when cut at maxNewTokens. */
  terminated: boolean;
}

export interface Judgement {
  prediction: string | null;
  correct: boolean;
  correct_strict: boolean;
  format_ok: boolean;
}

/** `thinking`: the prompt opened a <think> block; the answer after the block is judged (src/rewards/thinking.ts). */
export function judge(full: string, gold: string, format: AnswerFormat, thinking = false): Judgement {
  const completion = splitThinking(full, thinking).answer;
  if (format === 'boxed') {
    const prediction = lastBoxed(completion);
    const goldValue = lastBoxed(gold) ?? gold;
    const text = (s: string) => normalizeAnswer(s).text.toLowerCase();
    const strict = prediction !== null && text(prediction) !== '' && text(prediction) === text(goldValue);
    return { prediction, correct: prediction !== null && answersEqual(prediction, goldValue), correct_strict: strict, format_ok: prediction !== null && !isDegenerate(completion) };
  }
  const blocks = extractTagged(completion, SOLUTION_TAG);
  const score = explainCorrectness(completion, gold).value;
  return {
    prediction: blocks.length === 1 ? blocks[0].replace(/\n/g, '').trim() : null,
    correct: score > 0,
    correct_strict: score === EXACT_MATCH_REWARD,
    format_ok: explainFormat(completion).value === 2,
  };
}

export interface EvalSummary {
  /** Records (row × sample). */
  samples: number;
  /** Distinct rows. */
  rows: number;
  /** Share of records with correct = true (0 when there are none). */
  accuracy: number;
  /** Share of records with format_ok = true. */
  formatCompliance: number;
  /** Share of rows with at least one correct sample (pass@k for k samples a row; = accuracy for one). */
  anyCorrect: number;
  meanReward: number;
  /** Mean value (unweighted) of each term, by term name. */
  termMeans: Record<string, number>;
  meanTokens: number;
  /** Share of records cut at maxNewTokens. */
  truncated: number;
}

/** Whether a record counts as correct under `match`. */
export function isCorrect(r: EvalRecord, match: AnswerMatch = 'numeric'): boolean {
  return match === 'strict' ? (r.correct_strict ?? r.correct) : r.correct;
}

export function summarize(records: readonly EvalRecord[], match: AnswerMatch = 'numeric'): EvalSummary {
  const n = records.length;
  const mean = (f: (r: EvalRecord) => number) => (n === 0 ? 0 : records.reduce((s, r) => s + f(r), 0) / n);
  const byRow = new Map<string, boolean>();
  const termSums = new Map<string, { sum: number; count: number }>();
  for (const r of records) {
    byRow.set(r.id, (byRow.get(r.id) ?? false) || isCorrect(r, match));
    for (const t of r.terms) {
      const s = termSums.get(t.name) ?? { sum: 0, count: 0 };
      s.sum += t.value;
      s.count++;
      termSums.set(t.name, s);
    }
  }
  return {
    samples: n,
    rows: byRow.size,
    accuracy: mean((r) => +isCorrect(r, match)),
    formatCompliance: mean((r) => +r.format_ok),
    anyCorrect: byRow.size === 0 ? 0 : [...byRow.values()].filter(Boolean).length / byRow.size,
    meanReward: mean((r) => r.reward),
    termMeans: Object.fromEntries([...termSums].map(([name, s]) => [name, s.sum / s.count])),
    meanTokens: mean((r) => r.tokens),
    truncated: mean((r) => +!r.terminated),
  };
}

/** How a run was made, stored with it so that two runs can be told apart. */
export interface EvalSettings {
  answerFormat: AnswerFormat;
  /** Which correctness the run's summary counts (absent in older files: 'numeric'). */
  answerMatch?: AnswerMatch;
  /** temperature 0 is greedy. */
  sampling: SamplingOptions;
  samplesPerRow: number;
  terms: RewardTerm[];
  /** The chat template's thinking switch the prompts were rendered with (absent: 'auto'; the budget is sampling.thinkingBudget). */
  thinkingMode?: ThinkingMode;
}

export interface EvalRun {
  id: string;
  /** "baseline", "after 200 steps"... */
  label: string;
  /** The adapter evaluated (its store name), or null for the base model. */
  adapter: string | null;
  /** Unix milliseconds. */
  createdAt: number;
  /** 'cancelled' runs hold the records finished before the cancel. */
  status: 'complete' | 'cancelled';
  settings: EvalSettings;
  records: EvalRecord[];
  summary: EvalSummary;
}

export const EVAL_JSON_FORMAT = 'vlrl-eval';
export const EVAL_JSON_VERSION = 1;

/** Fields an export carries beside the run that a load recomputes instead of reading (src/eval/groups.ts evalExportJson). */
const DERIVED_FIELDS = ['breakdown'] as const;

/** The export file: the run as stored, tagged with a format name and version; `derived` (the breakdown) after it. */
export function evalRunToJson(run: EvalRun, derived: Partial<Record<(typeof DERIVED_FIELDS)[number], unknown>> = {}): string {
  return JSON.stringify({ format: EVAL_JSON_FORMAT, version: EVAL_JSON_VERSION, ...run, ...derived }, null, 2);
}

/** Read an exported run back (the eval panel's "load records"); checks the tag and the fields it relies on. */
export function evalRunFromJson(text: string): EvalRun {
  const data = JSON.parse(text) as Partial<EvalRun> & { format?: unknown; version?: unknown };
  if (data.format !== EVAL_JSON_FORMAT || data.version !== EVAL_JSON_VERSION) {
    throw new Error(`not a ${EVAL_JSON_FORMAT} v${EVAL_JSON_VERSION} file (format ${JSON.stringify(data.format)}, version ${JSON.stringify(data.version)})`);
  }
  if (typeof data.id !== 'string' || !Array.isArray(data.records) || typeof data.settings !== 'object' || data.settings === null) {
    throw new Error('eval file lacks id, settings or records');
  }
  const run = { ...data } as Record<string, unknown>;
  delete run.format;
  delete run.version;
  for (const f of DERIVED_FIELDS) delete run[f];
  return { ...(run as unknown as EvalRun), summary: summarize(data.records, data.settings.answerMatch ?? 'numeric') };
}
