import { describe, expect, it } from 'vitest';
import { boxedReward, explainBoxed } from '../../src/rewards/boxed';
import { correctnessReward, EXACT_MATCH_REWARD, NUMERIC_MATCH_REWARD } from '../../src/rewards/correctness';
import { formatReward, isDegenerate } from '../../src/rewards/format';
import { answersEqual, evalLatexNumber, extractTagged, lastBoxed, normalizeAnswer } from '../../src/rewards/normalize';
import { splitThinking } from '../../src/rewards/thinking';
import { evaluateAll, evaluateBuiltins, liveScorer, parseWeight, playgroundFromPreset, removeTerm, setCustomTerm, setWeight } from '../../src/rewards/playground';
import { builtinRewardFn, presetTerms, REWARD_PRESETS, scoreBuiltins, validateTerms } from '../../src/rewards/registry';
import { rng } from '../helpers/reference';
import type { CustomRewardEvaluator } from '../../src/rewards/sandbox';

const solved = (value: string, reasoning = 'The bars show 3 apples.') =>
  `<REASONING>${reasoning}</REASONING>\n<SOLUTION>${value}</SOLUTION>`;

describe('extraction', () => {
  it('finds tagged blocks like re.findall with a lazy DOTALL group', () => {
    expect(extractTagged('<S>a</S> x <S>b\nc</S>', 'S')).toEqual(['a', 'b\nc']);
    expect(extractTagged('<S>a<S>b</S>', 'S')).toEqual(['a<S>b']);
    expect(extractTagged('<S>never closed', 'S')).toEqual([]);
  });

  it('takes the last \\boxed{} with balanced, nested braces', () => {
    expect(lastBoxed('first \\boxed{1} then \\boxed{\\frac{1}{2}}.')).toBe('\\frac{1}{2}');
    expect(lastBoxed('\\boxed{\\sqrt{\\frac{a}{\\{b\\}}}} done')).toBe('\\sqrt{\\frac{a}{\\{b\\}}}');
    expect(lastBoxed('so $\\boxed 7$')).toBe('7');
    expect(lastBoxed('\\boxed{unclosed {x}')).toBeNull();
    expect(lastBoxed('no box here')).toBeNull();
  });
});

describe('normalisation', () => {
  it('evaluates LaTeX arithmetic', () => {
    const cases: [string, number][] = [
      ['\\frac{1}{2}', 0.5],
      ['\\frac12', 0.5],
      ['-\\frac{3}{4}', -0.75],
      ['2\\sqrt{3}', 2 * Math.sqrt(3)],
      ['\\sqrt[3]{8}', 2],
      ['3\\pi', 3 * Math.PI],
      ['2^{10}', 1024],
      ['2^23', 12],
      ['(1+2)\\cdot4', 12],
      ['\\frac{\\sqrt{2}}{2}', Math.SQRT1_2],
      ['7/8', 0.875],
      ['.5', 0.5],
    ];
    for (const [text, want] of cases) expect(evalLatexNumber(normalizeAnswer(text).text), text).toBeCloseTo(want, 12);
    for (const text of ['x+1', '\\sin(3)', '(1,2)', '', '1/0']) expect(evalLatexNumber(normalizeAnswer(text).text), text).toBeNull();
  });

  it('drops units, degrees, $, \\left/\\right, trailing periods and spaces', () => {
    expect(normalizeAnswer('12 cm').text).toBe('12');
    expect(normalizeAnswer('12\\text{ cm}^2').text).toBe('12');
    expect(normalizeAnswer('60^{\\circ}').text).toBe('60');
    expect(normalizeAnswer('$60^\\circ$.').text).toBe('60');
    expect(normalizeAnswer('\\left( 1, 2 \\right)').text).toBe('(1,2)');
    expect(normalizeAnswer('\\dfrac{3}{4}').text).toBe('\\frac{3}{4}');
    expect(normalizeAnswer('x = 5').text).toBe('5');
    expect(normalizeAnswer('1,234,567').text).toBe('1234567');
    expect(normalizeAnswer('3x').text).toBe('3x');
    expect(normalizeAnswer('50\\%')).toEqual({ text: '50', percent: true });
  });

  it('compares answers as text, numbers, then tuples', () => {
    expect(answersEqual('\\frac{1}{2}', '0.5')).toBe(true);
    expect(answersEqual('\\dfrac{3}{4}', '0.75')).toBe(true);
    expect(answersEqual('2\\sqrt{3}', '\\sqrt{12}')).toBe(true);
    expect(answersEqual('60^\\circ', '60')).toBe(true);
    expect(answersEqual('ABC', 'abc')).toBe(true);
    expect(answersEqual('(\\frac{1}{2}, 3)', '(0.5,3)')).toBe(true);
    expect(answersEqual('(1, 3)', '(1, 2)')).toBe(false);
    expect(answersEqual('0.33', '\\frac{1}{3}')).toBe(false);
    expect(answersEqual('0.33333', '\\frac{1}{3}')).toBe(true); // within rel 1e-4, as RLinf
    expect(answersEqual('', '0')).toBe(false);
  });
});

