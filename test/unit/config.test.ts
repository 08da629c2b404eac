import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { applyGenerationConfig, ConfigError, parseQwen3VLConfig } from '../../src/model/config';
import { DEFAULT_TRAINING_WORK, defaultEngineStorage, memoryPlan, planProblems, productWorkspaceBytes, trainingMemory, trainingMemoryWith } from '../../src/model/memoryPlan';
import { canonicalWeightName, checkTensorShape, expectedShape, expectedWeights, WeightShapeError } from '../../src/model/weightShapes';

const fixture = (name: string) => readFileSync(new URL(`../fixtures/model-io/configs/${name}`, import.meta.url), 'utf8');
const raw = (name: string) => JSON.parse(fixture(name)) as Record<string, any>;
const paramCount = (c: ReturnType<typeof parseQwen3VLConfig>, prefix: string) =>
  [...expectedWeights(c)].filter(([n]) => n.startsWith(prefix)).reduce((a, [, s]) => a + s.reduce((x, y) => x * y, 1), 0);

describe('parseQwen3VLConfig', () => {
  it('reads the 2B config in the transformers 4.57 layout (rope_scaling + rope_theta)', () => {
    const c = parseQwen3VLConfig(fixture('qwen3-vl-2b-4.57.json'));
    expect(c.text).toEqual({
      hiddenSize: 2048, numLayers: 28, numHeads: 16, numKvHeads: 8, headDim: 128, intermediateSize: 6144, vocabSize: 151936,
      maxPositionEmbeddings: 262144, rmsNormEps: 1e-6, ropeTheta: 5_000_000, mropeSection: [24, 20, 20], attentionBias: false,
    });
    expect(c.vision).toEqual({
      depth: 24, hiddenSize: 1024, numHeads: 16, intermediateSize: 4096, inChannels: 3, patchSize: 16, temporalPatchSize: 2,
      spatialMergeSize: 2, outHiddenSize: 2048, numPositionEmbeddings: 2304, deepstackVisualIndexes: [5, 11, 17],
    });
    expect(c.tokens).toEqual({ image: 151655, video: 151656, visionStart: 151652, visionEnd: 151653, bos: 151643, eos: [151645], pad: null });
    expect(c.tieWordEmbeddings).toBe(true);
  });

  it('reads the 5.x layout (rope_parameters) to the same config', () => {
    expect(parseQwen3VLConfig(fixture('qwen3-vl-2b-5.x.json'))).toEqual(parseQwen3VLConfig(fixture('qwen3-vl-2b-4.57.json')));
  });

  it('reads the untied 8B and the 4B', () => {
    const c8 = parseQwen3VLConfig(fixture('qwen3-vl-8b-4.57.json'));
    expect(c8.tieWordEmbeddings).toBe(false);
    expect([c8.text.hiddenSize, c8.text.numLayers, c8.text.numHeads, c8.vision.depth, c8.vision.hiddenSize]).toEqual([4096, 36, 32, 27, 1152]);
    expect(expectedShape(c8, 'lm_head.weight')).toEqual([151936, 4096]);
    const c4 = parseQwen3VLConfig(fixture('qwen3-vl-4b-4.57.json'));
    expect([c4.text.hiddenSize, c4.tieWordEmbeddings]).toEqual([2560, true]);
  });

  it('adds generation_config stop ids', () => {
    const c = applyGenerationConfig(parseQwen3VLConfig(fixture('qwen3-vl-2b-4.57.json')), { eos_token_id: [151645, 151643], pad_token_id: 151643 });
    expect(c.tokens.eos).toEqual([151645, 151643]);
    expect(c.tokens.pad).toBe(151643);
  });

  it('refuses another architecture, naming it', () => {
    expect(() => parseQwen3VLConfig(fixture('llava.json'))).toThrow(ConfigError);
    expect(() => parseQwen3VLConfig(fixture('llava.json'))).toThrow(/LlavaForConditionalGeneration \(model_type 'llava'\)/);
    const moe = { ...raw('qwen3-vl-2b-4.57.json'), architectures: ['Qwen3VLMoeForConditionalGeneration'], model_type: 'qwen3_vl_moe' };
    expect(() => parseQwen3VLConfig(moe)).toThrow(/Qwen3VLMoeForConditionalGeneration/);
    expect(() => parseQwen3VLConfig({})).toThrow(/unnamed architecture/);
  });

  it('refuses missing or inconsistent fields with the field named', () => {
    const noHeads = raw('qwen3-vl-2b-4.57.json');
    delete noHeads.text_config.num_attention_heads;
    expect(() => parseQwen3VLConfig(noHeads)).toThrow(/text_config\.num_attention_heads is missing/);
    const noRope = raw('qwen3-vl-2b-4.57.json');
    delete noRope.text_config.rope_scaling;
    expect(() => parseQwen3VLConfig(noRope)).toThrow(/neither rope_parameters/);
    const badSection = raw('qwen3-vl-2b-5.x.json');
    badSection.text_config.rope_parameters.mrope_section = [24, 20, 21];
    expect(() => parseQwen3VLConfig(badSection)).toThrow(/sums to 65/);
    const noVision = raw('qwen3-vl-2b-4.57.json');
    delete noVision.vision_config;
    expect(() => parseQwen3VLConfig(noVision)).toThrow(/vision_config is missing/);
    const tieConflict = raw('qwen3-vl-2b-4.57.json');
    tieConflict.tie_word_embeddings = false;
    expect(() => parseQwen3VLConfig(tieConflict)).toThrow(/tie_word_embeddings/);
    expect(() => parseQwen3VLConfig('{not json')).toThrow(/not valid JSON/);
  });
});

