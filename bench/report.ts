// Merges the JSON of bench/kernels.ts (ours, Dawn) and of bench/torch_kernels.py (PyTorch on the
// same GPU) into BENCHMARKS.md: per kernel and shape, our times and rate, the fraction of the limit
// measured in the same run, each PyTorch variant's time and rate, and the speed ratio.
//   npx vite-node bench/report.ts -- --ours ours.json [--torch torch.json] [--update part.json] [--out BENCHMARKS.md]
// --update takes a later run of some suites (--only): its rows and sweeps replace those suites'.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import type { Row } from '../src/bench/harness';
import { cardPeak, type CardPeak } from './peaks';
import { MODEL_BEGIN } from './sections';

const SWEEPS_PATH = 'bench/results/option-sweeps.md';
const TABLES_PATH = 'bench/results/kernel-tables.md';

interface Ours {
  command: string;
  adapter: { name: string; description: string };
  features: string[];
  date: string;
  quick: boolean;
  readGBs: number;
  seconds: number;
  rows: Row[];
  sweeps: Record<string, { shape: string; setting: string; ms: number }[]>;
  /** Later partial runs merged in with --update (their suites replace this run's). */
  updates?: { command: string; date: string; seconds: number; readGBs: number; suites: string[] }[];
}

interface TorchRow {
  key: string;
  suite: string;
  shape: string;
  variant: string;
  ms: number;
  rate: number;
  unit: string;
  note?: string;
}

interface Torch {
  command: string;
  device: string;
  torch: string;
  cuda: string;
  tf32: boolean;
  date: string;
  quick: boolean;
  copyGBs: number | null;
  seconds: number;
  rows: TorchRow[];
  errors: { case: string; error: string }[];
}

/** Our suite -> the PyTorch suite that does the same work (a 4-bit GEMM is compared with dense ones). */
const TORCH_SUITE: Record<string, string> = { 'gemv-q4': 'gemv', 'gemm-q4': 'gemm', 'gemm-f32': 'gemm', 'gemm-q4-dx': 'gemm-dx' };

/** The command the lead runs on the GPU machine (carry .device and .bench), repeated in the report. */
export const DEVICE_COMMAND =
  'source .device/gpu-env.sh && node .bench/kernels.mjs --json $OUT/ours.json && python3 bench/torch_kernels.py --json $OUT/torch.json';

const args = process.argv.slice(2);
const flag = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};

const num = (v: number, digits = 3) => (Number.isFinite(v) ? v.toPrecision(digits) : '—');
const pct = (f: number | undefined) => (f === undefined || !Number.isFinite(f) ? '' : `${(100 * f).toFixed(0)}%`);

function torchLimit(r: TorchRow, t: Torch, peak: CardPeak | undefined): string {
  if (r.unit === 'GB/s') return t.copyGBs ? ` ${pct(r.rate / t.copyGBs)} of copy` : '';
  if (!peak) return '';
  const bf16 = /bf16|int4/.test(r.variant);
  return ` ${pct(r.rate / (bf16 ? peak.bf16Tflops : peak.fp32Tflops))} of ${bf16 ? 'bf16' : 'fp32'} peak`;
}

