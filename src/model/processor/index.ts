// Qwen3VLProcessor: chat messages and images in, the model's inputs out (input_ids,
// pixel_values, image_grid_thw and the 3-D positions), as transformers' Qwen3VLProcessor +
// get_rope_index produce them.
import type { Qwen3VLConfig } from '../config';
import { ConfigError } from '../config';
import { countImages, expandImagePads, type ChatMessage, type ThinkingMode } from './chat';
import { preprocessImages, QWEN3_VL_IMAGE_PROCESSOR, type ImageProcessorConfig, type RgbaImage } from './image';
import { getRopeIndex, ImageTokenMismatchError } from './ropeIndex';
import type { Qwen3VLTokenizer } from './tokenizer';

export * from './chat';
export * from './image';
export * from './ropeIndex';
export * from './tokenizer';

export interface ProcessorOutputs {
  /** The rendered prompt with image pads expanded. */
  text: string;
  inputIds: Int32Array;
  /** [Σ patches, 3·T·P·P] f32, images concatenated in order. */
  pixelValues: Float32Array;
  imageGridThw: [number, number, number][];
  /** [3, seqLen] positions (T, H, W rows). */
  positions: Int32Array;
  ropeDelta: number;
}

export class Qwen3VLProcessor {
  constructor(
    readonly tokenizer: Qwen3VLTokenizer,
    readonly config: Qwen3VLConfig,
    readonly image: ImageProcessorConfig = QWEN3_VL_IMAGE_PROCESSOR,
  ) {
    const v = config.vision;
    if (image.patchSize !== v.patchSize || image.mergeSize !== v.spatialMergeSize || image.temporalPatchSize !== v.temporalPatchSize) {
      throw new ConfigError(
        `preprocessor_config.json (patch ${image.patchSize}, merge ${image.mergeSize}, temporal ${image.temporalPatchSize}) disagrees with ` +
          `config.json's vision_config (patch ${v.patchSize}, merge ${v.spatialMergeSize}, temporal ${v.temporalPatchSize})`,
      );
    }
  }

  /** Render `messages` with the chat template and process them with `images` (one per image part, in order). */
  process(messages: ChatMessage[], images: RgbaImage[], addGenerationPrompt = true, thinking: ThinkingMode = 'auto'): ProcessorOutputs {
    const referenced = countImages(messages);
    if (referenced !== images.length) {
      throw new ImageTokenMismatchError(`the messages refer to ${referenced} image(s) but ${images.length} were given`);
    }
    return this.processText(this.tokenizer.renderChat(messages, addGenerationPrompt, thinking), images);
  }

  /** Process a prompt already rendered, with one <|image_pad|> per image. */
  processText(prompt: string, images: RgbaImage[]): ProcessorOutputs {
    const { pixelValues, imageGridThw } = preprocessImages(images, this.image);
    const text = expandImagePads(prompt, imageGridThw, this.image.mergeSize);
    const inputIds = Int32Array.from(this.tokenizer.encode(text));
    const { positions, ropeDelta } = getRopeIndex(inputIds, imageGridThw, {
      imageTokenId: this.config.tokens.image,
      visionStartTokenId: this.config.tokens.visionStart,
      spatialMergeSize: this.config.vision.spatialMergeSize,
    });
    return { text, inputIds, pixelValues, imageGridThw, positions, ropeDelta };
  }
}
