import { describe, expect, it } from 'vitest';
import { presetTerms, scoreBuiltins } from '../../src/rewards/registry';
import { resolveConfig, type TrainConfigInput } from '../../src/rl/config';
import { Trainer, type TrainerEvent } from '../../src/rl/trainer';
import type { Checkpoint } from '../../src/rl/checkpoint';
import { defaultEngineConfig, resolveEngineConfig, type EngineConfig } from '../../src/rl/engineConfig';
import { testGpu } from '../helpers/gpu';
import { TOY_TRAINER_CONFIG, ToyPolicy, toyPrompts } from '../helpers/toyPolicy';

const MAX_REWARD = 0.3 * 2 + 1.0 * 2; // the seeds' preset: format 2, exact answer 2

const base: TrainConfigInput = { ...TOY_TRAINER_CONFIG, loss_type: 'grpo' };

async function makeTrainer(input: TrainConfigInput, extra: { events?: TrainerEvent[]; saved?: Checkpoint[]; resume?: Checkpoint; engine?: EngineConfig } = {}) {
  const gpu = await testGpu();
  const { config, loss } = resolveConfig({ ...base, ...input });
  const policy = await ToyPolicy.create(gpu);
  const trainer = await Trainer.create({
    gpu,
    policy,
    data: toyPrompts(),
    config,
    loss,
    runId: 'test',
    onEvent: (e) => extra.events?.push(e),
    saveCheckpoint: async (c) => void extra.saved?.push(c),
    resume: extra.resume,
    engine: extra.engine,
  });
  return { gpu, policy, trainer, config };
}

describe('trainer on a learnable toy policy', () => {
  it('raises the mean reward to at least 80% of its maximum within 80 steps', async () => {
    const { trainer, policy } = await makeTrainer({ max_steps: 80 });
    await trainer.run();
    const rewards = trainer.metricsHistory.map((m) => m.reward);
    const last = rewards.slice(-5).reduce((a, b) => a + b, 0) / 5;
    expect(rewards[0]).toBeLessThan(0.5 * MAX_REWARD);
    expect(last).toBeGreaterThanOrEqual(0.8 * MAX_REWARD);
    expect(scoreBuiltins(presetTerms('seeds'), { completion: await policy.greedyText(), answer: '3' }).total).toBeCloseTo(MAX_REWARD, 12);
  });
});

describe('trainer and the engine config', () => {
  it('packs each training forward within engine.micro_batch_tokens', async () => {
    const forwards = async (micro_batch_tokens: number) => {
      const { trainer, policy } = await makeTrainer({ max_steps: 1 }, { engine: { ...defaultEngineConfig(), micro_batch_tokens } });
      await trainer.run();
      return policy.forwards;
    };
    // One group of 8 completions of up to 7 tokens: one forward within the default budget; with a
    // budget under one completion, each completion alone (and the group's no-grad pass).
    expect(await forwards(defaultEngineConfig().micro_batch_tokens)).toBe(1);
    expect(await forwards(1)).toBeGreaterThanOrEqual(8);
  });

  it('recomputes layers in the backward as engine.gradient_checkpointing says, the config\'s transformers name mapping onto it', async () => {
    const checkpointing = async (input: TrainConfigInput, engine?: EngineConfig) => {
      const { trainer, policy } = await makeTrainer({ max_steps: 1, ...input }, { engine });
      await trainer.run();
      return [...new Set(policy.checkpointing)];
    };
    expect(await checkpointing({})).toEqual([true]);
    expect(await checkpointing({}, { ...defaultEngineConfig(), gradient_checkpointing: false })).toEqual([false]);
    const { engine: fromConfig } = resolveConfig({ ...base, gradient_checkpointing: false });
    expect(await checkpointing({}, resolveEngineConfig({}, 'engine', fromConfig))).toEqual([false]);
  });
});

