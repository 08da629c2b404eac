import { describe, expect, it } from 'vitest';
import { batchPlan, ConfigError, defaultConfig, resolveConfig, type TrainConfigInput } from '../../src/rl/config';
import { nearestKey } from '../../src/rl/configKeys';
import { asksTensorCores, defaultEngineConfig, EngineConfigError, resolveActivationStorage, resolveEngineConfig, resolveKvCache, resolveVisionProducts, usesTensorCores } from '../../src/rl/engineConfig';
import { MissingFeatureError, type Capabilities } from '../../src/gpu';

/** A device record with or without shader-f16 (no tensor cores: the KV cache needs none). */
function capabilities(shaderF16: boolean): Capabilities {
  return {
    adapter: 'synthetic',
    vendor: 'other',
    shaderF16,
    subgroups: { enabled: false, minSize: null, maxSize: null },
    subgroupMatrix: { enabled: false, configs: [] },
    packedInt8Dot: false,
    limits: { maxBufferSize: 2 ** 30, maxStorageBufferBindingSize: 2 ** 27, maxComputeWorkgroupStorageSize: 16384, maxComputeInvocationsPerWorkgroup: 256 },
    multiprocessors: null,
  };
}
import { DEFAULT_LOSS_CONFIG, resolveLossConfig } from '../../src/rl/lossConfig';
import { parseLossRequest } from '../../src/node/commands/loss';
import { productOptions, storedProductsValue, type Products } from '../../src/model/products';
import { learningRate, scheduleOf } from '../../src/rl/schedule';
import { TrainerRng } from '../../src/rl/rng';

