// The Benchmark page's table, as cells (the page's DOM table) and as Markdown and JSON (its copy
// buttons): per row the shape, our per-call time and rate, the fraction of the read bandwidth of
// the same run, and the peer's (onnxruntime-web MatMulNBits) time, rate, speed ratio and
// difference from our output.
import type { BenchResult } from './benchApi';
import { fmtLimit, fmtNum, fmtRate, type Row } from './harness';

export const TABLE_HEAD = ['suite', 'shape', 'ours ms', 'ours rate', 'of limit', 'setting', 'ORT ms', 'ORT rate', 'ours × vs ORT', 'ORT max rel diff'];

/** One row's cells, in TABLE_HEAD's order. "× vs ORT" is ORT ms / ours ms: above 1, ours is faster. */
export function tableCells(r: Row): string[] {
  const p = r.peer;
  const peer = !p ? ['', '', '', ''] : p.error ? [`failed: ${p.error}`, '', '', ''] : [fmtNum(p.ms), fmtRate({ rate: p.rate, unit: r.unit }), `${fmtNum(p.ms / r.ms, 2)}×`, p.maxRelDiff.toExponential(1)];
  return [r.suite, r.shape, fmtNum(r.ms), fmtRate(r), fmtLimit(r), r.setting ?? '', ...peer];
}

const mdCell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');

export function resultMarkdown(res: BenchResult): string {
  const peer = res.peer ? ('error' in res.peer ? res.peer.error : `${res.peer.name} ${res.peer.version}`) : 'not run';
  const lines = [
    `# Kernel benchmarks in the browser${res.cancelled ? ' (cancelled: partial)' : ''}`,
    '',
    `- GPU: **${res.adapter.name}**${res.adapter.description ? ` (${res.adapter.description})` : ''}; features: ${res.features.join(', ') || 'none'}.`,
    `- Date: ${res.date}; preset ${res.preset}; suites ${res.suites.join(', ')}; ${res.seconds.toFixed(0)} s.`,
    `- Read bandwidth in this run: ${fmtNum(res.readGBs, 4)} GB/s ("of limit" of GB/s rows divides by it).`,
    '- Times are per call, by wall clock over back-to-back calls with one wait at the end (ours and the peer alike).',
    `- Peer: ${peer}.`,
    '',
    `| ${TABLE_HEAD.join(' | ')} |`,
    `|${TABLE_HEAD.map(() => '---').join('|')}|`,
    ...res.rows.map((r) => `| ${tableCells(r).map(mdCell).join(' | ')} |`),
  ];
  return lines.join('\n') + '\n';
}

export function resultJson(res: BenchResult): string {
  return JSON.stringify(res, null, 1);
}
