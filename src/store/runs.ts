// Training runs in IndexedDB: the run list, checkpoints (the shared format of src/rl/checkpoint.ts:
// the JSON and the safetensors bytes), the metric history and the latest samples.
// A checkpoint is written under a new key, and the run's pointer flipped to it, in one
// transaction: a tab closed mid-write leaves the previous checkpoint current and readable.
import type { DataProvenance } from '../data/provenance';
import { decodeCheckpoint, encodeCheckpoint, type Checkpoint } from '../rl/checkpoint';
import type { TrainConfig } from '../rl/config';
import type { EngineConfig } from '../rl/engineConfig';
import type { RolloutSample, StepMetrics } from '../rl/metrics';
import type { TrainerState } from '../rl/trainer';
import { openStore } from './db';

export interface RunRecord {
  runId: string;
  createdAt: number;
  updatedAt: number;
  config: TrainConfig;
  /** How the engine runs it; absent in runs of earlier versions, whose config held gradient_checkpointing. */
  engine?: EngineConfig;
  state: TrainerState;
  step: number;
  /** Key of the current checkpoint in 'checkpoints', or null before the first. */
  checkpoint: string | null;
  /** The data the run trains on (the CLI's data.json fields); absent in runs of older versions. */
  data?: DataProvenance;
}

export interface CheckpointRecord {
  key: string;
  runId: string;
  step: number;
  json: string;
  safetensors: Uint8Array;
}

export interface MetricRecord {
  runId: string;
  step: number;
  metrics: StepMetrics;
}

export type SamplesRecord = RolloutSample[];

/** Checkpoints kept per run: the current one and the one before it. */
const KEEP = 2;

export async function createRun(runId: string, config: TrainConfig, engine: EngineConfig): Promise<RunRecord> {
  const now = Date.now();
  const run: RunRecord = { runId, createdAt: now, updatedAt: now, config, engine, state: 'idle', step: 0, checkpoint: null };
  await (await openStore()).put('runs', run, runId);
  return run;
}

export async function getRun(runId: string): Promise<RunRecord | undefined> {
  return (await openStore()).get('runs', runId);
}

export async function listRuns(): Promise<RunRecord[]> {
  return (await (await openStore()).getAll('runs')).sort((a, b) => b.updatedAt - a.updatedAt);
}

export async function setRunState(runId: string, state: TrainerState, step: number): Promise<void> {
  const db = await openStore();
  const tx = db.transaction('runs', 'readwrite');
  const run = await tx.store.get(runId);
  if (run) await tx.store.put({ ...run, state, step, updatedAt: Date.now() }, runId);
  await tx.done;
}

/** Records the data the run trains on (at its start, and when a resume is allowed other data). */
export async function setRunData(runId: string, data: DataProvenance): Promise<void> {
  const db = await openStore();
  const tx = db.transaction('runs', 'readwrite');
  const run = await tx.store.get(runId);
  if (!run) throw new Error(`store: no run '${runId}'`);
  await tx.store.put({ ...run, data, updatedAt: Date.now() }, runId);
  await tx.done;
}

/** Write a checkpoint with its metric history and samples, then point the run at it; one transaction. */
export async function saveCheckpoint(c: Checkpoint): Promise<string> {
  const { json, safetensors } = encodeCheckpoint(c);
  const runId = c.meta.runId;
  const key = `${runId}/${String(c.meta.step).padStart(8, '0')}/${c.meta.createdAt}`;
  const db = await openStore();
  const tx = db.transaction(['runs', 'checkpoints', 'metrics', 'samples'], 'readwrite');
  const runs = tx.objectStore('runs');
  const checkpoints = tx.objectStore('checkpoints');
  const run = await runs.get(runId);
  if (!run) throw new Error(`store: no run '${runId}'`);
  await checkpoints.put({ key, runId, step: c.meta.step, json, safetensors }, key);
  for (const metrics of c.meta.history) await tx.objectStore('metrics').put({ runId, step: metrics.step, metrics });
  await tx.objectStore('samples').put(c.meta.samples, runId);
  await runs.put({ ...run, step: c.meta.step, checkpoint: key, updatedAt: Date.now() }, runId);
  const keys = (await checkpoints.index('runId').getAllKeys(runId)).map(String).sort();
  for (const old of keys.slice(0, Math.max(0, keys.length - KEEP))) await checkpoints.delete(old);
  await tx.done;
  return key;
}

/** The run's current checkpoint, or null when it has none. */
export async function loadCheckpoint(runId: string): Promise<Checkpoint | null> {
  const db = await openStore();
  const run = await db.get('runs', runId);
  if (!run?.checkpoint) return null;
  const rec = await db.get('checkpoints', run.checkpoint);
  if (!rec) throw new Error(`store: run '${runId}' points at checkpoint '${run.checkpoint}', which is missing`);
  return decodeCheckpoint(rec.json, rec.safetensors);
}

export async function metricHistory(runId: string): Promise<StepMetrics[]> {
  const recs = await (await openStore()).getAllFromIndex('metrics', 'runId', runId);
  return recs.sort((a, b) => a.step - b.step).map((r) => r.metrics);
}

export async function latestSamples(runId: string): Promise<RolloutSample[]> {
  return (await (await openStore()).get('samples', runId)) ?? [];
}
