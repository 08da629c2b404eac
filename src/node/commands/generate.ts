// `npm run cli -- generate --model DIR --input FILE [--quant q4|none] --max-new-tokens N
//  --temperature T [--top-p P] [--top-k K] [--num-samples G] [--seed S] [--adapter DIR] [--driver ...]
//  [--thinking-mode auto|on|off] [--thinking-budget N]`.
// --thinking-mode sets a JSON chat's enable_thinking (TrainConfig thinking_mode); --thinking-budget
// forces </think> after N thinking tokens in each sample (TrainConfig thinking_budget), counted
// from the prompt's open <think> when the rendered prompt leaves one open.
// --adapter DIR: a PEFT LoRA folder (adapter_config.json + adapter_model.safetensors) applied on
// the model as the trainer applies its own (src/node/adapterDir.ts checks that it fits).
// Prints one JSON line: {"tokens", "text", "logprobs", "terminated"}, each a value for one sample,
// or a list with one value per sample when G > 1. "text" is null when the model folder has no
// tokenizer. Stops at the config's eos ids (config.json and generation_config.json).
import type { Gpu } from '../../gpu';
import type { Quantization } from '../../model/loader';
import { Qwen3VL, splitImages } from '../../model/qwen3vl';
import { nodeDirFiles } from '../../model/safetensors';
import type { CliArgs } from '../args';
import { createNodeGpu } from '../gpu';
import { checkAdapterFits, readAdapterDir } from '../adapterDir';
import { uploadAdapter } from '../../adapter/upload';
import { folderTokenizer, readModelInput } from '../modelInput';
import { promptOpensThinking } from '../../model/processor';
import { thinkingArgs, thinkingModeWarning } from '../thinkingArgs';

export const summary = 'sample a continuation of a prompt (--model DIR --input FILE --max-new-tokens N --temperature T [--num-samples G] [--seed S] [--adapter DIR])';

/** The model of --model DIR at --quant (default q4), with --adapter DIR's LoRA attached when given. */
export async function loadCliModel(gpu: Gpu, args: CliArgs): Promise<{ model: Qwen3VL; dir: string; adapter: boolean }> {
  const dir = args.str('model');
  const quant = args.optStr('quant') ?? 'q4';
  if (quant !== 'q4' && quant !== 'none') throw new Error(`--quant must be 'none' or 'q4', got '${quant}'`);
  const samples = Math.max(1, args.num('num-samples', 1));
  const adapterDir = args.optStr('adapter');
  const adapter = adapterDir === undefined ? null : await readAdapterDir(adapterDir); // a bad folder fails before the model loads
  const model = await Qwen3VL.load(gpu, nodeDirFiles(dir), { quant: quant as Quantization, maxLogitRows: samples });
  if (adapter) {
    checkAdapterFits(adapter, model.config, { engine: true });
    model.attachLora(uploadAdapter(gpu, adapter, model.config.text.numLayers));
  }
  return { model, dir, adapter: adapter !== null };
}

function integer(args: CliArgs, name: string, fallback?: number, min = 0): number {
  const v = args.num(name, fallback);
  if (!Number.isInteger(v) || v < min) throw new Error(`--${name} must be an integer ≥ ${min}, got ${v}`);
  return v;
}

export async function run(args: CliArgs): Promise<void> {
  const maxNewTokens = integer(args, 'max-new-tokens');
  const temperature = args.num('temperature');
  const numSamples = integer(args, 'num-samples', 1, 1);
  const seed = integer(args, 'seed', 0);
  const topP = args.num('top-p', 1);
  const topK = integer(args, 'top-k', 0);
  if (!(temperature >= 0)) throw new Error(`--temperature must be ≥ 0, got ${temperature}`);
  const thinking = thinkingArgs(args);
  const gpu = await createNodeGpu({ driver: args.optStr('driver') });
  const { model, dir } = await loadCliModel(gpu, args);
  model.tokenizer = await folderTokenizer(dir);
  const warning = model.tokenizer ? thinkingModeWarning(thinking.mode, model.tokenizer.chatTemplate) : null;
  if (warning) console.error(warning);
  const input = await readModelInput(args.str('input'), dir, model.config, thinking.mode);
  const images = input.images ? splitImages(input.images, input.images.gridThw.map((_, k) => `input image ${k}`)) : [];
  // Whether the prompt left a <think> block open, read from its text (a chat or token ids alike).
  const opened = model.tokenizer ? promptOpensThinking(model.tokenizer.decode(input.inputIds)) : false;
  const out = await model.generate({ id: 'cli', inputIds: input.inputIds, images, thinking: opened }, numSamples, { temperature, topP, topK, maxNewTokens, seed, thinkingBudget: thinking.budget });
  const one = <T>(xs: T[]): T | T[] => (numSamples === 1 ? xs[0] : xs);
  console.log(
    JSON.stringify({
      tokens: one(out.map((c) => c.tokens)),
      text: one(out.map((c) => (model.tokenizer ? c.text : null))),
      logprobs: one(out.map((c) => c.samplingLogps)),
      terminated: one(out.map((c) => c.terminated)),
    }),
  );
}
