// `npm run cli -- merge --model M --adapter DIR --out DIR [--overwrite] [--max-shard-size BYTES]`:
// the base model with a PEFT adapter merged into its weights, written as a Hugging Face folder that
// transformers loads without PEFT: config.json and the other text files of the model folder
// (generation, tokenizer, chat template, preprocessor), sharded safetensors in the source's dtype
// (src/adapter/mergeModel.ts; --dtype f32|bf16|f16 writes the merged weights in another) and
// model.safetensors.index.json. The folder is built under a
// temporary name and renamed, so an interrupted merge leaves no half model under --out.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { DEFAULT_MAX_SHARD_BYTES, INDEX_FILE, mergedShards, planMerge } from '../../adapter/mergeModel';
import { readModelConfig } from '../../model/qwen3vl';
import { openCheckpoint } from '../../model/safetensors';
import type { CliArgs } from '../args';
import { checkAdapterFits, checkOutputFree, readAdapterDir, replaceDir } from '../adapterDir';
import { modelFilesAt } from './train';

export const summary = 'a PEFT adapter merged into the base model, as a Hugging Face folder (--model M --adapter DIR --out DIR [--overwrite] [--dtype f32|bf16|f16])';

/** The model folder's files besides the weights that a Hugging Face model folder carries. */
export const MODEL_TEXT_FILES = [
  'config.json',
  'generation_config.json',
  'tokenizer.json',
  'tokenizer_config.json',
  'vocab.json',
  'merges.txt',
  'special_tokens_map.json',
  'added_tokens.json',
  'chat_template.json',
  'chat_template.jinja',
  'preprocessor_config.json',
  'video_preprocessor_config.json',
];

export async function run(args: CliArgs): Promise<void> {
  const out = args.str('out');
  const overwrite = args.bool('overwrite');
  const maxShard = args.num('max-shard-size', DEFAULT_MAX_SHARD_BYTES);
  if (!Number.isInteger(maxShard) || maxShard < 1) throw new Error(`--max-shard-size must be a positive number of bytes, got ${maxShard}`);
  const dtype = args.optStr('dtype')?.toUpperCase();
  if (dtype !== undefined && dtype !== 'F32' && dtype !== 'BF16' && dtype !== 'F16') throw new Error(`--dtype must be f32, bf16 or f16, got '${args.optStr('dtype')}'`);
  const adapter = await readAdapterDir(args.str('adapter'));
  const files = modelFilesAt(args.str('model'));
  const config = await readModelConfig(files);
  checkAdapterFits(adapter, config, { engine: false });
  const checkpoint = await openCheckpoint(files);
  const plan = planMerge(checkpoint, adapter, maxShard);
  checkOutputFree(out, overwrite);

  const tmp = join(dirname(out), `.${basename(out)}.tmp`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const copied: string[] = [];
  for (const f of MODEL_TEXT_FILES) {
    const text = await files.text(f);
    if (text === null) continue;
    writeFileSync(join(tmp, f), text);
    copied.push(f);
  }
  for await (const shard of mergedShards(checkpoint, plan, dtype)) {
    writeFileSync(join(tmp, shard.file), shard.bytes);
    console.error(`wrote ${shard.file}`);
  }
  writeFileSync(join(tmp, INDEX_FILE), plan.index);
  replaceDir(tmp, out);
  console.log(JSON.stringify({ out, merged: plan.merged.size, shards: plan.shards.map((s) => s.file), copied }));
}
