// Where a training forward keeps the hidden states its backward reads (each layer's input and the
// final one, Decoder.forward's keep): f32, or f16 at half the bytes (src/ops/activationF16.ts),
// each value rounded once to f16 (relative error at most 2^-11) before the backward's recompute
// reads it. The one setting for it is the engine config's `activation_storage`.
import { MissingFeatureError, type Capabilities } from '../gpu';
import type { Products } from './products';

export type ActivationStorage = 'f32' | 'f16';
/** The engine setting: a storage, or 'auto'. */
export type ActivationStorageSetting = ActivationStorage | 'auto';
export const ACTIVATION_STORAGE_SETTINGS: readonly ActivationStorageSetting[] = ['auto', 'f32', 'f16'];

/**
 * The storage `setting` runs on a device of `caps` whose products are `products`, and why. 'auto'
 * takes f16 only beside the f16 products (their products already round x to f16, so the kept
 * states' rounding is of the same order) and where shader-f16 is offered, else f32: the f32 and
 * int8 paths keep what they computed before this setting. 'f16' without shader-f16 is refused.
 */
export function chooseActivationStorage(setting: ActivationStorageSetting, caps: Pick<Capabilities, 'shaderF16'>, products: Products): { storage: ActivationStorage; why: string } {
  if (setting === 'f16') {
    if (!caps.shaderF16) throw new MissingFeatureError('shader-f16', 'needed to keep activations in f16 (activation_storage f16)');
    return { storage: 'f16', why: 'set by the engine config' };
  }
  if (setting === 'f32') return { storage: 'f32', why: 'set by the engine config' };
  if (products !== 'f16') return { storage: 'f32', why: `auto: the ${products} products keep f32 states` };
  if (!caps.shaderF16) return { storage: 'f32', why: 'auto: no shader-f16 on this device' };
  return { storage: 'f16', why: 'auto: f16 products, shader-f16 offered' };
}