describe('format reward', () => {
  it('gives +1 per block that occurs exactly once', () => {
    expect(formatReward(solved('3'))).toBe(2);
    expect(formatReward('<SOLUTION>3</SOLUTION>')).toBe(1);
    expect(formatReward('<REASONING>r</REASONING> the answer is 3')).toBe(1);
    expect(formatReward('3')).toBe(0);
    expect(formatReward(`${solved('3')}<SOLUTION>4</SOLUTION>`)).toBe(1);
    expect(formatReward('<REASONING>unclosed <SOLUTION>3</SOLUTION>')).toBe(1);
  });

  it('penalises addCriterion degeneration by 2', () => {
    const junk = 'addCriterion\n'.repeat(20);
    expect(isDegenerate(junk)).toBe(true);
    expect(formatReward(junk)).toBe(-2);
    // the seeds' share rule: token plus newlines at least half of the text
    expect(formatReward(`${solved('3', 'ok')}${'addCriterion'.repeat(5)}`)).toBe(0);
    // a long sensible completion that collapses into the token 8 times
    const long = solved('3', 'x'.repeat(2000)) + 'addCriterion '.repeat(8);
    expect(isDegenerate(long)).toBe(true);
    expect(formatReward(long)).toBe(0);
    // once, in a long text, is not degeneration; newline-only text without the token is not either
    expect(isDegenerate(solved('3', `${'y'.repeat(200)} addCriterion`))).toBe(false);
    expect(isDegenerate('\n\n\n')).toBe(false);
  });
});

describe('correctness reward', () => {
  it('scores exact 2.0, numeric 1.5, else 0', () => {
    expect(correctnessReward(solved('3'), '3')).toBe(EXACT_MATCH_REWARD);
    expect(correctnessReward(solved(' 3\n'), '3 ')).toBe(EXACT_MATCH_REWARD);
    expect(correctnessReward(solved('3.0'), '3')).toBe(NUMERIC_MATCH_REWARD);
    expect(correctnessReward(solved('3'), '3.0')).toBe(NUMERIC_MATCH_REWARD);
    expect(correctnessReward(solved('3/4'), '0.75')).toBe(NUMERIC_MATCH_REWARD);
    expect(correctnessReward(solved('\\frac{3}{4}'), '0.75')).toBe(NUMERIC_MATCH_REWARD);
    expect(correctnessReward(solved('50%'), '0.5')).toBe(NUMERIC_MATCH_REWARD);
    expect(correctnessReward(solved('50%'), '50')).toBe(NUMERIC_MATCH_REWARD);
    expect(correctnessReward(solved('0.5'), '50')).toBe(0);
    expect(correctnessReward(solved('12 cm'), '12')).toBe(NUMERIC_MATCH_REWARD);
    expect(correctnessReward(solved('1,234'), '1234')).toBe(NUMERIC_MATCH_REWARD);
    expect(correctnessReward(solved('1,2'), '12')).toBe(0);
    expect(correctnessReward(solved('4'), '3')).toBe(0);
    expect(correctnessReward(solved('three'), '3')).toBe(0);
  });

  it('gives 0 without exactly one SOLUTION block', () => {
    expect(correctnessReward('<REASONING>3</REASONING> 3', '3')).toBe(0);
    expect(correctnessReward('<SOLUTION>3</SOLUTION><SOLUTION>3</SOLUTION>', '3')).toBe(0);
  });

  it("takes RLinf's reward range as options: reward_max_val / reward_numeric_val / reward_min_val", () => {
    const rlinf = { reward_max_val: 1, reward_numeric_val: 1, reward_min_val: -1 };
    expect(correctnessReward(solved('3'), '3', rlinf)).toBe(1);
    expect(correctnessReward(solved('3.0'), '3', rlinf)).toBe(1);
    expect(correctnessReward(solved('4'), '3', rlinf)).toBe(-1);
    expect(correctnessReward('no block', '3', rlinf)).toBe(-1);
    // Through a reward term's params, with the built-in's defaults filling what is left out.
    const term = { name: 'correctness', weight: 2, params: { reward_min_val: -0.5 } };
    validateTerms([term]);
    expect(scoreBuiltins([term], { completion: solved('4'), answer: '3' }).total).toBe(-1);
    expect(scoreBuiltins([term], { completion: solved('3'), answer: '3' }).terms[0].value).toBe(EXACT_MATCH_REWARD);
    expect(scoreBuiltins([term], { completion: solved('3.0'), answer: '3' }).terms[0].value).toBe(NUMERIC_MATCH_REWARD);
    expect(() => validateTerms([{ name: 'correctness', weight: 1, params: { reward_scale: 2 } }])).toThrow(/no parameter 'reward_scale'/);
    expect(() => validateTerms([{ name: 'correctness', weight: 1, params: { reward_max_val: NaN } }])).toThrow(/not a finite number/);
  });
});