function suiteTable(suite: string, rows: Row[], torch: Torch | undefined, peak: CardPeak | undefined): string[] {
  const tsuite = TORCH_SUITE[suite] ?? suite;
  const trows = torch?.rows.filter((r) => r.suite === tsuite) ?? [];
  const variants = [...new Set(trows.map((r) => r.variant))];
  const head = ['shape', 'ours GPU ms', 'ours in-stream ms', 'ours wall ms', 'ours rate', 'of limit', 'setting', ...variants.flatMap((v) => [`PyTorch ${v}: ms (rate)`, `× vs ${v}`])];
  const lines = [`### ${suite}: ${rows[0].kernel}`, '', `| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
  for (const r of rows) {
    // A suite of several kernels (memory: the read at full size, a small dispatch, the read of each weight's bytes) names each.
    const mixed = new Set(rows.map((x) => x.kernel)).size > 1;
    const cells = [mixed ? `${r.kernel}: ${r.shape}` : r.shape, num(r.ms), r.passMs === undefined ? '—' : num(r.passMs), num(r.wallMs), `${num(r.rate)} ${r.unit}`, r.ofLimit === undefined ? '' : `${pct(r.ofLimit)} of ${r.limit}`, r.setting ?? ''];
    for (const v of variants) {
      const t = trows.find((x) => x.variant === v && x.shape === r.shape);
      // Speed ratio on what a caller waits for: PyTorch's stream time over our wall time per call.
      cells.push(t ? `${num(t.ms)} (${num(t.rate)} ${t.unit}${torchLimit(t, torch!, peak)})` : '—', t ? `${num(t.ms / r.wallMs, 2)}×` : '—');
    }
    lines.push(`| ${cells.join(' | ')} |`);
  }
  const notes = [...new Set(rows.map((r) => r.note).filter((n) => n))];
  if (notes.length) lines.push('', `Ours: ${notes.join('; ')}.`);
  return [...lines, ''];
}

function sweepTable(name: string, entries: Ours['sweeps'][string], defaultSetting: RegExp | undefined): string[] {
  const shapes = [...new Set(entries.map((e) => e.shape))];
  const lines = [`| ${name} shape | best | default | worst | options tried |`, '|---|---|---|---|---|'];
  for (const s of shapes) {
    const es = entries.filter((e) => e.shape === s).sort((a, b) => a.ms - b.ms);
    const fmt = (e: (typeof es)[number] | undefined) => (e ? `${e.setting}: ${num(e.ms)} ms` : '—');
    const defaults = defaultSetting ? es.filter((e) => defaultSetting.test(e.setting)).map(fmt).join('; ') : '';
    lines.push(`| ${s} | ${fmt(es[0])} | ${defaults} | ${fmt(es[es.length - 1])} | ${es.length} |`);
  }
  return [...lines, ''];
}

/** Pass/fail of the floors of issue 3 and the targets of issue 8 that the kernel set measures. */
function targets(ours: Ours): string[] {
  const find = (key: string) => ours.rows.find((r) => r.key === key);
  const checks: [string, string, number, 'GB/s' | 'TFLOP/s'][] = [
    ['4-bit GEMV 6144x2048, 1 row', 'gemv-q4|M1 N6144 K2048', 1500, 'GB/s'],
    ['4-bit GEMV 12288x2048 (a layer\'s gate and up 6144x2048 in the one call of a decode step), 1 row', 'gemv-q4|M1 N12288 K2048', 1500, 'GB/s'],
    ['4-bit GEMV 151936x2048 (LM head), 1 row', 'gemv-q4|M1 N151936 K2048', 1500, 'GB/s'],
    ['4-bit GEMV 172032x2048 (28 layers\' 6144x2048 stacked), 1 row', 'gemv-q4|M1 N172032 K2048', 1500, 'GB/s'],
    ['4-bit GEMM M=1024 on 2048x6144', 'gemm-q4|M1024 N2048 K6144', 10, 'TFLOP/s'],
  ];
  // GEMV calls are judged in stream (what they cost in decode; the per-dispatch clock adds a pass
  // per call), beside the read kernel on the same bytes: what any kernel reading them reaches.
  const lines = ['| check | measured: per-dispatch clock | in stream | read kernel on the same bytes, in stream | issue 3 floor | issue 8 target |', '|---|---|---|---|---|---|'];
  for (const [what, key, floor, unit] of checks) {
    const r = find(key);
    const stream = r?.passMs !== undefined ? r.work / r.passMs / (unit === 'GB/s' ? 1e6 : 1e9) : undefined;
    const nk = /N(\d+) K(\d+)/.exec(key);
    const read = nk ? ours.rows.find((x) => x.suite === 'memory' && x.shape.startsWith(`${nk[1]}x${nk[2]} (`)) : undefined;
    const readRate = read?.passMs !== undefined ? read.work / read.passMs / 1e6 : undefined;
    const judged = stream ?? r?.rate;
    const target = unit === 'GB/s' ? 2500 : 25;
    const mark = (v: number) => (judged !== undefined ? `${v} ${unit} ${judged >= v ? '✅' : '❌'}` : `${v} ${unit}`);
    const readCell = readRate === undefined ? '—' : `${num(readRate)} GB/s${stream ? ` (ours ${pct(stream / readRate)} of it)` : ''}`;
    lines.push(`| ${what} | ${r ? `${num(r.rate)} ${unit}` : 'not measured'} | ${stream === undefined ? '—' : `${num(stream)} ${unit}`} | ${unit === 'GB/s' ? readCell : ''} | ${mark(floor)} | ${mark(target)} |`);
  }
  // GEMM on the tensor cores (subgroup matrices): the best shape of each int8 kernel.
  for (const [what, suite] of [['4-bit GEMM on int8 tensor cores (exact), best shape', 'gemm-q4-mma'], ['4-bit GEMM on int8 tensor cores, K-blocked (weights re-rounded to int8), best shape', 'gemm-q4-mma-kb'], ['the same with one step per row of x and column of W over all of K (products \'int8-row\'), best shape', 'gemm-q4-mma-kbr'], ['the same with x in one int8 limb (products \'int8-1limb\'), best shape', 'gemm-q4-mma-kb1']]) {
    const rows = ours.rows.filter((r) => r.suite === suite);
    if (!rows.length) continue;
    const best = rows.reduce((x, y) => (y.rate > x.rate ? y : x));
    lines.push(`| ${what} (${best.shape}) | ${num(best.rate)} TFLOP/s | ${best.passMs === undefined ? '—' : `${num(best.work / best.passMs / 1e9)} TFLOP/s`} |  | — | 100 TFLOP/s ${best.rate >= 100 ? '✅' : '❌'} |`);
  }
  // What one call of a small weight can reach on this stack at all: the fixed cost of a dispatch
  // and the plain read of the 6144x2048 weight's bytes, both in stream.
  const tiny = ours.rows.find((x) => x.suite === 'memory' && x.kernel.startsWith('one small dispatch'));
  const read6k = ours.rows.find((x) => x.suite === 'memory' && x.shape.startsWith('6144x2048 ('));
  if (tiny?.passMs !== undefined && read6k?.passMs !== undefined) {
    lines.push(
      '',
      `GEMV calls are judged in stream: per call, with Dawn's barriers, without the pass per dispatch of the per-kernel clock. On this stack a dispatch that does almost nothing costs ${num(1000 * tiny.passMs)} µs in stream, ` +
        `and the plain read kernel (its best threads-per-workgroup setting) takes ${num(1000 * read6k.passMs)} µs to read the ${num(read6k.work / 2 ** 20)} MiB of a 6144x2048 4-bit weight once (cold L2): ` +
        `${num(read6k.work / read6k.passMs / 1e6)} GB/s. A single call that reads that weight cannot reach 1500 GB/s here, whatever it computes; the large weights show the GEMV's own rate. ` +
        "Nor can calls overlap to hide that cost: Dawn's Vulkan backend puts a barrier before every dispatch that writes a buffer written before (the write-after-write case of its buffer usage tracking, src/dawn/native/vulkan/BufferVk.cpp), from the compute stage to the compute stage, which waits for every earlier dispatch; in a decode step each output is rewritten every token. " +
        'The decode reads a layer\'s gate and up weights in one call (the 12288x2048 row), and q, k and v in another. ' +
        'Each measured pass holds at least 8 calls (the cold copies cycled), so that its own start and end are shared.',
    );
  }
  if (ours.rows.some((r) => r.suite === 'gemv-q4' && r.shape.startsWith('M1 ') && r.setting?.includes('int8'))) {
    lines.push(
      '',
      'One row of x with an int8 setting is x in two int8 limbs, x ≈ s·(hi + lo/254) per group of 32 (within 1.5e-5 of the group\'s largest |x|), ' +
        "quantized by a dispatch of its own (quantize_x2) whose time is in the call's; decode of one sequence takes it on the LM head.",
    );
  }
  return [...lines, ''];
}