describe('resolveConfig', () => {
  it('fills TRL defaults', () => {
    const { config, loss, warnings } = resolveConfig();
    expect(config).toEqual(defaultConfig());
    expect(config).toMatchObject({ num_generations: 8, epsilon: 0.2, epsilon_high: null, loss_type: 'dapo', beta: 0, scale_rewards: 'group', adam_beta1: 0.9, adam_beta2: 0.999, adam_epsilon: 1e-8, max_grad_norm: 1, num_iterations: 1, steps_per_generation: null });
    expect(loss.epsilon_high).toBe(0.2);
    expect(warnings).toEqual([]);
  });

  it('merges nested objects field by field', () => {
    const { config } = resolveConfig({ lora: { r: 4 }, rollout_correction: { mode: 'token_truncate' } });
    expect(config.lora).toEqual({ ...defaultConfig().lora, r: 4 });
    expect(config.rollout_correction).toEqual({ mode: 'token_truncate', clip_max: 3, clip_min: null });
  });

  const refusals: [string, TrainConfigInput, RegExp][] = [
    ['an unknown field', { learning_rat: 1 } as TrainConfigInput, /^train config: learning_rat: unknown field; did you mean learning_rate\?$/],
    ['an unknown nested field', { lora: { rank: 4 } } as TrainConfigInput, /^train config: lora\.rank: unknown field; did you mean r\?$/],
    ['an unknown dataset field', { dataset: { cnt: 4 } } as TrainConfigInput, /^train config: dataset\.cnt: unknown field; did you mean count\?$/],
    ['an unknown correction field', { rollout_correction: { moed: 'token_mask' } } as TrainConfigInput, /rollout_correction\.moed: unknown field; did you mean mode\?/],
    ['an unknown field of the old data entry', { data: { path: 'x.json', limt: 3 } }, /^train config: data\.limt: unknown field; did you mean limit\?$/],
    ['an unknown mapping field', { dataset: { kind: 'file', path: 'x.json', mapping: { prompt_key: 'q', answer_key: 'a', image_keys: [], answer_kye: 'b' } } } as TrainConfigInput, /dataset\.mapping\.answer_kye: unknown field; did you mean answer_key\?/],
    ['a file field on a synthetic dataset', { dataset: { path: 'x.json' } } as TrainConfigInput, /dataset\.path: unknown field/],
    ['an unknown reward term field', { rewards: [{ name: 'format', wieght: 1 }] } as unknown as TrainConfigInput, /rewards\[0\]\.wieght: unknown field; did you mean weight\?/],
    ['a null config', null as unknown as TrainConfigInput, /^train config: the config must be a JSON object; got null$/],
    ['an array config', [] as unknown as TrainConfigInput, /must be a JSON object; got an array/],
    ['data.limit -1', { data: { path: 'x.json', limit: -1 } }, /data\.limit must be an integer >= 1 .*got -1/],
    ['dataset.limit 0', { dataset: { kind: 'hub', repo_id: 'a/b', limit: 0 } }, /dataset\.limit must be an integer >= 1/],
    ['a mapping without image_keys', { dataset: { kind: 'file', path: 'x.json', mapping: { prompt_key: 'q', answer_key: 'a' } } } as TrainConfigInput, /dataset\.mapping\.image_keys is missing/],
    ['image_keys a number', { dataset: { kind: 'file', path: 'x.json', mapping: { prompt_key: 'q', answer_key: 'a', image_keys: 3 } } } as unknown as TrainConfigInput, /dataset\.mapping\.image_keys must be a column name or a list of them/],
    ['a file dataset without a path', { dataset: { kind: 'file' } }, /dataset\.path must be a non-empty string/],
    ['an unknown format', { dataset: { kind: 'file', path: 'x', format: 'csv' } } as unknown as TrainConfigInput, /dataset\.format must be one of parquet, json, jsonl/],
    ['an unknown dataset kind', { dataset: { kind: 'folder' } } as unknown as TrainConfigInput, /dataset\.kind must be one of synthetic, file, hub/],
    ['a hub id without org', { dataset: { kind: 'hub', repo_id: 'geometry3k' } }, /dataset\.repo_id must be "org\/name"/],
    ['G < 2', { num_generations: 1 }, /num_generations must be an integer >= 2/],
    ['a micro-batch of partial groups', { per_device_train_batch_size: 12 }, /multiple of num_generations/],
    ['temperature 0', { temperature: 0 }, /temperature must be in \(0/],
    ['top_p 0', { top_p: 0 }, /top_p must be in \(0, 1\]/],
    ['top_p above 1', { top_p: 1.5 }, /top_p/],
    ['a negative top_k', { top_k: -1 }, /top_k/],
    ['a fractional max_completion_length', { max_completion_length: 2.5 }, /max_completion_length/],
    ['max_prompt_length 0', { max_prompt_length: 0 }, /max_prompt_length/],
    ['a negative learning rate', { learning_rate: -1 }, /learning_rate/],
    ['an unknown scheduler', { lr_scheduler_type: 'step' as 'linear' }, /lr_scheduler_type must be one of/],
    ['warm-up on a constant schedule', { lr_scheduler_type: 'constant', warmup_steps: 3 }, /'constant' has no warm-up/],
    ['warmup_ratio above 1', { warmup_ratio: 2 }, /warmup_ratio/],
    ['adam_beta1 = 1', { adam_beta1: 1 }, /adam_beta1 must be in \[0, 1\)/],
    ['adam_beta2 < 0', { adam_beta2: -0.1 }, /adam_beta2/],
    ['adam_epsilon 0', { adam_epsilon: 0 }, /adam_epsilon/],
    ['negative weight decay', { weight_decay: -1 }, /weight_decay/],
    ['max_grad_norm 0', { max_grad_norm: 0 }, /max_grad_norm/],
    ['gradient_accumulation_steps 0', { gradient_accumulation_steps: 0 }, /gradient_accumulation_steps/],
    ['steps_per_generation 0', { steps_per_generation: 0 }, /steps_per_generation/],
    ['num_iterations 0', { num_iterations: 0 }, /num_iterations/],
    ['an unknown level', { importance_sampling_level: 'sequence_token' as 'token' }, /importance_sampling_level must be one of/],
    ['an unknown loss', { loss_type: 'ppo' as 'grpo' }, /loss_type must be one of/],
    ['negative epsilon', { epsilon: -0.1 }, /epsilon/],
    ['negative beta', { beta: -0.01 }, /beta/],
    ['an unknown scale', { scale_rewards: 'true' as 'group' }, /scale_rewards/],
    ['an unknown correction mode', { rollout_correction: { mode: 'token' as 'token_mask' } }, /rollout_correction.mode/],
    ['clip_min above clip_max', { rollout_correction: { mode: 'token_mask', clip_min: 4, clip_max: 2 } }, /clip_min \(4\) is above clip_max \(2\)/],
    ['mask_truncated_completions not boolean', { mask_truncated_completions: 1 as unknown as boolean }, /mask_truncated_completions/],
    ['gradient_checkpointing not boolean', { gradient_checkpointing: 'no' as unknown as boolean }, /gradient_checkpointing must be true or false/],
    ['rank 0', { lora: { r: 0 } }, /lora.r/],
    ['lora_alpha 0', { lora: { lora_alpha: 0 } }, /lora.lora_alpha/],
    ['dropout 1', { lora: { lora_dropout: 1 } }, /lora.lora_dropout must be in \[0, 1\)/],
    ['no target modules', { lora: { target_modules: [] } }, /at least one module/],
    ['an unknown module', { lora: { target_modules: ['lm_head' as 'q_proj'] } }, /no module 'lm_head'/],
    ['a module twice', { lora: { target_modules: ['q_proj', 'q_proj'] } }, /lists 'q_proj' twice/],
    ['a bare linear_fc1 (it would match the vision blocks too)', { lora: { target_modules: ['q_proj', 'linear_fc1'] } }, /no module 'linear_fc1'.*vision mergers: merger.linear_fc1\|2/],
    ['a vision layer not adapted', { lora: { target_modules: ['blocks.0.norm1'] } }, /no module 'blocks.0.norm1'.*vision blocks: \[blocks.<i>.\]attn.qkv\|attn.proj\|mlp.linear_fc1\|mlp.linear_fc2/],
    ['a bare qkv', { lora: { target_modules: ['qkv'] } }, /no module 'qkv'/],
    ['lora_dropout with vision modules', { lora: { lora_dropout: 0.05, target_modules: ['q_proj', 'merger.linear_fc1'] } }, /lora.lora_dropout is 0.05 with vision modules in lora.target_modules \(merger.linear_fc1\)/],
    ['a seed over u32', { seed: 2 ** 32 }, /seed must be below 2\^32/],
    ['max_steps 0', { max_steps: 0 }, /max_steps/],
    ['negative save_steps', { save_steps: -1 }, /save_steps/],
    ['logging_steps 0', { logging_steps: 0 }, /logging_steps/],
    ['no reward terms', { rewards: [] }, /at least one reward term/],
    ['an unknown reward', { rewards: [{ name: 'bleu', weight: 1 }] }, /no built-in reward 'bleu'/],
    ['a non-finite weight', { rewards: [{ name: 'format', weight: NaN }] }, /not a finite number/],
    ['an unknown task', { dataset: { tasks: ['maze' as 'counting'] } }, /no task 'maze'/],
    ['an empty model path', { model_name_or_path: '' }, /model_name_or_path/],
  ];
  it('takes the vision mergers\' and blocks\' layers as PEFT list entries beside the decoder\'s projections', () => {
    const targets = ['q_proj', 'merger.linear_fc1', 'visual.merger.linear_fc2', 'model.visual.deepstack_merger_list.2.linear_fc1', 'deepstack_merger_list.0.linear_fc2', 'attn.qkv', 'blocks.3.mlp.linear_fc2', 'model.visual.blocks.0.attn.proj'];
    expect(resolveConfig({ lora: { target_modules: targets } }).config.lora.target_modules).toEqual(targets);
  });

  it.each(refusals)('refuses %s', (_, input, reason) => {
    expect(() => resolveConfig(input)).toThrow(ConfigError);
    expect(() => resolveConfig(input)).toThrow(reason);
  });

  it('takes every loss field of src/rl/lossConfig.ts from its defaults (new ones included)', () => {
    const owned = ['max_completion_length', 'num_generations', 'gradient_accumulation_steps', 'num_items_in_batch'];
    const c = defaultConfig() as unknown as Record<string, unknown>;
    for (const [k, v] of Object.entries(DEFAULT_LOSS_CONFIG)) if (!owned.includes(k)) expect(c[k], k).toEqual(v);
    expect(Object.hasOwn(c, 'num_items_in_batch')).toBe(false);
    // They reach the resolved loss.
    expect(resolveConfig({ epsilon_high: 0.28, beta: 0.04 }).loss).toMatchObject({ epsilon_high: 0.28, beta: 0.04, max_completion_length: 256 });
  });

  it('reads the data sources, old "data" entry included, with a deprecation warning', () => {
    const file = resolveConfig({ dataset: { kind: 'file', path: 'rows.jsonl', mapping: { prompt_key: 'q', answer_key: 'a', image_keys: 'img' as unknown as string[] } } });
    // image_keys as one column name is a list of one.
    expect(file.config.dataset).toEqual({ kind: 'file', path: 'rows.jsonl', format: null, image_folder: null, mapping: { prompt_key: 'q', answer_key: 'a', image_keys: ['img'] }, limit: null, numeric_only: false });
    expect(file.warnings).toEqual([]);
    const old = resolveConfig({ data: { path: 'geo3k.parquet', limit: 500, numeric_only: true } });
    expect(old.config.dataset).toEqual({ kind: 'file', path: 'geo3k.parquet', format: null, image_folder: null, mapping: null, limit: 500, numeric_only: true });
    expect(old.warnings).toHaveLength(1);
    expect(old.warnings[0]).toMatch(/^the "data" entry is deprecated: write it as "dataset": \{"kind":"file","path":"geo3k.parquet"/);
    const hub = resolveConfig({ dataset: { kind: 'hub', repo_id: 'hiyouga/geometry3k', limit: 8 } });
    expect(hub.config.dataset).toEqual({ kind: 'hub', repo_id: 'hiyouga/geometry3k', config: 'default', split: 'train', revision: 'main', mapping: null, limit: 8, numeric_only: false });
    // A synthetic dataset without its kind, as older configs and checkpoints write it.
    expect(resolveConfig({ dataset: { count: 4 } }).config.dataset).toEqual({ ...defaultConfig().dataset, count: 4 });
  });

  it('suggests the nearest known key, and only a near one', () => {
    expect(nearestKey('rank', ['r', 'lora_alpha', 'lora_dropout', 'target_modules'])).toBe('r');
    expect(nearestKey('lerning_rate', ['learning_rate', 'seed'])).toBe('learning_rate');
    expect(nearestKey('colour', ['r', 'lora_alpha'])).toBeNull();
  });

  it('warns where TRL warns, and about settings that do nothing', () => {
    const seq = resolveConfig({ importance_sampling_level: 'sequence', loss_type: 'dapo', steps_per_generation: 4 }).warnings;
    expect(seq).toHaveLength(1);
    expect(seq[0]).toMatch(/weighting sequences by length; GSPO uses loss_type = 'grpo'/);
    expect(resolveConfig({ importance_sampling_level: 'sequence', loss_type: 'grpo' }).warnings[0]).toMatch(/every ratio is 1, so GSPO equals GRPO/);
    expect(resolveConfig({ importance_sampling_level: 'sequence', loss_type: 'grpo', num_iterations: 2 }).warnings).toEqual([]);
    expect(resolveConfig({ warmup_steps: 5, warmup_ratio: 0.1 }).warnings).toEqual(['warmup_steps = 5 overrides warmup_ratio = 0.1']);
    expect(resolveConfig({ scale_rewards: 'batch' }).warnings[0]).toMatch(/one prompt per generation batch is the same as 'group'/);
    expect(resolveConfig({ rollout_correction: { mode: 'token_mask', clip_max: null } }).warnings[0]).toMatch(/masks nothing/);
  });

  it('plans batches as TRL counts them', () => {
    const c = (i: TrainConfigInput) => batchPlan(resolveConfig(i).config);
    expect(c({})).toEqual({ promptsPerMicroBatch: 1, stepsPerGeneration: 1, promptsPerGeneration: 1, recomputeOld: false });
    expect(c({ per_device_train_batch_size: 16, gradient_accumulation_steps: 2 })).toEqual({ promptsPerMicroBatch: 2, stepsPerGeneration: 2, promptsPerGeneration: 4, recomputeOld: false });
    // The GSPO paper's setting in TRL: 4 minibatches per generation, one per optimizer step.
    expect(c({ steps_per_generation: 4 }).recomputeOld).toBe(true);
    expect(c({ num_iterations: 2 }).recomputeOld).toBe(true);
    expect(c({ rollout_correction: { mode: 'sequence_mask' } }).recomputeOld).toBe(true);
  });
});

describe('learning-rate schedules', () => {
  const sched = (type: 'constant' | 'constant_with_warmup' | 'linear' | 'cosine', warmup_steps = 0, warmup_ratio = 0) =>
    scheduleOf({ lr_scheduler_type: type, learning_rate: 2e-4, warmup_steps, warmup_ratio, max_steps: 100 });
  it('match their closed forms', () => {
    for (const s of [0, 1, 37, 99, 100]) {
      expect(learningRate(sched('constant'), s)).toBe(2e-4);
      expect(learningRate(sched('linear'), s)).toBeCloseTo(2e-4 * (1 - s / 100), 15);
      expect(learningRate(sched('cosine'), s)).toBeCloseTo(2e-4 * 0.5 * (1 + Math.cos((Math.PI * s) / 100)), 15);
    }
    for (const s of [0, 3, 9]) expect(learningRate(sched('constant_with_warmup', 10), s)).toBeCloseTo((2e-4 * s) / 10, 15);
    expect(learningRate(sched('constant_with_warmup', 10), 50)).toBe(2e-4);
    expect(learningRate(sched('linear', 10), 55)).toBeCloseTo(2e-4 * (45 / 90), 15);
    expect(learningRate(sched('cosine', 10), 55)).toBeCloseTo(2e-4 * 0.5 * (1 + Math.cos(Math.PI * 0.5)), 15);
    // warmup_ratio as transformers rounds it: ceil(0.05 * 100) = 5
    expect(sched('linear', 0, 0.05).warmup).toBe(5);
    expect(sched('linear', 3, 0.05).warmup).toBe(3);
  });
});

describe('trainer RNG', () => {
  it('continues from a saved state exactly', () => {
    const a = new TrainerRng(42);
    a.seed();
    a.permutation(10);
    const saved = a.save();
    const next = [a.seed(), ...a.permutation(20)];
    const b = new TrainerRng(0);
    b.load(saved);
    expect([b.seed(), ...b.permutation(20)]).toEqual(next);
    expect([...a.permutation(50)].sort((x, y) => x - y)).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(() => b.load({ state: -1 })).toThrow(/u32/);
  });
});

describe('engine config', () => {
  it('fills defaults, refuses unknown keys with their path, and checks each field', () => {
    expect(resolveEngineConfig({})).toEqual(defaultEngineConfig());
    expect(resolveEngineConfig({ products: 'int8-row', micro_batch_tokens: 1024, gradient_checkpointing: false })).toEqual({ products: 'int8-row', vision_products: 'auto', activation_storage: 'auto', kv_cache: 'auto', micro_batch_tokens: 1024, gradient_checkpointing: false, phase_buffers: 'keep' });
    expect(() => resolveEngineConfig({ product: 'int8' })).toThrow(/^engine config: engine\.product: unknown field; did you mean products\?$/);
    expect(() => resolveEngineConfig({ products: 'int4' })).toThrow(/engine\.products must be auto or one of int8, int8-1limb, int8-row, f16, f32; got "int4"/);
    expect(() => resolveEngineConfig({ vision_products: 'int8-row' })).toThrow(EngineConfigError);
    expect(resolveEngineConfig({ vision_products: 'f16' }).vision_products).toBe('f16');
    expect(() => resolveEngineConfig({ vision_products: 'bf16' })).toThrow(/engine\.vision_products must be one of auto, f32, int8, f16; got "bf16"/);
    // 'auto' (the default) follows the products: f16 beside f16 only; a named setting stays.
    const auto = resolveEngineConfig({});
    expect(auto.vision_products).toBe('auto');
    expect(resolveVisionProducts(auto, 'f16')).toEqual({ vision: 'f16', why: 'auto: the products run on f16 tensor cores' });
    expect(resolveVisionProducts(auto, 'int8')).toEqual({ vision: 'f32', why: 'auto: the products run on int8, not f16' });
    expect(resolveVisionProducts(auto, 'f32').vision).toBe('f32');
    expect(resolveVisionProducts(resolveEngineConfig({ vision_products: 'int8' }), 'f16')).toEqual({ vision: 'int8', why: 'set by the engine config' });
    // 'auto' asks for no tensor cores itself; a named tensor-core tower does.
    expect(usesTensorCores({ ...auto, products: 'f32' })).toBe(false);
    expect(asksTensorCores({ ...auto, vision_products: 'f16' })).toBe(true);
    expect(() => resolveEngineConfig({ micro_batch_tokens: 0 })).toThrow(/micro_batch_tokens must be an integer >= 1/);
    expect(() => resolveEngineConfig(null)).toThrow(/engine must be an object; got null/);
    expect(() => resolveEngineConfig({ gradient_checkpointing: 'no' })).toThrow(/engine\.gradient_checkpointing must be true or false; got "no"/);
    expect(resolveEngineConfig({}).activation_storage).toBe('auto');
    expect(resolveEngineConfig({ activation_storage: 'f16' }).activation_storage).toBe('f16');
    expect(() => resolveEngineConfig({ activation_storage: 'bf16' })).toThrow(/engine\.activation_storage must be one of auto, f32, f16; got "bf16"/);
    expect(resolveEngineConfig({}).phase_buffers).toBe('keep');
    expect(resolveEngineConfig({ phase_buffers: 'release' }).phase_buffers).toBe('release');
    expect(() => resolveEngineConfig({ phase_buffers: false })).toThrow(/^engine config: engine\.phase_buffers must be one of keep, release; got false$/);
  });

  it("resolves activation_storage on the device: 'auto' is f16 beside f16 products with shader-f16 only, 'f16' without shader-f16 refused", () => {
    const caps = (shaderF16: boolean) => ({ shaderF16 }) as Capabilities;
    const storage = (setting: unknown, shaderF16: boolean, products: Products) => resolveActivationStorage(resolveEngineConfig({ activation_storage: setting }), caps(shaderF16), products).storage;
    expect(storage('auto', true, 'f16')).toBe('f16');
    expect(storage('auto', true, 'int8')).toBe('f32');
    expect(storage('auto', true, 'f32')).toBe('f32');
    expect(storage('auto', false, 'f16')).toBe('f32');
    expect(storage('f16', true, 'f32')).toBe('f16');
    expect(storage('f32', true, 'f16')).toBe('f32');
    expect(() => storage('f16', false, 'f16')).toThrow(MissingFeatureError);
    expect(() => storage('f16', false, 'f16')).toThrow(/'shader-f16'/);
  });

  it('kv_cache: auto by default, f16 only on the f16 products with shader-f16; f16 refused without shader-f16; unknown values refused by name', () => {
    expect(defaultEngineConfig().kv_cache).toBe('auto');
    expect(resolveEngineConfig({ kv_cache: 'f16' }).kv_cache).toBe('f16');
    expect(() => resolveEngineConfig({ kv_cache: 'bf16' })).toThrow(/^engine config: engine\.kv_cache must be one of auto, f32, f16; got "bf16"$/);
    expect(() => resolveEngineConfig({ kv_cache: null })).toThrow(/engine\.kv_cache must be one of auto, f32, f16; got null/);
    expect(() => resolveEngineConfig({ kv_caches: 'f16' })).toThrow(/engine\.kv_caches: unknown field; did you mean kv_cache\?/);
    const withF16 = capabilities(true);
    const without = capabilities(false);
    const auto = defaultEngineConfig();
    // auto follows the products: f32 and int8 keep the f32 cache, f16 takes f16 where the device can.
    expect(resolveKvCache(auto, 'f32', withF16)).toEqual({ dtype: 'f32', why: 'auto: the products run on f32, not f16' });
    expect(resolveKvCache(auto, 'int8', withF16).dtype).toBe('f32');
    expect(resolveKvCache(auto, 'f16', withF16)).toEqual({ dtype: 'f16', why: 'auto: the products run on f16 and the device offers shader-f16' });
    expect(resolveKvCache(auto, 'f16', without)).toEqual({ dtype: 'f32', why: 'auto: no shader-f16 on this device' });
    // Named settings hold on any products; f16 needs shader-f16.
    const f16 = resolveEngineConfig({ kv_cache: 'f16' });
    expect(resolveKvCache(f16, 'f32', withF16)).toEqual({ dtype: 'f16', why: 'set by the engine config' });
    expect(resolveKvCache(resolveEngineConfig({ kv_cache: 'f32' }), 'f16', withF16).dtype).toBe('f32');
    expect(() => resolveKvCache(f16, 'f16', without)).toThrow(MissingFeatureError);
    expect(() => resolveKvCache(f16, 'f32', without)).toThrow(/GPU feature 'shader-f16' is required .*kv_cache f16/);
  });

  it('reads a training config\'s gradient_checkpointing (transformers\' name) as the engine\'s', () => {
    const { config, engine } = resolveConfig({ gradient_checkpointing: false });
    expect('gradient_checkpointing' in config).toBe(false);
    expect(engine).toEqual({ gradient_checkpointing: false });
    expect(resolveConfig({}).engine).toEqual({});
    expect(resolveEngineConfig({}, 'engine', engine).gradient_checkpointing).toBe(false);
    expect(resolveEngineConfig({ gradient_checkpointing: false }, 'engine', engine).gradient_checkpointing).toBe(false);
    expect(() => resolveEngineConfig({ gradient_checkpointing: true }, 'engine', engine)).toThrow(/engine\.gradient_checkpointing is true and the training config's gradient_checkpointing false: give one/);
  });

  it('maps each products setting onto the model options it stands for', () => {
    expect(productOptions('f32', 'f32')).toEqual({ products: 'f32', visionProducts: 'f32' });
    expect(productOptions('int8', 'int8')).toEqual({ products: 'int8', visionProducts: 'int8' });
    expect(productOptions('f16', 'f16')).toEqual({ products: 'f16', visionProducts: 'f16' });
    // The name an earlier version stored in the browser still reads.
    expect(storedProductsValue('int8-one-limb')).toBe('int8-1limb');
    expect(storedProductsValue('int9')).toBeUndefined();
  });
});

describe('loss command input', () => {
  const input = { logps: [[-1, -2], [-1, -1]], mask: [[1, 1], [1, 0]], rewards: [1, 0], num_generations: 2, config: {} as Record<string, unknown> };
  it('refuses unknown keys of the input and of its config, with their path', () => {
    expect(parseLossRequest(input).config.loss_type).toBe('dapo');
    expect(() => parseLossRequest({ ...input, config: { loss_typ: 'grpo' } })).toThrow(/^config\.loss_typ: unknown field; did you mean loss_type\?$/);
    expect(() => parseLossRequest({ ...input, config: { rollout_correction: { clip_mx: 2 } } })).toThrow(/config\.rollout_correction\.clip_mx: unknown field; did you mean clip_max\?/);
    expect(() => parseLossRequest({ ...input, reward: [1, 0] })).toThrow(/^reward: unknown field; did you mean rewards\?$/);
    // resolveLossConfig itself, as the grads command and library callers reach it.
    expect(() => resolveLossConfig({ epsilon_hi: 0.28 } as never)).toThrow(/^loss config: epsilon_hi: unknown field; did you mean epsilon_high\?$/);
    expect(() => resolveLossConfig(null as never)).toThrow(/^loss config: the config must be an object; got null$/);
  });
});
