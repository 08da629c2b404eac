// The tiny Qwen3-VL fixtures of tools/make_fixtures.py: model folders and their reference outputs.
import { toFloat32, toInt32 } from '../../src/model/dtype';
import { nodeDirFiles, nodeFileSource, readAllTensors } from '../../src/model/safetensors';
import type { PreparedPrompt } from '../../src/rl/policy';

export const FIXTURE_ROOT = 'test/fixtures/tiny';
export const MODELS = ['tiny-a', 'tiny-b'] as const;
export const CASES = ['text', 'image1', 'image2'] as const;
export type FixtureModel = (typeof MODELS)[number];
export type FixtureCase = (typeof CASES)[number];

export const modelDir = (m: FixtureModel) => `${FIXTURE_ROOT}/${m}`;
export const modelFiles = (m: FixtureModel) => nodeDirFiles(modelDir(m));
export const refPath = (m: FixtureModel, c: FixtureCase, q4 = false) => `${modelDir(m)}/ref/${c}${q4 ? '.q4' : ''}.safetensors`;

export interface Reference {
  inputIds: Int32Array;
  logits: Float32Array;
  positions: Int32Array;
  ropeDelta: number;
  greedy: Int32Array;
  pixelValues?: Float32Array;
  gridThw?: [number, number, number][];
  imageEmbeds?: Float32Array;
  deepstack: Float32Array[];
}

/** A reference case's tensors, decoded. */
export async function readReference(m: FixtureModel, c: FixtureCase): Promise<Reference> {
  const t = await readAllTensors(await nodeFileSource(refPath(m, c)));
  const f = (n: string) => toFloat32(t.get(n)!.bytes, t.get(n)!.info.dtype);
  const i = (n: string) => toInt32(t.get(n)!.bytes, t.get(n)!.info.dtype);
  const grid = t.has('image_grid_thw') ? i('image_grid_thw') : null;
  const deepstack: Float32Array[] = [];
  for (let j = 0; t.has(`deepstack_${j}`); j++) deepstack.push(f(`deepstack_${j}`));
  return {
    inputIds: i('input_ids'),
    logits: f('logits'),
    positions: i('position_ids'),
    ropeDelta: i('rope_delta')[0],
    greedy: i('greedy'),
    pixelValues: t.has('pixel_values') ? f('pixel_values') : undefined,
    gridThw: grid ? Array.from({ length: grid.length / 3 }, (_, k) => [grid[3 * k], grid[3 * k + 1], grid[3 * k + 2]] as [number, number, number]) : undefined,
    imageEmbeds: t.has('image_embeds') ? f('image_embeds') : undefined,
    deepstack,
  };
}

/** The 4-bit reference logits of a case. */
export async function readQ4Logits(m: FixtureModel, c: FixtureCase): Promise<Float32Array> {
  const t = await readAllTensors(await nodeFileSource(refPath(m, c, true)));
  const l = t.get('logits')!;
  return toFloat32(l.bytes, l.info.dtype);
}

/** Mean over rows of KL(softmax(p) || softmax(q)) for [rows, vocab] logits. */
export function meanKl(p: Float32Array, q: Float32Array, vocab: number): number {
  const rows = p.length / vocab;
  let total = 0;
  const logSoftmax = (x: Float32Array, r: number) => {
    let m = -Infinity;
    for (let j = 0; j < vocab; j++) m = Math.max(m, x[r * vocab + j]);
    let s = 0;
    for (let j = 0; j < vocab; j++) s += Math.exp(x[r * vocab + j] - m);
    const lse = m + Math.log(s);
    return Float64Array.from({ length: vocab }, (_, j) => x[r * vocab + j] - lse);
  };
  for (let r = 0; r < rows; r++) {
    const lp = logSoftmax(p, r);
    const lq = logSoftmax(q, r);
    for (let j = 0; j < vocab; j++) total += Math.exp(lp[j]) * (lp[j] - lq[j]);
  }
  return total / rows;
}

/** The prompt the fixture's LoRA and GSPO batches share (one image). */
export async function fixturePrompt(dir: string): Promise<PreparedPrompt> {
  const t = await readAllTensors(await nodeFileSource(`${dir}/prompt.safetensors`));
  const get = (n: string) => t.get(n)!;
  const g = toInt32(get('image_grid_thw').bytes, get('image_grid_thw').info.dtype);
  return {
    id: 'fixture',
    inputIds: toInt32(get('input_ids').bytes, get('input_ids').info.dtype),
    images: [{ pixelValues: toFloat32(get('pixel_values').bytes, get('pixel_values').info.dtype), gridThw: [g[0], g[1], g[2]], key: 'fixture-image' }],
  };
}