function render(ours: Ours, torch: Torch | undefined): string {
  const peak = cardPeak(`${ours.adapter.name} ${ours.adapter.description}`);
  const out: string[] = ['# Kernel benchmarks', ''];
  if (ours.quick) {
    out.push(
      `> **Not the GPU machine's figures.** This run used the \`--quick\` shapes (every dimension shrunk) on ${ours.adapter.name}, a software`,
      '> Vulkan driver, to check that the benchmark runs end to end. The real figures come from the command below on the GPU machine.',
      '',
    );
  }
  out.push(
    '## How these were measured',
    '',
    `- GPU: **${ours.adapter.name}**${ours.adapter.description ? ` (${ours.adapter.description})` : ''}${torch ? `; PyTorch saw **${torch.device}** (torch ${torch.torch}, CUDA ${torch.cuda})` : '; no PyTorch run in this report'}.`,
    `- Date: ${ours.date}${torch ? ` (PyTorch ${torch.date})` : ''}. Features: ${ours.features.join(', ')}.`,
    `- Ours: \`${ours.command}\` (${ours.seconds.toFixed(0)} s)${torch ? `; PyTorch: \`${torch.command}\` (${torch.seconds.toFixed(0)} s)` : ''}.`,
    ...(ours.updates ?? []).map(
      (u) => `- Suites ${u.suites.join(', ')} from a later run: \`${u.command}\` (${u.date}, ${u.seconds.toFixed(0)} s; read bandwidth in that run ${num(u.readGBs, 4)} GB/s, which their "of read" column divides by).`,
    ),
    `- On the GPU machine, from the repository root with carry \`[".device", ".bench"]\` after \`npm run bench:build\`:`,
    `  \`${DEVICE_COMMAND}\`; then \`npx vite-node bench/report.ts -- --ours ours.json --torch torch.json\`.`,
    '- Shapes: bench/shapes.json (Qwen3-VL-2B: hidden 2048, intermediate 6144, 16 query / 8 kv heads of 128, 28 layers, vocabulary 151,936). Weights are N x K = [out, in]; M is rows of x.',
    "- **ours GPU ms**: median over repetitions of the summed timestamp-query time of the op's dispatches (each dispatch in its own pass; gaps not counted). " +
      "**ours in-stream ms**: timestamps around whole passes holding the op's calls back to back as the engine records them (Dawn's barriers between dependent dispatches, no pass per dispatch, the CPU's encoding excluded), per call: what a kernel costs inside a decode step. " +
      '**ours wall ms**: CPU clock over one submit of back-to-back repetitions (one pass, Dawn barriers), per call. ' +
      "**PyTorch ms**: CUDA events around the op on one stream, median. **× vs**: PyTorch ms / ours wall ms (above 1: ours is faster).",
    "- Memory-bound ops (GEMV, decode attention) cycle through enough weight copies / layers' caches (256 MiB) that L2 does not hold them, on both sides.",
    "- Rates: GB/s counts each side's own bytes (ours: 4-bit codes + f16 scales + x + y; PyTorch's bf16 weight is 4x larger; int4 tinygemm: codes + bf16 scale/zero pairs). " +
      'TFLOP/s counts 2·M·N·K per product; causal attention 2·T²·D·Hq forward and 2.5x that backward; log-prob 2·T·V·H forward and twice that backward (logits recomputed, then dX). ' +
      'Elementwise ops count the f32 bytes read and written once; AdamW 32 bytes per parameter (grad-norm read, then p, g, m, v read and p, m, v written).',
    '',
    '## Limits',
    '',
    `- Read bandwidth measured in the same run (shaders/bandwidth.wgsl, a vec4 read kernel): **${num(ours.readGBs, 4)} GB/s**; the "of read" column divides by it.`,
  );
  if (torch?.copyGBs) out.push(`- PyTorch's copy bandwidth (x.clone(), read + write counted) in its run: **${num(torch.copyGBs, 4)} GB/s**.`);
  if (peak) {
    out.push(
      `- Datasheet peaks of the ${peak.card} (NVIDIA, dense, no sparsity): fp32 ${peak.fp32Tflops} TFLOP/s (our kernels run on these units), ` +
        `bf16 tensor cores ${peak.bf16Tflops} TFLOP/s, int8 tensor cores ${peak.int8Tops} TOPS, HBM ${peak.hbmGBs} GB/s. "fp32 peak" columns divide by the fp32 figure; the int8 tensor-core GEMMs' rows by the int8 figure, counting 2·M·N·K operations (each of x's two int8 limbs takes its own MMA, so the tensor cores do twice that).`,
    );
  } else out.push('- No datasheet peak is known for this adapter: TFLOP/s rows have no fraction of peak.');
  if (torch) out.push(`- PyTorch fp32 products ran with TF32 ${torch.tf32 ? 'ON (check!)' : 'off'}.`);
  out.push('', '## Floors and targets', '', ...targets(ours));
  out.push(`Every kernel at every shape, beside PyTorch (the rows behind the table above), is in \`${TABLES_PATH}\`; the in-stream time of every option tried for each shape (the sweeps behind its "setting" column) in \`${SWEEPS_PATH}\`.`, '');
  if (torch?.errors.length) {
    out.push('## PyTorch cases that failed', '', ...torch.errors.map((e) => `- ${e.case}: \`${e.error.replace(/\s+/g, ' ').slice(0, 300)}\``), '');
  }
  return out.join('\n');
}

