// `npm run cli -- loss --input FILE.json [--driver lavapipe|swiftshader]`: the GSPO/GRPO loss of
// spec/rl-loss.md on the GPU, for numbers you can read. Prints one JSON line:
// {"loss", "grad" [sequences][tokens], "advantages", "metrics"} (TRL's metric names; kl only
// when beta != 0, sampling/* only with a rollout correction; NaN metrics print as null).
// Input: {"logps", "old_logps" (null: on-policy), "ref_logps", "sampling_logps", "mask",
// "entropy" (per-token entropies: needed by top_entropy_quantile < 1 and the entropy bonus),
// "rewards" (null = missing), "num_generations", "config": {...TRL names, src/rl/lossConfig.ts}}.
// With the entropy bonus the output adds "grad_entropy" [sequences][tokens]; the loss type's
// metrics (cispo_clip_ratio, vespo/phi_seq_mean, ...) appear when the config uses them.
import { readFileSync } from 'node:fs';
import type { CliArgs } from '../args';
import { createNodeGpu } from '../gpu';
import { RlLoss, packPlanes, pairsF64, type PlaneName } from '../../ops/rlLoss';
import { findUnknownKey } from '../../rl/configKeys';
import { CLIPPED_LOSS_TYPES, DEFAULT_LOSS_CONFIG, resolveLossConfig, validateLossSetup, type LossConfigInput } from '../../rl/lossConfig';

export const summary = 'compute the GSPO/GRPO loss, its gradient and metrics on the GPU (--input FILE.json)';

class InputError extends Error {}

/** The input's fields (values unused: only the keys are known fields). */
const INPUT_TEMPLATE: Record<string, unknown> = { logps: 0, old_logps: 0, ref_logps: 0, sampling_logps: 0, mask: 0, rewards: 0, num_generations: 0, config: 0 };

/** A [rows][cols] array of finite numbers, checked against the expected shape when given. */
function matrix(name: string, v: unknown, shape?: [number, number]): number[][] {
  if (!Array.isArray(v) || v.length === 0) throw new InputError(`${name} must be a non-empty array of rows`);
  const cols = Array.isArray(v[0]) ? v[0].length : -1;
  v.forEach((row, i) => {
    if (!Array.isArray(row)) throw new InputError(`${name}[${i}] is not an array`);
    if (row.length !== cols) throw new InputError(`${name} is ragged: row 0 has ${cols} values, row ${i} has ${row.length}`);
    row.forEach((x, t) => {
      if (typeof x !== 'number' || !Number.isFinite(x)) throw new InputError(`${name}[${i}][${t}] is ${JSON.stringify(x)}, not a finite number`);
    });
  });
  if (cols === 0) throw new InputError(`${name} has rows of length 0`);
  if (shape && (v.length !== shape[0] || cols !== shape[1])) {
    throw new InputError(`${name} is ${v.length}x${cols}, but logps is ${shape[0]}x${shape[1]}`);
  }
  return v as number[][];
}

function optionalMatrix(name: string, v: unknown, shape: [number, number]): number[][] | null {
  return v === null || v === undefined ? null : matrix(name, v, shape);
}

export interface LossRequest {
  logps: number[][];
  old: number[][] | null;
  ref: number[][] | null;
  sampling: number[][] | null;
  entropy: number[][] | null;
  mask: number[][];
  rewards: number[];
  config: ReturnType<typeof resolveLossConfig>;
  warnings: string[];
}

