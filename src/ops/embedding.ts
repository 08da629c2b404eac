// Embedding lookup from an f32 table and the row scatters that bring vision features into the
// decoder's hidden states: image embeddings replace the <|image_pad|> rows (masked_scatter), and
// the three DeepStack feature sets are added at those rows after decoder layers 0, 1 and 2.
// Visual positions are a u32 tensor of row indices into hidden [T, width], one per visual token in
// order (the CPU knows them from the token ids). The 4-bit table's gather lives with the 4-bit
// matmul kernels.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

const WG = 256;

export class Embedding {
  private constructor(
    private readonly gatherK: Kernel,
    private readonly scatterK: Kernel,
    private readonly addK: Kernel,
    private readonly sumK: Kernel,
  ) {}

  static async create(gpu: Gpu): Promise<Embedding> {
    const spec = (entry: string, defines: Record<string, boolean> = {}, name = `embedding.${entry}`) => ({
      name,
      shader: 'embedding',
      entry,
      defines,
      constants: { WG },
      uniforms: { n: 'u32', width: 'u32', rows: 'u32', row: 'u32' } as const,
    });
    return new Embedding(
      gpu.kernelOnUse(spec('embed_gather')),
      gpu.kernelOnUse(spec('scatter_rows')),
      gpu.kernelOnUse(spec('scatter_rows', { ACCUMULATE: true }, 'embedding.deepstack_add')),
      gpu.kernelOnUse(spec('sum_rows')),
    );
  }

  /** out[t] = table[ids[t]]: table [vocab, width] f32, ids [T] u32, out [T, width]. Ids ≥ vocab give zeros. */
  gather(rec: Recorder, table: Tensor, ids: Tensor, out: Tensor): void {
    const op = 'embed_gather';
    if (table.dtype !== 'f32' || table.shape.length !== 2) throw new ShapeError(op, `table must be f32 [vocab, width], got ${table.dtype} [${table.shape.join(', ')}]`);
    const [rows, width] = table.shape;
    checkIndices(op, 'ids', ids);
    checkRows(op, 'out', out, ids.numel, width);
    const n = ids.numel * width;
    rec.dispatch(this.gatherK, { table, ids, out }, grid1d(n, WG), { n, width, rows, row: 0 });
  }

  /** hidden[positions[j]] = src[j]: image embeddings [J, width] into their placeholder rows (positions ≥ T are skipped). */
  scatterRows(rec: Recorder, src: Tensor, positions: Tensor, hidden: Tensor): void {
    this.scatter('scatter_rows', this.scatterK, rec, src, positions, hidden);
  }

  /**
   * hidden[positions[j]] += features[j]: the DeepStack residual add. Backward: the hidden
   * gradient passes through unchanged, and none is needed for the frozen vision features.
   */
  deepstackAdd(rec: Recorder, features: Tensor, positions: Tensor, hidden: Tensor): void {
    this.scatter('deepstack_add', this.addK, rec, features, positions, hidden);
  }

  /**
   * dst[row] += Σ_j src[positions[j]], in order: the backward of a gather that read one row
   * several times (scatterRows needs distinct positions). src [N, width], dst [rows, width].
   */
  sumRows(rec: Recorder, src: Tensor, positions: Tensor, dst: Tensor, row: number): void {
    const op = 'sum_rows';
    if (dst.dtype !== 'f32' || dst.shape.length !== 2) throw new ShapeError(op, `dst must be f32 [rows, width], got ${dst.dtype} [${dst.shape.join(', ')}]`);
    const [rows, width] = dst.shape;
    checkIndices(op, 'positions', positions);
    if (src.dtype !== 'f32' || src.shape.length !== 2 || src.shape[1] !== width) {
      throw new ShapeError(op, `src must be f32 [N, ${width}], got ${src.dtype} [${src.shape.join(', ')}]`);
    }
    if (!Number.isInteger(row) || row < 0 || row >= rows) throw new ShapeError(op, `row ${row} outside dst's ${rows} rows`);
    rec.dispatch(this.sumK, { src, positions, dst }, grid1d(width, WG), { n: positions.numel, width, rows, row });
  }

  private scatter(op: string, kernel: Kernel, rec: Recorder, src: Tensor, positions: Tensor, dst: Tensor): void {
    if (dst.dtype !== 'f32' || dst.shape.length !== 2) throw new ShapeError(op, `hidden must be f32 [T, width], got ${dst.dtype} [${dst.shape.join(', ')}]`);
    const [rows, width] = dst.shape;
    checkIndices(op, 'positions', positions);
    checkRows(op, 'features', src, positions.numel, width);
    const n = positions.numel * width;
    rec.dispatch(kernel, { src, positions, dst }, grid1d(n, WG), { n, width, rows, row: 0 });
  }
}

function checkIndices(op: string, name: string, t: Tensor): void {
  if (t.dtype !== 'u32' || t.shape.length !== 1) throw new ShapeError(op, `${name} must be u32 [count], got ${t.dtype} [${t.shape.join(', ')}]`);
}

function checkRows(op: string, name: string, t: Tensor, rows: number, width: number): void {
  if (t.dtype !== 'f32' || t.shape.length !== 2 || t.shape[0] !== rows || t.shape[1] !== width) {
    throw new ShapeError(op, `${name} must be f32 [${rows}, ${width}], got ${t.dtype} [${t.shape.join(', ')}]`);
  }
}
