// The tiny model on a GPU whose buffer limits are capped far below WebGPU's defaults
// (DeviceOptions.capLimits; WebGPU itself raises any smaller request to 128 MiB bindings): the
// token table is cut into blocks and the logits computed in row chunks that fit, the logits and
// greedy tokens stay those of transformers (and of the uncapped GPU), and a buffer that cannot be
// split is refused by a BufferAllocationError naming the buffer and the limit.
import { afterAll, describe, expect, it } from 'vitest';
import { BufferAllocationError, type Gpu } from '../../src/gpu';
import { Qwen3VL, splitImages } from '../../src/model/qwen3vl';
import { createNodeGpu } from '../../src/node/gpu';
import { testGpu } from '../helpers/gpu';
import { modelFiles, readQ4Logits, readReference, type FixtureCase } from '../helpers/modelFixtures';
import { expectClose } from '../helpers/reference';

const BINDING = 256 * 1024;
const gpus: Gpu[] = [];
async function capped(binding: number): Promise<Gpu> {
  // maxBufferSize stays above the engine's fixed 2 MiB uniform store, which no model size changes.
  const gpu = await createNodeGpu({ driver: process.env.VLRL_VK ?? 'lavapipe', capLimits: { maxStorageBufferBindingSize: binding, maxBufferSize: 4 << 20 } });
  gpus.push(gpu);
  return gpu;
}
afterAll(() => gpus.forEach((g) => g.destroy()));

const GREEDY = { temperature: 0, topP: 1, topK: 0, maxNewTokens: 16, seed: 1 };

async function run(net: Qwen3VL, c: FixtureCase) {
  const ref = await readReference('tiny-a', c);
  const images = ref.gridThw ? { pixelValues: ref.pixelValues!, gridThw: ref.gridThw } : undefined;
  const logits = await net.logits(ref.inputIds, images);
  const prompt = { id: c, inputIds: ref.inputIds, images: images ? splitImages(images, ref.gridThw!.map((_, k) => `${c}/${k}`)) : [] };
  const [out] = await net.generate(prompt, 1, GREEDY, { stopIds: [] });
  return { ref, logits, tokens: out.tokens };
}

describe(`tiny-a with storage bindings capped at ${BINDING / 1024} KiB`, () => {
  it('unquantized: the table in blocks, logits in chunks; logits and greedy tokens equal transformers', async () => {
    const gpu = await capped(BINDING);
    // An f32 table of 1024 x 64 (256 KiB) does not fit: blocks of 512 rows do.
    const net = await Qwen3VL.load(gpu, modelFiles('tiny-a'), { quant: 'none', maxTableRows: 512, maxLogitRows: 4 });
    expect(net.weights.language.embed.blocks.length).toBe(2);
    for (const c of ['text', 'image2'] as const) {
      const { ref, logits, tokens } = await run(net, c);
      // More rows than one chunk of full logits takes.
      expect(ref.inputIds.length).toBeGreaterThan(net.head.maxRows);
      expectClose(logits, ref.logits, { rtol: 0, atol: 1e-3, what: `capped ${c} logits` });
      expect(tokens).toEqual(Array.from(ref.greedy));
    }
  }, 600_000);

  it('4-bit, bindings of 200 KiB: logits equal the 4-bit reference, tokens equal the uncapped GPU', async () => {
    // Not a power of two: the patch embedding (192 KiB) fits, its pool size class (256 KiB) would not.
    const gpu = await capped(200 * 1024);
    const net = await Qwen3VL.load(gpu, modelFiles('tiny-a'), { maxTableRows: 256, maxLogitRows: 4 });
    const full = await Qwen3VL.load(await testGpu(), modelFiles('tiny-a'));
    expect(net.weights.language.embed.blocks.length).toBe(4);
    for (const c of ['text', 'image1'] as const) {
      const { logits, tokens } = await run(net, c);
      expectClose(logits, await readQ4Logits('tiny-a', c), { rtol: 0, atol: 1e-3, what: `capped ${c} 4-bit logits` });
      expect(tokens).toEqual((await run(full, c)).tokens);
    }
  }, 600_000);

  it('a prompt whose joined gate/up workspace passes the limit takes them apart: logits equal the uncapped GPU', async () => {
    const gpu = await capped(BINDING);
    const net = await Qwen3VL.load(gpu, modelFiles('tiny-a'), { maxLogitRows: 4 });
    const full = await Qwen3VL.load(await testGpu(), modelFiles('tiny-a'));
    // 300 rows: gate and up of [300, 128] f32 (150 KiB each) fit 256 KiB, joined (300 KiB) they do not.
    const ids = Int32Array.from({ length: 300 }, (_, i) => (i * 37 + 11) % 1000);
    expectClose(await net.logits(ids), await full.logits(ids), { rtol: 0, atol: 1e-4, what: 'logits of 300 rows, capped' });
  }, 600_000);

  it('a buffer that cannot be split is refused naming the buffer and the limit', async () => {
    const gpu = await capped(BINDING);
    // An unsplit f32 table over the binding limit, with fewer rows than the head's chunk to cut it by.
    const table = Qwen3VL.load(gpu, modelFiles('tiny-a'), { quant: 'none' });
    await expect(table).rejects.toThrow(BufferAllocationError);
    await expect(table).rejects.toThrow(/'model\.language_model\.embed_tokens\.weight'.*maxStorageBufferBindingSize 262144/);
    // The vision tower's patch embedding [32, 1536] f32 is one matrix the tower takes whole.
    const small = await capped(64 * 1024);
    await expect(Qwen3VL.load(small, modelFiles('tiny-a'))).rejects.toThrow(/'model\.visual\.patch_embed\.proj\.weight'.*maxStorageBufferBindingSize \(65536\)/);
  }, 600_000);
});

describe('matrices read in pieces', () => {
  it('pieces of a few rows give the same weights as whole tensors (logits bit-equal, and the 4-bit reference)', async () => {
    const gpu = await testGpu();
    const whole = await Qwen3VL.load(gpu, modelFiles('tiny-a'));
    // 4 KiB: 32 rows of the bf16 embedding (64 wide), 16 of gate/up, 32 of down (128 wide).
    const pieces = await Qwen3VL.load(gpu, modelFiles('tiny-a'), { pieceBytes: 4096 });
    for (const quant of ['q4', 'none'] as const) {
      const a = quant === 'q4' ? whole : await Qwen3VL.load(gpu, modelFiles('tiny-a'), { quant });
      const b = quant === 'q4' ? pieces : await Qwen3VL.load(gpu, modelFiles('tiny-a'), { quant, pieceBytes: 4096 });
      const ref = await readReference('tiny-a', 'image1');
      const images = { pixelValues: ref.pixelValues!, gridThw: ref.gridThw! };
      const lb = await b.logits(ref.inputIds, images);
      expect(Array.from(lb)).toEqual(Array.from(await a.logits(ref.inputIds, images)));
      expectClose(lb, quant === 'q4' ? await readQ4Logits('tiny-a', 'image1') : ref.logits, { rtol: 0, atol: 1e-3, what: `${quant} logits loaded in pieces` });
    }
  }, 600_000);
});
