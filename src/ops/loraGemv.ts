// LoRA's forward update for a few rows (shaders/lora_gemv.wgsl): y += s·x·Aᵀ·Bᵀ through
// u = x·Aᵀ, as two wide GEMV-shaped dispatches (down, then up), for one adapter or for two or
// three that share their input (q/k/v, gate/up: one pair of dispatches for the group). The down
// dispatch can apply the input's RMSNorm itself (writing the normed rows for the base
// projections), the gate/up up dispatch the SwiGLU and the start of down_proj's down product
// (upSwiglu's fold; upFromParts finishes it). For decode, where src/ops/lora.ts's two tiled
// GEMMs run one workgroup each; training (many rows, dropout) stays with those.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';
import { loraScale, type LoraParams } from './loraParams';
import { checkWrittenInt8Groups, DOT4_I8, Q4_GROUP } from './matmulQ4';

/** Most rows the GEMV path takes (MAX_ROWS in the shader). */
export const LORA_GEMV_MAX_ROWS = 8;
const UP_WG = 64;
const UNIFORMS = { rows: 'u32', k: 'u32', r: 'u32', n0: 'u32', n1: 'u32', n2: 'u32', s0: 'f32', s1: 'f32', s2: 'f32', eps: 'f32', np: 'u32' } as const;

/** An RMSNorm the down dispatch applies to its input first: out = rms(x)·weight. */
export interface LoraInputNorm {
  weight: Tensor;
  eps: number;
  /** [rows, in]: receives the normed rows. */
  out: Tensor;
  /** Receives the normed rows (2 to 8) also as int8 groups, the form MatmulQ4.gemv's `xq` takes
   * (u32, int8GroupWords; in a multiple of 32 and of 4, r of 4): the GEMV after needs no
   * quantize dispatch. Where WGSL lacks packed 4x8 integer dot products, LoraGemv.quantizes is false. */
  quantized?: Tensor;
  /** [rows, in]: an update owed to x (the residual rows h), normed with it: the rows are x + add,
   * and x is left as it is (LoraGemv.takesAdd). */
  add?: Tensor;
}

type Variant = '' | 'norm' | 'norm_quant' | 'norm_add' | 'norm_quant_add' | 'swiglu' | 'swiglu_fold' | 'swiglu_fold_quant' | 'parts';

/** The kernels for one element width: scalar, or vec4 (in and r multiples of 4); by adapter count - 1. */
interface Family {
  down: readonly Kernel[];
  /** down with the input's RMSNorm first. */
  downNorm: readonly Kernel[];
  /** downNorm that also writes the normed rows as int8 groups (vec4 only, with packed dot products). */
  downNormQuant: readonly Kernel[] | null;
  /** downNorm and downNormQuant on x + an owed update (ADD); null where the storage buffers a
   * stage cannot hold it. */
  downNormAdd: readonly Kernel[] | null;
  downNormQuantAdd: readonly Kernel[] | null;
  up: readonly Kernel[];
  swiglu: Kernel;
  /** swiglu that also leaves the down_proj adapter's partial u (FOLD). */
  swigluFold: Kernel;
  /** up of one adapter from those partials (PARTS). */
  upParts: Kernel;
  /** swigluFold that also writes act as int8 groups (with packed dot products). */
  swigluFoldQuant: Kernel | null;
}

/** The down_proj adapter whose down product the SwiGLU dispatch starts, and where its partials go. */
export interface LoraFold {
  p: LoraParams;
  /** [rows, in / 64, r] at least (LoraGemv.foldParts a row). */
  parts: Tensor;
  /** Receives act (2 to 8 rows) also as int8 groups, the form MatmulQ4.gemv's `xq` takes for
   * down_proj's GEMV (u32, int8GroupWords; where LoraGemv.foldQuantizes). */
  quantized?: Tensor;
}

