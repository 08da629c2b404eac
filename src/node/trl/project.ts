// The text files of a TRL project for a vlrl training run (`export-trl`): train.py building
// GRPOConfig and PEFT's LoraConfig from the run's config, rewards.py with one TRL reward function
// per reward term, the accelerate + DeepSpeed ZeRO-2 config, a launch script, requirements and a
// README. Which of our fields go where, and which have no TRL counterpart, is `trlFields`.
import { LORA_TARGETS, VISION_LORA_TARGET, type TrainConfig } from '../../rl/config';
import type { EngineConfig } from '../../rl/engineConfig';
import { isBuiltinName, type RewardTerm } from '../../rewards/registry';
import { scheduleOf } from '../../rl/schedule';

/**
 * GRPOConfig's own fields that the export writes (each must be a field of TRL's grpo_config.py;
 * test/fixtures/trl/grpo_config_fields.json lists them).
 */
export type GrpoFields = Record<string, unknown>;
/** Fields GRPOConfig inherits from transformers.TrainingArguments. */
export type TrainingArgumentFields = Record<string, unknown>;

export interface TrlFields {
  grpo: GrpoFields;
  trainingArguments: TrainingArgumentFields;
  /** Our fields that are not GRPOConfig fields, with what became of them. */
  notCarried: { field: string; why: string }[];
}

/** Where each field of the run's config goes in TRL (and the engine's gradient_checkpointing, a TrainingArguments field). */
export function trlFields(c: TrainConfig, engine: Pick<EngineConfig, 'gradient_checkpointing'>): TrlFields {
  const grpo: GrpoFields = {
    learning_rate: c.learning_rate,
    num_generations: c.num_generations,
    max_completion_length: c.max_completion_length,
    temperature: c.temperature,
    top_p: c.top_p,
    top_k: c.top_k,
    ...(c.steps_per_generation !== null ? { steps_per_generation: c.steps_per_generation } : {}),
    num_iterations: c.num_iterations,
    importance_sampling_level: c.importance_sampling_level,
    epsilon: c.epsilon,
    ...(c.epsilon_high !== null ? { epsilon_high: c.epsilon_high } : {}),
    loss_type: c.loss_type,
    beta: c.beta,
    scale_rewards: c.scale_rewards,
    mask_truncated_completions: c.mask_truncated_completions,
    // thinking_mode 'on' / 'off' is the template's enable_thinking, which TRL passes through chat_template_kwargs.
    ...(c.thinking_mode !== 'auto' ? { chat_template_kwargs: { enable_thinking: c.thinking_mode === 'on' } } : {}),
    reward_weights: c.rewards.map((t) => t.weight),
    // Ours counts prompt groups, TRL's completions.
    num_completions_to_print: c.num_completions_to_print * c.num_generations,
    // TRL applies the correction to vLLM's samples only; without vLLM these have no effect.
    vllm_importance_sampling_correction: c.rollout_correction.mode !== null,
    ...(c.rollout_correction.mode !== null
      ? {
          vllm_importance_sampling_mode: c.rollout_correction.mode,
          ...(c.rollout_correction.clip_max !== null ? { vllm_importance_sampling_clip_max: c.rollout_correction.clip_max } : {}),
          ...(c.rollout_correction.clip_min !== null ? { vllm_importance_sampling_clip_min: c.rollout_correction.clip_min } : {}),
        }
      : {}),
  };
  const trainingArguments: TrainingArgumentFields = {
    per_device_train_batch_size: c.per_device_train_batch_size,
    gradient_accumulation_steps: c.gradient_accumulation_steps,
    max_steps: c.max_steps,
    lr_scheduler_type: c.lr_scheduler_type,
    // As steps (ours and transformers' rule for a ratio): transformers deprecates warmup_ratio.
    ...(scheduleOf(c).warmup > 0 ? { warmup_steps: scheduleOf(c).warmup } : {}),
    adam_beta1: c.adam_beta1,
    adam_beta2: c.adam_beta2,
    adam_epsilon: c.adam_epsilon,
    weight_decay: c.weight_decay,
    // transformers clips only when max_grad_norm > 0.
    max_grad_norm: c.max_grad_norm ?? 0,
    gradient_checkpointing: engine.gradient_checkpointing,
    seed: c.seed,
    ...(c.save_steps > 0 ? { save_strategy: 'steps', save_steps: c.save_steps } : { save_strategy: 'no' }),
    logging_steps: c.logging_steps,
  };
  return {
    grpo,
    trainingArguments,
    notCarried: [
      { field: 'max_prompt_length', why: `${c.max_prompt_length ?? 'null'} here; not carried: TRL's GRPOConfig has no prompt-length limit (long prompts are not skipped)` },
      { field: 'model_name_or_path', why: 'MODEL in train.py' },
      { field: 'dataset', why: 'the rows, written to data/train.parquet' },
      { field: 'system_prompt', why: 'SYSTEM_PROMPT in train.py, put before each prompt' },
      { field: 'rewards', why: 'the functions of rewards.py (reward_funcs) and reward_weights' },
      { field: 'lora', why: "PEFT's LoraConfig in train.py" },
      ...(c.thinking_budget !== null ? [{ field: 'thinking_budget', why: `${c.thinking_budget} here; not carried: GRPOConfig has no thinking budget (vLLM's SamplingParams thinking_token_budget would need a custom rollout)` }] : []),
      ...(['max_images_per_message', 'max_images_per_step', 'image_only_mode'] as const).map((field) => ({
        field,
        why: `${JSON.stringify(c[field])} here; not carried: TRL's GRPOConfig has no image caps (every image of a row reaches the prompt, with its text)`,
      })),
    ],
  };
}

