// The Model section of BENCHMARKS.md from bench/model.ts (ours) and bench/torch_model.py (PyTorch +
// PEFT on the same GPU): each figure side by side with the ratio ours/PyTorch, and the memory
// against the 6 GB target. The section sits between two markers and is replaced in place, so the
// kernel report (bench/report.ts) and this one can be regenerated independently.
//   npx vite-node bench/modelReport.ts -- --ours model.json --torch torch_model.json [--out BENCHMARKS.md]
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { MODEL_BEGIN, MODEL_END } from './sections';

/** The GPU's short name in the results' file names (bench/results/model.h200.json): the part of
 * the adapter's name after `nvidia-`, up to its next dash. */
function machineOf(adapter: string | undefined): string {
  return /nvidia-([a-z0-9]+)/i.exec(adapter ?? '')?.[1]?.toLowerCase() ?? 'gpu';
}

interface Memory {
  what: string;
  poolPeakGiB?: number;
  inUsePeakGiB?: number;
  maxAllocatedGiB?: number;
  maxReservedGiB?: number;
  largest?: { label: string; count: number; MiB: number }[];
}
interface Side {
  command: string;
  date: string;
  device?: string;
  adapter?: { name: string; description: string };
  torch?: string;
  transformers?: string;
  peft?: string;
  quick: boolean;
  weightsGiB: number;
  prefill?: { tokens: number; visionS: number; totalS: number; tokensPerS: number; lmTokensPerS: number };
  decode?: { samples: number; msPerStep: number; tokensPerS: number }[];
  gspo?: { prompts: number; completionsPerPrompt: number; promptTokens: number; completionTokens: number; seconds: number; tokensPerS: number; memory: Memory };
  gspoNoCheckpointing?: { seconds: number; tokensPerS: number; memory: Memory };
  gspoTensorCores?: TensorCoreRun;
  /** The same with x in one int8 limb (products 'int8-1limb'). */
  gspoTensorCoresOneLimb?: TensorCoreRun;
  /** Two limbs with steps by row (products 'int8-row'). */
  gspoTensorCoresRowSteps?: TensorCoreRun;
  /** f16 tensor cores (products 'f16'), where the device offers them. */
  gspoF16?: TensorCoreRun;
  defaultConfig?: { config?: string; generateS: number; stepS: number; memory: Memory };
  /** The same on int8 tensor cores, two limbs (the app's setting where they are offered). */
  defaultConfigTensorCores?: { generateS: number; stepS: number; memory: Memory };
  defaultConfigF16?: { generateS: number; stepS: number; memory: Memory };
  /** Ours (--activation-storage f16): the default config with the kept hidden states in f16, and their drift. */
  defaultConfigActivationsF16?: {
    products: string;
    generateS: number;
    stepS: number;
    memory: Memory;
    planGiB: number;
    drift: { storageOnly: Drift; againstF32Path: Drift };
    storageAtEnd: string;
    warnings: string[];
  };
  /** PyTorch only: bf16 against fp32 on the same weights (torch_model.py's drift). */
  drift?: Drift;
  /** Ours: the vision tower on int8 tensor cores (vision_products 'int8'). */
  visionTensorCores?: { visionS: number; prefillS: number; tokensPerS: number; inStreamMs: number; relRms: number[] };
  /** Ours: the vision tower's dense products on f16 tensor cores (products 'f16'). */
  visionF16?: { visionS: number; prefillS: number; tokensPerS: number; inStreamMs: number; relRms: number[] };
  /** PyTorch only: its vision features in bf16 against fp32, relative RMS (merged embeds, then deepstack). */
  visionDrift?: { relRms: number[] };
  /** Ours: generation's KV cache (--kv-cache) and, for an f16 one, its drift from the f32 cache's. */
  kvCache?: { dtype: 'f32' | 'f16'; why: string };
  kvCacheDrift?: KvCacheDrift;
  errors?: { case: string; error: string }[];
  decodeStep1?: DecodeStep;
  decodeStep8?: DecodeStep;
  decodeProfile1?: KernelRow[];
  decodeProfile8?: KernelRow[];
}
/** How far the tensor-core GEMMs move one group's log-probs and LoRA gradients (bench/model.ts tensorCoreDrift). */
interface Drift {
  tokens: number;
  logpMaxAbs: number;
  logpMeanAbs: number;
  gradTensors: number;
  gradOfMaxMedian: number;
  gradOfMaxWorst: number;
  gradNormMedian: number;
  gradNormWorst: number;
}
/** bench/model.ts kvCacheDrift: sampled log-probs over an f16 against an f32 KV cache, same seed. */
interface KvCacheDrift {
  samples: number;
  newTokens: number;
  tokens: number;
  diverged: number;
  meanAbs: number;
  maxAbs: number;
}
/** One tensor-core setting's GSPO step (bench/model.ts), with and without gradient checkpointing. */
interface TensorCoreRun {
  seconds: number;
  tokensPerS: number;
  noCheckpointingSeconds: number;
  noCheckpointingTokensPerS: number;
  drift: Drift;
}
interface DecodeStep {
  gpuMs: number;
  /** The stamped passes' span, first begin to last end (absent from runs before it existed). */
  spanMs?: number;
  mainMs?: number;
  cpuMs: number;
  wallMs: number;
  /** Gpu.hostStats over the step (absent from runs before they existed). */
  dispatches?: number;
  replayMs?: number;
  submitMs?: number;
}
interface KernelRow {
  name: string;
  calls: number;
  us: number;
}