export class LoraGemv {
  private constructor(
    private readonly scalar: Family,
    private readonly vec4: Family,
  ) {}

  static async create(gpu: Gpu): Promise<LoraGemv> {
    const family = (vec4: boolean): Family => {
      const spec = (entry: string, adapters: number, variant: Variant = '') => ({
        name: `lora_gemv.${entry}${adapters > 1 ? `_x${adapters}` : ''}${variant ? `_${variant}` : ''}${vec4 ? '_vec4' : ''}`,
        shader: 'lora_gemv',
        entry,
        defines: {
          ADAPTERS: adapters,
          SECOND: adapters >= 2,
          THIRD: adapters >= 3,
          NORM: variant.startsWith('norm'),
          QUANT: variant === 'norm_quant' || variant === 'norm_quant_add' || variant === 'swiglu_fold_quant',
          ADD: variant.endsWith('_add'),
          SWIGLU: variant === 'swiglu' || variant === 'swiglu_fold' || variant === 'swiglu_fold_quant',
          FOLD: variant === 'swiglu_fold' || variant === 'swiglu_fold_quant',
          PARTS: variant === 'parts',
          VEC4: vec4,
          W: vec4 ? 4 : 1,
          ELEM: vec4 ? 'vec4f' : 'f32',
        },
        uniforms: UNIFORMS,
      });
      const all = (entry: string, variant: Variant = '') => [1, 2, 3].map((n) => gpu.kernelOnUse(spec(entry, n, variant)));
      const dot4 = gpu.hasWgsl(DOT4_I8);
      // x, A x3, u, the norm's weight, xn (and xq), and the owed update.
      const buffers = gpu.limits.maxStorageBuffersPerShaderStage;
      return {
        down: all('lora_down'),
        downNorm: all('lora_down', 'norm'),
        downNormQuant: vec4 && dot4 ? all('lora_down', 'norm_quant') : null,
        downNormAdd: buffers >= 8 ? all('lora_down', 'norm_add') : null,
        downNormQuantAdd: vec4 && dot4 && buffers >= 9 ? all('lora_down', 'norm_quant_add') : null,
        up: all('lora_up'),
        swiglu: gpu.kernelOnUse(spec('lora_up', 2, 'swiglu')),
        swigluFold: gpu.kernelOnUse(spec('lora_up', 2, 'swiglu_fold')),
        upParts: gpu.kernelOnUse(spec('lora_up', 1, 'parts')),
        // u, B x2, gate, up, act, A_fold, parts and xq: 9 storage buffers (WebGPU's default is 8).
        swigluFoldQuant: dot4 && gpu.limits.maxStorageBuffersPerShaderStage >= 9 ? gpu.kernelOnUse(spec('lora_up', 2, 'swiglu_fold_quant')) : null,
      };
    };
    const [scalar, vec4] = [family(false), family(true)];
    return new LoraGemv(scalar, vec4);
  }

  private family(p: LoraParams): Family {
    return p.in % 4 === 0 && p.r % 4 === 0 ? this.vec4 : this.scalar;
  }

  /** Whether down's norm can also leave the normed rows as int8 groups (LoraInputNorm.quantized)
   * for adapters `ps` (in a multiple of 32, the vec4 kernels, packed dot products in WGSL). */
  quantizes(ps: readonly LoraParams[]): boolean {
    return ps[0].in % Q4_GROUP === 0 && this.family(ps[0]).downNormQuant !== null;
  }

  /** Whether down's norm can take an update owed to its rows (LoraInputNorm.add), writing them as
   * int8 groups too (`quantized`) or not. */
  takesAdd(ps: readonly LoraParams[], quantized: boolean): boolean {
    const f = this.family(ps[0]);
    return (quantized ? f.downNormQuantAdd : f.downNormAdd) !== null;
  }

