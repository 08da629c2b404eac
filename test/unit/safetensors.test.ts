import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, fromFloat32, toFloat32, toInt32 } from '../../src/model/dtype';
import {
  blobSource,
  MissingFileError,
  MissingShardError,
  nodeDirFiles,
  openCheckpoint,
  pickedFiles,
  readAllTensors,
  readHeader,
  SafetensorsError,
  serializeSafetensors,
  TruncatedFileError,
} from '../../src/model/safetensors';
import { checkCheckpointTensors, WeightShapeError } from '../../src/model/weightShapes';
import { tinyCheckpoint, tinyConfig } from '../fixtures/model-io/tinyCheckpoint';

const bytesOf = (a: ArrayLike<number>, ctor: new (a: ArrayLike<number>) => ArrayBufferView) => new Uint8Array(new ctor(a).buffer as ArrayBuffer);

describe('dtype conversion', () => {
  it('bf16 and f16 decode exactly and encode with round-to-nearest-even', () => {
    expect([...toFloat32(bytesOf([0x3f80, 0xc020, 0x4049, 0x0000, 0x8000, 0x7f80], Uint16Array), 'BF16')]).toEqual([1, -2.5, 3.140625, 0, -0, Infinity]);
    expect([...toFloat32(bytesOf([0x3c00, 0xc100, 0x0001, 0x7bff, 0xfc00], Uint16Array), 'F16')]).toEqual([1, -2.5, 2 ** -24, 65504, -Infinity]);
    // 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0).
    expect(f32ToBf16Bits(1 + 2 ** -8)).toBe(0x3f80);
    expect(f32ToBf16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(f32ToF16Bits(1 + 2 ** -11)).toBe(0x3c00);
    expect(f32ToF16Bits(1e6)).toBe(0x7c00);
    expect(f16BitsToF32(f32ToF16Bits(2 ** -20))).toBe(2 ** -20);
    for (const x of [0.1, -7.25, 1234.5678, 3e-5]) {
      expect(Math.abs(toFloat32(fromFloat32(new Float32Array([x]), 'BF16'), 'BF16')[0] - x)).toBeLessThanOrEqual(Math.abs(x) * 2 ** -8);
      expect(Math.abs(toFloat32(fromFloat32(new Float32Array([x]), 'F16'), 'F16')[0] - x)).toBeLessThanOrEqual(Math.abs(x) * 2 ** -11 + 2 ** -25);
    }
  });

  it('decodes from unaligned offsets and integer dtypes', () => {
    const buf = new Uint8Array(9);
    buf.set(bytesOf([1.5, -3], Float32Array), 1);
    expect([...toFloat32(buf.subarray(1), 'F32')]).toEqual([1.5, -3]);
    expect([...toInt32(bytesOf([7, -2], Int32Array), 'I32')]).toEqual([7, -2]);
    expect([...toInt32(new Uint8Array(new BigInt64Array([5n, -9n]).buffer), 'I64')]).toEqual([5, -9]);
    expect(() => toInt32(new Uint8Array(new BigInt64Array([2n ** 40n]).buffer), 'I64')).toThrow(/does not fit/);
  });
});

describe('safetensors header', () => {
  const file = serializeSafetensors([
    { name: 'a', dtype: 'F32', shape: [2, 3], data: bytesOf([1, 2, 3, 4, 5, 6], Float32Array) },
    { name: 'b', dtype: 'BF16', shape: [3], data: bytesOf([0x3f80, 0x4000, 0x4040], Uint16Array) },
  ], { format: 'pt' });

  it('round-trips through serialize and readHeader', async () => {
    const h = await readHeader(blobSource(new Blob([file]), 'x.safetensors'));
    expect(h.dataOffset % 8).toBe(0);
    expect(h.metadata).toEqual({ format: 'pt' });
    expect(h.tensors.map((t) => [t.name, t.dtype, t.shape, t.byteLength])).toEqual([['a', 'F32', [2, 3], 24], ['b', 'BF16', [3], 6]]);
    const all = await readAllTensors(blobSource(new Blob([file])));
    expect([...toFloat32(all.get('b')!.bytes, 'BF16')]).toEqual([1, 2, 3]);
  });

  it('rejects truncated files, bad dtypes and bad offsets', async () => {
    await expect(readHeader(blobSource(new Blob([file.subarray(0, file.length - 1)]), 'cut.safetensors'))).rejects.toThrow(TruncatedFileError);
    await expect(readHeader(blobSource(new Blob([file.subarray(0, file.length - 1)]), 'cut.safetensors'))).rejects.toThrow(/cut\.safetensors: tensor 'b' ends at data byte 30, but the file holds only 29/);
    await expect(readHeader(blobSource(new Blob([file.subarray(0, 20)]), 'h.safetensors'))).rejects.toThrow(/header declares \d+ bytes, but the file has only 12/);
    await expect(readHeader(blobSource(new Blob([file.subarray(0, 5)]), 'tiny'))).rejects.toThrow(TruncatedFileError);
    const forge = (header: object) => {
      const json = new TextEncoder().encode(JSON.stringify(header));
      const out = new Uint8Array(8 + json.length + 16);
      new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
      out.set(json, 8);
      return blobSource(new Blob([out]), 'forged');
    };
    await expect(readHeader(forge({ t: { dtype: 'F8_E4M3', shape: [1], data_offsets: [0, 1] } }))).rejects.toThrow(/dtype "F8_E4M3"; supported: BF16, F16, F32, I32, I64/);
    await expect(readHeader(forge({ t: { dtype: 'F32', shape: [3], data_offsets: [0, 8] } }))).rejects.toThrow(/needs 12 bytes, but data_offsets span 8/);
    await expect(readHeader(forge({ t: { dtype: 'F32', shape: [2], data_offsets: [0, 8] }, u: { dtype: 'F32', shape: [2], data_offsets: [4, 12] } }))).rejects.toThrow(/overlap/);
    await expect(readHeader(forge({ t: { dtype: 'F32', shape: [4], data_offsets: [8, 24] } }))).rejects.toThrow(TruncatedFileError);
    const garbage = new Uint8Array(16);
    new DataView(garbage.buffer).setBigUint64(0, 2n ** 40n, true);
    await expect(readHeader(blobSource(new Blob([garbage]), 'g'))).rejects.toThrow(SafetensorsError);
  });
});

describe('checkpoints from local folders and picked files', () => {
  const ckpt = tinyCheckpoint();
  const dir = mkdtempSync(join(tmpdir(), 'vlrl-st-'));
  for (const [name, data] of Object.entries(ckpt.shards)) writeFileSync(join(dir, name), data);
  writeFileSync(join(dir, 'model.safetensors.index.json'), ckpt.index);

  it('streams a sharded checkpoint from a Node folder, tensor by tensor, with bf16 values intact', async () => {
    const cp = await openCheckpoint(nodeDirFiles(dir));
    expect(cp.files).toEqual(Object.keys(ckpt.shards));
    expect(checkCheckpointTensors(tinyConfig, cp.tensors.values()).size).toBe(ckpt.values.size);
    const progress: number[] = [];
    let n = 0;
    for await (const { tensor, bytes } of cp.stream({ onProgress: (p) => progress.push(p.bytesDone), chunkBytes: 1024 })) {
      expect(toFloat32(bytes, tensor.dtype)).toEqual(ckpt.values.get(tensor.name));
      n++;
    }
    expect(n).toBe(ckpt.values.size);
    expect(progress.at(-1)).toBe(cp.totalBytes);
    expect(progress.every((p, i) => i === 0 || p > progress[i - 1])).toBe(true);
  });

  it('reads a single-file checkpoint the user picked', async () => {
    const cp = await openCheckpoint(pickedFiles([new File([ckpt.single], 'model.safetensors'), new File(['{}'], 'config.json')]));
    const name = 'model.language_model.layers.1.mlp.down_proj.weight';
    expect(toFloat32(await cp.read(name), 'BF16')).toEqual(ckpt.values.get(name));
  });

  it('reads rows of a tensor in pieces, checked finite, the element index counted from the tensor start', async () => {
    const cp = await openCheckpoint(nodeDirFiles(dir));
    const name = 'model.language_model.layers.1.mlp.down_proj.weight';
    const [rows, cols] = cp.tensors.get(name)!.shape;
    const want = ckpt.values.get(name)!;
    expect(toFloat32(await cp.readRows(name, 3, 2, undefined), 'BF16')).toEqual(want.subarray(3 * cols, 5 * cols));
    await expect(cp.readRows(name, rows - 1, 2)).rejects.toThrow(new RegExp(`rows \\[${rows - 1}, ${rows + 1}\\) of tensor '${name.replace(/\./g, '\\.')}' are outside its ${rows}`));
    // A NaN in row 5: found by the piece holding it, at its element of the whole tensor.
    const nan = tinyCheckpoint();
    const t = (await readHeader(blobSource(new Blob([nan.single])))).tensors.find((x) => x.name === name)!;
    const at = 5 * cols + 2;
    nan.single[t.offset + 2 * at + 1] = 0x7f;
    nan.single[t.offset + 2 * at] = 0xc0;
    const bad = await openCheckpoint(pickedFiles([new File([nan.single], 'model.safetensors')]));
    await expect(bad.readRows(name, 0, 4)).resolves.toBeInstanceOf(Uint8Array);
    await expect(bad.readRows(name, 4, 2)).rejects.toThrow(new RegExp(`not finite \\(NaN or Infinity\\) at element ${at}:`));
  });

  it('names the missing shard and the missing single file', async () => {
    const files = Object.entries(ckpt.shards).slice(1).map(([n, d]) => new File([d], n));
    const picked = pickedFiles([...files, new File([ckpt.index], 'model.safetensors.index.json')], 'my folder');
    await expect(openCheckpoint(picked)).rejects.toThrow(MissingShardError);
    await expect(openCheckpoint(picked)).rejects.toThrow(/model-00001-of-00002\.safetensors not found in my folder: model\.safetensors\.index\.json places '.+' and others in it/);
    await expect(openCheckpoint(pickedFiles([], 'empty'))).rejects.toThrow(MissingFileError);
  });

  it('reports a truncated shard and a tensor of the wrong shape', async () => {
    const [first, second] = Object.entries(ckpt.shards);
    const cut = pickedFiles([new File([first[1]], first[0]), new File([second[1].subarray(0, second[1].length - 10)], second[0]), new File([ckpt.index], 'model.safetensors.index.json')]);
    await expect(openCheckpoint(cut)).rejects.toThrow(/model-00002-of-00002\.safetensors: tensor '.+' ends at data byte \d+, .*truncated/);
    const bad = tinyCheckpoint((name, s) => (name.endsWith('layers.0.self_attn.q_proj.weight') ? [s[0] / 2, s[1]] : s));
    const cp = await openCheckpoint(pickedFiles([new File([bad.single], 'model.safetensors')]));
    expect(() => checkCheckpointTensors(tinyConfig, cp.tensors.values())).toThrow(WeightShapeError);
    expect(() => checkCheckpointTensors(tinyConfig, cp.tensors.values())).toThrow(/q_proj\.weight' has shape \[16, 16\], but config\.json implies \[32, 16\]/);
    const partial = tinyCheckpoint();
    const names = [...(await openCheckpoint(pickedFiles([new File([partial.single], 'model.safetensors')]))).tensors.values()].filter((t) => !t.name.includes('k_norm'));
    expect(() => checkCheckpointTensors(tinyConfig, names)).toThrow(/lacks 2 tensor\(s\) config\.json requires: model\.language_model\.layers\.0\.self_attn\.k_norm\.weight/);
  });
});
