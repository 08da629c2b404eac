// `npm run cli -- train` with learning_rate 1e30 on the tiny Qwen3-VL: exits 1 with a
// DivergenceError naming the step, and the current checkpoint holds only finite values.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readCheckpointDir } from '../../src/node/commands/train';
import { runCli, tinyTrainConfigFile } from '../helpers/cli';

describe('npm run cli -- train that diverges', () => {
  it('learning_rate 1e30 stops with a DivergenceError and exit 1; the last checkpoint is finite', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vlrl-cli-div-'));
    const configFile = tinyTrainConfigFile(dir, { learning_rate: 1e30, max_grad_norm: null, max_steps: 4 });
    const out = join(dir, 'run');
    const res = await runCli(['train', '--config', configFile, '--output-dir', out]);
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/error: DivergenceError: training diverged at step [1-4]: /);
    const step = Number(/diverged at step (\d)/.exec(res.stderr)![1]);
    const saved = await readCheckpointDir(out);
    if (step > 1) expect(readFileSync(join(out, 'latest'), 'utf8')).toBe(`step-0000000${step - 1}`);
    if (saved) for (const [, t] of saved.tensors) expect(t.every(Number.isFinite)).toBe(true);
  }, 300_000);
});
