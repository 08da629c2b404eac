// Eval results broken down by group, as verl tracks accuracy per image type: by the row's task or
// category column, or by the size class of its images; and the before/after difference per group.
// Accuracy, format compliance and mean reward of each group are those of `summarize` over its
// records, under the strict or the numeric-tolerance answer match.
import type { DatasetRow, RgbaImage } from '../data/types';
import { summarize, type AnswerMatch, type EvalRecord, type EvalRun, type EvalSummary, type ImageSizeClass } from './records';

/** Pixel bounds of the size classes (of a row's largest image): small below 256², medium below 768². */
export const IMAGE_SIZE_BOUNDS = { small: 256 * 256, medium: 768 * 768 } as const;

export function imageSizeClass(images: readonly Pick<RgbaImage, 'width' | 'height'>[]): ImageSizeClass {
  if (images.length === 0) return 'none';
  const pixels = Math.max(...images.map((im) => im.width * im.height));
  return pixels < IMAGE_SIZE_BOUNDS.small ? 'small' : pixels < IMAGE_SIZE_BOUNDS.medium ? 'medium' : 'large';
}

/** The row's task/category column: meta.task, else meta.category (as text), else null. */
export function rowTask(row: Pick<DatasetRow, 'meta'>): string | null {
  for (const key of ['task', 'category']) {
    const v = row.meta[key];
    if (typeof v === 'string' && v !== '') return v;
    if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  }
  return null;
}

export type GroupBy = 'task' | 'image_size';

/** The group of a record; records without the field (older files) fall in '(none)'. */
export function groupOf(r: EvalRecord, by: GroupBy): string {
  const v = by === 'task' ? r.task : r.image_size;
  return v === null || v === undefined ? '(none)' : v;
}

/** One summary per group, groups in order of first appearance. */
export function summarizeBy(records: readonly EvalRecord[], by: GroupBy, match: AnswerMatch = 'numeric'): Map<string, EvalSummary> {
  const groups = new Map<string, EvalRecord[]>();
  for (const r of records) {
    const g = groupOf(r, by);
    const list = groups.get(g) ?? [];
    list.push(r);
    groups.set(g, list);
  }
  return new Map([...groups].map(([g, rs]) => [g, summarize(rs, match)]));
}

export interface GroupDiff {
  group: string;
  /** Records in the group before and after (0 where a run has none). */
  samples: { before: number; after: number };
  accuracy: { before: number; after: number; delta: number };
  formatCompliance: { before: number; after: number; delta: number };
  meanReward: { before: number; after: number; delta: number };
}

/**
 * Before/after per group: every group either run has, in order of first appearance (before's,
 * then after's new ones). A group one run lacks reports NaN for that run and for the delta.
 */
export function compareByGroup(before: EvalRun, after: EvalRun, by: GroupBy, match: AnswerMatch = 'numeric'): GroupDiff[] {
  const b = summarizeBy(before.records, by, match);
  const a = summarizeBy(after.records, by, match);
  const names = [...new Set([...b.keys(), ...a.keys()])];
  const pair = (x: EvalSummary | undefined, y: EvalSummary | undefined, f: (s: EvalSummary) => number) => {
    const bv = x ? f(x) : NaN;
    const av = y ? f(y) : NaN;
    return { before: bv, after: av, delta: av - bv };
  };
  return names.map((group) => {
    const x = b.get(group);
    const y = a.get(group);
    return {
      group,
      samples: { before: x?.samples ?? 0, after: y?.samples ?? 0 },
      accuracy: pair(x, y, (s) => s.accuracy),
      formatCompliance: pair(x, y, (s) => s.formatCompliance),
      meanReward: pair(x, y, (s) => s.meanReward),
    };
  });
}