/** A JSON value as a Python literal (JSON's string escapes are Python's too). */
export function pyLiteral(v: unknown): string {
  if (v === null || v === undefined) return 'None';
  if (v === true) return 'True';
  if (v === false) return 'False';
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new Error(`export-trl: ${v} has no Python literal`);
    return String(v);
  }
  if (typeof v === 'string') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(pyLiteral).join(', ')}]`;
  return `{${Object.entries(v as Record<string, unknown>).map(([k, x]) => `${JSON.stringify(k)}: ${pyLiteral(x)}`).join(', ')}}`;
}

function pyDict(name: string, fields: Record<string, unknown>): string {
  return `${name} = dict(\n${Object.entries(fields).map(([k, v]) => `    ${k}=${pyLiteral(v)},`).join('\n')}\n)`;
}

const PY_KEYWORDS = new Set(['False', 'None', 'True', 'and', 'as', 'assert', 'async', 'await', 'break', 'class', 'continue', 'def', 'del', 'elif', 'else', 'except', 'finally', 'for', 'from', 'global', 'if', 'import', 'in', 'is', 'lambda', 'nonlocal', 'not', 'or', 'pass', 'raise', 'return', 'try', 'while', 'with', 'yield']);

/** A term's Python function name: its name with '.' and '-' as '_' (TRL logs rewards under it). */
export function rewardFunctionName(term: RewardTerm): string {
  let name = term.name.replace(/[.-]/g, '_');
  if (/^\d/.test(name) || PY_KEYWORDS.has(name) || name === 'REWARD_FUNCS') name = `reward_${name}`;
  return name;
}

/** rewards.py: one function per term, TRL's signature, the gold answer from the `answer` column. */
export function rewardsPy(terms: readonly RewardTerm[]): string {
  const names = terms.map(rewardFunctionName);
  const dup = names.find((n, i) => names.indexOf(n) !== i);
  if (dup) throw new Error(`export-trl: two reward terms become the Python function '${dup}'; rename one`);
  const fns = terms.map((t, i) => {
    const name = names[i];
    if (t.source !== undefined) {
      return [
        `def ${name}(completions, **kwargs):`,
        `    # Custom JavaScript reward '${t.name}' of the vlrl run, to port by hand. It took (completion, answer,`,
        '    # {prompt, index}) and returned a number; its source:',
        ...t.source.split('\n').map((l) => `    #   ${l}`),
        `    raise NotImplementedError(${pyLiteral(`reward term '${t.name}' is custom JavaScript in the vlrl run: port it to Python in rewards.py (README.md)`)})`,
      ].join('\n');
    }
    const builtin = t.builtin ?? t.name;
    if (!isBuiltinName(builtin)) throw new Error(`export-trl: no built-in reward '${builtin}'`);
    const call =
      builtin === 'format'
        ? 'format_score(completion_text(c))'
        : builtin === 'correctness'
          ? 'correctness_score(completion_text(c), a)'
          : `boxed_score(completion_text(c), a, reward_max_val=${pyLiteral(t.params?.reward_max_val ?? 1)}, reward_min_val=${pyLiteral(t.params?.reward_min_val ?? 0)})`;
    const body = builtin === 'format' ? `[float(${call}) for c in completions]` : `[float(${call}) for c, a in zip(completions, kwargs["answer"])]`;
    return `def ${name}(completions, **kwargs):\n    """vlrl's built-in '${builtin}' reward${t.params ? ` (${Object.entries(t.params).map(([k, v]) => `${k} ${v}`).join(', ')})` : ''}."""\n    return ${body}`;
  });
  return [
    '# Reward functions of the vlrl run, with TRL\'s reward-function signature: completions in, one',
    '# float each out; the gold answer comes from the dataset\'s "answer" column (a keyword argument).',
    '# Generated by `npm run cli -- export-trl`; the rules live in vlrl_rewards.py.',
    'from vlrl_rewards import boxed_score, completion_text, correctness_score, format_score  # noqa: F401',
    '',
    '',
    fns.join('\n\n\n'),
    '',
    '',
    '# In the order of GRPOConfig.reward_weights.',
    `REWARD_FUNCS = [${names.join(', ')}]`,
    '',
  ].join('\n');
}

