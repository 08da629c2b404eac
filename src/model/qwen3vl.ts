// Qwen3-VL on the engine: load a checkpoint (config.json, generation_config.json, safetensors),
// encode images with the vision tower, run the decoder and the LM head for full logits, and
// generate (the generation half of src/rl/policy.ts's Policy; the training half is train.ts).
import { ShapeError, TensorCoreCheckError, type Gpu, type Tensor } from '../gpu';
import type { LoraParams } from '../ops/loraParams';
import type { AttentionF16 } from '../ops/attentionF16';
import type { AttentionConfig } from '../ops/attention';
import type { TensorCoreProducts } from '../ops/projection';
import { Sampler } from '../ops/sampling';
import { VISION_MMA_ROWS } from '../ops/productSizes';
import { THINK_CLOSE, THINK_OPEN } from '../rewards/thinking';
import { TENSOR_CORE_ROWS } from './memoryPlan';
import type { Completion, PreparedImage, PreparedPrompt, SamplingOptions } from '../rl/policy';
import { applyGenerationConfig, parseQwen3VLConfig, type Qwen3VLConfig } from './config';
import { Decoder, LORA_PROJECTIONS, loraModuleName, view, type LayerLora, type VisualInputs } from './decoder';
import { generate } from './generate';
import { TableHead } from './lmHead';
import { getRopeIndex } from './processor/ropeIndex';
import type { Qwen3VLTokenizer } from './processor/tokenizer';
import { MissingFileError, type ModelFiles } from './safetensors';
import { loadWeights, type CachedLoadOptions } from './weightCache';
import { makeAttentionTensorCores, makeTensorCores, makeVisionProducts, type Products, type VisionProducts } from './products';
import { chooseVisionProducts, type VisionProductsSetting } from './visionProductsSetting';
import type { ActivationStorage } from './activationStorage';
import { chooseKvCache, type KvCacheSetting } from './kvCacheSetting';
import type { KvDtype } from '../ops/kvCache';
import { VISION_BLOCK_LORA, VisionCache, visionBlockLoraModuleName, visionLoraModuleName, VisionTower, type BlockLora, type GridThw, type MergerLora, type VisionBlockLayer, type VisionFeatures, type VisionLora, type VisionSaved } from './vision';
import type { ModelWeights } from './weights';

/** Images of one prompt, concatenated as the processor makes them. */
export interface ImageBatch {
  /** [Σ patches, 3·2·16·16] f32 */
  pixelValues: Float32Array;
  gridThw: readonly GridThw[];
}

export interface ModelOptions {
  /** Rows of hidden states the LM head turns into full logits at once (sampling: ≥ the samples per prompt). */
  maxLogitRows?: number;
  /** Sampling 2..8 sequences quantizes the activations entering each 4-bit GEMV to int8 (per
   * row and group of 32; MatmulQ4Options.int8): 1.3-1.5x faster decode steps on an H100, logits
   * within about 1e-3 of the f32 kernel's. One sequence's LM head takes x in two int8 limbs (within
   * 1.5e-5 of each group's largest |x|; 78 -> 67 µs a step on an H100); its other GEMVs keep f32.
   * Default: where WGSL offers packed dot products. Training and scoring always take f32. */
  int8Decode?: boolean;
  /** Where the decoder's and the LM head's 4-bit products of more than 8 rows (prefill, scoring,
   * training) and their input gradients run (setProducts; src/model/products.ts says what each
   * setting costs and gains). Default 'f32': the tensor-core settings need Chromium's
   * subgroup-matrix extension (and 'f16' shader-f16) and move each product slightly. */
  products?: Products;
  /** Where the vision tower's dense products (all but the patch embedding) run
   * (setVisionProducts): 'auto' (default: f16 while the decoder's products run on f16, else f32;
   * chooseVisionProducts), 'f32', 'int8' (its weights rounded to int8 per row and block of 128
   * along K once, x in two limbs) or 'f16' (each weight rounded to f16 as its product runs). The
   * tensor-core settings need Chromium's subgroup-matrix extension and move the image features
   * (BENCHMARKS.md gives by how much). */
  visionProducts?: VisionProductsSetting;
  /** Where training forwards keep the hidden states their backward reads (setActivationStorage;
   * src/model/activationStorage.ts). Default 'f32'; 'f16' needs shader-f16. */
  activationStorage?: ActivationStorage;
  /** How generation's KV cache stores K and V (EngineConfig.kv_cache, src/model/kvCacheSetting.ts):
   * 'auto' (default) is f16 while the products run on 'f16' and the device offers shader-f16, else
   * f32. 'f16' throws MissingFeatureError without shader-f16. */
  kvCache?: KvCacheSetting;
  /** Bytes of encoded image features kept by image key (VisionCache; default VISION_CACHE_BYTES):
   * a prompt group's images are encoded once for its sampling, old/ref log-probs and training chunks. */
  visionCacheBytes?: number;
}


