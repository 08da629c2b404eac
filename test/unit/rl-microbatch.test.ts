// Micro-batched group steps (src/rl/microBatch.ts): a group split into chunks of whole sequences
// gives the same loss and the same LoRA gradients as the whole group in one training forward,
// for the sequence-level (GSPO) ratio and each token-level aggregation, on tiny-a with its
// fixture adapter (non-zero A and B) and old log-probs off the current ones (ratios ≠ 1, some clipped).
import { beforeAll, describe, expect, it } from 'vitest';
import type { Gpu } from '../../src/gpu';
import { importPeft } from '../../src/adapter/peft';
import { uploadAdapter } from '../../src/adapter/upload';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { nodeDirFiles } from '../../src/model/safetensors';
import { Qwen3VLPolicy } from '../../src/model/train';
import { RlLoss } from '../../src/ops/rlLoss';
import type { LoraParams } from '../../src/ops/loraParams';
import { resolveLossConfig, type LossConfigInput } from '../../src/rl/lossConfig';
import type { PreparedPrompt } from '../../src/rl/policy';
import { groupStep, sequenceChunks } from '../../src/rl/microBatch';
import { Rng } from '../../src/data/random';
import { testGpu } from '../helpers/gpu';
import { fixturePrompt, modelDir, modelFiles } from '../helpers/modelFixtures';

describe('sequenceChunks', () => {
  it('packs consecutive sequences up to the budget, a longer one alone, in even chunks', () => {
    expect(sequenceChunks([5, 5, 5, 5], 10)).toEqual([[0, 2], [2, 4]]);
    expect(sequenceChunks([5, 12, 3, 3], 10)).toEqual([[0, 1], [1, 2], [2, 4]]);
    // As even as the budget allows: 4 + 4 of 8 x 768 rows, not 5 + 3.
    expect(sequenceChunks(new Array(8).fill(768), 4096)).toEqual([[0, 4], [4, 8]]);
    expect(sequenceChunks([5, 5], Infinity)).toEqual([[0, 2]]);
    expect(() => sequenceChunks([5], 0)).toThrow(RangeError);
  });
});

describe('micro-batched group step (tiny-a)', () => {
  const configs: [string, LossConfigInput][] = [
    ['GSPO (sequence ratio, grpo)', { importance_sampling_level: 'sequence', loss_type: 'grpo', epsilon: 3e-4, epsilon_high: 4e-4 }],
    ['bnpo', { loss_type: 'bnpo', epsilon: 0.02 }],
    ['dr_grpo', { loss_type: 'dr_grpo', epsilon: 0.02 }],
    ['dapo with beta', { loss_type: 'dapo', epsilon: 0.02, beta: 0.04, num_items_in_batch: 40 }],
  ];

  let gpu: Gpu;
  let model: Qwen3VL;
  let params: LoraParams[];
  let policy: Qwen3VLPolicy;
  let prompt: PreparedPrompt;
  let rl: RlLoss;
  beforeAll(async () => {
    gpu = await testGpu();
    model = await Qwen3VL.load(gpu, modelFiles('tiny-a'), { quant: 'none' });
    params = uploadAdapter(gpu, await importPeft(nodeDirFiles(`${modelDir('tiny-a')}/lora`)), model.config.text.numLayers);
    model.attachLora(params);
    policy = new Qwen3VLPolicy(model);
    prompt = await fixturePrompt(`${modelDir('tiny-a')}/lora`);
    rl = await RlLoss.create(gpu);
  });

  it.each(configs)('%s: chunks of 2, 1 and 1 sequences give the whole group’s loss and gradients (1e-5 relative)', async (_, input) => {
    const rng = new Rng(5);
    const lengths = [7, 3, 9, 5];
    const completions = lengths.map((n) => Array.from({ length: n }, () => Math.floor(rng.next() * 200)));
    const G = completions.length;
    const T = Math.max(...lengths);
    const mask = new Float32Array(G * T);
    completions.forEach((c, g) => mask.fill(1, g * T, g * T + c.length));
    // Old and reference log-probs near the current ones: importance ratios spread around 1.
    const now = await gpu.readF32((await policy.forward({ prompt, completions }, { temperature: 1, lora: true, train: false })).logps);
    const near = (s: number) => Array.from(now, (v, k) => (mask[k] ? v + s * (rng.next() - 0.5) : 0));
    const config = resolveLossConfig({ ...input, num_generations: G, max_completion_length: T });
    const loss = { mask, old: near(0.05), ref: config.beta > 0 ? near(0.2) : null, sampling: null, scores: { rewards: [0.1, 0.9, 0.4, 0.7] }, config };

    const run = async (tokenBudget: number) => {
      const rec = gpu.recorder();
      for (const p of params) model.decoder.ops.lora.zeroGrad(rec, p);
      await rec.submit();
      const r = await groupStep(gpu, policy, rl, { batch: { prompt, completions }, temperature: 1, loss, tokenBudget });
      const grads = await Promise.all(params.flatMap((p) => [gpu.readF32(p.dA), gpu.readF32(p.dB)]));
      return { ...r, grads };
    };
    const P = prompt.inputIds.length;
    const whole = await run(Infinity);
    {
      const split = await run(P + 12); // the prompt and 12 completion tokens: chunks of 7 + 3, 9 and 5
      expect(split.result.loss).toBeCloseTo(whole.result.loss, 6);
      let worst = 0;
      whole.grads.forEach((want, i) => {
        const scale = Math.max(...want.map(Math.abs));
        expect(scale).toBeGreaterThan(0);
        const err = Math.max(...split.grads[i].map((v, k) => Math.abs(v - want[k]))) / scale;
        worst = Math.max(worst, err);
      });
      expect(worst).toBeLessThan(1e-5);
      expect(Array.from(split.logps)).toEqual(Array.from(whole.logps).map((v, k) => (mask[k] ? expect.closeTo(v, 5) : expect.anything())));
    }
  });
});
