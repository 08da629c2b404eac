// The benchmark shapes (bench/shapes.json, also read by bench/torch_kernels.py): 'full' is
// Qwen3-VL-2B's text model, 'quick' shrinks every dimension for weak GPUs and software Vulkan.
import SHAPES from '../../bench/shapes.json';

export type Preset = 'quick' | 'full';
export type BenchShapes = (typeof SHAPES)['full'];

export function benchShapes(preset: Preset): BenchShapes {
  return SHAPES[preset];
}
