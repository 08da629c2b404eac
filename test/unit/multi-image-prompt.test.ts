// Multi-image prompts (issue 39 point 4), from the row to the token ids:
// - the chat template path against an independent reference: the messages a transformers user
//   writes for two images (interleaved, or images first), rendered by transformers.js's
//   apply_chat_template with the demo model's chat_template.json, each image's
//   <|vision_start|><|image_pad|><|vision_end|> expanded to the N pads of transformers' own
//   image_grid_thw (tiny-a/ref/image2.safetensors: two images of different sizes, 6 and 4 tokens);
// - the image caps (max_images_per_message's `maxImages`) and image_only_mode: which images stay,
//   which placeholders go, and that the prompt's image tokens are the kept images'.
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildPrompt, ImageOnlyPromptError, limitRowImages, PlaceholderMismatchError, rowImageCount } from '../../src/data/prompt';
import type { EncodedImage, RgbaImage } from '../../src/data/types';
import { parseQwen3VLConfig } from '../../src/model/config';
import { loadTokenizer, Qwen3VLProcessor, QWEN3_VL_IMAGE_PROCESSOR, type Qwen3VLTokenizer } from '../../src/model/processor';
import { readFixture, rgbaOf } from '../helpers/safetensorsFixture';

const ref = readFixture(new URL('../fixtures/tiny/tiny-a/ref/image2.safetensors', import.meta.url));
const fixtureImages = [rgbaOf(ref.get('image_0')!), rgbaOf(ref.get('image_1')!)];
const g = ref.get('image_grid_thw')!;
const fixtureGrids = Array.from(new Int32Array(g.bytes.buffer, g.bytes.byteOffset, 6));
const fixturePixels = new Float32Array(ref.get('pixel_values')!.bytes.buffer);
// The processor settings transformers used for the fixture (tools/make_fixtures.py): 32² to 128² pixels.
const SMALL = { ...QWEN3_VL_IMAGE_PROCESSOR, minPixels: 32 * 32, maxPixels: 128 * 128 };
const demoConfig = parseQwen3VLConfig(readFileSync('public/demo/config.json', 'utf8'));
const demoTemplate = (JSON.parse(readFileSync('public/demo/chat_template.json', 'utf8')) as { chat_template: string }).chat_template;
const [VS, VE, PAD] = [demoConfig.tokens.visionStart, demoConfig.tokens.visionEnd, demoConfig.tokens.image];
const SYSTEM = 'Answer with a number.';
const BLOCK = '<|vision_start|><|image_pad|><|vision_end|>';

let tokenizer: Qwen3VLTokenizer;
let processor: Qwen3VLProcessor;
beforeAll(async () => {
  tokenizer = await loadTokenizer({ folder: 'public/demo' });
  processor = new Qwen3VLProcessor(tokenizer, demoConfig, SMALL);
});

/**
 * The reference ids: `userContent` (transformers' message format) rendered by transformers.js with
 * the demo's chat_template.json, then each image block replaced by vision start, N_k pads (N_k =
 * t·h·w/4 of transformers' grid k) and vision end, text between blocks tokenized on its own.
 */
function referenceIds(userContent: object[], grids: number[]): number[] {
  const messages = [
    { role: 'system', content: [{ type: 'text', text: SYSTEM }] },
    { role: 'user', content: userContent },
  ];
  const rendered = tokenizer.inner.apply_chat_template(messages as never, { tokenize: false, add_generation_prompt: true, chat_template: demoTemplate }) as string;
  const pieces = rendered.split(BLOCK);
  expect(pieces.length - 1).toBe(grids.length / 3);
  const ids: number[] = [];
  pieces.forEach((piece, k) => {
    if (k > 0) ids.push(VS, ...new Array<number>((grids[3 * k - 3] * grids[3 * k - 2] * grids[3 * k - 1]) / 4).fill(PAD), VE);
    ids.push(...tokenizer.inner.encode(piece, { add_special_tokens: false }));
  });
  return ids;
}

describe('two-image prompts: engine vs the model’s own chat template (transformers.js) and transformers’ grids', () => {
  it.each([
    [
      'interleaved <image> placeholders',
      'Compare <image> with <image>. Which is taller?',
      [{ type: 'text', text: 'Compare ' }, { type: 'image' }, { type: 'text', text: ' with ' }, { type: 'image' }, { type: 'text', text: '. Which is taller?' }],
    ],
    ['images first, no placeholder', 'Which is taller?', [{ type: 'image' }, { type: 'image' }, { type: 'text', text: 'Which is taller?' }]],
  ])('%s: token ids, pads per image, grids and pixel values equal', (_, question, userContent) => {
    const { messages, images } = buildPrompt({ question, images: fixtureImages }, { systemPrompt: SYSTEM });
    const out = processor.process(messages, images);
    expect(out.imageGridThw.flat()).toEqual(fixtureGrids);
    // Different sizes, so a swapped or shared N would show.
    expect(fixtureGrids[0] * fixtureGrids[1] * fixtureGrids[2]).not.toBe(fixtureGrids[3] * fixtureGrids[4] * fixtureGrids[5]);
    const expected = referenceIds(userContent, fixtureGrids);
    expect(Array.from(out.inputIds)).toEqual(expected);
    // The pad runs, image by image, as transformers' grids make them.
    const runs: number[] = [];
    out.inputIds.forEach((id, i) => {
      if (id === VS) runs.push(0);
      else if (id === PAD) runs[runs.length - 1]++;
      else if (id === VE) expect(out.inputIds[i - 1]).toBe(PAD);
    });
    expect(runs).toEqual([0, 1].map((k) => (fixtureGrids[3 * k] * fixtureGrids[3 * k + 1] * fixtureGrids[3 * k + 2]) / 4));
    expect(out.pixelValues).toEqual(fixturePixels);
  });
});