describe('boxed correctness (geo3k)', () => {
  it('matches the last \\boxed{} after normalisation', () => {
    expect(boxedReward('so x = \\boxed{\\frac{1}{2}}', '0.5')).toBe(1);
    expect(boxedReward('\\boxed{0.75}', '\\dfrac{3}{4}')).toBe(1);
    expect(boxedReward('Answer: \\boxed{\\dfrac{3}{4}}', '\\frac{3}{4}')).toBe(1);
    expect(boxedReward('\\boxed{2\\sqrt{3}}', '2 \\sqrt{3}')).toBe(1);
    expect(boxedReward('\\boxed{\\frac{\\sqrt{3}}{2}}', '\\frac{\\sqrt 3}{2}')).toBe(1);
    expect(boxedReward('\\boxed{60^{\\circ}}.', '60')).toBe(1);
    expect(boxedReward('\\boxed{12\\text{ cm}}', '12')).toBe(1);
    expect(boxedReward('\\boxed{\\left(1, 2\\right)}', '(1,2)')).toBe(1);
    expect(boxedReward('gold boxed too: \\boxed{5}', '\\boxed{5.0}')).toBe(1);
  });

  it('gives reward_min_val on a miss, a wrong box or no box', () => {
    expect(boxedReward('\\boxed{1} at first, then \\boxed{2}', '1')).toBe(0);
    expect(boxedReward('the answer is 0.5', '0.5')).toBe(0);
    expect(boxedReward('\\boxed{0.5', '0.5')).toBe(0);
    const opts = { reward_max_val: 5, reward_min_val: -5 };
    expect(boxedReward('\\boxed{3}', '3', opts)).toBe(5);
    expect(boxedReward('\\boxed{4}', '3', opts)).toBe(-5);
    expect(explainBoxed('none', '3').reason).toContain('no \\boxed');
  });
});