  /** Whether upSwiglu's fold can also leave act as int8 groups (LoraFold.quantized): packed dot
   * products in WGSL, and 9 storage buffers a stage. */
  foldQuantizes(gateP: LoraParams): boolean {
    return this.family(gateP).swigluFoldQuant !== null;
  }


  /** Whether `rows` rows take this path. */
  static fits(rows: number): boolean {
    return rows >= 1 && rows <= LORA_GEMV_MAX_ROWS;
  }

  /** Whether adapters can share one call: one to three, with one input width and one rank. */
  static groupable(ps: readonly LoraParams[]): boolean {
    return ps.length >= 1 && ps.length <= 3 && ps.every((p) => p.in === ps[0].in && p.r === ps[0].r);
  }

  /**
   * Whether the SwiGLU dispatch of gate/up can start down_proj's down product (upSwiglu's fold):
   * down reads act (in = gate's out), one rank for all three, and whole 64-column workgroups.
   */
  static canFold(gateP: LoraParams, downP: LoraParams): boolean {
    return downP.in === gateP.out && downP.r === gateP.r && downP.in % UP_WG === 0 && LoraGemv.takesParts(downP);
  }

  /** Partials per row a SwiGLU fold leaves for down_proj (one per 64 columns of act). */
  static foldParts(downP: LoraParams): number {
    return downP.in / UP_WG;
  }

  /** Whether upFromParts takes adapter p: whole 64-column workgroups of y, r dividing 64. */
  static takesParts(p: LoraParams): boolean {
    return p.out % UP_WG === 0 && UP_WG % p.r === 0;
  }

  /**
   * y [rows, out] += s·u·Bᵀ with u [rows, r] the sum of `perRow` partials a row, [rows, perRow, r]
   * (left by upSwiglu's fold, or by the attention combine's for o_proj): one dispatch.
   */
  upFromParts(rec: Recorder, p: LoraParams, parts: Tensor, perRow: number, y: Tensor): void {
    const rows = y.shape[0];
    if (!LoraGemv.fits(rows)) throw new ShapeError('lora_gemv', `${p.name}: ${rows} rows outside [1, ${LORA_GEMV_MAX_ROWS}]`);
    if (!LoraGemv.takesParts(p)) throw new ShapeError('lora_gemv', `${p.name}: out must be a multiple of ${UP_WG} and r divide it`);
    if (!Number.isInteger(perRow) || perRow < 1) throw new ShapeError('lora_gemv', `${p.name}: ${perRow} partials a row`);
    this.checkParts(p, parts, rows * perRow * p.r);
    this.checkOut(y, rows * p.out, `${p.name} y`);
    rec.dispatch(this.family(p).upParts, { parts, b0: p.B, y0: y }, grid1d(rows * p.out, UP_WG), this.uniforms([p], rows, 0, perRow));
  }

  /**
   * y [rows, out] += s·x·Aᵀ·Bᵀ for x [rows, in] through u [rows, r] (or larger): down + up. (One
   * dispatch whose workgroups each recompute u was slower: r·in products from L2 a workgroup.)
   */
  forward(rec: Recorder, p: LoraParams, x: Tensor, y: Tensor, u: Tensor): void {
    this.down(rec, [p], x, u);
    this.up(rec, [p], u, [y]);
  }

