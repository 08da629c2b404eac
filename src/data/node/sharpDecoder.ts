// Node's image decoder, through sharp (libvips; installed with @huggingface/transformers).
// Node-only: never import this from browser code, which uses ../decodeBrowser.
import sharp from 'sharp';
import { decodedSize, type DecodeOptions, type ImageDecoder } from '../image';
import type { RgbaImage } from '../types';

export const sharpDecoder: ImageDecoder = {
  async decode(bytes: Uint8Array, options: DecodeOptions = {}): Promise<RgbaImage> {
    // First frame only (GIF/WebP animations); grey, palette and 16-bit images to 8-bit sRGB + alpha.
    let image = sharp(bytes, { pages: 1 });
    if (options.maxPixels !== undefined) {
      const { width, height } = await image.metadata();
      if (width !== undefined && height !== undefined && width * height > options.maxPixels) {
        // sharp shrinks JPEG and WebP while decoding, others right after.
        image = image.resize({ ...decodedSize({ width, height }, options.maxPixels), fit: 'fill' });
      }
    }
    const { data, info } = await image.toColourspace('srgb').ensureAlpha().raw().toBuffer({ resolveWithObject: true });
    if (info.channels !== 4) throw new Error(`sharp: expected 4 channels, got ${info.channels}`);
    return { width: info.width, height: info.height, data: new Uint8ClampedArray(data.buffer, data.byteOffset, data.byteLength) };
  },
};
