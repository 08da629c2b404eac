// LoRA's forward update for a few rows (shaders/lora_gemv.wgsl): y += s·x·Aᵀ·Bᵀ through
// u = x·Aᵀ, as two wide GEMV-shaped dispatches, for one adapter or for two or three that share
// their input (q/k/v, gate/up: one pair of dispatches for the group). For decode, where
// src/ops/lora.ts's two tiled GEMMs run one workgroup each; training (many rows, dropout) stays
// with those.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import { loraScale, type LoraParams } from './lora';

/** Most rows the GEMV path takes (MAX_ROWS in the shader). */
export const LORA_GEMV_MAX_ROWS = 8;
const WG = 256;
const UNIFORMS = { rows: 'u32', k: 'u32', r: 'u32', n0: 'u32', n1: 'u32', n2: 'u32', s0: 'f32', s1: 'f32', s2: 'f32' } as const;

interface Pair {
  down: Kernel;
  up: Kernel;
}

/** The kernels for one element width: scalar, or vec4 (in and r multiples of 4). */
interface Family {
  /** By adapter count - 1. */
  groups: readonly Pair[];
  swiglu: Kernel;
}

export class LoraGemv {
  private constructor(
    private readonly scalar: Family,
    private readonly vec4: Family,
  ) {}

  static async create(gpu: Gpu): Promise<LoraGemv> {
    const family = async (vec4: boolean): Promise<Family> => {
      const spec = (entry: string, adapters: number, swiglu = false) => ({
        name: `lora_gemv.${entry}${adapters > 1 ? `_x${adapters}` : ''}${swiglu ? '_swiglu' : ''}${vec4 ? '_vec4' : ''}`,
        shader: 'lora_gemv',
        entry,
        defines: { ADAPTERS: adapters, SECOND: adapters >= 2, THIRD: adapters >= 3, SWIGLU: swiglu, VEC4: vec4, W: vec4 ? 4 : 1, ELEM: vec4 ? 'vec4f' : 'f32' },
        uniforms: UNIFORMS,
      });
      const ks = await Promise.all(
        [1, 2, 3].flatMap((n) => [gpu.kernel(spec('lora_down', n)), gpu.kernel(spec('lora_up', n))]).concat(gpu.kernel(spec('lora_up', 2, true))),
      );
      return { groups: [0, 1, 2].map((i) => ({ down: ks[2 * i], up: ks[2 * i + 1] })), swiglu: ks[6] };
    };
    const [scalar, vec4] = await Promise.all([family(false), family(true)]);
    return new LoraGemv(scalar, vec4);
  }

  private family(p: LoraParams): Family {
    return p.in % 4 === 0 && p.r % 4 === 0 ? this.vec4 : this.scalar;
  }

  /** Whether `rows` rows take this path. */
  static fits(rows: number): boolean {
    return rows >= 1 && rows <= LORA_GEMV_MAX_ROWS;
  }

  /** Whether adapters can share one call: one to three, with one input width and one rank. */
  static groupable(ps: readonly LoraParams[]): boolean {
    return ps.length >= 1 && ps.length <= 3 && ps.every((p) => p.in === ps[0].in && p.r === ps[0].r);
  }

  /** y [rows, out] += s·x·Aᵀ·Bᵀ for x [rows, in]; u [rows, r] (or larger) receives x·Aᵀ. */
  forward(rec: Recorder, p: LoraParams, x: Tensor, y: Tensor, u: Tensor): void {
    this.forwardShared(rec, [p], x, [y], u);
  }

