// Checkpoint -> ModelWeights on the GPU (src/model/weights.ts), as tensors stream in one at a time.
//
// What goes where (src/model/memoryPlan.ts states the same plan):
//   - LM linear layers, embed_tokens and an untied lm_head: 4-bit (quant 'q4', the default),
//     quantized on the GPU from the checkpoint's raw bytes (uploaded as u32 words, quantized by
//     QuantizeQ4, released); f32 with quant 'none'. These matrices are read, uploaded and
//     quantized in pieces of whole rows (PIECE_BYTES, less where the binding limit is lower): the
//     host holds one piece, never a whole tensor (an 8B's embedding is 1.2 GB of bf16), and the
//     loader waits for the GPU whenever IN_FLIGHT_BYTES of uploads are queued (Dawn keeps each
//     write's staging copy in host memory until the GPU has done with it).
//   - The token tables are split into row blocks (TokenTable) so that no buffer exceeds the
//     device's storage-binding limit. A split table's blocks are multiples of TABLE_ROW_ALIGN
//     rows, so that the LM head's vocabulary chunks (src/ops/logprob.ts, 8192 wide) never
//     straddle two blocks; a GPU that cannot hold that many rows in a buffer is refused by name.
//   - Norms: f32 (bf16/f16 decoded on the CPU). The vision tower: its matrices in the checkpoint's
//     own halves (bf16 for the published models), the rest f32, by src/model/vision.ts's
//     loadVisionWeights (the Conv3d patch embedding [hidden, 3, 2, 16, 16] as the dense
//     [hidden, 1536] it is: its flatten order (channel, frame, y, x) is the processor's; the
//     fused qkv split into q, k and v). Its 4-bit option stays off here: on the tiny fixtures it
//     moves the image features by 15-17% relative RMS (test/unit/model-vision.test.ts).
import { BufferAllocationError, Tensor, type Gpu, type Recorder } from '../gpu';
import { allocQ4 } from '../ops/matmulQ4';
import { QuantizeQ4 } from '../ops/quantizeQ4';
import type { Qwen3VLConfig } from './config';
import { sourceFormat, toFloat32 } from './dtype';
import { openCheckpoint, type Checkpoint, type CheckpointTensor, type ModelFiles, type Progress } from './safetensors';
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
  /** Checkpoint bytes of a matrix read and uploaded at once (default PIECE_BYTES, 16 MiB). */
  pieceBytes?: number;
}

/** Token-table blocks start on multiples of this many rows (a multiple of the LM head's chunk). */
export const TABLE_ROW_ALIGN = 8192;
/** Pooled buffers are rounded up to size classes (≤ 12.5% more): stay below the binding limit after rounding. */
const BINDING_HEADROOM = 0.85;
/** Checkpoint bytes of a matrix read and uploaded at once. */
const PIECE_BYTES = 16 * 2 ** 20;
/** Uploads queued before the loader waits for the GPU to finish them. */
const IN_FLIGHT_BYTES = 256 * 2 ** 20;

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

  /** Most bytes one buffer may take here (after the pool's rounding). */
  private get bufferLimit(): number {
    return Math.min(this.gpu.limits.maxStorageBufferBindingSize, this.gpu.limits.maxBufferSize) * BINDING_HEADROOM;
  }

  /** Rows per block of the token table `label` [vocab, hidden] at `quant`: all of them when they fit one buffer. */
  tableRows(label: string, vocab: number, hidden: number, quant: Quantization, maxRows?: number): number {
    const limit = this.bufferLimit;
    const stored = quant === 'q4' ? hidden / 2 : hidden * 4;
    let rows = Math.floor(limit / stored);
    if (maxRows !== undefined) rows = Math.min(rows, maxRows);
    if (rows >= vocab) return vocab;
    if (rows >= TABLE_ROW_ALIGN) return rows - (rows % TABLE_ROW_ALIGN);
    if (maxRows === undefined) {
      throw new BufferAllocationError(
        label,
        TABLE_ROW_ALIGN * stored,
        `a split token table needs blocks of ${TABLE_ROW_ALIGN} rows (the LM head's vocabulary chunk), over this GPU's buffer limit (maxStorageBufferBindingSize ${this.gpu.limits.maxStorageBufferBindingSize}, maxBufferSize ${this.gpu.limits.maxBufferSize})`,
      );
    }
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
    // Norms whole (a vector each), then the matrices piece by piece, in file order.
    const isMatrix = (n: string) => {
      const c = canonicalWeightName(n);
      return LINEAR.test(c) || c === 'model.language_model.embed_tokens.weight' || c === 'lm_head.weight';
    };
    const vectors = new Set([...wanted].filter((n) => !isMatrix(n)));
    const vectorBytes = [...vectors].reduce((a, n) => a + ckpt.tensors.get(n)!.byteLength, 0);
    for await (const { tensor, bytes } of ckpt.stream({ names: vectors, signal: opts.signal, onProgress: progress(0) })) {
      const name = canonicalWeightName(tensor.name);
      const norm = LAYER_NORM.exec(name);
      if (norm) {
        const slot = ({ input_layernorm: 'inputNorm', post_attention_layernorm: 'postAttentionNorm', 'self_attn.q_norm': 'qNorm', 'self_attn.k_norm': 'kNorm' } as const)[
          norm[2] as 'input_layernorm'
        ];
        layers[Number(norm[1])][slot] = this.f32(tensor, bytes, [tensor.shape[0]]);
      } else if (name === 'model.language_model.norm.weight') {
        finalNorm = this.f32(tensor, bytes, tensor.shape);
      } else {
        throw new WeightShapeError(`checkpoint tensor '${tensor.name}' has no place in the model`);
      }
    }
    const matrices = [...wanted].filter(isMatrix).map((n) => ckpt.tensors.get(n)!);
    matrices.sort((a, b) => ckpt.files.indexOf(a.file) - ckpt.files.indexOf(b.file) || a.offset - b.offset);
    const pieceBytes = Math.min(opts.pieceBytes ?? PIECE_BYTES, this.bufferLimit);
    const pieces = new Pieces(this.gpu, ckpt, rec, this.quantizer, pieceBytes, opts.signal, progress(vectorBytes), lmBytes - vectorBytes);
    for (const tensor of matrices) {
      const name = canonicalWeightName(tensor.name);
      const lin = LINEAR.exec(name);
      if (lin) {
        const key = lin[2] as 'q' | 'k' | 'v' | 'o' | 'gate' | 'up' | 'down';
        layers[Number(lin[1])][key] = await this.linear(pieces, tensor, quant);
      } else {
        tables.set(name, await this.table(pieces, tensor, quant, opts.maxTableRows));
      }
    }
    await rec.submit();
    // The raw staging buffers went back to the pool; give their memory back to the device.
    this.gpu.pool.trim();

    // The vision tower's own loader (matrices in the checkpoint's halves, patch embedding flattened, qkv split): a second pass over its tensors.
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

  private async linear(pieces: Pieces, tensor: CheckpointTensor, quant: Quantization): Promise<LinearWeight> {
    const [out, inF] = tensor.shape;
    const w = this.alloc(out, inF, quant, tensor.name);
    await pieces.fill(tensor, 0, w);
    return w;
  }

  private alloc(out: number, inF: number, quant: Quantization, label: string): LinearWeight {
    return quant === 'q4' ? { kind: 'q4', w: allocQ4(this.gpu, out, inF, label), out, in: inF } : { kind: 'dense', w: this.gpu.tensor([out, inF], 'f32', label), out, in: inF };
  }

  private async table(pieces: Pieces, tensor: CheckpointTensor, quant: Quantization, maxRows?: number): Promise<TokenTable> {
    const [vocab, hidden] = tensor.shape;
    const rows = this.tableRows(tensor.name, vocab, hidden, quant, maxRows);
    const blocks: LinearWeight[] = [];
    const rowStart: number[] = [];
    for (let r0 = 0; r0 < vocab; r0 += rows) {
      const n = Math.min(rows, vocab - r0);
      const block = this.alloc(n, hidden, quant, `${tensor.name}[${r0}:${r0 + n}]`);
      await pieces.fill(tensor, r0, block);
      rowStart.push(r0);
      blocks.push(block);
    }
    return { blocks, rowStart, vocab, hidden };
  }
}