/** Holds a generation batch's features: the 2B's 448x448 image takes 6.3 MiB (embeds and 3 DeepStack levels). */
const VISION_CACHE_BYTES = 256 * 2 ** 20;

/** Most rows of full logits computed per pass (a [rows, vocab] buffer must fit one binding). */
const LOGIT_HEADROOM = 0.85;

/** Attention on f16 tensor cores for `config` where the device offers them and they pass their
 * check; null otherwise (a failed check is a warning: the attention stays on the f32 kernels). */
async function checkedAttention(gpu: Gpu, config: AttentionConfig): Promise<AttentionF16 | null> {
  try {
    return await makeAttentionTensorCores(gpu, config);
  } catch (e) {
    if (!(e instanceof TensorCoreCheckError)) throw e;
    console.warn(e.message);
    return null;
  }
}

/** config.json, plus generation_config.json's stop ids when the folder has one. */
export async function readModelConfig(files: ModelFiles): Promise<Qwen3VLConfig> {
  const text = await files.text('config.json');
  if (text === null) throw new MissingFileError('config.json', files.location);
  const config = parseQwen3VLConfig(text);
  const gen = await files.text('generation_config.json');
  return gen === null ? config : applyGenerationConfig(config, gen);
}

export class Qwen3VL {
  /** The trainable adapters, layer by layer in LORA_PROJECTIONS order, then the vision mergers' (empty: none attached). */
  lora: readonly LoraParams[] = [];
  private layerLora: LayerLora[] | null = null;
  /** The vision tower's adapters (attachLora), or null when none is adapted. */
  visionLora: VisionLora | null = null;
  /** lora_dropout of the attached adapters in training forwards (attachLora). */
  loraDropout = 0;
  /** Decodes generated tokens to text when set. */
  tokenizer: Qwen3VLTokenizer | null = null;
  /** Whether `load` found the weights in the weight cache, and why a miss was not stored. */
  weightSource: { cached: boolean; cacheMessage?: string } = { cached: false };
  /** The decoder's tensor-core products while a setting other than 'f32' is on (setProducts). */
  private productOp: TensorCoreProducts | null = null;
  private productsSetting: Products = 'f32';
  /** The decoder's and the vision tower's attention on f16 tensor cores while in use (setProducts, setVisionProducts). */
  private attentionOp: AttentionF16 | null = null;
  private visionAttentionOp: AttentionF16 | null = null;
  /** The vision tower's tensor-core op while in use (setVisionProducts), its setting and what that resolved to. */
  private visionOp: TensorCoreProducts | null = null;
  private visionSetting: VisionProductsSetting = 'f32';
  private visionResolved: VisionProducts = 'f32';
  private storageSetting: ActivationStorage = 'f32';
  /** ModelOptions.kvCache (setKvCache), resolved at each generate against the products then in use. */
  private kvSetting: KvCacheSetting;

  private constructor(
    readonly gpu: Gpu,
    readonly config: Qwen3VLConfig,
    readonly weights: ModelWeights,
    readonly decoder: Decoder,
    readonly vision: VisionTower,
    readonly head: TableHead,
    private readonly sampler: Sampler,
    /** Every image's features, by key: the one place images go through the vision tower (encodeImages). */
    readonly visionCache: VisionCache,
    kvCache: KvCacheSetting,
  ) {
    this.kvSetting = kvCache;
  }

