// The --input of the `logits` and `generate` commands: either a safetensors file with the
// processor's outputs (input_ids int32 [T], and optionally pixel_values f32 [patches, 1536] with
// image_grid_thw int32 [images, 3]), or a JSON chat rendered with the model folder's tokenizer:
//   {"messages": [{"role": "user", "content": [{"type": "image", "image": "cat.png"}, {"type": "text", "text": "..."}]}]}
// (image paths relative to the JSON file; a bare array of messages works too).
import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { sharpDecoder } from '../data/node/sharpDecoder';
import type { Qwen3VLConfig } from '../model/config';
import { toFloat32, toInt32 } from '../model/dtype';
import { loadTokenizer, parsePreprocessorConfig, QWEN3_VL_IMAGE_PROCESSOR, Qwen3VLProcessor, readChatTemplate, type ChatMessage, type ChatPart, type Qwen3VLTokenizer, type RgbaImage, type ThinkingMode } from '../model/processor';
import type { ImageBatch } from '../model/qwen3vl';
import { nodeDirFiles, nodeFileSource, readAllTensors } from '../model/safetensors';

export interface ModelInput {
  inputIds: Int32Array;
  images?: ImageBatch;
}

export class InputError extends Error {
  constructor(file: string, detail: string) {
    super(`${file}: ${detail}`);
    this.name = 'InputError';
  }
}

/** The model folder's tokenizer (tokenizer.json and its chat template), or null when it has none. */
export async function folderTokenizer(modelDir: string): Promise<Qwen3VLTokenizer | null> {
  const files = nodeDirFiles(modelDir);
  if ((await files.text('tokenizer.json')) === null) return null;
  return loadTokenizer({ folder: resolve(modelDir) }, (await readChatTemplate((f) => files.text(f))) ?? undefined);
}

async function fromSafetensors(path: string): Promise<ModelInput> {
  const t = await readAllTensors(await nodeFileSource(path));
  const ids = t.get('input_ids');
  if (!ids) throw new InputError(path, `has no 'input_ids' tensor (found: ${[...t.keys()].join(', ')})`);
  if (ids.info.shape.length !== 1 || (ids.info.dtype !== 'I32' && ids.info.dtype !== 'I64')) {
    throw new InputError(path, `input_ids must be int32 [T], got ${ids.info.dtype} [${ids.info.shape.join(', ')}]`);
  }
  const inputIds = toInt32(ids.bytes, ids.info.dtype);
  const pv = t.get('pixel_values');
  const grid = t.get('image_grid_thw');
  if (!pv && !grid) return { inputIds };
  if (!pv || !grid) throw new InputError(path, 'pixel_values and image_grid_thw go together: one is missing');
  if (grid.info.shape.length !== 2 || grid.info.shape[1] !== 3 || (grid.info.dtype !== 'I32' && grid.info.dtype !== 'I64')) {
    throw new InputError(path, `image_grid_thw must be int32 [images, 3], got ${grid.info.dtype} [${grid.info.shape.join(', ')}]`);
  }
  const g = toInt32(grid.bytes, grid.info.dtype);
  const gridThw = Array.from({ length: g.length / 3 }, (_, k) => [g[3 * k], g[3 * k + 1], g[3 * k + 2]] as [number, number, number]);
  const patches = gridThw.reduce((a, [x, y, z]) => a + x * y * z, 0);
  if (pv.info.shape.length !== 2 || pv.info.shape[0] !== patches || pv.info.dtype === 'I32' || pv.info.dtype === 'I64' || pv.info.dtype === 'U8') {
    throw new InputError(path, `pixel_values must be float [${patches}, patch width] for the grids ${JSON.stringify(gridThw)}, got ${pv.info.dtype} [${pv.info.shape.join(', ')}]`);
  }
  return { inputIds, images: { pixelValues: toFloat32(pv.bytes, pv.info.dtype), gridThw } };
}

async function fromChat(path: string, modelDir: string, config: Qwen3VLConfig, thinking: ThinkingMode): Promise<ModelInput> {
  let json: unknown;
  try {
    json = JSON.parse(await readFile(path, 'utf8'));
  } catch (e) {
    throw new InputError(path, `not a readable JSON chat (${(e as Error).message})`);
  }
  const raw = Array.isArray(json) ? json : (json as { messages?: unknown })?.messages;
  if (!Array.isArray(raw)) throw new InputError(path, 'expected {"messages": [...]} or an array of messages');
  const tokenizer = await folderTokenizer(modelDir);
  if (!tokenizer) throw new InputError(path, `a JSON chat needs the model's tokenizer, and ${modelDir} has no tokenizer.json`);
  const images: RgbaImage[] = [];
  const messages: ChatMessage[] = [];
  for (const [i, m] of raw.entries()) {
    const content = (m as { content?: unknown }).content;
    if (!Array.isArray(content)) {
      messages.push(m as ChatMessage);
      continue;
    }
    const parts: ChatPart[] = [];
    for (const part of content as { type?: string; text?: string; image?: string }[]) {
      if (part.type === 'image') {
        if (typeof part.image !== 'string') throw new InputError(path, `message ${i}: an image part needs "image": "<file path>"`);
        const file = resolve(dirname(path), part.image);
        let bytes: Uint8Array;
        try {
          bytes = await readFile(file);
        } catch {
          throw new InputError(path, `message ${i}: cannot read image ${file}`);
        }
        images.push(await sharpDecoder.decode(bytes));
        parts.push({ type: 'image' });
      } else parts.push(part as ChatPart);
    }
    messages.push({ ...(m as ChatMessage), content: parts });
  }
  const pre = await nodeDirFiles(modelDir).text('preprocessor_config.json');
  const processor = new Qwen3VLProcessor(tokenizer, config, pre === null ? QWEN3_VL_IMAGE_PROCESSOR : parsePreprocessorConfig(pre));
  const out = processor.process(messages, images, true, thinking);
  return { inputIds: out.inputIds, images: out.imageGridThw.length ? { pixelValues: out.pixelValues, gridThw: out.imageGridThw } : undefined };
}

/** Read --input: a .json chat (rendered with the template's thinking switch set by `thinking`), anything else as safetensors. */
export function readModelInput(path: string, modelDir: string, config: Qwen3VLConfig, thinking: ThinkingMode = 'auto'): Promise<ModelInput> {
  return path.toLowerCase().endsWith('.json') ? fromChat(path, modelDir, config, thinking) : fromSafetensors(path);
}
