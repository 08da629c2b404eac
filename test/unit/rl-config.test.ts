import { describe, expect, it } from 'vitest';
import { batchPlan, ConfigError, defaultConfig, resolveConfig, type TrainConfigInput } from '../../src/rl/config';
import { learningRate, scheduleOf } from '../../src/rl/schedule';
import { TrainerRng } from '../../src/rl/rng';

describe('resolveConfig', () => {
  it('fills TRL defaults', () => {
    const { config, loss, warnings } = resolveConfig();
    expect(config).toEqual(defaultConfig());
    expect(config).toMatchObject({ num_generations: 8, epsilon: 0.2, epsilon_high: null, loss_type: 'dapo', beta: 0, scale_rewards: 'group', adam_beta1: 0.9, adam_beta2: 0.999, adam_epsilon: 1e-8, max_grad_norm: 1, num_iterations: 1, steps_per_generation: null });
    expect(loss.epsilon_high).toBe(0.2);
    expect(warnings).toEqual([]);
  });

  it('merges nested objects field by field', () => {
    const { config } = resolveConfig({ lora: { r: 4 }, rollout_correction: { mode: 'token_truncate' } });
    expect(config.lora).toEqual({ ...defaultConfig().lora, r: 4 });
    expect(config.rollout_correction).toEqual({ mode: 'token_truncate', clip_max: 3, clip_min: null });
  });

  const refusals: [string, TrainConfigInput, RegExp][] = [
    ['an unknown field', { learning_rat: 1 } as TrainConfigInput, /unknown field 'learning_rat'/],
    ['G < 2', { num_generations: 1 }, /num_generations must be an integer >= 2/],
    ['a micro-batch of partial groups', { per_device_train_batch_size: 12 }, /multiple of num_generations/],
    ['temperature 0', { temperature: 0 }, /temperature must be in \(0/],
    ['top_p 0', { top_p: 0 }, /top_p must be in \(0, 1\]/],
    ['top_p above 1', { top_p: 1.5 }, /top_p/],
    ['a negative top_k', { top_k: -1 }, /top_k/],
    ['a fractional max_completion_length', { max_completion_length: 2.5 }, /max_completion_length/],
    ['max_prompt_length 0', { max_prompt_length: 0 }, /max_prompt_length/],
    ['a negative learning rate', { learning_rate: -1 }, /learning_rate/],
    ['an unknown scheduler', { lr_scheduler_type: 'step' as 'linear' }, /lr_scheduler_type must be one of/],
    ['warm-up on a constant schedule', { lr_scheduler_type: 'constant', warmup_steps: 3 }, /'constant' has no warm-up/],
    ['warmup_ratio above 1', { warmup_ratio: 2 }, /warmup_ratio/],
    ['adam_beta1 = 1', { adam_beta1: 1 }, /adam_beta1 must be in \[0, 1\)/],
    ['adam_beta2 < 0', { adam_beta2: -0.1 }, /adam_beta2/],
    ['adam_epsilon 0', { adam_epsilon: 0 }, /adam_epsilon/],
    ['negative weight decay', { weight_decay: -1 }, /weight_decay/],
    ['max_grad_norm 0', { max_grad_norm: 0 }, /max_grad_norm/],
    ['gradient_accumulation_steps 0', { gradient_accumulation_steps: 0 }, /gradient_accumulation_steps/],
    ['steps_per_generation 0', { steps_per_generation: 0 }, /steps_per_generation/],
    ['num_iterations 0', { num_iterations: 0 }, /num_iterations/],
    ['an unknown level', { importance_sampling_level: 'sequence_token' as 'token' }, /importance_sampling_level must be one of/],
    ['an unknown loss', { loss_type: 'ppo' as 'grpo' }, /loss_type must be one of/],
    ['negative epsilon', { epsilon: -0.1 }, /epsilon/],
    ['negative beta', { beta: -0.01 }, /beta/],
    ['an unknown scale', { scale_rewards: 'true' as 'group' }, /scale_rewards/],
    ['an unknown correction mode', { rollout_correction: { mode: 'token' as 'token_mask' } }, /rollout_correction.mode/],
    ['clip_min above clip_max', { rollout_correction: { mode: 'token_mask', clip_min: 4, clip_max: 2 } }, /clip_min \(4\) is above clip_max \(2\)/],
    ['mask_truncated_completions not boolean', { mask_truncated_completions: 1 as unknown as boolean }, /mask_truncated_completions/],
    ['gradient_checkpointing not boolean', { gradient_checkpointing: 'no' as unknown as boolean }, /gradient_checkpointing must be true or false/],
    ['rank 0', { lora: { r: 0 } }, /lora.r/],
    ['lora_alpha 0', { lora: { lora_alpha: 0 } }, /lora.lora_alpha/],
    ['dropout 1', { lora: { lora_dropout: 1 } }, /lora.lora_dropout must be in \[0, 1\)/],
    ['no target modules', { lora: { target_modules: [] } }, /at least one module/],
    ['an unknown module', { lora: { target_modules: ['lm_head' as 'q_proj'] } }, /no module 'lm_head'/],
    ['a module twice', { lora: { target_modules: ['q_proj', 'q_proj'] } }, /lists 'q_proj' twice/],
    ['a seed over u32', { seed: 2 ** 32 }, /seed must be below 2\^32/],
    ['max_steps 0', { max_steps: 0 }, /max_steps/],
    ['negative save_steps', { save_steps: -1 }, /save_steps/],
    ['logging_steps 0', { logging_steps: 0 }, /logging_steps/],
    ['no reward terms', { rewards: [] }, /at least one reward term/],
    ['an unknown reward', { rewards: [{ name: 'bleu', weight: 1 }] }, /no built-in reward 'bleu'/],
    ['a non-finite weight', { rewards: [{ name: 'format', weight: NaN }] }, /not a finite number/],
    ['an unknown task', { dataset: { tasks: ['maze' as 'counting'] } }, /no task 'maze'/],
    ['an empty model path', { model_name_or_path: '' }, /model_name_or_path/],
  ];
  it.each(refusals)('refuses %s', (_, input, reason) => {
    expect(() => resolveConfig(input)).toThrow(ConfigError);
    expect(() => resolveConfig(input)).toThrow(reason);
  });

  it('warns where TRL warns, and about settings that do nothing', () => {
    const seq = resolveConfig({ importance_sampling_level: 'sequence', loss_type: 'dapo', steps_per_generation: 4 }).warnings;
    expect(seq).toHaveLength(1);
    expect(seq[0]).toMatch(/weighting sequences by length; GSPO uses loss_type = 'grpo'/);
    expect(resolveConfig({ importance_sampling_level: 'sequence', loss_type: 'grpo' }).warnings[0]).toMatch(/every ratio is 1, so GSPO equals GRPO/);
    expect(resolveConfig({ importance_sampling_level: 'sequence', loss_type: 'grpo', num_iterations: 2 }).warnings).toEqual([]);
    expect(resolveConfig({ warmup_steps: 5, warmup_ratio: 0.1 }).warnings).toEqual(['warmup_steps = 5 overrides warmup_ratio = 0.1']);
    expect(resolveConfig({ scale_rewards: 'batch' }).warnings[0]).toMatch(/one prompt per generation batch is the same as 'group'/);
    expect(resolveConfig({ rollout_correction: { mode: 'token_mask', clip_max: null } }).warnings[0]).toMatch(/masks nothing/);
  });

  it('plans batches as TRL counts them', () => {
    const c = (i: TrainConfigInput) => batchPlan(resolveConfig(i).config);
    expect(c({})).toEqual({ promptsPerMicroBatch: 1, stepsPerGeneration: 1, promptsPerGeneration: 1, recomputeOld: false });
    expect(c({ per_device_train_batch_size: 16, gradient_accumulation_steps: 2 })).toEqual({ promptsPerMicroBatch: 2, stepsPerGeneration: 2, promptsPerGeneration: 4, recomputeOld: false });
    // The GSPO paper's setting in TRL: 4 minibatches per generation, one per optimizer step.
    expect(c({ steps_per_generation: 4 }).recomputeOld).toBe(true);
    expect(c({ num_iterations: 2 }).recomputeOld).toBe(true);
    expect(c({ rollout_correction: { mode: 'sequence_mask' } }).recomputeOld).toBe(true);
  });
});

describe('learning-rate schedules', () => {
  const sched = (type: 'constant' | 'constant_with_warmup' | 'linear' | 'cosine', warmup_steps = 0, warmup_ratio = 0) =>
    scheduleOf({ lr_scheduler_type: type, learning_rate: 2e-4, warmup_steps, warmup_ratio, max_steps: 100 });
  it('match their closed forms', () => {
    for (const s of [0, 1, 37, 99, 100]) {
      expect(learningRate(sched('constant'), s)).toBe(2e-4);
      expect(learningRate(sched('linear'), s)).toBeCloseTo(2e-4 * (1 - s / 100), 15);
      expect(learningRate(sched('cosine'), s)).toBeCloseTo(2e-4 * 0.5 * (1 + Math.cos((Math.PI * s) / 100)), 15);
    }
    for (const s of [0, 3, 9]) expect(learningRate(sched('constant_with_warmup', 10), s)).toBeCloseTo((2e-4 * s) / 10, 15);
    expect(learningRate(sched('constant_with_warmup', 10), 50)).toBe(2e-4);
    expect(learningRate(sched('linear', 10), 55)).toBeCloseTo(2e-4 * (45 / 90), 15);
    expect(learningRate(sched('cosine', 10), 55)).toBeCloseTo(2e-4 * 0.5 * (1 + Math.cos(Math.PI * 0.5)), 15);
    // warmup_ratio as transformers rounds it: ceil(0.05 * 100) = 5
    expect(sched('linear', 0, 0.05).warmup).toBe(5);
    expect(sched('linear', 3, 0.05).warmup).toBe(3);
  });
});

describe('trainer RNG', () => {
  it('continues from a saved state exactly', () => {
    const a = new TrainerRng(42);
    a.seed();
    a.permutation(10);
    const saved = a.save();
    const next = [a.seed(), ...a.permutation(20)];
    const b = new TrainerRng(0);
    b.load(saved);
    expect([b.seed(), ...b.permutation(20)]).toEqual(next);
    expect([...a.permutation(50)].sort((x, y) => x - y)).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(() => b.load({ state: -1 })).toThrow(/u32/);
  });
});
