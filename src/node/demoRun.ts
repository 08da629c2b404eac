// `train --demo`: the bundled teaching demo end to end, as the app's default run does it (issue 7):
// public/demo's model, greedy eval of the first held-out rows, GSPO training with the seeds'
// rewards on the RL row set, the same eval again with the trained adapter. The CI test
// (test/unit/demo-learning.test.ts) runs exactly this with --quick's settings.
import { demoRows, DEMO_SYSTEM_PROMPT } from '../data/demo';
import type { Gpu } from '../gpu';
import { runEval } from '../eval/runner';
import type { EvalSummary } from '../eval/records';
import { openModel, type ModelSession } from '../model/session';
import { nodeDirFiles } from '../model/safetensors';
import type { TrainConfig } from '../rl/config';
import type { Policy } from '../rl/policy';
import { trainRun, type TrainRunOptions } from './commands/train';

/** Held-out rows evaluated before and after (the first ones: the three tasks take turns). */
export const DEMO_EVAL_ROWS = 200;
/** The same for --quick. */
export const DEMO_QUICK_EVAL_ROWS = 30;
/** Long enough for the demo model's formatted answers (~40 tokens). */
export const DEMO_EVAL_MAX_NEW_TOKENS = 64;

export interface DemoEvalFigures {
  rows: number;
  accuracy: number;
  format: number;
  reward: number;
  /** Mean of each reward term (unweighted). */
  terms: Record<string, number>;
}

export interface DemoResult {
  steps: number;
  evalRows: number;
  before: DemoEvalFigures;
  after: DemoEvalFigures;
  /** after − before. */
  rise: { accuracy: number; format: number; reward: number };
}

export interface DemoRunOptions extends Omit<TrainRunOptions, 'resume'> {
  modelDir: string;
  quant: 'q4' | 'none';
  evalRows?: number;
}

function figures(s: EvalSummary): DemoEvalFigures {
  return { rows: s.rows, accuracy: s.accuracy, format: s.formatCompliance, reward: s.meanReward, terms: s.termMeans };
}

/** Greedy eval of `rows` under the run's rewards; `withAdapter` false runs the base model. */
async function evaluate(session: ModelSession, config: TrainConfig, rows: number, withAdapter: boolean): Promise<DemoEvalFigures> {
  const base: Policy = {
    lora: [],
    generate: (p, n, o) => session.model.generate(p, n, o, { lora: false }),
    forward: (b, o) => session.policy.forward(b, o),
    backward: (g, e) => session.policy.backward(g, e),
  };
  const run = await runEval({
    policy: withAdapter ? session.policy : base,
    rows: demoRows('heldOut').slice(0, rows),
    prepare: (row) => session.prepare(row, DEMO_SYSTEM_PROMPT).prompt,
    terms: config.rewards,
    answerFormat: 'solution',
    sampling: { temperature: 0, topP: 1, topK: 0, maxNewTokens: DEMO_EVAL_MAX_NEW_TOKENS, seed: config.seed },
    label: withAdapter ? 'after' : 'before',
  });
  return figures(run.summary);
}

/**
 * Eval, train (trainRun: metric lines, checkpoints), eval again. Prints one JSON line per eval
 * ({"eval": "before" | "after", ...}) beside the step lines, and returns the comparison.
 */
export async function demoRun(gpu: Gpu, o: DemoRunOptions): Promise<DemoResult> {
  const evalRows = o.evalRows ?? DEMO_EVAL_ROWS;
  let session: ModelSession | null = null;
  let before: DemoEvalFigures | null = null;
  const { state, config } = await trainRun(
    gpu,
    async (g, config) => {
      o.warn(`loading ${o.modelDir}`);
      const s = await openModel(g, nodeDirFiles(o.modelDir), { quant: o.quant, maxSamples: config.num_generations });
      s.attachLora(config.lora);
      session = s;
      before = await evaluate(s, config, evalRows, false);
      o.log(JSON.stringify({ eval: 'before', ...before }));
      return { policy: s.policy, data: s.promptSource(demoRows('rl')) };
    },
    { ...o, resume: false },
  );
  if (state === 'failed') throw new Error('demo: training failed');
  if (!session || !before) throw new Error('demo: the model was never opened');
  const b: DemoEvalFigures = before;
  const after = await evaluate(session, config, evalRows, true);
  o.log(JSON.stringify({ eval: 'after', ...after }));
  return {
    steps: config.max_steps,
    evalRows,
    before: b,
    after,
    rise: { accuracy: after.accuracy - b.accuracy, format: after.format - b.format, reward: after.reward - b.reward },
  };
}
