// Resume verifies what it resumes from: the tensor file's checksum, every tensor's shape and
// finiteness, the data cursor, and that the data is the data the run trained on.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Gpu } from '../../src/gpu';
import { readAllTensors, serializeSafetensors, blobSource } from '../../src/model/safetensors';
import { trainRun, type TrainRunOptions } from '../../src/node/commands/train';
import { DataProvenanceError, readDataRecord } from '../../src/node/dataRecord';
import { CheckpointError, DataCursorError } from '../../src/rl/checkpoint';
import { crc32Hex } from '../../src/rl/checksum';
import { testGpu } from '../helpers/gpu';
import { ToyPolicy, toyPrompts, toyRunConfig } from '../helpers/toyPolicy';

const config = toyRunConfig({ max_steps: 2, save_steps: 1 });
const quiet = { log: () => undefined, warn: () => undefined };

let gpu: Gpu;
let root: string;
const open = (rows = 4) => async (g: Gpu) => ({ policy: await ToyPolicy.create(g, { r: 2, alpha: 4 }), data: toyPrompts(rows) });
const resume = (dir: string, extra: Partial<TrainRunOptions> = {}) => trainRun(gpu, open(), { config: {}, steps: 3, outDir: dir, resume: true, ...quiet, ...extra });

/** A copy of the trained run, with `edit` applied to its latest checkpoint's files. */
function variant(name: string, edit: (files: { json: Record<string, unknown>; tensors: Uint8Array }) => Promise<void> | void) {
  return async () => {
    const dir = join(root, name);
    cpSync(join(root, 'run'), dir, { recursive: true });
    const folder = join(dir, readFileSync(join(dir, 'latest'), 'utf8'));
    const files = { json: JSON.parse(readFileSync(join(folder, 'checkpoint.json'), 'utf8')) as Record<string, unknown>, tensors: new Uint8Array(readFileSync(join(folder, 'tensors.safetensors'))) };
    await edit(files);
    writeFileSync(join(folder, 'checkpoint.json'), JSON.stringify(files.json));
    writeFileSync(join(folder, 'tensors.safetensors'), files.tensors);
    return dir;
  };
}

/** Rewrites checkpoint.json's checksum to match the edited tensor file (an edit the checksum alone cannot catch). */
const fixCrc = (f: { json: Record<string, unknown>; tensors: Uint8Array }): void => {
  (f.json.integrity as { crc32: string }).crc32 = crc32Hex(f.tensors);
};

async function rewriteTensor(f: { json: Record<string, unknown>; tensors: Uint8Array }, name: string, change: (x: Float32Array) => Float32Array) {
  const all = await readAllTensors(blobSource(new Blob([f.tensors as Uint8Array<ArrayBuffer>]), 'tensors.safetensors'));
  f.tensors = serializeSafetensors(
    [...all].map(([n, { info, bytes }]) => {
      const data = n === name ? change(new Float32Array(new Uint8Array(bytes).buffer)) : new Float32Array(new Uint8Array(bytes).buffer);
      return { name: n, dtype: 'F32' as const, shape: n === name ? [data.length] : info.shape, data: new Uint8Array(data.buffer) };
    }),
  );
}

beforeAll(async () => {
  gpu = await testGpu();
  root = mkdtempSync(join(tmpdir(), 'vlrl-ckpt-'));
  await trainRun(gpu, open(), { config, outDir: join(root, 'run'), resume: false, ...quiet });
}, 120_000);

