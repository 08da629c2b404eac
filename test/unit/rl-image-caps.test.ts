// The trainer's image options (issue 39 point 4): max_images_per_message and max_images_per_step
// drop a row's last images with a 'warning' event, image_only_mode leaves the question out, and
// the config refuses bad values by field name. The toy policy stands in for the model; what is
// checked is the row each prompt was prepared from, against the caps computed here.
import { describe, expect, it } from 'vitest';
import { countPlaceholders } from '../../src/data/prompt';
import type { DatasetRow, RgbaImage } from '../../src/data/types';
import { decodeCheckpoint, encodeCheckpoint, type Checkpoint } from '../../src/rl/checkpoint';
import { ConfigError, defaultConfig, resolveConfig, type TrainConfigInput } from '../../src/rl/config';
import { Trainer, type PromptSource, type TrainerEvent } from '../../src/rl/trainer';
import { testGpu } from '../helpers/gpu';
import { ToyPolicy } from '../helpers/toyPolicy';

const img = (k: number): RgbaImage => ({ width: 4 + k, height: 4, data: new Uint8ClampedArray((4 + k) * 16).fill(k) });

const ROWS: DatasetRow[] = [
  { id: 'three-interleaved', question: 'A <image> B <image> C <image> D?', images: [img(0), img(1), img(2)], answer: '3', meta: {} },
  { id: 'two-first', question: 'Which is larger?', images: [img(3), img(4)], answer: '3', meta: {} },
  { id: 'one', question: '<image> How many?', images: [img(5)], answer: '3', meta: {} },
  { id: 'text', question: 'What is 1 + 2?', images: [], answer: '3', meta: {} },
];

/** The toy policy's prompts, with one stand-in image per image the row kept; records each row prepared. */
function recordingSource(prepared: DatasetRow[]): PromptSource {
  return {
    rows: ROWS,
    prepare: async (row, system) => {
      prepared.push(row);
      return {
        prompt: {
          id: row.id,
          inputIds: Int32Array.from({ length: 5 + row.id.length }, (_, k) => k),
          images: row.images.map((im, k) => ({ pixelValues: new Float32Array(4), gridThw: [1, 2, 2], key: `${row.id}-${k}-${im.width}` })),
        },
        text: `${system ?? ''}${row.question}`,
      };
    },
  };
}

async function run(input: TrainConfigInput, extra: { saved?: Checkpoint[]; resume?: Checkpoint } = {}) {
  const gpu = await testGpu();
  const { config, loss } = resolveConfig({
    num_generations: 2,
    per_device_train_batch_size: 4,
    max_completion_length: 4,
    max_steps: 2,
    save_steps: 0,
    seed: 3,
    lora: { r: 2, lora_alpha: 4, target_modules: ['q_proj'] },
    ...input,
  });
  const prepared: DatasetRow[] = [];
  const events: TrainerEvent[] = [];
  const trainer = await Trainer.create({
    gpu,
    policy: await ToyPolicy.create(gpu),
    data: recordingSource(prepared),
    config,
    loss,
    runId: 'caps',
    onEvent: (e) => events.push(e),
    saveCheckpoint: async (c) => void extra.saved?.push(c),
    resume: extra.resume,
  });
  expect(await trainer.run()).toBe('finished');
  const warnings = events.flatMap((e) => (e.type === 'warning' ? [e.message] : []));
  return { prepared, warnings, history: trainer.metricsHistory };
}

const original = (id: string) => ROWS.find((r) => r.id === id)!;