describe('weight shapes', () => {
  it('parameter counts match spec B2 for 2B, 4B and 8B', () => {
    const c2 = parseQwen3VLConfig(fixture('qwen3-vl-2b-4.57.json'));
    expect(paramCount(c2, 'model.language_model.')).toBe(1_720_574_976);
    expect(paramCount(c2, 'model.visual.')).toBe(406_957_056);
    const c4 = parseQwen3VLConfig(fixture('qwen3-vl-4b-4.57.json'));
    expect(paramCount(c4, '')).toBe(4_437_815_808);
    const c8 = parseQwen3VLConfig(fixture('qwen3-vl-8b-4.57.json'));
    expect(paramCount(c8, 'model.visual.')).toBe(576_388_336);
    expect(paramCount(c8, '')).toBe(8_767_123_696);
  });

  it('checks a tensor against the config and names both shapes', () => {
    const c = parseQwen3VLConfig(fixture('qwen3-vl-2b-4.57.json'));
    expect(expectedShape(c, 'model.language_model.layers.0.self_attn.q_proj.weight')).toEqual([2048, 2048]);
    expect(expectedShape(c, 'model.language_model.layers.3.self_attn.k_proj.weight')).toEqual([1024, 2048]);
    expect(expectedShape(c, 'model.visual.deepstack_merger_list.2.norm.weight')).toEqual([4096]);
    expect(expectedShape(c, 'model.visual.merger.norm.weight')).toEqual([1024]);
    expect(expectedShape(c, 'model.visual.patch_embed.proj.weight')).toEqual([1024, 3, 2, 16, 16]);
    expect(expectedShape(c, 'model.language_model.layers.28.mlp.up_proj.weight')).toBeNull();
    expect(() => checkTensorShape(c, 'model.language_model.layers.0.self_attn.q_proj.weight', [1024, 2048])).toThrow(WeightShapeError);
    expect(() => checkTensorShape(c, 'model.language_model.layers.0.self_attn.q_proj.weight', [1024, 2048])).toThrow(
      "checkpoint tensor 'model.language_model.layers.0.self_attn.q_proj.weight' has shape [1024, 2048], but config.json implies [2048, 2048]",
    );
    expect(() => checkTensorShape(c, 'model.language_model.layers.0.self_attn.q_proj.weight', [2048, 2048])).not.toThrow();
  });

  it('maps Qwen2-VL-style names to the published ones', () => {
    expect(canonicalWeightName('model.layers.5.mlp.down_proj.weight')).toBe('model.language_model.layers.5.mlp.down_proj.weight');
    expect(canonicalWeightName('model.embed_tokens.weight')).toBe('model.language_model.embed_tokens.weight');
    expect(canonicalWeightName('visual.blocks.0.attn.qkv.weight')).toBe('model.visual.blocks.0.attn.qkv.weight');
    expect(canonicalWeightName('model.visual.merger.norm.weight')).toBe('model.visual.merger.norm.weight');
    expect(canonicalWeightName('lm_head.weight')).toBe('lm_head.weight');
  });
});

