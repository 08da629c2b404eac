// Rows kept encoded (the loaders' `lazy` option, as the app's Data panel and the CLI load) with the
// `resize` option: the resize is kept with the encoded image and applied when the row is decoded,
// and the processor's size limits apply to the resize target (the header only for a bomb).
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { decodeRowImages } from '../../src/data/encodedImages';
import { QWEN3_VL_IMAGE_LIMITS, type ImageDecoder } from '../../src/data/image';
import { loadJsonText } from '../../src/data/loaders';
import { sharpDecoder } from '../../src/data/node/sharpDecoder';

const pngUrl = async (width: number, height: number) =>
  `data:image/png;base64,${(await sharp({ create: { width, height, channels: 3, background: { r: 200, g: 40, b: 10 } } }).png().toBuffer()).toString('base64')}`;

describe('lazy rows with resize', () => {
  it('keeps the resize with the encoded image, decodes nothing at load, resizes at decode', async () => {
    let decodes = 0;
    const counting: ImageDecoder = { decode: (b, o) => (decodes++, sharpDecoder.decode(b, o)) };
    const lines = [
      { id: 'big', q: 'A?', a: '1', img: await pngUrl(300, 200) },
      { id: 'tiny', q: 'B?', a: '2', img: await pngUrl(16, 16) }, // under 32 px, but resized to 64x48: usable
    ].map((r) => JSON.stringify(r));
    const options = { decoder: counting, lazy: true, limits: QWEN3_VL_IMAGE_LIMITS, mapping: { prompt_key: 'q', answer_key: 'a', image_keys: ['img'] }, source: 'r.jsonl' };
    const result = await loadJsonText(lines.join('\n'), 'jsonl', { ...options, resize: { width: 64, height: 48 } });
    expect(decodes).toBe(0);
    expect(result.broken).toEqual([]);
    expect(result.rows.map((r) => [r.images.length, r.encoded?.[0].resize])).toEqual([
      [0, { width: 64, height: 48 }],
      [0, { width: 64, height: 48 }],
    ]);
    for (const row of result.rows) {
      const d = await decodeRowImages(row, counting);
      expect([d.images[0].width, d.images[0].height, d.encoded]).toEqual([64, 48, undefined]);
      expect([...d.images[0].data.subarray(0, 4)]).toEqual([200, 40, 10, 255]);
    }
    expect(decodes).toBe(2);

    // A resize target the processor would refuse makes every row broken, at load, by file and row.
    const small = await loadJsonText(lines.join('\n'), 'jsonl', { ...options, resize: { width: 20, height: 20 } });
    expect(small.rows).toEqual([]);
    expect(small.broken.map((b) => [b.index, b.reason])).toEqual([
      [0, 'unusable image size'],
      [1, 'unusable image size'],
    ]);
    expect(small.broken[0].detail).toMatch(/image 20x20 is too small/);
    // Without a resize the 16x16 image is refused as it is.
    const plain = await loadJsonText(lines.join('\n'), 'jsonl', options);
    expect(plain.broken.map((b) => [b.index, b.reason])).toEqual([[1, 'unusable image size']]);
  });
});
