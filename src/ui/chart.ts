// A live line chart over uPlot for the training dashboard: several named series over one x axis
// (the step, with whole-number ticks), points appended as metrics arrive, redrawn at most once a
// frame. Each series' latest value is always visible in the legend (no hovering needed); noisy
// series can be drawn smoothed (an exponential moving average over the faint raw line); a chart
// with no values says why. The figure has an accessible name (its title) and the plot a text
// alternative with the latest value of each series.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { h } from './dom';
import { formatNumber } from './format';
import { uniqueId } from './form';

export interface ChartSeries {
  name: string;
  /** CSS colour (#rrggbb); by default one of a palette that stays distinct in grey scale too. */
  color?: string;
}

export interface ChartOptions {
  title: string;
  series: readonly ChartSeries[];
  /** Name of the x axis (default 'step'). */
  xLabel?: string;
  height?: number;
  /** Draw each series as its moving average over its faint raw values (noisy metrics). */
  smooth?: boolean;
  /** Shown while no series has a value (default: values come after the first step). */
  emptyNote?: string;
}

const PALETTE = ['#1f5fbf', '#c2410c', '#15803d', '#7e22ce', '#a16207', '#0e7490', '#be123c', '#4b5563'];
const DEFAULT_HEIGHT = 160;
const FALLBACK_WIDTH = 400;
/** Weight of the previous average in the smoothed line (TensorBoard's slider at 0.6). */
export const SMOOTHING = 0.6;
/** Tick spacings of the step axis: whole numbers only. */
const STEP_INCREMENTS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000];

/** The exponential moving average of a column, skipping gaps (a gap stays a gap). */
export function smoothed(column: readonly (number | null)[], weight = SMOOTHING): (number | null)[] {
  let avg: number | null = null;
  return column.map((v) => {
    if (v === null) return null;
    avg = avg === null ? v : weight * avg + (1 - weight) * v;
    return avg;
  });
}

export class LiveChart {
  readonly element: HTMLElement;
  private readonly names: string[];
  private readonly xs: number[] = [];
  /** One column per series, aligned with xs; null where a series had no value at that x. */
  private readonly columns: (number | null)[][];
  private readonly plotArea: HTMLElement;
  private readonly legendValues: HTMLElement[];
  private readonly empty: HTMLElement;
  private readonly plot: uPlot;
  private readonly resize: ResizeObserver;
  private frame = 0;
  private drawn = 0;

  constructor(private readonly options: ChartOptions) {
    this.names = options.series.map((s) => s.name);
    if (this.names.length === 0) throw new Error(`chart '${options.title}': no series`);
    if (new Set(this.names).size !== this.names.length) throw new Error(`chart '${options.title}': two series share a name`);
    this.columns = this.names.map(() => []);
    const colors = options.series.map((s, i) => s.color ?? PALETTE[i % PALETTE.length]);

    const captionId = uniqueId('chart');
    this.plotArea = h('div', { role: 'img', class: 'chart-plot' });
    this.legendValues = this.names.map(() => h('span', { class: 'chart-value' }, '—'));
    const legend = h(
      'ul',
      { class: 'chart-legend', 'aria-hidden': 'true' },
      ...this.names.map((name, i) => {
        // Through the CSSOM, not a style attribute: a Content-Security-Policy without 'unsafe-inline' styles allows it.
        const swatch = h('span', { class: 'swatch' });
        swatch.style.background = colors[i];
        return h('li', {}, swatch, h('span', { class: 'chart-series' }, name), ' ', this.legendValues[i]);
      }),
    );
    this.empty = h('p', { class: 'chart-empty muted' }, options.emptyNote ?? 'No values yet: they come after the first step.');
    this.element = h('figure', { class: 'chart', 'aria-labelledby': captionId }, h('figcaption', { id: captionId }, options.title), legend, h('div', { class: 'chart-body' }, this.plotArea, this.empty));
    const xLabel = options.xLabel ?? 'step';
    const raw = options.smooth ? 1 : 1.5;
    const series: uPlot.Series[] = [{ label: xLabel }];
    options.series.forEach((s, i) => {
      series.push({ label: s.name, stroke: options.smooth ? `${colors[i]}55` : colors[i], width: raw, spanGaps: true, points: { show: !options.smooth } });
      if (options.smooth) series.push({ label: `${s.name} (smoothed)`, stroke: colors[i], width: 2, spanGaps: true });
    });
    this.plot = new uPlot(
      {
        width: FALLBACK_WIDTH,
        height: options.height ?? DEFAULT_HEIGHT,
        scales: {
          x: {
            time: false,
            // One step still gets an axis of whole numbers around it.
            range: (_u, min, max) => (min === max ? [Math.max(0, min - 1), max + 1] : [min, max]),
          },
          // A flat series sits mid-chart on a small range around its value (uPlot's default spans 0 to 100).
          y: { range: (_u, min, max) => (min === max ? [min - (Math.abs(min) || 1) / 2, max + (Math.abs(max) || 1) / 2] : uPlot.rangeNum(min, max, 0.1, true)) },
        },
        // y ticks to 3 significant digits: uPlot's own format shows a range like 0 to 0.0003 as "0" twice.
        axes: [{ label: xLabel, incrs: STEP_INCREMENTS, values: (_u, splits) => splits.map((v) => (Number.isInteger(v) ? String(v) : '')) }, { values: (_u, splits) => splits.map((v) => (v === null ? '' : String(Number(v.toPrecision(3))))) }],
        legend: { show: false },
        cursor: { drag: { x: false, y: false } },
        series,
      },
      this.alignedData(),
      this.plotArea,
    );
    this.resize = new ResizeObserver(() => {
      const width = this.plotArea.clientWidth;
      if (width > 0) this.plot.setSize({ width, height: options.height ?? DEFAULT_HEIGHT });
    });
    this.resize.observe(this.plotArea);
    this.describe();
  }