describe('checkpoint integrity on resume', () => {
  it('an untouched checkpoint resumes', async () => {
    const dir = join(root, 'clean');
    cpSync(join(root, 'run'), dir, { recursive: true });
    expect((await resume(dir)).state).toBe('finished');
  }, 60_000);

  it('LoRA tensors overwritten with NaN: refused by the checksum, and by the finiteness check when the checksum is forged', async () => {
    const nan = (f: { tensors: Uint8Array }) => {
      const view = new DataView(f.tensors.buffer, f.tensors.byteOffset);
      const start = f.tensors.length - 64; // the last tensors' data
      for (let i = start; i < f.tensors.length; i += 4) view.setFloat32(i, NaN, true);
    };
    await expect(resume(await variant('nan', nan)())).rejects.toThrow(/tensors\.safetensors does not match its checksum/);
    const forged = await variant('nan-forged', (f) => {
      nan(f);
      fixCrc(f);
    })();
    await expect(resume(forged)).rejects.toThrow(CheckpointError);
    await expect(resume(forged)).rejects.toThrow(/tensor toy\.logits\.lora_B\.weight\.exp_avg(_sq)? holds NaN at element \d+/);
  }, 60_000);

  it('flipped floats (finite) are refused by the checksum', async () => {
    const dir = await variant('flipped', (f) => {
      const view = new DataView(f.tensors.buffer, f.tensors.byteOffset);
      for (let i = f.tensors.length - 4 * 40; i < f.tensors.length; i += 4) view.setFloat32(i, -view.getFloat32(i, true) + 0.5, true);
    })();
    await expect(resume(dir)).rejects.toThrow(CheckpointError);
    await expect(resume(dir)).rejects.toThrow(/does not match its checksum/);
  }, 60_000);

  it('a half-length exp_avg is refused naming the tensor and both shapes', async () => {
    const name = 'toy.logits.lora_A.weight.exp_avg';
    const half = (x: Float32Array) => x.slice(0, x.length / 2);
    await expect(resume(await variant('half', (f) => rewriteTensor(f, name, half))())).rejects.toThrow(/checksum/);
    const forged = await variant('half-forged', async (f) => {
      await rewriteTensor(f, name, half);
      fixCrc(f);
    })();
    await expect(resume(forged)).rejects.toThrow(/tensor toy\.logits\.lora_A\.weight\.exp_avg has shape \[7\] \(checkpoint\.json records \[14\]\); its adapter needs \[14\]/);
  }, 60_000);

  it('a latest pointing outside the run or at a missing folder is a CheckpointError', async () => {
    for (const [name, target, message] of [
      ['latest-out', '../../etc', /names "\.\.\/\.\.\/etc", not a step-NNNNNNNN folder/],
      ['latest-gone', 'step-00000099', /names step-00000099, but .*checkpoint\.json and .*tensors\.safetensors are missing/],
    ] as const) {
      const dir = join(root, name);
      cpSync(join(root, 'run'), dir, { recursive: true });
      writeFileSync(join(dir, 'latest'), target);
      await expect(resume(dir)).rejects.toThrow(CheckpointError);
      await expect(resume(dir)).rejects.toThrow(message);
    }
  }, 60_000);

  it('a bad data cursor is a DataCursorError', async () => {
    for (const [name, data] of [
      ['cursor-range', { order: [0, 1, 2, 99], position: 1 }],
      ['cursor-position', { order: [0, 1, 2, 3], position: 9 }],
      ['cursor-shape', 'oops'],
    ] as const) {
      const dir = await variant(name, (f) => void (f.json.data = data))();
      await expect(resume(dir)).rejects.toThrow(DataCursorError);
    }
  }, 60_000);
});

describe('the data a run trained on', () => {
  it('data.json records the rows; other rows, a missing data.json or a changed file are refused unless allowed', async () => {
    const rec = readDataRecord(join(root, 'run'))!;
    expect(rec.rows).toBe(4);
    expect(rec.rowsSha256).toMatch(/^[0-9a-f]{64}$/);

    const other = join(root, 'other-rows');
    cpSync(join(root, 'run'), other, { recursive: true });
    await expect(trainRun(gpu, open(5), { config: {}, steps: 3, outDir: other, resume: true, ...quiet })).rejects.toThrow(DataProvenanceError);
    // Allowed: a new pass over the 5 rows (the cursor over 4 is dropped), and data.json records them.
    const warned: string[] = [];
    expect((await trainRun(gpu, open(5), { config: {}, steps: 3, outDir: other, resume: true, allowDataChange: true, log: () => undefined, warn: (l) => warned.push(l) })).state).toBe('finished');
    expect(warned.some((w) => /resuming on other data \(the rows differ/.test(w))).toBe(true);
    expect(readDataRecord(other)!.rows).toBe(5);

    const missing = join(root, 'no-data-json');
    cpSync(join(root, 'run'), missing, { recursive: true });
    rmSync(join(missing, 'data.json'));
    await expect(resume(missing)).rejects.toThrow(/data\.json is missing: the data the run trained on is unknown; pass --allow-data-change/);
    expect((await resume(missing, { allowDataChange: true })).state).toBe('finished');
    expect(readDataRecord(missing)!.rowsSha256).toBe(rec.rowsSha256);
  }, 120_000);

  it('a file-backed run records the absolute path and size, and refuses a changed file', async () => {
    const file = join(root, 'rows.jsonl');
    writeFileSync(file, '{"a":1}\n');
    const dataset = { kind: 'file' as const, path: file };
    const dir = join(root, 'file-run');
    await trainRun(gpu, open(), { config: { ...config, dataset }, outDir: dir, resume: false, ...quiet });
    expect(readDataRecord(dir)).toMatchObject({ dataset: { kind: 'file', path: resolve(file) }, fileBytes: 8, rows: 4 });
    writeFileSync(file, '{"a":1}\n{"a":2}\n');
    await expect(trainRun(gpu, open(), { config: {}, steps: 3, outDir: dir, resume: true, ...quiet })).rejects.toThrow(/is 16 bytes now, 8 when the run started/);
  }, 120_000);
});
