// The one training configuration: TRL's GRPOConfig names and defaults where TRL has them, PEFT's
// LoraConfig names for the adapter. `resolveConfig` fills the defaults, refuses what cannot run
// (ConfigError, with the reason) and returns warnings where TRL only warns.
//
// Batch semantics (as TRL, counted in completions):
//   micro-batch       = per_device_train_batch_size completions = that / num_generations prompts
//                       (here it must hold whole groups: one training forward scores one group)
//   optimizer step    = gradient_accumulation_steps micro-batches
//   generation batch  = per_device_train_batch_size · steps_per_generation completions, sampled at
//                       once and trained on num_iterations times before the next generation
// `step` (max_steps, save_steps, logging_steps, the LR schedule) counts optimizer steps.
import { DEFAULT_SYSTEM_PROMPT } from '../data/prompt';
import { THINKING_MODES, type ThinkingMode } from '../model/processor/chat';
import { presetTerms, validateTerms, type RewardTerm } from '../rewards/registry';
import { ConfigError, findUnknownKey, isPlainObject, unknownFieldMessage } from './configKeys';
import { datasetTemplate, DATASET_KINDS, defaultDataset, legacyDataTemplate, resolveDataset, type DatasetKind, type DatasetSettings } from './dataSource';
import { DEFAULT_LOSS_CONFIG, effectiveRolloutCorrection, LossConfigError, resolveLossConfig, validateLossSetup, type LossConfig, type ResolvedLossConfig, type RolloutCorrection } from './lossConfig';
import type { ConfigEngineFields } from './engineConfig';

export { ConfigError } from './configKeys';
export type { DatasetSettings, FileDatasetSettings, HubDatasetSettings, SyntheticDatasetSettings } from './dataSource';

export type LrSchedulerType = 'constant' | 'constant_with_warmup' | 'linear' | 'cosine';
export const LR_SCHEDULERS: readonly LrSchedulerType[] = ['constant', 'constant_with_warmup', 'linear', 'cosine'];

/** The language model's linear layers that can carry an adapter (PEFT module names). */
export const LORA_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
export type LoraTarget = (typeof LORA_TARGETS)[number];
/**
 * The vision modules lora.target_modules may name (opt-in), as PEFT list entries, which match a
 * module whose name is the entry or ends in "." + it: a merger's layer, `merger.linear_fc1|2`
 * (the final merger's alone) or `deepstack_merger_list.<j>.linear_fc1|2` (DeepStack merger j's),
 * and the blocks' layers, `attn.qkv`, `attn.proj`, `mlp.linear_fc1`, `mlp.linear_fc2` (every
 * block's) or under `blocks.<i>.` (block i's); each optionally under `visual.` or `model.visual.`.
 * A bare `linear_fc1` is refused: it names the blocks' MLP layers and every merger's at once.
 */
export const VISION_LORA_TARGET =
  /^(?:(?:model\.)?visual\.)?(?:(?:merger|deepstack_merger_list\.(?:0|[1-9]\d*))\.linear_fc[12]|(?:blocks\.(?:0|[1-9]\d*)\.)?(?:attn\.(?:qkv|proj)|mlp\.linear_fc[12]))$/;

/** PEFT LoraConfig fields, as adapter_config.json writes them. */
export interface LoraSettings {
  /** Adapter rank. Default 8 (PEFT `r`). */
  r: number;
  /** The update is scaled by lora_alpha / r. Default 16 (PEFT's default is 8; 2·r is the usual choice for RL). */
  lora_alpha: number;
  /** Dropout on the adapter's input during training forwards, in [0, 1). Default 0 (PEFT 0.0). */
  lora_dropout: number;
  /**
   * Adapted modules, as PEFT's list: the short names of LORA_TARGETS (that projection of every
   * decoder layer), and, opt-in, vision modules (VISION_LORA_TARGET, e.g. `merger.linear_fc1`,
   * `deepstack_merger_list.0.linear_fc2`, `attn.qkv`, `blocks.3.mlp.linear_fc1`; lora_dropout
   * must then be 0).
   * Default all seven decoder linear layers (TRL's "all-linear" for the LM), no vision module.
   */
  target_modules: string[];
}

