// Multi-image rows through RL steps of the tiny fixture model (issue 39 point 4, training side):
// a row with two interleaved <image> placeholders, and a three-image row (images first) that
// max_images_per_message = 2 cuts to two. Each step's loss is finite with a gradient, each
// prompt carries one vision block per kept image with its grid's pads, and the vision tower
// encodes exactly the kept images, never the dropped one.
import { describe, expect, it } from 'vitest';
import type { DatasetRow, RgbaImage } from '../../src/data/types';
import { imageKey } from '../../src/model/session';
import type { GridThw } from '../../src/model/vision';
import { Trainer, type TrainerEvent } from '../../src/rl/trainer';
import type { PreparedPrompt } from '../../src/rl/policy';
import { onEncode, openTinyRun, watchedSource } from '../helpers/tinySession';

/** A picture with structure in both axes, distinct per `seed`. */
function picture(width: number, height: number, seed: number): RgbaImage {
  const data = new Uint8ClampedArray(width * height * 4);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = 4 * (y * width + x);
      data[i] = (x * 7 + seed * 40) & 255;
      data[i + 1] = (y * 5 + seed * 90) & 255;
      data[i + 2] = ((x ^ y) * 3 + seed) & 255;
      data[i + 3] = 255;
    }
  }
  return { width, height, data };
}

describe('multi-image rows in RL steps of the tiny model', () => {
  it('trains on two-image prompts (interleaved, and a capped images-first row) with finite loss and both images encoded', async () => {
    const { gpu, session, config, loss } = await openTinyRun('vlrl-multi-image-', {
      per_device_train_batch_size: 2,
      seed: 9,
      max_images_per_message: 2,
      // Three-token completions rarely earn a reward, so a group's advantages are often all 0; the
      // entropy bonus gives every step a gradient whatever the rewards.
      entropy_coef: 0.01,
      lora: { target_modules: ['q_proj', 'v_proj'] },
    });
    const dropped = picture(96, 96, 5);
    const rows: DatasetRow[] = [
      { id: 'interleaved', question: 'Is <image> wider than <image>?', images: [picture(128, 128, 1), picture(64, 256, 2)], answer: '1', meta: {} },
      { id: 'first', question: 'How many pictures?', images: [picture(256, 64, 3), picture(160, 96, 4), dropped], answer: '2', meta: {} },
    ];
    const prompts: PreparedPrompt[] = [];
    const data = watchedSource(session.promptSource(rows), (p) => prompts.push(p));
    const encoded: GridThw[] = [];
    onEncode(session.model.vision, (grids) => encoded.push(...grids));
    const events: TrainerEvent[] = [];
    const trainer = await Trainer.create({ gpu, policy: session.policy, data, config, loss, runId: 'multi-image', onEvent: (e) => events.push(e) });
    expect(await trainer.run()).toBe('finished');

    expect(trainer.metricsHistory).toHaveLength(2);
    for (const m of trainer.metricsHistory) {
      expect(Number.isFinite(m.loss)).toBe(true);
      expect(m.grad_norm).toBeGreaterThan(0);
    }
    expect(prompts.map((p) => p.id).sort()).toEqual(['first', 'interleaved']);
    const { visionStart, image } = session.model.config.tokens;
    for (const p of prompts) {
      expect(p.images, p.id).toHaveLength(2);
      expect(p.images[0].gridThw).not.toEqual(p.images[1].gridThw);
      const ids = Array.from(p.inputIds);
      expect(ids.filter((t) => t === visionStart), p.id).toHaveLength(2);
      expect(ids.filter((t) => t === image).length, p.id).toBe(p.images.reduce((a, im) => a + (im.gridThw[0] * im.gridThw[1] * im.gridThw[2]) / 4, 0));
    }
    // Every kept image went through the tower (once: the vision cache), the dropped one never.
    const kept = prompts.flatMap((p) => p.images);
    expect(new Set(kept.map((im) => im.key)).size).toBe(4);
    expect(kept.map((im) => im.key)).not.toContain(imageKey(dropped));
    expect(encoded.map((g) => g.join('x')).sort()).toEqual(kept.map((im) => im.gridThw.join('x')).sort());
    const warnings = events.flatMap((e) => (e.type === 'warning' ? [e.message] : []));
    expect(warnings).toEqual([expect.stringMatching(/^prompt first \(row 1\): 1 of its 3 images dropped, the first 2 kept: max_images_per_message = 2$/)]);
  }, 600_000);
});
