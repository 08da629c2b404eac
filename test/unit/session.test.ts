// openModel on a tiny fixture folder (test/helpers/tinyModelFolder.ts adds a byte-level
// tokenizer whose ids fit the fixture): prepare() renders the chat, expands the image pads to the
// image's merged patch count, keys images by content; attachLora builds PEFT-named adapters for
// the configured target modules with their lora_dropout; mismatched tokenizers are refused.
import { copyFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { syntheticDataset } from '../../src/data/synthetic';
import { nodeQwen3TokenizerFolder } from '../../src/model/processor';
import { nodeDirFiles } from '../../src/model/safetensors';
import { imageKey, openModel, type ModelSession } from '../../src/model/session';
import { defaultConfig } from '../../src/rl/config';
import { testGpu } from '../helpers/gpu';
import { tinyModelFolder } from '../helpers/tinyModelFolder';
import { openTinySession } from '../helpers/tinySession';

let session: ModelSession;
beforeAll(async () => {
  ({ session } = await openTinySession('vlrl-session-'));
}, 60_000);

describe('openModel', () => {
  it('prepare: chat template, 128² image → 16 pads, ids the tokenizer decodes back to the expanded text', () => {
    const [row] = syntheticDataset({ seed: 3, count: 1, tasks: ['counting'], size: 128 });
    const { prompt, text } = session.prepare(row, 'Be brief.');
    expect(text).toBe(`<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>${row.question}<|im_end|>\n<|im_start|>assistant\n`);
    const ids = Array.from(prompt.inputIds);
    expect(ids.filter((i) => i === 1000)).toHaveLength(16);
    expect(ids.filter((i) => i === 998)).toHaveLength(1);
    expect(prompt.id).toBe(row.id);
    expect(prompt.images).toHaveLength(1);
    expect(prompt.images[0].gridThw).toEqual([1, 8, 8]);
    expect(prompt.images[0].pixelValues.length).toBe(64 * 3 * 2 * 16 * 16);
    expect(session.model.tokenizer!.decode(ids)).toBe(text.replace('<|image_pad|>', '<|image_pad|>'.repeat(16)));
    // No system prompt: the user turn comes first.
    expect(session.prepare(row, null).text.startsWith('<|im_start|>user\n')).toBe(true);
  });

  it('image keys follow the pixels', () => {
    const [a, b] = syntheticDataset({ seed: 3, count: 2, tasks: ['counting'], size: 128 });
    const again = syntheticDataset({ seed: 3, count: 1, tasks: ['counting'], size: 128 })[0];
    expect(imageKey(a.images[0])).toBe(imageKey(again.images[0]));
    expect(imageKey(a.images[0])).not.toBe(imageKey(b.images[0]));
    const flipped = { ...a.images[0], data: a.images[0].data.slice() };
    flipped.data[12345] ^= 1;
    expect(imageKey(flipped)).not.toBe(imageKey(a.images[0]));
    expect(session.prepare(a, null).prompt.images[0].key).toBe(imageKey(a.images[0]));
  });

  it('attachLora: 7 adapters per layer in PEFT names; a subset of target modules and lora_dropout as configured', () => {
    const lora = { ...defaultConfig().lora, r: 2, lora_alpha: 4 };
    const params = session.attachLora(lora);
    expect(params).toHaveLength(3 * 7);
    expect(params[0].name).toBe('model.language_model.layers.0.self_attn.q_proj');
    expect(params[6]).toMatchObject({ name: 'model.language_model.layers.0.mlp.down_proj', in: 128, out: 64, r: 2, alpha: 4 });
    expect(session.policy.lora).toBe(params);
    expect(session.model.loraDropout).toBe(0);
    const subset = session.attachLora({ ...lora, target_modules: ['down_proj', 'q_proj', 'v_proj'], lora_dropout: 0.1 });
    expect(subset.map((p) => p.name.replace('model.language_model.layers.', ''))).toEqual(
      [0, 1, 2].flatMap((l) => [`${l}.self_attn.q_proj`, `${l}.self_attn.v_proj`, `${l}.mlp.down_proj`]),
    );
    expect(session.model.loraDropout).toBe(0.1);
    expect(session.policy.lora).toBe(subset);
    expect(() => session.attachLora({ ...lora, target_modules: ['qkv' as 'q_proj'] })).toThrow(/qkv not among q_proj/);
    expect(session.policy.lora).toBe(subset);
  });

  it('attachLora: vision entries of target_modules adapt the modules PEFT matches them to, after the decoder\'s', () => {
    const lora = { ...defaultConfig().lora, r: 2, lora_alpha: 4 };
    const params = session.attachLora({ ...lora, target_modules: ['q_proj', 'merger.linear_fc2', 'visual.deepstack_merger_list.1.linear_fc1', 'model.visual.merger.linear_fc1'] });
    expect(params.slice(3).map((p) => [p.name, p.out, p.in])).toEqual([
      ['model.visual.merger.linear_fc1', 128, 128],
      ['model.visual.merger.linear_fc2', 64, 128],
      ['model.visual.deepstack_merger_list.1.linear_fc1', 128, 128],
    ]);
    expect(session.model.visionLora?.mergers[0].fc2?.name).toBe('model.visual.merger.linear_fc2');
    // tiny-a has two DeepStack mergers: a third names nothing.
    expect(() => session.attachLora({ ...lora, target_modules: ['q_proj', 'deepstack_merger_list.2.linear_fc1'] })).toThrow(
      /deepstack_merger_list.2.linear_fc1 name no module of this model \(its vision tower has 3 blocks and 2 DeepStack mergers/,
    );
    expect(session.policy.lora).toBe(params);
    // Block entries: every block's attn.qkv, block 1's mlp.linear_fc2 (tiny-a: 3 blocks, hidden 32, intermediate 64).
    const withBlocks = session.attachLora({ ...lora, target_modules: ['q_proj', 'attn.qkv', 'blocks.1.mlp.linear_fc2'] });
    expect(withBlocks.slice(3).map((p) => [p.name, p.out, p.in])).toEqual([
      ['model.visual.blocks.0.attn.qkv', 96, 32],
      ['model.visual.blocks.1.attn.qkv', 96, 32],
      ['model.visual.blocks.1.mlp.linear_fc2', 32, 64],
      ['model.visual.blocks.2.attn.qkv', 96, 32],
    ]);
    expect(session.model.visionLora?.blocks[1].fc2?.name).toBe('model.visual.blocks.1.mlp.linear_fc2');
    expect(() => session.attachLora({ ...lora, target_modules: ['q_proj', 'blocks.3.attn.proj'] })).toThrow(/blocks.3.attn.proj name no module of this model \(its vision tower has 3 blocks/);
    expect(session.policy.lora).toBe(withBlocks);
  });

  it('refuses a tokenizer that does not belong to the model, and a folder without one', async () => {
    const gpu = await testGpu();
    // Qwen's real tokenizer: <|image_pad|> is 151655, the fixture's config says 1000.
    const qwen = tinyModelFolder(join(mkdtempSync(join(tmpdir(), 'vlrl-session-qwen-')), 'tiny-a'));
    const tok = await nodeQwen3TokenizerFolder();
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(tok, f), join(qwen, f));
    await expect(openModel(gpu, nodeDirFiles(qwen), { quant: 'none' })).rejects.toThrow(/<\|image_pad\|> is 151655 but config.json's image_token_id is 1000/);
    await expect(openModel(gpu, nodeDirFiles('test/fixtures/tiny/tiny-a'), { quant: 'none' })).rejects.toThrow(/tokenizer.json not found in test\/fixtures\/tiny\/tiny-a/);
  });
});