/**
 * The loss settings a training config holds: every field of src/rl/lossConfig.ts's LossConfig (TRL
 * names and defaults) but those the config sets from its own fields (max_completion_length,
 * num_generations, gradient_accumulation_steps) or the trainer sets per batch (num_items_in_batch).
 * A field added to LossConfig and its defaults becomes a config field here, known and checked.
 */
export type TrainLossSettings = Omit<LossConfig, 'max_completion_length' | 'num_generations' | 'gradient_accumulation_steps' | 'num_items_in_batch'>;

function lossDefaults(): TrainLossSettings {
  const { max_completion_length: _m, num_generations: _g, gradient_accumulation_steps: _a, num_items_in_batch: _n, ...rest } = structuredClone(DEFAULT_LOSS_CONFIG);
  return rest;
}

/** The loss fields (TRL's GRPOConfig names: loss_type, epsilon, beta, delta, sapo_*, vespo_*, entropy_*, vllm_importance_sampling_*, ...) are documented in src/rl/lossConfig.ts. */
export interface TrainConfig extends TrainLossSettings {
  // ── model and data ──
  /** Model folder or hub id (TRL ModelConfig `model_name_or_path`). Default: the tiny fixture model. */
  model_name_or_path: string;
  /** Where prompts come from (src/rl/dataSource.ts: synthetic, file or hub). Default: synthetic, all tasks. */
  dataset: DatasetSettings;
  /** System prompt for rows without their own; null for none. Default: the seeds' <REASONING>/<SOLUTION> prompt (src/data). */
  system_prompt: string | null;
  // Multi-image prompts: TRL's GRPOConfig has none of these; the names follow synth-ai's Qwen3-VL
  // RL trainer, as issue 39 gives them. Dropped images are a row's last ones (question order),
  // their <image> placeholders taken out of the text; each drop is a trainer 'warning' event.
  /** Keep at most this many images of a row's user message; null: all. Default null. */
  max_images_per_message: number | null;
  /**
   * Keep at most this many images across the prompts of one generation batch (one optimizer
   * step's prompts with the defaults steps_per_generation = gradient_accumulation_steps and
   * num_iterations = 1); prompts sampled after the budget is spent keep fewer images, or none.
   * null: no cap. Default null.
   */
  max_images_per_step: number | null;
  /** The user turn holds only the row's images, its question text left out (rows without images are skipped). Default false. */
  image_only_mode: boolean;
  /**
   * Reward terms and their weights: TRL's `reward_funcs` with `reward_weights` folded in
   * (src/rewards/registry.ts). Default the seeds' preset, 0.3·format + 1.0·correctness.
   */
  rewards: RewardTerm[];