  /**
   * u [rows, G·r] = x·[A_0; ...]ᵀ for the adapters `ps` (1 to 3, groupable) on the same x
   * [rows, in] (u may be larger). With `norm`, x is normed first: u = rms(x)·Aᵀ, and norm.out
   * receives rms(x)·weight.
   */
  down(rec: Recorder, ps: readonly LoraParams[], x: Tensor, u: Tensor, norm?: LoraInputNorm): void {
    const rows = this.check(ps, x, u);
    const f = this.family(ps[0]);
    // Fixed keys, no computed names: this runs ~60 times a decode step, which is CPU-bound at one row.
    const bind: Record<string, Tensor> = { x, u, a0: ps[0].A };
    if (ps.length > 1) bind.a1 = ps[1].A;
    if (ps.length > 2) bind.a2 = ps[2].A;
    let kernel = f.down[ps.length - 1];
    if (norm) {
      if (norm.weight.dtype !== 'f32' || norm.weight.numel !== ps[0].in) throw new ShapeError('lora_gemv', `norm weight must be f32 [${ps[0].in}], got ${norm.weight.dtype} [${norm.weight.shape.join(', ')}]`);
      this.checkOut(norm.out, rows * ps[0].in, 'norm.out');
      bind.norm_w = norm.weight;
      bind.xn = norm.out;
      kernel = f.downNorm[ps.length - 1];
      if (norm.quantized) {
        if (!this.quantizes(ps)) throw new ShapeError('lora_gemv', `${ps[0].name}: cannot quantize the normed rows here (in ${ps[0].in}, r ${ps[0].r}, or no packed dot products)`);
        checkWrittenInt8Groups('lora_gemv', 'norm.quantized', norm.quantized, rows, ps[0].in);
        bind.xq = norm.quantized;
        kernel = f.downNormQuant![ps.length - 1];
      }
      if (norm.add) {
        if (!this.takesAdd(ps, norm.quantized !== undefined)) throw new ShapeError('lora_gemv', `${ps[0].name}: this device's storage buffers a stage cannot hold the owed update beside the norm (takesAdd)`);
        this.checkOut(norm.add, rows * ps[0].in, 'norm.add');
        bind.x_add = norm.add;
        kernel = (norm.quantized ? f.downNormQuantAdd : f.downNormAdd)![ps.length - 1];
      }
    }
    rec.dispatch(kernel, bind, [ps.length * ps[0].r, rows], this.uniforms(ps, rows, norm?.eps ?? 0));
  }

  /** y_g [rows, out_g] += s_g·u_g·B_gᵀ with u from `down` on the same adapters. */
  up(rec: Recorder, ps: readonly LoraParams[], u: Tensor, ys: readonly Tensor[]): void {
    const rows = ys[0]?.shape[0] ?? 0;
    this.checkU(ps, u, rows);
    if (ys.length !== ps.length) throw new ShapeError('lora_gemv', `${ps.length} adapters, ${ys.length} outputs`);
    ps.forEach((p, g) => this.checkOut(ys[g], rows * p.out, `${p.name} y`));
    const bind: Record<string, Tensor> = { u_in: u, b0: ps[0].B, y0: ys[0] };
    if (ps.length > 1) {
      bind.b1 = ps[1].B;
      bind.y1 = ys[1];
    }
    if (ps.length > 2) {
      bind.b2 = ps[2].B;
      bind.y2 = ys[2];
    }
    const cols = ps.reduce((n, p) => n + p.out, 0);
    rec.dispatch(this.family(ps[0]).up[ps.length - 1], bind, grid1d(rows * cols, UP_WG), this.uniforms(ps, rows, 0));
  }