/** Parse and check the input JSON; messages name the field at fault. */
export function parseLossRequest(json: unknown): LossRequest {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new InputError('the input must be a JSON object');
  const o = json as Record<string, unknown>;
  const unknown = findUnknownKey(o, INPUT_TEMPLATE) ?? findUnknownKey(o.config, { ...DEFAULT_LOSS_CONFIG }, 'config');
  if (unknown !== null) throw new InputError(unknown);
  const logps = matrix('logps', o.logps);
  const shape: [number, number] = [logps.length, logps[0].length];
  const mask = matrix('mask', o.mask, shape);
  mask.forEach((row, i) =>
    row.forEach((m, t) => {
      if (m !== 0 && m !== 1) throw new InputError(`mask[${i}][${t}] is ${m}; the mask holds 0 or 1`);
    }),
  );
  if (!Array.isArray(o.rewards) || o.rewards.length !== shape[0]) {
    throw new InputError(`rewards must hold one value per sequence (${shape[0]}), got ${Array.isArray(o.rewards) ? o.rewards.length : JSON.stringify(o.rewards)}`);
  }
  const rewards = o.rewards.map((r, i) => {
    if (r === null) return NaN; // a completion no reward function scored (TRL: NaN reward, advantage 0)
    if (typeof r !== 'number' || !Number.isFinite(r)) throw new InputError(`rewards[${i}] is ${JSON.stringify(r)}, not a finite number or null`);
    return r;
  });
  if (o.config !== undefined && (typeof o.config !== 'object' || o.config === null)) throw new InputError('config must be an object');
  const cfgIn = { ...((o.config ?? {}) as LossConfigInput) };
  if (o.num_generations !== undefined) cfgIn.num_generations = o.num_generations as number;
  const config = resolveLossConfig(cfgIn);
  const req = {
    logps,
    old: optionalMatrix('old_logps', o.old_logps, shape),
    ref: optionalMatrix('ref_logps', o.ref_logps, shape),
    sampling: optionalMatrix('sampling_logps', o.sampling_logps, shape),
    entropy: optionalMatrix('entropy', o.entropy, shape),
    mask,
    rewards,
    config,
  };
  const warnings = validateLossSetup(config, {
    batch: shape[0],
    tokens: shape[1],
    hasOld: req.old !== null,
    hasRef: req.ref !== null,
    hasSampling: req.sampling !== null,
  });
  if ((config.top_entropy_quantile < 1 || config.entropy_coef !== 0 || config.use_adaptive_entropy) && req.entropy === null) {
    throw new InputError('top_entropy_quantile < 1 and the entropy bonus need "entropy" (per-token entropies)');
  }
  return { ...req, warnings };
}

export async function run(args: CliArgs): Promise<void> {
  const path = args.str('input');
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new Error(`cannot read ${path}: ${(e as Error).message}`);
  }
  const req = parseLossRequest(json);
  for (const w of req.warnings) console.error(`warning: ${w}`);
  const B = req.logps.length;
  const T = req.logps[0].length;

  const gpu = await createNodeGpu({ driver: args.optStr('driver') });
  const op = await RlLoss.create(gpu);
  const b = RlLoss.allocate(gpu, B, T);
  const planes: Partial<Record<PlaneName, number[]>> = { logps: req.logps.flat() };
  if (req.old) planes.old = req.old.flat();
  if (req.ref) planes.ref = req.ref.flat();
  if (req.sampling) planes.sampling = req.sampling.flat();
  if (req.entropy) planes.entropy = req.entropy.flat();
  gpu.write(b.planes, packPlanes(B, T, planes));
  gpu.write(b.mask, req.mask.flat());
  gpu.write(b.rewards, pairsF64(req.rewards));
  const rec = gpu.recorder('loss command');
  op.advantages(rec, b, req.config.num_generations, req.config.scale_rewards);
  op.loss(rec, b, req.config, { old: req.old !== null, ref: req.ref !== null, sampling: req.sampling !== null, entropy: req.entropy !== null });
  await rec.submit();
  const r = await RlLoss.read(gpu, b);

  const c = req.config;
  const bonus = c.entropy_coef !== 0 || c.use_adaptive_entropy;
  const logged: Record<string, boolean> = {
    clip_sequences: false,
    kl: c.beta !== 0,
    cispo_clip_ratio: c.loss_type === 'cispo',
    'vespo/phi_seq_mean': c.loss_type === 'vespo',
    'off_policy_mask/masked_fraction': c.off_policy_mask_threshold !== null,
    policy_loss: bonus,
    'entropy_mask/threshold': c.top_entropy_quantile < 1,
  };
  const metrics: Record<string, number> = {};
  for (const [k, v] of Object.entries(r.metrics)) {
    if (logged[k] === false || k.startsWith('entropy_bonus/')) continue;
    if (k.startsWith('sampling/') && c.rollout_correction.mode === null) continue;
    if (k.startsWith('clip_ratio/') && !CLIPPED_LOSS_TYPES.includes(c.loss_type)) continue;
    metrics[k] = v;
  }
  const rows = (v: ArrayLike<number>) => Array.from({ length: B }, (_, i) => Array.from(v).slice(i * T, i * T + T));
  const out: Record<string, unknown> = { loss: r.loss, grad: rows(r.grad), advantages: Array.from(r.advantages), metrics };
  if (bonus) out.grad_entropy = rows(r.gradEntropy);
  console.log(JSON.stringify(out));
}
