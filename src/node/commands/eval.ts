// `npm run cli -- eval --model M (--data FILE | --demo) [--adapter DIR] [--out records.json]`: the
// app's eval (src/eval/runner.ts) headless. Each row's completions are scored by the reward terms
// and judged for correctness and format; per-row progress goes to stderr, the summary (accuracy,
// format compliance, mean reward, term means, by task where rows carry one) to stdout as one JSON
// line, and --out gets the run in the eval panel's JSON export format (src/eval/records.ts), plus a
// "row_tasks" map (row id → task) when the rows name their task.
//   --demo                 the bundled demo's held-out rows, model (public/demo unless --model),
//                          system prompt, rewards and greedy settings, as `train --demo` evaluates
//   --data FILE            parquet / JSON / JSONL rows (geo3k and MathVista layouts recognised;
//                          --image-folder DIR for image paths), --limit N rows
//   --rows N               evaluate the first N rows only
//   --answer-format solution|boxed   how an answer is read (default solution; boxed for geo3k)
//   --rewards seeds|geo3k|FILE.json  reward terms (default: seeds for solution, geo3k for boxed)
//   --temperature T (0: greedy, the default) --top-p P --top-k K --samples K --seed S
//   --max-new-tokens N (default 256; 64 with --demo)   --quant q4|none   --label TEXT
//   --system-prompt TEXT | --no-system-prompt          --overwrite (replace an existing --out)
//   --thinking-mode auto|on|off   the chat template's enable_thinking (TrainConfig thinking_mode)
//   --thinking-budget N           force </think> after N thinking tokens (TrainConfig thinking_budget)
// `eval --compare before.json after.json [--json]` prints the before/after diff of two such files
// (src/eval/diff.ts): the metric table, fixed / broken / unchanged samples, by task where known.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { DEFAULT_SYSTEM_PROMPT } from '../../data/prompt';
import { DEMO_MODEL_DIR, DEMO_SYSTEM_PROMPT, demoRows } from '../../data/demo';
import type { DatasetRow } from '../../data/types';
import { uploadAdapter } from '../../adapter/upload';
import { compareRuns, type Change } from '../../eval/diff';
import { evalRunFromJson, type AnswerFormat, type EvalRun } from '../../eval/records';
import { runEval } from '../../eval/runner';
import { evalExportJson } from '../../eval/groups';
import { openModel } from '../../model/session';
import { presetTerms, validateTerms, type RewardTerm } from '../../rewards/registry';
import { createNodeSandbox } from '../../rewards/sandboxNode';
import type { CliArgs } from '../args';
import { checkAdapterFits, checkOutputFree, readAdapterDir } from '../adapterDir';
import { DEMO_EVAL_MAX_NEW_TOKENS } from '../demoRun';
import { createNodeGpu } from '../gpu';
import { decodedDatasetRows, modelFilesAt } from './train';
import { defaultDataset } from '../../rl/dataSource';
import { thinkingArgs, thinkingModeWarning } from '../thinkingArgs';

export const summary = 'the app\'s eval of a model (+ adapter) on rows (--model M --data FILE|--demo [--adapter DIR] [--out FILE]), or --compare before.json after.json';

/** An eval export with the CLI's optional row → task map. */
export type EvalFile = EvalRun & { row_tasks?: Record<string, string> };

function rewardTerms(spec: string | undefined, format: AnswerFormat): RewardTerm[] {
  if (spec === undefined) return presetTerms(format === 'boxed' ? 'geo3k' : 'seeds');
  if (spec === 'seeds' || spec === 'geo3k') return presetTerms(spec);
  if (!existsSync(spec)) throw new Error(`--rewards: '${spec}' is neither a preset (seeds, geo3k) nor a file`);
  const terms = JSON.parse(readFileSync(spec, 'utf8')) as unknown;
  if (!Array.isArray(terms)) throw new Error(`--rewards ${spec}: expected a JSON list of reward terms ({name, weight, builtin?, params?, source?})`);
  try {
    validateTerms(terms as RewardTerm[]);
  } catch (e) {
    throw new Error(`--rewards ${spec}: ${(e as Error).message}`);
  }
  return terms as RewardTerm[];
}

/** Row id → task, from the rows' meta.task (the synthetic tasks) or answer_type; null when none has one. */
function rowTasks(rows: readonly DatasetRow[]): Record<string, string> | null {
  const tasks: Record<string, string> = {};
  for (const r of rows) {
    const task = typeof r.meta.task === 'string' ? r.meta.task : r.answer_type;
    if (task) tasks[r.id] = task;
  }
  return Object.keys(tasks).length ? tasks : null;
}

