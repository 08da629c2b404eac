// The trainable state of LoRA adapters: what names and sizes one adapted layer (LoraSpec), its
// A, B and their gradients (LoraParams), one adapter's tensors (createLoraParams) or many adapters'
// as views into a few flat buffers (createLoraParamSet: AdamW then takes them in a constant number
// of dispatches). src/ops/lora.ts runs them.
import { ShapeError, Tensor, type Gpu } from '../gpu';

/** What names and sizes one adapted layer. */
export interface LoraSpec {
  /** The adapted module's path as PEFT names it, e.g. `model.language_model.layers.0.self_attn.q_proj`. */
  name: string;
  in: number;
  out: number;
  r: number;
  /** lora_alpha; the update is scaled by alpha / r. */
  alpha: number;
}

/** The trainable state of one adapted layer: what the optimizer and the PEFT exporter iterate. */
export interface LoraParams extends LoraSpec {
  /** lora_A.weight [r, in] */
  A: Tensor;
  /** lora_B.weight [out, r] */
  B: Tensor;
  /** Gradients, same shapes, accumulated by Lora.backward. */
  dA: Tensor;
  dB: Tensor;
}

export function loraScale(p: LoraSpec): number {
  return p.alpha / p.r;
}

function checkSpec(spec: LoraSpec): void {
  for (const k of ['in', 'out', 'r'] as const) {
    if (!Number.isInteger(spec[k]) || spec[k] <= 0) throw new ShapeError('lora', `${spec.name}: ${k} must be a positive integer, got ${spec[k]}`);
  }
  if (!(spec.alpha > 0)) throw new ShapeError('lora', `${spec.name}: lora_alpha must be positive, got ${spec.alpha}`);
}

/** Tensors for one layer's adapter; contents undefined until Lora.init (or a checkpoint load). */
export function createLoraParams(gpu: Gpu, spec: LoraSpec): LoraParams {
  checkSpec(spec);
  return {
    ...spec,
    A: gpu.tensor([spec.r, spec.in], 'f32', `${spec.name}.lora_A`),
    B: gpu.tensor([spec.out, spec.r], 'f32', `${spec.name}.lora_B`),
    dA: gpu.tensor([spec.r, spec.in], 'f32', `${spec.name}.lora_A.grad`),
    dB: gpu.tensor([spec.out, spec.r], 'f32', `${spec.name}.lora_B.grad`),
  };
}

/**
 * Tensors for many adapters in few buffers: every A and B are views into one flat buffer (or more
 * where one would pass the device's largest storage binding), every dA and dB into another laid out
 * alike, each view starting at the storage offset alignment. AdamW then covers all of them in a
 * constant number of dispatches (it groups tensors by buffer). A buffer goes back to the pool once
 * every view into it is released (releaseLoraParams on each adapter).
 */
export function createLoraParamSet(gpu: Gpu, specs: readonly LoraSpec[]): LoraParams[] {
  specs.forEach(checkSpec);
  const shapes = specs.flatMap((s) => [
    [s.r, s.in],
    [s.out, s.r],
  ]);
  const labels = specs.flatMap((s) => [`${s.name}.lora_A`, `${s.name}.lora_B`]);
  const params = flatViews(gpu, shapes, labels, 'lora.params');
  const grads = flatViews(
    gpu,
    shapes,
    labels.map((l) => `${l}.grad`),
    'lora.grads',
  );
  return specs.map((spec, i) => ({ ...spec, A: params[2 * i], B: params[2 * i + 1], dA: grads[2 * i], dB: grads[2 * i + 1] }));
}

/** f32 views of `shapes` packed into pool buffers at aligned offsets; a buffer is released with its last view. */
function flatViews(gpu: Gpu, shapes: readonly number[][], labels: readonly string[], label: string): Tensor[] {
  const align = gpu.limits.minStorageBufferOffsetAlignment;
  const maxBytes = Math.min(gpu.limits.maxBufferSize, gpu.limits.maxStorageBufferBindingSize);
  // Each tensor's buffer (index) and byte offset there; a buffer is full when the next tensor would pass maxBytes.
  const place: { buffer: number; offset: number }[] = [];
  const sizes: number[] = [];
  let at = 0;
  for (const shape of shapes) {
    const bytes = 4 * shape.reduce((a, b) => a * b, 1);
    if (sizes.length === 0 || at + bytes > maxBytes) {
      sizes.push(0);
      at = 0;
    }
    place.push({ buffer: sizes.length - 1, offset: at });
    sizes[sizes.length - 1] = at + bytes;
    at = Math.ceil((at + bytes) / align) * align;
  }
  const flats = sizes.map((bytes) => gpu.tensor([bytes / 4], 'f32', label));
  const live = flats.map(() => new Set<Tensor>());
  const views = shapes.map((shape, i) => {
    const { buffer: b, offset } = place[i];
    const release = (t: Tensor) => {
      if (live[b].delete(t) && live[b].size === 0) flats[b].release();
    };
    return new Tensor(flats[b].buffer, shape, 'f32', labels[i], offset, release);
  });
  views.forEach((v, i) => live[place[i].buffer].add(v));
  return views;
}

export function releaseLoraParams(p: LoraParams): void {
  for (const t of [p.A, p.B, p.dA, p.dB]) t.release();
}
