// `npm run cli -- export-adapter --checkpoint DIR --out DIR [--overwrite] [--dtype f32|bf16] [--force]`: the
// LoRA of a training checkpoint as a PEFT adapter folder (adapter_model.safetensors +
// adapter_config.json), as `train` writes beside each checkpoint. --checkpoint is a run folder
// (its latest checkpoint) or one step-NNNNNNNN folder. An adapter with an all-zero lora_A or lora_B
// (untrained) is refused unless --force.
import { UntrainedAdapterError } from '../../adapter/peft';
import type { CliArgs } from '../args';
import { adapterFromCheckpoint, baseModelName, checkOutputFree, readCheckpointAt, writeAdapterDir } from '../adapterDir';

export const summary = 'a checkpoint\'s LoRA as a PEFT adapter folder (--checkpoint DIR --out DIR [--overwrite])';

export async function run(args: CliArgs): Promise<void> {
  const checkpoint = await readCheckpointAt(args.str('checkpoint'));
  const out = args.str('out');
  const dtype = (args.optStr('dtype') ?? 'f32').toUpperCase();
  if (dtype !== 'F32' && dtype !== 'BF16') throw new Error(`--dtype must be f32 or bf16, got '${args.optStr('dtype')}'`);
  const adapter = adapterFromCheckpoint(checkpoint);
  checkOutputFree(out, args.bool('overwrite'));
  try {
    writeAdapterDir(out, adapter, { force: args.bool('force'), note: baseModelName(checkpoint.meta.config.model_name_or_path).note, dtype });
  } catch (e) {
    if (e instanceof UntrainedAdapterError) throw new Error(e.message.replace('pass force: true', 'pass --force'));
    throw e;
  }
  console.log(JSON.stringify({ out, step: checkpoint.meta.step, modules: adapter.modules.length, r: adapter.r, lora_alpha: adapter.alpha, base_model_name_or_path: adapter.baseModel }));
}
