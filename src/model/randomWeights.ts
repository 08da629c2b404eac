// Random weights of any Qwen3-VL shape, made on the GPU in the layout the loaders produce
// (src/model/loader.ts, loadVisionWeights) from a bf16 checkpoint: 4-bit LM linear layers and
// token tables by default, f32 norms, biases and position table, the vision tower's dense matrices
// in bf16 (4-bit with visionQuant 'q4', loadVisionWeights' option). For benchmarks of a model
// whose checkpoint is not at hand (the 2B with no download).
//
// Each 4-bit weight is quantized from f32 rows that the caller's `fill` writes into one small
// staging buffer, block by block, exactly as the loader quantizes checkpoint rows: no buffer larger
// than the weight itself (or STAGING_BYTES) ever exists. Norm weights are 1 and norm biases 0 so
// that activations keep the scale of a trained model; linear weights are uniform in ±1/√in.
import type { Gpu, Recorder, Tensor } from '../gpu';
import { Halves } from '../ops/halves';
import { allocQ4, Q4_GROUP } from '../ops/matmulQ4';
import { QuantizeQ4 } from '../ops/quantizeQ4';
import type { Qwen3VLConfig } from './config';
import { view } from './decoder';
import { WeightLoader, type Quantization } from './loader';
import type { DecoderLayerWeights, DenseWeight, LinearWeight, ModelWeights, NormWeight, PatchMergerWeights, TokenTable, VisionWeights } from './weights';

/** Records a fill of the first `t.numel` f32 values of `t` with pseudo-random values in ±scale. */
export type RandomFill = (rec: Recorder, t: Tensor, scale: number) => void;

/** f32 rows staged per quantization block. */
const STAGING_BYTES = 16 << 20;
/** Token embeddings of a trained model have about this scale. */
const EMBED_SCALE = 0.02;

