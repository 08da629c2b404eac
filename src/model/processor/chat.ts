// Chat rendering for Qwen3-VL and the <|image_pad|> expansion. The template reproduces the
// output of the chat template Qwen3-VL-*-Instruct ships (chat_template.json) for system, user and
// assistant turns with text and images (tools and videos are not used by this engine):
//   <|im_start|>system\n{text}<|im_end|>\n            (only a first system message; no default)
//   <|im_start|>user\n{parts}<|im_end|>\n             (an image part is <|vision_start|><|image_pad|><|vision_end|>)
//   <|im_start|>assistant\n{text}<|im_end|>\n
//   <|im_start|>assistant\n                          (add_generation_prompt)
// Images in system or assistant turns render nothing, as in the shipped template.
import { ImageTokenMismatchError, imageTokenCount } from './ropeIndex';

export type ChatPart = { type: 'text'; text: string } | { type: 'image' };

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string | ChatPart[];
}

/**
 * TrainConfig `thinking_mode`, the chat template's thinking switch as Qwen3's templates read it:
 * 'auto' renders the template as shipped (enable_thinking not passed, transformers' default);
 * 'on' and 'off' pass enable_thinking = true / false (TRL: chat_template_kwargs). Qwen3's hybrid
 * templates answer 'off' by closing an empty block in the generation prompt
 * ("<|im_start|>assistant\n<think>\n\n</think>\n\n"); the Qwen3-VL-*-Thinking templates open one
 * whatever the switch ("<|im_start|>assistant\n<think>\n"); the Instruct templates ignore it.
 */
export type ThinkingMode = 'auto' | 'on' | 'off';
export const THINKING_MODES: readonly ThinkingMode[] = ['auto', 'on', 'off'];

/** The template variables a thinking mode sets. */
export function thinkingTemplateKwargs(mode: ThinkingMode): { enable_thinking?: boolean } {
  return mode === 'auto' ? {} : { enable_thinking: mode === 'on' };
}

/** Whether a chat template reads the thinking switch at all (else thinking_mode 'on'/'off' renders as 'auto'). */
export function templateReadsThinkingSwitch(template: string): boolean {
  return template.replace(/\{#[\s\S]*?#\}/g, '').includes('enable_thinking');
}

/**
 * Whether a rendered prompt leaves a <think> block open in its generation prompt (after the last
 * <|im_start|>): the completion then starts inside the block, as with a Thinking model's template.
 */
export function promptOpensThinking(rendered: string): boolean {
  const turn = rendered.slice(rendered.lastIndexOf('<|im_start|>') + 1);
  const open = turn.lastIndexOf('<think>');
  return open >= 0 && turn.indexOf('</think>', open) < 0;
}

export const IMAGE_PAD = '<|image_pad|>';
export const VISION_START = '<|vision_start|>';
export const VISION_END = '<|vision_end|>';

export const QWEN3_VL_CHAT_TEMPLATE = `{%- for message in messages %}
    {%- if message.role == 'user' or message.role == 'assistant' or (message.role == 'system' and loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for part in message.content %}
                {%- if part.type == 'image' and message.role == 'user' %}
                    {{- '<|vision_start|><|image_pad|><|vision_end|>' }}
                {%- elif part.type == 'text' %}
                    {{- part.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}`;

/** Images the messages refer to (image parts of user turns), in order. */
export function countImages(messages: ChatMessage[]): number {
  let n = 0;
  for (const m of messages) {
    if (m.role === 'user' && typeof m.content !== 'string') n += m.content.filter((p) => p.type === 'image').length;
  }
  return n;
}

/** Check the messages are ones the template renders; throws naming the first bad one. */
export function validateMessages(messages: ChatMessage[]): void {
  messages.forEach((m, i) => {
    if (m.role !== 'system' && m.role !== 'user' && m.role !== 'assistant') {
      throw new Error(`chat message ${i} has role '${String(m.role)}'; expected system, user or assistant`);
    }
    if (typeof m.content !== 'string' && !Array.isArray(m.content)) throw new Error(`chat message ${i} has no content`);
  });
}

/**
 * Replace the k-th <|image_pad|> with t·h·w/merge² copies of itself, for image k's grid, as
 * Qwen3VLProcessor does before tokenizing. The number of placeholders must equal the number of images.
 */
export function expandImagePads(text: string, imageGridThw: readonly (readonly [number, number, number])[], mergeSize: number): string {
  const pieces = text.split(IMAGE_PAD);
  const placeholders = pieces.length - 1;
  if (placeholders !== imageGridThw.length) {
    throw new ImageTokenMismatchError(`the prompt has ${placeholders} image placeholder(s) (${IMAGE_PAD}) but ${imageGridThw.length} image(s) were given`);
  }
  let out = pieces[0];
  imageGridThw.forEach((g, k) => {
    out += IMAGE_PAD.repeat(imageTokenCount(g, mergeSize)) + pieces[k + 1];
  });
  return out;
}
