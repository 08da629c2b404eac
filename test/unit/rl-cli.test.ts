import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import sharp from 'sharp';
import { datasetRows, engineFromArgs, readCheckpointDir, trainRun } from '../../src/node/commands/train';
import { parseArgs } from '../../src/node/args';
import { defaultEngineConfig } from '../../src/rl/engineConfig';
import { resolveConfig } from '../../src/rl/config';
import { testGpu } from '../helpers/gpu';
import { runCli, tinyTrainConfigFile } from '../helpers/cli';
import { tinyModelFolder } from '../helpers/tinyModelFolder';
import { ToyPolicy, toyPrompts, toyRunConfig } from '../helpers/toyPolicy';

const config = toyRunConfig({ max_steps: 5, save_steps: 2 });

describe('train command: engine flags', () => {
  const engine = (argv: string[], fromFile?: unknown, fromConfig?: { gradient_checkpointing?: boolean }) => engineFromArgs(parseArgs(argv), fromFile, fromConfig);
  it('maps --products and its older aliases onto one field, over the config file\'s "engine" entry', () => {
    expect(engine([])).toEqual(defaultEngineConfig());
    expect(engine(['--products', 'int8-1limb', '--vision-products', 'int8', '--micro-batch-tokens', '2048', '--gradient-checkpointing', 'false'])).toEqual({ products: 'int8-1limb', vision_products: 'int8', activation_storage: 'auto', kv_cache: 'auto', micro_batch_tokens: 2048, gradient_checkpointing: false, phase_buffers: 'keep' });
    expect(engine(['--tensor-cores']).products).toBe('int8');
    expect(engine(['--tensor-cores', '--tensor-core-limbs', '2']).products).toBe('int8');
    expect(engine(['--tensor-cores', '--tensor-core-limbs', '1']).products).toBe('int8-1limb');
    expect(engine(['--tensor-cores', '--tensor-core-steps', 'row']).products).toBe('int8-row');
    expect(engine(['--vision-tensor-cores']).vision_products).toBe('int8');
    expect(engine([], { products: 'int8', micro_batch_tokens: 512 })).toEqual({ products: 'int8', vision_products: 'auto', activation_storage: 'auto', kv_cache: 'auto', micro_batch_tokens: 512, gradient_checkpointing: true, phase_buffers: 'keep' });
    expect(engine(['--kv-cache', 'f16']).kv_cache).toBe('f16');
    expect(engine(['--kv-cache', 'f32'], { kv_cache: 'f16' }).kv_cache).toBe('f32');
    expect(engine([], { kv_cache: 'f16' }).kv_cache).toBe('f16');
    expect(engine(['--products', 'f32'], { products: 'int8' }).products).toBe('f32');
    // The default is the fastest the device offers, chosen on it.
    expect(engine([]).products).toBe('auto');
    expect(engine(['--products', 'auto'], { products: 'int8' }).products).toBe('auto');
    // The training config's gradient_checkpointing (transformers' name) sets the engine's; the flag overrides both.
    expect(engine([], {}, { gradient_checkpointing: false }).gradient_checkpointing).toBe(false);
    expect(engine(['--gradient-checkpointing'], { gradient_checkpointing: false }).gradient_checkpointing).toBe(true);
    expect(engine(['--gradient-checkpointing', 'true'], {}, { gradient_checkpointing: false }).gradient_checkpointing).toBe(true);
    expect(engine(['--activation-storage', 'f16']).activation_storage).toBe('f16');
    expect(engine(['--activation-storage', 'f32'], { activation_storage: 'f16' }).activation_storage).toBe('f32');
    expect(engine([], { activation_storage: 'f16' }).activation_storage).toBe('f16');
    expect(engine(['--phase-buffers', 'release']).phase_buffers).toBe('release');
    expect(engine(['--phase-buffers', 'keep'], { phase_buffers: 'release' }).phase_buffers).toBe('keep');
    expect(engine([], { phase_buffers: 'release' }).phase_buffers).toBe('release');
  });

  it('refuses bad values, unknown engine keys and the old flags mixed with the new', () => {
    expect(() => engine(['--products', 'int4'])).toThrow(/--products takes auto, int8, int8-1limb, int8-row, f16, f32; got 'int4'/);
    expect(() => engine(['--vision-products', 'int8-row'])).toThrow(/--vision-products takes auto, f32, int8, f16; got 'int8-row'/);
    expect(() => engine(['--activation-storage', 'bf16'])).toThrow(/--activation-storage takes auto, f32, f16; got 'bf16'/);
    expect(() => engine(['--products', 'int8', '--tensor-cores'])).toThrow(/--products replaces --tensor-cores/);
    expect(() => engine(['--vision-products', 'int8', '--vision-tensor-cores'])).toThrow(/--vision-products replaces --vision-tensor-cores/);
    expect(() => engine(['--tensor-core-limbs', '1'])).toThrow(/--tensor-core-limbs takes 1 or 2, with --tensor-cores/);
    expect(() => engine(['--micro-batch-tokens', '0'])).toThrow(/--micro-batch-tokens takes an integer >= 1; got 0/);
    expect(() => engine(['--kv-cache', 'bf16'])).toThrow(/--kv-cache takes auto, f32, f16; got 'bf16'/);
    expect(() => engine([], { kv_cache: 'f8' })).toThrow(/engine\.kv_cache must be one of auto, f32, f16; got "f8"/);
    expect(() => engine(['--gradient-checkpointing', 'no'])).toThrow(/--gradient-checkpointing takes true or false; got 'no'/);
    expect(() => engine(['--phase-buffers', 'trim'])).toThrow(/--phase-buffers takes keep, release; got 'trim'/);
    expect(() => engine([], { micro_batch_tokens: 0.5 })).toThrow(/engine\.micro_batch_tokens must be an integer >= 1/);
    expect(() => engine([], { producs: 'int8' })).toThrow(/engine\.producs: unknown field; did you mean products\?/);
  });
});

