// TRL's wider loss family on the GPU (cispo, sapo, luspo, vespo, two-sided delta, the off-policy
// sequence mask, top_entropy_quantile, the entropy bonus) against the vectors of an independent
// numpy mirror of TRL's formulas (tools/rl_reference.py -> test/fixtures/loss/trl-loss-vectors.json,
// described in docs/spec/rl-loss-vectors.md), and the kernels' gradient against finite differences
// of their own loss where no factor is detached.
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { testGpu } from '../helpers/gpu';
import { expectClose, finiteDifferences } from '../helpers/reference';
import { RlLoss, packPlanes, pairsF64, type RlLossResult } from '../../src/ops/rlLoss';
import { LossConfigError, resolveLossConfig, validateLossSetup, type LossConfigInput } from '../../src/rl/lossConfig';
import { EntropyControl } from '../../src/rl/entropyControl';
import { batchAdvantages } from '../../src/rl/groupLoss';
import { LossMetrics } from '../../src/rl/metrics';
import { batchPlan, resolveConfig, type TrainConfigInput } from '../../src/rl/config';
import { Trainer } from '../../src/rl/trainer';
import { TOY_TRAINER_CONFIG, ToyPolicy, toyPrompts } from '../helpers/toyPolicy';
import type { Gpu } from '../../src/gpu';

interface FixtureCase {
  name: string;
  config: LossConfigInput;
  on_policy: boolean;
  with_sampling: boolean;
  loss: number;
  grad: number[][];
  grad_entropy: number[][];
  metrics: Record<string, number>;
}
const FX = JSON.parse(readFileSync('test/fixtures/loss/trl-loss-vectors.json', 'utf8')) as {
  logps: number[][];
  old_logps: number[][];
  ref_logps: number[][];
  sampling_logps: number[][];
  mask: number[][];
  entropy: number[][];
  rewards: number[];
  advantages: number[];
  cases: FixtureCase[];
};
const B = FX.logps.length;
const T = FX.logps[0].length;
const TOL = { rtol: 1e-6, atol: 1e-8 };

let op: RlLoss | null = null;

async function gpuLoss(gpu: Gpu, c: FixtureCase, logps: ArrayLike<number> = FX.logps.flat()): Promise<RlLossResult> {
  op ??= await RlLoss.create(gpu);
  const b = RlLoss.allocate(gpu, B, T);
  try {
    const planes: Record<string, ArrayLike<number>> = { logps, ref: FX.ref_logps.flat(), entropy: FX.entropy.flat() };
    if (!c.on_policy) planes.old = FX.old_logps.flat();
    if (c.with_sampling) planes.sampling = FX.sampling_logps.flat();
    gpu.write(b.planes, packPlanes(B, T, planes));
    gpu.write(b.mask, FX.mask.flat());
    gpu.write(b.rewards, pairsF64(FX.rewards));
    const cfg = resolveLossConfig({ max_completion_length: 3, ...c.config, num_generations: 2, scale_rewards: 'group' });
    const rec = gpu.recorder('rl_loss trl test');
    op.advantages(rec, b, 2, 'group');
    op.loss(rec, b, cfg, { old: !c.on_policy, ref: true, sampling: c.with_sampling, entropy: true });
    await rec.submit();
    return await RlLoss.read(gpu, b);
  } finally {
    RlLoss.release(b);
  }
}

