// The bundled teaching demo's fixed data (issue 7), shared by the app, the CLI and
// tools/train_demo.py (which reads it through `npm run cli -- export-data`): which synthetic tasks,
// at which image size, the seeds and counts of each row set, the system prompt, and the answer
// styles the demo model was trained on.
//
// Row sets are whole synthetic data sets of their own seed rather than a split of one: every row
// is a pure function of (task, seed, index, size), so the sets cannot overlap and anyone can
// regenerate any of them without the others.
import { DEFAULT_SYSTEM_PROMPT } from './prompt';
import { syntheticDataset, SYNTHETIC_TASK_NAMES, type SyntheticTask } from './synthetic';
import type { BarChartMeta } from './synthetic/barChart';
import type { TriangleMeta } from './synthetic/triangleAngle';
import type { DatasetRow } from './types';
import type { TrainConfigInput } from '../rl/config';

/** public/demo, as the app serves it (Vite serves public/ at the site root). */
export const DEMO_MODEL_URL_PATH = '/demo';
/** The same folder from the repository root, for Node (tests, the CLI). */
export const DEMO_MODEL_DIR = 'public/demo';

export const DEMO_TASKS: readonly SyntheticTask[] = SYNTHETIC_TASK_NAMES;

/**
 * 128×128 images: smart_resize keeps them as they are (a multiple of 32), 8×8 patches of 16 pixels,
 * 4×4 = 16 image tokens after the 2×2 merge. public/demo/preprocessor_config.json pins min and max
 * pixels to 128², so other images are brought to about that size too.
 */
export const DEMO_IMAGE_SIZE = 128;
export const DEMO_PIXELS = DEMO_IMAGE_SIZE * DEMO_IMAGE_SIZE;

export const DEMO_SYSTEM_PROMPT = DEFAULT_SYSTEM_PROMPT;

export interface DemoRowSet {
  seed: number;
  count: number;
}

export type DemoSetName = 'sft' | 'validation' | 'heldOut' | 'rl';

export const DEMO_SETS: Readonly<Record<DemoSetName, DemoRowSet>> = {
  /** Supervised training rows of the demo model (tools/train_demo.py). */
  sft: { seed: 7001, count: 40000 },
  /** The training script's checkpoint choice. */
  validation: { seed: 7002, count: 150 },
  /** Before/after evaluation, in PyTorch (public/demo/README.md) and in the app. */
  heldOut: { seed: 7003, count: 200 },
  /** Prompts of the in-app RL run. */
  rl: { seed: 7004, count: 512 },
};

export function demoRows(set: DemoSetName): DatasetRow[] {
  const { seed, count } = DEMO_SETS[set];
  return syntheticDataset({ seed, count, tasks: DEMO_TASKS, size: DEMO_IMAGE_SIZE });
}

/**
 * How a supervised target is written. Only 'formatted' earns both format-reward terms and is the
 * only one the correctness reward can read; the others leave RL something to fix.
 */
export type DemoAnswerStyle = 'formatted' | 'sentence' | 'bare' | 'reasoning_only';
export const DEMO_ANSWER_STYLES: readonly DemoAnswerStyle[] = ['formatted', 'sentence', 'bare', 'reasoning_only'];

/** Templates with {reasoning} and {answer} (Python's str.format reads the same strings). */
export const DEMO_STYLE_TEMPLATES: Readonly<Record<DemoAnswerStyle, string>> = {
  formatted: '<REASONING>{reasoning}</REASONING>\n<SOLUTION>{answer}</SOLUTION>',
  sentence: 'The answer is {answer}.',
  bare: '{answer}',
  reasoning_only: '<REASONING>{reasoning}</REASONING>\nThe answer is {answer}.',
};

/**
 * Each target's style is drawn afresh with these probabilities per task. The formatted share is
 * the largest for counting and bar charts and loses to 'sentence' on triangles, so greedy decoding
 * is in format for two tasks of three, while sampling keeps every style within reach of RL.
 */
