// A completion with what the built-in reward terms looked at marked in place: the <REASONING> and
// <SOLUTION> tags (format), the solution's body or the last \boxed{} (the extracted answer, marked
// right or wrong against the gold answer), and every `addCriterion` (the degeneration penalty).
import { explainCorrectness } from '../rewards/correctness';
import { answersEqual, lastBoxed } from '../rewards/normalize';
import { DEGENERATE_TOKEN, REASONING_TAG, SOLUTION_TAG } from '../rewards/format';
import { h } from './dom';

export interface Mark {
  start: number;
  end: number;
  kind: 'tag' | 'right' | 'wrong' | 'degenerate';
  title: string;
}

/** What the built-in terms looked at in `text`, in order, none overlapping (exported for its test). */
export function completionMarks(text: string, gold: string): Mark[] {
  const out: Mark[] = [];
  for (const tag of [REASONING_TAG, SOLUTION_TAG]) {
    for (const t of [`<${tag}>`, `</${tag}>`]) {
      for (let at = text.indexOf(t); at >= 0; at = text.indexOf(t, at + t.length)) out.push({ start: at, end: at + t.length, kind: 'tag', title: `format: ${t}` });
    }
  }
  // The answer the correctness term reads: the first <SOLUTION> body, else the last \boxed{}.
  const open = `<${SOLUTION_TAG}>`;
  const s = text.indexOf(open);
  const e = s >= 0 ? text.indexOf(`</${SOLUTION_TAG}>`, s + open.length) : -1;
  let answer: { start: number; end: number; right: boolean } | null = null;
  if (s >= 0 && e >= 0) answer = { start: s + open.length, end: e, right: explainCorrectness(text, gold).value > 0 };
  else {
    const boxed = lastBoxed(text);
    const at = text.lastIndexOf('\\boxed');
    if (boxed !== null && at >= 0) {
      const inner = text.indexOf(boxed, at);
      if (inner >= 0) answer = { start: inner, end: inner + boxed.length, right: answersEqual(boxed, gold) };
    }
  }
  if (answer && answer.end > answer.start) {
    const { right } = answer;
    out.push({ start: answer.start, end: answer.end, kind: right ? 'right' : 'wrong', title: right ? `answer: matches the gold answer ${gold}` : `answer: does not match the gold answer ${gold}` });
  }
  for (let at = text.indexOf(DEGENERATE_TOKEN); at >= 0; at = text.indexOf(DEGENERATE_TOKEN, at + DEGENERATE_TOKEN.length)) {
    out.push({ start: at, end: at + DEGENERATE_TOKEN.length, kind: 'degenerate', title: `degeneration: ${DEGENERATE_TOKEN}` });
  }
  // Earlier first; a mark inside an earlier one is dropped (tags never overlap each other).
  out.sort((a, b) => a.start - b.start || b.end - a.end);
  const kept: Mark[] = [];
  for (const m of out) if (!kept.length || m.start >= kept[kept.length - 1].end) kept.push(m);
  return kept;
}

/** A <pre> of the completion with <mark> elements (class mark-<kind>, a title saying why). */
export function highlightedCompletion(text: string, gold: string): HTMLPreElement {
  const pre = h('pre', { class: 'completion' });
  let at = 0;
  for (const m of completionMarks(text, gold)) {
    if (m.start > at) pre.append(text.slice(at, m.start));
    pre.append(h('mark', { class: `mark-${m.kind}`, title: m.title }, text.slice(m.start, m.end)));
    at = m.end;
  }
  if (at < text.length) pre.append(text.slice(at));
  return pre;
}
