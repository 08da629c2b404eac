// Source records (objects from parquet, JSON or JSONL) → dataset rows: column mapping, answer
// unboxing, image decoding and resize, the numeric-answer filter. Every record ends up in exactly
// one of rows, broken (with a reason) or filtered out (with a reason); none disappears.
import { lastBoxed, numericValue } from '../../rewards/normalize';
import { imageSizeProblem, QWEN3_VL_IMAGE_LIMITS, resizeArea, sniffImageType, type ImageDecoder, type ImageLimits } from '../image';
import { imageHeaderSize, imageStructureProblem } from '../imageHeader';
import { countPlaceholders } from '../prompt';
import type { BrokenRow, DatasetRow, EncodedImage, RgbaImage } from '../types';
import { CellError, imageBytes, imageEntries, type ImageFolder } from './imageCells';
import { firstInvalidUtf8 } from './errors';
import type { ColumnMapping } from './mapping';

export interface BuildOptions {
  mapping: ColumnMapping;
  decoder: ImageDecoder;
  /** Resolves image cells that are file names. */
  folder?: ImageFolder;
  /** Keep only rows whose gold answer reads as a number (integers, decimals, fractions, \frac, %...). */
  numericOnly?: boolean;
  /** Resize every image to exactly this size with area resampling (see resizeArea); lazy rows resize when decoded. */
  resize?: { width: number; height: number };
  /** Index of the first record, when a data set is read in several parts. */
  firstIndex?: number;
  /**
   * What the processor takes (the CLI passes QWEN3_VL_IMAGE_LIMITS): images outside it are broken
   * rows, refused from their header before decoding. Without it only decompression bombs are
   * refused and images down-scaled to Qwen3-VL's max_pixels (DECODE_LIMITS).
   */
  limits?: ImageLimits;
  /** Keep images encoded (DatasetRow.encoded), decoded only when a batch needs them: memory for a few KB a row instead of width x height x 4 bytes. */
  lazy?: boolean;
  /** The file the records come from, for messages ("rows.jsonl row 3 image 0"). */
  source?: string;
}

/** Limits without the processor's minimum side and aspect ratio: bombs refused, large images down-scaled. */
export const DECODE_LIMITS: ImageLimits = { ...QWEN3_VL_IMAGE_LIMITS, minSide: 1, maxAspect: Infinity };

export interface FilteredRow {
  index: number;
  id: string;
  reason: 'non-numeric answer';
}

export interface LoadResult {
  rows: DatasetRow[];
  broken: BrokenRow[];
  filtered: FilteredRow[];
  /** Records read: rows + broken + filtered. */
  total: number;
}

/** A source record that could not be read at all (a JSONL line that is not JSON), kept in its place. */
export class InvalidRecord {
  constructor(readonly detail: string) {}
}

export function emptyResult(): LoadResult {
  return { rows: [], broken: [], filtered: [], total: 0 };
}

/** Appends `part` to `into` (for data sets read from several files). */
export function mergeResults(into: LoadResult, part: LoadResult): LoadResult {
  into.rows.push(...part.rows);
  into.broken.push(...part.broken);
  into.filtered.push(...part.filtered);
  into.total += part.total;
  return into;
}

/** Counts of broken rows by reason, for the data panel. */
export function brokenCounts(result: LoadResult): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const b of result.broken) counts[b.reason] = (counts[b.reason] ?? 0) + 1;
  return counts;
}

function text(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  // Parquet strings written without the UTF-8 annotation arrive as bytes (checked by notUtf8 first).
  if (value instanceof Uint8Array) return new TextDecoder().decode(value);
  return null;
}

/** The first mapped text column whose cell is bytes that are not UTF-8 (Latin-1, say), described; null when none is. */
function notUtf8(record: Record<string, unknown>, mapping: ColumnMapping): string | null {
  for (const key of [mapping.prompt_key, mapping.answer_key, mapping.id_key, mapping.answer_type_key]) {
    const v = key === undefined ? undefined : record[key];
    if (!(v instanceof Uint8Array)) continue;
    const at = firstInvalidUtf8(v);
    if (at >= 0) return `column '${key}' is not valid UTF-8 at byte offset ${at} of its cell (0x${v[at].toString(16).padStart(2, '0')}; Latin-1 or another legacy encoding?)`;
  }
  return null;
}

