// Unknown keys in a configuration, found against a template (the typed defaults, or a full example
// of a nullable sub-object), at any depth, with the path and the nearest known key:
// `lora.rank: unknown field; did you mean r?`. The templates are the one place the known keys live.

export class ConfigError extends Error {
  constructor(message: string) {
    super(`train config: ${message}`);
    this.name = 'ConfigError';
  }
}

/** A plain JSON object (not null, not an array). */
export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Levenshtein distance, small strings only. */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[b.length];
}

/** The known key `key` was most likely meant for: within a third of its length in edits (at least 2), or one a prefix of the other. */
export function nearestKey(key: string, known: readonly string[]): string | null {
  let best: string | null = null;
  let bestD = Infinity;
  const k = key.toLowerCase();
  for (const c of known) {
    const d = distance(k, c.toLowerCase());
    const close = d <= Math.max(2, Math.floor(c.length / 3)) || k.startsWith(c.toLowerCase()) || c.toLowerCase().startsWith(k);
    if (close && d < bestD) [best, bestD] = [c, d];
  }
  return best;
}

/** "path: unknown field; did you mean x?" (or the known fields when none is close). */
export function unknownFieldMessage(path: string, key: string, known: readonly string[]): string {
  const near = nearestKey(key, known);
  return `${path}: unknown field; ${near !== null ? `did you mean ${near}?` : `known fields: ${known.join(', ')}`}`;
}

/**
 * The first key of `input` (recursing into sub-objects that `template` has as objects) that
 * `template` lacks, as the message for it; null when every key is known. Arrays and values are
 * not entered: their contents are checked by the field's own validation.
 */
export function findUnknownKey(input: unknown, template: Record<string, unknown>, path = ''): string | null {
  if (!isPlainObject(input)) return null;
  const known = Object.keys(template);
  for (const [key, value] of Object.entries(input)) {
    const at = path === '' ? key : `${path}.${key}`;
    if (!Object.hasOwn(template, key)) return unknownFieldMessage(at, key, known);
    const sub = template[key];
    if (isPlainObject(sub)) {
      const found = findUnknownKey(value, sub, at);
      if (found !== null) return found;
    }
  }
  return null;
}