  static async create(gpu: Gpu, config: Qwen3VLConfig, weights: ModelWeights, opts: ModelOptions = {}): Promise<Qwen3VL> {
    // kv_cache 'f16' without shader-f16 is refused before anything is built, not at the first generate.
    checkKvCache(gpu, opts.kvCache ?? 'auto');
    const [decoder, vision, sampler] = await Promise.all([
      Decoder.create(gpu, config.text, weights.language, { int8: opts.int8Decode }),
      VisionTower.create(gpu, config, weights.vision),
      Sampler.create(gpu),
    ]);
    const head = new TableHead(gpu, decoder.ops.projection, weights.language.lmHead, opts.maxLogitRows ?? 64);
    const model = new Qwen3VL(gpu, config, weights, decoder, vision, head, sampler, new VisionCache(opts.visionCacheBytes ?? VISION_CACHE_BYTES), opts.kvCache ?? 'auto');
    if (opts.products) await model.setProducts(opts.products);
    await model.setVisionProducts(opts.visionProducts ?? 'auto');
    if (opts.activationStorage) model.setActivationStorage(opts.activationStorage);
    return model;
  }

  /**
   * Run the vision tower's dense products on `setting` (ModelOptions.visionProducts; 'auto' follows
   * setProducts from then on). Throws MissingFeatureError where the GPU lacks what the setting
   * needs, TensorCoreCheckError where its check fails; the tower then stays as it was.
   */
  async setVisionProducts(setting: VisionProductsSetting): Promise<void> {
    if (setting === 'auto') await this.followVision(this.productsSetting, setting);
    else await this.runVisionOn(setting);
    this.visionSetting = setting;
  }

  /** Make and check the tower's op for `v` (none for 'f32') and put the tower on it. */
  private async runVisionOn(v: VisionProducts): Promise<void> {
    if (v === this.visionResolved) return;
    const c = this.config.vision;
    const maxK = Math.max(c.hiddenSize, c.intermediateSize, c.hiddenSize * c.spatialMergeSize ** 2);
    const made = v === 'f32' ? null : await makeVisionProducts(this.gpu, v, { maxRows: VISION_MMA_ROWS, maxK });
    const attention = v === 'f32' ? null : await checkedAttention(this.gpu, { hq: c.numHeads, hkv: c.numHeads, headDim: c.hiddenSize / c.numHeads });
    await this.vision.useTensorCores(made, attention);
    // Its workspace back to the pool (useTensorCores waited for work in flight).
    this.visionOp?.release();
    this.visionOp = made;
    this.visionAttentionOp?.release();
    this.visionAttentionOp = attention;
    this.visionResolved = v;
    // Features encoded on the other path differ: encode again.
    this.visionCache.clear();
  }

  /** Where the vision tower's dense products run now (setVisionProducts' setting resolved). */
  get visionProducts(): VisionProducts {
    return this.visionResolved;
  }

  /** The vision tower's setting (setVisionProducts), 'auto' included. */
  get visionProductsSetting(): VisionProductsSetting {
    return this.visionSetting;
  }

  /**
   * Run the decoder's and the LM head's 4-bit products of more than 8 rows and their input
   * gradients on `products` (ModelOptions.products; the vision tower's are setVisionProducts'):
   * a tensor-core op is made and checked against the f64 product first (makeTensorCores), the one
   * it replaces is released with its workspace. Throws MissingFeatureError where the GPU lacks what
   * the setting needs and TensorCoreCheckError where its check fails; the model then stays as it was.
   */
  async setProducts(products: Products): Promise<void> {
    if (products === this.productsSetting) return;
    const t = this.config.text;
    const maxK = Math.max(t.hiddenSize, t.intermediateSize, t.numHeads * t.headDim);
    const made = products === 'f32' ? null : await makeTensorCores(this.gpu, products, { maxRows: TENSOR_CORE_ROWS, maxK });
    const projection = this.decoder.ops.projection;
    if (this.productOp) {
      // Work recorded on the old one may still be in flight: its buffers go back to the pool after.
      await projection.useTensorCores(null);
      await this.gpu.sync();
      this.productOp.release();
    }
    this.productOp = made;
    this.productsSetting = products;
    await projection.useTensorCores(made);
    await this.useAttentionTensorCores(products !== 'f32');
    await this.followVision(products);
  }

  /** An 'auto' tower follows the products; where its op fails its check it stays on the f32 units,
   * with a warning (as the attention does). */
  private async followVision(products: Products, setting = this.visionSetting): Promise<void> {
    const v = chooseVisionProducts(setting, products).vision;
    try {
      await this.runVisionOn(v);
    } catch (e) {
      if (!(e instanceof TensorCoreCheckError)) throw e;
      console.warn(`vision_products auto: the vision tower stays on the f32 units (${e.message})`);
      await this.runVisionOn('f32');
    }
  }

