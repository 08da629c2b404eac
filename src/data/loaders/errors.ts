// A data file that cannot be read at all (empty, not JSON, not parquet, not UTF-8, a folder):
// one named error that says which file and, where it applies, where in it.

export class DataFileError extends Error {
  constructor(readonly file: string, detail: string) {
    super(`${file}: ${detail}`);
    this.name = 'DataFileError';
  }
}

/** Offset of the first byte that does not continue a valid UTF-8 sequence (RFC 3629), or -1. */
export function firstInvalidUtf8(b: Uint8Array): number {
  for (let i = 0; i < b.length; ) {
    const c = b[i];
    let n: number;
    let lo = 0x80;
    let hi = 0xbf;
    if (c < 0x80) n = 0;
    else if (c >= 0xc2 && c <= 0xdf) n = 1;
    else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      if (c === 0xe0) lo = 0xa0;
      if (c === 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      if (c === 0xf0) lo = 0x90;
      if (c === 0xf4) hi = 0x8f;
    } else return i;
    for (let k = 1; k <= n; k++) {
      const x = b[i + k];
      if (x === undefined || x < (k === 1 ? lo : 0x80) || x > (k === 1 ? hi : 0xbf)) return i;
    }
    i += n + 1;
  }
  return -1;
}

/** The bytes as UTF-8 text; invalid UTF-8 (Latin-1 text, say) is a DataFileError naming the byte offset, never U+FFFD. */
export function utf8Text(file: string, bytes: Uint8Array): string {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    const at = firstInvalidUtf8(bytes);
    const shown = at >= 0 ? ` at byte offset ${at} (0x${bytes[at].toString(16).padStart(2, '0')})` : '';
    throw new DataFileError(file, `is not valid UTF-8${shown}: save it as UTF-8 (it may be Latin-1 or another legacy encoding)`);
  }
}
