// The training config form: every field of src/rl/config.ts under its TRL/PEFT name, grouped, with
// its default and inline help (the doc comments, shortened). `read()` returns the TrainConfigInput
// the worker resolves; the page resolves it first too, so a bad value is shown before a start.
import { defaultConfig, LORA_TARGETS, LR_SCHEDULERS, VISION_LORA_TARGET, type TrainConfig, type TrainConfigInput } from '../../rl/config';
import { AGGREGATIONS, LOSS_TYPES } from '../../rl/lossConfig';
import { h } from '../dom';
import { checkbox, field, numberInput, select } from '../form';

// TRL's vllm_importance_sampling_* names are aliases of rollout_correction, which the form leaves to config files.
type Scalar = Exclude<keyof TrainConfig, 'lora' | 'dataset' | 'rollout_correction' | 'rewards' | 'system_prompt' | 'model_name_or_path' | `vllm_importance_sampling_${string}`>;

interface Spec {
  key: Scalar;
  help: string;
  /** null allowed: the field may be left empty. */
  nullable?: boolean;
  options?: readonly string[];
  step?: string;
}

const GROUPS: { legend: string; fields: Spec[] }[] = [
  {
    legend: 'Generation',
    fields: [
      { key: 'num_generations', help: 'Completions per prompt G (at least 2); advantages compare the G completions of a prompt.' },
      { key: 'max_prompt_length', nullable: true, help: 'Longer prompts (image tokens included) are skipped with a warning; empty: no limit.' },
      { key: 'max_completion_length', help: 'Sampling stops after this many tokens; also dr_grpo’s normaliser.' },
      { key: 'temperature', step: 'any', help: 'Sampling temperature; log-probs are taken at this temperature too.' },
      { key: 'top_p', step: 'any', help: 'Nucleus sampling mass in (0, 1]; 1 is off.' },
      { key: 'top_k', help: 'Keep the k most likely tokens; 0 is off.' },
      { key: 'min_p', step: 'any', nullable: true, help: 'Drop tokens below min_p times the most likely one’s probability; empty: off.' },
      { key: 'repetition_penalty', step: 'any', help: 'Penalise tokens already in the sequence, prompt included (transformers’ rule); 1 is off.' },
      { key: 'max_images_per_message', nullable: true, help: 'Keep at most this many images of a row, dropping the rest with a warning; empty: all.' },
      { key: 'max_images_per_step', nullable: true, help: 'At most this many images in a generation batch; prompts after the budget keep fewer, with a warning; empty: no cap.' },
      { key: 'image_only_mode', help: 'Prompts of the images alone, without the question’s text (rows without images are skipped).' },
    ],
  },
  {
    legend: 'Optimisation',
    fields: [
      { key: 'learning_rate', step: 'any', help: 'Peak AdamW learning rate (LoRA wants more than full fine-tuning).' },
      { key: 'lr_scheduler_type', options: LR_SCHEDULERS, help: 'Decay to 0 at max_steps (linear, cosine), or constant.' },
      { key: 'warmup_ratio', step: 'any', help: 'Warm-up as a fraction of max_steps.' },
      { key: 'warmup_steps', help: 'Warm-up steps; when > 0 it overrides warmup_ratio.' },
      { key: 'adam_beta1', step: 'any', help: 'AdamW β1.' },
      { key: 'adam_beta2', step: 'any', help: 'AdamW β2.' },
      { key: 'adam_epsilon', step: 'any', help: 'AdamW ε.' },
      { key: 'weight_decay', step: 'any', help: 'Decoupled weight decay.' },
      { key: 'max_grad_norm', step: 'any', nullable: true, help: 'Clip the global L2 norm of the LoRA gradients; empty: no clipping.' },
      { key: 'per_device_train_batch_size', help: 'Completions per micro-batch; a multiple of num_generations (whole groups).' },
      { key: 'gradient_accumulation_steps', help: 'Micro-batches whose gradients add up before one optimizer step.' },
      { key: 'steps_per_generation', nullable: true, help: 'Micro-batches sampled per generation; empty: gradient_accumulation_steps.' },
      { key: 'num_iterations', help: 'Passes over each generation batch (μ in the GRPO paper).' },
      { key: 'gradient_checkpointing', help: 'Recompute each layer in the backward (least memory); off keeps every layer’s activations (about 130 KB a token a layer for the 2B) and skips that forward.' },
    ],
  },
  {
    legend: 'GSPO / GRPO loss',
    fields: [
      { key: 'importance_sampling_level', options: ['token', 'sequence'], help: '“token” is GRPO; “sequence” is GSPO (one ratio per completion).' },
      { key: 'loss_type', options: LOSS_TYPES, help: 'The surrogate and how token losses are aggregated (dapo: over all tokens of the batch; cispo, sapo, luspo, vespo as TRL).' },
      { key: 'epsilon', step: 'any', help: 'Lower clip range ε_low.' },
      { key: 'epsilon_high', step: 'any', nullable: true, help: 'Upper clip range; empty: epsilon.' },
      { key: 'beta', step: 'any', help: 'KL coefficient to the base model (adapter off); 0 skips the reference pass.' },
      { key: 'scale_rewards', options: ['group', 'batch', 'none'], help: 'Advantage normalisation by the group’s std, the batch’s, or none.' },
      { key: 'mask_truncated_completions', help: 'Leave completions cut at max_completion_length out of the loss.' },
      { key: 'delta', step: 'any', nullable: true, help: 'Two-sided clipping: the unclipped ratio is capped at delta too (above 1 + epsilon_high); empty: off.' },
      { key: 'off_policy_mask_threshold', step: 'any', nullable: true, help: 'A sequence with a negative advantage whose mean log-prob drift from sampling is above this leaves the loss (DeepSeek-V3.2); empty: off.' },
      { key: 'top_entropy_quantile', step: 'any', help: 'Keep in the loss only this fraction of tokens, those of highest entropy; 1 keeps all.' },
      { key: 'multi_objective_aggregation', options: AGGREGATIONS, help: 'Several reward terms: sum then normalise per group (TRL’s default), or normalise each per group, sum, and normalise over the batch (GDPO).' },
      { key: 'sapo_temperature_pos', step: 'any', help: 'sapo: gate temperature for positive advantages.' },
      { key: 'sapo_temperature_neg', step: 'any', help: 'sapo: gate temperature for negative advantages.' },
      { key: 'vespo_k_pos', step: 'any', help: 'vespo: shape k for positive advantages.' },
      { key: 'vespo_lambda_pos', step: 'any', help: 'vespo: rate λ for positive advantages.' },
      { key: 'vespo_k_neg', step: 'any', help: 'vespo: shape k for negative advantages.' },
      { key: 'vespo_lambda_neg', step: 'any', help: 'vespo: rate λ for negative advantages.' },
    ],
  },
  {
    legend: 'Entropy bonus',
    fields: [
      { key: 'entropy_coef', step: 'any', help: 'Entropy bonus: the loss minus this times the mean entropy; 0 is off (the start value when adaptive).' },
      { key: 'use_adaptive_entropy', help: 'Skywork-OR1’s control: after each step the coefficient moves by entropy_coef_delta, up while the entropy is at or below entropy_target, down otherwise.' },
      { key: 'entropy_target', step: 'any', help: 'Target mean entropy (nats) of the adaptive control.' },
      { key: 'entropy_coef_delta', step: 'any', help: 'How much the adaptive coefficient moves a step.' },
      { key: 'entropy_coef_min', step: 'any', help: 'Lowest adaptive coefficient.' },
      { key: 'entropy_coef_max', step: 'any', help: 'Highest adaptive coefficient.' },
    ],
  },
  {
    legend: 'Run',
    fields: [
      { key: 'max_steps', help: 'Optimizer steps to train.' },
      { key: 'save_steps', help: 'A checkpoint (in this browser) every this many steps; 0: only on pause, stop and at the end.' },
      { key: 'seed', help: 'Seeds the adapter’s initialisation, the prompt order and every sampling draw.' },
      { key: 'num_completions_to_print', help: 'Prompt groups of the latest rollouts kept for the inspector.' },
    ],
  },
];

