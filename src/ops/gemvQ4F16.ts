// The 4-bit GEMV of decode (1 to 8 rows of x) on f16 tensor cores (shaders/matmul_q4_gemv_f16.wgsl):
// W dequantized with its group scale to f16 in workgroup memory, x times a power of two rounded to
// f16, f32 accumulation; the same epilogue as MatmulQ4's GEMV (joined outputs, LoRA's up product
// from partials, accumulate). Needs shader-f16 and an f16 -> f32 subgroup-matrix configuration
// whose K divides a Q4 group.
import { capabilitiesOf, compileMatrixKernels, configsOf, MissingFeatureError, ShapeError, type Capabilities, type Gpu, type Kernel, type Recorder, type SubgroupMatrixConfig, type Tensor } from '../gpu';
import { GEMV_MAX_ROWS, LORA_MAX, Q4_GROUP, splitsOf, type GemvLora, type Q4Weight } from './matmulQ4';
import { SUBGROUP_MATRIX } from './matmulQ4Mma';

/** How a workgroup spreads its work: `ks` subgroups split the reduction, each over `rt` fragments
 * of W's rows and `bg` Q4 groups along K a step. */
export interface GemvF16Layout {
  ks: number;
  rt: number;
  bg: number;
}

export const DEFAULT_GEMV_F16: GemvF16Layout = { ks: 4, rt: 2, bg: 2 };

/** x is multiplied by this power of two before it is rounded to f16 (and y divided by it): the
 * decoder's GEMV inputs then stay below f16's largest finite value up to 65504 / XS in magnitude,
 * while values down to 2^-14 / XS keep f16's full precision. */
export const GEMV_F16_XS = 2 ** -4;

export const GEMV_F16_UNIFORMS = { m: 'u32', n: 'u32', k: 'u32', accumulate: 'u32', split1: 'u32', split2: 'u32', lora_r: 'u32', lora_np: 'u32', lora_s: 'f32', xs: 'f32' } as const;
const NO_LORA = { lora_r: 0, lora_np: 0, lora_s: 0 } as const;
/** Workgroup memory of the LoRA epilogue (q4_gemv_common.wgsl: lora_u and lora_fold). */
const LORA_BYTES = 3 * LORA_MAX * 4;

/** The f16 -> f32 configuration the GEMV takes: fragments of at least GEMV_MAX_ROWS columns (rows of
 * x), the fewest of them (no MMA work on absent rows), then the tallest; or null. */
export function gemvF16Config(caps: Capabilities): SubgroupMatrixConfig | null {
  const fit = configsOf(caps, 'f16').filter((c) => c.resultComponentType === 'f32' && c.N >= GEMV_MAX_ROWS && Q4_GROUP % c.K === 0);
  return fit.sort((a, b) => a.N - b.N || b.M - a.M || b.K - a.K)[0] ?? null;
}

/** The shader's defines for `layout` on fragments `cfg`. */
export function gemvF16Defines(layout: GemvF16Layout, cfg: SubgroupMatrixConfig): Record<string, number> {
  return { FR: cfg.M, FN: cfg.N, FK: cfg.K, KS: layout.ks, RT: layout.rt, BG: layout.bg, KSTEPS: (32 * layout.bg) / cfg.K };
}

/** Workgroup memory of `layout` with fragments `cfg` (and the LoRA epilogue's with `lora`). */
export function gemvF16Bytes(layout: GemvF16Layout, cfg: SubgroupMatrixConfig, lora: boolean): number {
  const { ks, rt, bg } = layout;
  const as = 32 * bg + 8;
  return 2 * ks * rt * cfg.M * as + 2 * ks * cfg.N * as + 4 * ks * rt * cfg.M * cfg.N + (lora ? LORA_BYTES : 0);
}

/** Why `caps` cannot run the f16 GEMV with `layout`, or null. */
export function gemvF16Unsupported(caps: Capabilities, layout: GemvF16Layout = DEFAULT_GEMV_F16): string | null {
  if (!caps.shaderF16) return 'no shader-f16 on this device';
  if (!caps.subgroupMatrix.enabled) return `no '${SUBGROUP_MATRIX}' feature on this device`;
  if (!caps.subgroups.enabled) return "no 'subgroups' feature";
  if (caps.subgroups.minSize !== 32 || caps.subgroups.maxSize !== 32) return `subgroups of ${caps.subgroups.minSize ?? '?'} to ${caps.subgroups.maxSize ?? '?'} lanes; the GEMV needs exactly 32`;
  const cfg = gemvF16Config(caps);
  if (!cfg) return `no f16->f32 subgroup-matrix configuration with at least ${GEMV_MAX_ROWS} columns and K dividing ${Q4_GROUP}`;
  const { ks, rt, bg } = layout;
  if (![ks, rt, bg].every((v) => Number.isInteger(v) && v > 0) || (32 * bg) % cfg.K !== 0) return `bad layout ${JSON.stringify(layout)}`;
  if (32 * ks > caps.limits.maxComputeInvocationsPerWorkgroup) return `${32 * ks} threads exceed this GPU's ${caps.limits.maxComputeInvocationsPerWorkgroup}`;
  const bytes = gemvF16Bytes(layout, cfg, true);
  if (bytes > caps.limits.maxComputeWorkgroupStorageSize) return `layout ${JSON.stringify(layout)} needs ${bytes} bytes of workgroup memory; this GPU has ${caps.limits.maxComputeWorkgroupStorageSize}`;
  return null;
}