describe('train command: a file dataset', () => {
  it('loads the rows a file dataset names (image_keys one column, image folder, limit, format by name or given), and the old "data" entry alike', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vlrl-file-data-'));
    mkdirSync(join(dir, 'images'));
    for (const [name, side] of [['a.png', 32], ['b.png', 48], ['c.png', 40]] as const) {
      writeFileSync(join(dir, 'images', name), await sharp({ create: { width: side, height: side, channels: 3, background: { r: 10, g: 200, b: 30 } } }).png().toBuffer());
    }
    const lines = [['a.png', 'How many squares?', '3'], ['b.png', 'How many circles?', '5'], ['c.png', 'How many lines?', '2']].map(([img, q, a]) => JSON.stringify({ q, a, img }));
    writeFileSync(join(dir, 'rows.jsonl'), lines.join('\n'));
    writeFileSync(join(dir, 'rows.txt'), lines.join('\n'));
    const mapping = { prompt_key: 'q', answer_key: 'a', image_keys: 'img' as unknown as string[] };
    const warnings: string[] = [];
    const rows = async (dataset: Record<string, unknown>) => datasetRows(resolveConfig({ dataset }).config.dataset, (l) => warnings.push(l));
    const two = await rows({ kind: 'file', path: join(dir, 'rows.jsonl'), mapping, image_folder: join(dir, 'images'), limit: 2 });
    // Images stay encoded until a batch needs them (their size read from the header).
    expect(two.map((r) => [r.question, r.answer, (r.encoded ?? []).map((i) => i.width)])).toEqual([['How many squares?', '3', [32]], ['How many circles?', '5', [48]]]);
    // No extension to go by: the format is given.
    expect(await rows({ kind: 'file', path: join(dir, 'rows.txt'), format: 'jsonl', mapping, image_folder: join(dir, 'images') })).toHaveLength(3);
    await expect(rows({ kind: 'file', path: join(dir, 'rows.txt'), mapping })).rejects.toThrow(/not a \.parquet, \.json, \.jsonl or \.ndjson file; set dataset\.format/);
    await expect(rows({ kind: 'file', path: join(dir, 'none.jsonl'), mapping })).rejects.toThrow(/none\.jsonl: no such file \(dataset\.path\)/);
    const legacy = resolveConfig({ data: { path: join(dir, 'rows.jsonl'), mapping, image_folder: join(dir, 'images') } });
    expect((await datasetRows(legacy.config.dataset, () => undefined)).map((r) => r.answer)).toEqual(['3', '5', '2']);
    expect(warnings).toEqual([]);
  });
});

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
    expect(readdirSync(join(dir, 'a')).sort()).toEqual(['adapter', 'data.json', 'latest', 'step-00000002', 'step-00000003']);
    const saved = (await readCheckpointDir(join(dir, 'a')))!;
    expect(saved.meta.step).toBe(3);
    expect(saved.meta.config.max_steps).toBe(3);
    expect(Array.from(saved.tensors.get('toy.logits.lora_B.weight')!)).toEqual(Array.from(await gpu.readF32(policies[0].lora[0].B)));

    await trainRun(gpu, open, { config, steps: 5, outDir: join(dir, 'a'), resume: true, ...io });
    expect(lines.map((l) => JSON.parse(l).step)).toEqual([1, 2, 3, 4, 5]);
    lines.length = 0;
    // Without an engine config, the config's gradient_checkpointing (transformers' name) is the engine's.
    await trainRun(gpu, open, { config: { ...config, gradient_checkpointing: false }, outDir: join(dir, 'b'), resume: false, ...io });
    expect(new Set(policies[0].checkpointing)).toEqual(new Set([true]));
    expect(new Set(policies[2].checkpointing)).toEqual(new Set([false]));
    // (A constant rate: --steps changes max_steps, which a decaying schedule depends on.)
    expect(Array.from(await gpu.readF32(policies[1].lora[0].B))).toEqual(Array.from(await gpu.readF32(policies[2].lora[0].B)));
  });
});