describe("trainer and the policy's warnings", () => {
  it('adds what the policy reports (Policy.takeWarnings, e.g. a fallback from f16 activations) to that step\'s warnings', async () => {
    const { trainer, policy } = await makeTrainer({ max_steps: 2, logging_steps: 1 });
    const said = [['activation_storage f16: the final hidden state reaches |x| = 70000.0, beyond f16\'s 65504'], []];
    Object.assign(policy, { takeWarnings: () => said.shift() ?? [] });
    await trainer.run();
    expect(trainer.metricsHistory.map((m) => (m.warnings ?? []).filter((w) => w.startsWith('activation_storage')))).toEqual([[expect.stringMatching(/beyond f16's 65504/)], []]);
  });
});

async function weights(t: { gpu: Awaited<ReturnType<typeof testGpu>>; policy: ToyPolicy }): Promise<number[]> {
  const p = t.policy.lora[0];
  return [...(await t.gpu.readF32(p.A)), ...(await t.gpu.readF32(p.B))];
}

// GSPO off-policy: one generation of 2 prompts serves 4 optimizer steps (2 micro-batches x 2 iterations).
const offPolicy: TrainConfigInput = {
  max_steps: 4,
  per_device_train_batch_size: 8,
  steps_per_generation: 2,
  num_iterations: 2,
  importance_sampling_level: 'sequence',
  loss_type: 'grpo',
  beta: 0.04,
  epsilon: 3e-4,
  epsilon_high: 4e-4,
};

describe('trainer bookkeeping', () => {
  it('generates once per generation batch, recomputes old and reference log-probs, logs TRL metrics', async () => {
    const events: TrainerEvent[] = [];
    const t = await makeTrainer(offPolicy, { events });
    expect(await t.trainer.run()).toBe('finished');
    // 2 prompts: old + reference forward each at generation, then one training forward per step.
    expect(t.policy.forwards).toBe(2 * 2 + 4);
    const h = t.trainer.metricsHistory;
    expect(h.map((m) => m.step)).toEqual([1, 2, 3, 4]);
    expect(h[0].reward).toBeTypeOf('number');
    expect(h.slice(1).every((m) => m.reward === undefined)).toBe(true);
    for (const key of ['rewards/format/mean', 'rewards/format/std', 'rewards/correctness/mean', 'rewards/correctness/std', 'reward_std', 'frac_reward_zero_std', 'completions/mean_length', 'completions/clipped_ratio']) {
      expect(h[0][key], key).toBeTypeOf('number');
    }
    for (const m of h) {
      for (const key of ['loss', 'kl', 'entropy', 'clip_ratio/low_mean', 'clip_ratio/high_mean', 'clip_ratio/region_mean', 'grad_norm', 'learning_rate', 'step_time', 'tokens_per_second', 'sampling/sampling_logp_difference/mean', 'sampling/sampling_logp_difference/max']) {
        expect(Number.isFinite(m[key]), `${key} at step ${m.step}`).toBe(true);
      }
    }
    // Step 1 is on the old policy: ratios 1, nothing clipped, KL 0; later steps move off it.
    expect(h[0]['clip_ratio/region_mean']).toBe(0);
    expect(h[0].kl).toBeCloseTo(0, 6);
    expect(h[3].kl).toBeGreaterThan(0);
    expect(h[0]['sampling/sampling_logp_difference/max']).toBeLessThan(1e-5);
    expect(h.every((m) => m.grad_norm > 0)).toBe(true);
    expect(events.filter((e) => e.type === 'step')).toHaveLength(4);
    expect(events.filter((e) => e.type === 'state').map((e) => (e as { state: string }).state)).toEqual(['running', 'finished']);
  });

  it('pausing inside a step rolls it back, checkpoints and, resumed, ends with the same weights', async () => {
    const straight = await makeTrainer({ ...offPolicy, per_device_train_batch_size: 16 });
    await straight.trainer.run();
    const events: TrainerEvent[] = [];
    const saved: Checkpoint[] = [];
    const t = await makeTrainer({ ...offPolicy, per_device_train_batch_size: 16 }, { events, saved });
    const forward = t.policy.forward.bind(t.policy);
    t.policy.forward = async (batch, o) => {
      const r = await forward(batch, o);
      if (t.policy.forwards === 8 + 2 + 1) t.trainer.pause(); // 8 old/ref passes, step 1, then inside step 2 after its first group
      return r;
    };
    const done = t.trainer.run();
    await expect.poll(() => t.trainer.status).toBe('paused');
    expect(t.trainer.currentStep).toBe(1);
    expect(saved.map((c) => c.meta.step)).toEqual([1]);
    t.trainer.resume();
    expect(await done).toBe('finished');
    expect(await weights(t)).toEqual(await weights(straight));
    expect(t.trainer.metricsHistory.map((m) => m.loss)).toEqual(straight.trainer.metricsHistory.map((m) => m.loss));
    expect(events.filter((e) => e.type === 'checkpoint').map((e) => (e as { reason: string }).reason)).toEqual(['pause', 'end']);
  });

  it('resumes from a checkpoint taken inside a generation batch and continues identically', async () => {
    const straight = await makeTrainer(offPolicy);
    await straight.trainer.run();
    const saved: Checkpoint[] = [];
    const first = await makeTrainer({ ...offPolicy, save_steps: 2 }, { saved });
    await first.trainer.run();
    const atTwo = saved.find((c) => c.meta.step === 2)!;
    expect(atTwo.meta.pending?.consumed).toBe(2);
    const { encodeCheckpoint, decodeCheckpoint } = await import('../../src/rl/checkpoint');
    const files = encodeCheckpoint(atTwo);
    const resumed = await makeTrainer(offPolicy, { resume: await decodeCheckpoint(files.json, files.safetensors) });
    expect(resumed.trainer.currentStep).toBe(2);
    await resumed.trainer.run();
    expect(resumed.policy.forwards).toBe(2); // the pending generation is reused: no new sampling or old/ref passes
    expect(await weights(resumed)).toEqual(await weights(straight));
    expect(resumed.trainer.metricsHistory.map((m) => m.step)).toEqual([1, 2, 3, 4]);
    expect(resumed.trainer.metricsHistory.slice(2).map((m) => m.loss)).toEqual(straight.trainer.metricsHistory.slice(2).map((m) => m.loss));
  });
});

describe('trainer release', () => {
  it("gives the optimizer's buffers back to the pool once the run is over, and refuses while it runs", async () => {
    const { gpu, trainer } = await makeTrainer({ max_steps: 1 });
    const running = trainer.run();
    expect(() => trainer.release()).toThrow(/running trainer cannot be released/);
    await running;
    const before = gpu.pool.stats.inUse;
    trainer.release();
    const freed = before - gpu.pool.stats.inUse;
    // Two moments the size of the toy policy's parameters at least, and the scratch.
    expect(freed).toBeGreaterThan(0);
    trainer.release(); // a second call frees nothing more
    expect(before - gpu.pool.stats.inUse).toBe(freed);
  });
});
