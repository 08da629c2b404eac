import { describe, expect, it } from 'vitest';
import { classify, compareRuns } from '../../src/eval/diff';
import { EVAL_JSON_FORMAT, evalRunFromJson, evalRunToJson, judge, summarize, type EvalRecord, type EvalRun } from '../../src/eval/records';
import { runEval, type EvalOptions, type EvalProgress } from '../../src/eval/runner';
import type { DatasetRow } from '../../src/data/types';
import { presetTerms } from '../../src/rewards';
import type { Completion, Policy, PreparedPrompt, SamplingOptions } from '../../src/rl/policy';

/** A policy that answers each prompt (by id) with fixed texts, in order, and records its calls. */
class ScriptedPolicy implements Policy {
  readonly lora = [];
  readonly calls: { id: string; n: number; opts: SamplingOptions }[] = [];
  constructor(private readonly script: Record<string, { text: string; terminated?: boolean }[]>) {}
  async generate(prompt: PreparedPrompt, numSamples: number, opts: SamplingOptions): Promise<Completion[]> {
    this.calls.push({ id: prompt.id, n: numSamples, opts });
    return this.script[prompt.id].slice(0, numSamples).map(({ text, terminated = true }) => ({
      text,
      tokens: Array.from({ length: text.length }, (_, i) => i),
      samplingLogps: [],
      terminated,
    }));
  }
  forward(): never {
    throw new Error('not used by eval');
  }
  backward(): never {
    throw new Error('not used by eval');
  }
}

const row = (id: string, answer: string): DatasetRow => ({ id, images: [], question: `question ${id}`, answer, meta: {} });
const ROWS = [row('r1', '3'), row('r2', '0.75'), row('r3', '5'), row('r4', '7')];
const tagged = (reasoning: string, solution: string) => `<REASONING>${reasoning}</REASONING>\n<SOLUTION>${solution}</SOLUTION>`;
const SCRIPT = {
  r1: [{ text: tagged('three dots', '3') }, { text: tagged('maybe', '4') }],
  r2: [{ text: tagged('a fraction', '3/4') }, { text: tagged('a fraction', '0.75') }],
  r3: [{ text: '<SOLUTION>4</SOLUTION>' }, { text: tagged('five', '5') }],
  r4: [{ text: 'The answer is 7 and then it went on and on', terminated: false }, { text: 'no idea', terminated: false }],
};
const GREEDY: SamplingOptions = { temperature: 0, topP: 1, topK: 0, maxNewTokens: 64, seed: 100 };
const prepare = (r: DatasetRow): PreparedPrompt => ({ id: r.id, inputIds: new Int32Array([1, 2, 3]), images: [] });

function options(policy: Policy, extra: Partial<EvalOptions> = {}): EvalOptions {
  return { policy, rows: ROWS, prepare, terms: presetTerms('seeds'), answerFormat: 'solution', sampling: GREEDY, now: () => 1234, ...extra };
}

describe('judging one completion', () => {
  it('solution format: prediction, numeric match, format', () => {
    expect(judge(tagged('x', ' 3/4\n'), '0.75', 'solution')).toEqual({ prediction: '3/4', correct: true, correct_strict: false, format_ok: true });
    expect(judge('<SOLUTION>4</SOLUTION>', '4', 'solution')).toEqual({ prediction: '4', correct: true, correct_strict: true, format_ok: false });
    expect(judge('<SOLUTION>1</SOLUTION><SOLUTION>2</SOLUTION>', '1', 'solution')).toEqual({ prediction: null, correct: false, correct_strict: false, format_ok: false });
    expect(judge(tagged('x', '12') + ' addCriterion'.repeat(8), '12', 'solution')).toMatchObject({ correct: true, format_ok: false });
  });

  it('boxed format: last \\boxed{}, normalised comparison, boxed gold', () => {
    expect(judge('first \\boxed{2} then \\boxed{\\frac{1}{2}}', '0.5', 'boxed')).toEqual({ prediction: '\\frac{1}{2}', correct: true, correct_strict: false, format_ok: true });
    expect(judge('it is 0.5', '0.5', 'boxed')).toEqual({ prediction: null, correct: false, correct_strict: false, format_ok: false });
    expect(judge('\\boxed{3}', '\\boxed{3}', 'boxed')).toMatchObject({ correct: true });
    expect(judge('\\boxed{4}', '3', 'boxed')).toEqual({ prediction: '4', correct: false, correct_strict: false, format_ok: true });
  });
});

