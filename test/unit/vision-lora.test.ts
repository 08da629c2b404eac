// LoRA on the vision tower (the mergers model.visual.merger.*, model.visual.deepstack_merger_list.<j>.*,
// and the blocks' attn.qkv, attn.proj, mlp.linear_fc1/2): attaching and refusing adapters, the
// backward's gradients of Σ completion log-probs w.r.t. every vision adapter against central
// finite differences of the engine's own forward on tiny-b (with LoRA on the decoder's q_proj as
// well, so the image rows' gradient crosses adapted layers), the same against PyTorch + PEFT
// autograd on tiny-b (tools/make_fixtures.py --only vision-lora / vision-lora-blocks: adapters on
// q_proj, down_proj, every merger's fc1 and fc2, and in the second every block's layers too), and
// RL steps that train them.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { importPeft } from '../../src/adapter/peft';
import { uploadAdapter } from '../../src/adapter/upload';
import { toFloat32 } from '../../src/model/dtype';
import { nodeDirFiles, nodeFileSource, readAllTensors } from '../../src/model/safetensors';
import { openModel } from '../../src/model/session';
import { resolveConfig } from '../../src/rl/config';
import { Trainer } from '../../src/rl/trainer';
import { tinyModelFolder } from '../helpers/tinyModelFolder';
import { createLoraParams, type LoraParams } from '../../src/ops/loraParams';
import { loraModuleName } from '../../src/model/decoder';
import { Qwen3VL, releaseVisual } from '../../src/model/qwen3vl';
import { Qwen3VLPolicy } from '../../src/model/train';
import { releaseVisionSaved, visionBlockLoraModuleName, visionLoraModuleName, VisionTower, type VisionBlockLayer, type VisionSaved } from '../../src/model/vision';
import { testGpu } from '../helpers/gpu';
import { fixturePrompt, modelDir, modelFiles } from '../helpers/modelFixtures';
import { expectClose, randNormal } from '../helpers/reference';

const R = 4;
const ALPHA = 8;

async function tinyB() {
  const gpu = await testGpu();
  const model = await Qwen3VL.load(gpu, modelFiles('tiny-b'), { quant: 'none' });
  return { gpu, model };
}

/** Adapters with random A and B on q_proj of every layer, on every merger's fc1 and fc2 and, with `blocks`, on every vision block's qkv, proj, fc1 and fc2. */
function adapters(gpu: Awaited<ReturnType<typeof testGpu>>, model: Qwen3VL, blocks = false): LoraParams[] {
  const t = model.config.text;
  const v = model.config.vision;
  const merged = v.hiddenSize * v.spatialMergeSize ** 2;
  const specs = Array.from({ length: t.numLayers }, (_, l) => ({ name: loraModuleName(l, 'q'), in: t.hiddenSize, out: t.numHeads * t.headDim }));
  for (let m = 0; m <= v.deepstackVisualIndexes.length; m++) {
    specs.push({ name: visionLoraModuleName(m, 1), in: merged, out: merged }, { name: visionLoraModuleName(m, 2), in: merged, out: v.outHiddenSize });
  }
  const H = v.hiddenSize;
  const dims = { qkv: [H, 3 * H], proj: [H, H], fc1: [H, v.intermediateSize], fc2: [v.intermediateSize, H] } as const;
  for (let i = 0; blocks && i < v.depth; i++) for (const [l, [inF, out]] of Object.entries(dims)) specs.push({ name: visionBlockLoraModuleName(i, l as VisionBlockLayer), in: inF, out });
  return specs.map((s, i) => {
    const p = createLoraParams(gpu, { ...s, r: R, alpha: ALPHA });
    gpu.write(p.A, randNormal(R * s.in, 100 + i, 1 / Math.sqrt(s.in)));
    gpu.write(p.B, randNormal(s.out * R, 200 + i, 0.05));
    return p;
  });
}

