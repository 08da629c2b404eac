// Rows as a parquet file in the geo3k layout (hiyouga/geometry3k): problem (text with one <image>
// placeholder per image), images (a list of {bytes, path} structs, PNG bytes embedded), answer;
// plus system_prompt when some row carries its own. The Hugging Face `datasets` features go in the
// file's "huggingface" metadata, as the hub's parquet files carry them, so that load_dataset
// decodes the images column to PIL images.
import sharp from 'sharp';
import { parquetWriteBuffer } from 'hyparquet-writer';
import type { DatasetRow, RgbaImage } from '../../data/types';

const IMAGE_PLACEHOLDER = '<image>';

async function png(image: RgbaImage): Promise<Uint8Array> {
  const raw = Buffer.from(image.data.buffer, image.data.byteOffset, image.data.byteLength);
  return new Uint8Array(await sharp(raw, { raw: { width: image.width, height: image.height, channels: 4 } }).png().toBuffer());
}

/** The row's question with a placeholder per image: as it is when it has them, else images first (as the prompt builder places them). */
export function geo3kProblem(row: DatasetRow): string {
  if (row.question.includes(IMAGE_PLACEHOLDER) || row.images.length === 0) return row.question;
  return IMAGE_PLACEHOLDER.repeat(row.images.length) + row.question;
}

export async function geo3kParquet(rows: readonly DatasetRow[]): Promise<ArrayBuffer> {
  const images: { bytes: Uint8Array; path: string | null }[][] = [];
  for (const row of rows) images.push(await Promise.all(row.images.map(async (im) => ({ bytes: await png(im), path: null }))));
  const withSystem = rows.some((r) => r.system_prompt !== undefined);
  const features: Record<string, unknown> = {
    images: { feature: { _type: 'Image' }, _type: 'Sequence' },
    problem: { dtype: 'string', _type: 'Value' },
    answer: { dtype: 'string', _type: 'Value' },
    ...(withSystem ? { system_prompt: { dtype: 'string', _type: 'Value' } } : {}),
  };
  return parquetWriteBuffer({
    columnData: [
      { name: 'images', data: images },
      { name: 'problem', data: rows.map(geo3kProblem) },
      { name: 'answer', data: rows.map((r) => r.answer) },
      ...(withSystem ? [{ name: 'system_prompt', data: rows.map((r) => r.system_prompt ?? null) }] : []),
    ],
    schema: [
      { name: 'schema', num_children: withSystem ? 4 : 3 },
      { name: 'images', repetition_type: 'OPTIONAL', num_children: 1, converted_type: 'LIST', logical_type: { type: 'LIST' } },
      { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
      { name: 'element', repetition_type: 'OPTIONAL', num_children: 2 },
      { name: 'bytes', type: 'BYTE_ARRAY', repetition_type: 'OPTIONAL' },
      { name: 'path', type: 'BYTE_ARRAY', repetition_type: 'OPTIONAL', converted_type: 'UTF8', logical_type: { type: 'STRING' } },
      { name: 'problem', type: 'BYTE_ARRAY', repetition_type: 'OPTIONAL', converted_type: 'UTF8', logical_type: { type: 'STRING' } },
      { name: 'answer', type: 'BYTE_ARRAY', repetition_type: 'OPTIONAL', converted_type: 'UTF8', logical_type: { type: 'STRING' } },
      ...(withSystem ? [{ name: 'system_prompt', type: 'BYTE_ARRAY' as const, repetition_type: 'OPTIONAL' as const, converted_type: 'UTF8' as const, logical_type: { type: 'STRING' as const } }] : []),
    ],
    kvMetadata: [{ key: 'huggingface', value: JSON.stringify({ info: { features } }) }],
  });
}
