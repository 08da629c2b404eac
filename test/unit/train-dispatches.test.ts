// The dispatches of one training step (the forward with gradient checkpointing, then the
// backward) on tiny-a with LoRA on all seven projections of every layer: the adapters of one input
// share their dispatches (Lora.forwardGroup, Lora.backwardGroup). Per layer, for the four inputs
// (q/k/v's normed rows, o's attention output, gate/up's normed rows, down's SwiGLU):
//   forward     one u = x·Aᵀ (lora.thin[u]) and one update (lora.up_add[B]) each       4 + 4
//   recompute   the updates alone (the forward kept u), down_proj's left out (its
//               output is kept)                                                          3
//   backward    one t = s·dY·B (lora.thin[t]), dA and dB of every adapter of the input in two
//               (lora.grad_parts, lora.grad_sum), one dX update (lora.up_add[A]) each  4 + 8 + 4
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { importPeft } from '../../src/adapter/peft';
import { uploadAdapter } from '../../src/adapter/upload';
import { Recorder } from '../../src/gpu';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { nodeDirFiles } from '../../src/model/safetensors';
import { Qwen3VLPolicy } from '../../src/model/train';
import { testGpu } from '../helpers/gpu';
import { fixturePrompt, modelDir, modelFiles } from '../helpers/modelFixtures';

afterEach(() => vi.restoreAllMocks());

describe('training step dispatches', () => {
  it('tiny-a, LoRA on q/k/v/o/gate/up/down: one u, update, t and dX dispatch per input of a layer', async () => {
    const gpu = await testGpu();
    const model = await Qwen3VL.load(gpu, modelFiles('tiny-a'), { quant: 'none' });
    const params = uploadAdapter(gpu, await importPeft(nodeDirFiles(`${modelDir('tiny-a')}/lora`)), model.config.text.numLayers);
    model.attachLora(params);
    const L = model.config.text.numLayers;
    expect(params.length).toBe(7 * L);
    const batch = JSON.parse(readFileSync(`${modelDir('tiny-a')}/lora/batch.json`, 'utf8')) as { completions: number[][]; temperature: number };
    const prompt = await fixturePrompt(`${modelDir('tiny-a')}/lora`);
    const policy = new Qwen3VLPolicy(model);
    // A first step compiles every kernel; the second is counted.
    const step = async () => {
      const fwd = await policy.forward({ prompt, completions: batch.completions }, { temperature: batch.temperature, lora: true, train: true, gradientCheckpointing: true });
      await policy.backward(fwd.mask);
    };
    await step();

    const byKernel = new Map<string, number>();
    const dispatch = Recorder.prototype.dispatch;
    vi.spyOn(Recorder.prototype, 'dispatch').mockImplementation(function (this: Recorder, ...args: Parameters<Recorder['dispatch']>) {
      const name = args[0].name;
      byKernel.set(name, (byKernel.get(name) ?? 0) + 1);
      return dispatch.apply(this, args);
    });
    const before = gpu.hostStats.dispatches;
    await step();
    const total = gpu.hostStats.dispatches - before;
    const count = (prefix: string) => [...byKernel].reduce((a, [name, n]) => a + (name.startsWith(prefix) ? n : 0), 0);
    console.log(`tiny-a training step: ${total} dispatches; ${[...byKernel].filter(([n]) => n.startsWith('lora.')).map(([n, c]) => `${n} ${c}`).join(', ')}`);
    expect(count('lora.thin[u]')).toBe(4 * L);
    expect(count('lora.thin[t]')).toBe(4 * L);
    expect(count('lora.up_add[B]')).toBe(7 * L);
    expect(count('lora.up_add[A]')).toBe(4 * L);
    expect(count('lora.grad_parts')).toBe(4 * L);
    expect(count('lora.grad_sum')).toBe(4 * L);
    // Before the groups (a dispatch for every adapter's u, update, t, dA, dB and dX: at these
    // sizes the GEMMs are not split along K) and the kept u: 316.
    expect(total).toBe(232);
  }, 300_000);
});
