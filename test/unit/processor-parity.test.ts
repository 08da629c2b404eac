// Processor parity with transformers (issue 4's processor acceptance), on fixtures made by
// tools/make_fixtures.py with transformers 5.17 (Qwen2VLImageProcessorFast: torchvision's
// antialiased bicubic on uint8 tensors):
// - tiny/processor/images.safetensors: three RGB images (256x256, 200x333, 100x420) with Qwen3-VL's
//   settings, their pixel_values (stored f16, within 5e-4 of f32) and image_grid_thw;
// - tiny/tiny-{a,b}/ref/image{1,2}.safetensors: images processed with 32²..128² pixels (pixel_values
//   in f32), and the input_ids / position_ids / rope_delta transformers' model used for them.
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseQwen3VLConfig } from '../../src/model/config';
import { f16BitsToF32 } from '../../src/model/dtype';
import {
  getRopeIndex,
  imageTokenCount,
  loadTokenizer,
  nodeQwen3TokenizerFolder,
  preprocessImage,
  Qwen3VLProcessor,
  QWEN3_VL_IMAGE_PROCESSOR,
  type ChatMessage,
  type Qwen3VLTokenizer,
} from '../../src/model/processor';
import { readFixture, rgbaOf, type FixtureTensor } from '../helpers/safetensorsFixture';

function get(t: Map<string, FixtureTensor>, name: string, dtype: string): FixtureTensor {
  const x = t.get(name);
  if (!x) throw new Error(`fixture has no tensor '${name}'`);
  expect(x.dtype, name).toBe(dtype);
  return x;
}

const int32 = (x: FixtureTensor) => Array.from(new Int32Array(x.bytes.buffer, x.bytes.byteOffset, x.bytes.byteLength / 4));

function floats(x: FixtureTensor): Float32Array {
  if (x.dtype === 'F32') return new Float32Array(x.bytes.buffer, x.bytes.byteOffset, x.bytes.byteLength / 4);
  const bits = new Uint16Array(x.bytes.buffer, x.bytes.byteOffset, x.bytes.byteLength / 2);
  return Float32Array.from(bits, f16BitsToF32);
}

/** Max and mean |a − b|. */
function errors(a: Float32Array, b: Float32Array): { max: number; mean: number } {
  let max = 0;
  let sum = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    max = Math.max(max, d);
    sum += d;
  }
  return { max, mean: sum / a.length };
}

const fmt = (e: { max: number; mean: number }) => `max ${e.max.toExponential(2)}, mean ${e.mean.toExponential(2)}`;

const images = readFixture(new URL('../fixtures/tiny/processor/images.safetensors', import.meta.url));
const SIZES: [number, number][] = [
  [256, 256],
  [200, 333],
  [100, 420],
];

describe('image preprocessing vs Qwen2VLImageProcessorFast (Qwen3-VL settings)', () => {
  it.each(SIZES.map(([h, w], j) => [j, h, w] as const))('image_%i (%ix%i, h x w): grid equal, pixel_values equal up to the fixture\'s f16 rounding', (j, h, w) => {
    const image = get(images, `image_${j}`, 'U8');
    expect(image.shape).toEqual([h, w, 3]);
    const expectedGrid = int32(get(images, `image_grid_thw_${j}`, 'I32'));
    const expected = floats(get(images, `pixel_values_${j}`, 'F16'));
    const got = preprocessImage(rgbaOf(image), QWEN3_VL_IMAGE_PROCESSOR);
    expect(got.gridThw).toEqual(expectedGrid);
    expect(got.pixelValues.length).toBe(expected.length);
    const e = errors(got.pixelValues, expected);
    console.info(`processor parity image_${j} ${w}x${h} -> ${got.resized.width}x${got.resized.height}: ${fmt(e)}`);
    // Acceptance is 1e-2; the resize reproduces torchvision's integer arithmetic, so what is left
    // is f16 storage (values in [-1, 1] round by at most 2^-12). One level off would be 2/255.
    expect(e.max).toBeLessThanOrEqual(2 ** -12);
  });
});

describe('image preprocessing vs the fixture models’ processor (32² to 128² pixels)', () => {
  const small = { ...QWEN3_VL_IMAGE_PROCESSOR, minPixels: 32 * 32, maxPixels: 128 * 128 };
  const cases = ['tiny-a', 'tiny-b'].flatMap((m) => ['image1', 'image2'].map((c) => [m, c] as const));
  it.each(cases)('%s/ref/%s: grids and pixel_values equal', (model, name) => {
    const ref = readFixture(new URL(`../fixtures/tiny/${model}/ref/${name}.safetensors`, import.meta.url));
    const grids = int32(get(ref, 'image_grid_thw', 'I32'));
    const expected = floats(get(ref, 'pixel_values', 'F32'));
    const got: number[] = [];
    const pixels: number[] = [];
    for (let j = 0; ref.has(`image_${j}`); j++) {
      const p = preprocessImage(rgbaOf(get(ref, `image_${j}`, 'U8')), small);
      got.push(...p.gridThw);
      pixels.push(...p.pixelValues);
    }
    expect(got).toEqual(grids);
    const e = errors(Float32Array.from(pixels), expected);
    console.info(`processor parity ${model}/${name}: ${fmt(e)}`);
    expect(e.max).toBe(0);
  });
});

