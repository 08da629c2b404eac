// What the Data panel shows of the current data set: counts (usable, broken by reason, filtered,
// train/held-out), every broken row with its file, row and reason, and a paged table of rows with
// their images (rows kept encoded are decoded for the page shown, and only then).
import { brokenCounts, browserDecoder, decodeRowImages, type DatasetRow } from '../../data';
import { h } from '../dom';
import { datasetStore, type LoadedDataset } from '../datasetStore';
import { select } from '../form';
import { imageCanvas } from '../imageCanvas';

const PAGE_SIZE = 8;
/** Broken rows listed one by one up to this many; the counts by reason always cover all of them. */
const MAX_LISTED = 200;

type View = 'all' | 'train' | 'heldOut';

function summary(d: LoadedDataset): HTMLElement {
  const { result, split } = d;
  const counts = Object.entries(brokenCounts(result));
  return h(
    'dl',
    { class: 'kv', 'data-testid': 'data-summary' },
    h('dt', {}, 'Source'),
    h('dd', {}, d.source),
    h('dt', {}, 'Records read'),
    h('dd', {}, result.total),
    h('dt', {}, 'Usable rows'),
    h('dd', { 'data-testid': 'count-rows' }, result.rows.length),
    h('dt', {}, 'Broken rows'),
    h('dd', { 'data-testid': 'count-broken' }, result.broken.length, counts.length ? ` (${counts.map(([r, n]) => `${r}: ${n}`).join(', ')})` : ''),
    h('dt', {}, 'Filtered out'),
    h('dd', { 'data-testid': 'count-filtered' }, result.filtered.length, result.filtered.length ? ' (non-numeric answer)' : ''),
    h('dt', {}, 'Train / held-out'),
    h('dd', { 'data-testid': 'count-split' }, `${split.train.length} / ${split.heldOut.length}`),
  );
}

function brokenList(d: LoadedDataset): HTMLElement | null {
  const broken = d.result.broken;
  if (broken.length === 0) return null;
  const shown = broken.slice(0, MAX_LISTED);
  return h(
    'details',
    { 'data-testid': 'broken-rows' },
    h('summary', {}, `${broken.length} broken row(s), with reasons`),
    h(
      'table',
      { class: 'broken' },
      h('thead', {}, h('tr', {}, ...['Row', 'Id', 'Reason', 'Detail'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, ...shown.map((b) => h('tr', {}, h('td', {}, `${d.source} row ${b.index}`), h('td', {}, b.id ?? ''), h('td', {}, b.reason), h('td', {}, b.detail)))),
    ),
    broken.length > shown.length ? h('p', { class: 'muted' }, `${broken.length - shown.length} more not listed; the counts above include them.`) : null,
  );
}

/** The row's images on canvases; encoded ones are decoded now (a failure is shown in their place). */
function imagesCell(row: DatasetRow): HTMLElement {
  const canvases = (images: DatasetRow['images']) => images.map((img, i) => imageCanvas(img, `image ${i + 1} of row ${row.id}, ${img.width}×${img.height}`));
  const cell = h('td', { class: 'images' }, ...canvases(row.images));
  if (row.encoded?.length) {
    cell.append(h('span', { class: 'muted' }, 'decoding…'));
    decodeRowImages(row, browserDecoder).then(
      (decoded) => cell.replaceChildren(...canvases(decoded.images)),
      (e: unknown) => cell.replaceChildren(h('span', { class: 'error' }, e instanceof Error ? e.message : String(e))),
    );
  }
  return cell;
}

function rowElement(row: DatasetRow, part: 'train' | 'held-out'): HTMLTableRowElement {
  return h(
    'tr',
    { 'data-row-id': row.id },
    h('th', { scope: 'row' }, row.id),
    h('td', {}, part),
    imagesCell(row),
    h('td', { class: 'question' }, row.question),
    h('td', {}, row.answer, row.answer_type ? h('small', { class: 'muted block' }, row.answer_type) : null),
  );
}

export function dataPreview(): HTMLElement {
  const info = h('div', {});
  const view = select<View>(
    [
      { value: 'all', label: 'all rows' },
      { value: 'train', label: 'training rows' },
      { value: 'heldOut', label: 'held-out rows' },
    ],
    'all',
  );
  view.setAttribute('aria-label', 'Rows to preview');
  const prev = h('button', { type: 'button', 'aria-label': 'Previous page of rows' }, '‹ Previous');
  const next = h('button', { type: 'button', 'aria-label': 'Next page of rows' }, 'Next ›');
  const range = h('span', { 'data-testid': 'preview-range', 'aria-live': 'polite' });
  const tbody = h('tbody', {});
  // The controls stay in place across renders, so they keep keyboard focus.
  const browse = h(
    'div',
    { hidden: true },
    h('div', { class: 'row' }, view, prev, range, next),
    h(
      'table',
      { class: 'preview', 'aria-label': 'Rows of the data set', 'data-testid': 'preview-table' },
      h('thead', {}, h('tr', {}, ...['Id', 'Split', 'Images', 'Question', 'Answer'].map((c) => h('th', { scope: 'col' }, c)))),
      tbody,
    ),
  );
  let page = 0;

  const render = () => {
    const d = datasetStore.current;
    browse.hidden = d === null;
    if (!d) {
      info.replaceChildren(h('p', { class: 'muted' }, 'No data set loaded yet.'));
      return;
    }
    info.replaceChildren(summary(d), brokenList(d) ?? '');
    const heldOut = new Set(d.split.heldOut.map((r) => r.id));
    const which = view.value as View;
    const rows = which === 'all' ? d.result.rows : d.split[which];
    const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
    page = Math.min(page, pages - 1);
    const first = page * PAGE_SIZE;
    const shown = rows.slice(first, first + PAGE_SIZE);
    prev.disabled = page === 0;
    next.disabled = page >= pages - 1;
    range.textContent = rows.length ? `rows ${first + 1}–${first + shown.length} of ${rows.length}` : 'no rows';
    tbody.replaceChildren(...shown.map((r) => rowElement(r, heldOut.has(r.id) ? 'held-out' : 'train')));
  };

  const turn = (to: number) => {
    page = to;
    render();
  };
  prev.addEventListener('click', () => turn(page - 1));
  next.addEventListener('click', () => turn(page + 1));
  view.addEventListener('change', () => turn(0));
  datasetStore.subscribe(() => {
    page = 0;
    render();
  });
  return h('div', {}, info, browse);
}
