// An imported PEFT adapter onto the GPU, in the order the model attaches adapters
// (layer after layer, LORA_PROJECTIONS order within a layer, then the vision mergers':
// Qwen3VL.attachLora); any subset of the projections (PEFT's target_modules).
import type { Gpu } from '../gpu';
import { createLoraParams, type LoraParams } from '../ops/lora';
import { LORA_PROJECTIONS, loraModuleName } from '../model/decoder';
import { AdapterError, type AdapterModule, type PeftAdapter } from './peft';

/** A vision merger's linear layer: [1] the merger (absent: the final one), [2] 1 or 2. */
const VISION_MODULE = /^model\.visual\.(?:merger|deepstack_merger_list\.(\d+))\.linear_fc([12])$/;

/** Final merger first, then the DeepStack mergers by index; fc1 before fc2. */
function visionOrder(m: AdapterModule): number {
  const [, j, fc] = VISION_MODULE.exec(m.module)!;
  return (j === undefined ? 0 : 1 + Number(j)) * 2 + Number(fc);
}

export function uploadAdapter(gpu: Gpu, adapter: PeftAdapter, numLayers: number): LoraParams[] {
  const byName = new Map(adapter.modules.map((m) => [m.module, m]));
  const out: LoraParams[] = [];
  const known = new Set<string>();
  for (let l = 0; l < numLayers; l++) {
    for (const proj of LORA_PROJECTIONS) {
      const name = loraModuleName(l, proj);
      known.add(name);
      const m = byName.get(name);
      if (!m) continue;
      const p = createLoraParams(gpu, { name, in: m.in, out: m.out, r: m.r, alpha: m.alpha });
      gpu.write(p.A, m.A);
      gpu.write(p.B, m.B);
      out.push(p);
    }
  }
  const vision = adapter.modules.filter((m) => VISION_MODULE.test(m.module)).sort((a, b) => visionOrder(a) - visionOrder(b));
  for (const m of vision) {
    const p = createLoraParams(gpu, { name: m.module, in: m.in, out: m.out, r: m.r, alpha: m.alpha });
    gpu.write(p.A, m.A);
    gpu.write(p.B, m.B);
    out.push(p);
    known.add(m.module);
  }
  const other = adapter.modules.find((m) => !known.has(m.module));
  if (other) {
    throw new AdapterError(
      `adapter '${adapter.name}' adapts ${other.module}; the engine adapts q, k, v, o, gate, up and down_proj of the ${numLayers} language-model layers and the vision mergers' linear_fc1 and linear_fc2`,
    );
  }
  if (out.length === 0) throw new AdapterError(`adapter '${adapter.name}' has no weights`);
  return out;
}
