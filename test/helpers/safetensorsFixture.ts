// Raw tensors of the small safetensors fixtures made by tools/make_fixtures.py, U8 included
// (the model's reader accepts only weight dtypes).
import { readFileSync } from 'node:fs';
import type { RgbaImage } from '../../src/data/types';

export interface FixtureTensor {
  dtype: string;
  shape: number[];
  bytes: Uint8Array;
}

/** All tensors of a safetensors file, by name (the __metadata__ entry left out). */
export function readFixture(url: URL): Map<string, FixtureTensor> {
  const file = new Uint8Array(readFileSync(url));
  const n = Number(new DataView(file.buffer, file.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(file.subarray(8, 8 + n))) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const out = new Map<string, FixtureTensor>();
  for (const [name, e] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    out.set(name, { dtype: e.dtype, shape: e.shape, bytes: file.slice(8 + n + e.data_offsets[0], 8 + n + e.data_offsets[1]) });
  }
  return out;
}

/** A uint8 [h, w, 3] tensor as the RGBA pixels a canvas gives. */
export function rgbaOf(x: FixtureTensor): RgbaImage {
  const [height, width, channels] = x.shape;
  if (channels !== 3) throw new Error(`fixture image has shape [${x.shape.join(', ')}]; expected [h, w, 3]`);
  const data = new Uint8ClampedArray(width * height * 4);
  for (let i = 0; i < width * height; i++) {
    data.set(x.bytes.subarray(i * 3, i * 3 + 3), i * 4);
    data[i * 4 + 3] = 255;
  }
  return { width, height, data };
}