export async function buildRows(records: readonly (Record<string, unknown> | InvalidRecord)[], options: BuildOptions): Promise<LoadResult> {
  const { mapping } = options;
  const result = emptyResult();
  const first = options.firstIndex ?? 0;
  for (let k = 0; k < records.length; k++) {
    const index = first + k;
    result.total++;
    const record = records[k];
    if (record instanceof InvalidRecord) {
      result.broken.push({ index, reason: 'invalid row', detail: record.detail });
      continue;
    }
    if (typeof record !== 'object' || record === null || Array.isArray(record)) {
      result.broken.push({ index, reason: 'invalid row', detail: `row is ${Array.isArray(record) ? 'an array' : typeof record}, not an object` });
      continue;
    }
    const badText = notUtf8(record, mapping);
    if (badText) {
      result.broken.push({ index, reason: 'invalid row', detail: badText });
      continue;
    }
    const id = (mapping.id_key ? text(record[mapping.id_key]) : null) ?? `row-${index}`;
    const broken = (reason: BrokenRow['reason'], detail: string) => result.broken.push({ index, id, reason, detail });

    const question = text(record[mapping.prompt_key]);
    if (question === null || question.trim() === '') {
      broken('missing question', `no text in column '${mapping.prompt_key}'`);
      continue;
    }
    const rawAnswer = text(record[mapping.answer_key]);
    const answer = rawAnswer === null ? '' : (lastBoxed(rawAnswer) ?? rawAnswer).trim();
    if (answer === '') {
      broken('missing answer', `no answer in column '${mapping.answer_key}'`);
      continue;
    }
    const entries = mapping.image_keys.flatMap((key) => imageEntries(record[key]));
    if (entries.length === 0) {
      broken('missing image', `no image in column(s) ${mapping.image_keys.map((k) => `'${k}'`).join(', ')}`);
      continue;
    }
    const placeholders = countPlaceholders(question);
    if (placeholders !== 0 && placeholders !== entries.length) {
      broken('placeholder count mismatch', `${placeholders} <image> placeholder(s) for ${entries.length} image(s)`);
      continue;
    }
    if (options.numericOnly && numericValue(answer) === null) {
      result.filtered.push({ index, id, reason: 'non-numeric answer' });
      continue;
    }

    const images: RgbaImage[] = [];
    const encoded: EncodedImage[] = [];
    let failure: CellError | null = null;
    for (const [k, entry] of entries.entries()) {
      try {
        const image = await loadImage(entry, options, `${options.source ?? 'data set'} row ${index} image ${k}`);
        if ('bytes' in image) encoded.push(image);
        else images.push(image);
      } catch (e) {
        if (!(e instanceof CellError)) throw e;
        failure = e;
        break;
      }
    }
    if (failure) {
      broken(failure.reason, failure.message);
      continue;
    }

    const meta: Record<string, unknown> = {};
    const used = new Set([mapping.prompt_key, mapping.answer_key, ...mapping.image_keys]);
    for (const [key, value] of Object.entries(record)) if (!used.has(key)) meta[key] = value;
    if (rawAnswer !== answer) meta.answer_raw = rawAnswer;
    const row: DatasetRow = { id, images, question, answer, meta };
    if (options.lazy) row.encoded = encoded;
    const answerType = mapping.answer_type_key ? text(record[mapping.answer_type_key]) : null;
    if (answerType) row.answer_type = answerType;
    if (mapping.system_prompt) row.system_prompt = mapping.system_prompt;
    result.rows.push(row);
  }
  return result;
}

/**
 * One image entry: its size read from the header and checked against the limits before any
 * decoding (a decompression bomb never reaches the decoder), then kept encoded (lazy) or decoded,
 * down-scaled to max_pixels while decoding.
 */
async function loadImage(entry: unknown, options: BuildOptions, source: string): Promise<RgbaImage | EncodedImage> {
  const limits = options.limits ?? DECODE_LIMITS;
  const bytes = await imageBytes(entry, options.folder);
  const kind = sniffImageType(bytes);
  const size = imageHeaderSize(bytes);
  if (!size) throw new CellError('undecodable image', `${bytes.length} bytes (${kind ?? 'unknown format'}): no readable ${kind ? `${kind} header` : 'PNG, JPEG, GIF, WebP or BMP signature'}`);
  // Resized, the processor sees the resize target: the header is then checked only for a bomb.
  const { resize } = options;
  const problem = resize ? imageSizeProblem(size, { ...limits, minSide: 1, maxAspect: Infinity }) ?? imageSizeProblem(resize, limits) : imageSizeProblem(size, limits);
  if (problem) throw new CellError(problem.reason, problem.detail);
  const damaged = imageStructureProblem(bytes);
  if (damaged) throw new CellError('undecodable image', `${bytes.length} bytes: ${damaged}`);
  // A copy: the bytes may be a view into a whole parquet page or file.
  if (options.lazy) return { bytes: bytes.slice(), width: size.width, height: size.height, source, ...(resize ? { resize } : {}) };
  let image: RgbaImage;
  try {
    image = await options.decoder.decode(bytes, { maxPixels: limits.maxPixels });
  } catch (e) {
    throw new CellError('undecodable image', `${bytes.length} bytes (${kind}): ${(e as Error).message}`);
  }
  return resize ? resizeArea(image, resize.width, resize.height) : image;
}
