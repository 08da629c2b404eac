// PEFT adapter folders from training: `train` writes step-N/adapter beside each checkpoint and
// DIR/adapter (the latest), holding the checkpoint's LoRA under PEFT's names; `export-adapter` does
// the same for an existing run; a folder without a checkpoint and an existing --out are refused.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { importPeft, tensorNames } from '../../src/adapter/peft';
import { nodeDirFiles } from '../../src/model/safetensors';
import { baseModelName } from '../../src/node/adapterDir';
import { readCheckpointDir, trainRun } from '../../src/node/commands/train';
import { tensorNames as checkpointNames } from '../../src/rl/checkpoint';
import { runCli } from '../helpers/cli';
import { testGpu } from '../helpers/gpu';
import { ToyPolicy, toyPrompts } from '../helpers/toyPolicy';

describe('adapter folders of a training run', () => {
  it('train writes adapter/ beside each checkpoint and in the run folder; export-adapter matches it', async () => {
    const gpu = await testGpu();
    const dir = mkdtempSync(join(tmpdir(), 'vlrl-adapter-'));
    const out = join(dir, 'run');
    const config = {
      num_generations: 4,
      per_device_train_batch_size: 4,
      max_completion_length: 7,
      learning_rate: 0.05,
      lr_scheduler_type: 'constant' as const,
      max_steps: 2,
      save_steps: 1,
      loss_type: 'grpo' as const,
      lora: { r: 2, lora_alpha: 4, target_modules: ['q_proj' as const] },
    };
    const open = async () => ({ policy: await ToyPolicy.create(gpu, { r: 2, alpha: 4 }), data: toyPrompts() });
    await trainRun(gpu, open, { config, outDir: out, resume: false, log: () => undefined, warn: () => undefined });

    const steps = readdirSync(out).filter((f) => f.startsWith('step-')).sort();
    expect(steps).toEqual(['step-00000001', 'step-00000002']);
    for (const s of steps) expect(readdirSync(join(out, s, 'adapter')).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
    const checkpoint = (await readCheckpointDir(out))!;
    const latest = await importPeft(nodeDirFiles(join(out, 'adapter')));
    const fromStep = await importPeft(nodeDirFiles(join(out, 'step-00000002', 'adapter')));
    expect(latest.modules.map((m) => m.module)).toEqual(['toy.logits']);
    const n = checkpointNames('toy.logits');
    expect(Array.from(latest.modules[0].A)).toEqual(Array.from(checkpoint.tensors.get(n.A)!));
    expect(Array.from(latest.modules[0].B)).toEqual(Array.from(checkpoint.tensors.get(n.B)!));
    expect(latest.modules[0].B.some((v) => v !== 0)).toBe(true); // trained: B moved from 0
    expect(Array.from(fromStep.modules[0].B)).toEqual(Array.from(latest.modules[0].B));
    const step1 = await importPeft(nodeDirFiles(join(out, 'step-00000001', 'adapter')));
    expect(Array.from(step1.modules[0].B)).not.toEqual(Array.from(latest.modules[0].B));
    const cfg = JSON.parse(readFileSync(join(out, 'adapter', 'adapter_config.json'), 'utf8')) as Record<string, unknown>;
    expect(cfg).toMatchObject({ peft_type: 'LORA', r: 2, lora_alpha: 4, target_modules: ['q_proj'], base_model_name_or_path: resolve('test/fixtures/tiny/tiny-a') });
    const weights = readFileSync(join(out, 'adapter', 'adapter_model.safetensors'));
    expect(weights.toString('latin1')).toContain(tensorNames('toy.logits').A);

    // export-adapter on the run folder and on one step's folder.
    const exported = join(dir, 'exported');
    const r = await runCli(['export-adapter', '--checkpoint', out, '--out', exported]);
    expect(r.code, r.stderr).toBe(0);
    expect(readFileSync(join(exported, 'adapter_model.safetensors'))).toEqual(weights);
    const again = await runCli(['export-adapter', '--checkpoint', out, '--out', exported]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`${exported} already exists; pass --overwrite to replace it`);
    const one = await runCli(['export-adapter', '--checkpoint', join(out, 'step-00000001'), '--out', exported, '--overwrite']);
    expect(one.code, one.stderr).toBe(0);
    expect(Array.from((await importPeft(nodeDirFiles(exported))).modules[0].B)).toEqual(Array.from(step1.modules[0].B));

    const empty = join(dir, 'empty');
    mkdirSync(empty);
    const none = await runCli(['export-adapter', '--checkpoint', empty, '--out', join(dir, 'x')]);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain(`${empty}: no checkpoint there`);
    expect(existsSync(join(dir, 'x'))).toBe(false);
  });

  it('export-adapter refuses an untrained adapter (B all zeros) unless --force', async () => {
    const gpu = await testGpu();
    const dir = mkdtempSync(join(tmpdir(), 'vlrl-adapter-'));
    const out = join(dir, 'run');
    const config = { num_generations: 4, per_device_train_batch_size: 4, max_completion_length: 7, learning_rate: 0, lr_scheduler_type: 'constant' as const, max_steps: 1, save_steps: 1, lora: { r: 2, lora_alpha: 4, target_modules: ['q_proj' as const] } };
    const open = async () => ({ policy: await ToyPolicy.create(gpu, { r: 2, alpha: 4 }), data: toyPrompts() });
    await trainRun(gpu, open, { config, outDir: out, resume: false, log: () => undefined, warn: () => undefined });
    expect((await importPeft(nodeDirFiles(join(out, 'adapter')))).modules[0].B.every((v) => v === 0)).toBe(true); // train keeps it as it is
    const refused = await runCli(['export-adapter', '--checkpoint', out, '--out', join(dir, 'a')]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('lora_B is all zeros in 1 module(s) (toy.logits)');
    expect(refused.stderr).toContain('pass --force to export it anyway');
    expect(existsSync(join(dir, 'a'))).toBe(false);
    const forced = await runCli(['export-adapter', '--checkpoint', out, '--out', join(dir, 'a'), '--force']);
    expect(forced.code, forced.stderr).toBe(0);
  });

  it('names the base model loadably: a hub id as it is, a folder by its path, the demo with a note', () => {
    expect(baseModelName('Qwen/Qwen3-VL-2B-Instruct')).toEqual({ name: 'Qwen/Qwen3-VL-2B-Instruct', note: null });
    expect(baseModelName('test/fixtures/tiny/tiny-b')).toEqual({ name: resolve('test/fixtures/tiny/tiny-b'), note: null });
    const demo = baseModelName('public/demo');
    expect(demo.name).toBe('public/demo');
    expect(demo.note).toContain('bundled demo model');
  });
});
