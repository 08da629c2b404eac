// The CLI's thinking flags: `generate` and `eval` take --thinking-mode and --thinking-budget. On a
// copy of the demo model whose folder ships a Thinking-style chat template (chat_template.jinja,
// its generation prompt opens <think>), a budget of N forces </think> (Qwen's id 151668) at
// completion token N in every sample; --thinking-mode on a template that does not read the switch
// warns; bad values are refused by flag name before any model loads.
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { breakdown } from '../../src/eval/groups';
import type { EvalRun } from '../../src/eval/records';
import { runCli } from '../helpers/cli';

const THINK_END = 151668;
const dir = mkdtempSync(join(tmpdir(), 'vlrl-thinking-'));

/** public/demo with the thinking-style template of test/fixtures/chat beside its own (chat_template.jinja comes first). */
function thinkingDemo(): string {
  const model = join(dir, 'demo-thinking');
  mkdirSync(model, { recursive: true });
  for (const f of readdirSync('public/demo')) copyFileSync(join('public/demo', f), join(model, f));
  copyFileSync('test/fixtures/chat/qwen3-vl-thinking.jinja', join(model, 'chat_template.jinja'));
  return model;
}

describe('thinking flags of generate and eval', () => {
  it('refuses bad values by flag name', async () => {
    const base = ['generate', '--model', 'public/demo', '--input', 'nope.json', '--max-new-tokens', '2', '--temperature', '0'];
    const mode = await runCli([...base, '--thinking-mode', 'sometimes']);
    expect(mode.code).toBe(1);
    expect(mode.stderr).toContain("--thinking-mode must be one of auto, on, off, got 'sometimes'");
    const budget = await runCli([...base, '--thinking-budget', '-2']);
    expect(budget.code).toBe(1);
    expect(budget.stderr).toContain('--thinking-budget must be an integer >= 0, got -2');
  });

  it('generate forces </think> at the budget in every sample of a prompt that opened the block', async () => {
    const model = thinkingDemo();
    const chat = join(dir, 'chat.json');
    writeFileSync(chat, JSON.stringify({ messages: [{ role: 'user', content: 'How many circles are there?' }] }));
    const common = ['generate', '--model', model, '--input', chat, '--max-new-tokens', '6', '--temperature', '1', '--num-samples', '3', '--seed', '4', '--quant', 'none'];
    const free = await runCli(common);
    expect(free.code, free.stderr).toBe(0);
    const r = await runCli([...common, '--thinking-budget', '2', '--thinking-mode', 'off']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain("--thinking-mode off: the model's chat template does not read enable_thinking");
    const out = JSON.parse(r.stdout) as { tokens: number[][]; logprobs: number[][]; text: string[] };
    const before = JSON.parse(free.stdout) as { tokens: number[][] };
    let forced = 0;
    out.tokens.forEach((t, g) => {
      // A sample that closed the block itself, or ended (eos) within the budget, is untouched.
      if (before.tokens[g].slice(0, 2).includes(THINK_END) || before.tokens[g].length <= 2) return expect(t).toEqual(before.tokens[g]);
      forced++;
      expect(t.slice(0, 2)).toEqual(before.tokens[g].slice(0, 2));
      expect(t[2]).toBe(THINK_END);
      expect(out.logprobs[g][2]).toBe(0);
      expect(out.text[g]).toContain('</think>');
    });
    expect(forced).toBeGreaterThanOrEqual(1);
  }, 300_000);

  it('eval records the budget, judges the answer after </think>, and exports the breakdown', async () => {
    const model = thinkingDemo();
    const file = join(dir, 'eval.json');
    const r = await runCli(['eval', '--demo', '--model', model, '--rows', '2', '--max-new-tokens', '5', '--quant', 'none', '--thinking-budget', '1', '--thinking-mode', 'on', '--out', file]);
    expect(r.code, r.stderr).toBe(0);
    const run = JSON.parse(readFileSync(file, 'utf8')) as EvalRun & { breakdown: unknown };
    expect(run.settings.sampling.thinkingBudget).toBe(1);
    expect(run.settings.thinkingMode).toBe('on');
    expect(run.breakdown).toEqual(breakdown(run.records, 'numeric'));
    for (const rec of run.records) {
      expect(rec.completion).toContain('</think>');
      // Judged after the block: a prediction, if any, comes from the text after </think>.
      if (rec.prediction !== null) expect(rec.completion.slice(rec.completion.lastIndexOf('</think>'))).toContain(rec.prediction);
    }
  }, 300_000);
});
