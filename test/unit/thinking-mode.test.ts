// Thinking models (issue 39 point 5): thinking_mode renders the chat template's enable_thinking
// exactly as transformers.js's apply_chat_template does (fixture made offline by
// tools/make_chat_thinking_fixture.mjs from two thinking-style templates), the rendered prompt
// says whether it opened a <think> block, the config checks both fields by name, and the trainer
// and the eval runner carry them: the prompt options, the sampler's budget, and rewards and the
// judge scoring the answer after </think> when the prompt opened the block.
import { defaultEngineConfig } from '../../src/rl/engineConfig';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { runEval } from '../../src/eval/runner';
import { loadTokenizer, nodeQwen3TokenizerFolder, promptOpensThinking, Qwen3VLTokenizer, templateReadsThinkingSwitch, type ChatMessage, type ThinkingMode } from '../../src/model/processor';
import { presetTerms, scoreBuiltins } from '../../src/rewards/registry';
import { ConfigError, defaultConfig, resolveConfig, type TrainConfigInput } from '../../src/rl/config';
import { trlFields } from '../../src/node/trl/project';
import type { Completion, Policy, PreparedPrompt, SamplingOptions } from '../../src/rl/policy';
import { Trainer, type PromptOptions, type PromptSource, type TrainerEvent } from '../../src/rl/trainer';
import { testGpu } from '../helpers/gpu';
import { ToyPolicy } from '../helpers/toyPolicy';

const FIXTURE = JSON.parse(readFileSync('test/fixtures/chat/thinking-render.json', 'utf8')) as {
  messages: ChatMessage[];
  renders: Record<string, Record<ThinkingMode, string>>;
};
const template = (name: string) => readFileSync(`test/fixtures/chat/${name}.jinja`, 'utf8');
const MODES: ThinkingMode[] = ['auto', 'on', 'off'];

