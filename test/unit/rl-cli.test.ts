import { existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readCheckpointDir, trainRun } from '../../src/node/commands/train';
import type { TrainConfigInput } from '../../src/rl/config';
import { testGpu } from '../helpers/gpu';
import { runCli } from '../helpers/cli';
import { tinyModelFolder } from '../helpers/tinyModelFolder';
import { ToyPolicy, toyPrompts } from '../helpers/toyPolicy';

const config: TrainConfigInput = {
  num_generations: 4,
  per_device_train_batch_size: 4,
  max_completion_length: 7,
  learning_rate: 0.05,
  lr_scheduler_type: 'constant',
  max_steps: 5,
  save_steps: 2,
  loss_type: 'grpo',
  lora: { r: 2, lora_alpha: 4, target_modules: ['q_proj'] },
};

describe('train command (checkpoint folder, metrics lines)', () => {
  it('writes one metrics line per step and resumes from the folder where it stopped', async () => {
    const gpu = await testGpu();
    const dir = mkdtempSync(join(tmpdir(), 'vlrl-train-'));
    const policies: ToyPolicy[] = [];
    const open = async () => {
      const policy = await ToyPolicy.create(gpu, { r: 2, alpha: 4 });
      policies.push(policy);
      return { policy, data: toyPrompts() };
    };
    const lines: string[] = [];
    const io = { log: (l: string) => lines.push(l), warn: () => undefined };
    const metricsFile = join(dir, 'metrics.jsonl');
    const first = await trainRun(gpu, open, { config, steps: 3, metricsFile, outDir: join(dir, 'a'), resume: false, ...io });
    expect(first.state).toBe('finished');
    expect(lines.map((l) => JSON.parse(l).step)).toEqual([1, 2, 3]);
    expect(readFileSync(metricsFile, 'utf8').trim().split('\n')).toEqual(lines);
    expect(readdirSync(join(dir, 'a')).sort()).toEqual(['adapter', 'latest', 'step-00000002', 'step-00000003']);
    const saved = (await readCheckpointDir(join(dir, 'a')))!;
    expect(saved.meta.step).toBe(3);
    expect(saved.meta.config.max_steps).toBe(3);
    expect(Array.from(saved.tensors.get('toy.logits.lora_B.weight')!)).toEqual(Array.from(await gpu.readF32(policies[0].lora[0].B)));

    await trainRun(gpu, open, { config, steps: 5, outDir: join(dir, 'a'), resume: true, ...io });
    expect(lines.map((l) => JSON.parse(l).step)).toEqual([1, 2, 3, 4, 5]);
    lines.length = 0;
    await trainRun(gpu, open, { config, outDir: join(dir, 'b'), resume: false, ...io });
    // (A constant rate: --steps changes max_steps, which a decaying schedule depends on.)
    expect(Array.from(await gpu.readF32(policies[1].lora[0].B))).toEqual(Array.from(await gpu.readF32(policies[2].lora[0].B)));
  });
});