  /**
   * The decoder's attention over packed rows (training, scoring, prefill without a cache) on f16
   * tensor cores where the device offers them and a tensor-core setting is on; a device whose
   * check fails keeps the f32 kernels, with a warning.
   */
  private async useAttentionTensorCores(on: boolean): Promise<void> {
    if (on === (this.attentionOp !== null)) return;
    const t = this.config.text;
    const made = on ? await checkedAttention(this.gpu, { hq: t.numHeads, hkv: t.numKvHeads, headDim: t.headDim }) : null;
    this.decoder.ops.attention.useTensorCores(made);
    if (this.attentionOp) {
      await this.gpu.sync();
      this.attentionOp.release();
    }
    this.attentionOp = made;
  }

  /** Whether the decoder's attention over packed rows runs on f16 tensor cores (setProducts). */
  get attentionOnTensorCores(): boolean {
    return this.attentionOp !== null;
  }

  /** The setting the decoder's products run on (setProducts). */
  get products(): Products {
    return this.productsSetting;
  }

  /** Keep training forwards' hidden states in `s` from the next forward on (ModelOptions.activationStorage);
   * 'f16' throws MissingFeatureError without shader-f16. */
  setActivationStorage(s: ActivationStorage): void {
    if (s === 'f16') this.gpu.require('shader-f16', 'keeping activations in f16 (activation_storage f16)');
    this.storageSetting = s;
  }

  /** Where training forwards keep their hidden states (setActivationStorage). */
  get activationStorage(): ActivationStorage {
    return this.storageSetting;
  }

  /** ModelOptions.kvCache: how later generations store K and V. Throws MissingFeatureError for
   * 'f16' on a device without shader-f16 (the setting then stays). */
  setKvCache(setting: KvCacheSetting): void {
    checkKvCache(this.gpu, setting);
    this.kvSetting = setting;
  }

  /** The KV cache setting (setKvCache). */
  get kvCacheSetting(): KvCacheSetting {
    return this.kvSetting;
  }

  /** The KV cache's element type generation takes now (the setting against the products), and why. */
  get kvCache(): { dtype: KvDtype; why: string } {
    return chooseKvCache(this.kvSetting, this.productsSetting, this.gpu.has('shader-f16'));
  }


  /** Read config and weights from `files` (4-bit by default; through the weight cache when given) and build the model. */
  static async load(gpu: Gpu, files: ModelFiles, opts: CachedLoadOptions & ModelOptions = {}): Promise<Qwen3VL> {
    const config = await readModelConfig(files);
    const { weights, cached, cacheMessage } = await loadWeights(gpu, files, config, opts);
    const model = await Qwen3VL.create(gpu, config, weights, opts);
    model.weightSource = { cached, cacheMessage };
    return model;
  }

