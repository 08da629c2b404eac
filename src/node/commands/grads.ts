// `npm run cli -- grads --model DIR --batch FILE --config FILE.json --lora FILE.safetensors --out FILE.safetensors
//  [--quant none|q4] [--driver lavapipe|swiftshader]`
// The gradients of the full GSPO/GRPO loss with respect to the LoRA weights, for a fixed batch:
// one prompt (a safetensors with input_ids, pixel_values, image_grid_thw, as `logits` takes it),
// G completions as token ids, their rewards, and (off-policy) old log-probs. The adapter is read
// in PEFT's layout (its r and lora_alpha from --config's "lora" or adapter_config.json beside it);
// the gradients are written under the same tensor names. The model runs unquantized by default
// (a gradient check compares with an f32 reference); --quant q4 uses the 4-bit base.
// Batch JSON: {"prompt": FILE (relative to the batch), "completions": [[ids]], "rewards": [...],
// "old_logps": [[...]] | null, "ref_logps"?: [[...]]}; without ref_logps and with beta > 0 the
// reference log-probs come from the model with LoRA off.
// Config JSON: TRL's names (src/rl/lossConfig.ts) plus "temperature" and "lora": {r, lora_alpha}.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { CliArgs } from '../args';
import { createNodeGpu } from '../gpu';
import { parsePeft, tensorNames } from '../../adapter/peft';
import { uploadAdapter } from '../../adapter/upload';
import { toFloat32, toInt32 } from '../../model/dtype';
import { Qwen3VL } from '../../model/qwen3vl';
import { nodeDirFiles, nodeFileSource, readAllTensors, serializeSafetensors } from '../../model/safetensors';
import { Qwen3VLPolicy } from '../../model/train';
import { RlLoss } from '../../ops/rlLoss';
import { groupLoss, hasEntropyBonus } from '../../rl/groupLoss';
import { resolveLossConfig, validateLossSetup, type LossConfigInput } from '../../rl/lossConfig';
import type { PreparedPrompt } from '../../rl/policy';

export const summary = 'gradients of the GSPO/GRPO loss w.r.t. LoRA weights for a fixed batch (PEFT names)';

function readJson(path: string, what: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(readFileSync(path, 'utf8'));
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not a JSON object');
    return v as Record<string, unknown>;
  } catch (e) {
    throw new Error(`${what} ${path}: ${(e as Error).message}`);
  }
}

/** A prompt from a safetensors file with input_ids (and, with images, pixel_values + image_grid_thw). */
export async function promptFromSafetensors(path: string): Promise<PreparedPrompt> {
  const t = await readAllTensors(await nodeFileSource(path));
  const get = (n: string) => {
    const x = t.get(n);
    if (!x) throw new Error(`${path} has no tensor '${n}'`);
    return x;
  };
  const ids = get('input_ids');
  const inputIds = toInt32(ids.bytes, ids.info.dtype);
  if (!t.has('image_grid_thw')) return { id: path, inputIds, images: [] };
  const g = toInt32(get('image_grid_thw').bytes, get('image_grid_thw').info.dtype);
  const pv = get('pixel_values');
  const pixels = toFloat32(pv.bytes, pv.info.dtype);
  const width = pv.info.shape[1];
  const images = [];
  let at = 0;
  for (let i = 0; i < g.length / 3; i++) {
    const patches = g[3 * i] * g[3 * i + 1] * g[3 * i + 2];
    images.push({ pixelValues: pixels.slice(at * width, (at + patches) * width), gridThw: [g[3 * i], g[3 * i + 1], g[3 * i + 2]] as [number, number, number], key: `${path}#${i}` });
    at += patches;
  }
  return { id: path, inputIds, images };
}

function rows(name: string, v: unknown, lengths: number[]): number[][] {
  if (!Array.isArray(v) || v.length !== lengths.length) throw new Error(`batch: ${name} must hold one row per completion (${lengths.length})`);
  return v.map((r, i) => {
    if (!Array.isArray(r) || r.length !== lengths[i] || !r.every((x) => typeof x === 'number' && Number.isFinite(x))) {
      throw new Error(`batch: ${name}[${i}] must hold ${lengths[i]} finite numbers (one per completion token)`);
    }
    return r as number[];
  });
}

/** Rows of different lengths into a [G, T] grid, 0 past each row's end. */
function pad(r: number[][], T: number): Float64Array {
  const out = new Float64Array(r.length * T);
  r.forEach((row, i) => out.set(row, i * T));
  return out;
}

