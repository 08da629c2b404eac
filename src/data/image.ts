// Image bytes → RGBA pixels through an injected decoder (the browser's or sharp in Node), and the
// optional resize. Decoders differ slightly between platforms for JPEG (IDCT rounding); PNG
// decodes to the same pixels everywhere. Synthetic tasks never go through here.
import { QWEN3_VL_IMAGE_PROCESSOR, type ImageProcessorConfig } from '../model/processor/image';
import type { ImageSize } from './imageHeader';
import type { RgbaImage } from './types';

export interface DecodeOptions {
  /** Down-scale (area kept to at most this many pixels, aspect ratio kept) while decoding. */
  maxPixels?: number;
}

export interface ImageDecoder {
  /** Decodes PNG, JPEG, GIF (first frame), WebP or BMP to straight RGBA; rejects anything else. */
  decode(bytes: Uint8Array, options?: DecodeOptions): Promise<RgbaImage>;
}

/** What images the processor can take, checked on the header's size before any decoding. */
export interface ImageLimits {
  /** Each side at least this many pixels (patch size × merge size): smart_resize refuses smaller. */
  minSide: number;
  /** Longer side over shorter side at most this (smart_resize's limit). */
  maxAspect: number;
  /** Larger images are down-scaled to this many pixels at decode (the processor's max_pixels). */
  maxPixels: number;
  /** A header declaring more pixels than this is refused undecoded: a decompression bomb. */
  maxHeaderPixels: number;
}

/** The limits of a Qwen3-VL image processor config; a header may declare up to 4x its max_pixels. */
export function imageLimitsFor(cfg: ImageProcessorConfig): ImageLimits {
  return { minSide: cfg.patchSize * cfg.mergeSize, maxAspect: 200, maxPixels: cfg.maxPixels, maxHeaderPixels: 4 * cfg.maxPixels };
}

export const QWEN3_VL_IMAGE_LIMITS: ImageLimits = imageLimitsFor(QWEN3_VL_IMAGE_PROCESSOR);

/** Why an image of this size cannot be used, or null when it can. */
export function imageSizeProblem({ width, height }: ImageSize, limits: ImageLimits): { reason: 'unusable image size' | 'image too large'; detail: string } | null {
  if (width * height > limits.maxHeaderPixels) {
    return { reason: 'image too large', detail: `image ${width}x${height} declares ${(width * height / 1e6).toFixed(0)} M pixels, over ${(limits.maxHeaderPixels / 1e6).toFixed(0)} M: refused undecoded (a decompression bomb)` };
  }
  if (width < limits.minSide || height < limits.minSide) {
    return { reason: 'unusable image size', detail: `image ${width}x${height} is too small: each side must be at least ${limits.minSide} pixels (patch size x merge size)` };
  }
  const ratio = Math.max(width, height) / Math.min(width, height);
  if (ratio > limits.maxAspect) return { reason: 'unusable image size', detail: `image ${width}x${height} has an aspect ratio of ${ratio.toFixed(1)}:1, over ${limits.maxAspect}:1` };
  return null;
}

/** The size an image of `size` is decoded to: itself, or down-scaled to at most maxPixels with its aspect ratio. */
export function decodedSize({ width, height }: ImageSize, maxPixels: number): ImageSize {
  if (width * height <= maxPixels) return { width, height };
  const scale = Math.sqrt(maxPixels / (width * height));
  return { width: Math.max(1, Math.floor(width * scale)), height: Math.max(1, Math.floor(height * scale)) };
}

/** The container format from the first bytes, or null when it is none we know. */
export function sniffImageType(bytes: Uint8Array): 'png' | 'jpeg' | 'gif' | 'webp' | 'bmp' | null {
  const b = bytes;
  if (b.length >= 8 && b[0] === 0x89 && b[1] === 0x50 && b[2] === 0x4e && b[3] === 0x47) return 'png';
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return 'jpeg';
  if (b.length >= 6 && b[0] === 0x47 && b[1] === 0x49 && b[2] === 0x46) return 'gif';
  if (b.length >= 12 && b[0] === 0x52 && b[1] === 0x49 && b[2] === 0x46 && b[3] === 0x46 && b[8] === 0x57 && b[9] === 0x45) return 'webp';
  if (b.length >= 2 && b[0] === 0x42 && b[1] === 0x4d) return 'bmp';
  return null;
}

/**
 * Area (box) resampling to exactly width × height: each output pixel is the coverage-weighted
 * mean of the source pixels under its footprint, done separably (rows, then columns), in
 * straight RGBA. For downscaling this is PIL's BOX filter; for upscaling it replicates pixels
 * with blended seams. Chosen over bilinear because it never skips source pixels when shrinking.
 */
export function resizeArea(src: RgbaImage, width: number, height: number): RgbaImage {
  if (!Number.isInteger(width) || !Number.isInteger(height) || width <= 0 || height <= 0) {
    throw new Error(`resize: bad target size ${width}x${height}`);
  }
  if (width === src.width && height === src.height) return src;
  const horizontal = new Float64Array(width * src.height * 4);
  const wx = boxWeights(src.width, width);
  for (let y = 0; y < src.height; y++) {
    for (let x = 0; x < width; x++) {
      for (const [sx, w] of wx[x]) {
        const s = (y * src.width + sx) * 4;
        const d = (y * width + x) * 4;
        for (let c = 0; c < 4; c++) horizontal[d + c] += w * src.data[s + c];
      }
    }
  }
  const out = new Uint8ClampedArray(width * height * 4);
  const wy = boxWeights(src.height, height);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const acc = [0, 0, 0, 0];
      for (const [sy, w] of wy[y]) {
        const s = (sy * width + x) * 4;
        for (let c = 0; c < 4; c++) acc[c] += w * horizontal[s + c];
      }
      const d = (y * width + x) * 4;
      for (let c = 0; c < 4; c++) out[d + c] = Math.round(acc[c]);
    }
  }
  return { width, height, data: out };
}

/** For each output index, the (source index, weight) pairs of its footprint; weights sum to 1. */
function boxWeights(srcSize: number, dstSize: number): [number, number][][] {
  const scale = srcSize / dstSize;
  const out: [number, number][][] = [];
  for (let i = 0; i < dstSize; i++) {
    const lo = i * scale;
    const hi = (i + 1) * scale;
    const taps: [number, number][] = [];
    for (let s = Math.floor(lo); s < Math.min(srcSize, Math.ceil(hi)); s++) {
      const w = Math.min(hi, s + 1) - Math.max(lo, s);
      if (w > 0) taps.push([s, w / scale]);
    }
    out.push(taps);
  }
  return out;
}
