// Divergence stops a run with a DivergenceError naming the step and tensor, and leaves the last
// finite checkpoint current; a collapse that stays finite is warned about in the step's metrics.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Gpu } from '../../src/gpu';
import { readCheckpointDir, trainRun } from '../../src/node/commands/train';
import { DivergenceError } from '../../src/rl/divergence';
import type { StepMetrics } from '../../src/rl/metrics';
import type { ForwardOptions, Policy, SequenceBatch } from '../../src/rl/policy';
import { testGpu } from '../helpers/gpu';
import { TOY_VOCAB, ToyPolicy, toyPrompts, toyRunConfig } from '../helpers/toyPolicy';

const config = toyRunConfig({ max_steps: 4, save_steps: 1 });

/** The toy policy, with a fault injected from optimizer step `from` (counted by backward calls per step). */
function faulty(gpu: Gpu, toy: ToyPolicy, fault: 'loss' | 'gradient', from: number, vocab = false): Policy & { steps: number } {
  const p = {
    steps: 0,
    lora: toy.lora,
    vocabSize: vocab ? TOY_VOCAB.length : undefined,
    generate: toy.generate.bind(toy),
    async forward(batch: SequenceBatch, o: ForwardOptions) {
      const f = await toy.forward(batch, o);
      if (fault === 'loss' && o.train && p.steps + 1 >= from) gpu.write(f.logps, new Float32Array(f.logps.numel).fill(NaN));
      return f;
    },
    async backward(g: Parameters<Policy['backward']>[0]) {
      await toy.backward(g);
      p.steps++;
      if (fault === 'gradient' && p.steps >= from) {
        const dB = new Float32Array(toy.lora[0].dB.numel);
        dB[3] = Infinity;
        gpu.write(toy.lora[0].dB, dB);
      }
    },
  };
  return p;
}

const io = (lines: string[], warnings: string[] = []) => ({ log: (l: string) => lines.push(l), warn: (l: string) => warnings.push(l) });

describe('divergence', () => {
  it('a NaN loss at step 3 stops the run with a DivergenceError; the step-2 checkpoint stays current and finite', async () => {
    const gpu = await testGpu();
    const dir = join(mkdtempSync(join(tmpdir(), 'vlrl-div-')), 'run');
    const open = async () => ({ policy: faulty(gpu, await ToyPolicy.create(gpu, { r: 2, alpha: 4 }), 'loss', 3), data: toyPrompts() });
    const lines: string[] = [];
    const err = await trainRun(gpu, open, { config, outDir: dir, resume: false, ...io(lines) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DivergenceError);
    expect((err as DivergenceError).step).toBe(3);
    expect((err as Error).message).toMatch(/step 3: the loss is NaN/);
    expect(lines.map((l) => JSON.parse(l).step)).toEqual([1, 2]);
    expect(readFileSync(join(dir, 'latest'), 'utf8')).toBe('step-00000002');
    const saved = (await readCheckpointDir(dir))!;
    for (const [, t] of saved.tensors) expect(t.every(Number.isFinite)).toBe(true);
  }, 120_000);

  it('an infinite gradient names the step and the adapter tensor, and nothing is saved after it', async () => {
    const gpu = await testGpu();
    const dir = join(mkdtempSync(join(tmpdir(), 'vlrl-div-')), 'run');
    const open = async () => ({ policy: faulty(gpu, await ToyPolicy.create(gpu, { r: 2, alpha: 4 }), 'gradient', 2), data: toyPrompts() });
    const err = await trainRun(gpu, open, { config, outDir: dir, resume: false, ...io([]) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DivergenceError);
    expect((err as Error).message).toMatch(/step 2: the gradient of toy\.logits\.lora_B\.weight holds Infinity at element 3/);
    expect(readFileSync(join(dir, 'latest'), 'utf8')).toBe('step-00000001');
  }, 120_000);

  it('learning_rate 1e30 ends in a DivergenceError, never in a checkpoint holding a value that is not finite', async () => {
    const gpu = await testGpu();
    const dir = join(mkdtempSync(join(tmpdir(), 'vlrl-div-')), 'run');
    const open = async () => ({ policy: await ToyPolicy.create(gpu, { r: 2, alpha: 4 }), data: toyPrompts() });
    const err = await trainRun(gpu, open, { config: { ...config, learning_rate: 1e30, max_grad_norm: null, max_steps: 8 }, outDir: dir, resume: false, ...io([]) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DivergenceError);
    const saved = await readCheckpointDir(dir);
    if (saved) for (const [, t] of saved.tensors) expect(t.every(Number.isFinite)).toBe(true);
  }, 120_000);

  it('a finite collapse is warned about in the metrics: a uniform policy (entropy at ln V) and exploding adapter weights', async () => {
    const gpu = await testGpu();
    const dir = join(mkdtempSync(join(tmpdir(), 'vlrl-div-')), 'run');
    const open = async () => ({ policy: faulty(gpu, await ToyPolicy.create(gpu, { r: 2, alpha: 4 }), 'loss', Infinity, true), data: toyPrompts() });
    const lines: string[] = [];
    const warnings: string[] = [];
    await trainRun(gpu, open, { config: { ...config, learning_rate: 1e6, max_steps: 2 }, outDir: dir, resume: false, ...io(lines, warnings) });
    const metrics = lines.map((l) => JSON.parse(l) as StepMetrics);
    // The toy policy starts uniform (zero B): step 1's entropy is ln 8.
    expect(metrics[0].warnings?.some((w) => /close to uniform/.test(w))).toBe(true);
    expect(metrics[1].warnings?.some((w) => /exploding: toy\.logits\.lora_[AB]\.weight reaches/.test(w))).toBe(true);
    expect(warnings.some((w) => /^warning: step 2: adapter weights are exploding/.test(w))).toBe(true);
    // A sane run has neither.
    lines.length = 0;
    await trainRun(gpu, async () => ({ policy: await ToyPolicy.create(gpu, { r: 2, alpha: 4 }), data: toyPrompts() }), { config: { ...config, max_steps: 2 }, outDir: `${dir}-b`, resume: false, ...io(lines) });
    expect(lines.map((l) => JSON.parse(l).warnings)).toEqual([undefined, undefined]);
  }, 120_000);
});
