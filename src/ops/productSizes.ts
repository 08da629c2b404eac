// The sizes behind the tensor-core products' buffers, in a module without GPU code so that the
// memory plan (src/model/memoryPlan.ts, which the page imports) reckons with the same numbers the
// ops allocate by (src/ops/matmulQ4F16.ts, src/ops/matmulQ4Mma.ts).

/** Words of an f16 operand of `rows` x `k` in the GEMM's blocks of 32 x 32 (shaders/f16_blocks.wgsl). */
export function f16BlockedWords(rows: number, k: number): number {
  return (Math.ceil(rows / 32) * 32 * k) / 2;
}

/** 128 MiB of f16: the 8B's gate, up and down (12288 x 4096 each) are 96 MiB. A 4-bit weight of at
 * most this many f16 words is expanded once a call into one scratch (MatmulQ4F16Options.expandMaxWords). */
export const EXPAND_MAX_WORDS = 32 * 2 ** 20;

/** Columns the f16 tensor-core GEMM's reduction gains for `adapters` LoRA adapters of rank r (their
 * u side by side after x, src/ops/matmulQ4F16.ts), rounded up to its K step of 32. */
export function loraColumns(adapters: number, r: number): number {
  return 32 * Math.ceil((adapters * r) / 32);
}

/** Columns past maxK the f16 GEMM's copy of x holds from the start: the LoRA terms of three adapters
 * of rank up to 32 (one up to 96) fit without widening it during a step. */
export const LORA_COLUMNS_RESERVED = 96;

/** Logits a log-prob dispatch computes per row at a time (LogProb's chunk along the vocabulary): the
 * vocabulary rows of one LM-head product in training and scoring. */
export const LOGPROB_CHUNK = 8192;

/** The int8 tensor-core GEMM's K block by x's limbs: 128 for two (the most their i32 sums hold), 256 for one. */
export const MMA_K_BLOCK = { 1: 256, 2: 128 } as const;

/** Columns each output of a joined f16 product (MatmulQ4F16.joins) comes in multiples of: the
 * widest tile's, so that no tile straddles two outputs. */
export const JOIN_COLUMNS = 256;

/**
 * Whether the f16 products of one x on weights [n, k] (`ns` their n) may run as one product on
 * their expansions side by side (MatmulQ4F16.joins, which also needs the outputs back to back):
 * 2 or 3 weights expanded (at most expandMaxWords each), outputs of JOIN_COLUMNS multiples, no
 * wider together than maxK (the joined expansion then fits the scratch the widest weight takes:
 * q/k/v join, gate/up do not).
 */
export function joinsWidths(ns: readonly number[], k: number, maxK: number, expandMaxWords = EXPAND_MAX_WORDS): boolean {
  if (ns.length < 2 || ns.length > 3 || ns.some((n) => (n * k) / 2 > expandMaxWords || n % JOIN_COLUMNS !== 0)) return false;
  return ns.reduce((a, n) => a + n, 0) <= maxK;
}

/** Patches the vision tower's tensor-core GEMM takes per dispatch (its x workspace's rows): a
 * 448x448 image's 784 fit; more go through in slices. */
export const VISION_MMA_ROWS = 1024;
