// The training checkpoint, one format everywhere: a JSON document (CheckpointMeta) and a
// safetensors file with every tensor in f32. IndexedDB stores the two as one record
// (src/store/runs.ts); the CLI writes them as checkpoint.json + tensors.safetensors in a folder.
//
// Tensors, for each adapter in the policy's order (PEFT names, so the adapter can be exported as is):
//   <name>.lora_A.weight [r, in]     <name>.lora_B.weight [out, r]
//   <name>.lora_A.weight.exp_avg, .exp_avg_sq, and the same for lora_B (AdamW moments, flat)
// A checkpoint is taken between optimizer steps: gradients are zero and not stored.
// checkpoint.json also carries the tensor file's CRC-32 and every tensor's shape (`integrity`,
// version 2): a resume refuses a changed tensor file, a misshapen tensor or one that is not finite.
import type { EntropyControlState } from './entropyControl';
import { serializeSafetensors, readAllTensors, type ByteSource } from '../model/safetensors';
import { crc32Hex } from './checksum';
import { firstNonFinite } from './divergence';
import type { TrainConfig } from './config';
import type { GroupRollout, RolloutSample, StepMetrics } from './metrics';
import type { RngState } from './rng';

export const CHECKPOINT_FORMAT = 'vlrl-trainer-checkpoint';
export const CHECKPOINT_VERSION = 2;
/** Versions this build reads: 1 has no `integrity` (shapes and finiteness are still checked). */
const READABLE_VERSIONS = [1, 2];

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
  /** Set by encodeCheckpoint (version 2): CRC-32 of tensors.safetensors and each tensor's shape. */
  integrity?: { crc32: string; shapes: Record<string, number[]> };
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

/** The checkpoint's data cursor or pending generation does not fit the rows the run has now. */
export class DataCursorError extends CheckpointError {
  constructor(message: string) {
    super(`data cursor: ${message}`);
    this.name = 'DataCursorError';
  }
}

/** Checks the cursor (unless `order: false`, for data the user changed) and pending generation of `meta` against a data set of `rows` rows. */
export function checkDataCursor(meta: CheckpointMeta, rows: number, check: { order: boolean } = { order: true }): void {
  const d = meta.data;
  const index = (v: unknown) => Number.isInteger(v) && (v as number) >= 0 && (v as number) < rows;
  for (const [name, v] of [['step', meta.step], ['microStep', meta.microStep]] as const) {
    if (!Number.isInteger(v) || v < 0) throw new DataCursorError(`${name} ${JSON.stringify(v)} is not a count`);
  }
  for (const [k, g] of (meta.pending?.groups ?? []).entries()) {
    if (!index(g.row)) throw new DataCursorError(`pending group ${k} names row ${JSON.stringify(g.row)}, not a row of the ${rows}`);
  }
  if (!check.order) return;
  if (typeof d !== 'object' || d === null || !Array.isArray(d.order)) throw new DataCursorError(`"data" is ${JSON.stringify(d)}, not {order: [...], position}`);
  if (d.order.length > 0 && d.order.length !== rows) throw new DataCursorError(`its order covers ${d.order.length} rows, the data set has ${rows}`);
  const bad = d.order.findIndex((r) => !index(r));
  if (bad >= 0) throw new DataCursorError(`order[${bad}] = ${JSON.stringify(d.order[bad])} is not a row of the ${rows}`);
  if (new Set(d.order).size !== d.order.length) throw new DataCursorError('its order repeats a row (not a permutation)');
  if (!Number.isInteger(d.position) || d.position < 0 || d.position > d.order.length) throw new DataCursorError(`position ${JSON.stringify(d.position)} is outside 0..${d.order.length}`);
}

export const tensorNames = (adapter: string) => {
  const a = `${adapter}.lora_A.weight`;
  const b = `${adapter}.lora_B.weight`;
  return { A: a, B: b, mA: `${a}.exp_avg`, vA: `${a}.exp_avg_sq`, mB: `${b}.exp_avg`, vB: `${b}.exp_avg_sq` };
};

