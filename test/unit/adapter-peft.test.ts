import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  AdapterError,
  adapterFromModules,
  exportPeft,
  importPeft,
  matchesTargetModules,
  parsePeft,
  readLoraParams,
  tensorNames,
  UntrainedAdapterError,
  validateAgainstModel,
  type AdapterModule,
  type PeftAdapter,
} from '../../src/adapter/peft';
import { parseQwen3VLConfig } from '../../src/model/config';
import { bf16BitsToF32, f32ToBf16Bits } from '../../src/model/dtype';
import { blobSource, MissingFileError, nodeDirFiles, readAllTensors, serializeSafetensors } from '../../src/model/safetensors';
import { uploadAdapter } from '../../src/adapter/upload';
import { expectedWeights } from '../../src/model/weightShapes';
import { createLoraParams } from '../../src/ops/loraParams';
import { testGpu } from '../helpers/gpu';
import { randNormal } from '../helpers/reference';

const FIXTURES = join(__dirname, '../fixtures/tiny');
const MODELS = ['tiny-a', 'tiny-b'] as const;
const LAYERS = { 'tiny-a': 3, 'tiny-b': 4 };
const PROJ = ['down_proj', 'gate_proj', 'k_proj', 'o_proj', 'q_proj', 'up_proj', 'v_proj'];

function modelConfig(model: string) {
  return parseQwen3VLConfig(readFileSync(join(FIXTURES, model, 'config.json'), 'utf8'));
}

/** A folder holding the two files, for importPeft. */
function writeAdapter(files: { weights: Uint8Array; config: string }): string {
  const dir = mkdtempSync(join(tmpdir(), 'adapter-'));
  writeFileSync(join(dir, 'adapter_model.safetensors'), files.weights);
  writeFileSync(join(dir, 'adapter_config.json'), files.config);
  return dir;
}

function module(name: string, r: number, inDim: number, outDim: number, seed: number, alpha = 2 * r): AdapterModule {
  return { module: name, in: inDim, out: outDim, r, alpha, A: randNormal(r * inDim, seed), B: randNormal(outDim * r, seed + 1, 0.01) };
}

function twoModules(): PeftAdapter {
  return adapterFromModules('t', [
    module('model.language_model.layers.0.self_attn.q_proj', 4, 64, 64, 1),
    module('model.language_model.layers.0.mlp.down_proj', 4, 128, 64, 3),
  ]);
}

async function reimport(a: PeftAdapter, options = {}): Promise<PeftAdapter> {
  return importPeft(nodeDirFiles(writeAdapter(exportPeft(a, options))), 're');
}