  /**
   * y_g [rows, out_g] += s_g·x·A_gᵀ·B_gᵀ for each adapter g of `ps` (1 to 3, groupable) on the
   * same x [rows, in]; u (rows · G · r elements or more) receives [rows, G·r] = x·[A_0; ...]ᵀ.
   */
  forwardShared(rec: Recorder, ps: readonly LoraParams[], x: Tensor, ys: readonly Tensor[], u: Tensor): void {
    const rows = this.check(ps, x, u);
    if (ys.length !== ps.length) throw new ShapeError('lora_gemv', `${ps.length} adapters, ${ys.length} outputs`);
    ps.forEach((p, g) => this.checkOut(p, ys[g], rows, 'y'));
    const uniforms = this.uniforms(ps, rows);
    const down: Record<string, Tensor> = { x, u };
    const up: Record<string, Tensor> = { u_in: u };
    ps.forEach((p, g) => {
      down[`a${g}`] = p.A;
      up[`b${g}`] = p.B;
      up[`y${g}`] = ys[g];
    });
    const k = this.family(ps[0]).groups[ps.length - 1];
    const cols = ps.reduce((n, p) => n + p.out, 0);
    rec.dispatch(k.down, down, grid1d(ps.length * ps[0].r, 1), uniforms);
    rec.dispatch(k.up, up, grid1d(rows * cols, WG), uniforms);
  }

  /**
   * act [rows, I] = silu(gate + s_g·x·A_gᵀ·B_gᵀ)·(up + s_u·x·A_uᵀ·B_uᵀ): the gate/up LoRA updates
   * and SwiGLU in two dispatches. gate and up [rows, I] hold the base projections and are only read.
   */
  forwardSwiglu(rec: Recorder, gateP: LoraParams, upP: LoraParams, x: Tensor, gate: Tensor, up: Tensor, act: Tensor, u: Tensor): void {
    const ps = [gateP, upP];
    const rows = this.check(ps, x, u);
    if (gateP.out !== upP.out) throw new ShapeError('lora_gemv', `gate and up widths differ: ${gateP.out}, ${upP.out}`);
    this.checkOut(gateP, gate, rows, 'gate');
    this.checkOut(upP, up, rows, 'up');
    this.checkOut(gateP, act, rows, 'act');
    const uniforms = this.uniforms(ps, rows);
    const f = this.family(gateP);
    rec.dispatch(f.groups[1].down, { x, u, a0: gateP.A, a1: upP.A }, grid1d(2 * gateP.r, 1), uniforms);
    rec.dispatch(f.swiglu, { u_in: u, b0: gateP.B, b1: upP.B, y0: gate, y1: up, act }, grid1d(rows * gateP.out, WG), uniforms);
  }

  private check(ps: readonly LoraParams[], x: Tensor, u: Tensor): number {
    const op = 'lora_gemv';
    const names = ps.map((p) => p.name).join(', ');
    if (!LoraGemv.groupable(ps)) throw new ShapeError(op, `${names}: one to three adapters with one input width and rank`);
    const rows = x.shape[0];
    if (!LoraGemv.fits(rows)) throw new ShapeError(op, `${names}: ${rows} rows outside [1, ${LORA_GEMV_MAX_ROWS}]`);
    const { in: k, r } = ps[0];
    if (x.dtype !== 'f32' || x.numel !== rows * k) throw new ShapeError(op, `${names}: x must be f32 [rows, ${k}], got ${x.dtype} [${x.shape.join(', ')}]`);
    const need = rows * ps.length * r;
    if (u.dtype !== 'f32' || u.numel < need) throw new ShapeError(op, `${names}: u must be f32 with ${need} elements, got ${u.dtype} [${u.shape.join(', ')}]`);
    return rows;
  }

  private checkOut(p: LoraParams, y: Tensor, rows: number, what: string): void {
    if (y.dtype !== 'f32' || y.numel !== rows * p.out) throw new ShapeError('lora_gemv', `${p.name}: ${what} must be f32 [${rows}, ${p.out}], got ${y.dtype} [${y.shape.join(', ')}]`);
  }

  private uniforms(ps: readonly LoraParams[], rows: number): Record<string, number> {
    const u: Record<string, number> = { rows, k: ps[0].in, r: ps[0].r, n0: 0, n1: 0, n2: 0, s0: 0, s1: 0, s2: 0 };
    ps.forEach((p, g) => {
      u[`n${g}`] = p.out;
      u[`s${g}`] = loraScale(p);
    });
    return u;
  }
}