describe('eval runner', () => {
  it('records and aggregates on scripted greedy completions', async () => {
    const policy = new ScriptedPolicy(SCRIPT);
    const progress: EvalProgress[] = [];
    const run = await runEval(options(policy, { label: 'baseline', onProgress: (p) => progress.push(p) }));
    expect(run.status).toBe('complete');
    expect(run.records.map((r) => [r.id, r.prediction, r.correct, r.format_ok])).toEqual([
      ['r1', '3', true, true],
      ['r2', '3/4', true, true],
      ['r3', '4', false, false],
      ['r4', null, false, false],
    ]);
    // Seeds' preset: 0.3·format + 1.0·correctness; format 2/2/1/0, correctness 2/1.5/0/0.
    expect(run.records.map((r) => r.reward)).toEqual([0.3 * 2 + 2, 0.3 * 2 + 1.5, 0.3, 0].map((v) => expect.closeTo(v, 12)));
    expect(run.records[1].terms.map((t) => [t.name, t.value, t.weight])).toEqual([
      ['format', 2, 0.3],
      ['correctness', 1.5, 1],
    ]);
    expect(run.records[3]).toMatchObject({ gold: '7', terminated: false, tokens: SCRIPT.r4[0].text.length, completion: SCRIPT.r4[0].text, sample: 0 });
    expect(run.summary).toEqual({
      samples: 4,
      rows: 4,
      accuracy: 0.5,
      formatCompliance: 0.5,
      anyCorrect: 0.5,
      meanReward: expect.closeTo((2.6 + 2.1 + 0.3) / 4, 12),
      termMeans: { format: 1.25, correctness: 0.875 },
      meanTokens: expect.closeTo(ROWS.reduce((s, r) => s + SCRIPT[r.id as keyof typeof SCRIPT][0].text.length, 0) / 4, 12),
      truncated: 0.25,
    });
    expect(progress.map((p) => [p.done, p.total, p.records.length])).toEqual([1, 2, 3, 4].map((d) => [d, 4, 1]));
    expect(progress[1].summary.accuracy).toBe(1);
    expect(policy.calls.map((c) => [c.id, c.n, c.opts.temperature, c.opts.seed])).toEqual(ROWS.map((r, i) => [r.id, 1, 0, 100 + i]));
    expect(run).toMatchObject({ id: 'eval-1234', label: 'baseline', adapter: null, createdAt: 1234 });
    expect(run.settings).toEqual({ answerFormat: 'solution', answerMatch: 'numeric', sampling: GREEDY, samplesPerRow: 1, terms: presetTerms('seeds') });
  });

  it('several samples a row: sample indices, pass@k', async () => {
    const run = await runEval(options(new ScriptedPolicy(SCRIPT), { samplesPerRow: 2, sampling: { ...GREEDY, temperature: 1 } }));
    expect(run.records.map((r) => `${r.id}#${r.sample}:${+r.correct}`)).toEqual(['r1#0:1', 'r1#1:0', 'r2#0:1', 'r2#1:1', 'r3#0:0', 'r3#1:1', 'r4#0:0', 'r4#1:0']);
    expect(run.summary).toMatchObject({ samples: 8, rows: 4, accuracy: 0.5, anyCorrect: 0.75, truncated: 0.25 });
  });

  it('cancel stops between rows and keeps what was done', async () => {
    const ac = new AbortController();
    const run = await runEval(options(new ScriptedPolicy(SCRIPT), { signal: ac.signal, onProgress: (p) => p.done === 2 && ac.abort() }));
    expect(run.status).toBe('cancelled');
    expect(run.records.map((r) => r.id)).toEqual(['r1', 'r2']);
    expect(run.summary.rows).toBe(2);
  });

  it('refuses duplicate row ids, bad terms, and a policy that returns the wrong count', async () => {
    await expect(runEval(options(new ScriptedPolicy(SCRIPT), { rows: [ROWS[0], ROWS[0]] }))).rejects.toThrow(/row id 'r1' appears twice/);
    await expect(runEval(options(new ScriptedPolicy(SCRIPT), { terms: [] }))).rejects.toThrow(/at least one reward term/);
    await expect(runEval(options(new ScriptedPolicy(SCRIPT), { samplesPerRow: 3 }))).rejects.toThrow(/returned 2 completions for row 'r1', asked for 3/);
  });
});