  // ── generation ──
  /** Completions per prompt G (TRL `num_generations`), default 8, at least 2. */
  num_generations: number;
  /** Prompts longer than this many tokens (image pads included) are skipped with a warning; null: no limit. Default 512 (TRL). */
  max_prompt_length: number | null;
  /** Sampling stops after this many tokens; also dr_grpo's normaliser (TRL `max_completion_length`, default 256). */
  max_completion_length: number;
  /** Sampling temperature; log-probs are taken at this temperature too (TRL default 1.0). */
  temperature: number;
  /** Nucleus sampling mass in (0, 1] (TRL default 1.0: off). */
  top_p: number;
  /** Keep the k most likely tokens; 0 disables (TRL default 0). */
  top_k: number;
  /** Min-p sampling in [0, 1]: drop tokens below min_p times the most likely one's probability; null off (TRL default None). */
  min_p: number | null;
  /** Repetition penalty > 0 on tokens already in the sequence (prompt included); 1.0 off (TRL default 1.0). */
  repetition_penalty: number;
  // Thinking models (Qwen3-VL-*-Thinking, Qwen3's hybrid templates). TRL has neither field: it
  // passes `chat_template_kwargs` ({"enable_thinking": ...}, default None) to the chat template,
  // and a thinking budget is vLLM's (SamplingParams `thinking_token_budget`, default None).
  /**
   * The chat template's thinking switch: 'auto' renders the template as shipped (enable_thinking
   * unset, transformers' default), 'on' / 'off' pass enable_thinking = true / false, as TRL's
   * chat_template_kwargs would. A template that opens <think> in its generation prompt (the
   * Thinking models') makes every completion start inside the block; rewards then score the
   * answer after </think> (src/rewards/thinking.ts). Default 'auto'.
   */
  thinking_mode: ThinkingMode;
  /**
   * Stop thinking after this many tokens: once a completion has drawn that many tokens inside its
   * <think> block, </think> is forced (on the GPU, per completion) and generation goes on with the
   * answer, within max_completion_length. Forced tokens are completion tokens like drawn ones:
   * they count in the loss, with sampling log-prob 0 (vLLM's thinking_token_budget forces them
   * through a logits processor, and TRL trains on every token vLLM returns); under a rollout
   * correction a forced token's ratio is therefore the policy's own probability of it, as with
   * vLLM's processed log-probs. null: no budget (vLLM's default). Default null.
   */
  thinking_budget: number | null;

  // ── optimisation ──
  /** Peak AdamW learning rate. Default 1e-5 (TRL's GRPOConfig uses 1e-6 for full fine-tuning; LoRA wants more). */
  learning_rate: number;
  /** 'constant', 'constant_with_warmup', 'linear' or 'cosine' decay to 0 at max_steps (TRL default 'linear'). */
  lr_scheduler_type: LrSchedulerType;
  /** Warm-up as a fraction of max_steps, in [0, 1] (TRL default 0). */
  warmup_ratio: number;
  /** Warm-up steps; when > 0 it overrides warmup_ratio, as in transformers (default 0). */
  warmup_steps: number;
  /** AdamW β1 (TRL `adam_beta1`, default 0.9). */
  adam_beta1: number;
  /** AdamW β2 (TRL `adam_beta2`, default 0.999). */
  adam_beta2: number;
  /** AdamW ε (TRL `adam_epsilon`, default 1e-8). */
  adam_epsilon: number;
  /** Decoupled weight decay (TRL default 0). */
  weight_decay: number;
  /** Clip the global L2 norm of the LoRA gradients to this; null: no clipping (TRL default 1.0). */
  max_grad_norm: number | null;
  /** Completions per micro-batch (TRL `per_device_train_batch_size`, default 8); a multiple of num_generations here. */
  per_device_train_batch_size: number;
  /** Micro-batches whose gradients add up before one optimizer step (TRL default 1). */
  gradient_accumulation_steps: number;
  /** Micro-batches sampled per generation; null means gradient_accumulation_steps (TRL's default). */
  steps_per_generation: number | null;
  /** Passes over each generation batch (TRL `num_iterations`, μ in the GRPO paper; default 1). */
  num_iterations: number;
  // ── loss: the fields of TrainLossSettings (src/rl/lossConfig.ts), and ──
  /** Leave completions cut at max_completion_length out of the loss (TRL default false). */
  mask_truncated_completions: boolean;

  // ── adapter ──
  lora: LoraSettings;

  // ── run ──
  /** Seeds the adapter's initialisation, the prompt order and every sampling draw (TRL default 42). */
  seed: number;
  /** Optimizer steps to train (TRL's default -1, train by epochs, is not offered). Default 200. */
  max_steps: number;
  /** A checkpoint every this many steps; 0: only on pause, stop and at the end (TRL default 500). */
  save_steps: number;
  /** A metrics record every this many steps (TRL default 10; here 1, one line per step). */
  logging_steps: number;
  /** Prompt groups of the latest rollouts kept for display (TRL `num_completions_to_print` counts completions). Default 4. */
  num_completions_to_print: number;
}