/** Every tensor a checkpoint of these adapters holds, with its shape. */
function expectedShapes(adapters: CheckpointMeta['adapters']): [string, number[]][] {
  return adapters.flatMap((a) => {
    const n = tensorNames(a.name);
    return [
      [n.A, [a.r, a.in]],
      [n.B, [a.out, a.r]],
      [n.mA, [a.r * a.in]],
      [n.vA, [a.r * a.in]],
      [n.mB, [a.out * a.r]],
      [n.vB, [a.out * a.r]],
    ] as [string, number[]][];
  });
}

/** The two files of a checkpoint. */
export function encodeCheckpoint(c: Checkpoint): { json: string; safetensors: Uint8Array<ArrayBuffer> } {
  const tensors = expectedShapes(c.meta.adapters).map(([name, shape]) => {
      const data = c.tensors.get(name);
      if (!data) throw new CheckpointError(`tensor ${name} is missing`);
      return { name, dtype: 'F32' as const, shape, data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) };
  });
  const safetensors = serializeSafetensors(tensors, { format: CHECKPOINT_FORMAT, version: String(CHECKPOINT_VERSION) });
  const integrity = { crc32: crc32Hex(safetensors), shapes: Object.fromEntries(tensors.map((t) => [t.name, t.shape])) };
  return { json: JSON.stringify({ ...c.meta, version: CHECKPOINT_VERSION, integrity }), safetensors };
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

/**
 * Parse and check a checkpoint's two files: the tensor file's checksum (version 2), every tensor's
 * presence, dtype and shape against the adapters it claims, and that every value is finite.
 */
export async function decodeCheckpoint(json: string, safetensors: Uint8Array): Promise<Checkpoint> {
  let meta: CheckpointMeta;
  try {
    meta = JSON.parse(json) as CheckpointMeta;
  } catch (e) {
    throw new CheckpointError(`checkpoint.json is not JSON (${(e as Error).message})`);
  }
  if (typeof meta !== 'object' || meta === null) throw new CheckpointError('checkpoint.json is not an object');
  if (meta.format !== CHECKPOINT_FORMAT) throw new CheckpointError(`not a trainer checkpoint (format ${JSON.stringify(meta.format)})`);
  if (!READABLE_VERSIONS.includes(meta.version)) throw new CheckpointError(`version ${meta.version} is not supported (this build reads ${READABLE_VERSIONS.join(' and ')})`);
  if (!Array.isArray(meta.adapters)) throw new CheckpointError('checkpoint.json has no adapter list');
  if (meta.version >= 2) {
    if (!meta.integrity || typeof meta.integrity.crc32 !== 'string') throw new CheckpointError('checkpoint.json has no checksum of tensors.safetensors (integrity.crc32)');
    const crc = crc32Hex(safetensors);
    if (crc !== meta.integrity.crc32) throw new CheckpointError(`tensors.safetensors does not match its checksum (CRC-32 ${crc}, checkpoint.json says ${meta.integrity.crc32}): the file was changed or corrupted`);
  }
  const raw = await readAllTensors(bytesSource(safetensors));
  const tensors = new Map<string, Float32Array>();
  for (const [name, { info, bytes }] of raw) {
    if (info.dtype !== 'F32') throw new CheckpointError(`tensor ${name} is ${info.dtype}, expected F32`);
    tensors.set(name, new Float32Array(new Uint8Array(bytes).buffer)); // a copy: Node Buffers share a pool
  }
  for (const [name, shape] of expectedShapes(meta.adapters)) {
    const t = raw.get(name);
    if (!t) throw new CheckpointError(`tensor ${name} is missing`);
    const recorded = meta.integrity?.shapes[name];
    if (t.info.shape.join(',') !== shape.join(',') || (recorded && recorded.join(',') !== shape.join(','))) {
      throw new CheckpointError(`tensor ${name} has shape [${t.info.shape.join(', ')}]${recorded ? ` (checkpoint.json records [${recorded.join(', ')}])` : ''}; its adapter needs [${shape.join(', ')}]`);
    }
    const values = tensors.get(name)!;
    const bad = firstNonFinite(values);
    if (bad >= 0) throw new CheckpointError(`tensor ${name} holds ${values[bad]} at element ${bad}: the checkpoint is corrupt or the run had diverged`);
  }
  return { meta, tensors };
}