export interface ConfigForm {
  element: HTMLElement;
  /** The form's values (empty nullable fields as null). */
  read(): TrainConfigInput;
  /** Shows these values (a stored form, or the config of the run on the dashboard); fields left out keep theirs. */
  write(values: TrainConfigInput): void;
  /** Locks the fields (while a run uses the values shown). */
  setDisabled(disabled: boolean): void;
}

/** `initial` overrides the trainer's defaults as the form's starting values (the app passes the demo run's). */
export function configForm(initial: TrainConfigInput = {}): ConfigForm {
  const base = defaultConfig();
  // The form has no dataset or rollout-correction fields; only the flat settings and LoRA's apply.
  const { lora: initialLora, dataset: _dataset, rollout_correction: _rolloutCorrection, ...flat } = initial;
  const d: TrainConfig = { ...base, ...flat, lora: { ...base.lora, ...initialLora } };
  const readers: (() => [string, unknown])[] = [];
  const writers = new Map<string, (v: unknown) => void>();
  const shown = (v: unknown) => (v === null || v === undefined || (typeof v === 'number' && !Number.isFinite(v)) ? '' : String(v));
  const fieldsets = GROUPS.map((g) =>
    h(
      'fieldset',
      { class: 'inline' },
      h('legend', {}, g.legend),
      ...g.fields.map((s) => {
        const def = d[s.key];
        const help = `${s.help} Default ${def === null ? 'empty' : String(def)}.`;
        if (typeof def === 'boolean') {
          const input = h('input', { 'data-key': s.key });
          input.checked = def;
          readers.push(() => [s.key, input.checked]);
          writers.set(s.key, (v) => (input.checked = v === true));
          return checkbox(s.key, input, help);
        }
        if (s.options) {
          const sel = select(s.options.map((o) => ({ value: o, label: o })), String(def));
          sel.dataset.key = s.key;
          readers.push(() => [s.key, sel.value]);
          writers.set(s.key, (v) => {
            if (typeof v === 'string' && s.options!.includes(v)) sel.value = v;
          });
          return field(s.key, sel, help);
        }
        const input = numberInput(0, { step: s.step ?? '1', 'data-key': s.key });
        input.value = def === null ? '' : String(def);
        readers.push(() => [s.key, input.value.trim() === '' && s.nullable ? null : Number(input.value)]);
        writers.set(s.key, (v) => (input.value = shown(v)));
        return field(s.key, input, help);
      }),
    ),
  );

  const r = numberInput(d.lora.r, { step: '1', 'data-key': 'lora.r' });
  const alpha = numberInput(d.lora.lora_alpha, { step: 'any', 'data-key': 'lora.lora_alpha' });
  const dropout = numberInput(d.lora.lora_dropout, { step: 'any', 'data-key': 'lora.lora_dropout' });
  const targets = LORA_TARGETS.map((t) => {
    const input = h('input', { 'data-key': `lora.target_modules.${t}` });
    input.checked = d.lora.target_modules.includes(t);
    return { t, input };
  });
  // Vision modules, opt-in, as PEFT list entries separated by commas or spaces.
  const visionText = (modules: readonly string[]) => modules.filter((m) => VISION_LORA_TARGET.test(m)).join(', ');
  const vision = h('input', { type: 'text', 'data-key': 'lora.target_modules.vision', placeholder: 'merger.linear_fc1, deepstack_merger_list.0.linear_fc2' });
  vision.value = visionText(d.lora.target_modules);
  const lora = h(
    'fieldset',
    { class: 'inline' },
    h('legend', {}, 'LoRA'),
    field('r', r, `Adapter rank. Default ${d.lora.r}.`),
    field('lora_alpha', alpha, `The update is scaled by lora_alpha / r. Default ${d.lora.lora_alpha}.`),
    field('lora_dropout', dropout, `Dropout on the adapter’s input in training forwards, in [0, 1). Default ${d.lora.lora_dropout}.`),
    h(
      'fieldset',
      { class: 'inline' },
      h('legend', {}, 'target_modules (the projections adapted in every layer)'),
      ...targets.map(({ t, input }) => checkbox(t, input)),
    ),
    field(
      'vision modules',
      vision,
      'Also adapt vision modules (PEFT list entries): merger.linear_fc1|2 (the final merger), deepstack_merger_list.<j>.linear_fc1|2 (DeepStack merger j), attn.qkv, attn.proj, mlp.linear_fc1|2 (every block; blocks.<i>. before them: block i); lora_dropout must be 0. Default none.',
    ),
  );

  const element = h('div', {}, ...fieldsets, lora);
  return {
    element,
    write(values) {
      for (const [k, v] of Object.entries(values)) writers.get(k)?.(v);
      const l = values.lora;
      if (l?.r !== undefined) r.value = shown(l.r);
      if (l?.lora_alpha !== undefined) alpha.value = shown(l.lora_alpha);
      if (l?.lora_dropout !== undefined) dropout.value = shown(l.lora_dropout);
      if (l?.target_modules) {
        for (const x of targets) x.input.checked = l.target_modules.includes(x.t);
        vision.value = visionText(l.target_modules);
      }
    },
    setDisabled(disabled) {
      for (const el of element.querySelectorAll<HTMLInputElement | HTMLSelectElement>('input, select')) el.disabled = disabled;
    },
    read() {
      const out: Record<string, unknown> = Object.fromEntries(readers.map((f) => f()));
      out.lora = { r: Number(r.value), lora_alpha: Number(alpha.value), lora_dropout: Number(dropout.value), target_modules: [...targets.filter((x) => x.input.checked).map((x) => x.t), ...vision.value.split(/[\s,]+/).filter(Boolean)] };
      return out as TrainConfigInput;
    },
  };
}
