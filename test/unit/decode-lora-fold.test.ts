// Decode with an adapter on a model whose widths are multiples of 64 (the fixtures' are not): the
// split attention's combine (over two key chunks; the unsplit decode kernel over one) starts
// o_proj's LoRA down product and the SwiGLU dispatch starts down_proj's (shaders/attention_*.wgsl
// and lora_gemv.wgsl, FOLD), each finished by one dispatch after its base GEMV. The sampled tokens' log-probs must equal the log-softmax of the packed
// forward's logits (the LoRA GEMMs, no folds) over the prompt and those tokens; with int8 x in
// decode's GEMVs (the default), within the quantization's reach of them, x then quantized by the
// kernels that write it.
import { describe, expect, it } from 'vitest';
import { ALIGNED, alignedConfig, randomModel } from '../helpers/alignedModel';
import { testGpu, withDefaultStorageLimit } from '../helpers/gpu';
import { expectClose } from '../helpers/reference';
import type { Qwen3VLConfig } from '../../src/model/config';
import type { Qwen3VL } from '../../src/model/qwen3vl';
import { DOT4_I8 } from '../../src/ops/matmulQ4';

const { vocab: VOCAB } = ALIGNED;

describe('decode with folded LoRA down products', () => {
  it('1 and 3 samples, prompts of one and two key chunks: each token\'s log-prob equals the packed forward\'s with the adapter, which differs from the base model\'s', async () => {
    const gpu = await testGpu();
    const model = await randomModel(gpu, { maxLogitRows: 3, int8Decode: false, adapterRank: 8 });
    for (const G of [1, 3])
      for (const length of [SHORT_PROMPT, ...PROMPT_LENGTHS]) {
        for (const [g, s] of (await samplesVsForward(model, G, length)).entries()) {
          expectClose(s.got, s.want, { rtol: 0, atol: 2e-4, what: `G ${G}, prompt ${length}, sample ${g}` });
          expect(Math.max(...s.base.map((b, j) => Math.abs(b - s.want[j]))), 'the adapter changes the log-probs').toBeGreaterThan(1e-2);
        }
      }
  });

  it('with int8 x in the GEMVs of 2..8 samples (the default where WGSL has packed dot products): 3 samples\' log-probs stay within 2e-2 of the f32 forward; 1 sample is f32', async () => {
    const gpu = await testGpu();
    if (!gpu.hasWgsl(DOT4_I8)) return;
    const model = await randomModel(gpu, { maxLogitRows: 3, adapterRank: 8 });
    let largest = 0;
    const kernels = new Set<string>();
    for (const G of [1, 3])
      for (const length of PROMPT_LENGTHS) {
        // The kernels the 3 samples dispatch, where the profiler can watch them.
        const prof = G === 3 && gpu.has('timestamp-query') ? gpu.startProfiling('pass') : null;
        const samples = await samplesVsForward(model, G, length);
        if (prof) for (const k of prof.dispatched.keys()) kernels.add(k.name);
        gpu.stopProfiling();
        for (const [g, s] of samples.entries()) {
          expectClose(s.got, s.want, { rtol: 0, atol: G === 1 ? 2e-4 : 2e-2, what: `G ${G}, prompt ${length}, sample ${g}` });
          if (G > 1) largest = Math.max(largest, ...s.got.map((v, j) => Math.abs(v - s.want[j])));
        }
      }
    // The quantization shows: the 3 samples did take the int8 kernel.
    expect(largest).toBeGreaterThan(1e-5);
    // Every decoder GEMV's x left as int8 groups by the kernel that writes x (no quantize dispatch):
    // q/k/v's and gate/up's by the norms' LoRA down dispatches, o_proj's by the attention combine
    // (two key chunks) or the unsplit decode kernel (one), down_proj's by the SwiGLU where the
    // device binds its 9 storage buffers.
    if (gpu.has('timestamp-query')) {
      const swiglu = gpu.limits.maxStorageBuffersPerShaderStage >= 9 ? ['lora_gemv.lora_up_x2_swiglu_fold_quant_vec4'] : [];
      const attention = ['attention.fwd_cached_fold_quant', 'attention.split_combine_fold_quant'];
      const quant = [...attention, 'lora_gemv.lora_down_x2_norm_quant_vec4', 'lora_gemv.lora_down_x3_norm_quant_vec4', ...swiglu];
      expect([...kernels].filter((k) => k.includes('_quant')).sort()).toEqual(quant.sort());
    }
  });

  it('8 samples whose down_proj partials pass the GEMV epilogue\'s (intermediate 1088, r 16): each layer\'s down_proj update is owed to the next kernel (written beside its GEMV, taken in by the next layer\'s norm and o_proj GEMV or by the final norm, or settled first where the norm cannot take it), a dispatch fewer a layer; log-probs as the packed forward\'s', async () => {
    const gpu = await testGpu();
    // 17 partials a row of act: 8 · 17 · 16 = 2176 past Q4_TUNING.loraMaxPartials.
    const inter = 1088;
    const cfg: Qwen3VLConfig = { ...alignedConfig, text: { ...alignedConfig.text, intermediateSize: inter } };
    // f32 x; int8 x; int8 x on a device of 8 storage buffers a stage, where the norm that would read
    // h plus the owed update with its int8 groups binds 9: the update is settled into h first.
    const runs = [
      { on: gpu, int8Decode: false },
      { on: gpu, int8Decode: undefined },
      { on: withDefaultStorageLimit(gpu), int8Decode: undefined },
    ] as const;
    for (const { on, int8Decode } of runs) {
      if (int8Decode === undefined && !gpu.hasWgsl(DOT4_I8)) continue;
      const model = await randomModel(on, { config: cfg, maxLogitRows: 8, int8Decode, adapterRank: 16 });
      for (const [g, s] of (await samplesVsForward(model, 8, PROMPT_LENGTHS[1])).entries()) {
        expectClose(s.got, s.want, { rtol: 0, atol: int8Decode === false ? 2e-4 : 2e-2, what: `int8 ${int8Decode}, ${on.limits.maxStorageBuffersPerShaderStage} storage buffers, sample ${g}` });
      }
      if (int8Decode !== false) continue;
      // A step in f32: the aligned model's 10 a layer over two key chunks and 7 outside; the first
      // layer's down_proj update owed to the second, the last's to the final norm (settled by
      // dispatches of their own, 10 · L + 7 + 2).
      const steps = async (n: number) => {
        const before = gpu.hostStats.dispatches;
        await model.generate({ id: 'p', inputIds: Int32Array.from({ length: PROMPT_LENGTHS[1] }, (_, i) => (53 * i + 7) % 480), images: [] }, 8, { temperature: 1, topP: 1, topK: 0, maxNewTokens: n, seed: 9 }, { stopIds: [] });
        return gpu.hostStats.dispatches - before;
      };
      const L = cfg.text.numLayers;
      expect((await steps(4)) - (await steps(3))).toBe(10 * L + 7);
    }
  }, 900_000);
});

