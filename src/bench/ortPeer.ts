// The Benchmark page's peer: onnxruntime-web's 4-bit MatMulNBits on its WebGPU execution provider,
// on the same device, weights, input and shapes as our 4-bit GEMV/GEMM rows (src/bench/onnx.ts
// builds the model). ORT shares our GPUDevice (the EP's `device` option), so x and y stay on the
// GPU (Tensor.fromGpuBuffer on our pool's buffers) and our queue's onSubmittedWorkDone waits for
// ORT's work too.
//
// Timing (wall clock, ORT's per-kernel GPU times are not used): after two warm-up runs, batches of
// session.run calls back to back with one wait for the queue at the end, about 20 ms of work per
// batch; per call = batch time / (runs · copies), the median of three batches. That is our wall
// clock's method (one wait after back-to-back work), with ORT's per-run overhead counted in.
import type * as Ort from 'onnxruntime-web/webgpu';
import type { Gpu, Tensor } from '../gpu';
import { median, rateOf, type PeerResult } from './harness';
import { matMulNBitsModel, q4ToMatMulNBits } from './onnx';
import type { Q4Case } from './suites';

export const ORT_PEER_NAME = 'onnxruntime-web MatMulNBits (WebGPU)';

type OrtModule = typeof Ort;

export class OrtPeer {
  private constructor(
    private readonly ort: OrtModule,
    private readonly gpu: Gpu,
  ) {}

  /** Loads onnxruntime-web's WebGPU build (its wasm served at `wasmUrl`). */
  static async create(gpu: Gpu, wasmUrl: string): Promise<OrtPeer> {
    const ort = await import('onnxruntime-web/webgpu');
    ort.env.wasm.wasmPaths = { wasm: wasmUrl };
    // Threads need a cross-origin-isolated page; the CPU side only schedules kernels here.
    ort.env.wasm.numThreads = 1;
    ort.env.logLevel = 'error';
    return new OrtPeer(ort, gpu);
  }

  /** ORT's version, for the page. */
  get version(): string {
    return this.ort.env.versions.web ?? this.ort.env.versions.common;
  }

  /** Run the case's product in ORT, time it, and compare its output with ours. */
  async run(c: Q4Case): Promise<PeerResult> {
    const { ort, gpu } = this;
    const { m, n, k, copies } = c;
    const weight = await this.readWeight(c);
    const session = await ort.InferenceSession.create(matMulNBitsModel(weight, n, k, copies), {
      executionProviders: [{ name: 'webgpu', device: gpu.device }],
      graphOptimizationLevel: 'all',
    });
    const ys: Tensor[] = Array.from({ length: copies }, () => gpu.tensor([m, n], 'f32', 'ort.y'));
    try {
      const feeds = { x: ort.Tensor.fromGpuBuffer(c.x.buffer, { dataType: 'float32', dims: [m, k] }) };
      const fetches = Object.fromEntries(ys.map((y, i) => [`y${i}`, ort.Tensor.fromGpuBuffer(y.buffer, { dataType: 'float32', dims: [m, n] })]));
      const batch = async (runs: number) => {
        const t0 = performance.now();
        for (let i = 0; i < runs; i++) await session.run(feeds, fetches);
        await gpu.device.queue.onSubmittedWorkDone();
        return (performance.now() - t0) / (runs * copies);
      };
      await batch(1);
      const first = await batch(1);
      const runs = Math.max(1, Math.min(50, Math.ceil(20 / Math.max(first * copies, 1e-3))));
      const ms = median([await batch(runs), await batch(runs), await batch(runs)]);
      const maxRelDiff = await this.compare(c, ys[0]);
      return { name: ORT_PEER_NAME, ms, clock: 'wall', rate: rateOf(c.row.work, c.row.unit, ms), maxRelDiff };
    } finally {
      for (const y of ys) y.release();
      await session.release();
    }
  }

  /** Our weight's row blocks read back and joined as one MatMulNBits weight [n, k]. */
  private async readWeight(c: Q4Case): Promise<{ b: Uint8Array; scales: Float32Array }> {
    const parts = [];
    for (const w of c.weight) {
      const codes = (await this.gpu.read(w.codes)) as Uint32Array;
      const scales = (await this.gpu.read(w.scales)) as Uint32Array;
      parts.push(q4ToMatMulNBits(codes, scales, w.n, c.k));
    }
    if (parts.length === 1) return parts[0];
    const b = new Uint8Array(parts.reduce((s, p) => s + p.b.length, 0));
    const scales = new Float32Array(parts.reduce((s, p) => s + p.scales.length, 0));
    let ob = 0;
    let os = 0;
    for (const p of parts) {
      b.set(p.b, ob);
      scales.set(p.scales, os);
      ob += p.b.length;
      os += p.scales.length;
    }
    return { b, scales };
  }

  /** max |ORT − ours| / max |ours| over y [m, n] (ours in row blocks [m, block rows]). */
  private async compare(c: Q4Case, ortY: Tensor): Promise<number> {
    const theirs = await this.gpu.readF32(ortY);
    let maxDiff = 0;
    let maxAbs = 0;
    let r0 = 0;
    for (let i = 0; i < c.weight.length; i++) {
      const bn = c.weight[i].n;
      const ours = await this.gpu.readF32(c.y[i]);
      for (let row = 0; row < c.m; row++) {
        for (let j = 0; j < bn; j++) {
          const a = ours[row * bn + j];
          maxAbs = Math.max(maxAbs, Math.abs(a));
          maxDiff = Math.max(maxDiff, Math.abs(theirs[row * c.n + r0 + j] - a));
        }
      }
      r0 += bn;
    }
    return maxDiff / maxAbs;
  }
}
