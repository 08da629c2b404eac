// The training config form: every field of src/rl/config.ts under its TRL/PEFT name, with its
// default and inline help (the doc comments, shortened), in collapsible sections: Basics open, the
// others closed to one line of their values that differ from the defaults, so that the form reads
// at a glance and every field stays one click away. `read()` returns the TrainConfigInput the
// worker resolves; the page resolves it first too, so a bad value is shown before a start.
import { defaultConfig, LORA_TARGETS, LR_SCHEDULERS, VISION_LORA_TARGET, type TrainConfig, type TrainConfigInput } from '../../rl/config';
import { defaultEngineConfig } from '../../rl/engineConfig';
import { AGGREGATIONS, LOSS_TYPES } from '../../rl/lossConfig';
import { THINKING_MODES } from '../../model/processor/chat';
import { h } from '../dom';
import { checkbox, field, numberInput, select } from '../form';

// TRL's vllm_importance_sampling_* names are aliases of rollout_correction, which the form leaves to config files.
// gradient_checkpointing is the engine's, set here under transformers' name (src/rl/engineConfig.ts).
type FormValues = TrainConfig & { gradient_checkpointing: boolean };
type Scalar = Exclude<keyof FormValues, 'lora' | 'dataset' | 'rollout_correction' | 'rewards' | 'system_prompt' | 'model_name_or_path' | `vllm_importance_sampling_${string}`>;

interface Spec {
  key: Scalar;
  help: string;
  /** null allowed: the field may be left empty. */
  nullable?: boolean;
  options?: readonly string[];
  step?: string;
}

/**
 * The form's sections, in order: Basics open (what every run sets), the rest collapsed to a line
 * of their values that differ from the defaults. LoRA and the system prompt follow as sections too.
 */
