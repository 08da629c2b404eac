// The run config's `dataset` (TrainConfig.dataset: synthetic | file | hub, src/rl/dataSource.ts) as
// the Data panel edits it: the panel reads its fields from it and writes them back, resolved and
// checked, and the Train panel puts exactly this value in a run's config. While a field is not
// valid the value carries the named error instead, and no run starts.
import { resolveDataset, type DatasetSettings } from '../rl/dataSource';
import { Observable } from './appState';

export type DatasetConfig = { dataset: DatasetSettings; error: null } | { dataset: null; error: string };

/** `input` resolved as TrainConfig.dataset, or its error. */
export function checkedDataset(input: Record<string, unknown>): DatasetConfig {
  try {
    return { dataset: resolveDataset(input), error: null };
  } catch (e) {
    return { dataset: null, error: e instanceof Error ? e.message : String(e) };
  }
}

export const datasetConfig = new Observable<DatasetConfig>(checkedDataset({ kind: 'synthetic' }));
