// Training forwards with their hidden states (and without checkpointing each layer's wide
// intermediates) kept in f16 (EngineConfig.activation_storage, src/model/activationStorage.ts) on
// the tiny fixtures: the log-probs are those of the f32 path (the forward computes in f32; only the
// kept copies are rounded), the LoRA gradients move from the f32 path's within a measured bound,
// and a value beyond f16's range falls back to f32 with a warning, giving the f32 gradients (the
// clamped backward's additions taken back).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { importPeft } from '../../src/adapter/peft';
import { uploadAdapter } from '../../src/adapter/upload';
import { Tensor } from '../../src/gpu';
import { chooseActivationStorage } from '../../src/model/activationStorage';
import { rangeSlotName, rangeSlots } from '../../src/model/decoder';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { nodeDirFiles } from '../../src/model/safetensors';
import { Qwen3VLPolicy } from '../../src/model/train';
import { testGpu } from '../helpers/gpu';
import { fixturePrompt, MODELS, modelDir, modelFiles } from '../helpers/modelFixtures';

/** ‖a − b‖ / ‖b‖ over every adapter gradient at once. */
function relativeDistance(a: Float32Array[], b: Float32Array[]): number {
  let d = 0;
  let n = 0;
  a.forEach((x, k) => x.forEach((v, i) => ((d += (v - b[k][i]) ** 2), (n += b[k][i] ** 2))));
  return Math.sqrt(d / n);
}

async function setup(m: (typeof MODELS)[number]) {
  const gpu = await testGpu();
  const model = await Qwen3VL.load(gpu, modelFiles(m), { quant: 'none' });
  const params = uploadAdapter(gpu, await importPeft(nodeDirFiles(`${modelDir(m)}/lora`)), model.config.text.numLayers);
  model.attachLora(params);
  const batch = JSON.parse(readFileSync(`${modelDir(m)}/lora/batch.json`, 'utf8')) as { completions: number[][]; temperature: number };
  const prompt = await fixturePrompt(`${modelDir(m)}/lora`);
  const policy = new Qwen3VLPolicy(model);
  /** Log-probs and d(Σ log-probs)/d(every A, B) of one training forward and backward, added to
   * the gradients there (zeroed first unless `accumulate`). */
  const step = async (gradientCheckpointing: boolean, accumulate = false) => {
    const rec = gpu.recorder();
    if (!accumulate) for (const p of params) model.decoder.ops.lora.zeroGrad(rec, p);
    await rec.submit();
    const fwd = await policy.forward({ prompt, completions: batch.completions }, { temperature: batch.temperature, lora: true, train: true, gradientCheckpointing });
    const logps = await gpu.readF32(fwd.logps);
    await policy.backward(fwd.mask);
    const grads = await Promise.all(params.flatMap((p) => [gpu.readF32(p.dA), gpu.readF32(p.dB)]));
    return { logps, grads };
  };
  return { gpu, model, policy, prompt, step };
}

// The bound on ‖g_f16 − g_f32‖ / ‖g_f32‖: measured on lavapipe 2.7e-4 (tiny-b) and 3.9e-4
// (tiny-a) with checkpointing, 3.9e-4 and 4.8e-4 without (printed below); f16 rounds each kept
// value by at most 2^-11 ≈ 4.9e-4 of itself.
const GRAD_BOUND = 1e-3;

