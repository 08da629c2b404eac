// Training on a GPU whose storage bindings hold fewer packed rows than a group has
// (DeviceOptions.capLimits): the policy says how many rows its widest training buffer allows
// (Qwen3VLPolicy.maxTrainingRows), and the group step and the no-grad scoring split the group into
// chunks of whole sequences within it instead of refusing a buffer. Loss, gradients and log-probs
// equal those of the same group in one forward on an uncapped GPU.
import { afterAll, describe, expect, it } from 'vitest';
import type { Gpu } from '../../src/gpu';
import { importPeft } from '../../src/adapter/peft';
import { uploadAdapter } from '../../src/adapter/upload';
import { Rng } from '../../src/data/random';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { nodeDirFiles } from '../../src/model/safetensors';
import { Qwen3VLPolicy } from '../../src/model/train';
import { createNodeGpu } from '../../src/node/gpu';
import { RlLoss } from '../../src/ops/rlLoss';
import { groupStep, scoreLogps } from '../../src/rl/microBatch';
import { resolveLossConfig } from '../../src/rl/lossConfig';
import { testGpu } from '../helpers/gpu';
import { fixturePrompt, modelDir, modelFiles } from '../helpers/modelFixtures';
import { expectClose } from '../helpers/reference';

const gpus: Gpu[] = [];
afterAll(() => gpus.forEach((g) => g.destroy()));

async function policyOn(gpu: Gpu) {
  const model = await Qwen3VL.load(gpu, modelFiles('tiny-a'));
  const params = uploadAdapter(gpu, await importPeft(nodeDirFiles(`${modelDir('tiny-a')}/lora`)), model.config.text.numLayers);
  model.attachLora(params);
  return { model, params, policy: new Qwen3VLPolicy(model), rl: await RlLoss.create(gpu) };
}

describe('training with storage bindings smaller than a group', () => {
  it('splits the group step and the scoring forward into chunks that fit; loss, gradients and log-probs equal one forward uncapped', async () => {
    const prompt = await fixturePrompt(`${modelDir('tiny-a')}/lora`);
    const P = prompt.inputIds.length;
    const rng = new Rng(7);
    const completions = [9, 6, 11, 4, 8].map((n) => Array.from({ length: n }, () => Math.floor(rng.next() * 200)));
    const rows = P + completions.reduce((a, c) => a + c.length, 0);
    // Bindings of 200 KiB (the patch embedding's 192 KiB fits); tiny-a's widest training row is its
    // log-prob chunk of 1024 logits, so 50 rows fit.
    const binding = 200 * 1024;
    const capped = await createNodeGpu({ driver: process.env.VLRL_VK ?? 'lavapipe', capLimits: { maxStorageBufferBindingSize: binding, maxBufferSize: 4 << 20 } });
    gpus.push(capped);
    const small = await policyOn(capped);
    const full = await policyOn(await testGpu());
    expect(small.policy.maxTrainingRows).toBe(50);
    expect(rows).toBeGreaterThan(small.policy.maxTrainingRows);

    const G = completions.length;
    const T = Math.max(...completions.map((c) => c.length));
    const mask = new Float32Array(G * T);
    completions.forEach((c, g) => mask.fill(1, g * T, g * T + c.length));
    const batch = { prompt, completions };
    const scored = await Promise.all([small, full].map((s) => scoreLogps(s.model.gpu, s.policy, batch, { temperature: 1, lora: true })));
    expectClose(scored[0].filter((_, k) => mask[k]), scored[1].filter((_, k) => mask[k]), { rtol: 0, atol: 1e-4, what: 'scored log-probs' });

    const config = resolveLossConfig({ importance_sampling_level: 'sequence', loss_type: 'grpo', epsilon: 3e-4, epsilon_high: 4e-4, num_generations: G, max_completion_length: T });
    const old = Array.from(scored[1], (v, k) => (mask[k] ? v + 0.05 * (rng.next() - 0.5) : 0));
    const loss = { mask, old, ref: null, sampling: null, scores: { rewards: [0.1, 0.9, 0.4, 0.7, 0.3] }, config };
    const step = async (s: Awaited<ReturnType<typeof policyOn>>) => {
      const rec = s.model.gpu.recorder();
      for (const p of s.params) s.model.decoder.ops.lora.zeroGrad(rec, p);
      await rec.submit();
      // No budget of its own: only the device's rows limit the forward.
      const r = await groupStep(s.model.gpu, s.policy, s.rl, { batch, temperature: 1, loss, tokenBudget: Infinity });
      return { loss: r.result.loss, grads: await Promise.all(s.params.flatMap((p) => [s.model.gpu.readF32(p.dA), s.model.gpu.readF32(p.dB)])) };
    };
    const [split, whole] = [await step(small), await step(full)];
    expect(split.loss).toBeCloseTo(whole.loss, 5);
    let worst = 0;
    whole.grads.forEach((want, i) => {
      const scale = Math.max(...want.map(Math.abs));
      expect(scale).toBeGreaterThan(0);
      worst = Math.max(worst, Math.max(...split.grads[i].map((v, k) => Math.abs(v - want[k]))) / scale);
    });
    expect(worst).toBeLessThan(1e-4);
  }, 600_000);
});