describe('vision LoRA', () => {
  it('attaches merger adapters beside the decoder\'s and refuses other vision modules, wrong shapes and lora_dropout', async () => {
    const { gpu, model } = await tinyB();
    const params = adapters(gpu, model);
    model.attachLora(params);
    expect(model.visionLora?.mergers).toHaveLength(1 + model.config.vision.deepstackVisualIndexes.length);
    expect(model.visionLora!.mergers[0].fc1!.name).toBe('model.visual.merger.linear_fc1');
    expect(model.visionLora!.mergers[3].fc2!.name).toBe('model.visual.deepstack_merger_list.2.linear_fc2');
    expect(() => model.attachLora(params, { dropout: 0.1 })).toThrow(/lora_dropout 0.1 with adapters on the vision tower/);
    const patch = createLoraParams(gpu, { name: 'model.visual.patch_embed.proj', in: 1536, out: 64, r: R, alpha: ALPHA });
    expect(() => model.attachLora([patch])).toThrow(/'model.visual.patch_embed.proj' is not an adaptable vision module/);
    const wrong = createLoraParams(gpu, { name: visionLoraModuleName(1, 2), in: 256, out: 64, r: R, alpha: ALPHA });
    expect(() => model.attachLora([wrong])).toThrow(/deepstack_merger_list\.0\.linear_fc2 is \[64, 256\], the layer is \[96, 256\]/);
    model.attachLora(params.slice(0, model.config.text.numLayers));
    expect(model.visionLora).toBeNull();
  });

  it.each([
    ['the mergers', false],
    ['the mergers and every block', true],
  ])('d(Σ completion log-probs)/d(A, B) of adapters on %s matches central finite differences of the forward', { timeout: 600_000 }, async (what, blocks) => {
    const { gpu, model } = await tinyB();
    const params = adapters(gpu, model, blocks);
    model.attachLora(params);
    const policy = new Qwen3VLPolicy(model);
    const prompt = await fixturePrompt(`${modelDir('tiny-b')}/lora`);
    const seqs = { prompt, completions: [[312, 777, 394, 607, 472], [353, 106, 305, 631, 40, 41, 42]] };
    const objective = async () => {
      const f = await policy.forward(seqs, { temperature: 1, lora: true, train: false });
      const [lp, mask] = [await gpu.readF32(f.logps), await gpu.readF32(f.mask)];
      return lp.reduce((s, x, i) => s + x * mask[i], 0);
    };
    const fwd = await policy.forward(seqs, { temperature: 1, lora: true, train: true });
    const rec = gpu.recorder();
    for (const p of params) model.decoder.ops.lora.zeroGrad(rec, p);
    await rec.submit();
    await policy.backward(fwd.mask);

    let worst = 0;
    const vision = params.filter((p) => p.name.startsWith('model.visual.'));
    expect(vision).toHaveLength(8 + (blocks ? 4 * model.config.vision.depth : 0));
    // Without gradient checkpointing (every layer's activations kept) the same gradients.
    const checkpointed = await Promise.all(vision.flatMap((p) => [gpu.readF32(p.dA), gpu.readF32(p.dB)]));
    const again = await policy.forward(seqs, { temperature: 1, lora: true, train: true, gradientCheckpointing: false });
    const rec2 = gpu.recorder();
    for (const p of params) model.decoder.ops.lora.zeroGrad(rec2, p);
    await rec2.submit();
    await policy.backward(again.mask);
    for (const [k, p] of vision.entries()) {
      for (const [j, g] of [p.dA, p.dB].entries()) {
        const want = checkpointed[2 * k + j];
        expectClose(await gpu.readF32(g), want, { rtol: 0, atol: 1e-5 * Math.max(...want.map(Math.abs)), what: `${p.name} d${'AB'[j]} without checkpointing` });
      }
    }
    // With block adapters, finite differences on the first and the last block's (the PEFT parity below covers every one).
    const last = model.config.vision.depth - 1;
    const checked = blocks ? vision.filter((p) => p.name.startsWith('model.visual.blocks.0.') || p.name.startsWith(`model.visual.blocks.${last}.`)) : vision;
    for (const [i, p] of checked.entries()) {
      for (const [which, w, g] of [['A', p.A, p.dA], ['B', p.B, p.dB]] as const) {
        const base = await gpu.readF32(w);
        const grad = await gpu.readF32(g);
        const dir = randNormal(base.length, 300 + 2 * i + (which === 'B' ? 1 : 0));
        const analytic = grad.reduce((s, x, k) => s + x * dir[k], 0);
        // Central differences at steps h and h/2, Richardson-combined (the h² term cancels): h moves
        // the objective by ~0.05 (well above its f32 noise) or the tensor by half its RMS, the smaller.
        const rms = Math.sqrt(base.reduce((s, x) => s + x * x, 0) / base.length);
        const h = Math.min(0.05 / Math.max(Math.abs(analytic), 1e-3), 0.5 * rms);
        const at = async (step: number) => {
          gpu.write(w, base.map((x, k) => x + step * dir[k]));
          return objective();
        };
        const central = async (step: number) => ((await at(step)) - (await at(-step))) / (2 * step);
        const [d1, d2] = [await central(h), await central(h / 2)];
        const numeric = (4 * d2 - d1) / 3;
        gpu.write(w, base);
        // Relative to the directional derivative, or where it happens to be small, to its spread over
        // random directions (‖g‖₂): f32 noise in the objective is absolute.
        const norm = Math.hypot(...grad);
        const err = Math.abs(numeric - analytic) / Math.max(Math.abs(analytic), norm);
        expect(norm, `${p.name} d${which} is non-zero`).toBeGreaterThan(1e-4);
        expect(err, `${p.name} d${which}: analytic ${analytic}, finite differences ${numeric}, ‖g‖ ${norm}`).toBeLessThan(2e-3);
        worst = Math.max(worst, err);
      }
    }
    console.log(`tiny-b vision LoRA on ${what}: worst error of the directional derivative against finite differences, relative to max(|derivative|, ‖g‖) ${worst.toExponential(2)}`);
  });

  it('block adapters with the MLP in row chunks (144 patches in chunks of 64) give the features and gradients of one pass', { timeout: 600_000 }, async () => {
    const { gpu, model } = await tinyB();
    model.attachLora(adapters(gpu, model, true));
    const lora = model.visionLora!;
    const vision = model.lora.filter((p) => p.name.startsWith('model.visual.'));
    const chunked = await VisionTower.create(gpu, model.config, model.weights.vision, { mlpChunkRows: 64 });
    const grids = [[1, 12, 12] as const];
    const N = 144;
    const pixels = gpu.upload(randNormal(N * chunked.patchWidth, 7), [N, chunked.patchWidth], 'f32', 'pixels');
    const run = async (tower: VisionTower) => {
      const rec = gpu.recorder();
      for (const p of vision) model.decoder.ops.lora.zeroGrad(rec, p);
      const saved: VisionSaved = { mergers: [], blocks: null };
      const out = tower.encode(rec, pixels, grids, { adapters: lora, saved });
      const features = [out.embeds, ...out.deepstack];
      const grads = features.map((f, j) => gpu.upload(randNormal(f.numel, 40 + j), [...f.shape], 'f32', 'd features'));
      tower.backward(rec, lora, saved, grads);
      await rec.submit();
      const got = [...(await Promise.all(features.map((f) => gpu.readF32(f)))), ...(await Promise.all(vision.flatMap((p) => [gpu.readF32(p.dA), gpu.readF32(p.dB)])))];
      for (const t of [...features, ...grads]) t.release();
      releaseVisionSaved(saved);
      return got;
    };
    const whole = await run(model.vision);
    const parts = await run(chunked);
    for (const [k, want] of whole.entries()) {
      const scale = Math.max(...want.map(Math.abs));
      expect(scale, `entry ${k} is non-zero`).toBeGreaterThan(0);
      expectClose(parts[k], want, { rtol: 0, atol: 1e-5 * scale, what: k < 4 ? `features ${k}` : `${vision[(k - 4) >> 1].name} d${'AB'[(k - 4) & 1]}` });
    }
    pixels.release();
    chunked.release();
  });

  it('trains the merger adapters in RL steps from lora.target_modules: B leaves zero, then A moves', { timeout: 600_000 }, async () => {
    const gpu = await testGpu();
    const dir = tinyModelFolder(join(mkdtempSync(join(tmpdir(), 'vlrl-vision-lora-')), 'tiny-a'));
    const session = await openModel(gpu, nodeDirFiles(dir), { quant: 'none', maxSamples: 2 });
    const { config, loss } = resolveConfig({
      num_generations: 2,
      per_device_train_batch_size: 2,
      max_completion_length: 3,
      max_steps: 2,
      save_steps: 0,
      seed: 5,
      learning_rate: 0.01,
      // The entropy bonus gives every step a gradient whatever the rewards of three-token completions.
      entropy_coef: 0.01,
      lora: { r: 2, lora_alpha: 4, target_modules: ['q_proj', 'merger.linear_fc2', 'deepstack_merger_list.1.linear_fc1'] },
    });
    const params = session.attachLora(config.lora);
    const vision = params.filter((p) => p.name.startsWith('model.visual.'));
    expect(vision.map((p) => p.name)).toEqual(['model.visual.merger.linear_fc2', 'model.visual.deepstack_merger_list.1.linear_fc1']);
    const data = new Uint8ClampedArray(64 * 64 * 4).map((_, i) => (i * 37) & 255);
    const rows = [{ id: 'r', question: 'What is in <image>?', images: [{ width: 64, height: 64, data }], answer: '1', meta: {} }];
    const trainer = await Trainer.create({ gpu, policy: session.policy, data: session.promptSource(rows), config, loss, runId: 'vision-lora' });
    const before = await Promise.all(vision.map((p) => gpu.readF32(p.A)));
    for (const p of vision) expect((await gpu.readF32(p.B)).every((x) => x === 0), `${p.name} lora_B starts at zero (PEFT's init)`).toBe(true);
    expect(await trainer.run()).toBe('finished');
    for (const [k, p] of vision.entries()) {
      const B = await gpu.readF32(p.B);
      const A = await gpu.readF32(p.A);
      expect(B.every(Number.isFinite) && A.every(Number.isFinite), p.name).toBe(true);
      expect(Math.max(...B.map(Math.abs)), `${p.name} lora_B after two steps`).toBeGreaterThan(0);
      expect(Math.max(...A.map((x, i) => Math.abs(x - before[k][i]))), `${p.name} lora_A moved`).toBeGreaterThan(0);
    }
  });
});

