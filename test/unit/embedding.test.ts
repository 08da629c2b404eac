import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, randNormal } from '../helpers/reference';
import { Embedding } from '../../src/ops/embedding';
import { ShapeError } from '../../src/gpu';

describe('embedding', () => {
  it('gathers rows of an f32 table for token ids (odd widths, one token); ids past the vocab give zeros', async () => {
    const gpu = await testGpu();
    const emb = await Embedding.create(gpu);
    const vocab = 50;
    for (const width of [1, 3, 65, 130]) {
      for (const ids of [[7], [0, 49, 3, 3, 50, 1 << 30, 12]]) {
        const table = randNormal(vocab * width, width);
        const tt = gpu.upload(table, [vocab, width], 'f32', 'table');
        const ti = gpu.upload(Uint32Array.from(ids), [ids.length], 'u32', 'ids');
        const to = gpu.tensor([ids.length, width], 'f32', 'out');
        const rec = gpu.recorder();
        emb.gather(rec, tt, ti, to);
        await rec.submit();
        const want = ids.flatMap((id) => (id < vocab ? Array.from(table.subarray(id * width, (id + 1) * width)) : new Array<number>(width).fill(0)));
        expectClose(await gpu.readF32(to), want, { rtol: 0, atol: 0, what: `gather width ${width}, ${ids.length} ids` });
        [tt, ti, to].forEach((t) => t.release());
      }
    }
  });

  it('places image embeddings at the <|image_pad|> rows, then adds DeepStack features there only', async () => {
    const gpu = await testGpu();
    const emb = await Embedding.create(gpu);
    // The spec's B4 prompt: 17 tokens, <|image_pad|>×6 at rows 4..9.
    const T = 17;
    const positions = [4, 5, 6, 7, 8, 9];
    for (const width of [1, 3, 65, 130]) {
      const hidden = randNormal(T * width, width + 1);
      const image = randNormal(positions.length * width, width + 2);
      const deep = [0, 1, 2].map((k) => randNormal(positions.length * width, width + 3 + k));
      const th = gpu.upload(hidden, [T, width], 'f32', 'hidden');
      const tp = gpu.upload(Uint32Array.from(positions), [positions.length], 'u32', 'visual positions');
      const ti = gpu.upload(image, [positions.length, width], 'f32', 'image embeds');
      const td = deep.map((d, k) => gpu.upload(d, [positions.length, width], 'f32', `deepstack ${k}`));
      const rec = gpu.recorder();
      emb.scatterRows(rec, ti, tp, th);
      for (const t of td) emb.deepstackAdd(rec, t, tp, th); // in the model, one per decoder layer 0..2
      await rec.submit();
      const want = Float64Array.from(hidden);
      positions.forEach((row, j) => {
        for (let c = 0; c < width; c++) want[row * width + c] = image[j * width + c] + deep[0][j * width + c] + deep[1][j * width + c] + deep[2][j * width + c];
      });
      expectClose(await gpu.readF32(th), want, { rtol: 1e-6, atol: 1e-6, what: `visual rows width ${width}` });
      [th, tp, ti, ...td].forEach((t) => t.release());
    }
  });

  it('sums rows a gather read several times back into one row, adding to what it holds (the shared prompt row)', async () => {
    const gpu = await testGpu();
    const emb = await Embedding.create(gpu);
    for (const width of [1, 3, 300]) {
      const src = randNormal(7 * width, width + 9);
      const dst = randNormal(4 * width, width + 10);
      const sources = [0, 3, 3, 6];
      const ts = gpu.upload(src, [7, width], 'f32', 'src');
      const tp = gpu.upload(Uint32Array.from(sources), [sources.length], 'u32', 'sources');
      const td = gpu.upload(dst, [4, width], 'f32', 'dst');
      const rec = gpu.recorder();
      emb.sumRows(rec, ts, tp, td, 2);
      await rec.submit();
      const want = Float64Array.from(dst);
      for (const j of sources) for (let c = 0; c < width; c++) want[2 * width + c] += src[j * width + c];
      expectClose(await gpu.readF32(td), want, { rtol: 1e-6, atol: 1e-6, what: `sum_rows width ${width}` });
      expect(() => emb.sumRows(rec, ts, tp, td, 4)).toThrow(/sum_rows: row 4/);
      expect(() => emb.sumRows(rec, gpu.tensor([7, width + 1], 'f32', 'wide'), tp, td, 0)).toThrow(ShapeError);
      [ts, tp, td].forEach((t) => t.release());
    }
  });

  it('rejects mismatched shapes and dtypes with ShapeError naming the op', async () => {
    const gpu = await testGpu();
    const emb = await Embedding.create(gpu);
    const rec = gpu.recorder();
    const table = gpu.tensor([10, 8], 'f32', 'table');
    const ids = gpu.tensor([3], 'u32', 'ids');
    expect(() => emb.gather(rec, table, gpu.tensor([3], 'i32', 'ids32'), gpu.tensor([3, 8], 'f32', 'o'))).toThrow(/embed_gather: ids must be u32/);
    expect(() => emb.gather(rec, table, ids, gpu.tensor([3, 7], 'f32', 'o7'))).toThrow(ShapeError);
    const hidden = gpu.tensor([5, 8], 'f32', 'hidden');
    expect(() => emb.deepstackAdd(rec, gpu.tensor([2, 8], 'f32', 'f'), ids, hidden)).toThrow(/deepstack_add: features must be f32 \[3, 8\]/);
    expect(() => emb.scatterRows(rec, gpu.tensor([3, 8], 'f32', 'f'), ids, gpu.tensor([40], 'f32', 'flat'))).toThrow(/scatter_rows/);
  });
});