const img = (w: number, h: number): RgbaImage => ({ width: w, height: h, data: new Uint8ClampedArray(w * h * 4).fill(w) });
const enc = (k: number): EncodedImage => ({ bytes: new Uint8Array([k]), width: 8, height: 8, source: `f row 0 image ${k}` });

describe('image caps and image_only_mode on a row', () => {
  const three = [img(64, 64), img(32, 96), img(96, 32)];

  it('keeps the first images and takes the dropped ones’ placeholders out, the text around them kept', () => {
    const row = { id: 'r', question: 'A <image> B <image> C <image> D', images: three };
    const { row: two, dropped } = limitRowImages(row, { maxImages: 2 });
    expect(dropped).toBe(1);
    expect(two.images).toEqual(three.slice(0, 2));
    expect(two.question).toBe('A <image> B <image> C  D');
    expect(limitRowImages(row, { maxImages: 0 }).row.question).toBe('A  B  C  D');
    expect(limitRowImages(row, { maxImages: 3 })).toEqual({ row, dropped: 0 });
    expect(limitRowImages(row, { maxImages: null }).row).toBe(row);
    expect(row.images).toHaveLength(3);
  });

  it('cuts images-first rows and encoded (lazy) rows alike', () => {
    const first = limitRowImages({ question: 'How many?', images: three }, { maxImages: 1 });
    expect(first.row).toEqual({ question: 'How many?', images: [three[0]] });
    const lazy = { id: 'l', question: '<image> then <image>', images: [], encoded: [enc(0), enc(1)] };
    expect(rowImageCount(lazy)).toBe(2);
    const cut = limitRowImages(lazy, { maxImages: 1 });
    expect(cut.dropped).toBe(1);
    expect(cut.row.encoded).toEqual([enc(0)]);
    expect(cut.row.question).toBe('<image> then ');
  });

  it('leaves a row whose placeholders do not match its images for the prompt builder to refuse', () => {
    const bad = { question: '<image> and <image>', images: [three[0]] };
    expect(limitRowImages(bad, { maxImages: 1 })).toEqual({ row: bad, dropped: 0 });
    expect(() => buildPrompt(bad, { maxImages: 1 })).toThrow(PlaceholderMismatchError);
  });

  it('image_only_mode: the user turn is the images alone; a row without images is refused by name', () => {
    const p = buildPrompt({ question: 'Compare <image> and <image>.', images: three.slice(0, 2) }, { systemPrompt: SYSTEM, imageOnly: true });
    expect(p.messages).toEqual([
      { role: 'system', content: [{ type: 'text', text: SYSTEM }] },
      { role: 'user', content: [{ type: 'image' }, { type: 'image' }] },
    ]);
    expect(buildPrompt({ question: 'x', images: three }, { imageOnly: true, maxImages: 1 }).messages.at(-1)!.content).toEqual([{ type: 'image' }]);
    expect(() => buildPrompt({ id: 'txt', question: 'Just text.', images: [] }, { imageOnly: true })).toThrow(ImageOnlyPromptError);
    expect(() => limitRowImages({ id: 'txt', question: 'Just text.', images: [] }, { imageOnly: true })).toThrow(/row txt has no image/);
  });

  it('the prompt’s image tokens are the kept images’: pads per block from their grids, none for the dropped', () => {
    const question = 'Left <image>, middle <image>, right <image>. Which is odd?';
    const full = processor.process(...args(buildPrompt({ question, images: three }, { systemPrompt: SYSTEM })));
    const capped = buildPrompt({ question, images: three }, { systemPrompt: SYSTEM, maxImages: 2 });
    expect(capped.dropped).toBe(1);
    const out = processor.process(capped.messages, capped.images);
    expect(out.imageGridThw).toEqual(full.imageGridThw.slice(0, 2));
    const pads = (ids: Int32Array) => ids.filter((t) => t === PAD).length;
    const tokens = (grids: number[][]) => grids.reduce((a, [t, h, w]) => a + (t * h * w) / 4, 0);
    expect(pads(out.inputIds)).toBe(tokens(full.imageGridThw.slice(0, 2)));
    expect(pads(full.inputIds) - pads(out.inputIds)).toBe(tokens(full.imageGridThw.slice(2)));
    expect(out.inputIds.filter((t) => t === VS)).toHaveLength(2);
    expect(tokenizer.decode(out.inputIds)).toContain('right . Which is odd?');
    const only = buildPrompt({ question, images: three }, { systemPrompt: SYSTEM, imageOnly: true, maxImages: 1 });
    const o = processor.process(only.messages, only.images);
    expect(tokenizer.decode(o.inputIds)).not.toContain('Which is odd');
    expect(pads(o.inputIds)).toBe(tokens(full.imageGridThw.slice(0, 1)));
  });
});

function args(p: ReturnType<typeof buildPrompt>): [typeof p.messages, RgbaImage[]] {
  return [p.messages, p.images];
}
