// `export-trl`: the run of a train config as a TRL project. Every GRPOConfig keyword it writes is a
// field of TRL's GRPOConfig (test/fixtures/trl/grpo_config_fields.json); the Python files compile;
// the ported reward functions give the TypeScript terms' values on the reward tests' cases and
// fuzzed text (python3, standard library only); the parquet holds the rows in the geo3k layout.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadParquet } from '../../src/data';
import { sharpDecoder } from '../../src/data/node/sharpDecoder';
import { configRows } from '../../src/model/session';
import { resolveConfig } from '../../src/rl/config';
import { builtinRewardFn, type RewardTerm } from '../../src/rewards/registry';
import { playgroundFromPreset } from '../../src/rewards/playground';
import { runCli } from '../helpers/cli';
import { rng } from '../helpers/reference';

const dir = mkdtempSync(join(tmpdir(), 'vlrl-trl-'));
const FIELDS = new Set((JSON.parse(readFileSync('test/fixtures/trl/grpo_config_fields.json', 'utf8')) as { fields: string[] }).fields);

const TERMS: RewardTerm[] = [
  { name: 'format', weight: 0.3 },
  { name: 'correctness', weight: 1.0 },
  { name: 'boxed', weight: 0.5 },
  { name: 'strict-boxed', builtin: 'boxed', weight: 2, params: { reward_max_val: 5, reward_min_val: -1 } },
  { name: 'length', weight: 0.1, source: '(c, a, ctx) => c.length + ctx.index' },
];
const CONFIG = {
  model_name_or_path: 'test/fixtures/tiny/tiny-a',
  dataset: { tasks: ['counting', 'bar_value'], count: 3, seed: 5, size: 112 },
  rewards: TERMS,
  num_generations: 4,
  per_device_train_batch_size: 8,
  gradient_accumulation_steps: 2,
  steps_per_generation: 4,
  max_steps: 30,
  learning_rate: 2e-4,
  warmup_ratio: 0.1,
  max_grad_norm: null,
  save_steps: 0,
  epsilon_high: 0.28,
  importance_sampling_level: 'sequence',
  rollout_correction: { mode: 'token_truncate', clip_max: 2 },
  lora: { r: 4, lora_alpha: 8, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] },
};

