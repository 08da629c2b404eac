// `--thinking-mode auto|on|off` and `--thinking-budget N` of the generate and eval commands: the
// TrainConfig fields thinking_mode and thinking_budget (src/rl/config.ts documents them).
import { templateReadsThinkingSwitch, THINKING_MODES, type ThinkingMode } from '../model/processor';
import type { CliArgs } from './args';

export interface ThinkingArgs {
  mode: ThinkingMode;
  /** null: no budget. */
  budget: number | null;
}

export function thinkingArgs(args: CliArgs): ThinkingArgs {
  const mode = (args.optStr('thinking-mode') ?? 'auto') as ThinkingMode;
  if (!THINKING_MODES.includes(mode)) throw new Error(`--thinking-mode must be one of ${THINKING_MODES.join(', ')}, got '${mode}'`);
  let budget: number | null = null;
  if (args.optStr('thinking-budget') !== undefined) {
    budget = args.num('thinking-budget');
    if (!Number.isInteger(budget) || budget < 0) throw new Error(`--thinking-budget must be an integer >= 0, got ${budget}`);
  }
  return { mode, budget };
}

/** A line for stderr when --thinking-mode asks for a switch the model's chat template does not read; null otherwise. */
export function thinkingModeWarning(mode: ThinkingMode, template: string): string | null {
  return mode !== 'auto' && !templateReadsThinkingSwitch(template) ? `--thinking-mode ${mode}: the model's chat template does not read enable_thinking; the prompt renders as with auto` : null;
}