/** What a config file may hold: any subset; nested objects are merged field by field. */
export type TrainConfigInput = Partial<Omit<TrainConfig, 'lora' | 'dataset' | 'rollout_correction'>> & {
  lora?: Partial<LoraSettings>;
  /** A kind's fields over its defaults; without `kind`, synthetic. */
  dataset?: Partial<DatasetSettings>;
  rollout_correction?: Partial<RolloutCorrection> | null;
  /**
   * transformers' TrainingArguments name of the engine's gradient_checkpointing
   * (src/rl/engineConfig.ts), read onto it (ResolvedConfig.engine): configs of earlier versions,
   * stored runs and checkpoints, and the app's Train form keep setting it here.
   */
  gradient_checkpointing?: boolean;
  /**
   * Deprecated: the CLI's former file source, {path, mapping, image_folder, limit, numeric_only};
   * read as `dataset: {kind: 'file', ...}` with a warning, so older configs and run folders work.
   */
  data?: Record<string, unknown>;
};

export function defaultConfig(): TrainConfig {
  return {
    model_name_or_path: 'test/fixtures/tiny/tiny-a',
    dataset: defaultDataset('synthetic'),
    system_prompt: DEFAULT_SYSTEM_PROMPT,
    max_images_per_message: null,
    max_images_per_step: null,
    image_only_mode: false,
    rewards: presetTerms('seeds'),
    num_generations: 8,
    max_prompt_length: 512,
    max_completion_length: 256,
    temperature: 1.0,
    top_p: 1.0,
    top_k: 0,
    min_p: null,
    repetition_penalty: 1.0,
    thinking_mode: 'auto',
    thinking_budget: null,
    learning_rate: 1e-5,
    lr_scheduler_type: 'linear',
    warmup_ratio: 0,
    warmup_steps: 0,
    adam_beta1: 0.9,
    adam_beta2: 0.999,
    adam_epsilon: 1e-8,
    weight_decay: 0,
    max_grad_norm: 1.0,
    per_device_train_batch_size: 8,
    gradient_accumulation_steps: 1,
    steps_per_generation: null,
    num_iterations: 1,
    ...lossDefaults(),
    mask_truncated_completions: false,
    lora: { r: 8, lora_alpha: 16, lora_dropout: 0, target_modules: [...LORA_TARGETS] },
    seed: 42,
    max_steps: 200,
    save_steps: 50,
    logging_steps: 1,
    num_completions_to_print: 4,
  };
}

export interface ResolvedConfig {
  config: TrainConfig;
  /** The loss settings derived from it (what src/ops/rlLoss.ts takes). */
  loss: ResolvedLossConfig;
  /** The engine fields the input set under transformers' names (resolveEngineConfig's `fromConfig`). */
  engine: ConfigEngineFields;
  warnings: string[];
}

function int(name: string, v: unknown, min: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) throw new ConfigError(`${name} must be an integer >= ${min}; got ${JSON.stringify(v)}`);
  return v;
}

function num(name: string, v: unknown, lo: number, hi: number, { openLo = false, openHi = false } = {}): number {
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new ConfigError(`${name} must be a finite number; got ${JSON.stringify(v)}`);
  if (v < lo || v > hi || (openLo && v === lo) || (openHi && v === hi)) {
    throw new ConfigError(`${name} must be in ${openLo ? '(' : '['}${lo}, ${hi}${openHi ? ')' : ']'}; got ${v}`);
  }
  return v;
}

/** Generations per optimizer step etc., derived once so the trainer and the UI agree. */
export interface BatchPlan {
  /** Prompts per micro-batch. */
  promptsPerMicroBatch: number;
  /** Micro-batches per generation (steps_per_generation resolved). */
  stepsPerGeneration: number;
  /** Prompts sampled per generation. */
  promptsPerGeneration: number;
  /** Whether old log-probs must be recomputed after generation (TRL's rule: the policy moves within a generation batch, or a rollout correction needs them). */
  recomputeOld: boolean;
}