  /**
   * act [rows, I] = silu(gate + s_g·u_g·B_gᵀ)·(up + s_u·u_u·B_uᵀ) with u from `down` on
   * [gateP, upP]: the gate/up updates and SwiGLU in one dispatch. gate and up [rows, I] hold the
   * base projections and are only read.
   */
  upSwiglu(rec: Recorder, gateP: LoraParams, upP: LoraParams, u: Tensor, gate: Tensor, up: Tensor, act: Tensor, fold?: LoraFold): void {
    const ps = [gateP, upP];
    const rows = gate.shape[0];
    this.checkU(ps, u, rows);
    if (gateP.out !== upP.out) throw new ShapeError('lora_gemv', `gate and up widths differ: ${gateP.out}, ${upP.out}`);
    for (const [t, what] of [[gate, 'gate'], [up, 'up'], [act, 'act']] as const) this.checkOut(t, rows * gateP.out, what);
    const f = this.family(gateP);
    const grid = grid1d(rows * gateP.out, UP_WG);
    if (!fold) {
      rec.dispatch(f.swiglu, { u_in: u, b0: gateP.B, b1: upP.B, y0: gate, y1: up, act }, grid, this.uniforms(ps, rows, 0));
      return;
    }
    if (!LoraGemv.canFold(gateP, fold.p)) throw new ShapeError('lora_gemv', `${fold.p.name} cannot fold into the SwiGLU of ${gateP.name}`);
    this.checkParts(fold.p, fold.parts, rows * LoraGemv.foldParts(fold.p) * fold.p.r);
    const bind: Record<string, Tensor> = { u_in: u, b0: gateP.B, b1: upP.B, y0: gate, y1: up, act, a_fold: fold.p.A, parts: fold.parts };
    let kernel = f.swigluFold;
    if (fold.quantized) {
      if (!this.foldQuantizes(gateP)) throw new ShapeError('lora_gemv', `${gateP.name}: cannot quantize act here (packed dot products and 9 storage buffers a stage needed)`);
      checkWrittenInt8Groups('lora_gemv', 'fold.quantized', fold.quantized, rows, gateP.out);
      bind.xq = fold.quantized;
      kernel = f.swigluFoldQuant!;
    }
    rec.dispatch(kernel, bind, grid, this.uniforms(ps, rows, 0));
  }

  private checkParts(p: LoraParams, parts: Tensor, need: number): void {
    if (parts.dtype !== 'f32' || parts.numel < need) throw new ShapeError('lora_gemv', `${p.name}: parts must be f32 with ${need} elements, got ${parts.dtype} [${parts.shape.join(', ')}]`);
  }

  private check(ps: readonly LoraParams[], x: Tensor, u: Tensor): number {
    const rows = x.shape[0];
    this.checkU(ps, u, rows);
    const k = ps[0].in;
    if (x.dtype !== 'f32' || x.numel !== rows * k) throw new ShapeError('lora_gemv', `${ps[0].name}: x must be f32 [rows, ${k}], got ${x.dtype} [${x.shape.join(', ')}]`);
    return rows;
  }

  /** The adapters form a group, rows fit, and u holds [rows, G·r]. */
  private checkU(ps: readonly LoraParams[], u: Tensor, rows: number): void {
    const op = 'lora_gemv';
    // Names are joined only for a message: this runs on every decode dispatch.
    const names = () => ps.map((p) => p.name).join(', ');
    if (!LoraGemv.groupable(ps)) throw new ShapeError(op, `${names()}: one to three adapters with one input width and rank`);
    if (!LoraGemv.fits(rows)) throw new ShapeError(op, `${names()}: ${rows} rows outside [1, ${LORA_GEMV_MAX_ROWS}]`);
    const need = rows * ps.length * ps[0].r;
    if (u.dtype !== 'f32' || u.numel < need) throw new ShapeError(op, `${names()}: u must be f32 with ${need} elements, got ${u.dtype} [${u.shape.join(', ')}]`);
  }

  private checkOut(t: Tensor, numel: number, what: string): void {
    if (t.dtype !== 'f32' || t.numel !== numel) throw new ShapeError('lora_gemv', `${what} must be f32 with ${numel} elements, got ${t.dtype} [${t.shape.join(', ')}]`);
  }

  /** The Params struct; `np`: partials a row (PARTS only). */
  private uniforms(ps: readonly LoraParams[], rows: number, eps: number, np = 0): Record<string, number> {
    const [p0, p1, p2] = ps;
    return {
      rows,
      k: p0.in,
      r: p0.r,
      n0: p0.out,
      n1: p1 ? p1.out : 0,
      n2: p2 ? p2.out : 0,
      s0: loraScale(p0),
      s1: p1 ? loraScale(p1) : 0,
      s2: p2 ? loraScale(p2) : 0,
      eps,
      np,
    };
  }
}
