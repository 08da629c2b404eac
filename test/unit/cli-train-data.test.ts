// `train --config` on a JSONL file with a row the processor would refuse (a 1x1 image): the row is
// reported broken at load, naming file and row; training and --resume go on with the others;
// data.json records the file; a changed file or a missing data.json stops --resume with a named error.
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli';
import { tinyModelFolder } from '../helpers/tinyModelFolder';

const png = (w: number, h: number) => sharp({ create: { width: w, height: h, channels: 3, background: { r: 200, g: 40, b: 90 } } }).png().toBuffer();
const url = (b: Buffer) => `data:image/png;base64,${b.toString('base64')}`;

describe('npm run cli -- train on a data file with a broken row', () => {
  it('reports the broken row at load, trains and resumes on the others, and refuses changed or unknown data on --resume', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vlrl-cli-data-'));
    const model = tinyModelFolder(join(dir, 'model'));
    const good = url(await png(64, 64));
    const rows = join(dir, 'rows.jsonl');
    writeFileSync(
      rows,
      [good, good, url(await png(1, 1)), good]
        .map((image, i) => JSON.stringify({ question: `<image>How many? ${i}`, answer: String(i), image }))
        .join('\n'),
    );
    const configFile = join(dir, 'config.json');
    writeFileSync(
      configFile,
      JSON.stringify({
        model_name_or_path: model,
        data: { path: rows, mapping: { prompt_key: 'question', answer_key: 'answer', image_keys: ['image'] } },
        system_prompt: 'Answer.',
        num_generations: 2,
        per_device_train_batch_size: 2,
        max_completion_length: 3,
        learning_rate: 0.01,
        lr_scheduler_type: 'constant',
        max_steps: 1,
        save_steps: 1,
        loss_type: 'grpo',
        lora: { r: 2, lora_alpha: 4 },
      }),
    );
    const out = join(dir, 'run');
    const first = await runCli(['train', '--config', configFile, '--output-dir', out]);
    expect(first.stderr).toMatch(/rows\.jsonl row 2: unusable image size \(image 1x1 is too small/);
    expect(first.code).toBe(0);
    const record = JSON.parse(readFileSync(join(out, 'data.json'), 'utf8'));
    expect(record).toMatchObject({ dataset: { kind: 'file', path: rows }, rows: 3 });

    // Every step of a resume draws rows again; none dies on the refused one.
    const resumed = await runCli(['train', '--resume', out, '--steps', '3']);
    expect(resumed.stderr).toContain('finished');
    expect(resumed.code).toBe(0);
    expect(resumed.stdout.trim().split('\n').map((l) => JSON.parse(l).step)).toEqual([2, 3]);

    appendFileSync(rows, `\n${JSON.stringify({ question: '<image>More?', answer: '9', image: good })}`);
    const changed = await runCli(['train', '--resume', out, '--steps', '4']);
    expect(changed.code).toBe(1);
    expect(changed.stderr).toMatch(/error: DataProvenanceError: .*rows\.jsonl is \d+ bytes now, \d+ when the run started.*--allow-data-change/);

    rmSync(join(out, 'data.json'));
    const unknown = await runCli(['train', '--resume', out, '--steps', '4']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/error: DataProvenanceError: .*data\.json is missing/);
  }, 400_000);
});
