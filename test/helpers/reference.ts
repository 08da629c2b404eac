// CPU references for kernel tests: seeded random data, tolerance checks, finite differences.
import { expect } from 'vitest';
import { Rng } from '../../src/data/random';

/** Seeded uniform draws in [0, 1) (src/data/random.ts's Mulberry32). */
export function rng(seed: number): () => number {
  const r = new Rng(seed);
  return () => r.next();
}

/** Uniform values in [lo, hi). */
export function randUniform(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  const r = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + (hi - lo) * r();
  return out;
}

/** Standard normal values (Box-Muller) times `scale`. */
export function randNormal(n: number, seed: number, scale = 1): Float32Array {
  const r = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i += 2) {
    const u = Math.max(r(), 1e-12);
    const v = r();
    const m = Math.sqrt(-2 * Math.log(u)) * scale;
    out[i] = m * Math.cos(2 * Math.PI * v);
    if (i + 1 < n) out[i + 1] = m * Math.sin(2 * Math.PI * v);
  }
  return out;
}

export interface CloseReport {
  maxAbs: number;
  maxRel: number;
  worst: number;
}

/**
 * Assert |a - b| <= atol + rtol * |b| elementwise (b is the reference). On failure the message
 * names the worst element, so a failing kernel test says where it went wrong.
 */
export function expectClose(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  { rtol = 1e-5, atol = 1e-6, what = 'values' }: { rtol?: number; atol?: number; what?: string } = {},
): CloseReport {
  expect(actual.length, `${what}: length`).toBe(expected.length);
  let maxAbs = 0;
  let maxRel = 0;
  let worst = -1;
  let worstExcess = 0;
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i];
    const b = expected[i];
    const d = Math.abs(a - b);
    if (!Number.isFinite(a) && !(Number.isNaN(a) && Number.isNaN(b)) && a !== b) {
      worst = i;
      worstExcess = Infinity;
      break;
    }
    maxAbs = Math.max(maxAbs, d);
    if (b !== 0) maxRel = Math.max(maxRel, d / Math.abs(b));
    const excess = d - (atol + rtol * Math.abs(b));
    if (excess > worstExcess) {
      worstExcess = excess;
      worst = i;
    }
  }
  if (worst >= 0) {
    expect.fail(
      `${what}: element ${worst} is ${actual[worst]}, expected ${expected[worst]} (rtol ${rtol}, atol ${atol}; max abs err ${maxAbs})`,
    );
  }
  return { maxAbs, maxRel, worst };
}

/**
 * Central finite differences of a scalar function f at x, for the coordinates in `indices`
 * (all by default). Computed in f64; f should itself compute in f64 for a clean check.
 */
export function finiteDifferences(
  f: (x: Float64Array) => number,
  x: ArrayLike<number>,
  { eps = 1e-4, indices }: { eps?: number; indices?: number[] } = {},
): Float64Array {
  const xs = Float64Array.from(x);
  const idx = indices ?? [...xs.keys()];
  const g = new Float64Array(xs.length);
  for (const i of idx) {
    const v = xs[i];
    xs[i] = v + eps;
    const fp = f(xs);
    xs[i] = v - eps;
    const fm = f(xs);
    xs[i] = v;
    g[i] = (fp - fm) / (2 * eps);
  }
  return g;
}

/** A row-major [rows, cols] product a·bᵀ (b given as [cols-of-result, k]) in f64. */
export function matmulT(a: ArrayLike<number>, b: ArrayLike<number>, rows: number, cols: number, k: number): Float64Array {
  const out = new Float64Array(rows * cols);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
    let s = 0;
    for (let p = 0; p < k; p++) s += a[i * k + p] * b[j * k + p];
    out[i * cols + j] = s;
  }
  return out;
}

/** The transpose of a row-major [rows, cols] array, in f64. */
export function transpose(a: ArrayLike<number>, rows: number, cols: number): Float64Array {
  const out = new Float64Array(rows * cols);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) out[j * rows + i] = a[i * cols + j];
  return out;
}
