// The training checkpoint, one format everywhere: a JSON document (CheckpointMeta) and a
// safetensors file with every tensor in f32. IndexedDB stores the two as one record
// (src/store/runs.ts); the CLI writes them as checkpoint.json + tensors.safetensors in a folder.
//
// Tensors, for each adapter in the policy's order (PEFT names, so the adapter can be exported as is):
//   <name>.lora_A.weight [r, in]     <name>.lora_B.weight [out, r]
//   <name>.lora_A.weight.exp_avg, .exp_avg_sq, and the same for lora_B (AdamW moments, flat)
// A checkpoint is taken between optimizer steps: gradients are zero and not stored.
import type { EntropyControlState } from './entropyControl';
import { serializeSafetensors, readAllTensors, type ByteSource } from '../model/safetensors';
import type { TrainConfig } from './config';
import type { GroupRollout, RolloutSample, StepMetrics } from './metrics';
import type { RngState } from './rng';

export const CHECKPOINT_FORMAT = 'vlrl-trainer-checkpoint';
export const CHECKPOINT_VERSION = 1;

/** A generation batch not yet fully trained on (steps_per_generation or num_iterations > 1). */
export interface PendingGeneration {
  /** Micro-batches of this generation batch already trained on. */
  consumed: number;
  groups: (Omit<GroupRollout, 'promptText'> & {
    /** Index of the prompt's row in the run's data; the prompt is prepared again on resume. */
    row: number;
    promptText: string;
    /** [G·T] trainer log-probs recomputed at generation (old policy), when the config needs them. */
    old: number[] | null;
    /** [G·T] reference (LoRA off) log-probs, when beta > 0. */
    ref: number[] | null;
  })[];
}

export interface DataCursor {
  /** The current pass's order over the rows. */
  order: number[];
  /** Next position in `order`. */
  position: number;
}

export interface CheckpointMeta {
  format: typeof CHECKPOINT_FORMAT;
  version: number;
  runId: string;
  /** Optimizer steps done. */
  step: number;
  /** Micro-batches done (locates the next generation). */
  microStep: number;
  /** Prompt and completion tokens sampled so far (TRL's num_tokens). */
  numTokens: number;
  config: TrainConfig;
  rng: RngState;
  data: DataCursor;
  pending: PendingGeneration | null;
  history: StepMetrics[];
  samples: RolloutSample[];
  /** Adapter names in the policy's order, with their shapes; checked on load. */
  adapters: { name: string; r: number; in: number; out: number }[];
  /** The entropy bonus's coefficient state (adaptive control); absent in older checkpoints. */
  entropyControl?: EntropyControlState;
  createdAt: number;
}

export interface Checkpoint {
  meta: CheckpointMeta;
  tensors: Map<string, Float32Array>;
}

export class CheckpointError extends Error {
  constructor(message: string) {
    super(`checkpoint: ${message}`);
    this.name = 'CheckpointError';
  }
}

export const tensorNames = (adapter: string) => {
  const a = `${adapter}.lora_A.weight`;
  const b = `${adapter}.lora_B.weight`;
  return { A: a, B: b, mA: `${a}.exp_avg`, vA: `${a}.exp_avg_sq`, mB: `${b}.exp_avg`, vB: `${b}.exp_avg_sq` };
};

/** The two files of a checkpoint. */
export function encodeCheckpoint(c: Checkpoint): { json: string; safetensors: Uint8Array<ArrayBuffer> } {
  const tensors = c.meta.adapters.flatMap((a) => {
    const n = tensorNames(a.name);
    const shapes: [string, number[]][] = [
      [n.A, [a.r, a.in]],
      [n.B, [a.out, a.r]],
      [n.mA, [a.r * a.in]],
      [n.vA, [a.r * a.in]],
      [n.mB, [a.out * a.r]],
      [n.vB, [a.out * a.r]],
    ];
    return shapes.map(([name, shape]) => {
      const data = c.tensors.get(name);
      if (!data) throw new CheckpointError(`tensor ${name} is missing`);
      return { name, dtype: 'F32' as const, shape, data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) };
    });
  });
  return { json: JSON.stringify(c.meta), safetensors: serializeSafetensors(tensors, { format: CHECKPOINT_FORMAT, version: String(CHECKPOINT_VERSION) }) };
}

function bytesSource(bytes: Uint8Array): ByteSource {
  return {
    name: 'tensors.safetensors',
    size: async () => bytes.byteLength,
    read: async (offset, length) => {
      if (offset + length > bytes.byteLength) throw new CheckpointError(`tensors.safetensors is truncated (${bytes.byteLength} bytes)`);
      return bytes.subarray(offset, offset + length);
    },
  };
}

/** Parse and check a checkpoint's two files. */
export async function decodeCheckpoint(json: string, safetensors: Uint8Array): Promise<Checkpoint> {
  let meta: CheckpointMeta;
  try {
    meta = JSON.parse(json) as CheckpointMeta;
  } catch (e) {
    throw new CheckpointError(`checkpoint.json is not JSON (${(e as Error).message})`);
  }
  if (meta.format !== CHECKPOINT_FORMAT) throw new CheckpointError(`not a trainer checkpoint (format ${JSON.stringify(meta.format)})`);
  if (meta.version !== CHECKPOINT_VERSION) throw new CheckpointError(`version ${meta.version} is not supported (this build reads ${CHECKPOINT_VERSION})`);
  const raw = await readAllTensors(bytesSource(safetensors));
  const tensors = new Map<string, Float32Array>();
  for (const [name, { info, bytes }] of raw) {
    if (info.dtype !== 'F32') throw new CheckpointError(`tensor ${name} is ${info.dtype}, expected F32`);
    tensors.set(name, new Float32Array(new Uint8Array(bytes).buffer)); // a copy: Node Buffers share a pool
  }
  for (const a of meta.adapters) {
    for (const name of Object.values(tensorNames(a.name))) if (!tensors.has(name)) throw new CheckpointError(`tensor ${name} is missing`);
  }
  return { meta, tensors };
}
