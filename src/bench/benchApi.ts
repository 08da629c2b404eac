// The engine worker's benchmark methods (EngineApi.runBench / cancelBench): the suites of
// src/bench/suites.ts on a GPU device of the benchmark's own, so that a cancelled run's buffers
// and the full preset's gigabyte of inputs never touch the model's device, and onnxruntime-web's
// MatMulNBits on the same device as the peer of the 4-bit rows.
import type { Gpu } from '../gpu';
import type { BenchEvent, BenchRequest, BenchResult, EngineApi } from '../worker/api';
import { ORT_PEER_NAME, OrtPeer } from './ortPeer';
import { runSuites, SUITES, type RunResult } from './suites';

export interface BenchApiDeps {
  /** The benchmark's device, created once (without timestamp-query: Chrome rounds it to 100 µs). */
  gpu(): Promise<Gpu>;
  /** Where onnxruntime-web's WebGPU wasm is served. */
  ortWasmUrl: string;
}

export function createBenchApi(deps: BenchApiDeps): Pick<EngineApi, 'runBench' | 'cancelBench'> {
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