describe('registry and weighted sum', () => {
  it("scores the seeds' preset as 0.3·format + 1.0·correctness, terms kept", () => {
    const score = scoreBuiltins(presetTerms('seeds'), { completion: solved('3.0'), answer: '3' });
    expect(score.terms.map((t) => [t.name, t.weight, t.value])).toEqual([
      ['format', 0.3, 2],
      ['correctness', 1.0, 1.5],
    ]);
    expect(score.total).toBeCloseTo(0.3 * 2 + 1.5, 12);
    const junk = scoreBuiltins(presetTerms('seeds'), { completion: 'addCriterion'.repeat(30), answer: '3' });
    expect(junk.total).toBeCloseTo(0.3 * -2, 12);
  });

  it('scores the geo3k preset with reward_max_val 1 / reward_min_val 0', () => {
    expect(REWARD_PRESETS.geo3k.terms[0].params).toEqual({ reward_max_val: 1, reward_min_val: 0 });
    expect(scoreBuiltins(presetTerms('geo3k'), { completion: '\\boxed{\\frac{1}{2}}', answer: '0.5' }).total).toBe(1);
    expect(scoreBuiltins(presetTerms('geo3k'), { completion: '\\boxed{1}', answer: '0.5' }).total).toBe(0);
  });

  it('hands out copies of presets and refuses bad terms with a reason', () => {
    presetTerms('seeds')[0].weight = 9;
    expect(REWARD_PRESETS.seeds.terms[0].weight).toBe(0.3);
    expect(() => validateTerms([])).toThrow(/at least one/);
    expect(() => validateTerms([{ name: 'nope', weight: 1 }])).toThrow(/no built-in reward 'nope'/);
    expect(() => validateTerms([{ name: 'format', weight: NaN }])).toThrow(/finite/);
    expect(() => validateTerms([{ name: 'format', weight: 1 }, { name: 'format', weight: 2 }])).toThrow(/two terms/);
    expect(() => validateTerms([{ name: 'boxed', weight: 1, params: { max: 1 } }])).toThrow(/no parameter 'max'/);
    expect(() => validateTerms([{ name: 'c', weight: 1, source: 'x', builtin: 'format' }])).toThrow(/custom source/);
    expect(() => validateTerms([{ name: 'strict', builtin: 'boxed', weight: 2, params: { reward_min_val: -1 } }])).not.toThrow();
  });
});

describe('robustness', () => {
  it('gives a finite number for any text, hostile nesting included', () => {
    const pieces = ['\\boxed{', '{', '}', '(', ')', ',', '\\frac', '\\sqrt', '^', '1', '0', '.', '%', ' cm', '<SOLUTION>', '</SOLUTION>',
      '<REASONING>', '</REASONING>', 'addCriterion', '\n', '-', '/', '\\pi', '=', 'x', '$', '\\left(', '\\right)', '^\\circ'];
    const next = rng(7);
    const texts = Array.from({ length: 400 }, () => Array.from({ length: 1 + Math.floor(next() * 40) }, () => pieces[Math.floor(next() * pieces.length)]).join(''));
    texts.push(`\\boxed{${'{'.repeat(20_000)}1${'}'.repeat(20_000)}}`, `\\boxed{${'('.repeat(5000)}1,2${')'.repeat(5000)}}`);
    texts.push(`\\boxed{${'((1,2),'.repeat(3000)}3${')'.repeat(3000)}}`);
    const fns = (['format', 'correctness', 'boxed'] as const).map((name) => builtinRewardFn({ name, weight: 1 }));
    for (const text of texts) {
      for (const fn of fns) {
        expect(Number.isFinite(fn(text, text.slice(0, 9), {})), text.slice(0, 80)).toBe(true);
        expect(Number.isFinite(fn(`<SOLUTION>${text}</SOLUTION>\\boxed{${text}}`, text, {}))).toBe(true);
      }
    }
    expect(builtinRewardFn({ name: 'format', weight: 1 })(solved('3'), '3', {})).toBe(2);
  });
});

