// A whole checkpoint with a PEFT adapter merged in, as Hugging Face shards: every adapted linear
// weight becomes W + (alpha/r)·B·A (mergeDense, f64 sums) rounded back to the weight's own dtype
// (bf16 stays bf16), every other tensor is copied byte for byte. Shards are planned from the
// headers (sizes are known before any data is read) and built one at a time, so at most one
// shard's bytes are held. Free of Node: the caller writes what comes out.
import { bf16BitsToF32, f16BitsToF32, fromFloat32 } from '../model/dtype';
import { canonicalWeightName } from '../model/weightShapes';
import type { Checkpoint, CheckpointTensor, TensorToWrite } from '../model/safetensors';
import { serializeSafetensors } from '../model/safetensors';
import { mergeDense } from './merge';
import { AdapterError, type AdapterModule, type PeftAdapter } from './peft';

export const INDEX_FILE = 'model.safetensors.index.json';
/** transformers' save_pretrained default max_shard_size ("5GB"). */
export const DEFAULT_MAX_SHARD_BYTES = 5_000_000_000;

export interface MergePlan {
  /** Output shard names in order, and the source tensors of each (in source order). */
  shards: { file: string; tensors: CheckpointTensor[] }[];
  /** Source tensor name → the adapter module merged into it. */
  merged: Map<string, AdapterModule>;
  /** model.safetensors.index.json's text. */
  index: string;
}

function toF32(t: CheckpointTensor, bytes: Uint8Array): Float32Array {
  const copy = bytes.slice();
  if (t.dtype === 'F32') return new Float32Array(copy.buffer);
  if (t.dtype === 'BF16') return Float32Array.from(new Uint16Array(copy.buffer), bf16BitsToF32);
  if (t.dtype === 'F16') return Float32Array.from(new Uint16Array(copy.buffer), f16BitsToF32);
  throw new AdapterError(`${t.name} is ${t.dtype}; an adapted weight must be F32, BF16 or F16 to merge`);
}

/**
 * Which tensor each module merges into, and the output shards. Throws an AdapterError when a
 * module has no weight in the checkpoint or its [out, in] differs from the weight's shape.
 */
export function planMerge(checkpoint: Checkpoint, adapter: PeftAdapter, maxShardBytes = DEFAULT_MAX_SHARD_BYTES): MergePlan {
  const byCanonical = new Map<string, CheckpointTensor>();
  for (const t of checkpoint.tensors.values()) byCanonical.set(canonicalWeightName(t.name), t);
  const merged = new Map<string, AdapterModule>();
  const problems: string[] = [];
  for (const m of adapter.modules) {
    const t = byCanonical.get(`${m.module}.weight`);
    if (!t) problems.push(`${m.module}.weight is not in ${checkpoint.location}`);
    else if (t.shape.length !== 2 || t.shape[0] !== m.out || t.shape[1] !== m.in) problems.push(`${t.name} is [${t.shape.join(', ')}] but the adapter's ${m.module} is for [${m.out}, ${m.in}]`);
    else merged.set(t.name, m);
  }
  if (problems.length) throw new AdapterError(`the adapter does not fit ${checkpoint.location}: ${problems.slice(0, 5).join('; ')}${problems.length > 5 ? `; and ${problems.length - 5} more` : ''}`);

  const ordered = checkpoint.files.flatMap((f) => [...checkpoint.tensors.values()].filter((t) => t.file === f).sort((a, b) => a.offset - b.offset));
  const groups: CheckpointTensor[][] = [[]];
  let size = 0;
  for (const t of ordered) {
    if (size > 0 && size + t.byteLength > maxShardBytes) {
      groups.push([]);
      size = 0;
    }
    groups[groups.length - 1].push(t);
    size += t.byteLength;
  }
  const n = groups.length;
  const pad = (k: number) => String(k).padStart(5, '0');
  const shards = groups.map((tensors, k) => ({ file: `model-${pad(k + 1)}-of-${pad(n)}.safetensors`, tensors }));
  const weightMap: Record<string, string> = {};
  for (const s of shards) for (const t of s.tensors) weightMap[t.name] = s.file;
  const totalSize = ordered.reduce((a, t) => a + t.byteLength, 0);
  const totalParameters = ordered.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0);
  const index = JSON.stringify({ metadata: { total_parameters: totalParameters, total_size: totalSize }, weight_map: Object.fromEntries(Object.entries(weightMap).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) }, null, 2);
  return { shards, merged, index };
}

/**
 * The plan's shards, built one at a time: each one's file name and safetensors bytes. `dtype`
 * writes the merged weights in another float type than the source's (the unmerged ones keep theirs).
 */
export async function* mergedShards(checkpoint: Checkpoint, plan: MergePlan, dtype?: 'F32' | 'BF16' | 'F16'): AsyncGenerator<{ file: string; bytes: Uint8Array<ArrayBuffer> }> {
  for (const shard of plan.shards) {
    const tensors: TensorToWrite[] = [];
    for (const t of shard.tensors) {
      const bytes = await checkpoint.read(t.name);
      const m = plan.merged.get(t.name);
      if (!m) {
        tensors.push({ name: t.name, dtype: t.dtype, shape: t.shape, data: bytes });
        continue;
      }
      const to = dtype ?? (t.dtype as 'F32' | 'BF16' | 'F16');
      tensors.push({ name: t.name, dtype: to, shape: t.shape, data: fromFloat32(mergeDense(toF32(t, bytes), m), to) });
    }
    yield { file: shard.file, bytes: serializeSafetensors(tensors, { format: 'pt' }) };
  }
}