export interface TrainPyOptions {
  config: TrainConfig;
  /** How the run's engine ran it (gradient_checkpointing carries over). */
  engine: EngineConfig;
  /** model_name_or_path as the project loads it (a hub id or an absolute path). */
  model: string;
  /** Whether adapter/ holds the adapter to start from. */
  adapter: boolean;
}

/** train.py: the run as GRPOTrainer + GRPOConfig + LoraConfig on data/train.parquet. */
export function trainPy(o: TrainPyOptions): string {
  const { grpo, trainingArguments } = trlFields(o.config, o.engine);
  const lora = o.config.lora;
  const targets = LORA_TARGETS.filter((t) => lora.target_modules.includes(t));
  // PEFT full-matches a string target_modules: the decoder's projections, and the vision modules
  // named, as suffixes of a path under model.visual (a list entry's rule).
  const vision = [...new Set(lora.target_modules.filter((t) => VISION_LORA_TARGET.test(t)).map((t) => t.replace(/^(?:model\.)?visual\./, '')))];
  const patterns = [
    ...(targets.length > 0 ? [`.*language_model.*\\.(${targets.join('|')})`] : []),
    ...(vision.length > 0 ? [`model\\.visual\\.(?:.*\\.)?(${vision.map((t) => t.replace(/\./g, '\\.')).join('|')})`] : []),
  ];
  return `# The vlrl run as a TRL GRPO run. Generated by \`npm run cli -- export-trl\`; README.md says how to launch
# it on one or many GPUs (accelerate + DeepSpeed ZeRO-2).
import os

import torch
from datasets import load_dataset
from peft import LoraConfig, PeftModel
from transformers import AutoModelForImageTextToText, AutoProcessor
from trl import GRPOConfig, GRPOTrainer

from rewards import REWARD_FUNCS

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = ${pyLiteral(o.model)}
SYSTEM_PROMPT = ${pyLiteral(o.config.system_prompt)}
START_FROM_ADAPTER = ${o.adapter ? 'True' : 'False'}

# Fields GRPOConfig inherits from transformers.TrainingArguments.
${pyDict('TRAINING_ARGUMENTS', { output_dir: '__OUTPUT_DIR__', ...trainingArguments, bf16: true, report_to: 'none' }).replace('"__OUTPUT_DIR__"', 'os.path.join(HERE, "output")')}

# GRPOConfig's own fields, under TRL's names.
${pyDict('GRPO_FIELDS', grpo)}

# PEFT's LoraConfig: the decoder's linear layers the vlrl run adapts, and the vision modules it names.
LORA = LoraConfig(
    r=${lora.r},
    lora_alpha=${pyLiteral(lora.lora_alpha)},
    lora_dropout=${pyLiteral(lora.lora_dropout)},
    target_modules=${pyLiteral(patterns.length === 1 ? patterns[0] : patterns.map((p) => `(?:${p})`).join('|'))},
    task_type="CAUSAL_LM",
)


def to_prompt(row):
    """A conversational prompt: the system prompt, then the problem with an image part at each <image>."""
    system = row.get("system_prompt") or SYSTEM_PROMPT
    content = []
    for k, text in enumerate(row["problem"].split("<image>")):
        if k > 0:
            content.append({"type": "image"})
        if text:
            content.append({"type": "text", "text": text})
    messages = [{"role": "system", "content": [{"type": "text", "text": system}]}] if system else []
    return {"prompt": messages + [{"role": "user", "content": content}]}


def main():
    dataset = load_dataset("parquet", data_files=os.path.join(HERE, "data", "train.parquet"), split="train")
    dataset = dataset.map(to_prompt)
    model = AutoModelForImageTextToText.from_pretrained(MODEL, dtype=torch.bfloat16)
    peft_config = LORA
    if START_FROM_ADAPTER:
        model = PeftModel.from_pretrained(model, os.path.join(HERE, "adapter"), is_trainable=True)
        peft_config = None
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=REWARD_FUNCS,
        args=GRPOConfig(**TRAINING_ARGUMENTS, **GRPO_FIELDS),
        train_dataset=dataset,
        processing_class=AutoProcessor.from_pretrained(MODEL),
        peft_config=peft_config,
    )
    trainer.train()
    trainer.save_model(os.path.join(HERE, "output", "adapter"))


if __name__ == "__main__":
    main()
`;
}