export const DEMO_STYLE_MIX: Readonly<Record<SyntheticTask, Readonly<Record<DemoAnswerStyle, number>>>> = {
  counting: { formatted: 0.7, sentence: 0.15, bare: 0.05, reasoning_only: 0.1 },
  bar_value: { formatted: 0.6, sentence: 0.25, bare: 0.05, reasoning_only: 0.1 },
  triangle_angle: { formatted: 0.3, sentence: 0.6, bare: 0.05, reasoning_only: 0.05 },
};

function taskOf(row: DatasetRow): SyntheticTask {
  const task = row.meta.task;
  if (typeof task !== 'string' || !(DEMO_TASKS as readonly string[]).includes(task)) {
    throw new Error(`demo: row ${row.id} is not a synthetic task row (meta.task ${JSON.stringify(task)})`);
  }
  return task as SyntheticTask;
}

/** A short worked reasoning for a synthetic row, from the parameters it was drawn with. */
export function demoReasoning(row: DatasetRow): string {
  const task = taskOf(row);
  if (task === 'counting') {
    const { color, shape } = row.meta as { color: string; shape: string };
    const n = Number(row.answer);
    const tally = Array.from({ length: n }, (_, i) => String(i + 1)).join(', ');
    return `I count the ${color} ${shape}s one by one: ${tally}. There are ${n}.`;
  }
  if (task === 'bar_value') {
    const meta = row.meta as unknown as BarChartMeta;
    return `The value axis goes from 0 to ${meta.scale.max}. Bar ${meta.asked} ends at ${row.answer}.`;
  }
  const meta = row.meta as unknown as TriangleMeta;
  const [a, b] = meta.angles.filter((_, i) => i !== meta.unknown);
  return `The angles of a triangle add up to 180. The other two angles are ${a} and ${b}, so x = 180 - ${a} - ${b} = ${row.answer}.`;
}

/** The supervised target text of `row` in `style` (without the end-of-turn token). */
export function demoCompletion(row: DatasetRow, style: DemoAnswerStyle): string {
  return DEMO_STYLE_TEMPLATES[style].replace('{reasoning}', demoReasoning(row)).replace('{answer}', row.answer);
}


/**
 * The demo's RL run (the app's default and `train --demo`): GSPO (sequence-level ratio, TRL's
 * GSPO clip range) with the seeds' rewards (0.3·format + 1.0·correctness, the trainer's default),
 * 4 prompts x 8 completions a step. Chosen on an H100 (README.md, "The demo"): at lr 1e-3 the
 * held-out reward rises for 60 steps and holds; at 5e-3 with one prompt a step it rises faster and
 * then collapses to empty answers after ~45 steps.
 */
export const DEMO_TRAIN_CONFIG: TrainConfigInput = {
  model_name_or_path: DEMO_MODEL_DIR,
  dataset: { kind: 'synthetic', tasks: [...DEMO_TASKS], count: DEMO_SETS.rl.count, seed: DEMO_SETS.rl.seed, size: DEMO_IMAGE_SIZE },
  system_prompt: DEMO_SYSTEM_PROMPT,
  importance_sampling_level: 'sequence',
  epsilon: 3e-4,
  epsilon_high: 4e-4,
  loss_type: 'grpo',
  num_generations: 8,
  per_device_train_batch_size: 32,
  max_completion_length: 64,
  learning_rate: 1e-3,
  lr_scheduler_type: 'constant',
  max_steps: 60,
  save_steps: 20,
};

/**
 * `train --demo --quick`, what CI runs on software Vulkan: one prompt x 4 completions a step at a
 * higher rate, 12 steps (well before the collapse that rate brings later).
 */
export const DEMO_QUICK_CONFIG: TrainConfigInput = {
  num_generations: 4,
  per_device_train_batch_size: 4,
  learning_rate: 5e-3,
  max_steps: 12,
  save_steps: 12,
};