/** (completion, answer) pairs: the cases of rewards.test.ts and the playground, normalisation cases in both answer forms, edge cases, fuzz. */
function cases(): [string, string][] {
  const solved = (v: string, r = 'The bars show 3 apples.') => `<REASONING>${r}</REASONING>\n<SOLUTION>${v}</SOLUTION>`;
  const pairs: [string, string][] = [
    [solved('3'), '3'], [solved(' 3\n'), '3 '], [solved('3.0'), '3'], [solved('3'), '3.0'], [solved('3/4'), '0.75'],
    [solved('\\frac{3}{4}'), '0.75'], [solved('50%'), '0.5'], [solved('50%'), '50'], [solved('0.5'), '50'], [solved('12 cm'), '12'],
    [solved('1,234'), '1234'], [solved('1,2'), '12'], [solved('4'), '3'], [solved('three'), '3'],
    ['<REASONING>3</REASONING> 3', '3'], ['<SOLUTION>3</SOLUTION><SOLUTION>3</SOLUTION>', '3'], ['<SOLUTION>3</SOLUTION>', '3'],
    ['<REASONING>r</REASONING> the answer is 3', '3'], [`${solved('3')}<SOLUTION>4</SOLUTION>`, '3'], ['<REASONING>unclosed <SOLUTION>3</SOLUTION>', '3'],
    ['addCriterion\n'.repeat(20), '3'], [`${solved('3', 'ok')}${'addCriterion'.repeat(5)}`, '3'], [solved('3', 'x'.repeat(2000)) + 'addCriterion '.repeat(8), '3'],
    [solved('3', `${'y'.repeat(200)} addCriterion`), '3'], ['\n\n\n', '3'], ['addCriterion'.repeat(30), '3'],
    [`${solved('3', '😀'.repeat(6))}addCriterion`, '3'], [`<SOLUTION>3</SOLUTION>addCriterion${'😀'.repeat(7)}`, '3'], [`addCriterion${'😀'.repeat(8)}`, '3'], [`<SOLUTION>3</SOLUTION>addCriterion\n${'😀'.repeat(20)}`, '3'],
    ['so x = \\boxed{\\frac{1}{2}}', '0.5'], ['\\boxed{0.75}', '\\dfrac{3}{4}'], ['Answer: \\boxed{\\dfrac{3}{4}}', '\\frac{3}{4}'],
    ['\\boxed{2\\sqrt{3}}', '2 \\sqrt{3}'], ['\\boxed{\\frac{\\sqrt{3}}{2}}', '\\frac{\\sqrt 3}{2}'], ['\\boxed{60^{\\circ}}.', '60'],
    ['\\boxed{12\\text{ cm}}', '12'], ['\\boxed{\\left(1, 2\\right)}', '(1,2)'], ['gold boxed too: \\boxed{5}', '\\boxed{5.0}'],
    ['\\boxed{1} at first, then \\boxed{2}', '1'], ['the answer is 0.5', '0.5'], ['\\boxed{0.5', '0.5'], ['\\boxed{3}', '3'], ['\\boxed{4}', '3'],
    ['so $\\boxed 7$', '7'], ['\\boxed{1/0}', '1/0'], ['\\boxed{10^{400}}', '10^{400}'], ['\\boxed{\\sqrt{-4}}', '\\sqrt{-4}'], ['\\boxed{(-8)^{\\frac{1}{3}}}', '-2'],
    ['\\boxed{\\sqrt[0]{2}}', '2'], ['\\boxed{x = 5}', '5'], ['\\boxed{AB = 5 cm}', '5'], ['\\boxed{50 percent}', '0.5'], ['\\boxed{3 apples}', '3'],
    ['\\boxed{12cm^2}', '12'], ['\\boxed{1,234,567}', '1234567'], ['\\boxed{.5}', '0.5'], ['\\boxed{ABC}', 'abc'], ['\\boxed{(\\frac{1}{2}, 3)}', '(0.5,3)'],
    ['\\boxed{(1, 3)}', '(1, 2)'], ['\\boxed{0.33}', '\\frac{1}{3}'], ['\\boxed{0.33333}', '\\frac{1}{3}'], ['\\boxed{}', '0'], ['\\boxed{2^23}', '12'],
    ['\\boxed{3\\pi}', '9.42477796'], ['\\boxed{(1+2)\\cdot4}', '12'], ['\\boxed{−3}', '-3'], ['\\boxed{2×3÷4}', '1.5'], ['\\boxed{1\u00a0000}', '1000'],
  ];
  for (const preset of ['seeds', 'geo3k'] as const) {
    const p = playgroundFromPreset(preset);
    pairs.push([p.completion, p.answer]);
  }
  // Normalisation cases of rewards.test.ts, in both answer forms.
  for (const text of ['\\frac{1}{2}', '\\frac12', '-\\frac{3}{4}', '2\\sqrt{3}', '\\sqrt[3]{8}', '3\\pi', '2^{10}', '(1+2)\\cdot4', '\\frac{\\sqrt{2}}{2}', '7/8', '.5', 'x+1', '\\sin(3)', '(1,2)', '', '1/0', '12\\text{ cm}^2', '$60^\\circ$.', '\\left( 1, 2 \\right)', '50\\%']) {
    for (const gold of ['0.5', '1', '-0.75', '3.4641016', '2', '1024', '12', '0.70710678', '0.875', '60', '(1,2)', '50', '0.5%']) {
      pairs.push([`\\boxed{${text}}`, gold], [`<SOLUTION>${text}</SOLUTION>`, gold]);
    }
  }
  const pieces = ['\\boxed{', '{', '}', '(', ')', ',', '\\frac', '\\sqrt', '^', '1', '0', '.', '%', ' cm', '<SOLUTION>', '</SOLUTION>',
    '<REASONING>', '</REASONING>', 'addCriterion', '\n', '-', '/', '\\pi', '=', 'x', '$', '\\left(', '\\right)', '^\\circ', ' ', '2', '\\dfrac', '[', ']', '\\text{m}'];
  const next = rng(11);
  for (let i = 0; i < 600; i++) {
    const text = Array.from({ length: 1 + Math.floor(next() * 40) }, () => pieces[Math.floor(next() * pieces.length)]).join('');
    const gold = Array.from({ length: 1 + Math.floor(next() * 6) }, () => pieces[Math.floor(next() * pieces.length)]).join('');
    pairs.push([text, gold], [`<SOLUTION>${text}</SOLUTION>\\boxed{${text}}`, text]);
  }
  pairs.push([`\\boxed{${'{'.repeat(2000)}1${'}'.repeat(2000)}}`, '1'], [`\\boxed{${'('.repeat(500)}1,2${')'.repeat(500)}}`, '(1,2)']);
  return pairs;
}