/** What a GEMV call adds to y (+)= x·Wᵀ: a joined weight's parts, an adapter's up product. */
export interface GemvF16Call {
  parts?: readonly number[];
  lora?: GemvLora;
}

export class GemvQ4F16 {
  private constructor(
    private readonly plain: Kernel,
    private readonly withLora: Kernel,
    readonly layout: GemvF16Layout,
    readonly config: SubgroupMatrixConfig,
  ) {}

  static async create(gpu: Gpu, layout: GemvF16Layout = DEFAULT_GEMV_F16): Promise<GemvQ4F16> {
    const caps = capabilitiesOf(gpu);
    const why = gemvF16Unsupported(caps, layout);
    if (why) throw new MissingFeatureError(caps.shaderF16 ? SUBGROUP_MATRIX : 'shader-f16', why);
    const cfg = gemvF16Config(caps)!;
    const defines = gemvF16Defines(layout, cfg);
    const entry = { shader: 'matmul_q4_gemv_f16', entry: 'gemv_f16', uniforms: GEMV_F16_UNIFORMS };
    // Compiled side by side: a load waits for the slowest, not for the sum.
    const [[plain], [withLora]] = await Promise.all([
      compileMatrixKernels(gpu, 'matmul_q4.gemv_f16', [entry], { ...defines, LORA: false }),
      compileMatrixKernels(gpu, 'matmul_q4.gemv_f16_lora', [entry], { ...defines, LORA: true }),
    ]);
    return new GemvQ4F16(plain, withLora, layout, cfg);
  }

  /** Rows of W a workgroup. */
  get rowsPerWorkgroup(): number {
    return this.layout.rt * this.config.M;
  }

  /** Whether this GEMV takes W [n, k] (k a multiple of a step's columns). */
  takes(w: Q4Weight): boolean {
    return w.k % (32 * this.layout.bg) === 0;
  }

  /** y [M, N] (+)= x [M, K]·Wᵀ for 1 ≤ M ≤ 8; `call` as MatmulQ4.gemv's parts and lora. */
  gemv(rec: Recorder, x: Tensor, w: Q4Weight, y: Tensor, accumulate = false, call: GemvF16Call = {}): void {
    const op = 'gemvQ4F16';
    const m = x.numel / w.k;
    if (x.dtype !== 'f32' || y.dtype !== 'f32' || x.shape[x.shape.length - 1] !== w.k) throw new ShapeError(op, `x must be f32 [M, ${w.k}] and y f32, got x ${x.dtype} [${x.shape.join(', ')}], y ${y.dtype}`);
    if (!Number.isInteger(m) || m < 1 || m > GEMV_MAX_ROWS) throw new ShapeError(op, `takes 1 to ${GEMV_MAX_ROWS} rows of x, got ${m}`);
    if (y.numel !== m * w.n) throw new ShapeError(op, `y must hold [${m}, ${w.n}], got ${y.numel} elements`);
    if (!this.takes(w)) throw new ShapeError(op, `K = ${w.k} is not a multiple of ${32 * this.layout.bg}`);
    const [split1, split2] = splitsOf(op, call.parts, w.n);
    const blocks = Math.ceil(w.n / this.rowsPerWorkgroup);
    const gx = Math.min(blocks, 65535);
    const grid: [number, number] = [gx, Math.ceil(blocks / gx)];
    const base = { m, n: w.n, k: w.k, accumulate: accumulate ? 1 : 0, split1, split2, xs: GEMV_F16_XS };
    const lora = call.lora;
    if (!lora) {
      rec.dispatch(this.plain, { codes4: w.codes, scales: w.scales, x, y }, grid, { ...base, ...NO_LORA });
      return;
    }
    const { B, r, scale, perRow, parts } = lora;
    if (call.parts || !Number.isInteger(r) || r < 1 || m * r > LORA_MAX || !Number.isInteger(perRow) || perRow < 1) {
      throw new ShapeError(op, `a LoRA epilogue needs one output, 1 ≤ r and M·r ≤ ${LORA_MAX} and whole partials (r ${r}, M ${m}, ${perRow} partials a row)`);
    }
    if (B.dtype !== 'f32' || B.numel !== w.n * r) throw new ShapeError(op, `lora B must be f32 [${w.n}, ${r}]`);
    if (parts.dtype !== 'f32' || parts.numel < m * perRow * r) throw new ShapeError(op, `LoRA partials must hold [${m}, ${perRow}, ${r}] f32`);
    rec.dispatch(this.withLora, { codes4: w.codes, scales: w.scales, x, y, lora_parts: parts, lora_b: B }, grid, { ...base, lora_r: r, lora_np: perRow, lora_s: scale });
  }
}