  /**
   * Attach adapters: any subset of each layer's projections (PEFT's target_modules), layer after
   * layer, in LORA_PROJECTIONS order within a layer, then any of the vision mergers' linear_fc1
   * and linear_fc2 (visionLoraModuleName) and the vision blocks' attn.qkv, attn.proj,
   * mlp.linear_fc1 and mlp.linear_fc2 (visionBlockLoraModuleName), named as PEFT names the
   * modules (src/adapter reads and writes them in that form). `dropout`: lora_dropout of training
   * forwards (default 0; the vision adapters take none).
   */
  attachLora(params: readonly LoraParams[], opts: { dropout?: number } = {}): void {
    const t = this.config.text;
    const dropout = opts.dropout ?? 0;
    if (!(dropout >= 0 && dropout < 1)) throw new ShapeError('lora', `lora_dropout must be in [0, 1), got ${dropout}`);
    const visual = params.filter((p) => p.name.startsWith('model.visual.'));
    const visionLora = this.visionAdapters(visual);
    if (visionLora && dropout > 0) throw new ShapeError('lora', `lora_dropout ${dropout} with adapters on the vision tower (${visual[0].name}, ...): the engine applies lora_dropout to the language model's projections only; use 0`);
    const q = t.numHeads * t.headDim;
    const kv = t.numKvHeads * t.headDim;
    const dims: Record<string, [number, number]> = {
      q: [q, t.hiddenSize],
      k: [kv, t.hiddenSize],
      v: [kv, t.hiddenSize],
      o: [t.hiddenSize, q],
      gate: [t.intermediateSize, t.hiddenSize],
      up: [t.intermediateSize, t.hiddenSize],
      down: [t.hiddenSize, t.intermediateSize],
    };
    const slots = Array.from({ length: t.numLayers }, (_, l) => LORA_PROJECTIONS.map((proj) => ({ l, proj, name: loraModuleName(l, proj) }))).flat();
    const layers: LayerLora[] = Array.from({ length: t.numLayers }, () => ({}));
    let at = 0;
    params.forEach((p, i) => {
      if (p.name.startsWith('model.visual.')) return;
      while (at < slots.length && !p.name.endsWith(slots[at].name)) at++;
      if (at === slots.length) throw new ShapeError('lora', `adapter ${i} is '${p.name}': not a projection of a layer, or out of order (layer after layer, ${LORA_PROJECTIONS.join(', ')} within one)`);
      const { l, proj } = slots[at++];
      const [out, inF] = dims[proj];
      if (p.out !== out || p.in !== inF) throw new ShapeError('lora', `${p.name} is [${p.out}, ${p.in}], the layer is [${out}, ${inF}]`);
      layers[l][proj] = p;
    });
    this.lora = params;
    this.layerLora = params.length > 0 ? layers : null;
    this.visionLora = visionLora;
    this.loraDropout = dropout;
  }

  /** The vision adapters by merger and block, checked against the tower's shapes; null when there are none. */
  private visionAdapters(params: readonly LoraParams[]): VisionLora | null {
    if (params.length === 0) return null;
    const v = this.config.vision;
    const H = v.hiddenSize;
    const merged = H * v.spatialMergeSize ** 2;
    const mergers: MergerLora[] = Array.from({ length: 1 + v.deepstackVisualIndexes.length }, () => ({}));
    const blocks: BlockLora[] = Array.from({ length: v.depth }, () => ({}));
    const dims: Record<VisionBlockLayer, [number, number]> = { qkv: [3 * H, H], proj: [H, H], fc1: [v.intermediateSize, H], fc2: [H, v.intermediateSize] };
    const slots = new Map<string, { holder: Record<string, LoraParams | undefined>; key: string; out: number; in: number }>();
    mergers.forEach((m, i) => ([1, 2] as const).forEach((fc) => slots.set(visionLoraModuleName(i, fc), { holder: m as Record<string, LoraParams | undefined>, key: `fc${fc}`, out: fc === 1 ? merged : v.outHiddenSize, in: merged })));
    blocks.forEach((b, i) => (Object.keys(VISION_BLOCK_LORA) as VisionBlockLayer[]).forEach((l) => slots.set(visionBlockLoraModuleName(i, l), { holder: b, key: l, out: dims[l][0], in: dims[l][1] })));
    const align = this.gpu.limits.minStorageBufferOffsetAlignment;
    for (const p of params) {
      const slot = slots.get(p.name);
      if (!slot) throw new ShapeError('lora', `'${p.name}' is not an adaptable vision module: the engine adapts the mergers' linear_fc1 and linear_fc2 (${visionLoraModuleName(0, 1)}, ${visionLoraModuleName(1, 1)}, ...) and the blocks' ${Object.values(VISION_BLOCK_LORA).join(', ')}`);
      if (p.out !== slot.out || p.in !== slot.in) throw new ShapeError('lora', `${p.name} is [${p.out}, ${p.in}], the layer is [${slot.out}, ${slot.in}]`);
      if (slot.holder[slot.key]) throw new ShapeError('lora', `${p.name} is attached twice`);
      // The fused qkv's B is used as three row views (splitQkvLora): each must start aligned.
      if (slot.key === 'qkv' && (4 * H * p.r) % align !== 0) throw new ShapeError('lora', `${p.name}: rank ${p.r} makes lora_B's q, k and v parts start ${4 * H * p.r} bytes apart, not a multiple of the device's ${align}-byte storage offset alignment`);
      slot.holder[slot.key] = p;
    }
    return { mergers, blocks };
  }

  /** The attached adapters by layer (throws when none are attached). */
  adapters(): LayerLora[] {
    return this.requireLora();
  }

