// Two copies of a fixture model for LoRA tests: one with the fixture's PEFT adapter attached
// (unmerged), one with every adapter merged into its f32 weights on the CPU (W + alpha/r·B·A).
// `folder`: 'lora' (every projection) or 'lora-dropout' (tiny-b: a subset of the target modules).
import { readFileSync } from 'node:fs';
import type { Gpu } from '../../src/gpu';
import { mergeDense } from '../../src/adapter/merge';
import { parsePeft } from '../../src/adapter/peft';
import { uploadAdapter } from '../../src/adapter/upload';
import { LORA_PROJECTIONS, loraModuleName } from '../../src/model/decoder';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { nodeFileSource, readAllTensors } from '../../src/model/safetensors';
import { modelDir, modelFiles, type FixtureModel } from './modelFixtures';

export async function adapterAndMerged(gpu: Gpu, m: FixtureModel, folder: 'lora' | 'lora-dropout' = 'lora'): Promise<{ net: Qwen3VL; merged: Qwen3VL }> {
  const dir = `${modelDir(m)}/${folder}`;
  const adapter = parsePeft(m, readFileSync(`${dir}/adapter_config.json`, 'utf8'), await readAllTensors(await nodeFileSource(`${dir}/adapter_model.safetensors`)));
  const opts = { quant: 'none' } as const;
  const net = await Qwen3VL.load(gpu, modelFiles(m), opts);
  net.attachLora(uploadAdapter(gpu, adapter, net.config.text.numLayers));
  const merged = await Qwen3VL.load(gpu, modelFiles(m), opts);
  const byName = new Map(adapter.modules.map((a) => [a.module, a]));
  for (const [l, layer] of merged.weights.language.layers.entries()) {
    for (const proj of LORA_PROJECTIONS) {
      const w = layer[proj];
      if (w.kind !== 'dense') throw new Error('expected dense weights');
      const module = byName.get(loraModuleName(l, proj));
      if (module) gpu.write(w.w, mergeDense(await gpu.readF32(w.w), module));
    }
  }
  return { net, merged };
}