function record(id: string, correct: boolean, sample = 0): EvalRecord {
  return { id, sample, prediction: correct ? '1' : '2', gold: '1', correct, format_ok: true, reward: +correct, terms: [{ name: 'correctness', weight: 1, value: +correct, weighted: +correct }], completion: '', tokens: 10, terminated: true };
}

function runOf(records: EvalRecord[], label: string): EvalRun {
  const settings = { answerFormat: 'solution' as const, sampling: GREEDY, samplesPerRow: 1, terms: presetTerms('seeds') };
  return { id: label, label, adapter: null, createdAt: 0, status: 'complete', settings, records, summary: summarize(records) };
}

describe('before/after diff', () => {
  it('classifies every pair', () => {
    expect([classify(false, true), classify(true, false), classify(true, true), classify(false, false)]).toEqual(['fixed', 'broken', 'unchanged', 'unchanged']);
  });

  it('counts, per-sample changes, the table, and unmatched samples', () => {
    const before = runOf([record('a', false), record('b', true), record('c', true), record('d', false), record('gone', true)], 'before');
    const after = runOf([record('a', true), record('b', false), record('c', true), record('d', false), record('new', false)], 'after');
    const cmp = compareRuns(before, after);
    expect(cmp.counts).toEqual({ fixed: 1, broken: 1, unchanged: 2 });
    expect(cmp.samples.map((s) => [s.id, s.change])).toEqual([
      ['a', 'fixed'],
      ['b', 'broken'],
      ['c', 'unchanged'],
      ['d', 'unchanged'],
    ]);
    expect(cmp.samples[0].before.correct).toBe(false);
    expect(cmp.samples[0].after.correct).toBe(true);
    expect(cmp.onlyBefore).toEqual(['gone#0']);
    expect(cmp.onlyAfter).toEqual(['new#0']);
    const acc = cmp.table.find((r) => r.metric === 'accuracy')!;
    expect(acc).toEqual({ metric: 'accuracy', before: 0.6, after: 0.4, delta: expect.closeTo(-0.2, 12) });
    expect(cmp.table.map((r) => r.metric)).toEqual([
      'accuracy',
      'format compliance',
      'rows with a correct sample',
      'mean reward',
      'reward: correctness',
      'mean completion tokens',
      'truncated',
    ]);
  });

  it('matches samples by row id and sample index', () => {
    const before = runOf([record('a', false, 0), record('a', true, 1)], 'before');
    const after = runOf([record('a', true, 1), record('a', true, 0)], 'after');
    expect(compareRuns(before, after).samples.map((s) => `${s.sample}:${s.change}`)).toEqual(['0:fixed', '1:unchanged']);
  });
});

describe('JSON export', () => {
  it('has the documented shape and reads back', async () => {
    const run = await runEval(options(new ScriptedPolicy(SCRIPT), { label: 'after', adapter: 'my-adapter' }));
    const text = evalRunToJson(run);
    const json = JSON.parse(text);
    expect(Object.keys(json)).toEqual(['format', 'version', 'id', 'label', 'adapter', 'createdAt', 'status', 'settings', 'records', 'summary']);
    expect([json.format, json.version, json.adapter]).toEqual([EVAL_JSON_FORMAT, 1, 'my-adapter']);
    expect(Object.keys(json.records[0])).toEqual(['id', 'sample', 'prediction', 'gold', 'correct', 'correct_strict', 'format_ok', 'task', 'image_size', 'reward', 'terms', 'completion', 'tokens', 'terminated']);
    expect(json.records[3].prediction).toBeNull();
    expect(json.records[0].terms[0]).toMatchObject({ name: 'format', weight: 0.3, value: 2, weighted: 0.6 });
    expect(evalRunFromJson(text)).toEqual(run);
    expect(() => evalRunFromJson('{"format":"other","version":1}')).toThrow(/not a vlrl-eval v1 file/);
    expect(() => evalRunFromJson(JSON.stringify({ format: EVAL_JSON_FORMAT, version: 1, id: 'x' }))).toThrow(/lacks id, settings or records/);
  });
});