/** accelerate's config for DeepSpeed ZeRO-2 on one machine; --num_processes picks the GPUs. */
export const ACCELERATE_ZERO2 = `compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  deepspeed_multinode_launcher: standard
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: false
  zero_stage: 2
distributed_type: DEEPSPEED
downcast_bf16: 'no'
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 1
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
`;

export const LAUNCH_SH = `#!/bin/sh
# Launch train.py on this machine's GPUs with DeepSpeed ZeRO-2: ./launch.sh [NUM_GPUS]
# (default: every GPU nvidia-smi lists; 1 when it lists none).
set -e
cd "$(dirname "$0")"
N="\${1:-$(nvidia-smi -L 2>/dev/null | wc -l)}"
[ "$N" -ge 1 ] 2>/dev/null || N=1
exec accelerate launch --config_file accelerate_zero2.yaml --num_processes "$N" train.py
`;

export const REQUIREMENTS = `torch
transformers>=4.57
trl
peft
accelerate
deepspeed
datasets
pillow
`;

export interface ReadmeOptions {
  config: TrainConfig;
  engine: EngineConfig;
  model: string;
  rows: number;
  adapter: string | null;
  source: string;
}

export function projectReadme(o: ReadmeOptions): string {
  const { notCarried } = trlFields(o.config, o.engine);
  const custom = o.config.rewards.filter((t) => t.source !== undefined);
  const c = o.config;
  return `# TRL project for a vlrl run

Generated by \`npm run cli -- export-trl\` from \`${o.source}\`: the same GRPO/GSPO run on TRL's
\`GRPOTrainer\`, for one GPU or many (accelerate + DeepSpeed ZeRO-2).

| file | what |
| --- | --- |
| \`train.py\` | the model (\`${o.model}\`), the data set, \`GRPOConfig\` and PEFT's \`LoraConfig\` |
| \`rewards.py\` | one TRL reward function per reward term, in the order of \`reward_weights\` |
| \`vlrl_rewards.py\` | vlrl's built-in rewards ported to Python (format, correctness with numeric normalisation, geo3k boxed) |
| \`data/train.parquet\` | ${o.rows} rows in the geo3k layout: \`problem\` (one \`<image>\` per image), \`images\` (PNG bytes embedded), \`answer\` |
| \`accelerate_zero2.yaml\` | accelerate's config for DeepSpeed ZeRO-2 |
| \`launch.sh\` | \`accelerate launch\` on N GPUs |
| \`run_config.json\` | the vlrl config this was made from, every default filled in, with its \`engine\` entry |
${o.adapter ? `| \`adapter/\` | the PEFT adapter the run starts from (${o.adapter}) |\n` : ''}
## Run
\`\`\`sh
pip install -r requirements.txt
./launch.sh 1        # one GPU
./launch.sh 8        # eight GPUs of this machine
# the same by hand:
accelerate launch --config_file accelerate_zero2.yaml --num_processes 8 train.py
\`\`\`
The adapter is saved to \`output/adapter\` at the end (checkpoints under \`output/\`).

Batch sizes are per GPU, as in TRL: with N GPUs each optimizer step sees N times the
${c.per_device_train_batch_size} completions (${c.per_device_train_batch_size / c.num_generations} prompt(s) x ${c.num_generations}) of
one GPU. To keep the run's step size, divide \`gradient_accumulation_steps\` or
\`per_device_train_batch_size\` by N (the generation batch must stay a multiple of \`num_generations\`).

## Reward terms
${c.rewards.map((t) => `- \`${rewardFunctionName(t)}\` (weight ${t.weight}): ${t.source !== undefined ? '**custom JavaScript: not ported**; it raises NotImplementedError until you write it in Python' : `vlrl's \`${t.builtin ?? t.name}\`${t.params ? ` with ${JSON.stringify(t.params)}` : ''}`}`).join('\n')}
${custom.length ? `\nPort ${custom.map((t) => `\`${rewardFunctionName(t)}\``).join(', ')} before training: its JavaScript source is in a comment above the function in \`rewards.py\`.\n` : ''}
## The config's fields outside GRPOConfig
${notCarried.map((n) => `- \`${n.field}\`: ${n.why}`).join('\n')}
- The engine's own settings (4-bit base weights, tensor cores) have no counterpart: TRL trains the bf16 model.
`;
}