describe('npm run cli -- train (Qwen3-VL tiny fixture with a byte-level tokenizer)', () => {
  it('runs 2 steps with one metrics line each, checkpoints, and --resume continues the same run at step 3', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vlrl-train-cli-'));
    // gradient_checkpointing at the top level: transformers' name, read as the engine's.
    const configFile = tinyTrainConfigFile(dir, { learning_rate: 0.01, max_steps: 2, gradient_checkpointing: false, engine: { micro_batch_tokens: 2048 } });
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
    expect(readdirSync(out).sort()).toEqual(['adapter', 'data.json', 'engine.json', 'latest', 'step-00000001', 'step-00000002']);
    const engine = { products: 'auto', vision_products: 'auto', activation_storage: 'auto', kv_cache: 'auto', micro_batch_tokens: 2048, gradient_checkpointing: false, phase_buffers: 'keep' };
    // 'auto' on a GPU without tensor cores: the f32 units, said on stderr, and with them the f32 KV cache.
    expect(first.stderr).toMatch(/products: f32 \(f32 units: .*; f16 unavailable: .*; int8 unavailable: /);
    expect(first.stderr).toContain('kv_cache: f32 (auto: the products run on f32, not f16)');
    expect(first.stderr).toContain('vision products: f32 (auto: the products run on f32, not f16)');
    expect(first.stderr).toMatch(/activation storage: f32 \(auto: the f32 products keep f32 states\)/);
    expect(JSON.parse(readFileSync(join(out, 'engine.json'), 'utf8'))).toEqual(engine);
    expect(readdirSync(join(out, 'step-00000002')).sort()).toEqual(['adapter', 'checkpoint.json', 'tensors.safetensors']);
    const saved = (await readCheckpointDir(out))!;
    expect(saved.meta.step).toBe(2);
    expect(saved.meta.adapters).toHaveLength(3 * 7);
    expect(saved.meta.adapters[0]).toEqual({ name: 'model.language_model.layers.0.self_attn.q_proj', r: 2, in: 64, out: 64 });
    expect(saved.meta.history.map((m) => m.step)).toEqual([1, 2]);
    // Trained: lora_B starts at zero and has moved.
    const b = saved.tensors.get('model.language_model.layers.0.self_attn.q_proj.lora_B.weight')!;
    expect(b.some((v) => v !== 0)).toBe(true);

    expect('gradient_checkpointing' in saved.meta.config).toBe(false);

    // A run folder of an earlier version: gradient_checkpointing in the checkpoint's config, not in engine.json, and no kv_cache.
    const { gradient_checkpointing: _, kv_cache: _kv, ...olderEngine } = engine;
    writeFileSync(join(out, 'engine.json'), JSON.stringify(olderEngine));
    const metaFile = join(out, 'step-00000002', 'checkpoint.json');
    const meta = JSON.parse(readFileSync(metaFile, 'utf8'));
    writeFileSync(metaFile, JSON.stringify({ ...meta, config: { ...meta.config, gradient_checkpointing: false } }));
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
    expect(tcDemo.stderr).toContain('go with --config or --resume, not --demo');
    // --products, the one flag the tensor-core ones are aliases of.
    const products = await runCli(['train', '--config', configFile, '--products', 'int8-row', '--output-dir', join(dir, 'run')]);
    expect(products.code).toBe(1);
    expect(products.stderr).toMatch(/chromium-experimental-subgroup-matrix|subgroup-matrix configuration/);
    const nullFile = join(dir, 'null.json');
    writeFileSync(nullFile, 'null');
    const nullConfig = await runCli(['train', '--config', nullFile]);
    expect(nullConfig.code).toBe(1);
    expect(nullConfig.stderr).toContain(`--config ${nullFile}: the config must be a JSON object; got null`);
    if (!existsSync('public/demo/config.json')) {
      const demo = await runCli(['train', '--demo']);
      expect(demo.code).toBe(1);
      expect(demo.stderr).toContain('the bundled demo model is not in public/demo');
    }
  }, 180_000); // its CLI processes: 33 s alone on 2 cores, past 60 s beside the other test files in CI
});
