// The training path against PyTorch + PEFT autograd on the tiny fixtures: per-token log-probs of a
// completion after a one-image prompt, and the gradients of their sum with respect to every LoRA
// A and B (non-zero A and B, so both gradients are non-trivial); and on tiny-b an adapter on a
// subset of the target modules with lora_dropout, PyTorch applying the engine's masks.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { importPeft } from '../../src/adapter/peft';
import { uploadAdapter } from '../../src/adapter/upload';
import { dropoutSeed, pcg } from '../../src/ops/lora';
import { toFloat32, toInt32 } from '../../src/model/dtype';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { nodeDirFiles, nodeFileSource, readAllTensors } from '../../src/model/safetensors';
import { packBatch, Qwen3VLPolicy } from '../../src/model/train';
import { testGpu } from '../helpers/gpu';
import { fixturePrompt, MODELS, modelDir, modelFiles } from '../helpers/modelFixtures';
import { expectClose } from '../helpers/reference';

async function readTensors(path: string) {
  const t = await readAllTensors(await nodeFileSource(path));
  return {
    f32: (n: string) => toFloat32(t.get(n)!.bytes, t.get(n)!.info.dtype),
    i32: (n: string) => toInt32(t.get(n)!.bytes, t.get(n)!.info.dtype),
    names: [...t.keys()],
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

describe('packed group: the prompt once, then the completions', () => {
  it('lays out ids, positions, sequences and the predicting rows', () => {
    const prompt = { positions: Int32Array.from([0, 1, 2, 0, 1, 1, 0, 1, 2]), ropeDelta: -1 };
    const p = packBatch(Int32Array.from([10, 11, 12]), [[20, 21], [], [30]], prompt);
    expect(Array.from(p.ids)).toEqual([10, 11, 12, 20, 21, 30]);
    expect(Array.from(p.cuSeqlens)).toEqual([0, 3, 5, 5, 6]);
    expect(p.sharedPrefix).toBe(3);
    // Each axis: the prompt's, then cache position + rope delta (3 + j - 1).
    expect(Array.from(p.positions)).toEqual([0, 1, 2, 2, 3, 2, 0, 1, 1, 2, 3, 2, 0, 1, 2, 2, 3, 2]);
    const PAD = 0xffffffff;
    expect(p.maxLen).toBe(2);
    expect(Array.from(p.predictRows)).toEqual([2, 3, PAD, PAD, 2, PAD]);
    expect(Array.from(p.scatterRows)).toEqual([PAD, 3, PAD, PAD, PAD, PAD]);
    expect(Array.from(p.firstTokens)).toEqual([0, 4]);
    expect(Array.from(p.targets)).toEqual([20, 21, 0, 0, 30, 0]);
    expect(Array.from(p.mask)).toEqual([1, 1, 0, 0, 1, 0]);
    expect(packBatch(Int32Array.from([10]), [[]], { positions: Int32Array.from([0, 0, 0]), ropeDelta: 0 }).sharedPrefix).toBe(0);
  });

  it.each(MODELS)('%s: a group of 3 gives the log-probs of each completion alone, and the sum of their LoRA gradients', async (m) => {
    const gpu = await testGpu();
    const model = await Qwen3VL.load(gpu, modelFiles(m), { quant: 'none' });
    const params = uploadAdapter(gpu, await importPeft(nodeDirFiles(`${modelDir(m)}/lora`)), model.config.text.numLayers);
    model.attachLora(params);
    const prompt = await fixturePrompt(`${modelDir(m)}/lora`);
    const policy = new Qwen3VLPolicy(model);
    const completions = [[5, 9, 14, 3, 3], [7], [21, 2, 8]];
    const run = async (group: number[][]) => {
      const rec = gpu.recorder();
      for (const p of params) model.decoder.ops.lora.zeroGrad(rec, p);
      await rec.submit();
      const fwd = await policy.forward({ prompt, completions: group }, { temperature: 0.9, lora: true, train: true });
      const logps = await gpu.readF32(fwd.logps);
      await policy.backward(fwd.mask);
      const grads = await Promise.all(params.flatMap((p) => [gpu.readF32(p.dA), gpu.readF32(p.dB)]));
      return { logps, maxLen: fwd.maxLen, grads };
    };
    const group = await run(completions);
    const sum = group.grads.map((g) => new Float64Array(g.length));
    for (const [i, c] of completions.entries()) {
      const one = await run([c]);
      expectClose(one.logps.subarray(0, c.length), group.logps.subarray(i * group.maxLen, i * group.maxLen + c.length), { rtol: 0, atol: 1e-5, what: `${m} log-probs of completion ${i}` });
      one.grads.forEach((g, k) => g.forEach((v, e) => (sum[k][e] += v)));
    }
    group.grads.forEach((g, k) => {
      const scale = Math.max(...sum[k].map(Math.abs));
      expect(scale).toBeGreaterThan(0);
      expectClose(g, sum[k], { rtol: 0, atol: 1e-5 * scale, what: `${m} gradient ${k}: the group's against the sum of single completions'` });
    });
  });
});

describe('tiny-b lora_dropout on a subset of the target modules', () => {
  it('matches PEFT with the same masks: completion log-probs and d(Σ log-probs)/d(LoRA A, B) within 1e-3 relative, with and without gradient checkpointing', async () => {
    const gpu = await testGpu();
    const model = await Qwen3VL.load(gpu, modelFiles('tiny-b'), { quant: 'none' });
    const dir = `${modelDir('tiny-b')}/lora-dropout`;
    type Batch = { completions: number[][]; logps: number[][]; temperature: number; target_modules: string[]; dropout: { p: number; seed: number; step: number }; hash_check: { dropout_seed_l1_m4: number; pcg_of_12345: number } };
    const batch = JSON.parse(readFileSync(`${dir}/batch.json`, 'utf8')) as Batch;
    // The mask's hash is the fixture's (tools/make_fixtures.py computes it in Python).
    expect(pcg(12345)).toBe(batch.hash_check.pcg_of_12345);
    expect(dropoutSeed(batch.dropout.seed, batch.dropout.step, 1, 4)).toBe(batch.hash_check.dropout_seed_l1_m4);
    const params = uploadAdapter(gpu, await importPeft(nodeDirFiles(dir)), model.config.text.numLayers);
    expect(params).toHaveLength(model.config.text.numLayers * batch.target_modules.length);
    expect(new Set(params.map((p) => p.name.split('.').pop()))).toEqual(new Set(batch.target_modules));
    model.attachLora(params, { dropout: batch.dropout.p });
    const prompt = await fixturePrompt(`${modelDir('tiny-b')}/lora`);
    const policy = new Qwen3VLPolicy(model);
    const ref = await readTensors(`${dir}/grads.safetensors`);
    const sequences = { prompt, completions: batch.completions };
    const rows = (flat: Float32Array, maxLen: number) => batch.completions.flatMap((c, i) => Array.from(flat.subarray(i * maxLen, i * maxLen + c.length)));
    const want = batch.logps.flat();
    let worst = 0;
    for (const gradientCheckpointing of [true, false]) {
      const fwd = await policy.forward(sequences, { temperature: batch.temperature, lora: true, train: true, gradientCheckpointing, dropout: { seed: batch.dropout.seed, step: batch.dropout.step } });
      expectClose(rows(await gpu.readF32(fwd.logps), fwd.maxLen), want, { rtol: 0, atol: 2e-4, what: 'completion log-probs with dropout' });
      const rec = gpu.recorder();
      for (const p of params) model.decoder.ops.lora.zeroGrad(rec, p);
      await rec.submit();
      await policy.backward(fwd.mask);
      for (const p of params) {
        for (const [which, t] of [['A', p.dA], ['B', p.dB]] as const) {
          const w = ref.f32(`base_model.model.${p.name}.lora_${which}.weight`);
          const scale = Math.max(...w.map(Math.abs));
          expect(scale, `${p.name} d${which} is non-zero in the reference`).toBeGreaterThan(0);
          const r = expectClose(await gpu.readF32(t), w, { rtol: 0, atol: 1e-3 * scale, what: `${p.name} d${which} with dropout${gradientCheckpointing ? '' : ' (no checkpointing)'}` });
          worst = Math.max(worst, r.maxAbs / scale);
        }
      }
    }
    // The masks matter: without dropout (a scoring forward) the log-probs move.
    const plain = await policy.forward(sequences, { temperature: batch.temperature, lora: true, train: false });
    const moved = rows(await gpu.readF32(plain.logps), plain.maxLen).reduce((m, x, i) => Math.max(m, Math.abs(x - want[i])), 0);
    expect(moved).toBeGreaterThan(1e-3);
    console.log(`tiny-b lora_dropout: worst gradient error ${worst.toExponential(2)} of the tensor's largest entry; without dropout the log-probs move by ${moved.toFixed(4)}`);
  });
});
