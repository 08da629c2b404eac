// Model files that must be refused with a named error: weights that are not finite (naming the
// tensor), and an index whose shard names point outside the model folder.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { f32ToBf16Bits } from '../../src/model/dtype';
import { firstNonFiniteElement, NonFiniteWeightError, openCheckpoint, pickedFiles, readHeader, blobSource, SafetensorsError } from '../../src/model/safetensors';
import { runCli } from '../helpers/cli';
import { tinyModelFolder } from '../helpers/tinyModelFolder';
import { tinyCheckpoint } from '../fixtures/model-io/tinyCheckpoint';

describe('non-finite weights', () => {
  it('finds NaN and Infinity in F32, BF16 and F16 bytes at any alignment, and nothing in finite ones', () => {
    const f32 = new Uint8Array(new Float32Array([1, -2, 3e38, NaN]).buffer);
    expect(firstNonFiniteElement(f32, 'F32')).toBe(3);
    expect(firstNonFiniteElement(f32.subarray(0, 12), 'F32')).toBe(-1);
    const bf = new Uint8Array(new Uint16Array([f32ToBf16Bits(1), f32ToBf16Bits(-Infinity), 0]).buffer);
    const odd = new Uint8Array(bf.length + 1);
    odd.set(bf, 1);
    expect(firstNonFiniteElement(odd.subarray(1), 'BF16')).toBe(1);
    expect(firstNonFiniteElement(new Uint8Array(new Uint16Array([0x3c00, 0x7bff, 0x7e00]).buffer), 'F16')).toBe(2);
    expect(firstNonFiniteElement(new Uint8Array(new Uint16Array([0x3c00, 0x7bff]).buffer), 'F16')).toBe(-1);
  });

  it('a checkpoint with a NaN weight is refused while streaming, naming the tensor', async () => {
    const ckpt = tinyCheckpoint();
    const bytes = new Uint8Array(ckpt.single);
    const header = await readHeader(blobSource(new Blob([bytes]), 'model.safetensors'));
    const t = header.tensors.find((x) => x.name.endsWith('layers.1.mlp.down_proj.weight'))!;
    const at = t.offset + 2 * 5;
    bytes[at] = 0xc0; // bf16 0x7fc0: NaN
    bytes[at + 1] = 0x7f;
    const cp = await openCheckpoint(pickedFiles([new File([bytes], 'model.safetensors')]));
    const run = async () => {
      for await (const _ of cp.stream()) void _;
    };
    await expect(run()).rejects.toThrow(NonFiniteWeightError);
    await expect(run()).rejects.toThrow(new RegExp(`tensor '${t.name.replace(/\./g, '\\.')}' BF16\\[.*\\] holds a value that is not finite .* at element 5`));
  });

  it('an index shard name pointing outside the model folder is refused', async () => {
    const ckpt = tinyCheckpoint();
    const index = JSON.parse(ckpt.index) as { weight_map: Record<string, string> };
    const first = Object.keys(index.weight_map)[0];
    for (const bad of ['../model-00001-of-00002.safetensors', '/etc/passwd', 'a/../../x.safetensors']) {
      const weight_map = { ...index.weight_map, [first]: bad };
      const files = pickedFiles([...Object.entries(ckpt.shards).map(([n, d]) => new File([d], n)), new File([JSON.stringify({ weight_map })], 'model.safetensors.index.json')]);
      await expect(openCheckpoint(files)).rejects.toThrow(SafetensorsError);
      await expect(openCheckpoint(files)).rejects.toThrow(/outside the model folder/);
    }
  });

  it('npm run cli -- logits on a model with a NaN weight exits 1 naming the tensor', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vlrl-nanmodel-'));
    const model = tinyModelFolder(join(dir, 'model'), 'tiny-a', true);
    const file = readdirSafetensors(model);
    const bytes = new Uint8Array(readFileSync(file));
    const header = await readHeader(blobSource(new Blob([bytes]), file));
    const t = header.tensors.find((x) => x.name.includes('layers.0.self_attn.q_proj.weight'))!;
    const at = t.offset;
    if (t.dtype === 'F32') bytes.set([0, 0, 0xc0, 0x7f], at);
    else bytes.set([0xc0, 0x7f], at);
    writeFileSync(file, bytes);
    writeFileSync(join(dir, 'in.json'), JSON.stringify({ messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }] }));
    const out = await runCli(['logits', '--model', model, '--input', join(dir, 'in.json'), '--quant', 'none', '--out', join(dir, 'out.safetensors')]);
    expect(out.code).toBe(1);
    expect(out.stderr).toMatch(/NonFiniteWeightError: .*tensor '.*layers\.0\.self_attn\.q_proj\.weight'.* not finite/);
  }, 300_000);
});

function readdirSafetensors(dir: string): string {
  const index = join(dir, 'model.safetensors.index.json');
  try {
    const map = JSON.parse(readFileSync(index, 'utf8')) as { weight_map: Record<string, string> };
    return join(dir, Object.entries(map.weight_map).find(([n]) => n.includes('layers.0.self_attn.q_proj.weight'))![1]);
  } catch {
    return join(dir, 'model.safetensors');
  }
}