const SECTIONS: { id: string; title: string; open?: boolean; fields: Spec[] }[] = [
  {
    id: 'basics',
    title: 'Basics',
    open: true,
    fields: [
      { key: 'importance_sampling_level', options: ['token', 'sequence'], help: '“token” is GRPO; “sequence” is GSPO (one ratio per completion).' },
      { key: 'loss_type', options: LOSS_TYPES, help: 'The surrogate and how token losses are aggregated (dapo: over all tokens of the batch; cispo, sapo, luspo, vespo as TRL).' },
      { key: 'learning_rate', step: 'any', help: 'Peak AdamW learning rate (LoRA wants more than full fine-tuning).' },
      { key: 'max_steps', help: 'Optimizer steps to train.' },
      { key: 'num_generations', help: 'Completions per prompt G (at least 2); advantages compare the G completions of a prompt.' },
      { key: 'max_completion_length', help: 'Sampling stops after this many tokens; also dr_grpo’s normaliser.' },
    ],
  },
  {
    id: 'sampling',
    title: 'Sampling and images',
    fields: [
      { key: 'temperature', step: 'any', help: 'Sampling temperature; log-probs are taken at this temperature too.' },
      { key: 'top_p', step: 'any', help: 'Nucleus sampling mass in (0, 1]; 1 is off.' },
      { key: 'top_k', help: 'Keep the k most likely tokens; 0 is off.' },
      { key: 'min_p', step: 'any', nullable: true, help: 'Drop tokens below min_p times the most likely one’s probability; empty: off.' },
      { key: 'repetition_penalty', step: 'any', help: 'Penalise tokens already in the sequence, prompt included (transformers’ rule); 1 is off.' },
      { key: 'max_prompt_length', nullable: true, help: 'Longer prompts (image tokens included) are skipped with a warning; empty: no limit.' },
      { key: 'max_images_per_message', nullable: true, help: 'Keep at most this many images of a row, dropping the rest with a warning; empty: all.' },
      { key: 'max_images_per_step', nullable: true, help: 'At most this many images in a generation batch; prompts after the budget keep fewer, with a warning; empty: no cap.' },
      { key: 'image_only_mode', help: 'Prompts of the images alone, without the question’s text (rows without images are skipped).' },
      { key: 'thinking_mode', options: THINKING_MODES, help: 'The chat template’s thinking switch (enable_thinking): auto renders it as the model ships it; on / off set it (Qwen3’s hybrid templates close an empty <think> block when off; Thinking models always open one). Rewards score the answer after </think>.' },
      { key: 'thinking_budget', nullable: true, help: 'Force </think> after this many thinking tokens in each completion, which then goes on with its answer; forced tokens count in the loss (as vLLM’s thinking_token_budget under TRL); empty: no budget.' },
    ],
  },
  {
    id: 'optimizer',
    title: 'Optimizer and batches',
    fields: [
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
    id: 'loss',
    title: 'Loss details',
    fields: [
      { key: 'beta', step: 'any', help: 'KL coefficient to the base model (adapter off); 0 skips the reference pass.' },
      { key: 'epsilon', step: 'any', help: 'Lower clip range ε_low.' },
      { key: 'epsilon_high', step: 'any', nullable: true, help: 'Upper clip range; empty: epsilon.' },
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
    id: 'entropy',
    title: 'Entropy bonus',
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
    id: 'run',
    title: 'Checkpoints and seed',
    fields: [
      { key: 'save_steps', help: 'A checkpoint (in this browser) every this many steps; 0: only on pause, stop and at the end.' },
      { key: 'logging_steps', help: 'Metrics kept with the run every this many steps (and at the last): what its charts show after a reload; live, every step is charted.' },
      { key: 'seed', help: 'Seeds the adapter’s initialisation, the prompt order and every sampling draw.' },
      { key: 'num_completions_to_print', help: 'Prompt groups of the latest rollouts kept for the inspector.' },
    ],
  },
];

export interface ConfigForm {
  element: HTMLElement;
  /** The form's values (empty nullable fields as null, an empty system prompt as null). */
  read(): TrainConfigInput;
  /** Shows these values (a stored form, or the config of the run on the dashboard); fields left out keep theirs. */
  write(values: TrainConfigInput): void;
  /** Locks the fields (while a run uses the values shown). */
  setDisabled(disabled: boolean): void;
  /** The ids of the sections open now (kept with the workspace). */
  openSections(): string[];
  /** Opens exactly these sections (unknown ids are ignored). */
  setOpenSections(ids: readonly string[]): void;
}

/** A collapsible section: its title, then (for the fields it holds) the values that differ from the defaults. */
function section(id: string, title: string, open: boolean, ...content: HTMLElement[]): { element: HTMLDetailsElement; summary: HTMLElement } {
  const summary = h('span', { class: 'section-summary', 'data-testid': `config-section-${id}` });
  const element = h('details', { class: 'form-section', 'data-section': id, open }, h('summary', {}, h('span', { class: 'section-title' }, title), summary), h('div', { class: 'form-fields' }, ...content));
  return { element, summary };
}

/** A section's summary line; a closed section's line may be cut with an ellipsis, so hovering shows it whole. */
function show(summary: HTMLElement, text: string): void {
  summary.textContent = text;
  summary.parentElement!.title = text;
}

/** A value as the section summaries show it: short, so a line holds several. */
const brief = (v: unknown): string => (v === null ? 'empty' : Array.isArray(v) ? v.join(' ') || 'none' : String(v));

/** Non-default values as "key value, ..." (at most four named, then how many more), or "defaults". */
function changedText(changed: [string, unknown][]): string {
  if (changed.length === 0) return 'defaults';
  const shown = changed.slice(0, 4).map(([k, v]) => `${k} ${brief(v)}`);
  return `${shown.join(', ')}${changed.length > 4 ? `, ${changed.length - 4} more` : ''}`;
}

/** `initial` overrides the trainer's defaults as the form's starting values (the app passes the demo run's). */
export function configForm(initial: TrainConfigInput = {}): ConfigForm {
  const base = defaultConfig();
  // The form has no dataset or rollout-correction fields; only the flat settings and LoRA's apply.
  const { lora: initialLora, dataset: _dataset, rollout_correction: _rolloutCorrection, ...flat } = initial;
  const d: FormValues = { ...base, gradient_checkpointing: defaultEngineConfig().gradient_checkpointing, ...flat, lora: { ...base.lora, ...initialLora } };
  const readers = new Map<string, () => unknown>();
  const writers = new Map<string, (v: unknown) => void>();
  const shown = (v: unknown) => (v === null || v === undefined || (typeof v === 'number' && !Number.isFinite(v)) ? '' : String(v));
  const control = (s: Spec): HTMLElement => {
    const def = d[s.key];
    const help = `${s.help} Default ${def === null ? 'empty' : String(def)}.`;
    if (typeof def === 'boolean') {
      const input = h('input', { 'data-key': s.key });
      input.checked = def;
      readers.set(s.key, () => input.checked);
      writers.set(s.key, (v) => (input.checked = v === true));
      return checkbox(s.key, input, help);
    }
    if (s.options) {
      const sel = select(s.options.map((o) => ({ value: o, label: o })), String(def));
      sel.dataset.key = s.key;
      readers.set(s.key, () => sel.value);
      writers.set(s.key, (v) => {
        if (typeof v === 'string' && s.options!.includes(v)) sel.value = v;
      });
      return field(s.key, sel, help);
    }
    const input = numberInput(0, { step: s.step ?? '1', 'data-key': s.key });
    input.value = def === null ? '' : String(def);
    readers.set(s.key, () => (input.value.trim() === '' && s.nullable ? null : Number(input.value)));
    writers.set(s.key, (v) => (input.value = shown(v)));
    return field(s.key, input, help);
  };
  /** Each section's summary, redrawn from its fields' values. */
  const summaries: (() => void)[] = [];
  const sections = SECTIONS.map((g) => {
    const sec = section(g.id, g.title, g.open === true, ...g.fields.map(control));
    summaries.push(() => show(sec.summary, changedText(g.fields.map((f): [string, unknown] => [f.key, readers.get(f.key)!()]).filter(([k, v]) => v !== d[k as Scalar]))));
    return sec.element;
  });

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
  const readLora = () => ({
    r: Number(r.value),
    lora_alpha: Number(alpha.value),
    lora_dropout: Number(dropout.value),
    target_modules: [...targets.filter((x) => x.input.checked).map((x) => x.t), ...vision.value.split(/[\s,]+/).filter(Boolean)],
  });
  const lora = section(
    'lora',
    'LoRA',
    false,
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
  summaries.push(() => {
    const now = readLora();
    const changed = (['r', 'lora_alpha', 'lora_dropout'] as const).filter((k) => now[k] !== d.lora[k]).map((k): [string, unknown] => [k, now[k]]);
    if (now.target_modules.join() !== LORA_TARGETS.filter((t) => d.lora.target_modules.includes(t)).join()) changed.push(['target_modules', now.target_modules]);
    show(lora.summary, changedText(changed));
  });

  const systemPrompt = h('textarea', { rows: 3, 'data-key': 'system_prompt' });
  systemPrompt.value = d.system_prompt ?? '';
  const prompt = section('prompt', 'System prompt', false, field('system_prompt', systemPrompt, 'For rows without their own; empty for none. Default: the seeds’ <REASONING>/<SOLUTION> prompt.'));
  summaries.push(() => {
    const v = systemPrompt.value;
    show(prompt.summary, v === (d.system_prompt ?? '') ? 'default' : v.trim() === '' ? 'none' : `“${v.length > 48 ? `${v.slice(0, 47)}…` : v}”`);
  });

  const element = h('div', { class: 'form-sections' }, ...sections, lora.element, prompt.element);
  const summarize = () => summaries.forEach((f) => f());
  element.addEventListener('input', summarize);
  element.addEventListener('change', summarize);
  summarize();
  return {
    element,
    write(values) {
      for (const [k, v] of Object.entries(values)) writers.get(k)?.(v);
      if (values.system_prompt !== undefined) systemPrompt.value = values.system_prompt ?? '';
      const l = values.lora;
      if (l?.r !== undefined) r.value = shown(l.r);
      if (l?.lora_alpha !== undefined) alpha.value = shown(l.lora_alpha);
      if (l?.lora_dropout !== undefined) dropout.value = shown(l.lora_dropout);
      if (l?.target_modules) {
        for (const x of targets) x.input.checked = l.target_modules.includes(x.t);
        vision.value = visionText(l.target_modules);
      }
      summarize();
    },
    openSections() {
      return [...element.querySelectorAll<HTMLDetailsElement>('details.form-section')].filter((d) => d.open).map((d) => d.dataset.section!);
    },
    setOpenSections(ids) {
      for (const d of element.querySelectorAll<HTMLDetailsElement>('details.form-section')) d.open = ids.includes(d.dataset.section!);
    },
    setDisabled(disabled) {
      for (const el of element.querySelectorAll<HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>('input, select, textarea')) el.disabled = disabled;
    },
    read() {
      const out: Record<string, unknown> = Object.fromEntries([...readers].map(([k, f]) => [k, f()]));
      out.lora = readLora();
      out.system_prompt = systemPrompt.value.trim() === '' ? null : systemPrompt.value;
      return out as TrainConfigInput;
    },
  };
}
