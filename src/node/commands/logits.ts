// `npm run cli -- logits --model DIR --input FILE --quant none|q4 --out FILE.safetensors
//  [--adapter DIR] [--driver lavapipe|swiftshader]`: the logits of every input position, [T, vocab]
// f32 under "logits". --input: see src/node/modelInput.ts. --adapter: a PEFT LoRA folder, applied.
import { writeFile } from 'node:fs/promises';
import type { CliArgs } from '../args';
import { createNodeGpu } from '../gpu';
import { readModelInput } from '../modelInput';
import { loadCliModel } from './generate';
import { serializeSafetensors } from '../../model/safetensors';

export const summary = 'logits [T, vocab] of a prompt (--model DIR --input FILE --quant none|q4 --out FILE.safetensors [--adapter DIR])';

export async function run(args: CliArgs): Promise<void> {
  const out = args.str('out');
  const gpu = await createNodeGpu({ driver: args.optStr('driver') });
  const { model, dir, adapter } = await loadCliModel(gpu, args);
  const input = await readModelInput(args.str('input'), dir, model.config);
  const logits = await model.logits(input.inputIds, input.images, { lora: adapter });
  const data = new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength);
  await writeFile(out, serializeSafetensors([{ name: 'logits', dtype: 'F32', shape: [input.inputIds.length, model.head.vocab], data }]));
}