describe('chat template thinking switch', () => {
  it.each(Object.keys(FIXTURE.renders))('%s renders each thinking_mode as apply_chat_template with enable_thinking unset / true / false', async (name) => {
    const base = await loadTokenizer({ folder: await nodeQwen3TokenizerFolder() });
    const tokenizer = new Qwen3VLTokenizer(base.inner, template(name));
    for (const mode of MODES) expect(tokenizer.renderChat(FIXTURE.messages, true, mode), mode).toBe(FIXTURE.renders[name][mode]);
  });

  it('the fixture holds the templates\' documented generation prompts, and promptOpensThinking reads them', () => {
    const hybrid = FIXTURE.renders['qwen3-vl-hybrid-thinking'];
    const thinking = FIXTURE.renders['qwen3-vl-thinking'];
    expect(hybrid.off.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
    expect(hybrid.on.endsWith('<|im_start|>assistant\n')).toBe(true);
    expect(hybrid.auto).toBe(hybrid.on);
    for (const mode of MODES) {
      expect(thinking[mode].endsWith('<|im_start|>assistant\n<think>\n')).toBe(true);
      expect(promptOpensThinking(thinking[mode])).toBe(true);
      expect(promptOpensThinking(hybrid[mode])).toBe(false);
    }
    // A block closed in an earlier turn does not count; one opened in the last turn does.
    expect(promptOpensThinking('<|im_start|>assistant\n<think>\nx</think>\n\ny<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n')).toBe(false);
    expect(templateReadsThinkingSwitch(template('qwen3-vl-hybrid-thinking'))).toBe(true);
    expect(templateReadsThinkingSwitch(template('qwen3-vl-thinking'))).toBe(false);
  });
});

describe('thinking_mode and thinking_budget in the train config', () => {
  it('default to auto and null, and take their values', () => {
    expect(defaultConfig().thinking_mode).toBe('auto');
    expect(defaultConfig().thinking_budget).toBeNull();
    const { config, warnings } = resolveConfig({ thinking_mode: 'off', thinking_budget: 0 });
    expect(config.thinking_mode).toBe('off');
    expect(config.thinking_budget).toBe(0);
    expect(warnings.some((w) => /thinking_budget = 0 with thinking_mode 'off'/.test(w))).toBe(true);
  });

  const refusals: [string, TrainConfigInput, RegExp][] = [
    ['an unknown mode', { thinking_mode: 'always' as ThinkingMode }, /^train config: thinking_mode must be one of auto, on, off; got "always"$/],
    ['a boolean mode', { thinking_mode: true as unknown as ThinkingMode }, /thinking_mode must be one of/],
    ['a negative budget', { thinking_budget: -1 }, /^train config: thinking_budget must be an integer >= 0; got -1$/],
    ['a fractional budget', { thinking_budget: 2.5 }, /thinking_budget must be an integer >= 0/],
  ];
  it.each(refusals)('refuses %s by name', (_, input, reason) => {
    expect(() => resolveConfig(input)).toThrow(ConfigError);
    expect(() => resolveConfig(input)).toThrow(reason);
  });

  it('export-trl writes thinking_mode as TRL\'s chat_template_kwargs and names the budget it cannot carry', () => {
    expect('chat_template_kwargs' in trlFields(defaultConfig(), defaultEngineConfig()).grpo).toBe(false);
    expect(trlFields(resolveConfig({ thinking_mode: 'off' }).config, defaultEngineConfig()).grpo.chat_template_kwargs).toEqual({ enable_thinking: false });
    expect(trlFields(resolveConfig({ thinking_mode: 'on' }).config, defaultEngineConfig()).grpo.chat_template_kwargs).toEqual({ enable_thinking: true });
    expect(trlFields(resolveConfig({ thinking_budget: 64 }).config, defaultEngineConfig()).notCarried.find((f) => f.field === 'thinking_budget')?.why).toMatch(/^64 here; not carried/);
    expect(trlFields(defaultConfig(), defaultEngineConfig()).notCarried.some((f) => f.field === 'thinking_budget')).toBe(false);
  });

  it('warns when the budget cannot end thinking before max_completion_length', () => {
    expect(resolveConfig({ thinking_budget: 256 }).warnings).toContain('thinking_budget = 256 is not below max_completion_length = 256: a completion is cut before the budget can end its thinking');
  });
});

/** Put before the toy policy's completions: a right answer, but inside a block the prompt opened and nothing closed (the budget or the length ran out). */
const THOUGHT = '<REASONING>count</REASONING><SOLUTION>3</SOLUTION>';

class ThinkingToy implements Policy {
  readonly budgets: (number | null | undefined)[] = [];
  constructor(private readonly inner: ToyPolicy) {}
  get lora() {
    return this.inner.lora;
  }
  async generate(prompt: PreparedPrompt, n: number, o: SamplingOptions): Promise<Completion[]> {
    this.budgets.push(o.thinkingBudget);
    return (await this.inner.generate(prompt, n, o)).map((c) => ({ ...c, text: THOUGHT + c.text }));
  }
  forward: Policy['forward'] = (b, o) => this.inner.forward(b, o);
  backward: Policy['backward'] = (g, e) => this.inner.backward(g, e);
}

describe('the trainer and the eval runner carry the thinking settings', () => {
  it('prompts get thinking_mode, the sampler thinking_budget, and rewards score the answer after </think>', async () => {
    const gpu = await testGpu();
    const { config, loss } = resolveConfig({ num_generations: 2, per_device_train_batch_size: 2, max_completion_length: 6, max_steps: 2, save_steps: 0, seed: 5, thinking_mode: 'on', thinking_budget: 3, lora: { r: 2, lora_alpha: 4, target_modules: ['q_proj'] } });
    const options: (PromptOptions | undefined)[] = [];
    const data: PromptSource = {
      rows: [{ id: 'r', question: 'How many?', images: [], answer: '3', meta: {} }],
      prepare: async (row, system, o) => {
        options.push(o);
        return { prompt: { id: row.id, inputIds: Int32Array.from([1, 2, 3]), images: [], thinking: true }, text: `${system}${row.question}` };
      },
    };
    const policy = new ThinkingToy(await ToyPolicy.create(gpu));
    const events: TrainerEvent[] = [];
    const trainer = await Trainer.create({ gpu, policy, data, config, loss, runId: 'thinking', onEvent: (e) => events.push(e), saveCheckpoint: async () => undefined });
    expect(await trainer.run()).toBe('finished');
    expect(options.length).toBeGreaterThan(0);
    expect(options.every((o) => o?.thinkingMode === 'on')).toBe(true);
    expect(policy.budgets.length).toBeGreaterThan(0);
    expect(policy.budgets.every((b) => b === 3)).toBe(true);
    const completions = events.flatMap((e) => (e.type === 'step' ? e.samples : [])).flatMap((s) => s.completions);
    expect(completions.length).toBeGreaterThan(0);
    // All thinking and no answer: each scores as the empty answer, not as the text it holds.
    const empty = scoreBuiltins(config.rewards, { completion: '', answer: '3' }).total;
    for (const c of completions) {
      expect(c.reward).toBeCloseTo(scoreBuiltins(config.rewards, { completion: c.text, answer: '3', thinking: true }).total, 12);
      expect(c.reward).toBeCloseTo(empty, 12);
    }
    expect(completions.some((c) => scoreBuiltins(config.rewards, { completion: c.text, answer: '3' }).total > empty)).toBe(true);
  }, 120_000);

  it('the eval runner judges and scores only an answer after </think> when the prompt opened the block', async () => {
    const policy = {
      lora: [],
      generate: async (_p: PreparedPrompt, n: number) => Array.from({ length: n }, () => ({ tokens: [1], text: THOUGHT, samplingLogps: [0], terminated: false })),
    } as unknown as Policy;
    const rows = [{ id: 'r', question: 'How many?', images: [], answer: '3', meta: {} }];
    const run = (thinking: boolean) =>
      runEval({ policy, rows, prepare: () => ({ id: 'r', inputIds: Int32Array.from([1]), images: [], thinking }), terms: presetTerms('seeds'), answerFormat: 'solution', sampling: { temperature: 0, topP: 1, topK: 0, maxNewTokens: 8, seed: 0 } });
    const opened = (await run(true)).records[0];
    expect(opened.correct).toBe(false);
    expect(opened.prediction).toBeNull();
    expect(opened.reward).toBeCloseTo(scoreBuiltins(presetTerms('seeds'), { completion: '', answer: '3' }).total, 12);
    // A prompt without a block: the same text is the answer.
    const plain = (await run(false)).records[0];
    expect(plain.correct).toBe(true);
    expect(plain.prediction).toBe('3');
  });
});
