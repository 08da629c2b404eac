// The benchmark page (bench.html): the Benchmark panel and its worker, apart from the app.
import * as Comlink from 'comlink';
import type { BenchApi } from './benchApi';
import { benchPanel } from './benchPanel';

const worker = new Worker(new URL('./bench.worker.ts', import.meta.url), { type: 'module', name: 'bench' });
document.getElementById('panel-bench')!.append(benchPanel(Comlink.wrap<BenchApi>(worker)));
