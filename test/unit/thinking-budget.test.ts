// The thinking budget on the GPU sampler path (src/ops/thinkingBudget.ts through generate), on the
// tiny fixture model: the same seeded group is generated free and with a budget. Draws depend only
// on (seed, row, step), so a budgeted sequence equals the free one up to the step the budget
// forces the end sequence; a sequence that closed its block on its own within the budget (or
// never opened one) equals the free one entirely. The end ids are tokens the free run draws, so
// that some rows close on their own and others are forced.
import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { modelFiles, readReference } from '../helpers/modelFixtures';
import { Qwen3VL } from '../../src/model/qwen3vl';
import { Sampler } from '../../src/ops/sampling';
import { ThinkingBudget } from '../../src/ops/thinkingBudget';
import type { Completion, PreparedPrompt } from '../../src/rl/policy';

const G = 6;
const BUDGET = 5;
const OPTS = { temperature: 1.5, topP: 1, topK: 0, maxNewTokens: 20, seed: 11 };

let net: Promise<Qwen3VL> | null = null;
const model = () => (net ??= testGpu().then((gpu) => Qwen3VL.load(gpu, modelFiles('tiny-a'), { quant: 'none' })));

async function textPrompt(thinking: boolean): Promise<PreparedPrompt> {
  const ref = await readReference('tiny-a', 'text');
  return { id: 'text', inputIds: ref.inputIds, images: [], thinking };
}

/** Where a free sequence would be forced: the first step at which `budget` thinking tokens were drawn without the end sequence, or -1. */
function forcedAt(tokens: readonly number[], opened: boolean, start: number, end: readonly number[], budget: number): { at: number; matched: number } {
  let inside = opened;
  let count = 0;
  let matched = 0;
  for (let t = 0; t < tokens.length; t++) {
    if (!inside) {
      inside = tokens[t] === start;
      continue;
    }
    if (count === budget) return { at: t, matched };
    count++;
    matched = tokens[t] === end[matched] ? matched + 1 : tokens[t] === end[0] ? 1 : 0;
    if (matched === end.length) return { at: -1, matched };
  }
  return { at: -1, matched };
}

function check(free: Completion[], budgeted: Completion[], opened: boolean, start: number, end: readonly number[], budget: number): { forced: number[]; untouched: number[] } {
  const forced: number[] = [];
  const untouched: number[] = [];
  budgeted.forEach((s, g) => {
    const f = forcedAt(free[g].tokens, opened, start, end, budget);
    if (f.at < 0) {
      expect(s.tokens, `row ${g} closed on its own or never thought: untouched`).toEqual(free[g].tokens);
      expect(s.samplingLogps).toEqual(free[g].samplingLogps);
      untouched.push(g);
      return;
    }
    forced.push(g);
    const rest = end.slice(f.matched);
    expect(s.tokens.slice(0, f.at), `row ${g}: the draws before the budget ran out`).toEqual(free[g].tokens.slice(0, f.at));
    expect(s.samplingLogps.slice(0, f.at)).toEqual(free[g].samplingLogps.slice(0, f.at));
    expect(s.tokens.slice(f.at, f.at + rest.length), `row ${g}: the rest of the end sequence, forced`).toEqual(rest);
    expect(s.samplingLogps.slice(f.at, f.at + rest.length)).toEqual(rest.map(() => 0));
    // Generation goes on after the block (the answer): the sequence is as long as the free one.
    expect(s.tokens).toHaveLength(free[g].tokens.length);
  });
  return { forced, untouched };
}

