// An encoded image's width and height from its header alone (PNG IHDR, JPEG SOFn, GIF logical
// screen, WebP VP8/VP8L/VP8X, BMP info header), without decoding: the loader checks sizes, and
// refuses decompression bombs, before any pixel is decoded.
import { crc32Hex } from '../rl/checksum';
import { sniffImageType } from './image';

export interface ImageSize {
  width: number;
  height: number;
}

const be16 = (b: Uint8Array, i: number) => (b[i] << 8) | b[i + 1];
const le16 = (b: Uint8Array, i: number) => b[i] | (b[i + 1] << 8);
const be32 = (b: Uint8Array, i: number) => ((b[i] << 24) | (b[i + 1] << 16) | (b[i + 2] << 8) | b[i + 3]) >>> 0;
const le24 = (b: Uint8Array, i: number) => b[i] | (b[i + 1] << 8) | (b[i + 2] << 16);
const le32s = (b: Uint8Array, i: number) => b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24);

/** The size the header declares, or null when the bytes are no known format or the header is cut short or malformed. */
export function imageHeaderSize(b: Uint8Array): ImageSize | null {
  switch (sniffImageType(b)) {
    case 'png':
      // Signature, then the first chunk must be IHDR: length 13, "IHDR", width, height (big-endian).
      if (b.length < 24 || b[12] !== 0x49 || b[13] !== 0x48 || b[14] !== 0x44 || b[15] !== 0x52) return null;
      return { width: be32(b, 16), height: be32(b, 20) };
    case 'gif':
      return b.length < 10 ? null : { width: le16(b, 6), height: le16(b, 8) };
    case 'bmp':
      return b.length < 26 ? null : { width: Math.abs(le32s(b, 18)), height: Math.abs(le32s(b, 22)) };
    case 'webp':
      return webpSize(b);
    case 'jpeg':
      return jpegSize(b);
    default:
      return null;
  }
}

function webpSize(b: Uint8Array): ImageSize | null {
  if (b.length < 30) return null;
  const chunk = String.fromCharCode(b[12], b[13], b[14], b[15]);
  if (chunk === 'VP8 ') return { width: le16(b, 26) & 0x3fff, height: le16(b, 28) & 0x3fff };
  if (chunk === 'VP8L') {
    const [b0, b1, b2, b3] = [b[21], b[22], b[23], b[24]];
    return { width: 1 + (((b1 & 0x3f) << 8) | b0), height: 1 + (((b3 & 0x0f) << 10) | (b2 << 2) | ((b1 & 0xc0) >> 6)) };
  }
  if (chunk === 'VP8X') return { width: 1 + le24(b, 24), height: 1 + le24(b, 27) };
  return null;
}

/** Walks the marker segments to the first start-of-frame (SOF0-SOF15 but DHT, JPG and DAC). */
function jpegSize(b: Uint8Array): ImageSize | null {
  let i = 2;
  while (i + 3 < b.length) {
    if (b[i] !== 0xff) return null;
    const marker = b[i + 1];
    if (marker === 0xff) {
      i++; // fill byte
      continue;
    }
    if (marker === 0x01 || (marker >= 0xd0 && marker <= 0xd8)) {
      i += 2; // markers without a length
      continue;
    }
    const length = be16(b, i + 2);
    if (length < 2) return null;
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      return i + 9 <= b.length ? { width: be16(b, i + 7), height: be16(b, i + 5) } : null;
    }
    if (marker === 0xda || marker === 0xd9) return null; // scan data or the end before any frame header
    i += 2 + length;
  }
  return null;
}

/**
 * A cheap check of the container without decoding pixels, or null when it passes: a PNG's chunks
 * must each fit the file with a matching CRC-32 and end with IEND (a truncated or bit-flipped
 * file fails); a JPEG must end with its EOI marker (a truncated one fails). Pixel data that is
 * corrupt inside a well-formed container is found only at decode.
 */
export function imageStructureProblem(b: Uint8Array): string | null {
  const kind = sniffImageType(b);
  if (kind === 'jpeg') {
    let end = b.length;
    while (end > 2 && b[end - 1] === 0) end--; // some writers pad after EOI
    return b[end - 2] === 0xff && b[end - 1] === 0xd9 ? null : 'JPEG without its end marker: the file is truncated';
  }
  if (kind !== 'png') return null;
  for (let i = 8; ; ) {
    if (i + 12 > b.length) return `PNG truncated at byte ${i} (no IEND chunk)`;
    const length = be32(b, i);
    const type = String.fromCharCode(b[i + 4], b[i + 5], b[i + 6], b[i + 7]);
    if (i + 12 + length > b.length) return `PNG chunk ${JSON.stringify(type)} at byte ${i} runs past the end of the file (truncated)`;
    const stored = be32(b, i + 8 + length).toString(16).padStart(8, '0');
    if (crc32Hex(b.subarray(i + 4, i + 8 + length)) !== stored) return `PNG chunk ${JSON.stringify(type)} at byte ${i} fails its CRC (the file is corrupt)`;
    if (type === 'IEND') return null;
    i += 12 + length;
  }
}