describe('positions vs transformers’ get_rope_index (fixture models)', () => {
  it.each(['tiny-a', 'tiny-b'].flatMap((m) => ['text', 'image1', 'image2'].map((c) => [m, c] as const)))('%s/ref/%s: position_ids and rope_delta equal', (model, name) => {
    const config = parseQwen3VLConfig(readFileSync(new URL(`../fixtures/tiny/${model}/config.json`, import.meta.url), 'utf8'));
    const ref = readFixture(new URL(`../fixtures/tiny/${model}/ref/${name}.safetensors`, import.meta.url));
    const ids = int32(get(ref, 'input_ids', 'I32'));
    const g = ref.has('image_grid_thw') ? int32(get(ref, 'image_grid_thw', 'I32')) : [];
    const grids = Array.from({ length: g.length / 3 }, (_, i) => [g[3 * i], g[3 * i + 1], g[3 * i + 2]] as [number, number, number]);
    const { positions, ropeDelta } = getRopeIndex(ids, grids, {
      imageTokenId: config.tokens.image,
      visionStartTokenId: config.tokens.visionStart,
      spatialMergeSize: config.vision.spatialMergeSize,
    });
    expect(Array.from(positions)).toEqual(int32(get(ref, 'position_ids', 'I32')));
    expect(ropeDelta).toBe(int32(get(ref, 'rope_delta', 'I32'))[0]);
  });
});

describe('Qwen3VLProcessor on a chat with the three images', () => {
  let tokenizer: Qwen3VLTokenizer;
  beforeAll(async () => {
    tokenizer = await loadTokenizer({ folder: await nodeQwen3TokenizerFolder() });
  });

  it('input_ids carry t·h·w/4 pads per image and positions follow spec B4', () => {
    const config = parseQwen3VLConfig(readFileSync(new URL('../fixtures/model-io/configs/qwen3-vl-2b-5.x.json', import.meta.url), 'utf8'));
    const grids = SIZES.map((_, j) => int32(get(images, `image_grid_thw_${j}`, 'I32')) as [number, number, number]);
    const texts = ['Compare ', ', ', ' and ', '. Which is widest?'];
    const messages: ChatMessage[] = [
      { role: 'system', content: 'Answer briefly.' },
      { role: 'user', content: [{ type: 'text', text: texts[0] }, { type: 'image' }, { type: 'text', text: texts[1] }, { type: 'image' }, { type: 'text', text: texts[2] }, { type: 'image' }, { type: 'text', text: texts[3] }] },
    ];
    const out = new Qwen3VLProcessor(tokenizer, config).process(
      messages,
      SIZES.map((_, j) => rgbaOf(get(images, `image_${j}`, 'U8'))),
    );
    expect(out.imageGridThw).toEqual(grids);

    // The expected sequence, built as segments: text runs (ids) and image blocks (merged grids).
    const [IM_START, IM_END, VS, VE, PAD, NL] = [151644, 151645, 151652, 151653, 151655, 198];
    type Segment = { text: number[] } | { grid: [number, number, number] };
    const segments: Segment[] = [
      { text: [IM_START, ...tokenizer.encode('system'), NL, ...tokenizer.encode('Answer briefly.'), IM_END, NL, IM_START, ...tokenizer.encode('user'), NL, ...tokenizer.encode(texts[0]), VS] },
      ...grids.flatMap((grid, j): Segment[] => [{ grid }, { text: [VE, ...tokenizer.encode(texts[j + 1]), ...(j < 2 ? [VS] : [IM_END, NL, IM_START, ...tokenizer.encode('assistant'), NL])] }]),
    ];
    const ids: number[] = [];
    const pos: [number[], number[], number[]] = [[], [], []];
    let next = 0;
    for (const s of segments) {
      if ('text' in s) {
        for (const id of s.text) ids.push(id), pos.forEach((axis) => axis.push(next)), next++;
        continue;
      }
      const [, gh, gw] = s.grid;
      const [lh, lw] = [gh / 2, gw / 2];
      expect(imageTokenCount(s.grid, 2)).toBe(lh * lw);
      for (let hi = 0; hi < lh; hi++) {
        for (let wi = 0; wi < lw; wi++) ids.push(PAD), pos[0].push(next), pos[1].push(next + hi), pos[2].push(next + wi);
      }
      next += Math.max(lh, lw);
    }
    expect(Array.from(out.inputIds)).toEqual(ids);
    expect(ids.filter((t) => t === PAD).length).toBe(grids.reduce((a, [t, h, w]) => a + (t * h * w) / 4, 0));
    const T = ids.length;
    expect([out.positions.subarray(0, T), out.positions.subarray(T, 2 * T), out.positions.subarray(2 * T)].map((a) => Array.from(a))).toEqual(pos);
    expect(out.ropeDelta).toBe(next - T);
    expect(out.pixelValues.length).toBe(grids.reduce((a, [t, h, w]) => a + t * h * w, 0) * 1536);
  });
});