describe.each(['vision-lora', 'vision-lora-blocks'])('tiny-b %s against PEFT', (fixture) => {
  it('image features with the adapter within 1e-3, completion log-probs, and d(Σ log-probs)/d(every LoRA A, B) within 1e-3 relative, with and without checkpointing', { timeout: 600_000 }, async () => {
    const dir = `${modelDir('tiny-b')}/${fixture}`;
    const { gpu, model } = await tinyB();
    type Batch = { completions: number[][]; logps: number[][]; temperature: number; target_modules: string[] };
    const batch = JSON.parse(readFileSync(`${dir}/batch.json`, 'utf8')) as Batch;
    const params = uploadAdapter(gpu, await importPeft(nodeDirFiles(dir)), model.config.text.numLayers);
    const v = model.config.vision;
    const blocks = fixture === 'vision-lora-blocks' ? 4 * v.depth : 0;
    expect(params.filter((p) => p.name.startsWith('model.visual.'))).toHaveLength(2 * (1 + v.deepstackVisualIndexes.length) + blocks);
    model.attachLora(params);
    const prompt = await fixturePrompt(`${modelDir('tiny-b')}/lora`);
    const tensors = async (file: string) => {
      const t = await readAllTensors(await nodeFileSource(`${dir}/${file}`));
      return (n: string) => toFloat32(t.get(n)!.bytes, t.get(n)!.info.dtype);
    };
    const [ref, feats] = [await tensors('grads.safetensors'), await tensors('features.safetensors')];

    // The adapted tower's outputs.
    const { visual } = await model.encodeImagesWithLora(prompt.inputIds, prompt.images, false);
    for (const [j, t] of [visual.embeds, ...visual.deepstack].entries()) {
      expectClose(await gpu.readF32(t), feats(j === 0 ? 'image_embeds' : `deepstack_${j - 1}`), { rtol: 0, atol: 1e-3, what: j === 0 ? 'image embeds with LoRA' : `DeepStack ${j - 1} with LoRA` });
    }
    releaseVisual(visual);

    const policy = new Qwen3VLPolicy(model);
    const seqs = { prompt, completions: batch.completions };
    const rows = (flat: Float32Array, maxLen: number) => batch.completions.flatMap((c, i) => Array.from(flat.subarray(i * maxLen, i * maxLen + c.length)));
    let worst = 0;
    for (const gradientCheckpointing of [true, false]) {
      const fwd = await policy.forward(seqs, { temperature: batch.temperature, lora: true, train: true, gradientCheckpointing });
      expectClose(rows(await gpu.readF32(fwd.logps), fwd.maxLen), batch.logps.flat(), { rtol: 0, atol: 2e-4, what: `${fixture} completion log-probs` });
      const rec = gpu.recorder();
      for (const p of params) model.decoder.ops.lora.zeroGrad(rec, p);
      await rec.submit();
      await policy.backward(fwd.mask); // gradient 1 on every completion token: d(Σ logps)
      for (const p of params) {
        for (const [which, t] of [['A', p.dA], ['B', p.dB]] as const) {
          const want = ref(`base_model.model.${p.name}.lora_${which}.weight`);
          const scale = Math.max(...want.map(Math.abs));
          expect(scale, `${p.name} d${which} is non-zero in the reference`).toBeGreaterThan(0);
          const r = expectClose(await gpu.readF32(t), want, { rtol: 0, atol: 1e-3 * scale, what: `${p.name} d${which}${gradientCheckpointing ? '' : ' (no checkpointing)'}` });
          worst = Math.max(worst, r.maxAbs / scale);
        }
      }
    }
    console.log(`tiny-b ${fixture} vs PEFT: worst LoRA gradient error ${worst.toExponential(2)} of the tensor's largest entry`);
  });
});
