// The seeds' correctness reward on the value inside the one <SOLUTION>…</SOLUTION> block:
//  2.0 for an exact match (newlines removed as the seeds do, then both sides trimmed);
//  1.5 for a numeric match: 3 vs 3.0; 3/4, \frac{3}{4} or \dfrac{3}{4} vs 0.75; 1,234 vs 1234
//      (regular thousands groups only); "12 cm" vs 12 (units are dropped, not converted);
//      "50%" vs 0.5 or 50 (a % sign allows both readings; 0.5 vs 50 without one is no match);
//      relative tolerance 1e-4;
//  0 otherwise, and 0 when there is no SOLUTION block or more than one (as in the seeds).
// The three values are options (RLinf's MathReward range: reward_max_val for a correct answer,
// reward_min_val for a wrong one, e.g. 1 and -1; set reward_numeric_val = reward_max_val for its
// binary reward).
import { SOLUTION_TAG } from './format';
import { extractTagged, numbersMatch, numericValue } from './normalize';
import type { RewardExplanation } from './types';

export const EXACT_MATCH_REWARD = 2.0;
export const NUMERIC_MATCH_REWARD = 1.5;

export interface CorrectnessOptions {
  /** An exact match (default 2.0, the seeds'). */
  reward_max_val: number;
  /** A numeric match (default 1.5). */
  reward_numeric_val: number;
  /** No match, or not exactly one SOLUTION block (default 0; RLinf's code default is -1). */
  reward_min_val: number;
}

export const SEEDS_CORRECTNESS: CorrectnessOptions = { reward_max_val: EXACT_MATCH_REWARD, reward_numeric_val: NUMERIC_MATCH_REWARD, reward_min_val: 0 };

export function explainCorrectness(completion: string, answer: string, options: CorrectnessOptions = SEEDS_CORRECTNESS): RewardExplanation {
  const blocks = extractTagged(completion, SOLUTION_TAG);
  if (blocks.length !== 1) return { value: options.reward_min_val, reason: `${blocks.length} ${SOLUTION_TAG} blocks (need exactly one)` };
  const value = blocks[0].replace(/\n/g, '').trim();
  const gold = answer.trim();
  if (value === gold) return { value: options.reward_max_val, reason: `exact match '${value}'` };
  const v = numericValue(value);
  const g = numericValue(gold);
  if (v && g && numbersMatch(v, g)) {
    return { value: options.reward_numeric_val, reason: `numeric match ${v.value} = ${g.value}` };
  }
  const seen = v ? `${v.value}` : `'${value}'`;
  return { value: options.reward_min_val, reason: `${seen} does not match '${gold}'` };
}

export function correctnessReward(completion: string, answer: string, options: CorrectnessOptions = SEEDS_CORRECTNESS): number {
  return explainCorrectness(completion, answer, options).value;
}
