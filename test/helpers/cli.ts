// Run `npm run cli -- ...` as a child process (on $VLRL_VK, lavapipe by default).
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tinyModelFolder } from './tinyModelFolder';

export interface CliOutput {
  code: number;
  stdout: string;
  stderr: string;
}

export function runCli(args: string[]): Promise<CliOutput> {
  return new Promise((resolve) => {
    execFile('npm', ['run', '-s', 'cli', '--', ...args], { env: { ...process.env, VLRL_VK: process.env.VLRL_VK ?? 'lavapipe' }, maxBuffer: 1 << 26 }, (err, stdout, stderr) =>
      resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/**
 * Writes `dir/config.json` for `train --config` on the tiny Qwen3-VL (its folder made at dir/model):
 * counting rows, groups of 2, 4 new tokens, GRPO on a rank-2 LoRA, and a custom reward (run in the
 * CLI's sandbox) that varies within a group whatever is sampled (the sample's index), so the
 * adapters move. `fields` adds to or replaces these; returns the file's path.
 */
export function tinyTrainConfigFile(dir: string, fields: Record<string, unknown>): string {
  const configFile = join(dir, 'config.json');
  writeFileSync(
    configFile,
    JSON.stringify({
      model_name_or_path: tinyModelFolder(join(dir, 'model')),
      dataset: { tasks: ['counting'], count: 4, seed: 0, size: 128 },
      system_prompt: 'Answer.',
      num_generations: 2,
      per_device_train_batch_size: 2,
      max_completion_length: 4,
      lr_scheduler_type: 'constant',
      save_steps: 1,
      loss_type: 'grpo',
      lora: { r: 2, lora_alpha: 4 },
      rewards: [{ name: 'length', weight: 0.1, source: '(c, a, ctx) => c.length + ctx.index' }],
      ...fields,
    }),
  );
  return configFile;
}
