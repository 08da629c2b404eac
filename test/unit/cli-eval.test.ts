// `eval`: the app's eval run headless on a tiny model (the demo's held-out rows), before and with an
// adapter, written in the eval panel's export format; `eval --compare` on two such files.
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { compareRuns } from '../../src/eval/diff';
import { evalRunFromJson, evalRunToJson, judge, summarize, type EvalRecord, type EvalRun } from '../../src/eval/records';
import { presetTerms, scoreBuiltins } from '../../src/rewards/registry';
import { runCli } from '../helpers/cli';
import { tinyModelFolder } from '../helpers/tinyModelFolder';

const dir = mkdtempSync(join(tmpdir(), 'vlrl-eval-'));

function record(id: string, correct: boolean): EvalRecord {
  return { id, sample: 0, prediction: correct ? '3' : '4', gold: '3', correct, format_ok: true, reward: correct ? 2.6 : 0.6, terms: [], completion: '', tokens: 5, terminated: true };
}

function run(id: string, records: EvalRecord[]): EvalRun {
  return { id, label: id, adapter: null, createdAt: 0, status: 'complete', settings: { answerFormat: 'solution', sampling: { temperature: 0, topP: 1, topK: 0, maxNewTokens: 8, seed: 0 }, samplesPerRow: 1, terms: presetTerms('seeds') }, records, summary: summarize(records) };
}

describe('eval command', () => {
  it('--compare prints fixed, broken and the table by task', async () => {
    const before = { ...run('before', [record('c1', false), record('c2', true), record('b1', false), record('b2', true)]), row_tasks: { c1: 'counting', c2: 'counting', b1: 'bar_value', b2: 'bar_value' } };
    const after = run('after', [record('c1', true), record('c2', true), record('b1', false), record('b2', false)]);
    writeFileSync(join(dir, 'before.json'), evalRunToJson(before));
    writeFileSync(join(dir, 'after.json'), evalRunToJson(after));
    const r = await runCli(['eval', '--compare', join(dir, 'before.json'), join(dir, 'after.json'), '--json']);
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { counts: Record<string, number>; fixed: string[]; broken: string[]; by_task: { task: string; fixed: number; broken: number; unchanged: number; accuracy_before: number; accuracy_after: number }[] };
    expect(out.counts).toEqual({ fixed: 1, broken: 1, unchanged: 2 });
    expect(out.fixed).toEqual(['c1#0']);
    expect(out.broken).toEqual(['b2#0']);
    expect(out.by_task).toEqual([
      { task: 'bar_value', fixed: 0, broken: 1, unchanged: 1, accuracy_before: 0.5, accuracy_after: 0 },
      { task: 'counting', fixed: 1, broken: 0, unchanged: 1, accuracy_before: 0.5, accuracy_after: 1 },
    ]);
    const text = await runCli(['eval', '--compare', join(dir, 'before.json'), join(dir, 'after.json')]);
    expect(text.stdout).toContain('fixed 1, broken 1, unchanged 2');
    expect(text.stdout).toMatch(/accuracy\s+0\.5000\s+0\.5000/);
    const bad = await runCli(['eval', '--compare', join(dir, 'before.json'), join(dir, 'nope.json')]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain(`no file ${join(dir, 'nope.json')}`);
  });

  it('evaluates the base model and base + adapter in the app\'s record format; --compare diffs them', async () => {
    const model = tinyModelFolder(join(dir, 'model'));
    const common = ['eval', '--demo', '--model', model, '--rows', '3', '--max-new-tokens', '6', '--quant', 'none'];
    const beforeFile = join(dir, 'base.json');
    const afterFile = join(dir, 'adapted.json');
    const b = await runCli([...common, '--out', beforeFile]);
    expect(b.code, b.stderr).toBe(0);
    const a = await runCli([...common, '--adapter', 'test/fixtures/tiny/tiny-a/lora', '--out', afterFile]);
    expect(a.code, a.stderr).toBe(0);
    for (const [file, stdout] of [[beforeFile, b.stdout], [afterFile, a.stdout]] as const) {
      const text = readFileSync(file, 'utf8');
      const parsed = evalRunFromJson(text); // the eval panel's loader accepts it
      const raw = JSON.parse(text) as EvalRun & { row_tasks: Record<string, string> };
      expect(raw.summary).toEqual(parsed.summary);
      expect(parsed.records).toHaveLength(3);
      expect(Object.values(raw.row_tasks)).toEqual(['counting', 'bar_value', 'triangle_angle']);
      for (const r of parsed.records) {
        expect(r.tokens).toBeGreaterThan(0);
        const j = judge(r.completion, r.gold, 'solution');
        expect({ prediction: r.prediction, correct: r.correct, correct_strict: r.correct_strict, format_ok: r.format_ok }).toEqual(j);
        expect(r.reward).toBeCloseTo(scoreBuiltins(presetTerms('seeds'), { completion: r.completion, answer: r.gold }).total, 12);
      }
      const line = JSON.parse(stdout.trim().split('\n').at(-1)!) as { accuracy: number; reward: number; samples: number };
      expect(line).toMatchObject({ accuracy: parsed.summary.accuracy, reward: parsed.summary.meanReward, samples: 3 });
    }
    const base = evalRunFromJson(readFileSync(beforeFile, 'utf8'));
    const adapted = evalRunFromJson(readFileSync(afterFile, 'utf8'));
    expect(adapted.adapter).toBe('test/fixtures/tiny/tiny-a/lora');
    // (The tiny model's tokens mostly lie outside the byte tokenizer's 256, so completions decode to
    // little text; cli-merge.test.ts checks that --adapter's LoRA is applied, through logits.)
    const c = await runCli(['eval', '--compare', beforeFile, afterFile, '--json']);
    expect(c.code, c.stderr).toBe(0);
    expect((JSON.parse(c.stdout) as { counts: unknown }).counts).toEqual(compareRuns(base, adapted).counts);

    const again = await runCli([...common, '--out', beforeFile]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`${beforeFile} already exists; pass --overwrite`);
    expect(existsSync(beforeFile)).toBe(true);
    const wrong = await runCli([...common, '--adapter', 'test/fixtures/tiny/tiny-b/lora']);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/test\/fixtures\/tiny\/tiny-b\/lora: the adapter does not fit this model: .* \(r = 4, target_modules/);
  }, 900_000);
});