const args = process.argv.slice(2);
const flag = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const f = (v: number | undefined, d = 3) => (v === undefined || !Number.isFinite(v) ? '—' : v.toPrecision(d));
/** f(v) ms, or a dash alone for a value the run did not record. */
const ms = (v: number | undefined) => (v === undefined ? '—' : `${f(v)} ms`);
/** ours/PyTorch for rates (above 1: ours is faster); PyTorch/ours for times, so that above 1 still means ours is faster. */
const ratio = (ours: number | undefined, torch: number | undefined, kind: 'rate' | 'time') =>
  ours === undefined || torch === undefined ? '—' : `${f(kind === 'rate' ? ours / torch : torch / ours, 2)}×`;

function render(o: Side, t: Side | undefined): string {
  const rows: string[][] = [];
  const add = (what: string, ours: number | undefined, torch: number | undefined, unit: string, kind: 'rate' | 'time') =>
    rows.push([what, `${f(ours)} ${unit}`, t ? `${f(torch)} ${unit}` : '—', t ? ratio(ours, torch, kind) : '—']);
  const p = o.prefill;
  const tp = t?.prefill;
  if (p) {
    add('vision tower, one 448x448 image (784 patches)', 1000 * p.visionS, tp && 1000 * tp.visionS, 'ms', 'time');
    add(`prefill, ${p.tokens} tokens with that image (vision included), generate(1 token)`, p.tokensPerS, tp?.tokensPerS, 'tok/s', 'rate');
    add('prefill without the vision tower', p.lmTokensPerS, tp?.lmTokensPerS, 'tok/s', 'rate');
  }
  const vt = o.visionTensorCores;
  if (vt) {
    add("vision tower on int8 tensor cores (vision_products 'int8')", 1000 * vt.visionS, tp && 1000 * tp.visionS, 'ms', 'time');
    add('prefill with it', vt.tokensPerS, tp?.tokensPerS, 'tok/s', 'rate');
  }
  const vf = o.visionF16;
  if (vf) {
    add("vision tower on f16 tensor cores (vision_products 'f16', which 'auto', the default, takes beside f16 products)", 1000 * vf.visionS, tp && 1000 * tp.visionS, 'ms', 'time');
    add('prefill with it', vf.tokensPerS, tp?.tokensPerS, 'tok/s', 'rate');
  }
  for (const d of o.decode ?? []) {
    const td = t?.decode?.find((x) => x.samples === d.samples);
    add(`decode, ${d.samples} sequence(s): tokens/s`, d.tokensPerS, td?.tokensPerS, 'tok/s', 'rate');
    add(`decode, ${d.samples} sequence(s): ms per step`, d.msPerStep, td?.msPerStep, 'ms', 'time');
  }
  const g = o.gspo;
  if (g) {
    add(`GSPO step: ${g.prompts} prompts x ${g.completionsPerPrompt} x (${g.promptTokens} + ${g.completionTokens}) tokens`, g.seconds, t?.gspo?.seconds, 's', 'time');
    add('GSPO step throughput (prompt + completion tokens)', g.tokensPerS, t?.gspo?.tokensPerS, 'tok/s', 'rate');
  }
  const k = o.gspoNoCheckpointing;
  if (k) {
    add('GSPO step without gradient checkpointing (as PyTorch runs it)', k.seconds, t?.gspo?.seconds, 's', 'time');
    add('GSPO step without gradient checkpointing: throughput', k.tokensPerS, t?.gspo?.tokensPerS, 'tok/s', 'rate');
  }
  const dc = o.defaultConfig;
  if (dc) {
    add('default trainer config (under Memory): generating its group of completions', dc.generateS, t?.defaultConfig?.generateS, 's', 'time');
    add('default trainer config: the training step of that group (ours with gradient checkpointing)', dc.stepS, t?.defaultConfig?.stepS, 's', 'time');
  }
  const df = o.defaultConfigF16;
  if (df) {
    add("default trainer config on f16 tensor cores (the app's setting where offered): generating the group", df.generateS, t?.defaultConfig?.generateS, 's', 'time');
    add('the same: the training step of that group', df.stepS, t?.defaultConfig?.stepS, 's', 'time');
  }
  const dt = o.defaultConfigTensorCores;
  if (dt) {
    add("default trainer config on int8 tensor cores, two limbs (the app's setting where int8 is offered and f16 is not): generating the group", dt.generateS, t?.defaultConfig?.generateS, 's', 'time');
    add('the same: the training step of that group', dt.stepS, t?.defaultConfig?.stepS, 's', 'time');
  }
  const da = o.defaultConfigActivationsF16;
  if (da) add(`default trainer config, ${da.products} products, hidden states kept in f16: the training step`, da.stepS, t?.defaultConfig?.stepS, 's', 'time');
  // Each tensor-core setting: its step, then without gradient checkpointing, time and throughput.
  const tensorCoreRows = (label: string, run: TensorCoreRun | undefined) => {
    if (!run) return;
    add(label, run.seconds, t?.gspo?.seconds, 's', 'time');
    add('the same without gradient checkpointing', run.noCheckpointingSeconds, t?.gspo?.seconds, 's', 'time');
    add('the same without gradient checkpointing: throughput', run.noCheckpointingTokensPerS, t?.gspo?.tokensPerS, 'tok/s', 'rate');
  };
  const [tc, one, byRow] = [o.gspoTensorCores, o.gspoTensorCoresOneLimb, o.gspoTensorCoresRowSteps];
  tensorCoreRows("GSPO step, decoder and LM head GEMMs and input gradients on f16 tensor cores (products 'f16', the app's setting where offered)", o.gspoF16);
  tensorCoreRows('GSPO step, decoder and LM head GEMMs and input gradients on int8 tensor cores (products "int8")', tc);
  tensorCoreRows('GSPO step on int8 tensor cores, x in one limb (products "int8-1limb")', one);
  tensorCoreRows("GSPO step on int8 tensor cores, two limbs, steps by row (products 'int8-row')", byRow);
  // A setting's drift beside the default's: log-probs, then gradients as a share of their norm.
  const driftBrief = (what: string, run: TensorCoreRun | undefined) =>
    run ? ` ${what}: log-probs ${f(run.drift.logpMeanAbs, 2)} on average (at most ${f(run.drift.logpMaxAbs, 2)}), gradients ${f(100 * run.drift.gradNormMedian, 2)}% of their norm at the median (worst ${f(100 * run.drift.gradNormWorst, 2)}%).` : '';
  const mem = (m: Memory | undefined, side: 'ours' | 'torch') =>
    !m ? '—' : side === 'ours' ? `${f(m.poolPeakGiB)} GiB pool peak (${f(m.inUsePeakGiB)} in use)` : `${f(m.maxAllocatedGiB)} GiB allocated (${f(m.maxReservedGiB)} reserved)`;
  const within = (m: Memory | undefined) => (m?.poolPeakGiB === undefined ? '' : m.poolPeakGiB <= 6 ? ' ✅' : ' ❌');
  const out = [
    MODEL_BEGIN,
    '# Model benchmarks',
    '',
    o.quick ? '> **`--quick` run on a software driver: not the GPU machine\'s figures.**\n' : '',
    `- GPU: **${o.adapter?.name ?? '?'}**; PyTorch saw **${t?.device ?? 'no run'}** (torch ${t?.torch ?? '—'}, transformers ${t?.transformers ?? '—'}, PEFT ${t?.peft ?? '—'}). Ours ${o.date}; PyTorch ${t?.date ?? '—'}.`,
    `- Ours: \`${o.command}\`; PyTorch: \`${t?.command ?? '—'}\`. On the GPU machine with carry \`[".device", ".bench"]\` after \`npm run bench:build\`:`,
    '  `source .device/gpu-env.sh && node .bench/model.mjs --f16 --profile --json $OUT/model.json; python3 bench/torch_model.py --json $OUT/torch_model.json`; then',
    `  \`npx vite-node bench/modelReport.ts -- --ours model.json --torch torch_model.json\`. The JSONs of this run: bench/results/*.${machineOf(o.adapter?.name)}.json.`,
    `- Model: Qwen3-VL-2B shapes (spec B1), random weights. Ours: 4-bit LM (${f(o.weightsGiB)} GiB on the GPU with the vision tower's matrices in bf16, as the published checkpoints hold them), f32 arithmetic; PyTorch: bf16 everywhere (${f(t?.weightsGiB)} GiB), sdpa. LoRA r=16 (alpha 32) on q/k/v/o/gate/up/down, unmerged on both sides.`,
    '- Times: wall clock around the call, GPU synchronised, median after warm-up runs of at least 0.3 s on both sides (the GPU\'s clocks drop while the host works alone). Decode = generate(128 tokens) − generate(1 token), 127 steps, temperature 1, no early stop; at 8 sequences our 4-bit GEMVs take x quantized to int8 per row and group of 32 (the default, ModelOptions.int8Decode: sampled log-probs within about 1e-3 to 1e-2 of the f32 forward\'s; training and scoring stay f32); at 1 sequence the GEMVs are f32 but the LM head\'s, whose x is in two int8 limbs (within 1.5e-5 of each group\'s largest |x|). GSPO: sequence-level ratio, loss_type grpo, ε 3e-4/4e-4, on-policy, per-prompt micro-batches of 8, clip 1.0 + AdamW; generation not included. Ours packs each group\'s prompt once before its 8 completions (the same loss and gradients; PyTorch, as TRL, repeats the prompt in every sequence). Ours recomputes each layer in the backward (gradient_checkpointing, our default) or, in the rows that say so, keeps every layer\'s activations; PyTorch keeps activations (no gradient checkpointing, TRL\'s default).',
    '- **× (ours/PyTorch)**: above 1 means ours is faster (rates: ours/PyTorch; times: PyTorch/ours).',
    tc
      ? `- Tensor-core rows: the decoder's and the LM head's 4-bit products of more than 8 rows and their input gradients on the K-blocked int8 kernels (weights re-rounded to int8 per block of K, 128 with x in two int8 limbs and 256 with one; the vision tower stays f32). Against the f32 kernels on one group (${tc.drift.tokens} completion tokens, LoRA B random): log-probs move by ${f(tc.drift.logpMeanAbs, 2)} on average (at most ${f(tc.drift.logpMaxAbs, 2)}); the ${tc.drift.gradTensors} LoRA gradients by ${f(100 * tc.drift.gradNormMedian, 2)}% of their norm at the median (worst ${f(100 * tc.drift.gradNormWorst, 2)}%), their largest difference ${f(100 * tc.drift.gradOfMaxMedian, 2)}% of the tensor's largest entry at the median (worst ${f(100 * tc.drift.gradOfMaxWorst, 2)}%).${driftBrief('With x in one limb', one)}${driftBrief('With two limbs and one step per row of x and column of W over the whole of K', byRow)}${driftBrief('On f16 tensor cores (x and W rounded to f16, f32 accumulation)', o.gspoF16)}${driftOf(t?.drift)}`
      : '',
    o.command.includes('--f16')
      ? "- Run with `--f16` (Dawn's f16 toggle): in every tensor-core row the attention over packed rows (training, scoring, the vision tower) also runs on f16 tensor cores (src/ops/attentionF16.ts), as the engine runs it where the device offers them."
      : '',
    vt
      ? `- Vision tensor-core rows: the tower's dense products but the patch embedding on the same kernel, its weights rounded to int8 once per (row, block of 128 along K), x in two limbs (${f(vt.inStreamMs)} ms of GPU time in stream). Its features move from the f32 units' by ${vt.relRms.map((r) => f(r, 2)).join(', ')} relative RMS (merged embeds, then the deepstack features)${t?.visionDrift?.relRms.length ? `; PyTorch's bf16 tower moves them from its fp32 by ${t.visionDrift.relRms.map((r) => f(r, 2)).join(', ')}` : ''}.${o.visionF16 ? ` On f16 tensor cores (each weight rounded to f16 into a scratch a call, no copy kept; ${f(o.visionF16.inStreamMs)} ms in stream) they move by ${o.visionF16.relRms.map((r) => f(r, 2)).join(', ')}.` : ''}`
      : '',
    da
      ? `- Hidden states kept in f16 (activation_storage f16, ${da.products} products${da.storageAtEnd === 'f16' ? '' : `; fell back to f32: ${da.warnings.join('; ')}`}): against f32 states on one group (${da.drift.storageOnly.tokens} completion tokens), log-probs move by ${f(da.drift.storageOnly.logpMaxAbs, 2)} at most (the forward itself stays f32), LoRA gradients by ${f(100 * da.drift.storageOnly.gradNormMedian, 2)}% of their norm at the median (worst ${f(100 * da.drift.storageOnly.gradNormWorst, 2)}%); the whole path against f32 products with f32 states: log-probs ${f(da.drift.againstF32Path.logpMeanAbs, 2)} on average (at most ${f(da.drift.againstF32Path.logpMaxAbs, 2)}), gradients ${f(100 * da.drift.againstF32Path.gradNormMedian, 2)}% (worst ${f(100 * da.drift.againstF32Path.gradNormWorst, 2)}%).${driftOf(t?.drift)}`
      : '',
    kvCacheLine(o, t?.drift),
    '',
    '| measure | ours | PyTorch + PEFT | × (ours/PyTorch) |',
    '|---|---|---|---|',
    ...rows.map((r) => `| ${r.join(' | ')} |`),
    '',
    '## Memory (target: 6 GB for training the 2B)',
    '',
    '| run | ours | PyTorch + PEFT |',
    '|---|---|---|',
    `| GSPO step above (LoRA r=16) | ${mem(g?.memory, 'ours')}${within(g?.memory)} | ${mem(t?.gspo?.memory, 'torch')} |`,
    `| GSPO step without gradient checkpointing (every layer's activations kept) | ${mem(k?.memory, 'ours')} | ${mem(t?.gspo?.memory, 'torch')} |`,
    `| default trainer config: generation of 8 x 256 then the step of that group (LoRA r=8) | ${mem(o.defaultConfig?.memory, 'ours')}${within(o.defaultConfig?.memory)} | ${mem(t?.defaultConfig?.memory, 'torch')} |`,
    ...(dt ? [`| the same on int8 tensor cores, two limbs | ${mem(dt.memory, 'ours')}${within(dt.memory)} | ${mem(t?.defaultConfig?.memory, 'torch')} |`] : []),
    ...(da ? [`| the same, ${da.products} products, hidden states kept in f16 (plan ${f(da.planGiB)} GiB) | ${mem(da.memory, 'ours')}${within(da.memory)} | ${mem(t?.defaultConfig?.memory, 'torch')} |`] : []),
    '',
    `Ours counts every buffer of the engine's pool (weights included); "in use" excludes freed buffers the pool keeps for reuse. Default config: ${o.defaultConfig?.config ?? '—'}.`,
    '',
    'Largest buffers live at the default config\'s in-use peak (layer numbers folded into #):',
    '',
    '| MiB | buffers |',
    '|---|---|',
    ...(o.defaultConfig?.memory.largest ?? []).map((b) => `| ${b.MiB.toFixed(0)} | ${b.count} x ${b.label} |`),
    '',
  ];
  out.push(...decodeBreakdown(o));
  const errors = [...(o.errors ?? []), ...(t?.errors ?? [])];
  if (errors.length) out.push('Failed cases: ' + errors.map((e) => `${e.case}: ${e.error.slice(0, 200)}`).join('; '), '');
  out.push(MODEL_END);
  return out.filter((l, i) => l !== '' || out[i - 1] !== '').join('\n');
}

