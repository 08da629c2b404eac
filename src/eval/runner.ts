// The eval runner: held-out rows through Policy.generate (greedy at temperature 0, or sampled),
// each completion scored by the reward terms and judged for correctness and format, row by row
// so that progress shows and a cancel takes effect between rows.
import type { DatasetRow } from '../data/types';
import type { ThinkingMode } from '../model/processor/chat';
import { scoreSamples, validateTerms, type CustomRewardEvaluator, type RewardTerm } from '../rewards';
import type { Policy, PreparedPrompt, SamplingOptions } from '../rl/policy';
import { imageSizeClass, rowTask } from './groups';
import { judge, summarize, type AnswerFormat, type AnswerMatch, type EvalRecord, type EvalRun, type EvalSummary } from './records';

export interface EvalProgress {
  /** Rows finished and in all. */
  done: number;
  total: number;
  /** The records of the row just finished. */
  records: EvalRecord[];
  /** Over every record so far. */
  summary: EvalSummary;
}

export interface EvalOptions {
  policy: Policy;
  rows: readonly DatasetRow[];
  /** Row to model input (prompt builder + processor); the runner stays free of tokenizer and images. A prompt that opened a <think> block (`thinking`) has the answer after </think> judged and scored. */
  prepare: (row: DatasetRow) => PreparedPrompt | Promise<PreparedPrompt>;
  terms: readonly RewardTerm[];
  /** Needed when a term is a custom reward. */
  sandbox?: CustomRewardEvaluator;
  answerFormat: AnswerFormat;
  /** Strict answers or numeric tolerance in the run's summary (default 'numeric'); records keep both. */
  answerMatch?: AnswerMatch;
  /** temperature 0 gives greedy decoding; the seed makes sampled runs repeatable. */
  sampling: SamplingOptions;
  /** The thinking switch `prepare` renders prompts with, recorded in the run's settings (default 'auto'). */
  thinkingMode?: ThinkingMode;
  /** Completions per row (default 1; more only makes sense sampled). */
  samplesPerRow?: number;
  label?: string;
  adapter?: string | null;
  /** Default: a time-based id. */
  id?: string;
  onProgress?: (p: EvalProgress) => void;
  /** Aborting stops after the row in flight; the run comes back with status 'cancelled'. */
  signal?: AbortSignal;
  now?: () => number;
}

export async function runEval(options: EvalOptions): Promise<EvalRun> {
  const { policy, rows, terms, answerFormat, sampling } = options;
  const answerMatch = options.answerMatch ?? 'numeric';
  const samplesPerRow = options.samplesPerRow ?? 1;
  if (!Number.isInteger(samplesPerRow) || samplesPerRow < 1) throw new Error(`eval: samplesPerRow must be a positive integer, got ${samplesPerRow}`);
  validateTerms(terms);
  const ids = new Set<string>();
  for (const row of rows) {
    if (ids.has(row.id)) throw new Error(`eval: row id '${row.id}' appears twice; records are matched by id`);
    ids.add(row.id);
  }
  const now = options.now ?? Date.now;
  const createdAt = now();
  const records: EvalRecord[] = [];
  let status: EvalRun['status'] = 'complete';
  for (const [i, row] of rows.entries()) {
    if (options.signal?.aborted) {
      status = 'cancelled';
      break;
    }
    const prompt = await options.prepare(row);
    // Each row its own seed (base + row index): a run repeats exactly, and rows do not share draws.
    const completions = await policy.generate(prompt, samplesPerRow, { ...sampling, seed: (sampling.seed + i) >>> 0 });
    if (completions.length !== samplesPerRow) throw new Error(`eval: the policy returned ${completions.length} completions for row '${row.id}', asked for ${samplesPerRow}`);
    const scores = await scoreSamples(
      terms,
      completions.map((c, k) => ({ completion: c.text, answer: row.answer, prompt: row.question, index: k, thinking: prompt.thinking })),
      options.sandbox,
    );
    const rowRecords = completions.map((c, k): EvalRecord => {
      const { prediction, correct, correct_strict, format_ok } = judge(c.text, row.answer, answerFormat, prompt.thinking);
      return {
        id: row.id,
        sample: k,
        prediction,
        gold: row.answer,
        correct,
        correct_strict,
        format_ok,
        task: rowTask(row),
        // Rows kept encoded (the app's) are classed by the sizes their headers declare.
        image_size: imageSizeClass(row.encoded?.length ? row.encoded : row.images),
        reward: scores[k].total,
        terms: scores[k].terms,
        completion: c.text,
        tokens: c.tokens.length,
        terminated: c.terminated,
      };
    });
    records.push(...rowRecords);
    options.onProgress?.({ done: i + 1, total: rows.length, records: rowRecords, summary: summarize(records, answerMatch) });
  }
  return {
    id: options.id ?? `eval-${createdAt}`,
    label: options.label ?? '',
    adapter: options.adapter ?? null,
    createdAt,
    status,
    settings: { answerFormat, answerMatch, sampling: { ...sampling }, samplesPerRow, terms: terms.map((t) => ({ ...t })), ...(options.thinkingMode && options.thinkingMode !== 'auto' ? { thinkingMode: options.thinkingMode } : {}) },
    records,
    summary: summarize(records, answerMatch),
  };
}