export function batchPlan(c: TrainConfig): BatchPlan {
  const stepsPerGeneration = c.steps_per_generation ?? c.gradient_accumulation_steps;
  const promptsPerMicroBatch = c.per_device_train_batch_size / c.num_generations;
  const generateEvery = stepsPerGeneration * c.num_iterations;
  return {
    promptsPerMicroBatch,
    stepsPerGeneration,
    promptsPerGeneration: promptsPerMicroBatch * stepsPerGeneration,
    recomputeOld: c.gradient_accumulation_steps % generateEvery !== 0 || effectiveRolloutCorrection(c).mode !== null,
  };
}

/** Defaults filled in and every field checked; throws ConfigError with the reason. */
export function resolveConfig(input: TrainConfigInput | null = {}): ResolvedConfig {
  if (!isPlainObject(input)) throw new ConfigError(`the config must be a JSON object; got ${input === null ? 'null' : Array.isArray(input) ? 'an array' : JSON.stringify(input)}`);
  const d = defaultConfig();
  const warnings: string[] = [];
  const { data: legacyData, gradient_checkpointing, ...given } = input;
  checkKeys(given, legacyData);
  if (gradient_checkpointing !== undefined && typeof gradient_checkpointing !== 'boolean') throw new ConfigError('gradient_checkpointing must be true or false');
  let datasetInput: Record<string, unknown> = isPlainObject(given.dataset) ? given.dataset : {};
  if (given.dataset !== undefined && !isPlainObject(given.dataset)) throw new ConfigError(`dataset must be an object; got ${JSON.stringify(given.dataset)}`);
  if (legacyData !== undefined) {
    if (!isPlainObject(legacyData)) throw new ConfigError(`data must be an object; got ${JSON.stringify(legacyData)}`);
    datasetInput = { kind: 'file', ...legacyData };
    warnings.push(
      `the "data" entry is deprecated: write it as "dataset": ${JSON.stringify(datasetInput)}` + (given.dataset !== undefined ? ' (it replaces the "dataset" entry given beside it)' : ''),
    );
  }
  // Nested objects merge field by field over their defaults; null keeps the defaults.
  const g: Record<string, unknown> = given;
  const merged: Record<string, unknown> = { ...d, ...g };
  for (const [key, value] of Object.entries(d)) {
    if (isPlainObject(value) && (isPlainObject(g[key]) || g[key] === null)) merged[key] = { ...value, ...(g[key] ?? {}) };
  }
  merged.dataset = resolveDataset(datasetInput, legacyData !== undefined ? 'data' : 'dataset');
  const c = merged as unknown as TrainConfig;

  if (typeof c.model_name_or_path !== 'string' || c.model_name_or_path === '') throw new ConfigError('model_name_or_path must be a non-empty string');
  if (c.system_prompt !== null && typeof c.system_prompt !== 'string') throw new ConfigError('system_prompt must be a string or null');
  try {
    validateTerms(c.rewards);
  } catch (e) {
    throw new ConfigError((e as Error).message);
  }

  if (c.max_images_per_message !== null) int('max_images_per_message', c.max_images_per_message, 1);
  if (c.max_images_per_step !== null) int('max_images_per_step', c.max_images_per_step, 1);
  if (typeof c.image_only_mode !== 'boolean') throw new ConfigError('image_only_mode must be true or false');

  int('num_generations', c.num_generations, 2);
  if (c.max_prompt_length !== null) int('max_prompt_length', c.max_prompt_length, 1);
  int('max_completion_length', c.max_completion_length, 1);
  num('temperature', c.temperature, 0, Infinity, { openLo: true });
  num('top_p', c.top_p, 0, 1, { openLo: true });
  int('top_k', c.top_k, 0);
  if (c.min_p !== null) num('min_p', c.min_p, 0, 1);
  num('repetition_penalty', c.repetition_penalty, 0, Infinity, { openLo: true });
  if (!THINKING_MODES.includes(c.thinking_mode)) throw new ConfigError(`thinking_mode must be one of ${THINKING_MODES.join(', ')}; got ${JSON.stringify(c.thinking_mode)}`);
  if (c.thinking_budget !== null) {
    int('thinking_budget', c.thinking_budget, 0);
    if (c.thinking_budget >= c.max_completion_length) {
      warnings.push(`thinking_budget = ${c.thinking_budget} is not below max_completion_length = ${c.max_completion_length}: a completion is cut before the budget can end its thinking`);
    }
    if (c.thinking_mode === 'off') warnings.push(`thinking_budget = ${c.thinking_budget} with thinking_mode 'off': it applies only where a completion still opens a <think> block`);
  }

  num('learning_rate', c.learning_rate, 0, Infinity);
  if (!LR_SCHEDULERS.includes(c.lr_scheduler_type)) {
    throw new ConfigError(`lr_scheduler_type must be one of ${LR_SCHEDULERS.join(', ')}; got ${JSON.stringify(c.lr_scheduler_type)}`);
  }
  num('warmup_ratio', c.warmup_ratio, 0, 1);
  int('warmup_steps', c.warmup_steps, 0);
  if (c.warmup_steps > 0 && c.warmup_ratio > 0) warnings.push(`warmup_steps = ${c.warmup_steps} overrides warmup_ratio = ${c.warmup_ratio}`);
  if (c.lr_scheduler_type === 'constant' && (c.warmup_steps > 0 || c.warmup_ratio > 0)) {
    throw new ConfigError(`lr_scheduler_type 'constant' has no warm-up; use 'constant_with_warmup' or set warmup_steps and warmup_ratio to 0`);
  }
  num('adam_beta1', c.adam_beta1, 0, 1, { openHi: true });
  num('adam_beta2', c.adam_beta2, 0, 1, { openHi: true });
  num('adam_epsilon', c.adam_epsilon, 0, Infinity, { openLo: true });
  num('weight_decay', c.weight_decay, 0, Infinity);
  if (c.max_grad_norm !== null) num('max_grad_norm', c.max_grad_norm, 0, Infinity, { openLo: true });
  int('per_device_train_batch_size', c.per_device_train_batch_size, 1);
  int('gradient_accumulation_steps', c.gradient_accumulation_steps, 1);
  if (c.steps_per_generation !== null) int('steps_per_generation', c.steps_per_generation, 1);
  int('num_iterations', c.num_iterations, 1);
  if (c.per_device_train_batch_size % c.num_generations !== 0) {
    throw new ConfigError(
      `per_device_train_batch_size (${c.per_device_train_batch_size} completions) must be a multiple of num_generations (${c.num_generations}): ` +
        `a micro-batch holds whole groups`,
    );
  }

  let loss: ResolvedLossConfig;
  try {
    const lossInput: Record<string, unknown> = { max_completion_length: c.max_completion_length, num_generations: c.num_generations, gradient_accumulation_steps: c.gradient_accumulation_steps };
    for (const key of Object.keys(lossDefaults())) lossInput[key] = c[key as keyof TrainLossSettings];
    loss = resolveLossConfig(lossInput);
    // The loss checks that concern the configuration alone (a batch of one generation of G).
    warnings.push(
      ...validateLossSetup(loss, {
        batch: c.num_generations,
        tokens: c.max_completion_length,
        hasOld: true,
        hasRef: true,
        hasSampling: true,
      }),
    );
  } catch (e) {
    if (e instanceof LossConfigError) throw new ConfigError(e.message.replace(/^loss config: /, ''));
    throw e;
  }
  if (typeof c.mask_truncated_completions !== 'boolean') throw new ConfigError('mask_truncated_completions must be true or false');

  int('lora.r', c.lora.r, 1);
  num('lora.lora_alpha', c.lora.lora_alpha, 0, Infinity, { openLo: true });
  num('lora.lora_dropout', c.lora.lora_dropout, 0, 1, { openHi: true });
  if (!Array.isArray(c.lora.target_modules) || c.lora.target_modules.length === 0) throw new ConfigError('lora.target_modules must list at least one module');
  const seen = new Set<string>();
  for (const m of c.lora.target_modules) {
    if (typeof m !== 'string' || (!(LORA_TARGETS as readonly string[]).includes(m) && !VISION_LORA_TARGET.test(m))) {
      throw new ConfigError(
        `lora.target_modules: no module '${String(m)}' (modules: ${LORA_TARGETS.join(', ')}; vision mergers: merger.linear_fc1|2, deepstack_merger_list.<j>.linear_fc1|2; vision blocks: [blocks.<i>.]attn.qkv|attn.proj|mlp.linear_fc1|mlp.linear_fc2)`,
      );
    }
    if (seen.has(m)) throw new ConfigError(`lora.target_modules lists '${m}' twice`);
    seen.add(m);
  }
  const vision = c.lora.target_modules.filter((m) => VISION_LORA_TARGET.test(m));
  if (vision.length > 0 && c.lora.lora_dropout > 0) {
    throw new ConfigError(`lora.lora_dropout is ${c.lora.lora_dropout} with vision modules in lora.target_modules (${vision.join(', ')}): the engine applies lora_dropout to the decoder's projections only; set it to 0`);
  }

  int('seed', c.seed, 0);
  if (c.seed >= 2 ** 32) throw new ConfigError(`seed must be below 2^32; got ${c.seed}`);
  int('max_steps', c.max_steps, 1);
  int('save_steps', c.save_steps, 0);
  int('logging_steps', c.logging_steps, 1);
  int('num_completions_to_print', c.num_completions_to_print, 0);

  const plan = batchPlan(c);
  if (c.importance_sampling_level === 'sequence' && !plan.recomputeOld) {
    warnings.push(
      `importance_sampling_level = 'sequence' on-policy (num_iterations = 1, steps_per_generation = gradient_accumulation_steps): ` +
        `every ratio is 1, so GSPO equals GRPO here; off-policy minibatches (steps_per_generation > gradient_accumulation_steps or num_iterations > 1) make them differ`,
    );
  }
  if (c.scale_rewards === 'batch' && plan.promptsPerGeneration === 1) {
    warnings.push(`scale_rewards = 'batch' with one prompt per generation batch is the same as 'group'`);
  }
  return { config: c, loss, engine: gradient_checkpointing === undefined ? {} : { gradient_checkpointing }, warnings };
}