/** The f16 KV cache's drift (--kv-cache f16) beside PyTorch's bf16 against its fp32. */
function kvCacheLine(o: Side, torch: Drift | undefined): string {
  const d = o.kvCacheDrift;
  if (!d) return o.kvCache ? `- KV cache: ${o.kvCache.dtype} (${o.kvCache.why}).` : '';
  const yardstick = torch ? ` PyTorch's bf16 (the whole model) against its fp32: log-probs ${f(torch.logpMeanAbs, 2)} on average (at most ${f(torch.logpMaxAbs, 2)}).` : '';
  return `- KV cache in f16 (\`--kv-cache f16\`: decode reads K and V as f16, rounded to nearest when written): ${d.samples} x ${d.newTokens} completions sampled with the same seed over the f16 and the f32 cache; the sampled log-probs of the ${d.tokens} tokens before each sequence's first differing token move by ${f(d.meanAbs, 2)} on average (at most ${f(d.maxAbs, 2)}); ${d.diverged} of ${d.samples} sequences drew another token at some step.${yardstick}`;
}

/** PyTorch's bf16 against its fp32 on the same batch: the yardstick for the tensor-core drift. */
function driftOf(d: Drift | undefined): string {
  if (!d) return '';
  return ` For scale, PyTorch's bf16 against its own fp32 on the same weights and a group of the same shape: log-probs ${f(d.logpMeanAbs, 2)} on average (at most ${f(d.logpMaxAbs, 2)}), LoRA gradients ${f(100 * d.gradNormMedian, 2)}% of their norm at the median (worst ${f(100 * d.gradNormWorst, 2)}%).`;
}