describe('export-trl', () => {
  it('writes a TRL project: GRPOConfig fields of TRL, compiling Python, rewards equal to the TypeScript terms, geo3k parquet', async () => {
    const configFile = join(dir, 'run.json');
    writeFileSync(configFile, JSON.stringify(CONFIG));
    const out = join(dir, 'project');
    const r = await runCli(['export-trl', '--config', configFile, '--out', out, '--adapter', 'test/fixtures/tiny/tiny-a/lora']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain('custom reward term(s) length raise NotImplementedError');
    expect(readdirSync(out).sort()).toEqual(['README.md', 'accelerate_zero2.yaml', 'adapter', 'data', 'launch.sh', 'requirements.txt', 'rewards.py', 'run_config.json', 'train.py', 'vlrl_rewards.py']);

    // Every Python file compiles.
    execFileSync('python3', ['-m', 'py_compile', ...['train.py', 'rewards.py', 'vlrl_rewards.py'].map((f) => join(out, f))]);

    // The keywords GRPOConfig gets: **TRAINING_ARGUMENTS (TrainingArguments' fields) and **GRPO_FIELDS (its own, all in TRL's list).
    const kw = JSON.parse(execFileSync('python3', ['-c', `
import ast, json, sys
tree = ast.parse(open(sys.argv[1]).read())
dicts = {}
calls = []
for node in ast.walk(tree):
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and getattr(node.value.func, 'id', None) == 'dict':
        dicts[node.targets[0].id] = {k.arg: ast.literal_eval(k.value) if not isinstance(k.value, ast.Call) else None for k in node.value.keywords}
    if isinstance(node, ast.Call) and getattr(node.func, 'id', None) == 'GRPOConfig':
        calls.append([(k.arg, getattr(k.value, 'id', None)) for k in node.keywords])
print(json.dumps({"dicts": dicts, "calls": calls}))
`, join(out, 'train.py')], { encoding: 'utf8' })) as { dicts: Record<string, Record<string, unknown>>; calls: [string | null, string | null][][] };
    expect(kw.calls).toEqual([[[null, 'TRAINING_ARGUMENTS'], [null, 'GRPO_FIELDS']]]);
    const grpo = kw.dicts.GRPO_FIELDS;
    for (const k of Object.keys(grpo)) expect(FIELDS.has(k), `GRPO_FIELDS.${k} is not a field of TRL's GRPOConfig`).toBe(true);
    for (const k of Object.keys(kw.dicts.TRAINING_ARGUMENTS)) expect(FIELDS.has(k), `${k} is GRPOConfig's own field, not TrainingArguments'`).toBe(false);
    expect(grpo).toMatchObject({
      learning_rate: 2e-4, num_generations: 4, steps_per_generation: 4, epsilon_high: 0.28, importance_sampling_level: 'sequence',
      reward_weights: [0.3, 1, 0.5, 2, 0.1], vllm_importance_sampling_correction: true, vllm_importance_sampling_mode: 'token_truncate', vllm_importance_sampling_clip_max: 2,
    });
    expect(kw.dicts.TRAINING_ARGUMENTS).toMatchObject({ per_device_train_batch_size: 8, gradient_accumulation_steps: 2, max_steps: 30, warmup_steps: 3, max_grad_norm: 0, save_strategy: 'no' });
    expect(readFileSync(join(out, 'train.py'), 'utf8')).toContain('r=4,\n    lora_alpha=8,');
    expect(readFileSync(join(out, 'README.md'), 'utf8')).toMatch(/`length` \(weight 0\.1\): \*\*custom JavaScript: not ported\*\*/);
    expect(readFileSync(join(out, 'adapter', 'adapter_config.json'), 'utf8')).toEqual(readFileSync('test/fixtures/tiny/tiny-a/lora/adapter_config.json', 'utf8'));

    // The reward functions against the TypeScript terms, value for value.
    const pairs = cases();
    writeFileSync(join(dir, 'cases.json'), JSON.stringify(pairs));
    const py = JSON.parse(execFileSync('python3', ['-c', `
import json, sys
sys.path.insert(0, sys.argv[1])
import rewards
pairs = json.load(open(sys.argv[2]))
completions = [c for c, _ in pairs]
answers = [a for _, a in pairs]
out = {f.__name__: f(completions, answer=answers, problem=["p"] * len(pairs)) for f in rewards.REWARD_FUNCS if f.__name__ != "length"}
chat = [[{"role": "assistant", "content": c}] for c in completions]
out["correctness_chat"] = rewards.correctness(chat, answer=answers)
try:
    rewards.length(completions, answer=answers)
    out["length"] = "returned"
except NotImplementedError as e:
    out["length"] = str(e)
print(json.dumps(out))
`, out, join(dir, 'cases.json')], { encoding: 'utf8', maxBuffer: 1 << 26 })) as Record<string, number[] | string>;
    for (const term of TERMS.filter((t) => t.source === undefined)) {
      const fn = builtinRewardFn(term);
      const want = pairs.map(([c, a]) => fn(c, a, {}));
      const name = term.name.replace(/-/g, '_');
      const got = py[name] as number[];
      const differ = pairs.map((p, i) => ({ p, ts: want[i], py: got[i] })).filter((d) => d.ts !== d.py);
      expect(differ.slice(0, 5), `${name}: ${differ.length} of ${pairs.length} differ`).toEqual([]);
      expect(new Set(want).size).toBeGreaterThan(1);
    }
    expect(py.correctness_chat).toEqual(py.correctness);
    expect(py.length).toContain("reward term 'length' is custom JavaScript");

    // The data set: geo3k layout, the config's rows, images embedded losslessly.
    const rows = configRows(resolveConfig(CONFIG as never).config.dataset);
    const buf = new Uint8Array(readFileSync(join(out, 'data', 'train.parquet'))).buffer;
    const back = await loadParquet(buf, { decoder: sharpDecoder });
    expect(back.broken).toEqual([]);
    expect(back.rows.map((x) => x.answer)).toEqual(rows.map((x) => x.answer));
    expect(back.rows.map((x) => x.question)).toEqual(rows.map((x) => `<image>${x.question}`));
    back.rows.forEach((x, i) => expect(Buffer.from(x.images[0].data).equals(Buffer.from(rows[i].images[0].data))).toBe(true));
    const { parquetMetadata } = await import('hyparquet');
    const md = parquetMetadata(buf);
    expect(md.schema.map((s) => s.name)).toEqual(['schema', 'images', 'list', 'element', 'bytes', 'path', 'problem', 'answer']);
    expect(JSON.parse(md.key_value_metadata!.find((k) => k.key === 'huggingface')!.value!).info.features.images).toEqual({ feature: { _type: 'Image' }, _type: 'Sequence' });

    const again = await runCli(['export-trl', '--config', configFile, '--out', out]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`${out} already exists; pass --overwrite`);
    const wrong = await runCli(['export-trl', '--config', configFile, '--out', join(dir, 'p2'), '--adapter', 'test/fixtures/tiny/tiny-b/lora']);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain('the adapter does not fit this model');
    expect(existsSync(join(dir, 'p2'))).toBe(false);
  });
});
