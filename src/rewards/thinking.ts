// The answer of a thinking model's completion (Qwen3-VL-*-Thinking): its chat template opens
// <think> at the end of the prompt, so a completion reads "reasoning…</think>\n\nanswer"; a model
// may also open the block itself ("<think>…</think>answer"). Built-in rewards and the eval judge
// score the answer after the last </think>. A completion with a block left open (the thinking
// budget or max_completion_length ran out) has no answer yet.

export const THINK_OPEN = '<think>';
export const THINK_CLOSE = '</think>';

export interface ThinkingSplit {
  /** The text the rewards score. */
  answer: string;
  /** The thinking block's text, null when there is none. */
  thinking: string | null;
  /** A block was opened and never closed: `answer` is empty. */
  unfinished: boolean;
}

/**
 * Split a completion at its last </think>. `opened`: the prompt opened the block (a thinking
 * model's template), so a completion without </think> is all thinking. Without `opened`, a
 * completion with neither tag is all answer (a non-thinking model).
 */
export function splitThinking(completion: string, opened = false): ThinkingSplit {
  const close = completion.lastIndexOf(THINK_CLOSE);
  if (close >= 0) {
    let thinking = completion.slice(0, close);
    const open = thinking.indexOf(THINK_OPEN);
    if (open >= 0) thinking = thinking.slice(open + THINK_OPEN.length);
    return { answer: completion.slice(close + THINK_CLOSE.length).trim(), thinking: thinking.trim(), unfinished: false };
  }
  const open = completion.indexOf(THINK_OPEN);
  if (opened || open >= 0) return { answer: '', thinking: completion.slice(open >= 0 ? open + THINK_OPEN.length : 0).trim(), unfinished: true };
  return { answer: completion, thinking: null, unfinished: false };
}
