// The benchmark worker's API (src/bench/bench.worker.ts, through comlink): the suites of
// src/bench/suites.ts on a GPU device of the benchmark's own, and onnxruntime-web's MatMulNBits
// on the same device as the peer of the 4-bit rows. The benchmark page (bench.html) is its own
// Vite entry with its own worker: none of this is in the app's bundle or its engine worker.
import type { AdapterSummary } from '../gpu/device';
import type { Gpu } from '../gpu';
import type { Row } from './harness';
import { ORT_PEER_NAME, OrtPeer } from './ortPeer';
import type { Preset } from './shapes';
import { runSuites, SUITES, type RunResult, type Suite, type Sweeps } from './suites';

export interface BenchRequest {
  preset: Preset;
  suites: Suite[];
  /** Also run onnxruntime-web's MatMulNBits (WebGPU) on the 4-bit GEMV and GEMM rows. */
  peer: boolean;
  /** Most repetitions per measurement (default: 3 quick, 30 full). */
  maxReps?: number;
  /** Try every kernel option and report the best (default); false: each op's first option only. */
  sweep?: boolean;
  /** Only the first weight shape of the GEMV and GEMM suites. */
  oneWeight?: boolean;
}

export type BenchEvent =
  /** First, once the benchmark's device is up. */
  | { kind: 'device'; adapter: AdapterSummary; features: string[] }
  | { kind: 'row'; row: Row }
  | { kind: 'suite'; suite: string; seconds: number }
  /** What runs now, for the progress line. */
  | { kind: 'status'; message: string };

export interface BenchResult {
  adapter: AdapterSummary;
  /** The features the benchmark's device has (timestamp-query left off: the page times by wall clock). */
  features: string[];
  preset: Preset;
  suites: Suite[];
  date: string;
  seconds: number;
  readGBs: number;
  rows: Row[];
  sweeps: Sweeps;
  /** The peer's name and version, or why it could not start. */
  peer?: { name: string; version: string } | { error: string };
  /** True when cancelBench stopped the run: rows holds what was measured before. */
  cancelled: boolean;
}

export interface BenchApi {
  /** Run kernel benchmark suites on the benchmark's GPU device; rows arrive through `onEvent` as measured. */
  runBench(request: BenchRequest, onEvent?: (e: BenchEvent) => void): Promise<BenchResult>;
  /** Stop the benchmark in progress at its next measurement: runBench resolves with cancelled: true. */
  cancelBench(): Promise<void>;
}

export interface BenchApiDeps {
  /** The benchmark's device, created once (without timestamp-query: Chrome rounds it to 100 µs). */
  gpu(): Promise<Gpu>;
  /** Where onnxruntime-web's WebGPU wasm is served. */
  ortWasmUrl: string;
}

export function createBenchApi(deps: BenchApiDeps): BenchApi {
  let running: AbortController | null = null;
  let peer: Promise<OrtPeer> | null = null;

  return {
    async runBench(req: BenchRequest, onEvent?: (e: BenchEvent) => void): Promise<BenchResult> {
      if (running) throw new Error('a benchmark is already running');
      const abort = new AbortController();
      running = abort;
      const emit = (e: BenchEvent) => onEvent?.(e);
      const t0 = performance.now();
      try {
        const gpu = await deps.gpu();
        emit({ kind: 'device', adapter: gpu.adapter, features: [...gpu.features] });
        let ort: OrtPeer | null = null;
        let peerInfo: BenchResult['peer'];
        if (req.peer && req.suites.some((s) => s === 'gemv' || s === 'gemm')) {
          emit({ kind: 'status', message: 'loading onnxruntime-web' });
          peer ??= OrtPeer.create(gpu, deps.ortWasmUrl);
          try {
            ort = await peer;
            peerInfo = { name: ORT_PEER_NAME, version: ort.version };
          } catch (e) {
            peer = null;
            peerInfo = { error: `onnxruntime-web could not load: ${e instanceof Error ? e.message : String(e)}` };
          }
        }
        const suites = SUITES.filter((s) => req.suites.includes(s));
        let soFar: RunResult = { readGBs: NaN, rows: [], sweeps: {} };
        let cancelled = false;
        try {
          emit({ kind: 'status', message: 'read bandwidth' });
          soFar = await runSuites(gpu, {
            preset: req.preset,
            suites,
            maxReps: req.maxReps,
            sweep: req.sweep,
            oneWeight: req.oneWeight,
            signal: abort.signal,
            onRow: (row) => emit({ kind: 'row', row }),
            onSuiteDone: (suite, seconds, partial) => {
              soFar = partial;
              emit({ kind: 'suite', suite, seconds });
              const next = suites[suites.indexOf(suite as (typeof suites)[number]) + 1];
              if (next) emit({ kind: 'status', message: next });
            },
            onQ4: ort
              ? async (c) => {
                  emit({ kind: 'status', message: `${c.row.suite} ${c.row.shape}: onnxruntime-web` });
                  try {
                    c.row.peer = await ort.run(c);
                  } catch (e) {
                    const error = e instanceof Error ? e.message : String(e);
                    c.row.peer = { name: ORT_PEER_NAME, ms: NaN, clock: 'wall', rate: NaN, maxRelDiff: NaN, error };
                  }
                }
              : undefined,
          });
        } catch (e) {
          if (!abort.signal.aborted) throw e;
          cancelled = true;
          gpu.pool.trim();
        }
        return {
          adapter: gpu.adapter,
          features: [...gpu.features],
          preset: req.preset,
          suites,
          date: new Date().toISOString(),
          seconds: (performance.now() - t0) / 1000,
          readGBs: soFar.readGBs,
          rows: soFar.rows,
          sweeps: soFar.sweeps,
          peer: peerInfo,
          cancelled,
        };
      } finally {
        running = null;
      }
    },
    async cancelBench() {
      running?.abort(new Error('benchmark cancelled'));
    },
  };
}
