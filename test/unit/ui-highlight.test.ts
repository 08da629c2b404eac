// The rollout inspector's marks (src/ui/highlight.ts): what the built-in reward terms looked at in
// a completion, where they looked: the format tags, the extracted answer right or wrong against the
// gold answer (the <SOLUTION> body, else the last \boxed{}), and every addCriterion.
import { describe, expect, it } from 'vitest';
import { completionMarks } from '../../src/ui/highlight';

const spans = (text: string, gold: string) => completionMarks(text, gold).map((m) => [m.kind, text.slice(m.start, m.end)]);

describe('completion marks', () => {
  it('marks the format tags and the solution body, right or wrong against the gold answer', () => {
    const text = '<REASONING>3 + 4</REASONING><SOLUTION>7</SOLUTION>';
    expect(spans(text, '7')).toEqual([['tag', '<REASONING>'], ['tag', '</REASONING>'], ['tag', '<SOLUTION>'], ['right', '7'], ['tag', '</SOLUTION>']]);
    expect(spans(text, '8').map(([k]) => k)).toContain('wrong');
    // A numeric answer in another spelling is right, as the correctness term scores it.
    expect(spans('<SOLUTION>7.0</SOLUTION>', '7')).toContainEqual(['right', '7.0']);
  });

  it('without a solution block, marks the last \\boxed{} answer', () => {
    expect(spans('first \\boxed{2}, then \\boxed{5}', '5')).toEqual([['right', '5']]);
    expect(spans('\\boxed{4}', '5')).toEqual([['wrong', '4']]);
    expect(spans('no answer at all', '5')).toEqual([]);
  });

  it('marks every addCriterion, and drops a mark inside an earlier one', () => {
    expect(spans('addCriterion addCriterion', '1')).toEqual([['degenerate', 'addCriterion'], ['degenerate', 'addCriterion']]);
    // The token inside the solution body: the answer mark covers it.
    const inside = spans('<SOLUTION>x addCriterion</SOLUTION>', '1');
    expect(inside.filter(([k]) => k === 'degenerate')).toEqual([]);
    expect(inside).toContainEqual(['wrong', 'x addCriterion']);
  });
});
