// The eval panel's breakdown and JSON export (src/eval/groups.ts breakdown, evalExportJson): per
// task/category and per image size class (smallest first), accuracy, format compliance and mean
// reward under the chosen answer match, computed here by hand from the records; the export holds
// the summary and the breakdown under that match, and a load recounts the same summary and drops
// the breakdown (it is derived).
import { describe, expect, it } from 'vitest';
import { breakdown, compareByGroup, evalExportJson, summarizeBy } from '../../src/eval/groups';
import { EVAL_JSON_FORMAT, evalRunFromJson, summarize, type EvalRecord, type EvalRun } from '../../src/eval/records';

function record(id: string, task: string | null, size: EvalRecord['image_size'], correct: boolean, strict: boolean, format: boolean, reward: number): EvalRecord {
  return { id, sample: 0, prediction: 'x', gold: 'x', correct, correct_strict: strict, format_ok: format, task, image_size: size, reward, terms: [], completion: '', tokens: 3, terminated: true };
}

const RECORDS: EvalRecord[] = [
  record('a', 'count', 'large', true, true, true, 2),
  record('b', 'count', 'small', true, false, true, 1),
  record('c', 'chart', 'medium', false, false, false, 0),
  record('d', 'count', 'small', false, false, true, 0.5),
  record('e', null, 'none', true, true, false, 1.5),
];

function run(records: EvalRecord[], label: string): EvalRun {
  return {
    id: label,
    label,
    adapter: null,
    createdAt: 1,
    status: 'complete',
    settings: { answerFormat: 'solution', answerMatch: 'numeric', sampling: { temperature: 0, topP: 1, topK: 0, maxNewTokens: 8, seed: 0 }, samplesPerRow: 1, terms: [] },
    records,
    summary: summarize(records),
  };
}

describe('eval breakdown', () => {
  it('gives each task and image size class its accuracy, format compliance and mean reward under either match', () => {
    const numeric = breakdown(RECORDS, 'numeric');
    expect(numeric.answer_match).toBe('numeric');
    expect(numeric.by_task).toEqual([
      { group: 'count', samples: 3, accuracy: 2 / 3, format_compliance: 1, mean_reward: 3.5 / 3 },
      { group: 'chart', samples: 1, accuracy: 0, format_compliance: 0, mean_reward: 0 },
      { group: '(none)', samples: 1, accuracy: 1, format_compliance: 0, mean_reward: 1.5 },
    ]);
    // Size classes smallest first, whatever order the rows came in.
    expect(numeric.by_image_size.map((g) => [g.group, g.samples, g.accuracy, g.mean_reward])).toEqual([
      ['none', 1, 1, 1.5],
      ['small', 2, 0.5, 0.75],
      ['medium', 1, 0, 0],
      ['large', 1, 1, 2],
    ]);
    const strict = breakdown(RECORDS, 'strict');
    expect(strict.by_task[0].accuracy).toBe(1 / 3);
    expect(strict.by_image_size.find((g) => g.group === 'small')!.accuracy).toBe(0);
    // Format and reward do not depend on the match.
    expect(strict.by_task.map((g) => g.format_compliance)).toEqual(numeric.by_task.map((g) => g.format_compliance));
    expect([...summarizeBy(RECORDS, 'image_size').keys()]).toEqual(['none', 'small', 'medium', 'large']);
  });

  it('orders the before/after diff by size class too', () => {
    const after = RECORDS.map((r) => ({ ...r, correct_strict: r.correct }));
    expect(compareByGroup(run(RECORDS, 'b'), run(after, 'a'), 'image_size', 'strict').map((g) => [g.group, g.accuracy.delta])).toEqual([
      ['none', 0],
      ['small', 0.5],
      ['medium', 0],
      ['large', 0],
    ]);
  });

  it('exports the summary and the breakdown under the chosen match; a load recounts the same and drops the breakdown', () => {
    const r = run(RECORDS, 'base');
    const json = JSON.parse(evalExportJson(r, 'strict')) as EvalRun & { format: string; breakdown: ReturnType<typeof breakdown> };
    expect(json.format).toBe(EVAL_JSON_FORMAT);
    expect(json.settings.answerMatch).toBe('strict');
    expect(json.summary.accuracy).toBe(2 / 5);
    expect(json.breakdown).toEqual(breakdown(RECORDS, 'strict'));
    const loaded = evalRunFromJson(JSON.stringify(json));
    expect('breakdown' in loaded).toBe(false);
    expect(loaded.summary).toEqual(summarize(RECORDS, 'strict'));
    expect(JSON.parse(evalExportJson(r, 'numeric')).summary.accuracy).toBe(3 / 5);
  });
});