/** Every suite's table, a file of its own beside BENCHMARKS.md (the same run). */
function renderTables(ours: Ours, torch: Torch | undefined): string {
  const peak = cardPeak(`${ours.adapter.name} ${ours.adapter.description}`);
  const out = ['# Kernel benchmark tables', '', 'Written by `bench/report.ts` with BENCHMARKS.md\'s kernel section (the same run; its "How these were measured" and "Limits" apply).', ''];
  for (const s of [...new Set(ours.rows.map((r) => r.suite))]) out.push(...suiteTable(s, ours.rows.filter((r) => r.suite === s), torch, peak));
  return out.join('\n');
}

/** The option sweeps, a file of their own: many rows, read only when a setting is questioned. */
function renderSweeps(ours: Ours): string {
  const out = ['# Option sweeps of the kernel benchmarks', '', 'Written by `bench/report.ts` with BENCHMARKS.md\'s kernel tables (the same run). In-stream ms (where the device has timestamps) of every option tried, fewer repetitions than those tables; the tables report the best, measured again.', ''];
  const defaults: Record<string, RegExp> = { gemv: /^(TPR8 TG16|TPR64 TG4|TPR32 TG8)( no subgroups)?$/, gemm: /^GTM8 GTN4 GBK16$/ };
  for (const [name, entries] of Object.entries(ours.sweeps)) out.push(...sweepTable(name, entries, defaults[name]));
  return out.join('\n');
}