/** Where a decode step's time goes (model.ts --profile): GPU in stream against the CPU, then the kernels. */
function decodeBreakdown(o: Side): string[] {
  const sides = ([1, 8] as const).map((G) => ({ G, step: o[`decodeStep${G}`], kernels: o[`decodeProfile${G}`] }));
  if (!sides.some((x) => x.step)) return [];
  const out = [
    '## Where a decode step goes (`--profile`)',
    '',
    'GPU in stream: timestamps around the passes of every decode step as generate() records them (the timed decode\'s steps and contexts), per step; GPU span: from the first pass\'s begin to the last one\'s end, per step, whose excess over the time in stream is the GPU\'s idle time. Main thread busy: its event-loop utilisation (the JS and synchronous Dawn calls that record a step, and polling); of it, replay is the time in Recorder.replay (a replayed step\'s WebGPU calls) and submit the time finishing and submitting command buffers (Gpu.hostStats). Process CPU: user + system time of every thread over the same steps (a driver\'s spin-waits included), so it can exceed the wall time. A step is bound by recording when its wall time sits above its GPU time.',
    '',
    '| sequences | dispatches | GPU in stream | GPU span | main thread busy | of it: replay | of it: submit | process CPU | wall (profiled run) |',
    '|---|---|---|---|---|---|---|---|---|',
    ...sides
      .filter((x) => x.step)
      .map(({ G, step: s }) => `| ${G} | ${s!.dispatches?.toFixed(0) ?? '—'} | ${ms(s!.gpuMs)} | ${ms(s!.spanMs)} | ${ms(s!.mainMs)} | ${ms(s!.replayMs)} | ${ms(s!.submitMs)} | ${ms(s!.cpuMs)} | ${ms(s!.wallMs)} |`),
    '',
  ];
  const names = [...new Set(sides.flatMap((x) => (x.kernels ?? []).filter((k) => k.calls > 0).slice(0, 10).map((k) => k.name)))];
  if (names.length) {
    out.push(
      'GPU time per step by kernel, every dispatch in its own pass (that clock adds several µs a dispatch: compare kernels with each other, not with the in-stream total):',
      '',
      `| kernel | ${sides.map((x) => `x${x.G}: calls, µs`).join(' | ')} |`,
      `|---|${sides.map(() => '---').join('|')}|`,
      ...names.map((n) => `| ${n} | ${sides.map((x) => { const k = x.kernels?.find((r) => r.name === n); return k ? `${k.calls.toFixed(0)}, ${k.us.toFixed(0)}` : '—'; }).join(' | ')} |`),
      '',
    );
  }
  return out;
}

function main(): void {
  const oursPath = flag('ours');
  if (!oursPath) throw new Error('usage: modelReport.ts --ours model.json [--torch torch_model.json] [--out BENCHMARKS.md]');
  const ours = JSON.parse(readFileSync(oursPath, 'utf8')) as Side;
  const torchPath = flag('torch');
  const torch = torchPath ? (JSON.parse(readFileSync(torchPath, 'utf8')) as Side) : undefined;
  if (torch && torch.quick !== ours.quick) throw new Error('one run used --quick and the other did not');
  const outPath = flag('out') ?? 'BENCHMARKS.md';
  const section = render(ours, torch);
  const doc = existsSync(outPath) ? readFileSync(outPath, 'utf8') : '';
  const a = doc.indexOf(MODEL_BEGIN);
  const b = doc.indexOf(MODEL_END);
  const next = a >= 0 && b > a ? doc.slice(0, a) + section + doc.slice(b + MODEL_END.length) : `${doc.trimEnd()}\n\n${section}\n`;
  writeFileSync(outPath, next);
  console.log(`wrote the Model section of ${outPath}`);
}

main();
