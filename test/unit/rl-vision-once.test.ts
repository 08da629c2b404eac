// Images are encoded once per prompt group: in one generation batch the vision tower sees each
// distinct image exactly once, though its group is sampled, scored by the old and the reference
// policy, and trained in chunks of one completion each (a token budget below every group).
import { describe, expect, it } from 'vitest';
import { syntheticDataset } from '../../src/data/synthetic';
import type { GridThw } from '../../src/model/vision';
import { defaultEngineConfig } from '../../src/rl/engineConfig';
import { Trainer } from '../../src/rl/trainer';
import { onEncode, openTinyRun, watchedSource } from '../helpers/tinySession';

describe('the vision tower in an RL step', () => {
  it('encodes each distinct image once across sampling, old/ref log-probs and every training chunk', async () => {
    // One generation of 4 prompts serves 2 optimizer steps of 2 groups: old log-probs are
    // recomputed (the policy moves inside the generation), beta > 0 adds the reference forward.
    const { gpu, session, config, loss } = await openTinyRun('vlrl-vision-once-', {
      per_device_train_batch_size: 4,
      steps_per_generation: 2,
      beta: 0.04,
      seed: 5,
      // A subset of the modules with lora_dropout: the chunks' no-grad and training forwards drop too.
      lora: { lora_dropout: 0.1, target_modules: ['q_proj', 'v_proj', 'down_proj'] },
    });
    const rows = syntheticDataset({ seed: 11, count: 4, tasks: ['counting'], size: 128 });
    const keys = new Set<string>();
    const data = watchedSource(session.promptSource(rows), (p) => p.images.forEach((im) => keys.add(im.key)));
    const encoded: GridThw[][] = [];
    onEncode(session.model.vision, (grids) => encoded.push([...grids]));
    const forwards = { n: 0 };
    const forward = session.policy.forward.bind(session.policy);
    session.policy.forward = (batch, opts) => {
      forwards.n++;
      return forward(batch, opts);
    };
    const trainer = await Trainer.create({ gpu, policy: session.policy, data, config, loss, runId: 'vision-once', engine: { ...defaultEngineConfig(), micro_batch_tokens: 1 } });
    expect(await trainer.run()).toBe('finished');
    expect(trainer.metricsHistory.every((m) => Number.isFinite(m.loss) && m.grad_norm > 0)).toBe(true);
    expect(keys.size).toBe(4);
    // Old + reference forward per group, and per step two groups of two one-completion chunks,
    // each chunk a no-grad and a training forward: the features were needed 4·2 + 2·2·2·2 times.
    expect(forwards.n).toBe(4 * 2 + 2 * 2 * 2 * 2);
    expect(encoded.flat()).toHaveLength(keys.size);
  }, 600_000);
});