describe('memoryPlan', () => {
  it('breaks the 2B down by part and dtype', () => {
    const c = parseQwen3VLConfig(fixture('qwen3-vl-2b-4.57.json'));
    const plan = memoryPlan(c);
    const part = (p: string) => plan.parts.find((x) => x.part === p)!;
    const linearParams = 28 * (2048 * 2048 * 2 + 1024 * 2048 * 2 + 3 * 2048 * 6144);
    expect(part('lm.linear').params).toBe(linearParams);
    // 4 bits per weight plus one f16 scale per 32 weights: 4.5 bits per weight.
    expect(part('lm.linear').bytes).toBe((linearParams * 4.5) / 8);
    expect(part('lm.embed')).toMatchObject({ dtype: 'q4', bytes: (151936 * 2048 * 4.5) / 8 });
    expect(plan.parts.some((p) => p.part === 'lm.head')).toBe(false);
    // The tower's matrices in the checkpoint's bf16 (config.json's dtype), its position table
    // [2304, 1024] and vectors f32.
    expect(part('vision.matrices').dtype).toBe('bf16');
    const posTable = 2304 * 1024;
    expect(part('vision.matrices').bytes).toBe(2 * (part('vision.matrices').params - posTable) + 4 * posTable);
    expect(part('vision.vectors').dtype).toBe('f32');
    expect(part('vision.matrices').params + part('vision.vectors').params).toBe(406_957_056);
    const f32Vision = memoryPlan(c, { visionDtype: 'f32' });
    expect(f32Vision.totalBytes - plan.totalBytes).toBe(2 * (part('vision.matrices').params - posTable));
    expect(memoryPlan(parseQwen3VLConfig(JSON.stringify({ ...JSON.parse(fixture('qwen3-vl-2b-4.57.json')), dtype: 'float32', torch_dtype: 'float32' }))).totalBytes).toBe(f32Vision.totalBytes);
    expect(plan.totalBytes).toBe(plan.parts.reduce((a, p) => a + p.bytes, 0));
    expect(plan.parts.reduce((a, p) => a + p.params, 0)).toBe(2_127_532_032);
    expect(plan.largestBuffer).toEqual({ name: 'model.language_model.embed_tokens.weight (4-bit codes)', bytes: (151936 * 2048) / 2 });
    expect(plan.kvCacheBytesPerToken).toBe(28 * 2 * 8 * 128 * 4);
    expect(memoryPlan(c, { kvCacheDtype: 'f16' }).kvCacheBytesPerToken).toBe(28 * 2 * 8 * 128 * 2);
    expect(memoryPlan(c, { visionDtype: 'f16' }).totalBytes).toBe(plan.totalBytes);
  });

  it("estimates a default training step's peak near the H100 measurement, the prompt counted once", () => {
    const c = parseQwen3VLConfig(fixture('qwen3-vl-2b-4.57.json'));
    const plan = memoryPlan(c, { visionDtype: 'f32' });
    const t = trainingMemory(c, plan);
    const released = trainingMemory(c, plan, { ...DEFAULT_TRAINING_WORK, phaseBuffers: 'release' });
    // bench/model.ts's default-config runs on an H100 (BENCHMARKS.md, Memory), weights included
    // (its tower f32, as here): the pool's peak 4.14 GiB with phase_buffers 'release' (3.97 in
    // use), 4.71 GiB with 'keep', the default.
    expect(released.peakBytes / 2 ** 30).toBeGreaterThan(0.9 * 4.14);
    expect(released.peakBytes / 2 ** 30).toBeLessThan(1.1 * 4.14);
    expect(released.peakBytes).toBe(t.weightsBytes + t.loraBytes + Math.max(t.generationBytes, t.trainingBytes));
    expect(t.peakBytes / 2 ** 30).toBeGreaterThan(0.9 * 4.71);
    expect(t.peakBytes / 2 ** 30).toBeLessThan(1.1 * 4.71);
    expect(t.peakBytes).toBe(t.weightsBytes + t.loraBytes + t.generationBytes + t.trainingBytes);
    // One micro-batch of the prompt and all 8 completions (512 + 8 x 256 rows within 4096); with
    // a budget of 1024 rows, 2 completions a forward: fewer rows, less memory.
    const small = trainingMemory(c, plan, { ...DEFAULT_TRAINING_WORK, microBatchTokens: 1024 });
    expect(small.trainingBytes).toBeLessThan(t.trainingBytes / 2);
    expect(small.generationBytes).toBe(t.generationBytes);
    // The kept hidden states in f16: (L + 1) rows of H at half the bytes, one f32 row of H more in
    // the backward (the expanded state) and a copy of the gradients; the default's T = 512 + 8 x 256 rows.
    const f16 = trainingMemory(c, plan, { ...DEFAULT_TRAINING_WORK, activationStorage: 'f16' });
    const T = 512 + 8 * 256;
    expect(t.trainingBytes - f16.trainingBytes).toBe(29 * T * 2048 * 2 - T * 2048 * 4 - t.loraBytes / 4);
    // An f16 KV cache halves the cache's share of generation: 28 layers x K, V x 8 heads x 128 x 2 bytes a token fewer.
    const half = trainingMemory(c, memoryPlan(c, { kvCacheDtype: 'f16', visionDtype: 'f32' }));
    expect(t.generationBytes - half.generationBytes).toBe((512 + 8 * 256) * 28 * 2 * 8 * 128 * 2);
  });

  it("estimates with the engine's storage as 'auto' resolves it: f16 KV cache and hidden states beside the f16 products with shader-f16 only", () => {
    const c = parseQwen3VLConfig(fixture('qwen3-vl-2b-4.57.json'));
    expect(defaultEngineStorage('f16', true)).toEqual({ kvCache: 'f16', activationStorage: 'f16', phaseBuffers: 'keep', products: 'f16', visionProducts: 'f16' });
    expect(defaultEngineStorage('f16', false)).toEqual({ kvCache: 'f32', activationStorage: 'f32', phaseBuffers: 'keep', products: 'f16', visionProducts: 'f16' });
    expect(defaultEngineStorage('int8', true)).toEqual({ kvCache: 'f32', activationStorage: 'f32', phaseBuffers: 'keep', products: 'int8', visionProducts: 'f32' });
    const f32 = trainingMemoryWith(c, {}, DEFAULT_TRAINING_WORK, defaultEngineStorage('f32', true));
    expect(f32.peakBytes).toBe(trainingMemory(c, memoryPlan(c)).peakBytes);
    const f16 = trainingMemoryWith(c, {}, DEFAULT_TRAINING_WORK, defaultEngineStorage('f16', true));
    const T = 512 + 8 * 256;
    // Half the KV cache (28 layers x K, V x 8 heads x 128 x 2 bytes a token) and half the kept states, one f32 row of H
    // and a copy of the gradients more; the f16 op's workspaces besides, and the tower's f16 op in place of its widened copies.
    const plan = memoryPlan(c);
    expect(f32.peakBytes - f16.peakBytes).toBe(T * 28 * 2 * 8 * 128 * 2 + 29 * T * 2048 * 2 - T * 2048 * 4 - f32.loraBytes / 4 - productWorkspaceBytes(c, 'f16', DEFAULT_TRAINING_WORK.loraRank) + plan.visionWideningBytes - plan.visionF16Bytes);
    const released = trainingMemoryWith(c, {}, DEFAULT_TRAINING_WORK, { ...defaultEngineStorage('f32', true), phaseBuffers: 'release' });
    expect(f32.peakBytes - released.peakBytes).toBe(Math.min(f32.generationBytes, f32.trainingBytes));
  });

  it("counts the tensor-core op's workspaces, and lands near the H100's f16 pool peaks at 2B, 4B and 8B", () => {
    const c2 = parseQwen3VLConfig(fixture('qwen3-vl-2b-4.57.json'));
    const rows = 4096; // the default micro-batch: Qwen3VL's MMA_ROWS
    expect(productWorkspaceBytes(c2, 'f32')).toBe(0);
    // f16: row scales, x's f16 copy (the widest x: the intermediate 6144, and 96 columns for LoRA's
    // terms), and the scratch of the largest weight expanded, the LM head's vocabulary chunk of 8192
    // rows (32 MiB in f16).
    expect(productWorkspaceBytes(c2, 'f16')).toBe(rows * 4 + rows * (6144 + 96) * 2 + 8192 * 2048 * 2);
    // Adapters of rank 8 fit those columns; at rank 64 three adapters of x take 192. The LM head (no
    // adapter) still sets the scratch: gate's expansion with them, 6144 x (2048 + 192), is smaller.
    expect(productWorkspaceBytes(c2, 'f16', 8)).toBe(productWorkspaceBytes(c2, 'f16'));
    expect(productWorkspaceBytes(c2, 'f16', 64)).toBe(rows * 4 + rows * (6144 + 192) * 2 + 8192 * 2048 * 2);
    // int8: two limbs of x and a scale per group of 32, then the largest weight as int8 and its steps per K block of 128.
    expect(productWorkspaceBytes(c2, 'int8')).toBe(rows * 6144 * 2 + (rows * 6144 / 32) * 4 + 8192 * 2048 + (8192 * 2048 / 128) * 4);
    expect(productWorkspaceBytes(c2, 'int8-1limb')).toBe(rows * 6144 + (rows * 6144 / 32) * 4 + 8192 * 2048 + (8192 * 2048 / 256) * 4);
    expect(productWorkspaceBytes(c2, 'int8-row') - productWorkspaceBytes(c2, 'int8')).toBe(rows * 4);
    // The 8B's gate (12288 x 4096, 96 MiB in f16) is under the expansion limit: it sets the scratch.
    const c8 = parseQwen3VLConfig(fixture('qwen3-vl-8b-4.57.json'));
    expect(productWorkspaceBytes(c8, 'f16')).toBe(rows * 4 + rows * (12288 + 96) * 2 + 12288 * 4096 * 2);
    // q, k and v expanded side by side (MatmulQ4F16.joins) count where they are the widest: a model
    // whose hidden size holds them together and whose other weights are smaller.
    const joined = { ...c2, text: { ...c2.text, numHeads: 8, numKvHeads: 4, intermediateSize: 1024, vocabSize: 1024 } };
    expect(productWorkspaceBytes(joined, 'f16', 8)).toBe(rows * 4 + rows * (2048 + 96) * 2 + 2048 * (2048 + 32) * 2);
    const plan2 = memoryPlan(c2);
    expect(trainingMemory(c2, plan2, { ...DEFAULT_TRAINING_WORK, products: 'f16', visionProducts: 'f32' }).peakBytes - trainingMemory(c2, plan2).peakBytes).toBe(productWorkspaceBytes(c2, 'f16', DEFAULT_TRAINING_WORK.loraRank));
    // bench/model.ts's default config on f16 tensor cores (f32 hidden states; the KV cache f16, as
    // 'auto' takes it beside f16 products; the tower then f32), H100: pool peaks 4.62, 6.97 and
    // 10.96 GiB (BENCHMARKS.md, f16 tensor cores and Larger models).
    for (const [name, peak] of [['qwen3-vl-2b-4.57.json', 4.62], ['qwen3-vl-4b-4.57.json', 6.97], ['qwen3-vl-8b-4.57.json', 10.96]] as const) {
      const c = parseQwen3VLConfig(fixture(name));
      const planned = trainingMemory(c, memoryPlan(c, { kvCacheDtype: 'f16', visionDtype: 'f32' }), { ...DEFAULT_TRAINING_WORK, products: 'f16', visionProducts: 'f32' }).peakBytes / 2 ** 30;
      expect(planned, name).toBeGreaterThan(0.96 * peak);
      expect(planned, name).toBeLessThanOrEqual(peak);
    }
  });

  it("lands near the H200's pool peaks with the tower's matrices in bf16, its widened f32 copies counted", () => {
    const c = parseQwen3VLConfig(fixture('qwen3-vl-2b-4.57.json'));
    const plan = memoryPlan(c);
    // One f32 copy of each distinct tower matrix shape: patch 1024x1536, joined q/k/v 3x1024x1024,
    // proj 1024x1024, MLP 4096x1024, merger 4096x4096 and 2048x4096.
    expect(plan.visionWideningBytes).toBe(4 * (1024 * 1536 + 3 * 1024 * 1024 + 1024 * 1024 + 4096 * 1024 + 4096 * 4096 + 2048 * 4096));
    expect(memoryPlan(c, { visionDtype: 'f32' }).visionWideningBytes).toBe(0);
    expect(memoryPlan(c, { visionDtype: 'q4' }).visionWideningBytes).toBe(0);
    // On f16 tensor cores the tower holds its op instead: x's row scales and f16 copy for 1024
    // patches of up to 4096 columns (and 96 for LoRA's terms), the scratch of its largest matrix
    // (the merger's 4096x4096) in f16, and the patch embedding's widened copy (it stays on the f32 GEMM).
    expect(plan.visionF16Bytes).toBe(1024 * 4 + 1024 * (4096 + 96) * 2 + 4096 * 4096 * 2 + 4 * 1024 * 1536);
    expect(memoryPlan(c, { visionDtype: 'f32' }).visionF16Bytes).toBe(plan.visionF16Bytes - 4 * 1024 * 1536);
    // bench/model.ts's default config on an H200, 2026-11-29 (bench/results/model.h200.json; the
    // KV cache f16 beside f16 products, else f32; vision_products 'auto', so the tower on f16
    // beside f16 products only): pool peaks 4.016 GiB on the f32 units, 4.116 on int8, 3.868 on
    // f16; the run before it that day, the tower on the f32 units beside f16 products: 3.896.
    const cases = [
      ['f32', 'f32', 'f32', 4.016],
      ['int8', 'f32', 'f32', 4.116],
      ['f16', 'f16', 'f16', 3.868],
      ['f16', 'f16', 'f32', 3.896],
    ] as const;
    for (const [products, kv, vision, peak] of cases) {
      const planned = trainingMemory(c, memoryPlan(c, { kvCacheDtype: kv }), { ...DEFAULT_TRAINING_WORK, products, visionProducts: vision }).peakBytes / 2 ** 30;
      expect(Math.abs(planned / peak - 1), `${products} products, the tower on ${vision}: planned ${planned.toFixed(3)} GiB`).toBeLessThan(0.03);
    }
  });

  it("counts what the pool keeps of the training forward's workspace through the backward, as the H100's pool peaks show", () => {
    const c = parseQwen3VLConfig(fixture('qwen3-vl-2b-4.57.json'));
    // `node .bench/model.mjs --f16 --kv-cache f32|f16 --only default` (2026-11-27): at the pool's
    // peak, in the backward, it held the forward's joined q/k/v (40 MiB) and gate/up (120 MiB)
    // outputs cached, which no buffer of the backward is the size of. Pool peaks by products and
    // KV cache: f32 and f32 4.72, f16 and f32 4.83, f32 and f16 4.51, f16 and f16 4.615 GiB (the
    // tower then f32).
    const T = 512 + 8 * 256;
    const plan = (kv: 'f32' | 'f16', products: 'f32' | 'f16') => trainingMemory(c, memoryPlan(c, { kvCacheDtype: kv, visionDtype: 'f32' }), { ...DEFAULT_TRAINING_WORK, products, visionProducts: 'f32' }).peakBytes;
    // q/k/v [T, 2048 + 2 x 1024], gate/up [T, 2 x 6144], LoRA's partials [T, 96 x r 8].
    const left = T * (2048 + 2 * 1024 + 2 * 6144 + 96 * 8) * 4;
    for (const [kv, products, peak] of [['f32', 'f32', 4.72], ['f32', 'f16', 4.83], ['f16', 'f32', 4.51], ['f16', 'f16', 4.615]] as const) {
      const planned = plan(kv, products) / 2 ** 30;
      expect(planned, `${products} products, ${kv} KV cache`).toBeGreaterThan(0.97 * peak);
      expect(planned, `${products} products, ${kv} KV cache`).toBeLessThanOrEqual(peak);
      // Without them the plan fell 4-6% short.
      expect((plan(kv, products) - left) / 2 ** 30).toBeLessThan(0.965 * peak);
    }
  });

  it('plans an untied lm_head and reports the limits it exceeds', () => {
    const plan = memoryPlan(parseQwen3VLConfig(fixture('qwen3-vl-8b-4.57.json')), { embedDtype: 'f16' });
    expect(plan.parts.find((p) => p.part === 'lm.head')).toMatchObject({ dtype: 'f16', bytes: 151936 * 4096 * 2 });
    expect(plan.largestBuffer.bytes).toBe(151936 * 4096 * 2);
    const problems = planProblems(plan, { maxBufferSize: 2 ** 30, maxStorageBufferBindingSize: 2 ** 27 }, 2 ** 32);
    expect(problems).toHaveLength(3);
    expect(problems[1]).toMatch(/maxStorageBufferBindingSize is 128\.0 MiB/);
    expect(planProblems(plan, { maxBufferSize: 2 ** 32, maxStorageBufferBindingSize: 2 ** 32 })).toEqual([]);
  });
});