describe('playground logic', () => {
  it('starts from a preset with an example that scores, and recomputes as the sample changes', () => {
    const state = playgroundFromPreset('seeds');
    const v = evaluateBuiltins(state);
    expect(v.rows.map((r) => [r.name, r.value, r.weighted])).toEqual([
      ['format', 2, 0.6],
      ['correctness', 1.5, 1.5],
    ]);
    expect(v.total).toBeCloseTo(2.1, 12);
    expect(v.pending).toBe(false);
    const typed = evaluateBuiltins({ ...state, completion: state.completion.replace('3.0', '3') });
    expect(typed.rows[1].value).toBe(2);
    expect(evaluateBuiltins(playgroundFromPreset('geo3k')).total).toBe(1);
  });

  it('edits weights and terms, refusing bad input with a reason', () => {
    let state = playgroundFromPreset('seeds');
    expect(parseWeight(' 0.5 ')).toEqual({ weight: 0.5 });
    expect(parseWeight('abc')).toEqual({ error: "'abc' is not a number" });
    expect(parseWeight('')).toHaveProperty('error');
    state = setWeight(state, 'format', 2);
    expect(evaluateBuiltins(state).total).toBeCloseTo(2 * 2 + 1.5, 12);
    expect(() => setWeight(state, 'missing', 1)).toThrow(/no term named 'missing'/);
    state = setCustomTerm(state, 'len', '(c) => c.length', 0.1);
    const v = evaluateBuiltins(state);
    expect(v.rows[2]).toMatchObject({ name: 'len', custom: true, pending: true, weighted: 0 });
    expect(v.pending).toBe(true);
    expect(setCustomTerm(state, 'len', '() => 1').terms[2]).toEqual({ name: 'len', weight: 0.1, source: '() => 1' });
    expect(() => setCustomTerm(state, 'format', '() => 1')).toThrow(/built-in/);
    expect(removeTerm(state, 'len').terms.map((t) => t.name)).toEqual(['format', 'correctness']);
    const last = removeTerm(removeTerm(state, 'len'), 'format');
    expect(() => removeTerm(last, 'correctness')).toThrow(/at least one/);
  });

  it('runs custom terms through an evaluator and drops results a newer edit superseded', async () => {
    const calls: { source: string; resolve: (v: { value: number; error: string | null }[]) => void }[] = [];
    const evaluator: CustomRewardEvaluator = {
      evaluate: (source) => new Promise((resolve) => calls.push({ source, resolve })),
    };
    const score = liveScorer(evaluator);
    const state = setCustomTerm(playgroundFromPreset('seeds'), 'mine', '() => 1', 2);
    const first = score(state);
    const second = score({ ...state, answer: '4' });
    expect(second.now.rows[1].value).toBe(0); // built-ins already recomputed for the new gold
    calls[0].resolve([{ value: 1, error: null }]);
    calls[1].resolve([{ value: 0, error: 'threw Error: x' }]);
    expect(await first.full).toBeNull();
    const full = await second.full;
    expect(full?.pending).toBe(false);
    expect(full?.rows[2]).toMatchObject({ name: 'mine', value: 0, error: 'threw Error: x', custom: true });
    expect(full?.total).toBeCloseTo(0.3 * 2, 12);
    const direct = evaluateAll(state, evaluator);
    calls[2].resolve([{ value: 1, error: null }]);
    expect((await direct).total).toBeCloseTo(0.6 + 1.5 + 2, 12);
  });
});

describe('thinking-block answer extraction', () => {
  it('splits at the last </think>; an open block has no answer', () => {
    expect(splitThinking('count them: 3 dots</think>\n\n<SOLUTION>3</SOLUTION>')).toEqual({ answer: '<SOLUTION>3</SOLUTION>', thinking: 'count them: 3 dots', unfinished: false });
    expect(splitThinking('<think>a</think>b</think> final')).toEqual({ answer: 'final', thinking: 'a</think>b', unfinished: false });
    expect(splitThinking('<think>still going <SOLUTION>4</SOLUTION>')).toEqual({ answer: '', thinking: 'still going <SOLUTION>4</SOLUTION>', unfinished: true });
    expect(splitThinking('plain <SOLUTION>4</SOLUTION>')).toEqual({ answer: 'plain <SOLUTION>4</SOLUTION>', thinking: null, unfinished: false });
    expect(splitThinking('no close yet <SOLUTION>4</SOLUTION>', true).unfinished).toBe(true);
  });

  it('built-in rewards score the answer after the block; custom terms are untouched', () => {
    const terms = presetTerms('seeds');
    // A guess inside the thinking block must not count; the answer after it does.
    const think = '<SOLUTION>4</SOLUTION> no wait</think>\n<REASONING>3 dots</REASONING>\n<SOLUTION>3</SOLUTION>';
    const s = scoreBuiltins(terms, { completion: think, answer: '3' });
    expect(s.terms.map((t) => t.value)).toEqual([2, EXACT_MATCH_REWARD]);
    const open = scoreBuiltins(terms, { completion: '<REASONING>3</REASONING><SOLUTION>3</SOLUTION>', answer: '3', thinking: true });
    expect(open.terms.map((t) => t.value)).toEqual([0, 0]);
    expect(open.terms[1].reason).toMatch(/thinking block not closed/);
  });
});
