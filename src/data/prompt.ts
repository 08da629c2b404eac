// From a dataset row to the message list the chat template renders: images placed where the text
// says `<image>`, or all first when it says nothing (Qwen-VL's own convention), and an optional
// system prompt. The processor turns each {type:'image'} into the vision markers and pads.
// The image caps (max_images_per_message, max_images_per_step) and image_only_mode act here, on
// the row, before it becomes messages: `limitRowImages`.
import type { DatasetRow, EncodedImage, RgbaImage } from './types';

export const IMAGE_PLACEHOLDER = '<image>';

/**
 * The seeds' system prompt: reasoning in <REASONING>…</REASONING>, then only the final answer in
 * <SOLUTION>…</SOLUTION>, which the format and correctness rewards read (src/rewards/format.ts).
 */
export const DEFAULT_SYSTEM_PROMPT =
  'You are a careful visual reasoning assistant. Look at the image, then think step by step and ' +
  'write your reasoning between <REASONING> and </REASONING>. After that, give only the final ' +
  'answer, a single number without units, between <SOLUTION> and </SOLUTION>.';

export type ContentPart = { type: 'image' } | { type: 'text'; text: string };

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: ContentPart[];
}

export class PlaceholderMismatchError extends Error {
  constructor(readonly placeholders: number, readonly images: number) {
    super(`the text has ${placeholders} ${IMAGE_PLACEHOLDER} placeholder(s) but the row has ${images} image(s)`);
    this.name = 'PlaceholderMismatchError';
  }
}

export function countPlaceholders(text: string): number {
  return text.split(IMAGE_PLACEHOLDER).length - 1;
}

/**
 * The user turn's parts. With placeholders there must be exactly one per image; text between them
 * is kept verbatim and empty pieces are left out.
 */
export function interleave(text: string, imageCount: number): ContentPart[] {
  const pieces = text.split(IMAGE_PLACEHOLDER);
  const placeholders = pieces.length - 1;
  if (placeholders === 0) {
    const parts: ContentPart[] = Array.from({ length: imageCount }, () => ({ type: 'image' as const }));
    if (text !== '') parts.push({ type: 'text', text });
    return parts;
  }
  if (placeholders !== imageCount) throw new PlaceholderMismatchError(placeholders, imageCount);
  const parts: ContentPart[] = [];
  pieces.forEach((piece, i) => {
    if (i > 0) parts.push({ type: 'image' });
    if (piece !== '') parts.push({ type: 'text', text: piece });
  });
  return parts;
}

/** image_only_mode on a row without images: its user turn would be empty. */
export class ImageOnlyPromptError extends Error {
  constructor(readonly rowId: string | undefined) {
    super(`${rowId === undefined ? 'the row' : `row ${rowId}`} has no image, so image_only_mode leaves its user turn empty`);
    this.name = 'ImageOnlyPromptError';
  }
}

export interface ImageLimitOptions {
  /** Keep at most this many of the row's images, the first ones in question order; null or undefined: all. */
  maxImages?: number | null;
  /** Leave the question's text out: the user turn holds only the image parts (image_only_mode). */
  imageOnly?: boolean;
}

type ImageRow = Pick<DatasetRow, 'question' | 'images'> & { id?: string; encoded?: EncodedImage[] };

/** The row's image count, whether its images are decoded or still encoded (loaders' `lazy` option). */
export function rowImageCount(row: ImageRow): number {
  return row.encoded?.length ?? row.images.length;
}

/**
 * The row with only its first `maxImages` images (decoded or encoded) and the `<image>`
 * placeholders of the dropped ones taken out of the text (the text around them stays), and with
 * the text emptied under `imageOnly`; `dropped` counts the images left out. A row whose
 * placeholders do not match its images is returned as it is, for `interleave` to refuse.
 */
export function limitRowImages<R extends ImageRow>(row: R, options: ImageLimitOptions = {}): { row: R; dropped: number } {
  const count = rowImageCount(row);
  if (options.imageOnly && count === 0) throw new ImageOnlyPromptError(row.id);
  const pieces = row.question.split(IMAGE_PLACEHOLDER);
  if (pieces.length > 1 && pieces.length - 1 !== count) return { row, dropped: 0 };
  const keep = options.maxImages === null || options.maxImages === undefined ? count : Math.max(0, Math.min(count, options.maxImages));
  let question = row.question;
  if (keep < count && pieces.length > 1) question = pieces.slice(0, keep + 1).join(IMAGE_PLACEHOLDER) + pieces.slice(keep + 1).join('');
  // Without the text, placeholders have nothing to interleave with: the kept images alone, in order.
  if (options.imageOnly) question = '';
  if (keep === count && question === row.question) return { row, dropped: 0 };
  const out: R = { ...row, question, images: row.images.slice(0, keep) };
  if (row.encoded) out.encoded = row.encoded.slice(0, keep);
  return { row: out, dropped: count - keep };
}

export interface PromptOptions extends ImageLimitOptions {
  /** Used when the row has no system_prompt of its own; null or '' for none. Default: the seeds'. */
  systemPrompt?: string | null;
}

export interface Prompt {
  messages: ChatMessage[];
  /** The row's images that were kept, in the order of the {type:'image'} parts. */
  images: RgbaImage[];
  /** Images of the row left out by `maxImages`. */
  dropped: number;
}

export function buildPrompt(row: Pick<DatasetRow, 'question' | 'images' | 'system_prompt'> & { id?: string }, options: PromptOptions = {}): Prompt {
  const { row: limited, dropped } = limitRowImages(row, options);
  const system = row.system_prompt ?? (options.systemPrompt === undefined ? DEFAULT_SYSTEM_PROMPT : options.systemPrompt);
  const messages: ChatMessage[] = [];
  if (system) messages.push({ role: 'system', content: [{ type: 'text', text: system }] });
  messages.push({ role: 'user', content: interleave(limited.question, limited.images.length) });
  return { messages, images: limited.images, dropped };
}
