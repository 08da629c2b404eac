// Checkpoint -> ModelWeights on the GPU (src/model/weights.ts), as tensors stream in one at a time.
//
// What goes where (src/model/memoryPlan.ts states the same plan):
//   - LM linear layers, embed_tokens and an untied lm_head: 4-bit (quant 'q4', the default),
//     quantized on the GPU from the checkpoint's raw bytes (uploaded as u32 words, quantized by
//     QuantizeQ4, released); f32 with quant 'none'.
//   - The token tables are split into row blocks (TokenTable) so that no buffer, the staging one
//     included, exceeds the device's storage-binding limit. Block sizes are multiples of
//     TABLE_ROW_ALIGN rows, so that the LM head's vocabulary chunks (src/ops/logprob.ts, 8192
//     wide) never straddle two blocks.
//   - Norms: f32 (bf16/f16 decoded on the CPU). The vision tower: f32, by src/model/vision.ts's
//     loadVisionWeights (the Conv3d patch embedding [hidden, 3, 2, 16, 16] as the dense
//     [hidden, 1536] it is: its flatten order (channel, frame, y, x) is the processor's; the
//     fused qkv split into q, k and v). Its 4-bit option stays off here: on the tiny fixtures it
//     moves the image features by 15-17% relative RMS (test/unit/model-vision.test.ts).
import type { Gpu, Recorder, Tensor } from '../gpu';
import { allocQ4 } from '../ops/matmulQ4';
import { QuantizeQ4 } from '../ops/quantizeQ4';
import type { Qwen3VLConfig } from './config';
import { sourceFormat, toFloat32, type SafetensorsDtype } from './dtype';
import { openCheckpoint, type CheckpointTensor, type ModelFiles, type Progress } from './safetensors';
import { loadVisionWeights } from './vision';
import { canonicalWeightName, checkCheckpointTensors, WeightShapeError } from './weightShapes';
import type { DecoderLayerWeights, LinearWeight, ModelWeights, TokenTable } from './weights';

export type Quantization = 'q4' | 'none';

export interface LoadProgress {
  bytesDone: number;
  bytesTotal: number;
  tensor: string;
  /** Set when the bytes come from the weight cache (src/model/weightCache.ts), not the checkpoint. */
  fromCache?: boolean;
}

export interface LoadOptions {
  /** 'q4' (default) or 'none' (f32 everywhere: parity runs, small models). */
  quant?: Quantization;
  onProgress?: (p: LoadProgress) => void;
  signal?: AbortSignal;
  /** Most rows per token-table block; by default what the storage-binding limit allows. */
  maxTableRows?: number;
}

/** Token-table blocks start on multiples of this many rows (a multiple of the LM head's chunk). */
export const TABLE_ROW_ALIGN = 8192;
/** Pooled buffers are rounded up to size classes (≤ 12.5% more): stay below the binding limit after rounding. */
const BINDING_HEADROOM = 0.85;

const LINEAR = /^model\.language_model\.layers\.(\d+)\.(?:self_attn|mlp)\.(q|k|v|o|gate|up|down)_proj\.weight$/;
const LAYER_NORM = /^model\.language_model\.layers\.(\d+)\.(input_layernorm|post_attention_layernorm|self_attn\.q_norm|self_attn\.k_norm)\.weight$/;

/** The weights being filled in; every slot is checked to be set at the end. */
type Partial2<T> = { -readonly [K in keyof T]?: T[K] };

export class WeightLoader {
  private constructor(
    private readonly gpu: Gpu,
    private readonly quantizer: QuantizeQ4,
  ) {}

  static async create(gpu: Gpu): Promise<WeightLoader> {
    return new WeightLoader(gpu, await QuantizeQ4.create(gpu));
  }

  /** Rows per token-table block for rows of `hidden` values read as `dtype`. */
  tableRows(hidden: number, dtype: SafetensorsDtype, quant: Quantization, maxRows?: number): number {
    const limit = this.gpu.limits.maxStorageBufferBindingSize * BINDING_HEADROOM;
    const raw = hidden * (dtype === 'F32' ? 4 : 2);
    const stored = quant === 'q4' ? hidden / 2 : hidden * 4;
    let rows = Math.floor(limit / Math.max(raw, stored));
    if (maxRows !== undefined) rows = Math.min(rows, maxRows);
    if (rows >= TABLE_ROW_ALIGN) rows -= rows % TABLE_ROW_ALIGN;
    else if (maxRows === undefined) throw new WeightShapeError(`token table rows of ${hidden} values do not fit ${TABLE_ROW_ALIGN} to a buffer on this GPU`);
    return Math.max(1, rows);
  }

