// The TRL project's LoraConfig.target_modules (src/node/trl/project.ts): one regex PEFT full-matches
// against module paths; with vision entries in lora.target_modules it picks exactly the vision
// modules PEFT's list rule would, beside the decoder's projections.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseQwen3VLConfig } from '../../src/model/config';
import { expectedWeights } from '../../src/model/weightShapes';
import { trainPy } from '../../src/node/trl/project';
import { resolveConfig } from '../../src/rl/config';
import { defaultEngineConfig } from '../../src/rl/engineConfig';

/** The target_modules string train.py passes to LoraConfig, unquoted (a JSON string literal). */
function targetRegex(targets: string[]): string {
  const py = trainPy({ config: resolveConfig({ lora: { target_modules: targets } }).config, engine: defaultEngineConfig(), model: 'm', adapter: false });
  const m = /target_modules=("(?:[^"\\]|\\.)*"),/.exec(py);
  expect(m, 'train.py sets target_modules').not.toBeNull();
  return JSON.parse(m![1]) as string;
}

const linear = [...expectedWeights(parseQwen3VLConfig(readFileSync('test/fixtures/tiny/tiny-b/config.json', 'utf8')))]
  .filter(([n, shape]) => n.endsWith('.weight') && shape.length === 2)
  .map(([n]) => n.slice(0, -'.weight'.length));
const picked = (regex: string) => linear.filter((n) => new RegExp(`^(?:${regex})$`).test(n));

describe('export-trl target_modules', () => {
  it('the decoder\'s projections alone: the regex of before, every layer\'s q_proj and down_proj', () => {
    const regex = targetRegex(['q_proj', 'down_proj']);
    expect(regex).toBe('.*language_model.*\\.(q_proj|down_proj)');
    expect(picked(regex)).toEqual([0, 1, 2, 3].flatMap((l) => [`model.language_model.layers.${l}.self_attn.q_proj`, `model.language_model.layers.${l}.mlp.down_proj`]));
  });

  it('with vision merger entries: those modules too, no vision block', () => {
    const regex = targetRegex(['q_proj', 'merger.linear_fc1', 'model.visual.deepstack_merger_list.2.linear_fc2', 'visual.merger.linear_fc1']);
    const vision = picked(regex).filter((n) => n.includes('.visual.'));
    expect(vision.sort()).toEqual(['model.visual.deepstack_merger_list.2.linear_fc2', 'model.visual.merger.linear_fc1']);
    expect(picked(regex).filter((n) => !n.includes('.visual.'))).toHaveLength(4);
  });

  it('with vision block entries: every block\'s layer, or block i\'s under blocks.<i>.', () => {
    const regex = targetRegex(['q_proj', 'attn.qkv', 'blocks.1.mlp.linear_fc2']);
    expect(picked(regex).filter((n) => n.includes('.visual.'))).toEqual([0, 1, 2, 3].flatMap((i) => [`model.visual.blocks.${i}.attn.qkv`, ...(i === 1 ? ['model.visual.blocks.1.mlp.linear_fc2'] : [])]));
  });
});
