// The browser's image decoder: createImageBitmap, then an OffscreenCanvas to read the pixels.
// Works in windows and workers. No colour-space conversion and no premultiplication, so the
// pixels are the file's own.
import { decodedSize, type DecodeOptions, type ImageDecoder } from './image';
import type { RgbaImage } from './types';

export const browserDecoder: ImageDecoder = {
  async decode(bytes: Uint8Array, options: DecodeOptions = {}): Promise<RgbaImage> {
    const blob = new Blob([bytes as Uint8Array<ArrayBuffer>]);
    const opts: ImageBitmapOptions = { colorSpaceConversion: 'none', premultiplyAlpha: 'none' };
    let bitmap = await createImageBitmap(blob, opts);
    if (options.maxPixels !== undefined && bitmap.width * bitmap.height > options.maxPixels) {
      const { width, height } = decodedSize(bitmap, options.maxPixels);
      bitmap.close();
      bitmap = await createImageBitmap(blob, { ...opts, resizeWidth: width, resizeHeight: height, resizeQuality: 'high' });
    }
    try {
      const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
      const ctx = canvas.getContext('2d');
      if (ctx === null) throw new Error('OffscreenCanvas: no 2d context');
      ctx.drawImage(bitmap, 0, 0);
      const { data, width, height } = ctx.getImageData(0, 0, bitmap.width, bitmap.height);
      return { width, height, data };
    } finally {
      bitmap.close();
    }
  },
};
