// test/fixtures/data/demo-rows.jsonl, the browser e2e test's data set: it is what
// `npm run cli -- demo-rows` writes with its defaults, and the loaders read it back as the demo's
// own held-out rows (MathVista layout recognised, ids from pid, the rasterizer's exact pixels).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEMO_SETS, demoRows } from '../../src/data/demo';
import { loadFile } from '../../src/data/loaders';
import { sharpDecoder } from '../../src/data/node/sharpDecoder';
import { demoRowsJsonl } from '../../src/node/commands/demo-rows';

const FIXTURE = new URL('../fixtures/data/demo-rows.jsonl', import.meta.url);

describe('demo-rows fixture', () => {
  it('is the generator’s output and loads back as the first held-out rows of the demo', async () => {
    const text = readFileSync(FIXTURE, 'utf8');
    expect(text).toBe(demoRowsJsonl(DEMO_SETS.heldOut.seed, 8));
    const result = await loadFile(new File([text], 'demo-rows.jsonl'), { decoder: sharpDecoder });
    expect([result.rows.length, result.broken.length, result.filtered.length]).toEqual([8, 0, 0]);
    const expected = demoRows('heldOut').slice(0, 8);
    result.rows.forEach((row, i) => {
      expect([row.id, row.question, row.answer, row.answer_type, row.meta.task]).toEqual([expected[i].id, expected[i].question, expected[i].answer, 'integer', expected[i].meta.task]);
      expect(row.images).toHaveLength(1);
      expect(row.images[0].width).toBe(128);
      expect(Buffer.from(row.images[0].data).equals(Buffer.from(expected[i].images[0].data))).toBe(true);
    });
  });
});
