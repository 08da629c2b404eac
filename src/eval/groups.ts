// Eval results broken down by group, as verl tracks accuracy per image type: by the row's task or
// category column, or by the size class of its images; and the before/after difference per group.
// Accuracy, format compliance and mean reward of each group are those of `summarize` over its
// records, under the strict or the numeric-tolerance answer match.
import type { DatasetRow, RgbaImage } from '../data/types';
import { evalRunToJson, summarize, type AnswerMatch, type EvalRecord, type EvalRun, type EvalSummary, type ImageSizeClass } from './records';

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

/** Size classes from the smallest up; records of older files ('(none)') last. */
const SIZE_ORDER: readonly string[] = ['none', 'small', 'medium', 'large', '(none)'];

/** One summary per group: tasks in order of first appearance, image size classes smallest first. */
export function summarizeBy(records: readonly EvalRecord[], by: GroupBy, match: AnswerMatch = 'numeric'): Map<string, EvalSummary> {
  const groups = new Map<string, EvalRecord[]>();
  for (const r of records) {
    const g = groupOf(r, by);
    const list = groups.get(g) ?? [];
    list.push(r);
    groups.set(g, list);
  }
  const entries = [...groups];
  if (by === 'image_size') entries.sort(([a], [b]) => SIZE_ORDER.indexOf(a) - SIZE_ORDER.indexOf(b));
  return new Map(entries.map(([g, rs]) => [g, summarize(rs, match)]));
}

/** A group's line of the breakdown (the eval panel's tables and its JSON export). */
export interface GroupRow {
  group: string;
  samples: number;
  accuracy: number;
  format_compliance: number;
  mean_reward: number;
}

export interface EvalBreakdown {
  /** What counted as correct. */
  answer_match: AnswerMatch;
  by_task: GroupRow[];
  by_image_size: GroupRow[];
}

export function breakdown(records: readonly EvalRecord[], match: AnswerMatch = 'numeric'): EvalBreakdown {
  const rows = (by: GroupBy) => [...summarizeBy(records, by, match)].map(([group, s]): GroupRow => ({ group, samples: s.samples, accuracy: s.accuracy, format_compliance: s.formatCompliance, mean_reward: s.meanReward }));
  return { answer_match: match, by_task: rows('task'), by_image_size: rows('image_size') };
}

/**
 * The eval panel's export of a run under `match`: the run with its summary counted that way
 * (settings.answerMatch says so, and a load recounts the same), and the breakdown by task and by
 * image size class beside it.
 */
export function evalExportJson(run: EvalRun, match: AnswerMatch): string {
  return evalRunToJson({ ...run, settings: { ...run.settings, answerMatch: match }, summary: summarize(run.records, match) }, { breakdown: breakdown(run.records, match) });
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
