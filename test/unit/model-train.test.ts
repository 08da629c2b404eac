// The training path against PyTorch + PEFT autograd on the tiny fixtures: per-token log-probs of a
// completion after a one-image prompt, and the gradients of their sum with respect to every LoRA
// A and B (non-zero A and B, so both gradients are non-trivial).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { importPeft } from '../../src/adapter/peft';
import { uploadAdapter } from '../../src/adapter/upload';
import { toFloat32, toInt32 } from '../../src/model/dtype';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { nodeDirFiles, nodeFileSource, readAllTensors } from '../../src/model/safetensors';
import { Qwen3VLPolicy } from '../../src/model/train';
import type { PreparedPrompt } from '../../src/rl/policy';
import { testGpu } from '../helpers/gpu';
import { MODELS, modelDir, modelFiles } from '../helpers/modelFixtures';
import { expectClose } from '../helpers/reference';

async function readTensors(path: string) {
  const t = await readAllTensors(await nodeFileSource(path));
  return {
    f32: (n: string) => toFloat32(t.get(n)!.bytes, t.get(n)!.info.dtype),
    i32: (n: string) => toInt32(t.get(n)!.bytes, t.get(n)!.info.dtype),
    names: [...t.keys()],
  };
}

/** The prompt the fixture's LoRA and GSPO batches share (one image). */
export async function fixturePrompt(dir: string): Promise<PreparedPrompt> {
  const t = await readTensors(`${dir}/prompt.safetensors`);
  const g = t.i32('image_grid_thw');
  return {
    id: 'fixture',
    inputIds: t.i32('input_ids'),
    images: [{ pixelValues: t.f32('pixel_values'), gridThw: [g[0], g[1], g[2]], key: 'fixture-image' }],
  };
}

describe.each(MODELS)('%s training path', (m) => {
  it('matches PEFT: completion log-probs and d(Σ log-probs)/d(LoRA A, B) within 1e-3 relative, with and without gradient checkpointing', async () => {
    const gpu = await testGpu();
    const model = await Qwen3VL.load(gpu, modelFiles(m), { quant: 'none' });
    const adapter = await importPeft(nodeDirFiles(`${modelDir(m)}/lora`));
    const params = uploadAdapter(gpu, adapter, model.config.text.numLayers);
    model.attachLora(params);
    const batch = JSON.parse(readFileSync(`${modelDir(m)}/lora/batch.json`, 'utf8')) as { completions: number[][]; logps: number[]; temperature: number };
    const prompt = await fixturePrompt(`${modelDir(m)}/lora`);
    const policy = new Qwen3VLPolicy(model);

    // With gradient checkpointing (the default: layers recomputed in the backward), then without
    // (every layer's activations kept): both against PEFT, and the second against the first.
    const first = new Map<string, Float32Array>();
    let worst = 0;
    let worstApart = 0;
    const ref = await readTensors(`${modelDir(m)}/lora/grads.safetensors`);
    for (const gradientCheckpointing of [true, false]) {
      const fwd = await policy.forward({ prompt, completions: batch.completions }, { temperature: batch.temperature, lora: true, train: true, gradientCheckpointing });
      const logps = await gpu.readF32(fwd.logps);
      expectClose(logps, batch.logps, { rtol: 0, atol: 2e-4, what: `${m} completion log-probs` });

      const rec = gpu.recorder();
      for (const p of params) model.decoder.ops.lora.zeroGrad(rec, p);
      await rec.submit();
      await policy.backward(fwd.mask); // gradient 1 on every completion token: d(Σ logps)
      for (const p of params) {
        for (const [which, t] of [['A', p.dA], ['B', p.dB]] as const) {
          const key = `base_model.model.${p.name}.lora_${which}.weight`;
          const want = ref.f32(key);
          const got = await gpu.readF32(t);
          const scale = Math.max(...want.map(Math.abs));
          expect(scale, `${p.name} d${which} is non-zero in the reference`).toBeGreaterThan(0);
          const what = `${p.name} d${which}${gradientCheckpointing ? '' : ' (no checkpointing)'}`;
          const r = expectClose(got, want, { rtol: 0, atol: 1e-3 * scale, what });
          worst = Math.max(worst, r.maxAbs / scale);
          if (gradientCheckpointing) first.set(key, got);
          else worstApart = Math.max(worstApart, expectClose(got, first.get(key)!, { rtol: 0, atol: 1e-5 * scale, what: `${what} vs checkpointed` }).maxAbs / scale);
        }
      }
    }
    console.log(`${m}: with and without checkpointing, gradients differ by at most ${worstApart.toExponential(2)} of the tensor's largest entry`);
    console.log(`${m}: worst LoRA gradient error relative to the tensor's largest entry: ${worst.toExponential(2)}`);
  });
});
