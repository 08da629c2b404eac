// Issue 5: the trainer teaches a real Qwen3-VL (the bundled demo model, 4-bit) a task the reward
// can teach: on triangle questions, which it was trained to answer mostly as "The answer is N.",
// open with a <REASONING> block (a custom reward, run in the sandbox, on 4-token completions so a
// step stays cheap). From about 0.4 the mean rollout reward, averaged over 4 consecutive steps,
// must reach 80% of its maximum (1) within 24 steps. (A random-weight fixture cannot be taught this
// way: its final RMSNorm bounds the hidden state and its tied random embedding spreads the logits
// too thinly for any token to win.)
// On an H100 the same run reads 0.38 0.38 0.38 0.62 0.38 0.5 0.38 0.38 1 0.62 0.75 0.88 1 0.88 0.75
// 0.75 1 0.88 0.88 0.88 1 1 1 1 (4-step mean first ≥ 0.8 at steps 11-14). At lr 1e-2 it rises
// sooner but dips back (0.13 at step 18 on lavapipe), so the rate is 3e-3.
// (A file of its own so that CI runs it beside the demo's test.)
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEMO_SETS, DEMO_TRAIN_CONFIG } from '../../src/data/demo';
import { qwen3vlFactory, trainRun } from '../../src/node/commands/train';
import { createNodeSandbox } from '../../src/rewards/sandboxNode';
import type { TrainConfigInput } from '../../src/rl/config';
import { testGpu } from '../helpers/gpu';

const TEACH_STEPS = 24;

const reasoningFirst: TrainConfigInput = {
  ...DEMO_TRAIN_CONFIG,
  dataset: { kind: 'synthetic', tasks: ['triangle_angle'], count: 512, seed: DEMO_SETS.rl.seed, size: 128 },
  rewards: [{ name: 'reasoning_first', weight: 1, source: "completion.startsWith('<RE') ? 1 : 0" }],
  num_generations: 8,
  per_device_train_batch_size: 8,
  max_completion_length: 4,
  mask_truncated_completions: false,
  learning_rate: 3e-3,
  max_steps: TEACH_STEPS,
  save_steps: TEACH_STEPS,
};

describe('the trainer teaches a real Qwen3-VL (the demo model, 4-bit, lavapipe)', () => {
  it(`a teachable reward rises from its start to at least 80% of its maximum (4-step mean) within ${TEACH_STEPS} steps`, async () => {
    const gpu = await testGpu();
    const rewards: number[] = [];
    const sandbox = createNodeSandbox();
    try {
      const { state } = await trainRun(gpu, qwen3vlFactory({ quant: 'q4', warn: () => undefined }), {
        config: reasoningFirst,
        outDir: mkdtempSync(join(tmpdir(), 'vlrl-teach-')),
        resume: false,
        sandbox,
        log: (line) => rewards.push((JSON.parse(line) as { reward: number }).reward),
        warn: () => undefined,
      });
      console.log(`reasoning_first reward per step: ${rewards.map((r) => r.toFixed(2)).join(' ')}`);
      expect(state).toBe('finished');
    } finally {
      sandbox.dispose();
    }
    expect(rewards).toHaveLength(TEACH_STEPS);
    expect((rewards[0] + rewards[1]) / 2).toBeLessThan(0.6);
    const windows = rewards.slice(3).map((_, i) => (rewards[i] + rewards[i + 1] + rewards[i + 2] + rewards[i + 3]) / 4);
    console.log(`4-step means: ${windows.map((r) => r.toFixed(2)).join(' ')}`);
    expect(Math.max(...windows)).toBeGreaterThanOrEqual(0.8);
  }, 1_800_000);
});
