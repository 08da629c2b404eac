// Progress inside a training step as the engine worker reports it (src/worker/stepProgress.ts):
// read off the Policy calls the trainer makes, in the order it makes them. A fake policy stands in
// for the model; no GPU.
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/rl/config';
import type { Completion, Policy, PreparedPrompt, TrainingForward } from '../../src/rl/policy';
import { progressPolicy, type RunEvent, type StepProgress } from '../../src/worker/stepProgress';

const prompt = (id: string): PreparedPrompt => ({ id, inputIds: new Int32Array([1, 2]), images: [] });
const completions = (lengths: number[]): Completion[] => lengths.map((n) => ({ tokens: Array(n).fill(7), text: '', samplingLogps: Array(n).fill(0), terminated: true }));

describe('step progress from the policy calls', () => {
  it('counts generated groups with their tokens, scoring, and training groups by micro-batch', async () => {
    // 2 completions a prompt, 2 prompts a micro-batch, 2 micro-batches: 4 prompts generated and trained a step.
    const { config } = resolveConfig({ num_generations: 2, per_device_train_batch_size: 4, gradient_accumulation_steps: 2, beta: 0.1 });
    const lengths = [[3, 5], [1, 1], [4, 4], [2, 6]];
    let g = 0;
    const inner: Policy = {
      lora: [],
      // Reports its tokens once mid-way, as the sampler's readbacks would.
      generate: async (_p, _n, opts) => {
        const c = completions(lengths[g++]);
        opts.onTokens?.(1);
        return c;
      },
      forward: async () => ({}) as TrainingForward,
      backward: async () => undefined,
    };
    const events: StepProgress[] = [];
    const p = progressPolicy(inner, config, (e: RunEvent) => e.type === 'progress' && events.push(e.progress));
    p.stepBoundary(4);
    const ps = ['a', 'b', 'c', 'd'].map(prompt);
    for (const x of ps) await p.policy.generate(x, 2, { temperature: 1, topP: 1, topK: 0, maxNewTokens: 8, seed: 0 });
    // Reference log-probs (beta > 0): no-grad forwards before training.
    for (const x of ps) await p.policy.forward({ prompt: x, completions: [] }, { temperature: 1, lora: false, train: false });
    // Group a goes through in two chunks (one group, not two); then b, c, d.
    for (const x of [ps[0], ps[0], ps[1], ps[2], ps[3]]) await p.policy.forward({ prompt: x, completions: [] }, { temperature: 1, lora: true, train: true });

    expect(events.every((e) => e.step === 5)).toBe(true);
    const generating = events.filter((e) => e.phase === 'generating');
    expect(generating.map((e) => e.groupTokens)).toEqual([[], [], [8], [8], [8], [8, 2], [8, 2], [8, 2], [8, 2, 8], [8, 2, 8], [8, 2, 8], [8, 2, 8, 8]]);
    expect(generating.map((e) => e.tokensInFlight)).toEqual([0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0]);
    expect(events.filter((e) => e.phase === 'scoring')).toHaveLength(4);
    expect(events.filter((e) => e.phase === 'training').map((e) => [e.trainingGroup, e.microBatch])).toEqual([[1, 1], [1, 1], [2, 1], [3, 2], [4, 2]]);
    expect(events.at(-1)).toMatchObject({ groupsToGenerate: 4, trainingGroups: 4, microBatches: 2 });

    // The next step starts from zero.
    p.stepBoundary(5);
    await p.policy.forward({ prompt: ps[0], completions: [] }, { temperature: 1, lora: true, train: true });
    expect(events.at(-1)).toMatchObject({ step: 6, phase: 'training', trainingGroup: 1, microBatch: 1, groupTokens: [] });
  });
});