describe('thinking budget (tiny-a, seeded group)', () => {
  it('the prompt opened the block: </think> ends at or before position budget + its length; a row that closed on its own is untouched', async () => {
    const m = await model();
    const p = await textPrompt(true);
    const free = await m.generate(p, G, OPTS, { stopIds: [] });
    // Row 0 draws the end token at step 2, within the budget: it closes on its own.
    const close = free[0].tokens[2];
    const end = [close];
    const out = await m.generate(p, G, { ...OPTS, thinkingBudget: BUDGET }, { stopIds: [], thinkingTokens: { start: 1, end } });
    const { forced, untouched } = check(free, out, true, 1, end, BUDGET);
    expect(untouched).toContain(0);
    expect(forced.length).toBeGreaterThanOrEqual(2);
    for (const s of out) {
      const at = s.tokens.indexOf(close);
      expect(at).toBeGreaterThanOrEqual(0);
      expect(at).toBeLessThanOrEqual(BUDGET);
    }
    // Forced at exactly the budget where the model never drew the end token itself.
    for (const g of forced) expect(out[g].tokens.indexOf(close)).toBe(BUDGET);

    // A two-token end sequence: both forced, </think> complete by position budget + 2 − 1.
    const end2 = [close, 7];
    const out2 = await m.generate(p, G, { ...OPTS, thinkingBudget: BUDGET }, { stopIds: [], thinkingTokens: { start: 1, end: end2 } });
    const r2 = check(free, out2, true, 1, end2, BUDGET);
    expect(r2.forced.length).toBeGreaterThanOrEqual(2);
    for (const g of r2.forced) {
      const at = out2[g].tokens.findIndex((t, i) => t === end2[0] && out2[g].tokens[i + 1] === end2[1]);
      expect(at).toBeGreaterThanOrEqual(0);
      expect(at + end2.length - 1).toBeLessThanOrEqual(BUDGET + end2.length - 1);
    }
  }, 300_000);

  it('budget 0 closes at once; a block the model opens itself counts from its <think>; rows that never open one are untouched', async () => {
    const m = await model();
    const p = await textPrompt(false);
    const free = await m.generate(p, G, OPTS, { stopIds: [] });
    const end = [5];
    const zero = await m.generate({ ...p, thinking: true }, G, { ...OPTS, thinkingBudget: 0 }, { stopIds: [], thinkingTokens: { start: 1, end } });
    for (const s of zero) {
      expect(s.tokens[0]).toBe(5);
      expect(s.samplingLogps[0]).toBe(0);
    }
    // Row 2 "opens" a block at its step 1 (start = the token it draws there).
    const start = free[2].tokens[1];
    const out = await m.generate(p, G, { ...OPTS, thinkingBudget: 3 }, { stopIds: [], thinkingTokens: { start, end } });
    const { forced, untouched } = check(free, out, false, start, end, 3);
    expect(forced).toContain(2);
    expect(untouched.length).toBeGreaterThanOrEqual(1);
    expect(out[2].tokens[free[2].tokens.indexOf(start) + 1 + 3]).toBe(5);
  }, 300_000);

  it('refuses thinking ids outside the vocabulary, and a budget without a tokenizer or ids', async () => {
    const m = await model();
    const p = await textPrompt(true);
    await expect(m.generate(p, 2, { ...OPTS, thinkingBudget: 2 }, { stopIds: [], thinkingTokens: { start: 1, end: [151668] } })).rejects.toThrow(/token 151668 \(given\) is outside the model's vocabulary of 1024/);
    await expect(m.generate(p, 2, { ...OPTS, thinkingBudget: 2 }, { stopIds: [] })).rejects.toThrow(/needs the tokenizer/);
  }, 300_000);

  it('under a repetition penalty the forced token, not the drawn one, is marked as seen', async () => {
    const gpu = await testGpu();
    const sampler = await Sampler.create(gpu);
    const V = 40;
    const rows = 2;
    // Greedy draws token 3 on both rows; both are inside a block with budget 0, so 17 is forced.
    const z = new Float32Array(rows * V).map((_, i) => (i % V === 3 ? 5 : 0));
    const logits = gpu.upload(z, [rows, V], 'f32', 'test.logits');
    const ids = gpu.tensor([rows], 'u32', 'test.ids');
    const logp = gpu.tensor([rows], 'f32', 'test.logp');
    const seen = Sampler.seenBitmap(gpu, rows, V, [0]);
    const budget = ThinkingBudget.create(gpu, rows, { budget: 0, opened: true, startId: 39, endIds: [17] });
    const rec = gpu.recorder('test.penalty');
    sampler.sample(rec, logits, { temperature: 0, repetitionPenalty: 1.5 }, { seed: 1, step: 0 }, { ids, logp }, seen, (r) => budget.record(r, { ids, logp }));
    await rec.submit();
    expect(Array.from(await gpu.read(ids))).toEqual([17, 17]);
    expect(Array.from(await gpu.read(logp))).toEqual([0, 0]);
    const bits = (await gpu.read(seen)) as Uint32Array;
    const words = Math.ceil(V / 32);
    const has = (row: number, id: number) => (bits[row * words + (id >>> 5)] >>> (id & 31)) & 1;
    for (const row of [0, 1]) expect([has(row, 17), has(row, 3), has(row, 0)]).toEqual([1, 0, 1]);
    for (const t of [logits, ids, logp, seen]) t.release();
    budget.release();
  }, 120_000);
});
