// `npm run cli -- gpu [--unsafe-apis] [--f16]`: the adapter's name, features and limits, the
// capabilities record the engine chooses product paths from, each path family's availability and
// the default products setting and the vision tower's that 'auto' takes beside it, each with its
// reason, as one JSON line (the same in words on stderr).
//   --unsafe-apis  Dawn's allow_unsafe_apis: subgroup matrices and their configurations
//   --f16          Dawn's vulkan_enable_f16_on_nvidia: shader-f16 on NVIDIA's Vulkan driver
import { capabilitiesOf, capabilitySummary } from '../../gpu';
import { chooseProducts, productPaths, productPathSummary } from '../../model/products';
import { chooseVisionProducts } from '../../model/visionProductsSetting';
import type { CliArgs } from '../args';
import { createNodeGpu, dawnFlags, type NodeGpuOptions } from '../gpu';

export const summary = 'print the GPU adapter, its features, limits and capabilities, and the default products (JSON)';

export async function run(args: CliArgs): Promise<void> {
  const opts: NodeGpuOptions = { driver: args.optStr('driver'), unsafeApis: args.bool('unsafe-apis'), f16: args.bool('f16') };
  const gpu = await createNodeGpu(opts);
  const caps = capabilitiesOf(gpu);
  const defaultProducts = chooseProducts(caps);
  const out = { ...gpu.adapter, enabled: [...gpu.features], dawnFlags: dawnFlags(opts), capabilities: caps, paths: productPaths(caps), defaultProducts, defaultVisionProducts: chooseVisionProducts('auto', defaultProducts.products) };
  console.log(JSON.stringify(out));
  console.error([...capabilitySummary(caps), ...productPathSummary(caps)].join('\n'));
}