  private get loraRank(): number {
    return Math.max(0, ...this.lora.map((p) => p.r));
  }

  /**
   * The prompt's image features placed at its image-pad rows. Images come through visionCache:
   * one it holds (same key) is not encoded again, the others are encoded together in one pass.
   * With `lora` and vision adapters attached, the features are the adapted mergers' and are
   * encoded afresh (encodeImagesWithLora). The returned tensors belong to the caller (release
   * with releaseVisual).
   */
  async encodeImages(inputIds: Int32Array, images: readonly PreparedImage[], opts: { lora?: boolean } = {}): Promise<VisualInputs> {
    if (opts.lora && this.visionLora) return (await this.encodeImagesWithLora(inputIds, images, false)).visual;
    // A call like the last gets its buffers, and their bind groups, again (BufferPool.reorder).
    this.gpu.pool.reorder();
    const rows = this.imageRows(inputIds, images);
    const rec = this.gpu.recorder('vision');
    const features = await this.vision.encodeImages(rec, images, this.visionCache);
    // The prompt's own copy in image order (cached entries may be evicted by a later prompt).
    const out = this.config.vision.outHiddenSize;
    const join = (pick: (f: VisionFeatures) => Tensor, label: string) => {
      const t = this.gpu.tensor([rows.length, out], 'f32', label);
      let at = 0;
      for (const f of features) {
        const src = pick(f);
        rec.copy(src, t, src.byteSize, 0, at);
        at += src.byteSize;
      }
      return t;
    };
    const embeds = join((f) => f.embeds, 'image embeds');
    const deepstack = features[0].deepstack.map((_, j) => join((f) => f.deepstack[j], `deepstack ${j}`));
    await rec.submit();
    return { rows: this.gpu.upload(Uint32Array.from(rows), [rows.length], 'u32', 'image rows'), embeds, deepstack };
  }

  /**
   * The prompt's image features through the adapted tower (visionLora), all its images in one
   * pass in prompt order, bypassing visionCache (the features change with the adapter). `keep`:
   * also return what VisionTower.backward reads (the caller releases it with
   * releaseVisionSaved); else null.
   */
  async encodeImagesWithLora(inputIds: Int32Array, images: readonly PreparedImage[], keep: boolean): Promise<{ visual: VisualInputs; saved: VisionSaved | null }> {
    if (!this.visionLora) throw new ShapeError('qwen3vl', 'vision LoRA requested but no vision adapters are attached');
    const rows = this.imageRows(inputIds, images);
    const saved: VisionSaved | undefined = keep ? { mergers: [], blocks: null } : undefined;
    const rec = this.gpu.recorder('vision lora');
    const f = await this.vision.encodePacked(rec, images, { adapters: this.visionLora, saved });
    await rec.submit();
    return { visual: { rows: this.gpu.upload(Uint32Array.from(rows), [rows.length], 'u32', 'image rows'), embeds: f.embeds, deepstack: f.deepstack }, saved: saved ?? null };
  }

  /** The prompt's image-pad rows, checked against the features its images make. */
  private imageRows(inputIds: Int32Array, images: readonly PreparedImage[]): number[] {
    const rows: number[] = [];
    inputIds.forEach((id, i) => id === this.config.tokens.image && rows.push(i));
    const merge = this.config.vision.spatialMergeSize ** 2;
    const need = images.reduce((a, { gridThw: [t, h, w] }) => a + (t * h * w) / merge, 0);
    if (rows.length !== need) {
      throw new ShapeError('qwen3vl', `the prompt has ${rows.length} image tokens, but its ${images.length} image(s) make ${need} features`);
    }
    return rows;
  }

  /** Positions of a prompt (spec B4) and its rope delta; throws on ids outside the vocabulary. */
  positions(inputIds: Int32Array, gridThw: readonly GridThw[]): { positions: Int32Array; ropeDelta: number } {
    const t = this.config.tokens;
    const vocab = this.config.text.vocabSize;
    const bad = inputIds.findIndex((id) => id < 0 || id >= vocab);
    if (bad >= 0) throw new ShapeError('qwen3vl', `token ${bad} of the prompt is ${inputIds[bad]}, outside the vocabulary of ${vocab}`);
    return getRopeIndex(inputIds, gridThw, { imageTokenId: t.image, visionStartTokenId: t.visionStart, spatialMergeSize: this.config.vision.spatialMergeSize });
  }

