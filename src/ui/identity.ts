// Which adapter is on the model, for the records that name it (eval runs, exports): its store name
// and, for one trained here, the run, the step and a hash of the run's config, so an eval record
// can be traced back to the exact run and settings that made the adapter.
import type { TrainConfig } from '../rl/config';
import { Observable } from './appState';

export interface AdapterIdentity {
  /** The adapters store's name (a trained run's adapter is saved under its run id). */
  name: string;
  runId?: string;
  /** Optimizer steps the adapter has had. */
  step?: number;
  /** configHash of the run's config. */
  configHash?: string;
}

/** The adapter on the loaded model; null for none (a fresh model, or the base model only). */
export const adapterOnModel = new Observable<AdapterIdentity | null>(null);

/** JSON with object keys sorted, so the same config always hashes the same. */
function stableJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(stableJson).join(',')}]`;
  if (v && typeof v === 'object') return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${stableJson((v as Record<string, unknown>)[k])}`).join(',')}}`;
  return JSON.stringify(v) ?? 'null';
}

/** The first 12 hex digits of the SHA-256 of the config's stable JSON. */
export async function configHash(config: TrainConfig): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(stableJson(config)));
  return [...new Uint8Array(digest)].slice(0, 6).map((b) => b.toString(16).padStart(2, '0')).join('');
}

/** "run-x at step 4 (config 1a2b3c4d5e6f)", or the name alone for an imported adapter. */
export function describeAdapter(a: AdapterIdentity): string {
  if (!a.runId) return a.name;
  const at = a.step === undefined ? '' : ` at step ${a.step}`;
  return `${a.name === a.runId ? a.runId : `${a.name} (run ${a.runId})`}${at}${a.configHash ? ` (config ${a.configHash})` : ''}`;
}