export async function run(args: CliArgs): Promise<void> {
  const batchPath = resolve(args.str('batch'));
  const batch = readJson(batchPath, 'batch');
  const cfgJson = readJson(args.str('config'), 'config');
  const loraPath = args.str('lora');
  const out = args.str('out');
  const quant = (args.optStr('quant') ?? 'none') as 'none' | 'q4';
  if (quant !== 'none' && quant !== 'q4') throw new Error(`--quant must be none or q4, got '${quant}'`);

  const completions = batch.completions;
  if (!Array.isArray(completions) || completions.length < 2 || !completions.every((c) => Array.isArray(c) && c.length > 0 && c.every(Number.isInteger))) {
    throw new Error('batch: completions must be at least 2 non-empty lists of token ids');
  }
  const comps = completions as number[][];
  const lengths = comps.map((c) => c.length);
  const rewards = batch.rewards;
  if (!Array.isArray(rewards) || rewards.length !== comps.length || !rewards.every((r) => typeof r === 'number' && Number.isFinite(r))) {
    throw new Error(`batch: rewards must hold ${comps.length} finite numbers`);
  }
  if (typeof batch.prompt !== 'string') throw new Error('batch: prompt must name a safetensors file');
  const old = batch.old_logps === null || batch.old_logps === undefined ? null : rows('old_logps', batch.old_logps, lengths);
  const refRows = batch.ref_logps === null || batch.ref_logps === undefined ? null : rows('ref_logps', batch.ref_logps, lengths);

  const { temperature = 1, lora: loraCfg, ...lossIn } = cfgJson as { temperature?: number; lora?: { r?: number; lora_alpha?: number } } & LossConfigInput;
  const config = resolveLossConfig({ num_generations: comps.length, ...lossIn });
  const G = comps.length;
  const T = Math.max(...lengths);
  for (const w of validateLossSetup(config, { batch: G, tokens: T, hasOld: old !== null, hasRef: config.beta > 0, hasSampling: false })) console.error(`warning: ${w}`);

  // The adapter: tensors from --lora, r and alpha from the config or adapter_config.json beside it.
  const adapterConfigPath = join(dirname(loraPath), 'adapter_config.json');
  const adapterConfig = loraCfg?.r && loraCfg.lora_alpha
    ? JSON.stringify({ peft_type: 'LORA', r: loraCfg.r, lora_alpha: loraCfg.lora_alpha, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] })
    : existsSync(adapterConfigPath) ? readFileSync(adapterConfigPath, 'utf8') : null;
  if (!adapterConfig) throw new Error(`no LoRA rank: give "lora": {"r", "lora_alpha"} in --config, or put adapter_config.json beside ${loraPath}`);
  const adapter = parsePeft(loraPath, adapterConfig, await readAllTensors(await nodeFileSource(loraPath)));

  const gpu = await createNodeGpu({ driver: args.optStr('driver') });
  const model = await Qwen3VL.load(gpu, nodeDirFiles(args.str('model')), { quant });
  const params = uploadAdapter(gpu, adapter, model.config.text.numLayers);
  model.attachLora(params);
  const policy = new Qwen3VLPolicy(model);
  const prompt = await promptFromSafetensors(resolve(dirname(batchPath), batch.prompt));
  const seqs = { prompt, completions: comps };

  let ref: Float64Array | null = null;
  if (config.beta > 0) {
    if (refRows) ref = pad(refRows, T);
    else {
      const r = await policy.forward(seqs, { temperature, lora: false, train: false });
      ref = Float64Array.from(await gpu.readF32(r.logps));
    }
  }
  const fwd = await policy.forward(seqs, { temperature, lora: true, train: true });
  const mask = await gpu.readF32(fwd.mask);
  const rl = await RlLoss.create(gpu);
  const { result: reading, buffers } = await groupLoss(gpu, rl, { fwd, mask, old: old && pad(old, T), ref, sampling: null, scores: { rewards: rewards as number[] }, config });
  const zero = gpu.recorder('zero grads');
  for (const p of params) model.decoder.ops.lora.zeroGrad(zero, p);
  await zero.submit();
  await policy.backward(buffers.grad, hasEntropyBonus(config) ? buffers.gradEntropy : undefined);
  const result = await reading;
  RlLoss.release(buffers);

  const tensors = [];
  for (const p of params) {
    const names = tensorNames(p.name);
    const bytes = async (t: typeof p.dA) => new Uint8Array((await gpu.readF32(t)).buffer);
    tensors.push({ name: names.A, dtype: 'F32' as const, shape: [p.r, p.in], data: await bytes(p.dA) });
    tensors.push({ name: names.B, dtype: 'F32' as const, shape: [p.out, p.r], data: await bytes(p.dB) });
  }
  writeFileSync(out, serializeSafetensors(tensors));
  console.log(JSON.stringify({ loss: result.loss, advantages: Array.from(result.advantages), metrics: result.metrics, tensors: tensors.length, out }));
}