describe('rl loss: TRL loss family against the numpy mirror (tools/rl_reference.py)', () => {
  it('the fixture covers every new loss type and knob', () => {
    const types = new Set(FX.cases.map((c) => c.config.loss_type));
    for (const t of ['cispo', 'sapo', 'luspo', 'vespo']) expect(types.has(t as never), t).toBe(true);
    for (const k of ['delta', 'off_policy_mask_threshold', 'top_entropy_quantile', 'entropy_coef'] as const) {
      expect(FX.cases.some((c) => c.config[k] !== undefined), k).toBe(true);
    }
  });

  for (const c of FX.cases) {
    it(c.name, async () => {
      const gpu = await testGpu();
      const r = await gpuLoss(gpu, c);
      expectClose(r.advantages, FX.advantages, { ...TOL, what: 'advantages' });
      expectClose([r.loss], [c.loss], { ...TOL, what: 'loss' });
      expectClose(r.grad, c.grad.flat(), { rtol: 1e-6, atol: 1e-9, what: 'dLoss/dlogp' });
      // f32 output: one rounding.
      expectClose(r.gradEntropy, c.grad_entropy.flat(), { rtol: 1e-6, atol: 1e-9, what: 'dLoss/dentropy' });
      for (const [k, v] of Object.entries(c.metrics)) expectClose([r.metrics[k]], [v], { ...TOL, what: `metric ${k}` });
    }, 60_000);
  }

  // With no detached factor (old log-probs given; clipped and sapo surrogates) the kernel's gradient
  // must be the derivative of the kernel's own loss.
  it('the GPU gradient matches central finite differences of the GPU loss', async () => {
    const gpu = await testGpu();
    const cases = FX.cases.filter((c) => !c.on_policy && !['cispo', 'vespo'].includes(c.config.loss_type ?? 'dapo')).slice(0, 6);
    expect(cases.length).toBeGreaterThanOrEqual(5);
    for (const c of cases) {
      const x0 = FX.logps.flat();
      const analytic = (await gpuLoss(gpu, c)).grad;
      const values = new Map<string, number>();
      // finiteDifferences is synchronous: evaluate the perturbed points first, then look them up.
      const eps = 1e-5;
      for (let k = 0; k < x0.length; k++) {
        for (const sgn of [1, -1]) {
          const x = x0.slice();
          x[k] += sgn * eps;
          values.set(x.join(','), (await gpuLoss(gpu, c, x)).loss);
        }
      }
      const fd = finiteDifferences((x) => values.get(Array.from(x).join(',')) ?? NaN, x0, { eps });
      expectClose(fd, analytic, { rtol: 1e-5, atol: 1e-8, what: `finite differences: ${c.name}` });
    }
  }, 300_000);
});

describe('loss config: TRL fields', () => {
  it('fills TRL defaults for the new fields', () => {
    const d = resolveLossConfig();
    expect([d.delta, d.sapo_temperature_pos, d.sapo_temperature_neg, d.vespo_k_pos, d.vespo_lambda_pos, d.vespo_k_neg, d.vespo_lambda_neg]).toEqual([null, 1.0, 1.05, 2.0, 3.0, 3.0, 2.0]);
    expect([d.off_policy_mask_threshold, d.top_entropy_quantile, d.entropy_coef, d.use_adaptive_entropy]).toEqual([null, 1.0, 0.0, false]);
    expect([d.entropy_coef_min, d.entropy_coef_max, d.entropy_coef_delta, d.entropy_target, d.multi_objective_aggregation]).toEqual([0.0, 1.0, 0.005, 0.2, 'sum_then_normalize']);
    expect(d.rollout_correction.mode).toBeNull();
  });

  it('maps TRL rollout-correction names onto rollout_correction', () => {
    expect(resolveLossConfig({ vllm_importance_sampling_correction: true }).rollout_correction).toEqual({ mode: 'sequence_mask', clip_max: 3.0, clip_min: null });
    expect(resolveLossConfig({ vllm_importance_sampling_mode: 'token_truncate', vllm_importance_sampling_clip_max: 2 }).rollout_correction).toEqual({ mode: 'token_truncate', clip_max: 2, clip_min: null });
    expect(resolveLossConfig({ vllm_importance_sampling_cap: 2.5 }).rollout_correction.clip_max).toBe(2.5);
    expect(resolveLossConfig({ vllm_importance_sampling_correction: false, vllm_importance_sampling_mode: 'token_mask' }).rollout_correction.mode).toBeNull();
    expect(() => resolveLossConfig({ vllm_importance_sampling_correction: true, rollout_correction: { mode: 'token_mask' } })).toThrow(/both given/);
    expect(() => resolveLossConfig({ vllm_importance_sampling_cap: 2, vllm_importance_sampling_clip_max: 3 })).toThrow(/disagrees/);
    expect(() => resolveLossConfig({ vllm_importance_sampling_mode: 'nope' as never })).toThrow(/vllm_importance_sampling_mode/);
  });

  it('refuses invalid values with the field named, and luspo forms TRL averages over padding', () => {
    const bad: [LossConfigInput, RegExp][] = [
      [{ loss_type: 'ppo' as never }, /loss_type/],
      [{ delta: 0 }, /delta/],
      [{ sapo_temperature_neg: 0 }, /sapo_temperature_neg/],
      [{ vespo_lambda_pos: -1 }, /vespo_lambda_pos/],
      [{ vespo_k_neg: -1 }, /vespo_k_neg/],
      [{ off_policy_mask_threshold: NaN }, /off_policy_mask_threshold/],
      [{ top_entropy_quantile: 1.5 }, /top_entropy_quantile/],
      [{ entropy_coef_min: 0.5, entropy_coef_max: 0.1 }, /entropy_coef_min/],
      [{ entropy_coef_delta: -0.1 }, /entropy_coef_delta/],
      [{ use_adaptive_entropy: 'yes' as never }, /use_adaptive_entropy/],
      [{ multi_objective_aggregation: 'mean' as never }, /multi_objective_aggregation/],
      [{ rollout_correction: { mode: 'token_truncate', clip_max: null, clip_min: null } }, /needs clip_max or clip_min/],
    ];
    for (const [input, re] of bad) {
      expect(() => resolveLossConfig(input), JSON.stringify(input)).toThrow(LossConfigError);
      expect(() => resolveLossConfig(input), JSON.stringify(input)).toThrow(re);
    }
    const setup = { batch: 4, tokens: 8, hasOld: true, hasRef: true, hasSampling: true };
    expect(() => validateLossSetup(resolveLossConfig({ num_generations: 2, loss_type: 'luspo' }), setup)).toThrow(/importance_sampling_level/);
    expect(() => validateLossSetup(resolveLossConfig({ num_generations: 2, loss_type: 'luspo', importance_sampling_level: 'sequence', beta: 0.1 }), setup)).toThrow(/padding/);
    expect(validateLossSetup(resolveLossConfig({ num_generations: 2, loss_type: 'luspo', importance_sampling_level: 'sequence' }), setup)).toEqual([]);
    expect(validateLossSetup(resolveLossConfig({ num_generations: 2, loss_type: 'cispo', delta: 2 }), setup)[0]).toMatch(/no effect/);
    expect(validateLossSetup(resolveLossConfig({ num_generations: 2, loss_type: 'grpo', delta: 1.1 }), setup)[0]).toMatch(/1 \+ epsilon_high/);
    expect(validateLossSetup(resolveLossConfig({ num_generations: 2, loss_type: 'cispo', importance_sampling_level: 'sequence' }), setup)[0]).toMatch(/weighting sequences by length/);
  });
});