describe('npm run cli -- train (Qwen3-VL tiny fixture with a byte-level tokenizer)', () => {
  it('runs 2 steps with one metrics line each, checkpoints, and --resume continues the same run at step 3', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vlrl-train-cli-'));
    const model = tinyModelFolder(join(dir, 'model'));
    const configFile = join(dir, 'config.json');
    writeFileSync(
      configFile,
      JSON.stringify({
        model_name_or_path: model,
        dataset: { tasks: ['counting'], count: 4, seed: 0, size: 128 },
        system_prompt: 'Answer.',
        num_generations: 2,
        per_device_train_batch_size: 2,
        max_completion_length: 4,
        learning_rate: 0.01,
        lr_scheduler_type: 'constant',
        max_steps: 2,
        save_steps: 1,
        loss_type: 'grpo',
        lora: { r: 2, lora_alpha: 4 },
        // A custom reward (run in the CLI's sandbox) that varies within a group whatever is sampled
        // (the sample's index), so the adapters move.
        rewards: [{ name: 'length', weight: 0.1, source: '(c, a, ctx) => c.length + ctx.index' }],
      }),
    );
    const out = join(dir, 'run');
    const metrics = join(dir, 'metrics.jsonl');
    const first = await runCli(['train', '--config', configFile, '--metrics', metrics, '--output-dir', out]);
    expect(first.stderr).toContain('finished');
    expect(first.code).toBe(0);
    const lines = first.stdout.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.map((m) => m.step)).toEqual([1, 2]);
    for (const m of lines) {
      expect(m.learning_rate).toBe(0.01);
      expect(m['completions/max_length']).toBeLessThanOrEqual(4);
      expect(m['completions/mean_length']).toBeGreaterThan(0);
      expect(Number.isFinite(m.grad_norm)).toBe(true);
      expect(m.reward_std).toBeGreaterThan(0);
      expect(m.grad_norm).toBeGreaterThan(0);
    }
    expect(readFileSync(metrics, 'utf8').trim().split('\n').map((l) => JSON.parse(l))).toEqual(lines);
    expect(readdirSync(out).sort()).toEqual(['adapter', 'latest', 'step-00000001', 'step-00000002']);
    expect(readdirSync(join(out, 'step-00000002')).sort()).toEqual(['adapter', 'checkpoint.json', 'tensors.safetensors']);
    const saved = (await readCheckpointDir(out))!;
    expect(saved.meta.step).toBe(2);
    expect(saved.meta.adapters).toHaveLength(3 * 7);
    expect(saved.meta.adapters[0]).toEqual({ name: 'model.language_model.layers.0.self_attn.q_proj', r: 2, in: 64, out: 64 });
    expect(saved.meta.history.map((m) => m.step)).toEqual([1, 2]);
    // Trained: lora_B starts at zero and has moved.
    const b = saved.tensors.get('model.language_model.layers.0.self_attn.q_proj.lora_B.weight')!;
    expect(b.some((v) => v !== 0)).toBe(true);

    const resumed = await runCli(['train', '--resume', out, '--steps', '3']);
    expect(resumed.code).toBe(0);
    expect(resumed.stdout.trim().split('\n').map((l) => JSON.parse(l).step)).toEqual([3]);
    const after = (await readCheckpointDir(out))!;
    expect(after.meta.step).toBe(3);
    expect(after.meta.runId).toBe(saved.meta.runId);
    expect(after.meta.history.map((m) => m.step)).toEqual([1, 2, 3]);
    expect(after.meta.history.slice(0, 2)).toEqual(saved.meta.history);
  }, 180_000);

  it('refuses conflicting sources and a missing demo model with a reason', async () => {
    const both = await runCli(['train', '--demo', '--resume', 'nowhere']);
    expect(both.code).toBe(1);
    expect(both.stderr).toContain('give exactly one of --config FILE.json, --demo or --resume DIR');
    const none = await runCli(['train', '--resume', join(tmpdir(), 'vlrl-no-such-run')]);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/no checkpoint there/);
    // --tensor-cores and --vision-tensor-cores on a GPU without subgroup matrices (software Vulkan): refused with the reason.
    const dir = mkdtempSync(join(tmpdir(), 'vlrl-train-tc-'));
    const configFile = join(dir, 'config.json');
    writeFileSync(configFile, JSON.stringify({ model_name_or_path: tinyModelFolder(join(dir, 'model')), dataset: { tasks: ['counting'], count: 2, seed: 0, size: 128 }, num_generations: 2, per_device_train_batch_size: 2, max_completion_length: 2, max_steps: 1 }));
    const tc = await runCli(['train', '--config', configFile, '--tensor-cores', '--output-dir', join(dir, 'run')]);
    expect(tc.code).toBe(1);
    expect(tc.stderr).toMatch(/chromium-experimental-subgroup-matrix|subgroup-matrix configuration/);
    const vtc = await runCli(['train', '--config', configFile, '--vision-tensor-cores', '--output-dir', join(dir, 'run')]);
    expect(vtc.code).toBe(1);
    expect(vtc.stderr).toMatch(/chromium-experimental-subgroup-matrix|subgroup-matrix configuration/);
    const limbs = await runCli(['train', '--config', configFile, '--tensor-core-limbs', '1', '--output-dir', join(dir, 'run')]);
    expect(limbs.code).toBe(1);
    expect(limbs.stderr).toContain('--tensor-core-limbs takes 1 or 2, with --tensor-cores');
    const limbs3 = await runCli(['train', '--config', configFile, '--tensor-cores', '--tensor-core-limbs', '3', '--output-dir', join(dir, 'run')]);
    expect(limbs3.code).toBe(1);
    expect(limbs3.stderr).toContain("got '3'");
    const steps = await runCli(['train', '--config', configFile, '--tensor-cores', '--tensor-core-limbs', '1', '--tensor-core-steps', 'row', '--output-dir', join(dir, 'run')]);
    expect(steps.code).toBe(1);
    expect(steps.stderr).toContain("--tensor-core-steps takes block or row (row with two limbs), with --tensor-cores (got 'row' with one limb)");
    const stepsBare = await runCli(['train', '--config', configFile, '--tensor-core-steps', 'block', '--output-dir', join(dir, 'run')]);
    expect(stepsBare.stderr).toContain("(got 'block' without --tensor-cores)");
    const tcDemo = await runCli(['train', '--demo', '--tensor-cores']);
    expect(tcDemo.code).toBe(1);
    expect(tcDemo.stderr).toContain('--tensor-cores goes with --config or --resume');
    if (!existsSync('public/demo/config.json')) {
      const demo = await runCli(['train', '--demo']);
      expect(demo.code).toBe(1);
      expect(demo.stderr).toContain('the bundled demo model is not in public/demo');
    }
  }, 180_000); // its CLI processes: 33 s alone on 2 cores, past 60 s beside the other test files in CI
});