// SwiftShader (VLRL_VK=swiftshader) offers no shader-f16; lavapipe, the default, does.
describe.skipIf(process.env.VLRL_VK === 'swiftshader').each(MODELS)('%s: hidden states kept in f16', (m) => {
  it('gives the f32 path\'s log-probs and its LoRA gradients within 1e-3 of their norm, with and without checkpointing', async () => {
    const { model, step } = await setup(m);
    for (const checkpointing of [true, false]) {
      model.setActivationStorage('f32');
      const f32 = await step(checkpointing);
      model.setActivationStorage('f16');
      const f16 = await step(checkpointing);
      // The forward itself runs in f32: only what the backward reads is rounded.
      expect(Array.from(f16.logps)).toEqual(Array.from(f32.logps));
      const d = relativeDistance(f16.grads, f32.grads);
      console.log(`${m}${checkpointing ? '' : ' (no checkpointing)'}: LoRA gradients with f16 hidden states move by ${d.toExponential(2)} of their norm`);
      expect(d, 'the f16 states are rounded, so the gradients move').toBeGreaterThan(0);
      expect(d).toBeLessThan(GRAD_BOUND);
    }
    model.setActivationStorage('f32');
  });

  it.each([true, false])('falls back to f32 states with a warning where one passes f16\'s range (an embedding entry of 1e5; checkpointing %s)', async (checkpointing) => {
    const { gpu, model, policy, prompt, step } = await setup(m);
    // One entry of the prompt's first token's embedding row set to 1e5: h_0 holds it.
    const table = model.weights.language.embed;
    const block = table.blocks[0];
    if (table.blocks.length !== 1 || block.kind !== 'dense') throw new Error('one dense embedding block expected (quant none)');
    const H = table.hidden;
    const row = new Tensor(block.w.buffer, [H], 'f32', 'embed row', block.w.byteOffset + 4 * H * prompt.inputIds[0]);
    const values = await gpu.readF32(row);
    values[3] = 1e5;
    gpu.write(row, values);
    model.setActivationStorage('f32');
    const f32 = await step(checkpointing);
    model.setActivationStorage('f16');
    // On top of the f32 step's gradients (as a second micro-batch adds to the first's): the
    // clamped backward's additions are taken back before the f32 one adds, so they double exactly.
    const fellBack = await step(checkpointing, true);
    const warnings = policy.takeWarnings();
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/hidden state entering layer 0 reaches \|x\| = 100000, beyond f16's 65504; hidden states are kept in f32 from now on/);
    expect(policy.activationStorage).toBe('f32');
    expect(Array.from(fellBack.logps)).toEqual(Array.from(f32.logps));
    fellBack.grads.forEach((g, k) => expect(Array.from(g), `gradient ${k}`).toEqual(Array.from(f32.grads[k], (v) => 2 * v)));
    expect(policy.takeWarnings(), 'said once').toEqual([]);
  });
});

describe('range slots', () => {
  it('name each kept hidden state, then each layer\'s wide intermediates', () => {
    const L = 3;
    expect(rangeSlots(L)).toBe(L + 1 + 12 * L);
    expect(rangeSlotName(0, L)).toBe('the hidden state entering layer 0');
    expect(rangeSlotName(L, L)).toBe('the final hidden state');
    expect(rangeSlotName(L + 1, L)).toBe("layer 0's xn_attn");
    expect(rangeSlotName(L + 1 + 12 + 8, L)).toBe("layer 1's gate");
    expect(rangeSlotName(rangeSlots(L) - 1, L)).toBe("layer 2's hmid");
  });
});

describe('chooseActivationStorage', () => {
  it("takes f16 for 'auto' only beside f16 products with shader-f16, and refuses 'f16' without shader-f16", () => {
    expect(chooseActivationStorage('auto', { shaderF16: true }, 'f16').storage).toBe('f16');
    for (const p of ['f32', 'int8', 'int8-1limb', 'int8-row'] as const) expect(chooseActivationStorage('auto', { shaderF16: true }, p).storage).toBe('f32');
    expect(chooseActivationStorage('auto', { shaderF16: false }, 'f16')).toEqual({ storage: 'f32', why: 'auto: no shader-f16 on this device' });
    expect(chooseActivationStorage('f16', { shaderF16: true }, 'int8').storage).toBe('f16');
    expect(chooseActivationStorage('f32', { shaderF16: true }, 'f16').storage).toBe('f32');
    expect(() => chooseActivationStorage('f16', { shaderF16: false }, 'f16')).toThrow(/GPU feature 'shader-f16' is required.*activation_storage f16/);
  });
});