/** The keys a config may hold, at every depth: the defaults' (the dataset's by its kind), rewards' terms, and the deprecated "data". */
function checkKeys(given: Record<string, unknown>, legacyData: unknown): void {
  const kind = isPlainObject(given.dataset) && DATASET_KINDS.includes(given.dataset.kind as DatasetKind) ? (given.dataset.kind as DatasetKind) : 'synthetic';
  const template: Record<string, unknown> = { ...defaultConfig(), dataset: datasetTemplate(kind) };
  const unknown = findUnknownKey(given, template) ?? (legacyData === undefined ? null : findUnknownKey(legacyData, legacyDataTemplate(), 'data'));
  if (unknown !== null) throw new ConfigError(unknown);
  if (!Array.isArray(given.rewards)) return;
  given.rewards.forEach((t, i) => {
    const bad = isPlainObject(t) ? Object.keys(t).find((k) => !REWARD_TERM_KEYS.includes(k)) : undefined;
    if (bad !== undefined) throw new ConfigError(unknownFieldMessage(`rewards[${i}].${bad}`, bad, REWARD_TERM_KEYS));
  });
}

/** Every field of a reward term (a Record over keyof RewardTerm, so TypeScript keeps it complete). */
const REWARD_TERM_KEYS = Object.keys({ name: 0, weight: 0, builtin: 0, params: 0, source: 0 } satisfies Record<keyof RewardTerm, 0>);
