// The dataset row every part of the app uses: loaders, synthetic tasks, the prompt builder,
// rollouts and eval records.

/** Straight (non-premultiplied) RGBA, row-major, 4 bytes a pixel; the same layout as ImageData. */
export interface RgbaImage {
  width: number;
  height: number;
  data: Uint8ClampedArray;
}

export interface DatasetRow {
  /** Unique within its data set; the split hashes it. */
  id: string;
  /** In the order their `<image>` placeholders appear in `question` (or, without placeholders, first). Empty while `encoded` holds them. */
  images: RgbaImage[];
  /**
   * The row's images still encoded (loaders' `lazy` option): decoded, down-scaled to max_pixels,
   * only when a batch needs them (src/data/encodedImages.ts); `images` is empty meanwhile.
   */
  encoded?: EncodedImage[];
  /** The user's text; may hold `<image>` placeholders. */
  question: string;
  /** The gold answer, as text (unboxed: a geo3k `\boxed{3}` is stored as `3`). */
  answer: string;
  /** MathVista's answer_type ('integer', 'float', 'text', 'list') where the source has one. */
  answer_type?: string;
  /** Per-row system prompt from the data set's system_prompt column, overriding the default. */
  system_prompt?: string;
  /** Anything else: the synthetic task's parameters, the source's extra columns. */
  meta: Record<string, unknown>;
}

/** An image kept encoded: its bytes, the size its header declares (checked at load), where it came from. */
export interface EncodedImage {
  bytes: Uint8Array;
  width: number;
  height: number;
  /** For messages: "FILE row N image K". */
  source: string;
  /** Resized to exactly this after decoding (the loader's `resize` option); the processor sees this size. */
  resize?: { width: number; height: number };
}

/** A row that could not be used, with the reason; loaders never drop a row without one. */
export interface BrokenRow {
  /** Position in the source (0-based, across files in the order they were read). */
  index: number;
  id?: string;
  reason: BrokenReason;
  detail: string;
}

export type BrokenReason =
  | 'missing question'
  | 'missing answer'
  | 'missing image'
  | 'undecodable image'
  | 'unusable image size'
  | 'image too large'
  | 'unresolved image file'
  | 'placeholder count mismatch'
  | 'invalid row';
