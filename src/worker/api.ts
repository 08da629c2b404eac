// The engine worker's API as the page sees it (through comlink). Every method is async on the
// page side; long work reports progress through callbacks the page wraps with Comlink.proxy.
// The GPU, the model and the trainer live in the worker only: the page never blocks on them.
import type { PeftAdapter } from '../adapter/peft';
import type { DatasetRow } from '../data/types';
import type { EvalProgress } from '../eval/runner';
import type { AnswerFormat, AnswerMatch, EvalRun } from '../eval/records';
import type { ThinkingMode } from '../model/processor/chat';
import type { LoadProgress } from '../model/loader';
import type { ProductPath, Products } from '../model/products';
import type { RewardTerm } from '../rewards/registry';
import type { SamplingOptions } from '../rl/policy';
import type { PhaseBuffers } from '../rl/engineConfig';
import type { PoolStats } from '../gpu/tensor';
import type { SeenAdapter } from '../store/db';
import type { TrainerApi } from './trainerApi';

export type ModelSource =
  /** The bundled demo model, served from public/demo. */
  | { kind: 'demo' }
  | { kind: 'hub'; repo: string; revision?: string; token?: string }
  /** A model folder the user picked (config.json, safetensors shards, tokenizer files, ...). */
  | { kind: 'files'; files: File[] }
  /**
   * Files picked before a reload: `files` holds their small files (config, tokenizer), and the
   * weights come from the weight cache entry `fingerprint` names (a miss is an error, never a fallback).
   */
  | { kind: 'cached-files'; files: File[]; fingerprint: string };

export interface LoadedModel {
  /** Where it came from ("public/demo", "org/name@main", "the picked files"). */
  location: string;
  /** What an exported adapter names as its base model: the hub repo id, 'vlrl-demo' for the bundled demo, null for picked files. */
  baseModel: string | null;
  layers: number;
  hiddenSize: number;
  vocabSize: number;
  /** True when the weights came from the browser's weight cache (no download, no quantization). */
  cached: boolean;
  /** Why the weights could not be cached after a download (e.g. too little storage), if so. */
  cacheMessage?: string;
  /** Picked files: the content fingerprint their weights are cached under (a reload loads them with it). */
  fingerprint?: string;
  /** Where its large products run (ProductsState.current). */
  products: Products;
  /** Why the tensor cores chosen for it could not start (it runs on the f32 units then), if so. */
  productsMessage?: string;
}

/** Where the model's large 4-bit products run (src/model/products.ts) and what this GPU allows. */
export interface ProductsState {
  /** The loaded model's setting; with none loaded, the one the next load takes. */
  current: Products;
  /** Each path family: null where this GPU runs it, else why not (productPaths). */
  paths: Record<ProductPath, string | null>;
}

export interface EvalRequest {
  /** Held-out rows; default the rows handed over with setDataset. */
  rows?: DatasetRow[];
  terms: RewardTerm[];
  answerFormat: AnswerFormat;
  /** What the run's summary counts as correct (default 'numeric'); records keep both. */
  answerMatch?: AnswerMatch;
  sampling: SamplingOptions;
  samplesPerRow?: number;
  /** Evaluate the base model (false) or the trained adapters (true, the default when attached). */
  lora?: boolean;
  systemPrompt?: string | null;
  /** The chat template's thinking switch for the prompts (TrainConfig thinking_mode; default 'auto'). */
  thinkingMode?: ThinkingMode;
  label?: string;
}

export interface EngineApi extends TrainerApi {
  /** Acquire the GPU in the worker (once) and describe it; also remembered in IndexedDB. */
  gpuInfo(): Promise<SeenAdapter>;
  /** Read and upload a model (4-bit); byte progress through `onProgress`. Replaces any loaded model. */
  loadModel(source: ModelSource, onProgress?: (p: LoadProgress) => void): Promise<LoadedModel>;
  /** The products setting and whether this GPU offers the tensor cores. */
  products(): Promise<ProductsState>;
  /** Run the loaded model's products (and later loads') this way, remembered in this browser;
   * refused while a training run is running or paused, or an eval runs. */
  setProducts(products: Products): Promise<ProductsState>;
  /** What the next training runs' pool keeps between generating and training (EngineConfig.phase_buffers). */
  setPhaseBuffers(phaseBuffers: PhaseBuffers): Promise<void>;
  /**
   * The prompts of the next training run or eval (structured-cloned: images as pixel arrays, or
   * still encoded, decoded when a batch needs them); null: the config's synthetic set.
   * `origin.fileBytes`: the size of the file they were read from, for the run's data record.
   */
  setDataset(rows: DatasetRow[] | null, origin?: { fileBytes?: number }): Promise<{ rows: number }>;
  /** Greedy or sampled completions of held-out rows, scored; records as src/eval describes them. */
  runEval(request: EvalRequest, onProgress?: (p: EvalProgress) => void): Promise<EvalRun>;
  /** Stop the eval in progress after its row in flight: runEval then resolves with status 'cancelled' and the records so far. */
  cancelEval(): Promise<void>;
  /** The current adapters in PEFT's layout: adapter_model.safetensors and adapter_config.json. */
  exportAdapter(): Promise<{ weights: Blob; config: Blob }>;
  /** The adapters' A and B as they are on the GPU (PEFT tensor names), e.g. to compare runs. */
  loraWeights(): Promise<Record<string, Float32Array>>;
  /** Put a saved or imported adapter on the loaded model (replacing its adapters), e.g. to evaluate it. */
  applyAdapter(adapter: PeftAdapter): Promise<void>;
  /** The GPU buffer pool's bytes (in use, cached for reuse, peak); null before the GPU is acquired. */
  gpuMemory(): Promise<PoolStats | null>;
}

/** The engine refused a request because a run or an eval is in progress; nothing changed (the
 * page tells it by its name, which crosses the worker boundary). */
export class BusyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BusyError';
  }
}