/** Per task: samples, accuracy and format compliance of the run's records. */
function byTask(run: EvalFile): Record<string, Record<string, number>> | null {
  const tasks = run.row_tasks;
  if (!tasks) return null;
  const out: Record<string, Record<string, number>> = {};
  for (const r of run.records) {
    const t = (out[tasks[r.id] ?? 'unknown'] ??= { samples: 0, correct: 0, format_ok: 0 });
    t.samples++;
    t.correct += +r.correct;
    t.format_ok += +r.format_ok;
  }
  for (const t of Object.values(out)) {
    t.accuracy = t.correct / t.samples;
    t.format = t.format_ok / t.samples;
  }
  return out;
}

function readEvalFile(path: string): EvalFile {
  if (!existsSync(path)) throw new Error(`--compare: no file ${path}`);
  try {
    return evalRunFromJson(readFileSync(path, 'utf8')) as EvalFile;
  } catch (e) {
    throw new Error(`${path}: ${(e as Error).message}`);
  }
}

function compare(beforePath: string, afterPath: string, json: boolean): void {
  const before = readEvalFile(beforePath);
  const after = readEvalFile(afterPath);
  const c = compareRuns(before, after);
  const tasks = { ...before.row_tasks, ...after.row_tasks };
  const taskOf = (id: string) => tasks[id] ?? 'all';
  const perTask: Record<string, Record<Change, number>> = {};
  for (const s of c.samples) (perTask[taskOf(s.id)] ??= { fixed: 0, broken: 0, unchanged: 0 })[s.change]++;
  const accuracy = (run: EvalFile, task: string) => {
    const rs = run.records.filter((r) => taskOf(r.id) === task);
    return rs.length ? rs.filter((r) => r.correct).length / rs.length : 0;
  };
  const taskRows = Object.entries(perTask)
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([task, counts]) => ({ task, ...counts, accuracy_before: accuracy(before, task), accuracy_after: accuracy(after, task) }));
  if (json) {
    console.log(JSON.stringify({ table: c.table, counts: c.counts, by_task: taskRows, fixed: c.samples.filter((s) => s.change === 'fixed').map((s) => `${s.id}#${s.sample}`), broken: c.samples.filter((s) => s.change === 'broken').map((s) => `${s.id}#${s.sample}`), only_before: c.onlyBefore, only_after: c.onlyAfter }));
    return;
  }
  // Four decimals; a difference below that (rounding in the sums) prints as 0.
  const f = (v: number) => (Math.abs(v) < 5e-5 ? 0 : v).toFixed(4);
  const signed = (v: number) => `${v >= 5e-5 ? '+' : ''}${f(v)}`;
  const lines = [`before: ${beforePath} (${before.label || before.id}, ${before.records.length} samples)`, `after:  ${afterPath} (${after.label || after.id}, ${after.records.length} samples)`, ''];
  lines.push(`${'metric'.padEnd(28)} ${'before'.padStart(9)} ${'after'.padStart(9)} ${'delta'.padStart(9)}`);
  for (const row of c.table) lines.push(`${row.metric.padEnd(28)} ${f(row.before).padStart(9)} ${f(row.after).padStart(9)} ${signed(row.delta).padStart(9)}`);
  lines.push('', `fixed ${c.counts.fixed}, broken ${c.counts.broken}, unchanged ${c.counts.unchanged}`);
  lines.push('', `${'task'.padEnd(16)} ${'fixed'.padStart(6)} ${'broken'.padStart(6)} ${'same'.padStart(6)}  accuracy before -> after`);
  for (const t of taskRows) lines.push(`${t.task.padEnd(16)} ${String(t.fixed).padStart(6)} ${String(t.broken).padStart(6)} ${String(t.unchanged).padStart(6)}  ${f(t.accuracy_before)} -> ${f(t.accuracy_after)}`);
  const list = (what: Change) => c.samples.filter((s) => s.change === what).map((s) => `${s.id}#${s.sample}`);
  if (c.counts.fixed) lines.push('', `fixed: ${list('fixed').join(' ')}`);
  if (c.counts.broken) lines.push('', `broken: ${list('broken').join(' ')}`);
  if (c.onlyBefore.length || c.onlyAfter.length) lines.push('', `in one run only (not counted): before ${c.onlyBefore.length}, after ${c.onlyAfter.length}`);
  console.log(lines.join('\n'));
}

function integer(args: CliArgs, name: string, fallback: number, min: number): number {
  const v = args.num(name, fallback);
  if (!Number.isInteger(v) || v < min) throw new Error(`--${name} must be an integer >= ${min}, got ${v}`);
  return v;
}

