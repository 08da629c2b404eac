// `npm run cli -- loss`: every loss of spec/rl-loss.md's worked example (A7) through the command
// line, on variants of test/fixtures/loss/spec-a7.json, and its messages for malformed input.
import { describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expectClose } from '../helpers/reference';
import { refAdvantages, refLoss } from '../helpers/rlLossReference';
import { resolveLossConfig } from '../../src/rl/lossConfig';

const TOL = { rtol: 1e-6, atol: 1e-8 };
const FIXTURE = 'test/fixtures/loss/spec-a7.json';
const A7 = JSON.parse(readFileSync(FIXTURE, 'utf8'));
const dir = mkdtempSync(join(tmpdir(), 'cli-loss-'));
let files = 0;

interface CliOutput {
  code: number;
  stdout: string;
  stderr: string;
}

function cli(input: unknown): Promise<CliOutput> {
  const file = join(dir, `input-${files++}.json`);
  writeFileSync(file, JSON.stringify(input));
  return new Promise((resolve) => {
    execFile('npm', ['run', '-s', 'cli', '--', 'loss', '--input', file], { env: { ...process.env, VLRL_VK: process.env.VLRL_VK ?? 'lavapipe' } }, (err, stdout, stderr) =>
      resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/** Run a variant of the A7 input; exactly one JSON line must come out, with the spec's shape. */
async function runA7(over: Record<string, unknown> = {}, config: Record<string, unknown> = {}) {
  const input = { ...A7, ...over, config: { ...A7.config, ...config } };
  const out = await cli(input);
  expect(out.code, out.stderr).toBe(0);
  const lines = out.stdout.trim().split('\n');
  expect(lines).toHaveLength(1);
  const r = JSON.parse(lines[0]) as { loss: number; grad: number[][]; advantages: number[]; metrics: Record<string, number | null> };
  expect(r.grad.map((row) => row.length)).toEqual(A7.logps.map((row: number[]) => row.length));
  // And against the f64 reference, gradient and metrics included.
  const cfg = resolveLossConfig({ ...input.config, num_generations: A7.num_generations });
  const want = refLoss(
    {
      logps: input.logps,
      old: input.old_logps,
      ref: input.ref_logps,
      sampling: input.sampling_logps,
      mask: input.mask,
      advantages: refAdvantages(input.rewards, A7.num_generations, cfg.scale_rewards),
    },
    cfg,
  );
  expectClose(r.grad.flat(), want.grad.flat(), { ...TOL, what: 'grad vs the f64 reference' });
  for (const [k, v] of Object.entries(r.metrics)) expectClose([v ?? NaN], [want.metrics[k as keyof typeof want.metrics]], { ...TOL, what: `metric ${k}` });
  return r;
}

describe('cli loss: spec A7', () => {
  const table: [string, Record<string, unknown>, number][] = [
    ['GRPO token, grpo', { loss_type: 'grpo' }, -0.0038601547],
    ['GRPO token, bnpo', { loss_type: 'bnpo' }, 0.0601335272],
    ['GRPO token, dapo', { loss_type: 'dapo' }, 0.0601335272],
    ['GRPO token, dr_grpo', { loss_type: 'dr_grpo' }, 0.0551223999],
    ['GSPO sequence, grpo', { importance_sampling_level: 'sequence' }, -0.0292104589],
    ['GSPO sequence, paper epsilons', { importance_sampling_level: 'sequence', epsilon: 3e-4, epsilon_high: 4e-4 }, 0.0028464013],
    ['GRPO token, beta 0.04', { beta: 0.04 }, -0.0017159334],
    ['GRPO token, token_truncate C_max=2', { rollout_correction: { mode: 'token_truncate', clip_max: 2, clip_min: null } }, 0.0768493929],
  ];

  it('every loss of the table, with gradients and metrics', async () => {
    for (const [name, config, loss] of table) {
      const r = await runA7({}, config);
      expectClose([r.loss], [loss], { ...TOL, what: name });
      if (name === 'GRPO token, grpo') {
        const spec = [[0, -0.053311, -0.061938], [0, 0.065114, 0.058917], [0.065104, 0.075641, 0], [-0.092894, -0.084054, 0]];
        expectClose(r.grad.flat(), spec.flat(), { rtol: 0, atol: 5e-7, what: 'GRPO gradient vs the spec' });
        expectClose(
          ['low_mean', 'high_mean', 'region_mean', 'low_min', 'high_max'].map((k) => r.metrics[`clip_ratio/${k}`] as number),
          [2 / 11, 1 / 11, 3 / 11, 0, 1 / 3],
          { ...TOL, what: 'clip metrics' },
        );
        expect(r.metrics.kl).toBeUndefined();
      }
      if (name.startsWith('GSPO sequence, grpo')) {
        const spec = [[-0.064037, -0.064037, -0.064037], [0.053311, 0.053311, 0.053311], [0.059899, 0.059899, 0.059899], [-0.088363, -0.088363, 0]];
        expectClose(r.grad.flat(), spec.flat(), { rtol: 0, atol: 5e-7, what: 'GSPO gradient vs the spec' });
      }
      if (name.includes('beta')) expectClose([r.metrics.kl as number], [0.058363], { rtol: 0, atol: 5e-7, what: 'kl' });
      if (name.includes('token_truncate')) {
        expectClose(
          ['min', 'mean', 'max'].map((k) => r.metrics[`sampling/importance_sampling_ratio/${k}`] as number),
          [0.818731, (1.051271 + 0.818731 + 1.105171 + 1 + 2 + 0.951229 + 1.221403 + 1 + 1 + 0.904837 + 1.051271) / 11, 2],
          { rtol: 0, atol: 1e-6, what: 'truncated IS ratios' },
        );
      }
    }
  });

  it('advantages for the three scale_rewards, on-policy, and sequence-level IS ratios', async () => {
    const spec = {
      group: [0.707007, -0.707007, -0.706907, 0.706907],
      batch: [1.044248, -1.044248, -0.522124, 0.522124],
      none: [0.5, -0.5, -0.25, 0.25],
    };
    for (const [scale, adv] of Object.entries(spec)) {
      const r = await runA7({}, { scale_rewards: scale });
      expectClose(r.advantages, adv, { rtol: 0, atol: 5e-7, what: `advantages ${scale}` });
    }
    const on = await runA7({ old_logps: null, ref_logps: null, sampling_logps: null }, { loss_type: 'grpo' });
    expect(Math.abs(on.loss)).toBeLessThanOrEqual(1e-8);
    expectClose(on.grad.flat(), [-0.058917, -0.058917, -0.058917, 0.058917, 0.058917, 0.058917, 0.058909, 0.058909, 0.058909, -0.088363, -0.088363, 0], {
      rtol: 0,
      atol: 5e-7,
      what: 'on-policy gradient',
    });
    const seq = await runA7({}, { rollout_correction: { mode: 'sequence_truncate', clip_max: 3, clip_min: null } });
    expectClose(
      ['min', 'mean', 'max'].map((k) => seq.metrics[`sampling/importance_sampling_ratio/${k}`] as number),
      [0.951229, (0.951229 + 2.339647 + 1.221403 + 0.951229) / 4, 2.339647],
      { rtol: 0, atol: 1e-6, what: 'sequence IS ratios' },
    );
  });

  it('refuses malformed input with a message naming the problem', async () => {
    const bad: [unknown, RegExp][] = [
      [{ ...A7, logps: [[1, 2, 3], [1, 2]] }, /logps is ragged/],
      [{ ...A7, mask: [[1, 1, 1]] }, /mask is 1x3, but logps is 4x3/],
      [{ ...A7, num_generations: 3 }, /not divisible by num_generations = 3/],
      [{ ...A7, rewards: [1, 0] }, /one value per sequence \(4\)/],
      [{ ...A7, config: { ...A7.config, beta: 0.1 }, ref_logps: null }, /needs ref_logps/],
      [{ ...A7, config: { ...A7.config, loss_typ: 'grpo' } }, /config\.loss_typ: unknown field; did you mean loss_type\?/],
      [{ ...A7, config: { ...A7.config, rollout_correction: { moed: 'token_mask' } } }, /config\.rollout_correction\.moed: unknown field; did you mean mode\?/],
      [{ ...A7, old_logp: null }, /old_logp: unknown field; did you mean old_logps\?/],
    ];
    for (const [input, message] of bad) {
      const out = await cli(input);
      expect(out.code).not.toBe(0);
      expect(out.stdout).toBe('');
      expect(out.stderr).toMatch(message);
    }
  });
});
