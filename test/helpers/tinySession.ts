// The tiny-a fixture opened as a session (a model folder with a byte-level tokenizer, f32 weights,
// two samples), with adapters for a short RL run, and hooks through which the RL tests see what the model is asked for.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Gpu } from '../../src/gpu';
import { nodeDirFiles } from '../../src/model/safetensors';
import { openModel, type ModelSession } from '../../src/model/session';
import type { GridThw, VisionTower } from '../../src/model/vision';
import { resolveConfig, type TrainConfigInput } from '../../src/rl/config';
import type { PreparedPrompt } from '../../src/rl/policy';
import type { PromptSource } from '../../src/rl/trainer';
import { testGpu } from './gpu';
import { tinyModelFolder } from './tinyModelFolder';

/** tiny-a in a fresh folder under the temporary directory (`prefix` names it). */
export async function openTinySession(prefix: string): Promise<{ gpu: Gpu; session: ModelSession }> {
  const gpu = await testGpu();
  const dir = tinyModelFolder(join(mkdtempSync(join(tmpdir(), prefix)), 'tiny-a'));
  return { gpu, session: await openModel(gpu, nodeDirFiles(dir), { quant: 'none', maxSamples: 2 }) };
}

/**
 * openTinySession with adapters for a short RL run: groups of 2 completions of up to 3 tokens,
 * 2 steps, no checkpoints, rank 2 (alpha 4); `fields` over these.
 */
export async function openTinyRun(prefix: string, fields: TrainConfigInput) {
  const { gpu, session } = await openTinySession(prefix);
  const { config, loss } = resolveConfig({ num_generations: 2, max_completion_length: 3, max_steps: 2, save_steps: 0, ...fields, lora: { r: 2, lora_alpha: 4, ...fields.lora } });
  session.attachLora(config.lora);
  return { gpu, session, config, loss };
}

/** Calls `seen` with the grids of every image batch the tower encodes from now on. */
export function onEncode(tower: VisionTower, seen: (grids: readonly GridThw[]) => void): void {
  const encode = tower.encode.bind(tower);
  tower.encode = (rec, pixels, grids) => {
    seen(grids);
    return encode(rec, pixels, grids);
  };
}

/** `source` that also hands each prompt it prepares to `seen`. */
export function watchedSource(source: PromptSource, seen: (prompt: PreparedPrompt) => void): PromptSource {
  return {
    rows: source.rows,
    prepare: async (row, system) => {
      const p = await source.prepare(row, system);
      seen(p.prompt);
      return p;
    },
  };
}
