// The vision tower against transformers (test/fixtures/tiny/{tiny-a,tiny-b}/ref/image{1,2}:
// image_embeds and deepstack_j from Qwen3VLVisionModel in f32 on the bf16 checkpoint), the
// position-embedding interpolation against an f64 bilinear reference, frames, the per-image cache,
// and bad inputs.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShapeError, type Gpu, type Tensor } from '../../src/gpu';
import { parseQwen3VLConfig, type Qwen3VLConfig } from '../../src/model/config';
import { isSafetensorsDtype, toFloat32, toInt32, type SafetensorsDtype } from '../../src/model/dtype';
import { nodeDirFiles, openCheckpoint, type Checkpoint } from '../../src/model/safetensors';
import { loadVisionWeights, releaseVisionWeights, VisionCache, VisionTower, type GridThw } from '../../src/model/vision';
import { PosEmbedAdd, posEmbedInterpolation } from '../../src/model/visionPosEmbed';
import { WeightShapeError } from '../../src/model/weightShapes';
import type { DenseWeight, PatchMergerWeights, VisionWeights } from '../../src/model/weights';
import { Halves } from '../../src/ops/halves';
import type { PreparedImage } from '../../src/rl/policy';
import { testGpu } from '../helpers/gpu';
import { expectClose, randNormal } from '../helpers/reference';

const TOL = 1e-3;
const modelDir = (name: string) => fileURLToPath(new URL(`../fixtures/tiny/${name}/`, import.meta.url));

interface Ref {
  pixels: Float32Array;
  grids: GridThw[];
  embeds: Float32Array;
  deepstack: Float32Array[];
}

/**
 * The reference file's tensors. Read here rather than with src/model/safetensors.ts, which (rightly,
 * for checkpoints) refuses the U8 source images these files also carry.
 */
