// The app's IndexedDB (through idb). One database, versioned stores; later stores (runs,
// checkpoints, eval records, adapters, weight cache) are added by bumping DB_VERSION with an
// upgrade step, never by changing an existing one.
import { openDB, type DBSchema, type IDBPDatabase } from 'idb';
import type { AdapterSummary } from '../gpu/device';
import type { CheckpointRecord, MetricRecord, RunRecord, SamplesRecord } from './runs';
import type { AdapterModule } from '../adapter/peft';
import type { EvalRun } from '../eval/records';
import type { SavedAdapter } from './adapters';
import { storedProductsValue, type Products } from '../model/products';

export const DB_NAME = 'vlrl';
export const DB_VERSION = 3;

export interface SeenAdapter {
  summary: AdapterSummary;
  enabled: string[];
  seenAt: number;
}

interface VlrlSchema extends DBSchema {
  /** Small key/value facts about this browser (the last GPU adapter seen, UI preferences). */
  meta: { key: string; value: unknown };
  /** LoRA adapters by name: what the list shows (v2). */
  adapters: { key: string; value: SavedAdapter; indexes: { savedAt: number } };
  /** Their tensors by adapter name, apart so that listing adapters reads no tensor data (v2). */
  adapterTensors: { key: string; value: AdapterModule[] };
  /** Eval runs with their per-sample records, by run id (v2). */
  evalRuns: { key: string; value: EvalRun; indexes: { createdAt: number } };
  /** Training runs by id (v3; src/store/runs.ts). */
  runs: { key: string; value: RunRecord };
  /** Checkpoint records, each under a new key; a run's `checkpoint` field points at the current one (v3). */
  checkpoints: { key: string; value: CheckpointRecord; indexes: { runId: string } };
  /** Metric history, one record per logged step (v3). */
  metrics: { key: [string, number]; value: MetricRecord; indexes: { runId: string } };
  /** The latest rollouts' samples of each run (v3). */
  samples: { key: string; value: SamplesRecord };
}

let db: Promise<IDBPDatabase<VlrlSchema>> | null = null;

export function openStore(): Promise<IDBPDatabase<VlrlSchema>> {
  db ??= openDB<VlrlSchema>(DB_NAME, DB_VERSION, {
    upgrade(database, oldVersion) {
      if (oldVersion < 1) database.createObjectStore('meta');
      if (oldVersion < 2) {
        database.createObjectStore('adapters').createIndex('savedAt', 'savedAt');
        database.createObjectStore('adapterTensors');
        database.createObjectStore('evalRuns', { keyPath: 'id' }).createIndex('createdAt', 'createdAt');
      }
      if (oldVersion < 3) {
        database.createObjectStore('runs');
        database.createObjectStore('checkpoints').createIndex('runId', 'runId');
        database.createObjectStore('metrics', { keyPath: ['runId', 'step'] }).createIndex('runId', 'runId');
        database.createObjectStore('samples');
      }
    },
  });
  return db;
}

export async function rememberAdapter(seen: SeenAdapter): Promise<void> {
  await (await openStore()).put('meta', seen, 'lastAdapter');
}

export async function lastAdapter(): Promise<SeenAdapter | undefined> {
  return (await (await openStore()).get('meta', 'lastAdapter')) as SeenAdapter | undefined;
}

/** The products setting the user last chose in this browser (the Model panel). */
export async function rememberProducts(products: Products): Promise<void> {
  await (await openStore()).put('meta', products, 'products');
}

export async function storedProducts(): Promise<Products | undefined> {
  const v = await (await openStore()).get('meta', 'products');
  return storedProductsValue(v);
}