/** Rows of checkpoint matrices into GPU weights, a piece at a time (the host holds one piece). */
class Pieces {
  private queued = 0;
  private done = 0;

  constructor(
    private readonly gpu: Gpu,
    private readonly ckpt: Checkpoint,
    private readonly rec: Recorder,
    private readonly quantizer: QuantizeQ4,
    private readonly pieceBytes: number,
    private readonly signal: AbortSignal | undefined,
    private readonly onProgress: ((p: Progress) => void) | undefined,
    private readonly total: number,
  ) {}

  /** Checkpoint rows [r0, r0 + w.out) of `tensor` into `w`: quantized (q4) or decoded to f32 ('none'). */
  async fill(tensor: CheckpointTensor, r0: number, w: LinearWeight): Promise<void> {
    const inF = w.in;
    const rowBytes = tensor.byteLength / tensor.shape[0];
    // A 4-bit piece's raw rows are a buffer of their own; even rows: it must start on an even group of 32.
    const rows = Math.max(2, Math.floor(this.pieceBytes / rowBytes) & ~1);
    for (let a = 0; a < w.out; a += rows) {
      const m = Math.min(rows, w.out - a);
      const bytes = await this.ckpt.readRows(tensor.name, r0 + a, m, this.signal);
      if (w.kind === 'q4') {
        const src = this.gpu.upload(bytes, [bytes.byteLength / 4], 'u32', `${tensor.name} (raw rows ${r0 + a}:${r0 + a + m})`);
        this.quantizer.quantize(this.rec, src, sourceFormat(tensor.name, tensor.dtype), w.w, a);
        this.rec.flush();
        // Queue order: a later write into this buffer lands after the quantization just submitted.
        src.release();
      } else {
        this.gpu.write(new Tensor(w.w.buffer, [m * inF], 'f32', w.w.label, w.w.byteOffset + a * inF * 4), toFloat32(bytes, tensor.dtype));
      }
      this.done += bytes.byteLength;
      this.onProgress?.({ bytesDone: this.done, bytesTotal: this.total, file: tensor.file, tensor: tensor.name });
      this.queued += bytes.byteLength;
      if (this.queued >= IN_FLIGHT_BYTES) {
        await this.gpu.device.queue.onSubmittedWorkDone();
        this.queued = 0;
      }
    }
  }
}

function complete(l: Partial2<DecoderLayerWeights>, prefix: string): DecoderLayerWeights {
  const keys = ['inputNorm', 'postAttentionNorm', 'q', 'k', 'v', 'o', 'qNorm', 'kNorm', 'gate', 'up', 'down'] as const;
  for (const k of keys) if (!l[k]) throw new WeightShapeError(`checkpoint lacks a tensor of ${prefix} (${k})`);
  return l as DecoderLayerWeights;
}
