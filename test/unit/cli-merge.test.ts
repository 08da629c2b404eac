// `merge` and `logits --adapter` on the tiny fixtures: the merged folder (bf16 shards as the source,
// an index, the text files copied) loads in the engine, unquantized, and its logits match the base
// model's with the same adapter applied unmerged; bad inputs get named errors.
import { describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from '../helpers/cli';
import { testGpu } from '../helpers/gpu';
import { modelDir, readReference, refPath } from '../helpers/modelFixtures';
import { expectClose } from '../helpers/reference';
import { importPeft } from '../../src/adapter/peft';
import { uploadAdapter } from '../../src/adapter/upload';
import { toFloat32 } from '../../src/model/dtype';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { nodeDirFiles, nodeFileSource, readAllTensors, readHeader } from '../../src/model/safetensors';

const dir = mkdtempSync(join(tmpdir(), 'cli-merge-'));
const ADAPTER = join(modelDir('tiny-a'), 'lora');

describe('merge command', () => {
  it('writes a sharded bf16 folder whose logits (engine, unquantized) are those of base + adapter', async () => {
    const out = join(dir, 'merged');
    const r = await runCli(['merge', '--model', modelDir('tiny-a'), '--adapter', ADAPTER, '--out', out, '--max-shard-size', '300000']);
    expect(r.code, r.stderr).toBe(0);
    const files = readdirSync(out).sort();
    const shards = files.filter((f) => f.endsWith('.safetensors'));
    expect(shards.length).toBeGreaterThan(1);
    expect(files).toContain('config.json');
    expect(files).toContain('generation_config.json');
    const index = JSON.parse(readFileSync(join(out, 'model.safetensors.index.json'), 'utf8')) as { weight_map: Record<string, string> };
    const srcIndex = JSON.parse(readFileSync(join(modelDir('tiny-a'), 'model.safetensors.index.json'), 'utf8')) as { weight_map: Record<string, string> };
    expect(Object.keys(index.weight_map).sort()).toEqual(Object.keys(srcIndex.weight_map).sort());
    for (const s of shards) {
      const h = await readHeader(await nodeFileSource(join(out, s)));
      expect(new Set(h.tensors.map((t) => t.dtype))).toEqual(new Set(['BF16']));
    }

    const gpu = await testGpu();
    const ref = await readReference('tiny-a', 'image1');
    const images = { pixelValues: ref.pixelValues!, gridThw: ref.gridThw! };
    const base = await Qwen3VL.load(gpu, nodeDirFiles(modelDir('tiny-a')), { quant: 'none' });
    base.attachLora(uploadAdapter(gpu, await importPeft(nodeDirFiles(ADAPTER)), base.config.text.numLayers));
    const withAdapter = await base.logits(ref.inputIds, images, { lora: true });
    const without = await base.logits(ref.inputIds, images, { lora: false });
    const merged = await Qwen3VL.load(gpu, nodeDirFiles(out), { quant: 'none' });
    const got = await merged.logits(ref.inputIds, images);
    const effect = expectClose(withAdapter, without, { rtol: 0, atol: Infinity }).maxAbs;
    const gap = expectClose(got, withAdapter, { rtol: 0, atol: Infinity }).maxAbs;
    // The same merge kept in f32 shows the merge itself exact; bf16 adds one rounding of each merged weight.
    const out32 = join(dir, 'merged-f32');
    const r32 = await runCli(['merge', '--model', modelDir('tiny-a'), '--adapter', ADAPTER, '--out', out32, '--dtype', 'f32']);
    expect(r32.code, r32.stderr).toBe(0);
    const merged32 = await Qwen3VL.load(gpu, nodeDirFiles(out32), { quant: 'none' });
    const gap32 = expectClose(await merged32.logits(ref.inputIds, images), withAdapter, { rtol: 0, atol: 1e-4, what: 'f32-merged vs base + adapter' }).maxAbs;
    console.log(`merge: max abs gap to base + adapter, bf16 ${gap.toExponential(2)}, f32 ${gap32.toExponential(2)}; the adapter's effect ${effect.toExponential(2)}`);
    expect(effect).toBeGreaterThan(1);
    expect(gap).toBeLessThan(effect / 20); // measured 2.5e-2 against an effect of 2.3

    // logits --adapter applies the same adapter as the engine does in process.
    const logitsOut = join(dir, 'logits.safetensors');
    const l = await runCli(['logits', '--model', modelDir('tiny-a'), '--input', refPath('tiny-a', 'image1'), '--quant', 'none', '--adapter', ADAPTER, '--out', logitsOut]);
    expect(l.code, l.stderr).toBe(0);
    const t = (await readAllTensors(await nodeFileSource(logitsOut))).get('logits')!;
    expectClose(toFloat32(t.bytes, t.info.dtype), withAdapter, { rtol: 0, atol: 1e-5, what: 'logits --adapter vs in process' });

    // generate --adapter: greedy tokens of base + adapter = those of the f32-merged model, not the base's.
    const greedy = async (model: string, extra: string[] = []) => {
      const g = await runCli(['generate', '--model', model, '--input', refPath('tiny-a', 'image1'), '--quant', 'none', '--max-new-tokens', '12', '--temperature', '0', ...extra]);
      expect(g.code, g.stderr).toBe(0);
      return (JSON.parse(g.stdout) as { tokens: number[] }).tokens;
    };
    const adapted = await greedy(modelDir('tiny-a'), ['--adapter', ADAPTER]);
    expect(adapted).toEqual(await greedy(out32));
    expect(ref.greedy.length).toBeGreaterThanOrEqual(12);
    expect(adapted).not.toEqual(Array.from(ref.greedy.slice(0, 12))); // transformers' greedy tokens of the base model
  });

  it('refuses an existing --out without --overwrite, and an adapter of another shape, naming them', async () => {
    const out = join(dir, 'exists');
    const first = await runCli(['merge', '--model', modelDir('tiny-a'), '--adapter', ADAPTER, '--out', out]);
    expect(first.code, first.stderr).toBe(0);
    const again = await runCli(['merge', '--model', modelDir('tiny-a'), '--adapter', ADAPTER, '--out', out]);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toMatch(/exists; pass --overwrite/);
    const over = await runCli(['merge', '--model', modelDir('tiny-a'), '--adapter', ADAPTER, '--out', out, '--overwrite']);
    expect(over.code, over.stderr).toBe(0);
    const wrong = await runCli(['merge', '--model', modelDir('tiny-a'), '--adapter', join(modelDir('tiny-b'), 'lora'), '--out', join(dir, 'wrong')]);
    expect(wrong.code).not.toBe(0);
    expect(wrong.stderr).toMatch(/does not fit this model: model\.language_model\.layers\.0\.\S+ is \[\d+, \d+\] in the model but the adapter is for/);
    expect(existsSync(join(dir, 'wrong'))).toBe(false);
    const noAdapter = await runCli(['logits', '--model', modelDir('tiny-a'), '--input', refPath('tiny-a', 'text'), '--adapter', dir, '--out', join(dir, 'x.safetensors')]);
    expect(noAdapter.code).not.toBe(0);
    expect(noAdapter.stderr).toMatch(/adapter_config\.json not found in /);
  });
});