describe('PEFT import of the fixture adapters', () => {
  for (const model of MODELS) {
    it(`${model}: names, ranks, shapes, config`, async () => {
      const a = await importPeft(nodeDirFiles(join(FIXTURES, model, 'lora')));
      expect(a.r).toBe(4);
      expect(a.alpha).toBe(8);
      expect(a.dropout).toBe(0);
      expect([...a.targetModules].sort()).toEqual(PROJ);
      expect(a.modules.length).toBe(LAYERS[model] * 7);
      const cfg = modelConfig(model);
      validateAgainstModel(a, cfg);
      const q = a.modules.find((m) => m.module === 'model.language_model.layers.0.self_attn.q_proj')!;
      expect([q.r, q.in, q.out]).toEqual([4, cfg.text.hiddenSize, cfg.text.numHeads * cfg.text.headDim]);
      // The fixture was made with non-zero A and B.
      for (const m of a.modules) {
        expect(m.A.some((v) => v !== 0) && m.B.some((v) => v !== 0), m.module).toBe(true);
      }
    });

    it(`${model}: import -> export gives the same bytes, names, values and config keys`, async () => {
      const dir = join(FIXTURES, model, 'lora');
      const original = readFileSync(join(dir, 'adapter_model.safetensors'));
      const a = await importPeft(nodeDirFiles(dir));
      const out = exportPeft(a);
      // Same tensor order, header and padding as the Python safetensors library: byte for byte.
      expect(Buffer.compare(Buffer.from(out.weights), original)).toBe(0);
      const mine = await readAllTensors(blobSource(new Blob([out.weights]), 'exported'));
      const theirs = await readAllTensors(blobSource(new Blob([original]), 'fixture'));
      expect([...mine.keys()]).toEqual([...theirs.keys()]);
      for (const [name, t] of theirs) {
        expect(mine.get(name)!.info.shape, name).toEqual(t.info.shape);
        expect(Buffer.compare(Buffer.from(mine.get(name)!.bytes), Buffer.from(t.bytes)), name).toBe(0);
      }
      const fixtureConfig = JSON.parse(readFileSync(join(dir, 'adapter_config.json'), 'utf8'));
      const exported = JSON.parse(out.config);
      expect(Object.keys(exported).sort()).toEqual(Object.keys(fixtureConfig).sort());
      expect(exported).toEqual(fixtureConfig);
    });
  }

  it('validation against another model names the mismatching modules', async () => {
    const a = await importPeft(nodeDirFiles(join(FIXTURES, 'tiny-a', 'lora')));
    expect(() => validateAgainstModel(a, modelConfig('tiny-b'))).toThrow(/layers\.0\.mlp\.down_proj is \[96, 160\] in the model but the adapter is for \[64, 128\];.*; and 16 more$/);
    const b = await importPeft(nodeDirFiles(join(FIXTURES, 'tiny-b', 'lora')));
    // tiny-b has a layer 3 that tiny-a lacks.
    expect(() => validateAgainstModel(b, modelConfig('tiny-a'))).toThrow(AdapterError);
    const extra = adapterFromModules('x', [module('model.language_model.layers.9.self_attn.q_proj', 4, 64, 64, 1)]);
    expect(() => validateAgainstModel(extra, modelConfig('tiny-a'))).toThrow(/layers\.9\.self_attn\.q_proj is not a linear layer of this model/);
  });
});

