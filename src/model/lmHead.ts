// The LM head over a TokenTable (tied embedding or lm_head.weight, in row blocks): logits for a
// vocabulary range, as src/ops/logprob.ts's LmHead wants them, and full [T, vocab] logits for
// sampling and the `logits` command.
//
// A range [v0, v1) must lie inside one block (the loader aligns blocks to 8192 rows, the
// log-prob op's default chunk). A 4-bit sub-range is a view of the block's codes and scales, so
// its first row must put both on the device's storage-offset alignment (any multiple of 4096
// rows does for K ≥ 32); an f32 sub-range is a GEMM operand offset and has no such constraint.
import { ShapeError, Tensor, type Gpu, type Recorder } from '../gpu';
import type { LmHead } from '../ops/logprob';
import type { Q4Weight } from '../ops/matmulQ4';
import type { Projection } from '../ops/projection';
import type { LinearWeight, TokenTable } from './weights';

export class TableHead implements LmHead {
  readonly vocab: number;
  readonly hidden: number;
  /** [maxRows, largest block] f32: a 4-bit block's logits before they are copied into place. */
  private readonly scratch: Tensor | null;
  /** q4Rows' views by weight and range. */
  private readonly views = new Map<Q4Weight, Map<string, Q4Weight>>();

  constructor(
    private readonly gpu: Gpu,
    private readonly products: Projection,
    readonly table: TokenTable,
    /** Most rows `fullLogits` takes (only a multi-block 4-bit table needs room for them). */
    readonly maxRows: number,
  ) {
    this.vocab = table.vocab;
    this.hidden = table.hidden;
    const split4 = table.blocks.length > 1 && table.blocks[0].kind === 'q4';
    const widest = Math.max(...table.blocks.map((b) => b.out));
    this.scratch = split4 ? gpu.tensor([maxRows * widest], 'f32', 'lm_head.scratch') : null;
  }

  /** The block holding rows [v0, v1) and their offset in it. */
  private locate(op: string, v0: number, v1: number): { block: LinearWeight; r0: number } {
    if (!(Number.isInteger(v0) && Number.isInteger(v1) && v0 >= 0 && v0 < v1 && v1 <= this.vocab)) {
      throw new ShapeError(op, `vocabulary range [${v0}, ${v1}) outside [0, ${this.vocab})`);
    }
    const { blocks, rowStart } = this.table;
    let b = blocks.length - 1;
    while (rowStart[b] > v0) b--;
    const block = blocks[b];
    const r0 = v0 - rowStart[b];
    if (r0 + (v1 - v0) > block.out) {
      throw new ShapeError(op, `vocabulary range [${v0}, ${v1}) straddles token-table blocks (block ${b} holds [${rowStart[b]}, ${rowStart[b] + block.out}))`);
    }
    return { block, r0 };
  }

  /** Rows [r0, r0 + n) of a 4-bit weight as a weight of its own (views, no copy), made once per
   * range: the tensor-core input gradient keeps per-weight state keyed by the view. */
  private q4Rows(op: string, w: Q4Weight, r0: number, n: number): Q4Weight {
    if (r0 === 0 && n === w.n) return w;
    let byRange = this.views.get(w);
    if (!byRange) this.views.set(w, (byRange = new Map()));
    const key = `${r0}:${n}`;
    let v = byRange.get(key);
    if (!v) byRange.set(key, (v = this.q4View(op, w, r0, n)));
    return v;
  }

  private q4View(op: string, w: Q4Weight, r0: number, n: number): Q4Weight {
    const align = this.gpu.limits.minStorageBufferOffsetAlignment;
    const codeBytes = (r0 * w.k) / 2;
    const scaleBytes = (r0 * w.k) / 16;
    if (codeBytes % align || scaleBytes % align || (r0 * w.k) % 64) {
      throw new ShapeError(op, `4-bit rows from ${r0} do not start on the ${align}-byte storage alignment`);
    }
    return {
      codes: new Tensor(w.codes.buffer, [(n * w.k) / 8], 'u32', w.codes.label, w.codes.byteOffset + codeBytes),
      scales: new Tensor(w.scales.buffer, [Math.ceil((n * w.k) / 64)], 'u32', w.scales.label, w.scales.byteOffset + scaleBytes),
      n,
      k: w.k,
    };
  }

  logits(rec: Recorder, h: Tensor, v0: number, v1: number, out: Tensor): void {
    const op = 'lm_head.logits';
    const { block, r0 } = this.locate(op, v0, v1);
    const n = v1 - v0;
    if (block.kind === 'q4') {
      this.products.forwardQ4(rec, h, this.q4Rows(op, block.w, r0, n), out);
      return;
    }
    const T = h.shape[0];
    this.products.matmul.gemm(rec, { a: h, b: block.w, c: out, m: T, n, k: this.hidden, transB: true, offsetB: r0 * this.hidden });
  }

  backward(rec: Recorder, dlogits: Tensor, v0: number, v1: number, dh: Tensor): void {
    const op = 'lm_head.backward';
    const { block, r0 } = this.locate(op, v0, v1);
    const n = v1 - v0;
    if (block.kind === 'q4') {
      this.products.backwardInputQ4(rec, dlogits, this.q4Rows(op, block.w, r0, n), dh, true);
      return;
    }
    const T = dh.shape[0];
    this.products.matmul.gemm(rec, { a: dlogits, b: block.w, c: dh, m: T, n: this.hidden, k: n, offsetB: r0 * this.hidden, beta: 1 });
  }

  /** out [T, vocab] = h [T, hidden] · tableᵀ (`int8`: as Projection.forward's, for sampling). */
  fullLogits(rec: Recorder, h: Tensor, out: Tensor, int8 = false): void {
    const op = 'lm_head.fullLogits';
    const T = h.shape[0];
    if (out.dtype !== 'f32' || out.shape.length !== 2 || out.shape[0] !== T || out.shape[1] !== this.vocab) {
      throw new ShapeError(op, `out must be f32 [${T}, ${this.vocab}], got ${out.dtype} [${out.shape.join(', ')}]`);
    }
    const { blocks, rowStart } = this.table;
    if (blocks.length === 1) {
      this.products.forward(rec, h, blocks[0], out, false, int8);
      return;
    }
    blocks.forEach((block, b) => {
      if (block.kind === 'dense') {
        // The GEMM writes the block's columns straight into the strided output.
        this.products.matmul.gemm(rec, { a: h, b: block.w, c: out, m: T, n: block.out, k: this.hidden, transB: true, ldc: this.vocab, offsetC: rowStart[b] });
        return;
      }
      if (T > this.maxRows) throw new ShapeError(op, `${T} rows exceed the ${this.maxRows} this head was sized for`);
      const part = new Tensor(this.scratch!.buffer, [T, block.out], 'f32', 'lm_head.scratch', this.scratch!.byteOffset);
      this.products.forwardQ4(rec, h, block.w, part, false, int8);
      for (let t = 0; t < T; t++) rec.copy(part, out, block.out * 4, t * block.out * 4, (t * this.vocab + rowStart[b]) * 4);
    });
  }

  release(): void {
    this.scratch?.release();
    this.views.clear();
  }
}