describe('trainer image caps', () => {
  it('max_images_per_message and max_images_per_step keep the first images, per row and per generation batch, with a warning for each drop', async () => {
    // Two prompts per generation (one per optimizer step's micro-batch of 2 groups), 2 steps: 4 prompts.
    const { prepared, warnings, history } = await run({ max_images_per_message: 2, max_images_per_step: 3 });
    expect(prepared).toHaveLength(4);
    expect(history.every((m) => Number.isFinite(m.loss))).toBe(true);
    const expectedWarnings: string[] = [];
    for (let gen = 0; gen < 2; gen++) {
      let budget = 3;
      for (const row of prepared.slice(2 * gen, 2 * gen + 2)) {
        const src = original(row.id);
        const keep = Math.min(src.images.length, 2, budget);
        budget -= keep;
        expect(row.images, row.id).toEqual(src.images.slice(0, keep));
        if (countPlaceholders(src.question) > 0) expect(countPlaceholders(row.question), row.id).toBe(keep);
        else expect(row.question).toBe(src.question);
        if (keep < src.images.length) expectedWarnings.push(src.id);
      }
    }
    expect(warnings).toHaveLength(expectedWarnings.length);
    warnings.forEach((w, i) => expect(w).toMatch(new RegExp(`^prompt ${expectedWarnings[i]} \\(row \\d\\): \\d of its \\d images dropped, the first \\d kept: max_images_per_`)));
    // Each cap names itself: the three-image row always meets the per-message cap.
    for (const w of warnings.filter((x) => x.startsWith('prompt three-interleaved'))) expect(w).toContain('max_images_per_message = 2');
    // With seed 3 the second batch spends its budget on 'two-first' (2) and leaves 1 for the three-image row.
    expect(warnings.some((w) => /max_images_per_step = 3 \(1 left in this generation batch\)/.test(w))).toBe(true);
  }, 120_000);

  it('a run resumed inside a generation batch re-prepares its pending prompts with the same images, silently', async () => {
    // One generation of 8 prompts serves 4 steps; the checkpoint at step 2 holds it as pending.
    const input: TrainConfigInput = { max_images_per_message: 2, max_images_per_step: 3, steps_per_generation: 4, max_steps: 4 };
    const saved: Checkpoint[] = [];
    const first = await run({ ...input, save_steps: 2 }, { saved });
    expect(first.prepared).toHaveLength(8);
    expect(first.prepared.reduce((n, r) => n + r.images.length, 0)).toBe(3);
    const atTwo = saved.find((c) => c.meta.step === 2)!;
    expect(atTwo.meta.pending?.consumed).toBe(2);
    const files = encodeCheckpoint(atTwo);
    const resumed = await run(input, { resume: await decodeCheckpoint(files.json, files.safetensors) });
    expect(resumed.prepared).toEqual(first.prepared);
    expect(resumed.warnings).toEqual([]);
  }, 120_000);

  it('without caps every image stays and nothing is said', async () => {
    const { prepared, warnings } = await run({});
    for (const row of prepared) expect(row).toBe(original(row.id));
    expect(warnings).toEqual([]);
  }, 120_000);

  it('image_only_mode: prompts hold the images alone; a row without images is skipped with a warning', async () => {
    const { prepared, warnings } = await run({ image_only_mode: true, max_steps: 3 });
    expect(prepared.length).toBe(6);
    for (const row of prepared) {
      expect(row.question).toBe('');
      expect(row.images).toEqual(original(row.id).images);
      expect(row.images.length).toBeGreaterThan(0);
    }
    const skipped = warnings.filter((w) => w.includes('image_only_mode'));
    expect(skipped.length).toBeGreaterThan(0);
    for (const w of skipped) expect(w).toMatch(/^prompt text \(row 3\) skipped: row text has no image, so image_only_mode leaves its user turn empty$/);
  }, 120_000);
});

describe('image option fields of the config', () => {
  it('default to no cap and image_only_mode off', () => {
    expect(defaultConfig()).toMatchObject({ max_images_per_message: null, max_images_per_step: null, image_only_mode: false });
    expect(resolveConfig({ max_images_per_message: 2, max_images_per_step: 5, image_only_mode: true }).config).toMatchObject({ max_images_per_message: 2, max_images_per_step: 5, image_only_mode: true });
  });

  it.each([
    [{ max_images_per_message: 0 }, /max_images_per_message must be an integer >= 1; got 0/],
    [{ max_images_per_message: 1.5 }, /max_images_per_message must be an integer >= 1/],
    [{ max_images_per_step: -1 }, /max_images_per_step must be an integer >= 1; got -1/],
    [{ image_only_mode: 'yes' as unknown as boolean }, /image_only_mode must be true or false/],
    [{ max_images_per_messages: 2 } as TrainConfigInput, /max_images_per_messages: unknown field; did you mean max_images_per_message\?/],
  ] as [TrainConfigInput, RegExp][])('refuses %j', (input, reason) => {
    expect(() => resolveConfig(input)).toThrow(ConfigError);
    expect(() => resolveConfig(input)).toThrow(reason);
  });
});
