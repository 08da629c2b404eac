// The data set the user has loaded (Data panel), split into train and held-out rows; the Train and
// Eval panels read it from here. One current data set per page; listeners hear every change. Rows
// of files and hub data sets keep their images encoded (DatasetRow.encoded) until they are shown or
// a batch needs them.
import { seededSplit, type DatasetRow, type LoadResult, type Split } from '../data';
import type { DatasetSettings } from '../rl/dataSource';

export interface SplitSettings {
  /** A fraction in [0, 1) or a row count, as seededSplit takes it. */
  heldOut: number;
  seed: number;
}

export interface LoadedDataset {
  /** Where it came from, for people ("synthetic counting+bar_value, seed 1", "hiyouga/geometry3k train"). */
  source: string;
  /** The TrainConfig.dataset the rows were loaded with (a run on these rows records it in its config). */
  settings: DatasetSettings;
  /** Size in bytes of the file the rows were read from (file data sets), for the run's data record. */
  fileBytes?: number;
  /** Every record read: usable rows, broken rows with reasons, filtered rows. */
  result: LoadResult;
  split: Split<DatasetRow>;
  splitSettings: SplitSettings;
}

type Listener = (dataset: LoadedDataset | null) => void;

export class DatasetStore {
  private value: LoadedDataset | null = null;
  private readonly listeners = new Set<Listener>();

  get current(): LoadedDataset | null {
    return this.value;
  }

  /** Replaces the data set; throws (and keeps the old one) when the split is impossible. */
  set(loaded: { source: string; settings: DatasetSettings; fileBytes?: number; result: LoadResult }, splitSettings: SplitSettings): LoadedDataset {
    const split = seededSplit(loaded.result.rows, splitSettings.heldOut, splitSettings.seed);
    this.value = { ...loaded, split, splitSettings };
    this.emit();
    return this.value;
  }

  /** Splits the current rows again; throws (and keeps the old split) when the split is impossible. */
  resplit(splitSettings: SplitSettings): void {
    if (!this.value) throw new Error('no data set loaded');
    const split = seededSplit(this.value.result.rows, splitSettings.heldOut, splitSettings.seed);
    this.value = { ...this.value, split, splitSettings };
    this.emit();
  }

  /** Calls `listener` now and on every change; returns the unsubscribe function. */
  subscribe(listener: Listener): () => void {
    this.listeners.add(listener);
    listener(this.value);
    return () => this.listeners.delete(listener);
  }

  private emit(): void {
    for (const l of this.listeners) l(this.value);
  }
}

export const datasetStore = new DatasetStore();