describe('entropy coefficient control (TRL adaptive entropy)', () => {
  const base = { entropy_coef: 0.1, use_adaptive_entropy: false, entropy_coef_min: 0, entropy_coef_max: 0.12, entropy_coef_delta: 0.01, entropy_target: 0.5 };
  it('constant coefficient: applied every step, never moves', () => {
    const e = new EntropyControl(base);
    e.add(0.1 * 10, 10);
    e.endStep();
    expect([e.enabled, e.applied(), e.value]).toEqual([true, 0.1, 0.1]);
    expect(new EntropyControl({ ...base, entropy_coef: 0 }).enabled).toBe(false);
  });
  it('adaptive: nothing on the first step, then applied while entropy <= target; moves by delta within [min, max]', () => {
    const e = new EntropyControl({ ...base, use_adaptive_entropy: true });
    expect(e.enabled).toBe(true);
    expect(e.applied()).toBe(0);
    // Step 1: mean entropy (0.2·4 + 0.6·4) / 8 = 0.4 <= 0.5: up to 0.11, applied next step.
    e.add(0.8, 4);
    e.add(2.4, 4);
    e.endStep();
    expect(e.value).toBeCloseTo(0.11, 12);
    expect(e.applied()).toBeCloseTo(0.11, 12);
    // Step 2: 0.3 again below: capped at max 0.12.
    e.add(0.3, 1);
    e.endStep();
    expect(e.value).toBeCloseTo(0.12, 12);
    // Step 3: 0.9 above the target: down by delta, and not applied on the next step.
    e.add(0.9, 1);
    e.endStep();
    expect(e.value).toBeCloseTo(0.11, 12);
    expect(e.applied()).toBe(0);
    // A discarded step leaves no trace; the state survives a save/load.
    e.add(100, 1);
    e.discardStep();
    const f = new EntropyControl({ ...base, use_adaptive_entropy: true });
    f.load(JSON.parse(JSON.stringify(e.save())));
    f.add(0.1, 1);
    f.endStep();
    expect([f.value, f.applied()].map((x) => Number(x.toFixed(12)))).toEqual([0.12, 0.12]);
  });
});

