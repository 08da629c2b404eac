// CPU reference of the Q4 format (shaders/q4_format.wgsl): f16/bf16 rounding, quantize,
// dequantize, and the products in f64.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** f32 → IEEE half bits, round to nearest even (subnormals kept). */
export function toHalfBits(v: number): number {
  f32[0] = v;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const e = (x >>> 23) & 0xff;
  let m = x & 0x7fffff;
  if (e === 0xff) return sign | 0x7c00 | (m ? 0x200 : 0);
  const he = e - 127 + 15;
  if (he >= 0x1f) return sign | 0x7c00;
  let shift = 13;
  let r: number;
  if (he <= 0) {
    if (he < -10) return sign;
    m |= 0x800000;
    shift = 14 - he;
    r = m >>> shift;
  } else r = (he << 10) | (m >>> 13);
  const rem = m & ((1 << shift) - 1);
  const half = 1 << (shift - 1);
  if (rem > half || (rem === half && r & 1)) r++;
  return sign | r;
}

export function fromHalfBits(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** f32 → bf16 bits, round to nearest even. */
export function toBf16Bits(v: number): number {
  f32[0] = v;
  const x = u32[0];
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

export function fromBf16Bits(b: number): number {
  u32[0] = b << 16;
  return f32[0];
}

/** Two 16-bit values per u32, the first in the low half (the byte order of a safetensors file). */
export function packHalves(bits: ArrayLike<number>): Uint32Array {
  const out = new Uint32Array(bits.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = (bits[2 * i] | (bits[2 * i + 1] << 16)) >>> 0;
  return out;
}

/** Round half to even, as WGSL's round(). */
export function roundEven(v: number): number {
  const r = Math.round(v);
  return Math.abs(v % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

export interface Q4Host {
  codes: Uint32Array;
  scales: Uint32Array;
  n: number;
  k: number;
}

/** Code of value v under scale d: round(v / d) + 8 clamped to 0..15 (8 when d is 0). */
export function codeOf(v: number, d: number): number {
  return d === 0 ? 8 : Math.min(15, Math.max(0, roundEven(v / d) + 8));
}

/** The f16 scale of a group: m / -8, m its value of largest magnitude (the first such). */
export function scaleOf(group: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < group.length; i++) if (Math.abs(group[i]) > Math.abs(m)) m = group[i];
  return fromHalfBits(toHalfBits(m / -8));
}

export function quantizeRef(w: ArrayLike<number>, n: number, k: number): Q4Host {
  const groups = (n * k) / 32;
  const codes = new Uint32Array((n * k) / 8);
  const scales = new Uint32Array(Math.ceil(groups / 2));
  for (let s = 0; s < groups; s++) {
    const g = Array.from({ length: 32 }, (_, i) => w[s * 32 + i]);
    const d = scaleOf(g);
    scales[s >> 1] |= toHalfBits(d) << (16 * (s & 1));
    for (let i = 0; i < 32; i++) codes[s * 4 + (i >> 3)] |= codeOf(g[i], d) << (4 * (i & 7));
  }
  return { codes, scales, n, k };
}

export function scaleAt(q: Pick<Q4Host, 'scales'>, s: number): number {
  return fromHalfBits((q.scales[s >> 1] >>> (16 * (s & 1))) & 0xffff);
}

export function codeAt(q: Pick<Q4Host, 'codes'>, e: number): number {
  return (q.codes[e >> 3] >>> (4 * (e & 7))) & 15;
}

export function dequantizeRef(q: Q4Host): Float64Array {
  const out = new Float64Array(q.n * q.k);
  for (let e = 0; e < out.length; e++) out[e] = scaleAt(q, e >> 5) * (codeAt(q, e) - 8);
  return out;
}

/** a [M, K] · bᵀ with b [N, K], in f64; also Σ|a||b| per element for tolerances. */
export function matmulABt(a: ArrayLike<number>, b: ArrayLike<number>, m: number, n: number, k: number): { y: Float64Array; mag: Float64Array } {
  const y = new Float64Array(m * n);
  const mag = new Float64Array(m * n);
  for (let i = 0; i < m; i++)
    for (let j = 0; j < n; j++) {
      let s = 0;
      let t = 0;
      for (let l = 0; l < k; l++) {
        s += a[i * k + l] * b[j * k + l];
        t += Math.abs(a[i * k + l] * b[j * k + l]);
      }
      y[i * n + j] = s;
      mag[i * n + j] = t;
    }
  return { y, mag };
}

/** a [M, N] · b with b [N, K], in f64; also Σ|a||b| per element. */
export function matmulAB(a: ArrayLike<number>, b: ArrayLike<number>, m: number, n: number, k: number): { y: Float64Array; mag: Float64Array } {
  const y = new Float64Array(m * k);
  const mag = new Float64Array(m * k);
  for (let i = 0; i < m; i++)
    for (let l = 0; l < n; l++) {
      const av = a[i * n + l];
      for (let j = 0; j < k; j++) {
        y[i * k + j] += av * b[l * k + j];
        mag[i * k + j] += Math.abs(av * b[l * k + j]);
      }
    }
  return { y, mag };
}