  /** Logits [T, vocab] of every position of one sequence (f32, row-major). */
  async logits(inputIds: Int32Array, images?: ImageBatch, opts: { lora?: boolean } = {}): Promise<Float32Array> {
    const gpu = this.gpu;
    const T = inputIds.length;
    const { positions } = this.positions(inputIds, images?.gridThw ?? []);
    const visual = images && images.gridThw.length > 0 ? await this.encodeImages(inputIds, splitImages(images, images.gridThw.map((_, k) => pixelKey(images, k))), { lora: opts.lora }) : undefined;
    const vocab = this.head.vocab;
    const H = this.config.text.hiddenSize;
    const chunkRows = Math.max(1, Math.min(T, this.head.maxRows, Math.floor((gpu.limits.maxStorageBufferBindingSize * LOGIT_HEADROOM) / (4 * vocab))));
    const ws = this.decoder.workspace(T, opts.lora ? this.loraRank : 0);
    const ids = gpu.upload(Uint32Array.from(inputIds), [T], 'u32', 'input_ids');
    const cu = gpu.upload([0, T], [2], 'u32', 'cu_seqlens');
    const hChunk = gpu.tensor([chunkRows, H], 'f32', 'logits.hidden');
    const lChunk = gpu.tensor([chunkRows, vocab], 'f32', 'logits.chunk');
    const out = new Float32Array(T * vocab);
    try {
      const rec = gpu.recorder('logits');
      const h = this.decoder.forward(rec, ws, {
        ids,
        idsHost: inputIds,
        positions,
        attend: { kind: 'packed', cuSeqlens: cu },
        visual,
        lora: opts.lora ? this.requireLora() : null,
      });
      for (let r0 = 0; r0 < T; r0 += chunkRows) {
        const n = Math.min(chunkRows, T - r0);
        const hc = view(hChunk, [n, H]);
        const lc = view(lChunk, [n, vocab]);
        rec.copy(h, hc, n * H * 4, r0 * H * 4);
        this.head.fullLogits(rec, hc, lc);
        await rec.submit();
        out.set(await gpu.readF32(lc), r0 * vocab);
      }
    } finally {
      for (const t of [ids, cu, hChunk, lChunk]) t.release();
      ws.release();
      if (visual) releaseVisual(visual);
    }
    return out;
  }

  /** The ids that open and close a thinking block: as given, else the tokenizer's <think> and </think>. */
  private thinkingTokens(given?: { start: number; end: readonly number[] }): { startId: number; endIds: readonly number[] } {
    let ids: { startId: number; endIds: readonly number[] };
    if (given) ids = { startId: given.start, endIds: given.end };
    else if (!this.tokenizer) throw new ShapeError('qwen3vl', 'a thinking budget needs the tokenizer (for <think> and </think>) or explicit thinking token ids');
    else {
      try {
        ids = { startId: this.tokenizer.tokenId(THINK_OPEN), endIds: this.tokenizer.encode(THINK_CLOSE) };
      } catch (e) {
        throw new ShapeError('qwen3vl', `thinking budget: ${(e as Error).message}`);
      }
    }
    // A forced id is fed back to the embedding: it must be one of the model's tokens.
    const outside = [ids.startId, ...ids.endIds].find((id) => !(id >= 0 && id < this.head.vocab));
    if (outside !== undefined) throw new ShapeError('qwen3vl', `thinking budget: token ${outside} (${given ? 'given' : `${THINK_OPEN} / ${THINK_CLOSE}`}) is outside the model's vocabulary of ${this.head.vocab}`);
    return ids;
  }

  private requireLora(): LayerLora[] {
    if (!this.layerLora) throw new ShapeError('qwen3vl', 'LoRA requested but no adapters are attached');
    return this.layerLora;
  }