describe('PEFT export', () => {
  it('writes PEFT names, shapes and a LoRA config from plain arrays', async () => {
    const a = twoModules();
    const out = exportPeft(a);
    const tensors = await readAllTensors(blobSource(new Blob([out.weights]), 'x'));
    expect([...tensors.keys()]).toEqual([
      'base_model.model.model.language_model.layers.0.mlp.down_proj.lora_A.weight',
      'base_model.model.model.language_model.layers.0.mlp.down_proj.lora_B.weight',
      'base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.weight',
      'base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_B.weight',
    ]);
    expect(tensors.get(tensorNames('model.language_model.layers.0.mlp.down_proj').A)!.info.shape).toEqual([4, 128]);
    expect(tensors.get(tensorNames('model.language_model.layers.0.mlp.down_proj').B)!.info.shape).toEqual([64, 4]);
    const cfg = JSON.parse(out.config);
    expect(cfg).toMatchObject({
      peft_type: 'LORA',
      r: 4,
      lora_alpha: 8,
      lora_dropout: 0,
      target_modules: ['down_proj', 'q_proj'],
      base_model_name_or_path: null,
      task_type: 'CAUSAL_LM',
      bias: 'none',
      use_dora: false,
      use_rslora: false,
      fan_in_fan_out: false,
      rank_pattern: {},
      alpha_pattern: {},
    });
    const back = await reimport({ ...a, baseModel: 'Qwen/Qwen3-VL-2B-Instruct' });
    expect(back.baseModel).toBe('Qwen/Qwen3-VL-2B-Instruct');
    for (const [i, m] of [...a.modules].sort((x, y) => (x.module < y.module ? -1 : 1)).entries()) {
      expect(back.modules[i].module).toBe(m.module);
      expect(back.modules[i].A).toEqual(m.A);
      expect(back.modules[i].B).toEqual(m.B);
    }
  });

  it('per-module ranks and alphas go through rank_pattern / alpha_pattern', async () => {
    const a = adapterFromModules('mixed', [
      module('model.language_model.layers.0.self_attn.q_proj', 4, 64, 64, 1),
      module('model.language_model.layers.0.self_attn.k_proj', 4, 64, 32, 5),
      module('model.language_model.layers.1.self_attn.q_proj', 2, 64, 64, 7, 16),
    ]);
    const cfg = JSON.parse(exportPeft(a).config);
    expect([cfg.r, cfg.lora_alpha]).toEqual([4, 8]);
    expect(cfg.rank_pattern).toEqual({ 'model.language_model.layers.1.self_attn.q_proj': 2 });
    expect(cfg.alpha_pattern).toEqual({ 'model.language_model.layers.1.self_attn.q_proj': 16 });
    const back = await reimport(a);
    expect(back.modules.map((m) => [m.module.split('.').slice(3).join('.'), m.r, m.alpha])).toEqual([
      ['0.self_attn.k_proj', 4, 8],
      ['0.self_attn.q_proj', 4, 8],
      ['1.self_attn.q_proj', 2, 16],
    ]);
  });

  it('a regex target_modules stays a string (PEFT full-matches a string, suffix-matches a list)', async () => {
    const a = twoModules();
    const regex = '.*language_model.*\\.(q_proj|down_proj)';
    const back = await reimport({ ...a, targetModules: [regex], rawConfig: { target_modules: regex } });
    expect(back.targetModules).toEqual([regex]);
    expect(JSON.parse(exportPeft(back).config).target_modules).toBe(regex);
    expect(JSON.parse(exportPeft({ ...back, targetModules: ['q_proj'] }).config).target_modules).toEqual(['q_proj']);
  });

  it('vision modules: PEFT names out and in, target_modules that PEFT matches to exactly them, uploaded after the decoder\'s', async () => {
    const config = modelConfig('tiny-b');
    const a = adapterFromModules('v', [
      module('model.visual.deepstack_merger_list.1.linear_fc2', 4, 256, 96, 21),
      module('model.language_model.layers.0.self_attn.q_proj', 4, 96, 192, 23),
      module('model.visual.merger.linear_fc1', 4, 256, 256, 25),
      module('model.visual.deepstack_merger_list.0.linear_fc1', 4, 256, 256, 27),
    ]);
    expect(a.targetModules).toEqual(['deepstack_merger_list.0.linear_fc1', 'deepstack_merger_list.1.linear_fc2', 'merger.linear_fc1', 'q_proj']);
    const files = exportPeft(a);
    const names = [...(await readAllTensors(blobSource(new Blob([files.weights])))).keys()];
    expect(names).toContain('base_model.model.model.visual.merger.linear_fc1.lora_A.weight');
    expect(names).toContain('base_model.model.model.visual.deepstack_merger_list.1.linear_fc2.lora_B.weight');
    // Under PEFT's list rule the exported target_modules pick, among the model's linear layers, the
    // adapted vision modules and q_proj of every layer: no vision block, no other merger layer.
    const linear = [...expectedWeights(config)].filter(([n, sh]) => n.endsWith('.weight') && sh.length === 2).map(([n]) => n.slice(0, -'.weight'.length));
    const picked = linear.filter((n) => matchesTargetModules(n, JSON.parse(files.config).target_modules as string[]));
    expect(picked.filter((n) => n.includes('.visual.')).sort()).toEqual(a.modules.filter((m) => m.module.includes('.visual.')).map((m) => m.module).sort());
    expect(picked.filter((n) => !n.includes('.visual.'))).toEqual(Array.from({ length: LAYERS['tiny-b'] }, (_, l) => `model.language_model.layers.${l}.self_attn.q_proj`));
    const back = await reimport(a);
    validateAgainstModel(back, config);
    for (const m of a.modules) {
      const b = back.modules.find((x) => x.module === m.module)!;
      expect([b.in, b.out, b.r, Array.from(b.A), Array.from(b.B)]).toEqual([m.in, m.out, m.r, Array.from(m.A), Array.from(m.B)]);
    }
    const gpu = await testGpu();
    const params = uploadAdapter(gpu, back, LAYERS['tiny-b']);
    expect(params.map((p) => p.name)).toEqual([
      'model.language_model.layers.0.self_attn.q_proj',
      'model.visual.merger.linear_fc1',
      'model.visual.deepstack_merger_list.0.linear_fc1',
      'model.visual.deepstack_merger_list.1.linear_fc2',
    ]);
    // Vision blocks' layers come after the mergers, by block; a module the engine does not adapt is refused.
    const blocks = adapterFromModules('b', [module('model.visual.blocks.1.attn.qkv', 4, 64, 192, 29), module('model.visual.merger.linear_fc2', 4, 256, 96, 31), module('model.visual.blocks.0.mlp.linear_fc2', 4, 128, 64, 33)]);
    expect(uploadAdapter(gpu, blocks, LAYERS['tiny-b']).map((p) => p.name)).toEqual(['model.visual.merger.linear_fc2', 'model.visual.blocks.0.mlp.linear_fc2', 'model.visual.blocks.1.attn.qkv']);
    expect(blocks.targetModules).toEqual(['blocks.0.mlp.linear_fc2', 'blocks.1.attn.qkv', 'merger.linear_fc2']);
    const patch = adapterFromModules('p', [module('model.visual.patch_embed.proj', 4, 1536, 64, 35)]);
    expect(() => uploadAdapter(gpu, patch, LAYERS['tiny-b'])).toThrow(/adapts model.visual.patch_embed.proj; .*the vision blocks' attn.qkv, attn.proj, mlp.linear_fc1, mlp.linear_fc2/);
  });

  it('BF16 export rounds to nearest even and imports back as f32', async () => {
    const a = twoModules();
    const back = await reimport(a, { dtype: 'BF16' });
    const tensors = await readAllTensors(blobSource(new Blob([exportPeft(a, { dtype: 'BF16' }).weights]), 'x'));
    expect([...tensors.values()].every((t) => t.info.dtype === 'BF16')).toBe(true);
    const q = a.modules.find((m) => m.module.endsWith('q_proj'))!;
    const bq = back.modules.find((m) => m.module.endsWith('q_proj'))!;
    expect(bq.B).toEqual(Float32Array.from(q.B, (v) => bf16BitsToF32(f32ToBf16Bits(v))));
  });

  it('refuses an all-zero B (untrained) unless forced, and NaN always', () => {
    const a = twoModules();
    a.modules[1].B.fill(0);
    expect(() => exportPeft(a)).toThrow(UntrainedAdapterError);
    expect(() => exportPeft(a)).toThrow(/lora_B is all zeros in 1 module\(s\) \(model\.language_model\.layers\.0\.mlp\.down_proj\).*force/);
    expect(() => exportPeft(a, { force: true })).not.toThrow();
    a.modules[0].A.fill(0);
    expect(() => exportPeft(a)).toThrow(/lora_A is all zeros/);
    a.modules[0].A[3] = NaN;
    expect(() => exportPeft(a, { force: true })).toThrow(/NaN or infinite/);
  });

  it('refuses wrong array sizes and duplicate modules', () => {
    const a = twoModules();
    expect(() => exportPeft({ ...a, modules: [a.modules[0], a.modules[0]] })).toThrow(/appears twice/);
    expect(() => exportPeft({ ...a, modules: [{ ...a.modules[0], A: new Float32Array(5) }] })).toThrow(/lora_A has 5 values, expected \[4, 64\]/);
  });

  it('exports what the GPU holds (LoraParams read back)', async () => {
    const gpu = await testGpu();
    const spec = { name: 'model.language_model.layers.2.mlp.up_proj', in: 64, out: 128, r: 4, alpha: 8 };
    const p = createLoraParams(gpu, spec);
    const A = randNormal(4 * 64, 11);
    const B = randNormal(128 * 4, 12);
    gpu.write(p.A, A);
    gpu.write(p.B, B);
    const modules = await readLoraParams(gpu, [p]);
    const back = await reimport(adapterFromModules('gpu', modules));
    expect(back.modules[0]).toMatchObject({ module: spec.name, in: 64, out: 128, r: 4, alpha: 8 });
    expect(back.modules[0].A).toEqual(A);
    expect(back.modules[0].B).toEqual(B);
    validateAgainstModel(back, modelConfig('tiny-a'));
  });
});

describe('PEFT import errors name what is wrong', () => {
  const good = () => exportPeft(twoModules());
  const tensorsOf = async (weights: Uint8Array) => readAllTensors(blobSource(new Blob([weights as Uint8Array<ArrayBuffer>]), 'w'));
  const withConfig = (patch: Record<string, unknown>) => JSON.stringify({ ...JSON.parse(good().config), ...patch });

  it('config problems', async () => {
    const t = await tensorsOf(good().weights);
    expect(() => parsePeft('x', '{', t)).toThrow(/adapter_config\.json is not valid/);
    expect(() => parsePeft('x', withConfig({ r: 8 }), t)).toThrow(/lora_A is \[4,128\] and lora_B \[64,4\], but the config gives this module r = 8/);
    expect(() => parsePeft('x', withConfig({ use_dora: true }), t)).toThrow(/use_dora/);
    expect(() => parsePeft('x', withConfig({ use_rslora: true }), t)).toThrow(/use_rslora/);
    expect(() => parsePeft('x', withConfig({ peft_type: 'IA3' }), t)).toThrow(/peft_type is "IA3"/);
    expect(() => parsePeft('x', withConfig({ modules_to_save: ['lm_head'] }), t)).toThrow(/modules_to_save lists lm_head/);
    expect(() => parsePeft('x', withConfig({ lora_alpha: 0 }), t)).toThrow(/lora_alpha must be a positive number/);
    expect(() => parsePeft('x', withConfig({ target_modules: 3 }), t)).toThrow(/target_modules must be/);
  });

  it('tensor problems', async () => {
    const a = twoModules();
    const m = a.modules[0];
    const names = tensorNames(m.module);
    const f32 = (v: Float32Array) => new Uint8Array(v.buffer.slice(0));
    const only = serializeSafetensors([{ name: names.A, dtype: 'F32', shape: [4, 64], data: f32(m.A) }]);
    expect(() => parsePeft('x', good().config, new Map())).toThrow(/holds no LoRA tensors/);
    await expect((async () => parsePeft('x', good().config, await tensorsOf(only)))()).rejects.toThrow(/has lora_A but no lora_B/);
    const odd = serializeSafetensors([{ name: 'base_model.model.lm_head.weight', dtype: 'F32', shape: [1], data: new Uint8Array(4) }]);
    await expect((async () => parsePeft('x', good().config, await tensorsOf(odd)))()).rejects.toThrow(/unexpected tensor 'base_model\.model\.lm_head\.weight'/);
    const ints = serializeSafetensors([
      { name: names.A, dtype: 'I32', shape: [4, 64], data: f32(m.A) },
      { name: names.B, dtype: 'F32', shape: [64, 4], data: f32(m.B) },
    ]);
    await expect((async () => parsePeft('x', good().config, await tensorsOf(ints)))()).rejects.toThrow(/is I32; LoRA weights must be F32, BF16 or F16/);
  });

  it('missing files', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'adapter-'));
    await expect(importPeft(nodeDirFiles(dir))).rejects.toThrow(MissingFileError);
    await expect(importPeft(nodeDirFiles(dir))).rejects.toThrow(/adapter_config\.json not found/);
    writeFileSync(join(dir, 'adapter_config.json'), good().config);
    writeFileSync(join(dir, 'adapter_model.bin'), 'pickle');
    await expect(importPeft(nodeDirFiles(dir))).rejects.toThrow(/adapter_model\.safetensors not found.*adapter_model\.bin/);
  });
});