describe('loss metrics of the TRL loss types', () => {
  const group = (metrics: Record<string, number>, sequences: number, loss: number) => ({ loss, metrics: { num_tokens: 10, kl: 0, ...metrics }, sequences, entropySum: 5, gapSum: 0, gapMax: 0 });
  it('cispo_clip_ratio, vespo/phi_seq_mean, off_policy_mask/masked_fraction and policy_loss, weighted as TRL global means', () => {
    const cispo = new LossMetrics(false, false, { lossType: 'cispo', entropyBonus: true, offPolicyMask: true });
    cispo.add(group({ cispo_clip_ratio: 0.2, policy_loss: 0.5, 'off_policy_mask/masked_fraction': 0.25 }, 4, 0.4));
    cispo.add(group({ cispo_clip_ratio: 0.4, policy_loss: -0.1, 'off_policy_mask/masked_fraction': 0 }, 4, -0.2));
    const m = cispo.finish();
    expect(m.cispo_clip_ratio).toBeCloseTo(0.3, 12);
    expect(m.policy_loss).toBeCloseTo(0.4, 12);
    expect(m.loss).toBeCloseTo(0.2, 12);
    expect(m['off_policy_mask/masked_fraction']).toBeCloseTo(0.125, 12);
    expect(m['clip_ratio/low_mean']).toBeUndefined();
    const vespo = new LossMetrics(false, false, { lossType: 'vespo' });
    vespo.add(group({ 'vespo/phi_seq_mean': 0.9 }, 2, 0));
    vespo.add(group({ 'vespo/phi_seq_mean': 0.6 }, 4, 0));
    const v = vespo.finish();
    expect(v['vespo/phi_seq_mean']).toBeCloseTo((0.9 * 2 + 0.6 * 4) / 6, 12);
    expect([v.policy_loss, v['off_policy_mask/masked_fraction'], v.cispo_clip_ratio]).toEqual([undefined, undefined, undefined]);
  });
});

describe('multi_objective_aggregation', () => {
  const M = (FX as unknown as { multi_objective_aggregation: { rewards_per_func: number[][]; weights: number[]; num_generations: number; advantages: number[]; sum_then_normalize: number[] } })
    .multi_objective_aggregation;
  it('normalize_then_sum (GDPO) and sum_then_normalize match the numpy mirror', async () => {
    const gpu = await testGpu();
    op ??= await RlLoss.create(gpu);
    const cfg = { num_generations: M.num_generations, scale_rewards: 'group' as const };
    const gdpo = await batchAdvantages(gpu, op, M.rewards_per_func, M.weights, { ...cfg, multi_objective_aggregation: 'normalize_then_sum' });
    expectClose(gdpo, M.advantages, { ...TOL, what: 'normalize_then_sum advantages' });
    const sum = await batchAdvantages(gpu, op, M.rewards_per_func, M.weights, { ...cfg, multi_objective_aggregation: 'sum_then_normalize' });
    expectClose(sum, M.sum_then_normalize, { ...TOL, what: 'sum_then_normalize advantages' });
    // The two differ on this batch (the test can tell them apart).
    expect(Math.max(...gdpo.map((v, i) => Math.abs(v - sum[i])))).toBeGreaterThan(0.1);
  }, 60_000);
});

describe('trainer with the TRL loss knobs (toy policy)', () => {
  const base: TrainConfigInput = { ...TOY_TRAINER_CONFIG, max_steps: 6 };

  const run = async (input: TrainConfigInput) => {
    const gpu = await testGpu();
    const { config, loss } = resolveConfig({ ...base, ...input });
    const trainer = await Trainer.create({ gpu, policy: await ToyPolicy.create(gpu), data: toyPrompts(), config, loss, runId: 'test' });
    expect(await trainer.run()).toBe('finished');
    return trainer.metricsHistory;
  };

  it("logs the loss types' metrics and the entropy bonus raises the policy's entropy through dLoss/dentropy", async () => {
    const plain = await run({ loss_type: 'cispo', epsilon_high: 5 });
    const bonus = await run({ loss_type: 'cispo', epsilon_high: 5, entropy_coef: 5, off_policy_mask_threshold: 0.5, min_p: 0.01, repetition_penalty: 1.1 });
    const penalty = await run({ loss_type: 'cispo', epsilon_high: 5, entropy_coef: -5 });
    for (const m of bonus) {
      for (const k of ['cispo_clip_ratio', 'entropy_coef', 'policy_loss', 'off_policy_mask/masked_fraction', 'entropy']) expect(Number.isFinite(m[k]), `${k} at step ${m.step}`).toBe(true);
      expect(m['clip_ratio/low_mean']).toBeUndefined();
      expect(m.entropy_coef).toBe(5);
    }
    expect(plain[0].entropy_coef).toBeUndefined();
    // Reward learning lowers the entropy; the bonus's gradient holds it up, a negative coefficient pushes it down.
    expect(bonus.at(-1)!.entropy).toBeGreaterThan(plain.at(-1)!.entropy + 0.04);
    expect(penalty.at(-1)!.entropy).toBeLessThan(plain.at(-1)!.entropy - 0.1);
    const vespo = await run({ loss_type: 'vespo', use_adaptive_entropy: true, entropy_target: 100, entropy_coef: 0, entropy_coef_delta: 0.01, max_steps: 3 });
    expect(vespo.map((m) => m.entropy_coef)).toEqual([0.01, 0.02, 0.03]);
    expect(vespo.every((m) => m['vespo/phi_seq_mean'] > 0)).toBe(true);
  }, 600_000);
});

