// An imported PEFT adapter onto the GPU, in the order the model attaches adapters
// (layer after layer, LORA_PROJECTIONS order within a layer, then the vision mergers':
// Qwen3VL.attachLora); any subset of the projections (PEFT's target_modules).
import type { Gpu } from '../gpu';
import { createLoraParamSet, type LoraParams } from '../ops/loraParams';
import { LORA_PROJECTIONS, loraModuleName } from '../model/decoder';
import { AdapterError, type AdapterModule, type PeftAdapter } from './peft';

/** A vision merger's linear layer: [1] the merger (absent: the final one), [2] 1 or 2. */
const VISION_MERGER = /^model\.visual\.(?:merger|deepstack_merger_list\.(\d+))\.linear_fc([12])$/;
/** A vision block's adaptable layer: [1] the block, [2] the layer. */
const VISION_BLOCK = /^model\.visual\.blocks\.(\d+)\.(attn\.qkv|attn\.proj|mlp\.linear_fc1|mlp\.linear_fc2)$/;
const BLOCK_LAYERS = ['attn.qkv', 'attn.proj', 'mlp.linear_fc1', 'mlp.linear_fc2'];

/** Mergers first (the final one, then the DeepStack ones by index; fc1 before fc2), then the blocks by index and layer. */
function visionOrder(m: AdapterModule): number {
  const merger = VISION_MERGER.exec(m.module);
  if (merger) return (merger[1] === undefined ? 0 : 1 + Number(merger[1])) * 2 + Number(merger[2]);
  const [, i, layer] = VISION_BLOCK.exec(m.module)!;
  return 1e6 + Number(i) * BLOCK_LAYERS.length + BLOCK_LAYERS.indexOf(layer);
}

export function uploadAdapter(gpu: Gpu, adapter: PeftAdapter, numLayers: number): LoraParams[] {
  const byName = new Map(adapter.modules.map((m) => [m.module, m]));
  const chosen: AdapterModule[] = [];
  const known = new Set<string>();
  for (let l = 0; l < numLayers; l++) {
    for (const proj of LORA_PROJECTIONS) {
      const name = loraModuleName(l, proj);
      known.add(name);
      const m = byName.get(name);
      if (m) chosen.push(m);
    }
  }
  const vision = adapter.modules.filter((m) => VISION_MERGER.test(m.module) || VISION_BLOCK.test(m.module)).sort((a, b) => visionOrder(a) - visionOrder(b));
  for (const m of vision) {
    chosen.push(m);
    known.add(m.module);
  }
  const other = adapter.modules.find((m) => !known.has(m.module));
  if (other) {
    throw new AdapterError(
      `adapter '${adapter.name}' adapts ${other.module}; the engine adapts q, k, v, o, gate, up and down_proj of the ${numLayers} language-model layers, the vision mergers' linear_fc1 and linear_fc2 and the vision blocks' ${BLOCK_LAYERS.join(', ')}`,
    );
  }
  if (chosen.length === 0) throw new AdapterError(`adapter '${adapter.name}' has no weights`);
  // One allocation for all: views into flat buffers, which the optimizer steps in a constant number of dispatches.
  const out = createLoraParamSet(
    gpu,
    chosen.map((m) => ({ name: m.module, in: m.in, out: m.out, r: m.r, alpha: m.alpha })),
  );
  out.forEach((p, i) => {
    gpu.write(p.A, chosen[i].A);
    gpu.write(p.B, chosen[i].B);
  });
  return out;
}