/** Prompt lengths whose decode reads one key chunk (generate's 64 keys a chunk) and two. */
const PROMPT_LENGTHS = [11, 70];
/** A prompt the decode kernel prefills too (3 rows of 2 query heads a kv head), with the fold;
 * f32 only (with int8 x its prefill's GEMVs of 3 rows would quantize x). */
const SHORT_PROMPT = 3;

/** G samples' log-probs (got), the packed forward's with the adapter (want) and without (base). */
async function samplesVsForward(model: Qwen3VL, G: number, length: number): Promise<{ got: number[]; want: number[]; base: number[] }[]> {
  const prompt = { id: 'p', inputIds: Int32Array.from({ length }, (_, i) => (53 * i + 7) % 480), images: [] };
  const sampling = { temperature: 1, topP: 1, topK: 0, maxNewTokens: 5, seed: 9 };
  const samples = await model.generate(prompt, G, sampling, { stopIds: [] });
  const out = [];
  for (const s of samples) {
    const ids = Int32Array.from([...prompt.inputIds, ...s.tokens]);
    const [on, off] = [await model.logits(ids, undefined, { lora: true }), await model.logits(ids, undefined, { lora: false })];
    const logp = (logits: Float32Array) =>
      s.tokens.map((tok, j) => {
        const row = logits.subarray((prompt.inputIds.length - 1 + j) * VOCAB, (prompt.inputIds.length + j) * VOCAB);
        const m = Math.max(...row);
        return row[tok] - m - Math.log(row.reduce((a, x) => a + Math.exp(x - m), 0));
      });
    out.push({ got: [...s.samplingLogps], want: logp(on), base: logp(off) });
  }
  return out;
}
