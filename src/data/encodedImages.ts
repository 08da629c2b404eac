// Rows whose images stay encoded until a batch needs them (loaders' `lazy` option): decoding,
// down-scaled to max_pixels, happens in the prompt source's `prepare`, one row at a time.
import type { PromptSource } from '../rl/trainer';
import { decodedSize, imageSizeProblem, QWEN3_VL_IMAGE_LIMITS, resizeArea, type ImageDecoder, type ImageLimits } from './image';
import type { DatasetRow } from './types';

/** An image that loading accepted from its header but that does not decode to a usable picture. */
export class BrokenImageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BrokenImageError';
  }
}

/** The row with its encoded images decoded (a new row; the input keeps its bytes), or the row itself when it has none. */
export async function decodeRowImages(row: DatasetRow, decoder: ImageDecoder, limits: ImageLimits = QWEN3_VL_IMAGE_LIMITS): Promise<DatasetRow> {
  if (!row.encoded) return row;
  const images = [];
  for (const e of row.encoded) {
    let image;
    try {
      image = await decoder.decode(e.bytes, { maxPixels: limits.maxPixels });
    } catch (err) {
      throw new BrokenImageError(`${e.source} (${e.width}x${e.height} by its header) does not decode: ${(err as Error).message}`);
    }
    // The header may lie: the decoded picture must be the size it declared (or its down-scaled size) and usable.
    const want = decodedSize(e, limits.maxPixels);
    // A resized image's own size need not suit the processor (the loader checked the resize target).
    const problem = imageSizeProblem(image, e.resize ? { ...limits, minSide: 1, maxAspect: Infinity } : limits);
    if (Math.abs(image.width - want.width) > 1 || Math.abs(image.height - want.height) > 1 || problem) {
      throw new BrokenImageError(`${e.source}: decodes to ${image.width}x${image.height}, its header declares ${e.width}x${e.height}${problem ? ` (${problem.detail})` : ''}`);
    }
    images.push(e.resize ? resizeArea(image, e.resize.width, e.resize.height) : image);
  }
  const { encoded: _, ...rest } = row;
  return { ...rest, images };
}

/** `inner` with each row's images decoded just before it is prepared. */
export function decodingPromptSource(inner: PromptSource, decoder: ImageDecoder, limits: ImageLimits = QWEN3_VL_IMAGE_LIMITS): PromptSource {
  return { rows: inner.rows, prepare: async (row, systemPrompt, options) => inner.prepare(await decodeRowImages(row, decoder, limits), systemPrompt, options) };
}