  /** Stream the checkpoint in `files` onto the GPU. Throws naming the tensor on a missing or misshapen one. */
  async load(files: ModelFiles, config: Qwen3VLConfig, opts: LoadOptions = {}): Promise<ModelWeights> {
    const quant = opts.quant ?? 'q4';
    const ckpt = await openCheckpoint(files, opts.signal);
    const found = checkCheckpointTensors(config, ckpt.tensors.values());
    // A tied checkpoint may still carry lm_head.weight: the embedding serves as the head.
    const wanted = new Set(
      [...found].filter(([c]) => !c.startsWith('model.visual.') && !(c === 'lm_head.weight' && config.tieWordEmbeddings)).map(([, n]) => n),
    );
    const lmBytes = [...wanted].reduce((a, n) => a + ckpt.tensors.get(n)!.byteLength, 0);
    const visionBytes = [...found].filter(([c]) => c.startsWith('model.visual.')).reduce((a, [, n]) => a + ckpt.tensors.get(n)!.byteLength, 0);
    const progress = (offset: number) =>
      opts.onProgress && ((p: Progress) => opts.onProgress!({ bytesDone: offset + p.bytesDone, bytesTotal: lmBytes + visionBytes, tensor: p.tensor }));
    const t = config.text;
    const layers: Partial2<DecoderLayerWeights>[] = Array.from({ length: t.numLayers }, () => ({}));
    const tables = new Map<string, TokenTable>();
    let finalNorm: Tensor | null = null;

    const rec = this.gpu.recorder('load weights');
    for await (const { tensor, bytes } of ckpt.stream({
      names: wanted,
      signal: opts.signal,
      onProgress: progress(0),
    })) {
      const name = canonicalWeightName(tensor.name);
      const lin = LINEAR.exec(name);
      const norm = LAYER_NORM.exec(name);
      if (lin) {
        const key = lin[2] as 'q' | 'k' | 'v' | 'o' | 'gate' | 'up' | 'down';
        layers[Number(lin[1])][key] = this.linear(rec, tensor, bytes, quant);
      } else if (norm) {
        const slot = ({ input_layernorm: 'inputNorm', post_attention_layernorm: 'postAttentionNorm', 'self_attn.q_norm': 'qNorm', 'self_attn.k_norm': 'kNorm' } as const)[
          norm[2] as 'input_layernorm'
        ];
        layers[Number(norm[1])][slot] = this.f32(tensor, bytes, [tensor.shape[0]]);
      } else if (name === 'model.language_model.norm.weight') {
        finalNorm = this.f32(tensor, bytes, tensor.shape);
      } else if (name === 'model.language_model.embed_tokens.weight' || name === 'lm_head.weight') {
        tables.set(name, this.table(rec, tensor, bytes, quant, opts.maxTableRows));
      } else {
        throw new WeightShapeError(`checkpoint tensor '${tensor.name}' has no place in the model`);
      }
    }
    await rec.submit();
    // The raw staging buffers went back to the pool; give their memory back to the device.
    this.gpu.pool.trim();

    // The vision tower's own loader (f32, patch embedding flattened, qkv split): a second pass over its tensors.
    const vision = await loadVisionWeights(this.gpu, ckpt, config, { signal: opts.signal, onProgress: progress(lmBytes) });
    const embed = tables.get('model.language_model.embed_tokens.weight')!;
    return {
      language: {
        embed,
        lmHead: config.tieWordEmbeddings ? embed : tables.get('lm_head.weight')!,
        layers: layers.map((l, i) => complete(l, `model.language_model.layers.${i}`)),
        finalNorm: finalNorm!,
      },
      vision,
    };
  }

  private f32(tensor: CheckpointTensor, bytes: Uint8Array, shape: readonly number[]): Tensor {
    return this.gpu.upload(toFloat32(bytes, tensor.dtype), shape, 'f32', tensor.name);
  }

  /** Raw checkpoint bytes as u32 words (two f16/bf16 values, or one f32, per word). */
  private raw(bytes: Uint8Array, label: string): Tensor {
    return this.gpu.upload(bytes, [bytes.byteLength / 4], 'u32', `${label} (raw)`);
  }

  private linear(rec: Recorder, tensor: CheckpointTensor, bytes: Uint8Array, quant: Quantization): LinearWeight {
    const [out, inF] = tensor.shape;
    if (quant === 'none') return { kind: 'f32', w: this.f32(tensor, bytes, tensor.shape), out, in: inF };
    const w = allocQ4(this.gpu, out, inF, tensor.name);
    const src = this.raw(bytes, tensor.name);
    this.quantizer.quantize(rec, src, sourceFormat(tensor.name, tensor.dtype), w);
    rec.flush();
    // Queue order: a later write into this buffer lands after the quantization just submitted.
    src.release();
    return { kind: 'q4', w, out, in: inF };
  }

  private table(rec: Recorder, tensor: CheckpointTensor, bytes: Uint8Array, quant: Quantization, maxRows?: number): TokenTable {
    const [vocab, hidden] = tensor.shape;
    const rows = this.tableRows(hidden, tensor.dtype, quant, maxRows);
    const rowBytes = bytes.byteLength / vocab;
    const blocks: LinearWeight[] = [];
    const rowStart: number[] = [];
    for (let r0 = 0; r0 < vocab; r0 += rows) {
      const n = Math.min(rows, vocab - r0);
      const part = bytes.subarray(r0 * rowBytes, (r0 + n) * rowBytes);
      const label = `${tensor.name}[${r0}:${r0 + n}]`;
      rowStart.push(r0);
      if (quant === 'none') {
        blocks.push({ kind: 'f32', w: this.gpu.upload(toFloat32(part, tensor.dtype), [n, hidden], 'f32', label), out: n, in: hidden });
        continue;
      }
      const w = allocQ4(this.gpu, n, hidden, label);
      const src = this.raw(part, label);
      this.quantizer.quantize(rec, src, sourceFormat(tensor.name, tensor.dtype), w);
      rec.flush();
      src.release();
      blocks.push({ kind: 'q4', w, out: n, in: hidden });
    }
    return { blocks, rowStart, vocab, hidden };
  }
}

function complete(l: Partial2<DecoderLayerWeights>, prefix: string): DecoderLayerWeights {
  const keys = ['inputNorm', 'postAttentionNorm', 'q', 'k', 'v', 'o', 'qNorm', 'kNorm', 'gate', 'up', 'down'] as const;
  for (const k of keys) if (!l[k]) throw new WeightShapeError(`checkpoint lacks a tensor of ${prefix} (${k})`);
  return l as DecoderLayerWeights;
}
