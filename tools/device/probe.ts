import { createNodeGpu } from '../../src/node/gpu';
import { Filler } from '../../src/bench/fill';
import { allocQ4 } from '../../src/ops/matmulQ4';
import { MatmulQ4Mma } from '../../src/ops/matmulQ4Mma';

async function main() {
  const gpu = await createNodeGpu({ dawnFlags: ['enable-dawn-features=allow_unsafe_apis', 'disable-dawn-features=timestamp_quantization'] });
  const fill = await Filler.create(gpu);
  const shapes: [number, number, number][] = [[8192, 6144, 2048], [8192, 2048, 6144], [2816, 4096, 2048], [2816, 12288, 2048], [2816, 2048, 6144], [2816, 2048, 2048]];
  const ops = await Promise.all(([2, 1] as const).map((limbs) => MatmulQ4Mma.create(gpu, { maxRows: 8192, maxK: 6144, tile: { rows: 128, cols: 64, threads: 256 }, kBlock: 128, limbs })));
  for (const [m, n, k] of shapes) {
    const setup = gpu.recorder('setup');
    const w = allocQ4(gpu, n, k, 'w'); fill.fill(setup, w.codes, 'bits'); fill.fill(setup, w.scales, 'f16pairs', 0.004);
    const x = gpu.tensor([m, k], 'f32', 'x'); fill.fill(setup, x, 'uniform', 1);
    const y = gpu.tensor([m, n], 'f32', 'y');
    const dy = gpu.tensor([m, n], 'f32', 'dy'); fill.fill(setup, dy, 'uniform', 1);
    const dx = gpu.tensor([m, k], 'f32', 'dx');
    await setup.submit(); await gpu.sync();
    const line: string[] = [];
    for (const op of ops) {
      for (const [what, f] of [['fwd', (r: ReturnType<typeof gpu.recorder>) => op.gemm(r, x, w, y)], ['dX', (r: ReturnType<typeof gpu.recorder>) => op.backwardInput(r, dy, w, dx)]] as const) {
        const N = 20;
        let best = Infinity;
        for (let rep = 0; rep < 4; rep++) {
          const r = gpu.recorder('p'); for (let i = 0; i < N; i++) f(r);
          const t0 = performance.now(); await r.submit(); await gpu.sync(); best = Math.min(best, (performance.now() - t0) / N);
        }
        line.push(`${op.limbs} limb ${what} ${best.toFixed(3)} ms (${(2 * m * n * k / best / 1e9).toFixed(1)} TFLOP/s)`);
      }
    }
    console.log(`M${m} N${n} K${k}: ${line.join('; ')}`);
    for (const t of [x, y, dy, dx, w.codes, w.scales]) t.release();
  }
}
main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