describe('entropy bonus over a micro-batch of several groups', () => {
  it("groups with the micro-batch's normaliser add up to the micro-batch's loss and dLoss/dentropy", async () => {
    const gpu = await testGpu();
    op ??= await RlLoss.create(gpu);
    const evaluate = async (rows: number[], cfg: LossConfigInput, entropyDenominator?: number) => {
      const b = RlLoss.allocate(gpu, rows.length, T);
      try {
        const pick = (m: number[][]) => rows.flatMap((i) => m[i]);
        gpu.write(b.planes, packPlanes(rows.length, T, { logps: pick(FX.logps), old: pick(FX.old_logps), entropy: pick(FX.entropy) }));
        gpu.write(b.mask, pick(FX.mask));
        gpu.write(b.advantages, pairsF64(rows.map((i) => FX.advantages[i])));
        const rec = gpu.recorder('micro-batch bonus');
        op!.loss(rec, b, resolveLossConfig({ num_generations: 2, max_completion_length: 3, ...cfg }), { old: true, ref: false, sampling: false, entropy: true }, { entropyDenominator });
        await rec.submit();
        return await RlLoss.read(gpu, b);
      } finally {
        RlLoss.release(b);
      }
    };
    for (const loss_type of ['grpo', 'sapo', 'dr_grpo'] as const) {
      const cfg = { loss_type, entropy_coef: 0.3 };
      const whole = await evaluate([0, 1, 2, 3], { ...cfg, gradient_accumulation_steps: 1 });
      // Two groups of a micro-batch: the trainer's per-group config (ga · groups) and the shared normaliser.
      const den = 11 * 1;
      const parts = [await evaluate([0, 1], { ...cfg, gradient_accumulation_steps: 2 }, den), await evaluate([2, 3], { ...cfg, gradient_accumulation_steps: 2 }, den)];
      expectClose([parts[0].loss + parts[1].loss], [whole.loss], { ...TOL, what: `${loss_type}: loss` });
      expectClose([...parts[0].gradEntropy, ...parts[1].gradEntropy], whole.gradEntropy, { rtol: 1e-6, atol: 1e-9, what: `${loss_type}: dLoss/dentropy` });
      // Without the shared normaliser each group would take its own mean: not the micro-batch's.
      const alone = await evaluate([0, 1], { ...cfg, gradient_accumulation_steps: 2 });
      expect(Math.abs(alone.gradEntropy[0] - parts[0].gradEntropy[0])).toBeGreaterThan(1e-4);
    }
  }, 120_000);
});

describe('train config threads the TRL loss and sampling fields', () => {
  it('accepts them with TRL defaults, resolves them into the loss, refuses bad values by name', () => {
    const d = resolveConfig({});
    expect([d.config.min_p, d.config.repetition_penalty, d.config.delta, d.config.entropy_coef, d.config.vllm_importance_sampling_correction]).toEqual([null, 1.0, null, 0, null]);
    const r = resolveConfig({ loss_type: 'vespo', vespo_k_pos: 1.5, top_entropy_quantile: 0.2, vllm_importance_sampling_mode: 'token_truncate', min_p: 0.05, repetition_penalty: 1.2 });
    expect([r.loss.loss_type, r.loss.vespo_k_pos, r.loss.top_entropy_quantile]).toEqual(['vespo', 1.5, 0.2]);
    expect(r.loss.rollout_correction).toEqual({ mode: 'token_truncate', clip_max: 3, clip_min: null });
    // The correction needs the old log-probs recomputed, given either way.
    expect([resolveConfig({}), r, resolveConfig({ rollout_correction: { mode: 'token_mask' } })].map((x) => batchPlan(x.config).recomputeOld)).toEqual([false, true, true]);
    expect(() => resolveConfig({ min_p: 2 })).toThrow(/min_p/);
    expect(() => resolveConfig({ repetition_penalty: 0 })).toThrow(/repetition_penalty/);
    expect(() => resolveConfig({ sapo_temperature_pos: -1 })).toThrow(/sapo_temperature_pos/);
    expect(() => resolveConfig({ loss_type: 'luspo' })).toThrow(/importance_sampling_level/);
    expect(() => resolveConfig({ entropy_coeff: 0.1 } as never)).toThrow(/entropy_coeff: unknown field; did you mean entropy_coef?/);
  });
});
