// A Gpu in Node through Dawn (the `webgpu` package). The Vulkan driver is chosen with the
// standard loader variable, set here before Dawn creates its instance:
//   VLRL_VK=lavapipe     Mesa's software rasterizer (shader-f16, subgroups)
//   VLRL_VK=swiftshader  SwiftShader shipped with Debian's chromium (subgroups, no f16)
//   unset                whatever the system's loader finds (a real GPU on the GPU machine)
import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Gpu, type DeviceOptions, type HostCollector } from '../gpu';

export const ICDS: Record<string, string> = {
  lavapipe: '/usr/share/vulkan/icd.d/lvp_icd.json',
  swiftshader: '/usr/lib/chromium/vk_swiftshader_icd.json',
};

export interface NodeGpuOptions extends DeviceOptions {
  /** 'lavapipe' | 'swiftshader' | a path to an ICD json; defaults to $VLRL_VK. */
  driver?: string;
  /** Dawn's unsafe APIs (toggle allow_unsafe_apis): subgroup matrices, the tensor cores. */
  unsafeApis?: boolean;
  /** shader-f16 where the driver has it: Dawn hides it on NVIDIA's Vulkan driver (a conformance
   * guard) unless the toggle vulkan_enable_f16_on_nvidia is on; no effect on other drivers. */
  f16?: boolean;
  /** Extra Dawn flags, e.g. 'disable-dawn-features=timestamp_quantization'. */
  dawnFlags?: string[];
}

const ENABLE = 'enable-dawn-features=';
const DISABLE = 'disable-dawn-features=';

/** The flags for the `webgpu` package's create(): Dawn's Node binding keeps only the last value of
 * each key, so the toggles of every enable- (and disable-) flag and option are joined into one. */
export function dawnFlags(opts: Pick<NodeGpuOptions, 'unsafeApis' | 'f16' | 'dawnFlags'>): string[] {
  const enable = [...(opts.unsafeApis ? ['allow_unsafe_apis'] : []), ...(opts.f16 ? ['vulkan_enable_f16_on_nvidia'] : [])];
  const disable: string[] = [];
  const rest: string[] = [];
  for (const f of opts.dawnFlags ?? []) {
    if (f.startsWith(ENABLE)) enable.push(...f.slice(ENABLE.length).split(','));
    else if (f.startsWith(DISABLE)) disable.push(...f.slice(DISABLE.length).split(','));
    else rest.push(f);
  }
  const joined = (prefix: string, toggles: string[]) => {
    const unique = [...new Set(toggles.filter((t) => t))];
    return unique.length ? [prefix + unique.join(',')] : [];
  };
  return [...joined(ENABLE, enable), ...joined(DISABLE, disable), ...rest];
}

export async function createNodeGpu(opts: NodeGpuOptions = {}): Promise<Gpu> {
  const driver = opts.driver ?? process.env.VLRL_VK;
  if (driver) {
    const icd = ICDS[driver] ?? driver;
    process.env.VK_ICD_FILENAMES = icd;
    process.env.VK_DRIVER_FILES = icd;
  }
  const { create, globals } = await import('webgpu');
  Object.assign(globalThis, globals);
  const gpu = create(dawnFlags(opts));
  const result = await Gpu.create(gpu, opts);
  // The GPU object owns Dawn's instance: if it is garbage-collected while a device lives, the next
  // asynchronous call (error scopes, mapAsync) crashes the process. The device's Gpu holds it.
  result.retain(gpu);
  result.hostCollector = nodeCollector();
  // Dawn's pending promises (error scopes, compilation info) do not keep Node's event loop alive, so
  // a script awaiting one would just exit. A timer holds the loop open until the device goes away.
  const keepAlive = setInterval(() => {}, 1 << 30);
  void result.lost.then(() => clearInterval(keepAlive));
  return result;
}

/** V8's full collection (exposed at run time: no flag to pass), and the heap in use. */
function nodeCollector(): HostCollector | null {
  setFlagsFromString('--expose-gc');
  const collect: unknown = runInNewContext('gc');
  if (typeof collect !== 'function') return null;
  return { heapUsed: () => getHeapStatistics().used_heap_size, collect: collect as () => void };
}
