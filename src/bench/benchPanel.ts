// The benchmark page's panel (bench.html): the kernel suites of the Node bench (src/bench) on this browser's GPU, with
// onnxruntime-web's 4-bit MatMulNBits (WebGPU) beside our 4-bit GEMV and GEMM rows. Suites, size
// preset, Run/Cancel, progress, the table as rows arrive, the adapter and its features, and the
// result copied as Markdown or JSON.
import { proxy, type Remote } from 'comlink';
import { h } from '../ui/dom';
import { checkbox, field, select } from '../ui/form';
import type { BenchApi, BenchEvent, BenchResult } from './benchApi';
import type { Row } from './harness';
import type { Preset } from './shapes';
import { expectedRows, SUITES, type Suite } from './suites';
import { resultJson, resultMarkdown, TABLE_HEAD, tableCells } from './table';

const SUITE_LABELS: Record<Suite, string> = {
  gemv: '4-bit GEMV (decode)',
  gemm: '4-bit GEMM, its transpose, f32 GEMM',
  attention: 'Attention forward, backward, decode',
  logprob: 'Log-prob and entropy over the vocabulary',
  elementwise: 'RMSNorm, SwiGLU, RoPE',
  adamw: 'Clip + AdamW over the LoRA parameters',
};

export function benchPanel(bench: Remote<BenchApi>): HTMLElement {
  const suiteBoxes = SUITES.map((s) => {
    const input = h('input', { type: 'checkbox', 'data-suite': s });
    input.checked = s === 'gemv' || s === 'gemm';
    return input;
  });
  const preset = select<Preset>(
    [
      { value: 'quick', label: 'Quick (small shapes, for weak GPUs)' },
      { value: 'full', label: 'Full (Qwen3-VL-2B shapes; GBs of GPU memory, minutes)' },
    ],
    'quick',
  );
  const weights = select(
    [
      { value: 'all', label: 'All of the preset' },
      { value: 'one', label: 'The first only (a smoke check)' },
    ],
    'all',
  );
  const sweep = h('input', { type: 'checkbox' });
  sweep.checked = true;
  const peer = h('input', { type: 'checkbox' });
  peer.checked = true;

  const run = h('button', { type: 'button', class: 'primary' }, 'Run benchmark');
  const cancel = h('button', { type: 'button', disabled: true }, 'Cancel benchmark');
  const progress = h('progress', { max: 1, value: 0, 'aria-label': 'Benchmark progress', hidden: true });
  const progressText = h('span', { 'data-testid': 'bench-progress', 'aria-live': 'polite' });
  const error = h('p', { class: 'error', role: 'alert', 'data-testid': 'bench-error', hidden: true });
  const device = h('div', { 'data-testid': 'bench-device' });
  const peerNote = h('p', { 'data-testid': 'bench-peer' });
  const body = h('tbody', {});
  const table = h('table', { 'data-testid': 'bench-table' }, h('thead', {}, h('tr', {}, ...TABLE_HEAD.map((c) => h('th', { scope: 'col' }, c)))), body);
  const copyMd = h('button', { type: 'button', disabled: true }, 'Copy as Markdown');
  const copyJson = h('button', { type: 'button', disabled: true }, 'Copy as JSON');
  const copyNote = h('span', { 'data-testid': 'bench-copied', 'aria-live': 'polite' });
  // Where the clipboard is refused, the text is shown to copy by hand.
  const copyText = h('textarea', { rows: 8, readonly: true, hidden: true, 'aria-label': 'Benchmark result' });

  let busy = false;
  let result: BenchResult | null = null;
  const chosen = () => SUITES.filter((_, i) => suiteBoxes[i].checked);
  const sync = () => {
    run.disabled = busy || chosen().length === 0;
    cancel.disabled = !busy;
    copyMd.disabled = copyJson.disabled = busy || !result;
  };
  suiteBoxes.forEach((b) => b.addEventListener('change', sync));

  const addRow = (r: Row) => body.append(h('tr', { 'data-key': r.key, 'data-suite': r.suite }, ...tableCells(r).map((c, i) => h(i < 2 ? 'th' : 'td', i < 2 ? { scope: 'row' } : { class: 'num' }, c))));
  const showDevice = (name: string, description: string, features: string[]) =>
    device.replaceChildren(
      h('dl', { class: 'kv' }, h('dt', {}, 'Adapter'), h('dd', { 'data-testid': 'bench-adapter' }, description ? `${name} (${description})` : name), h('dt', {}, 'Features'), h('dd', { 'data-testid': 'bench-features' }, features.join(', ') || 'none')),
    );

  run.addEventListener('click', () => {
    const suites = chosen();
    if (busy || suites.length === 0) return;
    const pressedRun = document.activeElement === run;
    busy = true;
    result = null;
    error.hidden = true;
    copyNote.textContent = '';
    copyText.hidden = true;
    body.replaceChildren();
    peerNote.textContent = '';
    sync();
    if (pressedRun) cancel.focus();
    progress.hidden = false;
    const oneWeight = weights.value === 'one';
    progress.max = expectedRows(preset.value as Preset, suites, oneWeight);
    progress.value = 0;
    progressText.textContent = 'Starting the benchmark’s GPU device…';
    const onEvent = (e: BenchEvent) => {
      if (e.kind === 'device') showDevice(e.adapter.name, e.adapter.description, e.features);
      else if (e.kind === 'row') {
        addRow(e.row);
        progress.value = body.rows.length;
      } else if (e.kind === 'status') progressText.textContent = `Running: ${e.message}`;
    };
    void (async () => {
      try {
        result = await bench.runBench({ preset: preset.value as Preset, suites, peer: peer.checked, sweep: sweep.checked, oneWeight }, proxy(onEvent));
        showDevice(result.adapter.name, result.adapter.description, result.features);
        body.replaceChildren();
        result.rows.forEach(addRow);
        table.dataset.status = result.cancelled ? 'cancelled' : 'complete';
        progressText.textContent = result.cancelled ? `Cancelled after ${result.rows.length} rows.` : `Done: ${result.rows.length} rows in ${result.seconds.toFixed(1)} s.`;
        const p = result.peer;
        peerNote.textContent = !p ? 'onnxruntime-web was not run.' : 'error' in p ? p.error : `Peer: ${p.name}, onnxruntime-web ${p.version}; “ORT max rel diff” is max |ORT − ours| / max |ours| on the same input and weights.`;
        peerNote.className = p && 'error' in p ? 'error' : '';
      } catch (e) {
        error.hidden = false;
        error.textContent = e instanceof Error ? e.message : String(e);
        progressText.textContent = '';
      } finally {
        progress.hidden = true;
        const hadFocus = document.activeElement === cancel;
        busy = false;
        sync();
        if (hadFocus) run.focus();
      }
    })();
  });
  cancel.addEventListener('click', () => {
    progressText.textContent = 'Cancelling at the next measurement…';
    void bench.cancelBench();
  });

  const copy = async (text: string, what: string) => {
    copyText.value = text;
    try {
      await navigator.clipboard.writeText(text);
      copyNote.textContent = `Copied as ${what}.`;
      copyText.hidden = true;
    } catch {
      copyNote.textContent = `The clipboard is not available: the ${what} is below.`;
      copyText.hidden = false;
    }
  };
  copyMd.addEventListener('click', () => result && void copy(resultMarkdown(result), 'Markdown'));
  copyJson.addEventListener('click', () => result && void copy(resultJson(result), 'JSON'));
  sync();

  return h(
    'section',
    { class: 'panel', 'aria-labelledby': 'bench-h' },
    h('h2', { id: 'bench-h' }, 'Benchmark'),
    h(
      'p',
      { class: 'muted' },
      'The kernel benchmarks of BENCHMARKS.md on this GPU, on a device of their own. Times are per call by wall clock (Chrome rounds GPU timestamps to 100 µs); GB/s rows are a fraction of the read bandwidth measured in the same run. Beside the 4-bit rows, onnxruntime-web’s MatMulNBits (WebGPU) on the same weights and input.',
    ),
    h('fieldset', {}, h('legend', {}, 'Suites'), ...SUITES.map((s, i) => checkbox(SUITE_LABELS[s], suiteBoxes[i]))),
    h(
      'div',
      { class: 'row' },
      field('Size preset', preset),
      field('GEMV and GEMM weight shapes', weights),
      checkbox('Try every kernel option', sweep, 'The best is reported with its setting; off: each op’s first option (much faster where shaders compile slowly).'),
      checkbox('onnxruntime-web MatMulNBits beside the 4-bit rows', peer),
    ),
    h('div', { class: 'row' }, run, cancel, progress, progressText),
    error,
    device,
    peerNote,
    table,
    h('div', { class: 'row' }, copyMd, copyJson, copyNote),
    copyText,
  );
}
