// The app's record of the data a run trained on (src/data/provenance.ts): its row hash is the
// CLI's data.json hash (src/node/dataRecord.ts) on the same rows, encoded and decoded images
// alike, and a difference of source, file size or rows is named in words.
import { describe, expect, it } from 'vitest';
import { dataProvenance, provenanceDifference, rowsSha256 } from '../../src/data/provenance';
import type { DatasetRow } from '../../src/data/types';
import { rowsDigest } from '../../src/node/dataRecord';
import { defaultDataset } from '../../src/rl/dataSource';

const rows: DatasetRow[] = [
  { id: 'a', question: '<image>How many?', answer: '3', images: [], encoded: [{ bytes: Uint8Array.from([137, 80, 78, 71, 1, 2, 3]), width: 40, height: 32, source: 'f row 0 image 0' }], meta: {} },
  { id: 'b', question: 'Which?', answer: 'ü', system_prompt: 'Be brief.', images: [{ width: 2, height: 1, data: Uint8ClampedArray.from([1, 2, 3, 255, 4, 5, 6, 255]) }], meta: {} },
];

describe('data provenance', () => {
  it('hashes rows as the CLI does, and any change of a row changes the hash', async () => {
    expect(await rowsSha256(rows)).toBe(rowsDigest(rows));
    expect(await rowsSha256([])).toBe(rowsDigest([]));
    const changed = [rows[0], { ...rows[1], answer: 'u' }];
    expect(await rowsSha256(changed)).not.toBe(await rowsSha256(rows));
    const pixel = [rows[0], { ...rows[1], images: [{ ...rows[1].images[0], data: Uint8ClampedArray.from([1, 2, 3, 255, 4, 5, 7, 255]) }] }];
    expect(await rowsSha256(pixel)).not.toBe(await rowsSha256(rows));
  });

  it('names what differs: the source, the file size, the rows; null for the same data', async () => {
    const file = { ...defaultDataset('file'), path: 'rows.jsonl' };
    const before = await dataProvenance(rows, file, 1000);
    expect(before).toMatchObject({ dataset: file, fileBytes: 1000, rows: 2, rowsSha256: rowsDigest(rows) });
    expect(provenanceDifference(before, await dataProvenance(rows, file, 1000))).toBeNull();
    expect(provenanceDifference(before, await dataProvenance(rows, file, 1001))).toBe('rows.jsonl is 1001 bytes now, 1000 when the run started: the file changed');
    expect(provenanceDifference(before, await dataProvenance(rows.slice(1), file, 1000))).toMatch(/^the rows differ from those it trained on \(1 rows with SHA-256 [0-9a-f]{12}… now, 2 with [0-9a-f]{12}… recorded\)$/);
    const hub = { ...defaultDataset('hub'), repo_id: 'org/geo', revision: 'abc123' };
    expect(provenanceDifference(before, await dataProvenance(rows, hub))).toBe('it trained on rows.jsonl, not the hub data set org/geo (default/train@abc123)');
    const synthetic = defaultDataset('synthetic');
    expect(provenanceDifference(await dataProvenance(rows, synthetic), await dataProvenance(rows, { ...synthetic, seed: 1 }))).toMatch(/^it trained on the synthetic tasks .* seed 0, .*not the synthetic tasks .* seed 1,/);
  });
});
