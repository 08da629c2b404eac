// The shared page state that outlives a reload: the loaded data set (its rows, images included, the
// settings it was loaded with, and its split settings) and the reward terms. Restored into datasetStore and rewardTerms before any
// panel is built; saved on every change. Forms keep their own parts (each panel saves its fields).
import type { LoadResult } from '../data';
import type { DatasetSettings } from '../rl/dataSource';
import { validateTerms, type RewardTerm } from '../rewards/registry';
import { rewardTerms } from './appState';
import { datasetStore, type SplitSettings } from './datasetStore';
import { saveWorkspace, workspacePart } from './workspace';

/** Larger data sets (image bytes) are not copied into IndexedDB; the Data panel says to load them again. */
export const MAX_STORED_DATASET_BYTES = 256 * 2 ** 20;

interface StoredDataset {
  source: string;
  settings: DatasetSettings;
  fileBytes?: number;
  result: LoadResult;
  splitSettings: SplitSettings;
}

/** Bytes of the rows' images: pixels of decoded ones, file bytes of those kept encoded. */
const imageBytes = (r: LoadResult) => r.rows.reduce((n, row) => n + row.images.reduce((m, im) => m + im.data.byteLength, 0) + (row.encoded ?? []).reduce((m, e) => m + e.bytes.byteLength, 0), 0);

export function restoreWorkspaceState(): void {
  const d = workspacePart<StoredDataset>('dataset');
  // A data set stored by an older version, without the settings it was loaded with, is not restored.
  if (d && typeof d.source === 'string' && d.settings && d.result && Array.isArray(d.result.rows) && d.splitSettings) {
    try {
      datasetStore.set({ source: d.source, settings: d.settings, fileBytes: d.fileBytes, result: d.result }, d.splitSettings);
    } catch (e) {
      console.warn('workspace: the stored data set could not be split again', e);
    }
  }
  const r = workspacePart<{ terms: RewardTerm[] }>('rewards');
  if (r && Array.isArray(r.terms)) {
    try {
      validateTerms(r.terms);
      rewardTerms.set(r.terms);
    } catch (e) {
      console.warn('workspace: the stored reward terms are not valid', e);
    }
  }
}

export function persistWorkspaceState(): void {
  let first = true;
  datasetStore.subscribe((d) => {
    // The value just restored needs no write back.
    if (first) return void (first = false);
    if (!d) return saveWorkspace('dataset', null);
    if (imageBytes(d.result) > MAX_STORED_DATASET_BYTES) return saveWorkspace('dataset', null);
    saveWorkspace('dataset', { source: d.source, settings: d.settings, fileBytes: d.fileBytes, result: d.result, splitSettings: d.splitSettings } satisfies StoredDataset, 0);
  });
}

/** Whether the current data set is too large to be kept over a reload. */
export function datasetKept(): boolean {
  const d = datasetStore.current;
  return !d || imageBytes(d.result) <= MAX_STORED_DATASET_BYTES;
}