  /**
   * G completions of one prompt: prefill once, fork the cache, sample (Policy.generate).
   * `lora` (default: when adapters are attached) selects the adapted or the base model;
   * `stopIds` defaults to the config's eos ids; `thinkingTokens` (what opens and closes a thinking
   * block, for `opts.thinkingBudget`) to the tokenizer's <think> and </think>.
   */
  async generate(
    prompt: PreparedPrompt,
    numSamples: number,
    opts: SamplingOptions,
    extra: { lora?: boolean; stopIds?: readonly number[]; thinkingTokens?: { start: number; end: readonly number[] } } = {},
  ): Promise<Completion[]> {
    const thinking = opts.thinkingBudget === undefined || opts.thinkingBudget === null ? undefined : { budget: opts.thinkingBudget, opened: prompt.thinking ?? false, ...this.thinkingTokens(extra.thinkingTokens) };
    const { positions, ropeDelta } = this.positions(prompt.inputIds, prompt.images.map((i) => i.gridThw));
    // A generation like the last gets its buffers, and their bind groups, again (BufferPool.reorder).
    this.gpu.pool.reorder();
    const useLora = extra.lora ?? this.layerLora !== null;
    const visual = prompt.images.length > 0 ? await this.encodeImages(prompt.inputIds, prompt.images, { lora: useLora }) : undefined;
    try {
      const seqs = await generate(
        { gpu: this.gpu, decoder: this.decoder, head: this.head, sampler: this.sampler, loraRank: useLora ? this.loraRank : 0, kvCache: this.kvCache.dtype },
        {
          inputIds: prompt.inputIds,
          positions,
          ropeDelta,
          visual,
          numSamples,
          sampling: { temperature: opts.temperature, topK: opts.topK, topP: opts.topP, minP: opts.minP, repetitionPenalty: opts.repetitionPenalty },
          maxNewTokens: opts.maxNewTokens,
          seed: opts.seed,
          stopIds: extra.stopIds ?? this.config.tokens.eos,
          thinking,
          lora: useLora ? this.requireLora() : null,
          onTokens: opts.onTokens,
        },
      );
      return seqs.map((s) => ({
        tokens: s.tokens,
        text: this.tokenizer ? this.tokenizer.decode(s.tokens, true) : '',
        samplingLogps: s.logps,
        terminated: s.terminated,
      }));
    } finally {
      if (visual) releaseVisual(visual);
    }
  }
}

/** Throws MissingFeatureError where `setting` cannot run on `gpu` (f16 without shader-f16; the products do not matter). */
function checkKvCache(gpu: Gpu, setting: KvCacheSetting): void {
  chooseKvCache(setting, 'f32', gpu.has('shader-f16'));
}

export function releaseVisual(v: VisualInputs): void {
  for (const t of [v.rows, v.embeds, ...v.deepstack] as Tensor[]) t.release();
}

/** The per-image form (Policy's PreparedImage) of a processor batch; keys are given per image. */
export function splitImages(batch: ImageBatch, keys: readonly string[]): PreparedImage[] {
  const patches = batch.gridThw.map(([t, h, w]) => t * h * w);
  const width = batch.pixelValues.length / Math.max(1, patches.reduce((a, b) => a + b, 0));
  let start = 0;
  return batch.gridThw.map(([t, h, w], k) => {
    const pixelValues = batch.pixelValues.subarray(start * width, (start + patches[k]) * width);
    start += patches[k];
    return { pixelValues, gridThw: [t, h, w], key: keys[k] };
  });
}

/**
 * A content key for image k of a processor batch (callers without keys of their own): two 32-bit
 * FNV-1a hashes over its grid and its pixel values' bits. Equal pixels give equal keys.
 */
export function pixelKey(batch: ImageBatch, k: number): string {
  const patches = batch.gridThw.map(([t, h, w]) => t * h * w);
  const width = batch.pixelValues.length / Math.max(1, patches.reduce((a, b) => a + b, 0));
  const start = patches.slice(0, k).reduce((a, b) => a + b, 0) * width;
  const bits = new Uint32Array(batch.pixelValues.buffer, batch.pixelValues.byteOffset + 4 * start, patches[k] * width);
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ 0x5bd1e995;
  const mix = (word: number) => {
    a = Math.imul(a ^ word, 0x01000193);
    b = Math.imul(b ^ word, 0x01000193) + 0x9e3779b9;
  };
  batch.gridThw[k].forEach(mix);
  for (let i = 0; i < bits.length; i++) mix(bits[i]);
  const hex = (x: number) => (x >>> 0).toString(16).padStart(8, '0');
  return `pixels-${batch.gridThw[k].join('x')}-${hex(a)}${hex(b)}`;
}