function main(): void {
  const oursPath = flag('ours');
  if (!oursPath) throw new Error('usage: report.ts --ours ours.json [--torch torch.json] [--out BENCHMARKS.md]');
  const ours = JSON.parse(readFileSync(oursPath, 'utf8')) as Ours;
  const updatePath = flag('update');
  if (updatePath) {
    const part = JSON.parse(readFileSync(updatePath, 'utf8')) as Ours;
    const suites = new Set(part.rows.filter((r) => r.suite !== 'memory').map((r) => r.suite));
    // Memory rows other than the full-size read (the small dispatch, the reads of each weight's
    // bytes) come with the update: they are the same run's ceilings.
    const extra = (r: Row) => r.suite === 'memory' && r.kernel !== 'read (vec4 f32)';
    ours.rows = [...ours.rows.filter((r) => !suites.has(r.suite) && !extra(r)), ...part.rows.filter((r) => suites.has(r.suite) || extra(r))];
    Object.assign(ours.sweeps, part.sweeps);
    ours.updates = [...(ours.updates ?? []), { command: part.command, date: part.date, seconds: part.seconds, readGBs: part.readGBs, suites: [...suites] }];
  }
  const torchPath = flag('torch');
  const torch = torchPath ? (JSON.parse(readFileSync(torchPath, 'utf8')) as Torch) : undefined;
  if (torch && torch.quick !== ours.quick) throw new Error('one run used --quick shapes and the other did not');
  const outPath = flag('out') ?? 'BENCHMARKS.md';
  // The kernel part is all before the model section (bench/modelReport.ts), which is kept with
  // whatever follows it (notes written by hand).
  const doc = existsSync(outPath) ? readFileSync(outPath, 'utf8') : '';
  const model = doc.indexOf(MODEL_BEGIN);
  writeFileSync(outPath, model >= 0 ? `${render(ours, torch).trimEnd()}\n\n${doc.slice(model)}` : render(ours, torch));
  writeFileSync(TABLES_PATH, `${renderTables(ours, torch).trimEnd()}\n`);
  writeFileSync(SWEEPS_PATH, `${renderSweeps(ours).trimEnd()}\n`);
  console.log(`wrote ${outPath}, ${TABLES_PATH} and ${SWEEPS_PATH}`);
}

main();