export async function run(args: CliArgs): Promise<void> {
  const comparePath = args.optStr('compare');
  if (comparePath !== undefined) {
    if (args.positional.length !== 1) throw new Error('eval --compare takes two files: --compare before.json after.json');
    compare(comparePath, args.positional[0], args.bool('json'));
    return;
  }
  const demo = args.bool('demo');
  const dataPath = args.optStr('data');
  if (demo === (dataPath !== undefined)) throw new Error('eval: give exactly one of --data FILE or --demo (or --compare before.json after.json)');
  const out = args.optStr('out');
  if (out !== undefined) checkOutputFree(out, args.bool('overwrite'));
  const answerFormat = (args.optStr('answer-format') ?? 'solution') as AnswerFormat;
  if (answerFormat !== 'solution' && answerFormat !== 'boxed') throw new Error(`--answer-format must be solution or boxed, got '${answerFormat}'`);
  const terms = rewardTerms(args.optStr('rewards'), answerFormat);
  const temperature = args.num('temperature', 0);
  if (!(temperature >= 0)) throw new Error(`--temperature must be >= 0, got ${temperature}`);
  const samplesPerRow = integer(args, 'samples', 1, 1);
  const thinking = thinkingArgs(args);
  const sampling = {
    temperature,
    topP: args.num('top-p', 1),
    topK: integer(args, 'top-k', 0, 0),
    maxNewTokens: integer(args, 'max-new-tokens', demo ? DEMO_EVAL_MAX_NEW_TOKENS : 256, 1),
    seed: integer(args, 'seed', 0, 0),
    ...(thinking.budget !== null ? { thinkingBudget: thinking.budget } : {}),
  };
  const systemPrompt = args.bool('no-system-prompt') ? null : (args.optStr('system-prompt') ?? (demo ? DEMO_SYSTEM_PROMPT : DEFAULT_SYSTEM_PROMPT));
  const quant = args.optStr('quant') ?? 'q4';
  if (quant !== 'q4' && quant !== 'none') throw new Error(`--quant must be 'q4' or 'none', got '${quant}'`);
  const model = args.optStr('model') ?? (demo ? DEMO_MODEL_DIR : undefined);
  if (model === undefined) throw new Error('missing required flag --model');
  const warn = (line: string) => console.error(line);

  let rows: DatasetRow[] = demo
    ? demoRows('heldOut')
    : await decodedDatasetRows({ ...defaultDataset('file'), path: dataPath!, image_folder: args.optStr('image-folder') ?? null, limit: args.optStr('limit') === undefined ? null : integer(args, 'limit', 0, 1) }, warn);
  if (args.optStr('rows') !== undefined) rows = rows.slice(0, integer(args, 'rows', 0, 1));
  const adapterDir = args.optStr('adapter');
  const adapter = adapterDir === undefined ? null : await readAdapterDir(adapterDir);

  const gpu = await createNodeGpu({ driver: args.optStr('driver') });
  warn(`loading ${model}`);
  const session = await openModel(gpu, modelFilesAt(model), { quant, maxSamples: samplesPerRow });
  if (adapter) {
    checkAdapterFits(adapter, session.model.config, { engine: true });
    session.model.attachLora(uploadAdapter(gpu, adapter, session.model.config.text.numLayers));
  }
  const thinkingWarning = thinkingModeWarning(thinking.mode, session.processor.tokenizer.chatTemplate);
  if (thinkingWarning) warn(thinkingWarning);
  const sandbox = terms.some((t) => t.source !== undefined) ? createNodeSandbox() : undefined;
  const result = await runEval({
    policy: session.policy,
    rows,
    prepare: (row) => session.prepare(row, systemPrompt, { thinkingMode: thinking.mode }).prompt,
    thinkingMode: thinking.mode,
    terms,
    sandbox,
    answerFormat,
    sampling,
    samplesPerRow,
    label: args.optStr('label') ?? (adapterDir ? `adapter ${adapterDir}` : `base ${model}`),
    adapter: adapterDir ?? null,
    onProgress: (p) => warn(`eval ${p.done}/${p.total}: accuracy ${p.summary.accuracy.toFixed(3)}, format ${p.summary.formatCompliance.toFixed(3)}, mean reward ${p.summary.meanReward.toFixed(3)}`),
  });
  const tasks = rowTasks(rows);
  const file: EvalFile = tasks ? { ...result, row_tasks: tasks } : result;
  if (out !== undefined) writeFileSync(out, evalExportJson(file, result.settings.answerMatch ?? 'numeric'));
  const s = result.summary;
  console.log(JSON.stringify({ eval: result.label, rows: s.rows, samples: s.samples, accuracy: s.accuracy, format: s.formatCompliance, reward: s.meanReward, terms: s.termMeans, any_correct: s.anyCorrect, mean_tokens: s.meanTokens, truncated: s.truncated, by_task: byTask(file), ...(out !== undefined ? { out } : {}) }));
}
