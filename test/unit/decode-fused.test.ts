// Decoder.create joins each layer's q/k/v and gate/up 4-bit weights into one weight apiece (the
// parts become views of it): a decode step then takes one GEMV for each group (at two rows and
// more it writes each part's rows apart). Checked on a random model whose shapes align: no extra
// memory, and one sample's tokens and log-probs equal row 0 of two samples (decode-lora-fold
// compares such steps with the packed forward).
import { describe, expect, it } from 'vitest';
import { alignedConfig } from '../helpers/alignedModel';
import { testGpu } from '../helpers/gpu';
import { expectClose } from '../helpers/reference';
import { Filler } from '../../src/bench/fill';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { randomWeights } from '../../src/model/randomWeights';

const config = alignedConfig;

describe('fused decode projections', () => {
  it('joins q/k/v and gate/up without extra memory; one sample decodes as row 0 of two', async () => {
    const gpu = await testGpu();
    const filler = await Filler.create(gpu);
    const weights = await randomWeights(gpu, config, (rec, t, scale) => filler.fill(rec, t, 'uniform', scale));
    await gpu.sync();
    gpu.pool.trim();
    const before = gpu.pool.stats.inUse;
    const layer = weights.language.layers[1];
    const parts = () => [layer.q, layer.k, layer.v, layer.gate, layer.up].map((w) => (w.kind === 'q4' ? w.w : null));
    const bytes = async () => Promise.all(parts().flatMap((w) => [gpu.read(w!.codes), gpu.read(w!.scales)]));
    const was = await bytes();
    // f32 GEMVs at two rows too (int8 x would differ from one row by its quantization).
    const model = await Qwen3VL.create(gpu, config, weights, { maxLogitRows: 2, int8Decode: false });
    expect(await bytes()).toEqual(was);
    const [q, k, v, gate, up] = parts();
    expect(k?.codes.buffer).toBe(q?.codes.buffer);
    expect(v?.scales.buffer).toBe(q?.scales.buffer);
    expect(up?.codes.buffer).toBe(gate?.codes.buffer);
    expect(v!.codes.byteOffset - q!.codes.byteOffset).toBe(((q!.n + k!.n) * 128) / 2);
    // The joined buffers' size classes against the parts' (each within 1/8 of its bytes).
    expect(gpu.pool.stats.inUse).toBeLessThanOrEqual(before * 1.125);
    expect(gpu.pool.stats.cached).toBe(0);
    const prompt = { id: 'p', inputIds: Int32Array.from({ length: 12 }, (_, i) => (37 * i + 5) % 480), images: [] };
    const sampling = { temperature: 1, topP: 1, topK: 0, maxNewTokens: 6, seed: 3 };
    const [one] = await model.generate(prompt, 1, sampling, { stopIds: [] });
    const [row0] = await model.generate(prompt, 2, sampling, { stopIds: [] });
    expect(one.tokens).toEqual(row0.tokens);
    expectClose(one.samplingLogps, row0.samplingLogps, { rtol: 0, atol: 1e-4, what: 'log-probs' });
  });
});
