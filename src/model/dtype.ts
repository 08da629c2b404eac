// Conversions between the checkpoint's 16-bit float formats and f32, done on the CPU while
// tensors stream in. bf16 is the top half of an f32; f16 is IEEE binary16.

import type { SourceFormat } from '../ops/quantizeQ4';
import { WeightShapeError } from './weightShapes';

export type SafetensorsDtype = 'BF16' | 'F16' | 'F32' | 'I32' | 'I64' | 'U8';

/** Bytes per element of each dtype the reader accepts (U8: raw images saved beside processor outputs). */
export const DTYPE_BYTES: Record<SafetensorsDtype, number> = { BF16: 2, F16: 2, F32: 4, I32: 4, I64: 8, U8: 1 };

export function isSafetensorsDtype(s: string): s is SafetensorsDtype {
  return Object.hasOwn(DTYPE_BYTES, s);
}

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

export function bf16BitsToF32(bits: number): number {
  u32Scratch[0] = (bits & 0xffff) << 16;
  return f32Scratch[0];
}

/** Round-to-nearest-even, as PyTorch's `.to(torch.bfloat16)` does; NaN stays NaN. */
export function f32ToBf16Bits(x: number): number {
  f32Scratch[0] = x;
  const u = u32Scratch[0];
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 0x40) & 0xffff;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

export function f16BitsToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const frac = bits & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** Round-to-nearest-even to binary16, with subnormals and overflow to infinity. */
export function f32ToF16Bits(x: number): number {
  f32Scratch[0] = x;
  const u = u32Scratch[0];
  const sign = (u >>> 16) & 0x8000;
  const exp = (u >>> 23) & 0xff;
  const mant = u & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    const m = mant | 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = m & ((1 << shift) - 1);
    let h = m >>> shift;
    if (rest > half || (rest === half && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && h & 1)) h++;
  return sign | h;
}

/** A little-endian typed view of `bytes`, copied first when the offset is not aligned. */
function view<T>(bytes: Uint8Array, size: number, make: (b: ArrayBufferLike, o: number, n: number) => T): T {
  const n = bytes.byteLength / size;
  if (bytes.byteOffset % size === 0) return make(bytes.buffer, bytes.byteOffset, n);
  return make(bytes.slice().buffer, 0, n);
}

/** Decode float tensor bytes (BF16, F16 or F32, little-endian) to f32. */
export function toFloat32(bytes: Uint8Array, dtype: SafetensorsDtype): Float32Array {
  switch (dtype) {
    case 'F32':
      return view(bytes, 4, (b, o, n) => new Float32Array(b, o, n)).slice();
    case 'BF16': {
      const src = view(bytes, 2, (b, o, n) => new Uint16Array(b, o, n));
      const out = new Uint32Array(src.length);
      for (let i = 0; i < src.length; i++) out[i] = src[i] << 16;
      return new Float32Array(out.buffer);
    }
    case 'F16': {
      const src = view(bytes, 2, (b, o, n) => new Uint16Array(b, o, n));
      const out = new Float32Array(src.length);
      for (let i = 0; i < src.length; i++) out[i] = f16BitsToF32(src[i]);
      return out;
    }
    default:
      throw new Error(`toFloat32: ${dtype} is an integer dtype, not a float one`);
  }
}

/** Decode integer tensor bytes (I32, or I64 within ±2^31) to Int32Array. */
export function toInt32(bytes: Uint8Array, dtype: SafetensorsDtype): Int32Array {
  if (dtype === 'I32') return view(bytes, 4, (b, o, n) => new Int32Array(b, o, n)).slice();
  if (dtype === 'I64') {
    const src = view(bytes, 8, (b, o, n) => new BigInt64Array(b, o, n));
    const out = new Int32Array(src.length);
    for (let i = 0; i < src.length; i++) {
      const v = src[i];
      if (v > 2147483647n || v < -2147483648n) throw new RangeError(`toInt32: I64 value ${v} does not fit in int32`);
      out[i] = Number(v);
    }
    return out;
  }
  throw new Error(`toInt32: ${dtype} is a float dtype, not an integer one`);
}

/** Encode f32 values as bf16 or f16 bytes (for writing test checkpoints and adapters). */
export function fromFloat32(values: Float32Array, dtype: 'BF16' | 'F16' | 'F32'): Uint8Array<ArrayBuffer> {
  if (dtype === 'F32') return new Uint8Array(values.slice().buffer);
  const out = new Uint16Array(values.length);
  const enc = dtype === 'BF16' ? f32ToBf16Bits : f32ToF16Bits;
  for (let i = 0; i < values.length; i++) out[i] = enc(values[i]);
  return new Uint8Array(out.buffer);
}

/** The quantizer's reading of a checkpoint tensor's raw bytes (src/ops/quantizeQ4.ts). */
export function sourceFormat(name: string, dtype: SafetensorsDtype): SourceFormat {
  if (dtype === 'BF16') return 'bf16';
  if (dtype === 'F16') return 'f16';
  if (dtype === 'F32') return 'f32';
  throw new WeightShapeError(`checkpoint tensor '${name}' is ${dtype}; weights must be BF16, F16 or F32`);
}
