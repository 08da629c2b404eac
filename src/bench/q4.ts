// 4-bit weights for the benchmarks: random Q4 weights (valid codes and f16 scales, filled on the
// GPU), split in row blocks where one buffer would exceed the device's binding limit, and a 4-bit
// LM head for the log-prob kernel built on those blocks.
import { Tensor, type Gpu, type Recorder } from '../gpu';
import type { LmHead } from '../ops/logprob';
import { allocQ4, q4Words, type MatmulQ4, type Q4Weight } from '../ops/matmulQ4';
import type { Filler } from './fill';

/** Qwen3-VL-2B's decoder weights as a decode step's GEMVs take them: o_proj, joined q/k/v, joined
 * gate/up, down_proj ([N, K]). */
export const DECODER_GEMV_SHAPES: readonly [number, number][] = [
  [2048, 2048],
  [4096, 2048],
  [12288, 2048],
  [2048, 6144],
];

/** Bytes a Q4 weight [n, k] occupies (codes and scales). */
export function q4Bytes(n: number, k: number): number {
  const w = q4Words(n, k);
  return 4 * (w.codes + w.scales);
}

/**
 * A random Q4 weight [n, k] as row blocks, each a multiple of `rowMultiple` rows whose codes fit
 * one binding (pool buffers round sizes up by up to 1/8, hence the margin).
 */
export function randomQ4Blocks(gpu: Gpu, rec: Recorder, fill: Filler, n: number, k: number, label: string, rowMultiple = 64): Q4Weight[] {
  const limit = 0.85 * Math.min(gpu.limits.maxStorageBufferBindingSize, gpu.limits.maxBufferSize);
  const rowsPerBlock = Math.max(rowMultiple, Math.floor(limit / (k / 2) / rowMultiple) * rowMultiple);
  const blocks: Q4Weight[] = [];
  for (let r0 = 0; r0 < n; r0 += rowsPerBlock) {
    const w = allocQ4(gpu, Math.min(rowsPerBlock, n - r0), k, `${label}[${r0}]`);
    fill.fill(rec, w.codes, 'bits');
    fill.fill(rec, w.scales, 'f16pairs', 0.004);
    blocks.push(w);
  }
  return blocks;
}

export function releaseQ4(blocks: Q4Weight[]): void {
  for (const w of blocks) {
    w.codes.release();
    w.scales.release();
  }
}

/** The tied LM head stored 4-bit, evaluated by the 4-bit GEMM (logits) and its transpose (backward). */
export class Q4LmHead implements LmHead {
  private readonly blockStarts: number[] = [];

  constructor(
    private readonly mm: MatmulQ4,
    private readonly blocks: Q4Weight[],
    readonly vocab: number,
    readonly hidden: number,
  ) {
    let r0 = 0;
    for (const b of blocks) {
      this.blockStarts.push(r0);
      r0 += b.n;
    }
    if (r0 !== vocab) throw new Error(`Q4LmHead: blocks hold ${r0} rows, vocab is ${vocab}`);
  }

  /** Rows [v0, v1) as a Q4 weight viewing the block that holds them (offsets must meet binding alignment). */
  private rows(v0: number, v1: number): Q4Weight {
    const i = this.blockStarts.findLastIndex((s) => s <= v0);
    const b = this.blocks[i];
    const r0 = v0 - this.blockStarts[i];
    if (v1 - this.blockStarts[i] > b.n) throw new Error(`Q4LmHead: rows [${v0}, ${v1}) cross a block boundary; pick a chunk that divides the block`);
    const words = q4Words(v1 - v0, this.hidden);
    const codeOffset = (4 * r0 * this.hidden) / 8;
    const scaleOffset = (4 * r0 * this.hidden) / 64;
    if (codeOffset % 256 || scaleOffset % 256) throw new Error(`Q4LmHead: row ${v0} gives unaligned binding offsets`);
    return {
      codes: new Tensor(b.codes.buffer, [words.codes], 'u32', 'lm_head.codes', b.codes.byteOffset + codeOffset),
      scales: new Tensor(b.scales.buffer, [words.scales], 'u32', 'lm_head.scales', b.scales.byteOffset + scaleOffset),
      n: v1 - v0,
      k: this.hidden,
    };
  }

  logits(rec: Recorder, h: Tensor, v0: number, v1: number, out: Tensor): void {
    this.mm.forward(rec, h, this.rows(v0, v1), out);
  }

  backward(rec: Recorder, dlogits: Tensor, v0: number, v1: number, dh: Tensor): void {
    this.mm.backwardInput(rec, dlogits, this.rows(v0, v1), dh, true);
  }
}