function readRefTensors(path: string): Map<string, { dtype: SafetensorsDtype; shape: number[]; bytes: Uint8Array }> {
  const file = readFileSync(path);
  const n = Number(file.readBigUInt64LE(0));
  const header = JSON.parse(file.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const out = new Map<string, { dtype: SafetensorsDtype; shape: number[]; bytes: Uint8Array }>();
  for (const [name, e] of Object.entries(header)) {
    if (name === '__metadata__' || !isSafetensorsDtype(e.dtype)) continue;
    out.set(name, { dtype: e.dtype, shape: e.shape, bytes: new Uint8Array(file.subarray(8 + n + e.data_offsets[0], 8 + n + e.data_offsets[1])) });
  }
  return out;
}

function readRef(model: string, file: string): Ref {
  const t = readRefTensors(`${modelDir(model)}ref/${file}.safetensors`);
  const get = (name: string) => {
    const e = t.get(name);
    if (!e) throw new Error(`${file}: no tensor ${name}`);
    return e;
  };
  const g = get('image_grid_thw');
  const gi = toInt32(g.bytes, g.dtype);
  const grids = Array.from({ length: g.shape[0] }, (_, i) => [gi[3 * i], gi[3 * i + 1], gi[3 * i + 2]] as const);
  const f32 = (name: string) => toFloat32(get(name).bytes, get(name).dtype);
  const deepstack: Float32Array[] = [];
  for (let j = 0; t.has(`deepstack_${j}`); j++) deepstack.push(f32(`deepstack_${j}`));
  return { pixels: f32('pixel_values'), grids, embeds: f32('image_embeds'), deepstack };
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

const patchesOf = (g: GridThw) => g[0] * g[1] * g[2];

let gpu: Gpu;
beforeAll(async () => {
  gpu = await testGpu();
});

describe('position embedding interpolation', () => {
  let pos: PosEmbedAdd;
  beforeAll(async () => {
    pos = await PosEmbedAdd.create(gpu);
  });

  // f64 bilinear resampling of a side x side table to h x w (align-corners, as torch.linspace
  // places the samples), row-major, then transformers' view(t, h/2, 2, w/2, 2).permute(0, 1, 3, 2, 4).
  function reference(table: Float32Array, side: number, width: number, grids: GridThw[]): Float64Array {
    const rows: Float64Array[] = [];
    for (const [t, h, w] of grids) {
      const grid: Float64Array[] = [];
      for (let r = 0; r < h; r++) {
        for (let c = 0; c < w; c++) {
          const y = h === 1 ? 0 : (r * (side - 1)) / (h - 1);
          const x = w === 1 ? 0 : (c * (side - 1)) / (w - 1);
          const out = new Float64Array(width);
          for (let yy = 0; yy < side; yy++) {
            for (let xx = 0; xx < side; xx++) {
              const wgt = Math.max(0, 1 - Math.abs(y - yy)) * Math.max(0, 1 - Math.abs(x - xx));
              if (wgt > 0) for (let k = 0; k < width; k++) out[k] += wgt * table[(yy * side + xx) * width + k];
            }
          }
          grid.push(out);
        }
      }
      for (let f = 0; f < t; f++) {
        for (let br = 0; br < h / 2; br++) for (let bc = 0; bc < w / 2; bc++) for (let ir = 0; ir < 2; ir++) for (let ic = 0; ic < 2; ic++) rows.push(grid[(2 * br + ir) * w + 2 * bc + ic]);
      }
    }
    const flat = new Float64Array(rows.length * width);
    rows.forEach((r, i) => flat.set(r, i * width));
    return flat;
  }

  it.each([
    { side: 8, width: 5, grids: [[1, 4, 6]] as GridThw[] },
    { side: 12, width: 3, grids: [[1, 2, 2], [2, 6, 4], [1, 16, 2]] as GridThw[] },
    { side: 5, width: 7, grids: [[1, 10, 8]] as GridThw[] },
  ])('matches an f64 bilinear reference: side $side, grids $grids', async ({ side, width, grids }) => {
    const n = grids.reduce((s, g) => s + patchesOf(g), 0);
    const tableData = randNormal(side * side * width, 11);
    const xData = randNormal(n * width, 12);
    const table = gpu.upload(tableData, [side * side, width], 'f32', 'table');
    const interp = gpu.upload(posEmbedInterpolation(grids, side, 2), [n, 8], 'u32', 'interp');
    const x = gpu.upload(xData, [n, width], 'f32', 'x');
    const rec = gpu.recorder();
    pos.add(rec, table, interp, x);
    await rec.submit();
    const got = await gpu.readF32(x);
    const ref = reference(tableData, side, width, grids);
    const expected = Float64Array.from(ref, (v, i) => v + xData[i]);
    expectClose(got, expected, { rtol: 1e-6, atol: 1e-6, what: 'pos_embed_add' });
    for (const t of [table, interp, x]) t.release();
  });

  it('checks shapes', () => {
    const table = gpu.tensor([16, 4], 'f32', 'table');
    const x = gpu.tensor([3, 4], 'f32', 'x');
    const interp = gpu.tensor([4, 8], 'u32', 'interp');
    expect(() => pos.add(gpu.recorder(), table, interp, x)).toThrow(ShapeError);
    expect(() => pos.add(gpu.recorder(), table, interp, gpu.tensor([4, 5], 'f32', 'x5'))).toThrow(/x must be f32 \[N, 4\]/);
    for (const t of [table, x, interp]) t.release();
  });
});

describe.each(['tiny-a', 'tiny-b'])('vision tower %s', (model) => {
  let config: Qwen3VLConfig;
  let checkpoint: Checkpoint;
  let weights: VisionWeights;
  let tower: VisionTower;

  beforeAll(async () => {
    config = parseQwen3VLConfig(readFileSync(`${modelDir(model)}config.json`, 'utf8'));
    checkpoint = await openCheckpoint(nodeDirFiles(modelDir(model)));
    weights = await loadVisionWeights(gpu, checkpoint, config);
    tower = await VisionTower.create(gpu, config, weights);
  });
  afterAll(() => {
    tower?.release();
    if (weights) releaseVisionWeights(weights);
  });

  async function encodeAndRead(pixels: Float32Array, grids: GridThw[]) {
    const n = grids.reduce((s, g) => s + patchesOf(g), 0);
    const px = gpu.upload(pixels, [n, tower.patchWidth], 'f32', 'pixels');
    const rec = gpu.recorder();
    const out = tower.encode(rec, px, grids);
    await rec.submit();
    const embeds = await gpu.readF32(out.embeds);
    const deepstack = await Promise.all(out.deepstack.map((d) => gpu.readF32(d)));
    for (const t of [px, out.embeds, ...out.deepstack]) t.release();
    return { embeds, deepstack, shapes: [out.embeds.shape, ...out.deepstack.map((d) => d.shape)] };
  }

  it.each(['image1', 'image2'])('%s: image embeds and DeepStack features within 1e-3 of transformers', async (file) => {
    const ref = readRef(model, file);
    const got = await encodeAndRead(ref.pixels, ref.grids);
    const m = ref.grids.reduce((s, g) => s + patchesOf(g), 0) / 4;
    expect(got.shapes.every((s) => s[0] === m && s[1] === config.vision.outHiddenSize)).toBe(true);
    expect(got.deepstack.length).toBe(config.vision.deepstackVisualIndexes.length);
    expect(ref.deepstack.length).toBe(got.deepstack.length);
    const errs = [maxAbsDiff(got.embeds, ref.embeds), ...got.deepstack.map((d, j) => maxAbsDiff(d, ref.deepstack[j]))];
    console.log(`${model} ${file} grids ${JSON.stringify(ref.grids)}: max abs error embeds ${errs[0].toExponential(2)}, deepstack ${errs.slice(1).map((e) => e.toExponential(2)).join(' ')}`);
    for (const e of errs) expect(e).toBeLessThan(TOL);
    // The features are far from zero: the comparison is not vacuous.
    expect(Math.max(...ref.embeds.map(Math.abs))).toBeGreaterThan(0.1);
  });

  it("keeps the bf16 checkpoint's dense matrices as they are (half of f32's bytes; the position table, biases and norms f32), with the features of the same tower on their f32 values bit for bit", async () => {
    const dense = (w: VisionWeights) => [w.patchEmbed, ...w.blocks.flatMap((b) => [b.q, b.k, b.v, b.proj, b.fc1, b.fc2]), ...[w.merger, ...w.deepstackMergers].flatMap((m) => [m.fc1, m.fc2])];
    for (const d of dense(weights)) expect(d.kind === 'dense' ? d.w.dtype : 'q4').toBe('bf16');
    expect([weights.posEmbed, weights.blocks[0].norm1.w, weights.blocks[0].q.b!].map((t) => t.dtype)).toEqual(['f32', 'f32', 'f32']);
    // q is the first third of the fused attn.qkv rows, byte for byte.
    const qkv = [...checkpoint.tensors.values()].find((t) => /visual\.blocks\.0\.attn\.qkv\.weight$/.test(t.name))!;
    let raw: Uint8Array | null = null;
    for await (const { bytes } of checkpoint.stream({ names: new Set([qkv.name]) })) raw = bytes;
    const q = weights.blocks[0].q.w as Tensor;
    expect(await gpu.read(q)).toEqual(new Uint16Array(raw!.slice(0, q.byteSize).buffer));
    // The same tower on f32 copies of every matrix.
    const halves = new Halves(gpu);
    const rec = gpu.recorder();
    const wide = (d: DenseWeight): DenseWeight => (d.kind === 'dense' ? { ...d, w: halves.widen(rec, d.w) } : d);
    const mergerF32 = (m: PatchMergerWeights): PatchMergerWeights => ({ ...m, fc1: wide(m.fc1), fc2: wide(m.fc2) });
    const f32: VisionWeights = {
      ...weights,
      patchEmbed: wide(weights.patchEmbed),
      blocks: weights.blocks.map((b) => ({ ...b, q: wide(b.q), k: wide(b.k), v: wide(b.v), proj: wide(b.proj), fc1: wide(b.fc1), fc2: wide(b.fc2) })),
      merger: mergerF32(weights.merger),
      deepstackMergers: weights.deepstackMergers.map(mergerF32),
    };
    await rec.submit();
    const f32Tower = await VisionTower.create(gpu, config, f32);
    const ref = readRef(model, 'image2');
    const n = ref.grids.reduce((s, g) => s + patchesOf(g), 0);
    const outs = [];
    for (const t of [tower, f32Tower]) {
      const px = gpu.upload(ref.pixels, [n, t.patchWidth], 'f32', 'pixels');
      const r = gpu.recorder();
      const out = t.encode(r, px, ref.grids);
      await r.submit();
      outs.push(await Promise.all([out.embeds, ...out.deepstack].map((x) => gpu.readF32(x))));
      for (const x of [px, out.embeds, ...out.deepstack]) x.release();
    }
    expect(outs[0]).toEqual(outs[1]);
    f32Tower.release();
    for (const d of dense(f32)) if (d.kind === 'dense') d.w.release();
  });

  it('runs the MLP in row chunks (7 rows: a short last chunk) with the same result', async () => {
    const chunked = await VisionTower.create(gpu, config, weights, { mlpChunkRows: 7 });
    const ref = readRef(model, 'image2');
    const n = ref.grids.reduce((s, g) => s + patchesOf(g), 0);
    const px = gpu.upload(ref.pixels, [n, chunked.patchWidth], 'f32', 'pixels');
    const rec = gpu.recorder();
    const out = chunked.encode(rec, px, ref.grids);
    await rec.submit();
    expect(maxAbsDiff(await gpu.readF32(out.embeds), ref.embeds)).toBeLessThan(TOL);
    for (const [j, d] of out.deepstack.entries()) expect(maxAbsDiff(await gpu.readF32(d), ref.deepstack[j])).toBeLessThan(TOL);
    for (const t of [px, out.embeds, ...out.deepstack]) t.release();
    chunked.release();
  });

  it('4-bit weights (quant q4): every dense matrix 4-bit, features within 25% relative RMS of transformers (15-17% measured), MLP chunks of 64 rows the same', async () => {
    const q4 = await loadVisionWeights(gpu, checkpoint, config, { quant: 'q4' });
    const dense = [q4.patchEmbed, ...q4.blocks.flatMap((b) => [b.q, b.k, b.v, b.proj, b.fc1, b.fc2]), ...[q4.merger, ...q4.deepstackMergers].flatMap((m) => [m.fc1, m.fc2])];
    expect(dense.every((d) => d.kind === 'q4')).toBe(true);
    const whole = await VisionTower.create(gpu, config, q4);
    const chunked = await VisionTower.create(gpu, config, q4, { mlpChunkRows: 70 }); // rounded down to 64 rows
    const relRms = (a: Float32Array, b: Float32Array) => Math.sqrt(a.reduce((s, v, i) => s + (v - b[i]) ** 2, 0) / b.reduce((s, v) => s + v * v, 0));
    const encode = async (t: VisionTower, pixels: Float32Array, grids: GridThw[]) => {
      const n = grids.reduce((s, g) => s + patchesOf(g), 0);
      const px = gpu.upload(pixels, [n, t.patchWidth], 'f32', 'pixels');
      const rec = gpu.recorder();
      const out = t.encode(rec, px, grids);
      await rec.submit();
      const got = await Promise.all([out.embeds, ...out.deepstack].map((x) => gpu.readF32(x)));
      for (const x of [px, out.embeds, ...out.deepstack]) x.release();
      return got;
    };
    try {
      for (const file of ['image1', 'image2']) {
        const ref = readRef(model, file);
        const [embeds, ...deepstack] = await encode(whole, ref.pixels, ref.grids);
        const errs = [relRms(embeds, ref.embeds), ...ref.deepstack.map((d, j) => relRms(deepstack[j], d))];
        console.log(`${model} ${file} 4-bit: relative RMS error embeds ${errs[0].toFixed(4)}, deepstack ${errs.slice(1).map((e) => e.toFixed(4)).join(' ')}`);
        for (const e of errs) expect(e).toBeLessThan(0.25);
      }
      // 96 patches: one 64-row chunk and a short one, bound at row offsets.
      const grids: GridThw[] = [[1, 8, 12]];
      const pixels = randNormal(96 * whole.patchWidth, 11);
      const [a, b] = [await encode(whole, pixels, grids), await encode(chunked, pixels, grids)];
      a.forEach((x, j) => expect(maxAbsDiff(b[j], x)).toBeLessThan(1e-5));
    } finally {
      whole.release();
      chunked.release();
      releaseVisionWeights(q4);
    }
  });

  it('encodes each frame of a multi-frame grid on its own (attention per frame, positions repeated)', async () => {
    const ref = readRef(model, 'image1');
    const [, h, w] = ref.grids[0];
    const got = await encodeAndRead(Float32Array.from([...ref.pixels, ...ref.pixels]), [[2, h, w]]);
    const half = ref.embeds.length;
    expect(maxAbsDiff(got.embeds.subarray(0, half), ref.embeds)).toBeLessThan(TOL);
    expect(maxAbsDiff(got.embeds.subarray(half), ref.embeds)).toBeLessThan(TOL);
    got.deepstack.forEach((d, j) => expect(maxAbsDiff(d.subarray(half), ref.deepstack[j])).toBeLessThan(TOL));
  });

  it('encodes prompt images once through the cache, per image, and evicts the least recently used', async () => {
    const ref = readRef(model, 'image2');
    const width = tower.patchWidth;
    let row = 0;
    const images: PreparedImage[] = ref.grids.map((g, i) => {
      const n = patchesOf(g);
      const img = { pixelValues: ref.pixels.slice(row * width, (row + n) * width), gridThw: [...g] as [number, number, number], key: `img${i}` };
      row += n;
      return img;
    });
    const O = config.vision.outHiddenSize;
    const perImage = images.map((img) => ((patchesOf(img.gridThw) / 4) * O * 4 * (1 + config.vision.deepstackVisualIndexes.length)));
    const cache = new VisionCache(perImage[0] + perImage[1]);

    const rec = gpu.recorder();
    // The same image twice in one prompt is encoded once.
    const first = await tower.encodeImages(rec, [images[0], images[1], images[0]], cache);
    await rec.submit();
    expect(cache.size).toBe(2);
    expect(cache.bytes).toBe(perImage[0] + perImage[1]);
    expect(first[2]).toBe(first[0]);
    let embedRow = 0;
    for (const [i, f] of first.slice(0, 2).entries()) {
      const rows = patchesOf(images[i].gridThw) / 4;
      const refRows = (a: Float32Array) => a.subarray(embedRow * O, (embedRow + rows) * O);
      expect(maxAbsDiff(await gpu.readF32(f.embeds), refRows(ref.embeds))).toBeLessThan(TOL);
      for (const [j, d] of f.deepstack.entries()) expect(maxAbsDiff(await gpu.readF32(d), refRows(ref.deepstack[j]))).toBeLessThan(TOL);
      embedRow += rows;
    }

    // A hit returns the cached tensors and records nothing.
    const created = gpu.pool.stats.created;
    const again = await tower.encodeImages(rec, [images[1]], cache);
    expect(again[0]).toBe(first[1]);
    expect(gpu.pool.stats.created).toBe(created);

    // A third image overflows the budget: img0 (least recently used) goes, img1 and the new one stay.
    const third: PreparedImage = { ...images[0], key: 'img0-copy' };
    const out3 = await tower.encodeImages(rec, [third], cache);
    await rec.submit();
    expect(cache.has('img0')).toBe(false);
    expect(cache.has('img1')).toBe(true);
    expect(cache.has('img0-copy')).toBe(true);
    expect(maxAbsDiff(await gpu.readF32(out3[0].embeds), ref.embeds.subarray(0, (patchesOf(images[0].gridThw) / 4) * O))).toBeLessThan(TOL);

    // Entries of the current call survive even when they alone exceed the budget.
    const tiny = new VisionCache(1);
    const both = await tower.encodeImages(rec, images, tiny);
    await rec.submit();
    expect(tiny.size).toBe(2);
    expect(both.length).toBe(2);
    tiny.clear();
    expect(tiny.bytes).toBe(0);
    cache.clear();
  });

  it('refuses bad grids and pixel shapes', async () => {
    const px = gpu.tensor([24, tower.patchWidth], 'f32', 'pixels');
    expect(() => tower.encode(gpu.recorder(), px, [[1, 4, 5]])).toThrow(/multiples of 2/);
    expect(() => tower.encode(gpu.recorder(), px, [[1, 4, 4]])).toThrow(/pixel values must be f32 \[16, 1536\]/);
    expect(() => tower.encode(gpu.recorder(), px, [])).toThrow(ShapeError);
    const bad: PreparedImage = { pixelValues: new Float32Array(10), gridThw: [1, 4, 6], key: 'bad' };
    await expect(tower.encodeImages(gpu.recorder(), [bad], new VisionCache(1e6))).rejects.toThrow(/has 10 pixel values/);
    px.release();
  });

  it('the loader names a missing or misshapen vision tensor', async () => {
    const name = 'model.visual.blocks.0.attn.qkv.bias';
    expect(checkpoint.tensors.has(name)).toBe(true);
    const without = new Map(checkpoint.tensors);
    without.delete(name);
    await expect(loadVisionWeights(gpu, { ...checkpoint, tensors: without }, config)).rejects.toThrow(WeightShapeError);
    await expect(loadVisionWeights(gpu, { ...checkpoint, tensors: without }, config)).rejects.toThrow(name);
    const wrong = new Map(checkpoint.tensors);
    wrong.set(name, { ...checkpoint.tensors.get(name)!, shape: [7] });
    await expect(loadVisionWeights(gpu, { ...checkpoint, tensors: wrong }, config)).rejects.toThrow(/has shape \[7\]/);
  });
});