export async function randomWeights(gpu: Gpu, config: Qwen3VLConfig, fill: RandomFill, opts: { quant?: Quantization; visionQuant?: Quantization } = {}): Promise<ModelWeights> {
  const quant = opts.quant ?? 'q4';
  const visionQuant = opts.visionQuant ?? 'none';
  const quantizer = await QuantizeQ4.create(gpu);
  const loader = await WeightLoader.create(gpu);
  const staging = gpu.tensor([STAGING_BYTES / 4], 'f32', 'random weights (staging)');
  const rec = gpu.recorder('random weights');
  const t = config.text;

  const filled = (shape: number[], scale: number, label: string) => {
    const w = gpu.tensor(shape, 'f32', label);
    fill(rec, w, scale);
    return w;
  };
  const constant = (n: number, value: number, label: string) => gpu.upload(new Float32Array(n).fill(value), [n], 'f32', label);

  const linear = (out: number, inF: number, label: string, scale = 1 / Math.sqrt(inF), q = quant): LinearWeight => {
    if (q === 'none') return { kind: 'dense', w: filled([out, inF], scale, label), out, in: inF };
    const w = allocQ4(gpu, out, inF, label);
    // Even row counts keep every block on an even 32-value group, as QuantizeQ4 requires.
    const rows = Math.max(2, Math.floor(STAGING_BYTES / 4 / inF) & ~1);
    for (let r0 = 0; r0 < out; r0 += rows) {
      const src = view(staging, [Math.min(rows, out - r0) * inF]);
      fill(rec, src, scale);
      quantizer.quantize(rec, src, 'f32', w, r0);
    }
    rec.flush();
    return { kind: 'q4', w, out, in: inF };
  };

  const table = (label: string): TokenTable => {
    // Blocks as the loader cuts a bf16 checkpoint's table (the 2B ships in bf16).
    const rows = loader.tableRows(label, t.vocabSize, t.hiddenSize, quant);
    const blocks: LinearWeight[] = [];
    const rowStart: number[] = [];
    for (let r0 = 0; r0 < t.vocabSize; r0 += rows) {
      rowStart.push(r0);
      blocks.push(linear(Math.min(rows, t.vocabSize - r0), t.hiddenSize, `${label}[${r0}]`, EMBED_SCALE));
    }
    return { blocks, rowStart, vocab: t.vocabSize, hidden: t.hiddenSize };
  };

  try {
    const q = t.numHeads * t.headDim;
    const kv = t.numKvHeads * t.headDim;
    const layers: DecoderLayerWeights[] = [];
    for (let l = 0; l < t.numLayers; l++) {
      const p = `model.language_model.layers.${l}`;
      layers.push({
        inputNorm: constant(t.hiddenSize, 1, `${p}.input_layernorm`),
        postAttentionNorm: constant(t.hiddenSize, 1, `${p}.post_attention_layernorm`),
        q: linear(q, t.hiddenSize, `${p}.q_proj`),
        k: linear(kv, t.hiddenSize, `${p}.k_proj`),
        v: linear(kv, t.hiddenSize, `${p}.v_proj`),
        o: linear(t.hiddenSize, q, `${p}.o_proj`),
        qNorm: constant(t.headDim, 1, `${p}.q_norm`),
        kNorm: constant(t.headDim, 1, `${p}.k_norm`),
        gate: linear(t.intermediateSize, t.hiddenSize, `${p}.gate_proj`),
        up: linear(t.intermediateSize, t.hiddenSize, `${p}.up_proj`),
        down: linear(t.hiddenSize, t.intermediateSize, `${p}.down_proj`),
      });
    }
    const embed = table('model.language_model.embed_tokens');
    const lmHead = config.tieWordEmbeddings ? embed : table('lm_head');
    const finalNorm = constant(t.hiddenSize, 1, 'model.language_model.norm');

    const v = config.vision;
    const halves = new Halves(gpu);
    // 4-bit where loadVisionWeights quantizes (visionQuant 'q4', K a multiple of 32), bf16 otherwise.
    const dense = (out: number, inF: number, label: string): DenseWeight => {
      const b = filled([out], EMBED_SCALE, `${label}.bias`);
      if (inF % Q4_GROUP === 0 && visionQuant === 'q4') return { ...linear(out, inF, `${label}.weight`, 1 / Math.sqrt(inF), 'q4'), b };
      const f32 = filled([out, inF], 1 / Math.sqrt(inF), `${label}.weight (f32)`);
      const w = halves.toBf16(rec, f32, `${label}.weight`);
      // Submitted before the pool can hand f32's buffer to a queue write (constant()).
      rec.flush();
      f32.release();
      return { kind: 'dense', w, out, in: inF, b };
    };
    const norm = (n: number, label: string): NormWeight => ({ w: constant(n, 1, `${label}.weight`), b: constant(n, 0, `${label}.bias`) });
    const mergedHidden = v.hiddenSize * v.spatialMergeSize ** 2;
    const merger = (label: string, postShuffleNorm: boolean): PatchMergerWeights => ({
      norm: norm(postShuffleNorm ? mergedHidden : v.hiddenSize, `${label}.norm`),
      postShuffleNorm,
      fc1: dense(mergedHidden, mergedHidden, `${label}.linear_fc1`),
      fc2: dense(v.outHiddenSize, mergedHidden, `${label}.linear_fc2`),
    });
    const vision: VisionWeights = {
      patchEmbed: dense(v.hiddenSize, v.inChannels * v.temporalPatchSize * v.patchSize ** 2, 'model.visual.patch_embed.proj'),
      posEmbed: filled([v.numPositionEmbeddings, v.hiddenSize], EMBED_SCALE, 'model.visual.pos_embed'),
      blocks: Array.from({ length: v.depth }, (_, i) => {
        const p = `model.visual.blocks.${i}`;
        return {
          norm1: norm(v.hiddenSize, `${p}.norm1`),
          norm2: norm(v.hiddenSize, `${p}.norm2`),
          q: dense(v.hiddenSize, v.hiddenSize, `${p}.attn.q`),
          k: dense(v.hiddenSize, v.hiddenSize, `${p}.attn.k`),
          v: dense(v.hiddenSize, v.hiddenSize, `${p}.attn.v`),
          proj: dense(v.hiddenSize, v.hiddenSize, `${p}.attn.proj`),
          fc1: dense(v.intermediateSize, v.hiddenSize, `${p}.mlp.linear_fc1`),
          fc2: dense(v.hiddenSize, v.intermediateSize, `${p}.mlp.linear_fc2`),
        };
      }),
      merger: merger('model.visual.merger', false),
      deepstackMergers: v.deepstackVisualIndexes.map((_, j) => merger(`model.visual.deepstack_merger_list.${j}`, true)),
    };
    await rec.submit();
    return { language: { embed, lmHead, layers, finalNorm }, vision };
  } finally {
    staging.release();
  }
}