  /**
   * Adds one point at `x` (which must exceed the previous x) with a value for any of the series;
   * series left out get a gap there. Unknown series names throw: a typo should not vanish silently.
   */
  append(x: number, values: Readonly<Record<string, number | null>>): void {
    if (!Number.isFinite(x)) throw new Error(`chart '${this.options.title}': x is ${x}`);
    const last = this.xs[this.xs.length - 1];
    if (last !== undefined && x <= last) throw new Error(`chart '${this.options.title}': x ${x} does not follow ${last}`);
    for (const name of Object.keys(values)) {
      if (!this.names.includes(name)) throw new Error(`chart '${this.options.title}': no series '${name}' (it has ${this.names.join(', ')})`);
    }
    this.xs.push(x);
    this.names.forEach((name, i) => {
      const v = values[name];
      this.columns[i].push(v === undefined || v === null || !Number.isFinite(v) ? null : v);
    });
    this.scheduleRedraw();
  }

  /** The series' values so far, one per x (null for gaps). */
  values(name: string): readonly (number | null)[] {
    const i = this.names.indexOf(name);
    if (i < 0) throw new Error(`chart '${this.options.title}': no series '${name}'`);
    return this.columns[i];
  }

  /** Points (x values) in the last redraw; catches up with the appends at the next frame. */
  get drawnPoints(): number {
    return this.drawn;
  }

  dispose(): void {
    cancelAnimationFrame(this.frame);
    this.resize.disconnect();
    this.plot.destroy();
  }

  private alignedData(): uPlot.AlignedData {
    const cols = this.options.smooth ? this.columns.flatMap((c) => [c, smoothed(c)]) : this.columns;
    return [this.xs, ...cols];
  }

  private scheduleRedraw(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.plot.setData(this.alignedData());
      this.drawn = this.xs.length;
      this.describe();
    });
  }

  /** The latest value of every series, in the legend and the text alternative. */
  private describe(): void {
    const xLabel = this.options.xLabel ?? 'step';
    const latest = this.names.map((name, i) => {
      const col = this.columns[i];
      for (let k = col.length - 1; k >= 0; k--) if (col[k] !== null) return { name, value: col[k] as number, x: this.xs[k] };
      return { name, value: null, x: null };
    });
    latest.forEach((l, i) => (this.legendValues[i].textContent = l.value === null ? '—' : formatNumber(l.value)));
    this.empty.hidden = latest.some((l) => l.value !== null);
    this.plotArea.setAttribute('aria-label', `${this.options.title}: ${latest.map((l) => (l.value === null ? `${l.name} no data` : `${l.name} ${formatNumber(l.value)} at ${xLabel} ${l.x}`)).join('; ')}`);
  }
}
