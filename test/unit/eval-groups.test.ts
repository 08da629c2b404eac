// Eval by task and image size class, strict vs numeric-tolerance answers, and the per-group
// before/after difference (src/eval/groups.ts), through runEval with a scripted policy.
import { describe, expect, it } from 'vitest';
import { compareByGroup, imageSizeClass, rowTask, summarizeBy } from '../../src/eval/groups';
import { compareRuns } from '../../src/eval/diff';
import { evalRunFromJson, evalRunToJson, judge, summarize } from '../../src/eval/records';
import { runEval } from '../../src/eval/runner';
import type { DatasetRow, RgbaImage } from '../../src/data/types';
import { presetTerms } from '../../src/rewards';
import type { Completion, Policy, PreparedPrompt, SamplingOptions } from '../../src/rl/policy';

const image = (width: number, height: number): RgbaImage => ({ width, height, data: new Uint8ClampedArray(0) });
const tagged = (s: string) => `<REASONING>r</REASONING>\n<SOLUTION>${s}</SOLUTION>`;

class Scripted implements Policy {
  readonly lora = [];
  constructor(private readonly texts: Record<string, string>) {}
  async generate(prompt: PreparedPrompt, n: number, _o: SamplingOptions): Promise<Completion[]> {
    return Array.from({ length: n }, () => ({ text: this.texts[prompt.id], tokens: [1, 2], samplingLogps: [], terminated: true }));
  }
  forward(): never {
    throw new Error('unused');
  }
  backward(): never {
    throw new Error('unused');
  }
}

const ROWS: DatasetRow[] = [
  { id: 'a', images: [image(100, 100)], question: 'q', answer: '3', meta: { task: 'count' } },
  { id: 'b', images: [image(300, 300)], question: 'q', answer: '0.75', meta: { task: 'count' } },
  { id: 'c', images: [image(1000, 800), image(10, 10)], question: 'q', answer: '5', meta: { category: 'chart' } },
  { id: 'd', images: [], question: 'q', answer: '7', meta: {} },
];
const GREEDY: SamplingOptions = { temperature: 0, topP: 1, topK: 0, maxNewTokens: 8, seed: 1 };

async function run(texts: Record<string, string>, answerMatch?: 'strict' | 'numeric') {
  return runEval({
    policy: new Scripted(texts),
    rows: ROWS,
    prepare: (row) => ({ id: row.id }) as unknown as PreparedPrompt,
    terms: presetTerms('seeds'),
    answerFormat: 'solution',
    answerMatch,
    sampling: GREEDY,
    now: () => 5,
  });
}

describe('eval by group', () => {
  it('classifies image sizes by the largest image and reads task or category', () => {
    expect([imageSizeClass([]), imageSizeClass([image(255, 256)]), imageSizeClass([image(256, 256)]), imageSizeClass([image(10, 10), image(768, 768)])]).toEqual(['none', 'small', 'medium', 'large']);
    expect([rowTask(ROWS[0]), rowTask(ROWS[2]), rowTask(ROWS[3]), rowTask({ meta: { task: 4 } })]).toEqual(['count', 'chart', null, '4']);
  });

  it('judges strict and numeric-tolerance answers', () => {
    expect(judge(tagged('3'), '3', 'solution')).toMatchObject({ correct: true, correct_strict: true });
    expect(judge(tagged('3.0'), '3', 'solution')).toMatchObject({ correct: true, correct_strict: false });
    expect(judge('\\boxed{3/4}', '0.75', 'boxed')).toMatchObject({ correct: true, correct_strict: false });
    expect(judge('\\boxed{\\frac{3}{4}}', '\\dfrac{3}{4}', 'boxed')).toMatchObject({ correct: true, correct_strict: true });
    // A thinking model's completion is judged after its block; an open block has no answer.
    expect(judge('\\boxed{4}? no</think>\\boxed{3}', '3', 'boxed')).toMatchObject({ prediction: '3', correct: true });
    expect(judge('\\boxed{3}', '3', 'boxed', true)).toMatchObject({ prediction: null, correct: false });
  });

  it('summarises by task and by image size, under either match, and diffs groups before/after', async () => {
    // b answers numerically (3/4 for 0.75); c wrong before, right after; d right before, wrong after.
    const before = await run({ a: tagged('3'), b: tagged('3/4'), c: tagged('4'), d: tagged('7') });
    const after = await run({ a: tagged('3'), b: tagged('0.75'), c: tagged('5'), d: tagged('8') }, 'strict');
    expect(before.records.map((r) => [r.task, r.image_size])).toEqual([['count', 'small'], ['count', 'medium'], ['chart', 'large'], [null, 'none']]);
    const byTask = summarizeBy(before.records, 'task');
    expect([...byTask.keys()]).toEqual(['count', 'chart', '(none)']);
    expect(byTask.get('count')!.accuracy).toBe(1);
    expect(summarizeBy(before.records, 'task', 'strict').get('count')!.accuracy).toBe(0.5);
    expect(summarizeBy(before.records, 'image_size').get('large')!.accuracy).toBe(0);
    expect(before.summary.accuracy).toBe(0.75);
    expect(after.summary.accuracy).toBe(0.75);
    expect(after.settings.answerMatch).toBe('strict');
    // The strict setting survives an export and load.
    expect(evalRunFromJson(evalRunToJson(after)).summary.accuracy).toBe(summarize(after.records, 'strict').accuracy);

    const strict = compareByGroup(before, after, 'task', 'strict');
    expect(strict.map((g) => [g.group, g.accuracy.before, g.accuracy.after])).toEqual([['count', 0.5, 1], ['chart', 0, 1], ['(none)', 1, 0]]);
    const numeric = compareByGroup(before, after, 'image_size');
    expect(numeric.find((g) => g.group === 'medium')!.accuracy.delta).toBe(0);
    expect(numeric.find((g) => g.group === 'large')!.accuracy.delta).toBe(1);
    expect(numeric.find((g) => g.group === 'none')!.meanReward.delta).toBeLessThan(0);
    // compareRuns under strict: b counts as fixed; under numeric it was already right.
    expect(compareRuns(before, after, 'strict').counts).toEqual({ fixed: 2, broken: 1, unchanged: 1 });
    expect(compareRuns(before, after).counts).toEqual({ fixed: 1, broken: 1, unchanged: 2 });
    // A group one run lacks: NaN on that side.
    const lone = compareByGroup(before, { ...after, records: after.records.filter((r) => r.task !== 'chart') }, 'task');
    expect(Number.isNaN(lone.find((g) => g.group === 'chart')!.accuracy.after)).toBe(true);
  });
});
