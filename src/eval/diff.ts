// Before/after comparison of two eval runs: a table of the aggregates and a per-sample diff.
// Samples are matched by (row id, sample index); a sample is 'fixed' when it went from wrong to
// correct, 'broken' from correct to wrong, 'unchanged' otherwise (both right or both wrong).
// Samples only one run has are listed apart, never counted as a change.
import { isCorrect, summarize, type AnswerMatch, type EvalRecord, type EvalRun, type EvalSummary } from './records';

export type Change = 'fixed' | 'broken' | 'unchanged';

export interface SampleDiff {
  id: string;
  sample: number;
  change: Change;
  before: EvalRecord;
  after: EvalRecord;
}

export interface MetricRow {
  metric: string;
  before: number;
  after: number;
  /** after − before */
  delta: number;
}

export interface EvalComparison {
  table: MetricRow[];
  counts: Record<Change, number>;
  samples: SampleDiff[];
  /** Keys "id#sample" present in one run only. */
  onlyBefore: string[];
  onlyAfter: string[];
}

export function classify(before: boolean, after: boolean): Change {
  if (before === after) return 'unchanged';
  return after ? 'fixed' : 'broken';
}

const key = (r: EvalRecord) => `${r.id}#${r.sample}`;

function metricRows(b: EvalSummary, a: EvalSummary): MetricRow[] {
  const row = (metric: string, before: number, after: number): MetricRow => ({ metric, before, after, delta: after - before });
  const rows = [
    row('accuracy', b.accuracy, a.accuracy),
    row('format compliance', b.formatCompliance, a.formatCompliance),
    row('rows with a correct sample', b.anyCorrect, a.anyCorrect),
    row('mean reward', b.meanReward, a.meanReward),
  ];
  // Terms of either run; a term one run lacks is left out (no number to compare with).
  for (const name of Object.keys(b.termMeans)) {
    if (name in a.termMeans) rows.push(row(`reward: ${name}`, b.termMeans[name], a.termMeans[name]));
  }
  rows.push(row('mean completion tokens', b.meanTokens, a.meanTokens), row('truncated', b.truncated, a.truncated));
  return rows;
}

/** `match` decides what counts as correct (default 'numeric', as the runs were summarised before it existed). */
export function compareRuns(before: EvalRun, after: EvalRun, match: AnswerMatch = 'numeric'): EvalComparison {
  const afterByKey = new Map(after.records.map((r) => [key(r), r]));
  const beforeKeys = new Set(before.records.map(key));
  const counts: Record<Change, number> = { fixed: 0, broken: 0, unchanged: 0 };
  const samples: SampleDiff[] = [];
  const onlyBefore: string[] = [];
  for (const b of before.records) {
    const a = afterByKey.get(key(b));
    if (!a) {
      onlyBefore.push(key(b));
      continue;
    }
    const change = classify(isCorrect(b, match), isCorrect(a, match));
    counts[change]++;
    samples.push({ id: b.id, sample: b.sample, change, before: b, after: a });
  }
  return {
    table: metricRows(summarize(before.records, match), summarize(after.records, match)),
    counts,
    samples,
    onlyBefore,
    onlyAfter: after.records.map(key).filter((k) => !beforeKeys.has(k)),
  };
}
