// How the attention backward splits the shared prompt's dK/dV work (src/ops/attention.ts), apart
// from the kernels so that the memory plan (src/model/memoryPlan.ts, in the page's bundle) can
// count its scratch without importing them.

/** Most query chunks of a shared-prefix key tile in the dK/dV backward. */
const MAX_DKV_SPLITS = 8;

/**
 * Query chunks of each shared-prefix key tile in the dK/dV backward: its walk (the queries from
 * the tile to T) over an own tile's (a completion's rows, on average), at most 8; 1 without a
 * prefix (or with only the prompt).
 */
export function dkvSplitsOf(T: number, prefix: number, nseq: number): number {
  if (prefix === 0 || nseq < 2 || T <= prefix) return 1;
  const own = (T - prefix) / (nseq - 1);
  return Math.max(1, Math.min(MAX_DKV_SPLITS, Math.round((T - prefix / 2) / own)));
}
