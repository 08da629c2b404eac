// `npm run cli -- demo-rows --out FILE [--seed 7003] [--count 8]`: rows of the demo's synthetic
// tasks (src/data/demo.ts: all three tasks in turn, 128×128 images) as a small JSONL data set in
// MathVista's layout, for the app's local-file input. One object a line:
//   {"pid", "question", "image": "data:image/png;base64,…", "answer", "answer_type": "integer", "task"}
// The default seed is the demo's held-out set, so the rows are its first `count` held-out rows,
// exactly as the demo model was measured on them. The PNGs are lossless (RGB, 8-bit), so a
// decoder gives back the rasterizer's pixels. Output is a pure function of seed and count.
// test/fixtures/data/demo-rows.jsonl was written by this command with its defaults.
import { writeFileSync } from 'node:fs';
import { crc32, deflateSync } from 'node:zlib';
import { DEMO_IMAGE_SIZE, DEMO_SETS, DEMO_TASKS } from '../../data/demo';
import { syntheticDataset } from '../../data/synthetic';
import type { RgbaImage } from '../../data/types';
import type { CliArgs } from '../args';

export const summary = "write rows of the demo's synthetic tasks as MathVista-layout JSONL with PNG data URLs (--out FILE [--seed S] [--count N])";

const PNG_SIGNATURE = Uint8Array.of(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a);

function chunk(type: string, data: Uint8Array): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(data, crc32(head.subarray(4))), 0);
  return Buffer.concat([head, data, crc]);
}

/** An opaque image as an 8-bit RGB PNG (no colour chunks, so browsers decode it unchanged). */
export function encodePng(image: RgbaImage): Buffer {
  const { width, height, data } = image;
  const raw = Buffer.alloc(height * (1 + 3 * width)); // filter byte 0 (none) before each scanline
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const p = 4 * (y * width + x);
      if (data[p + 3] !== 255) throw new Error(`demo-rows: pixel (${x}, ${y}) is not opaque`);
      raw.set(data.subarray(p, p + 3), y * (1 + 3 * width) + 1 + 3 * x);
    }
  }
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8); // bit depth 8, colour type RGB, deflate, no filter method, no interlace
  return Buffer.concat([PNG_SIGNATURE, chunk('IHDR', header), chunk('IDAT', deflateSync(raw, { level: 9 })), chunk('IEND', new Uint8Array(0))]);
}

/** The JSONL text of `count` demo rows of `seed`. */
export function demoRowsJsonl(seed: number, count: number): string {
  const rows = syntheticDataset({ seed, count, tasks: DEMO_TASKS, size: DEMO_IMAGE_SIZE });
  const lines = rows.map((row) => {
    if (row.images.length !== 1) throw new Error(`demo-rows: row ${row.id} has ${row.images.length} images`);
    const image = `data:image/png;base64,${encodePng(row.images[0]).toString('base64')}`;
    return JSON.stringify({ pid: row.id, question: row.question, image, answer: row.answer, answer_type: 'integer', task: row.meta.task });
  });
  return `${lines.join('\n')}\n`;
}

export async function run(args: CliArgs): Promise<void> {
  const seed = args.num('seed', DEMO_SETS.heldOut.seed);
  const count = args.num('count', 8);
  if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed must be a whole number, got ${seed}`);
  if (!Number.isInteger(count) || count < 1) throw new Error(`--count must be a whole number ≥ 1, got ${count}`);
  const out = args.str('out');
  const text = demoRowsJsonl(seed, count);
  writeFileSync(out, text);
  console.log(`${out}: ${count} rows of seed ${seed}, ${(text.length / 1024).toFixed(1)} KiB`);
}
