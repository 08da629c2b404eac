// A quick timer for the attention forward's tiles (AttentionOptions.forwardTile) on the shapes the
// model runs: the vision tower's (one 448x448 image: 784 rows, 16 heads of 64, bidirectional) and
// the decoder's (a 2048-row causal sequence, 16 query heads over 8 kv heads of 128). In stream per
// call (src/bench/harness.ts's measure), each tile that fits the device's workgroup memory
// (src/model/vision.ts's VISION_ATTENTION_TILE comes from it).
//   npm run bench:build, then on the GPU machine:
//   source .device/gpu-env.sh && node .bench/attnSpeed.mjs
import { createNodeGpu } from '../../src/node/gpu';
import { Attention } from '../../src/ops/attention';
import { Filler } from '../../src/bench/fill';
import { measure } from '../../src/bench/harness';

// [label, T, Hq, Hkv, D, causal]
const SHAPES: [string, number, number, number, number, boolean][] = [
  ['vision, 224x224 image', 196, 16, 16, 64, false],
  ['vision, 448x448 image', 784, 16, 16, 64, false],
  ['vision, 896x896 image', 3136, 16, 16, 64, false],
  ['decoder, 2048 rows', 2048, 16, 8, 128, true],
];
const TILES: [number, number, number][] = [
  [32, 16, 256],
  [32, 16, 128],
  [64, 16, 256],
  [32, 32, 256],
  [64, 32, 256],
  [16, 16, 128],
  [16, 16, 64],
];

const gpu = await createNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const fill = await Filler.create(gpu);
// The list twice: the first pass runs while the GPU's clocks rise (compiles leave it idle); the
// second is the one to read.
for (const [label, T, hq, hkv, D, causal] of [...SHAPES, ...SHAPES]) {
  const q = gpu.tensor([T, hq * D], 'f32', 'q');
  const k = gpu.tensor([T, hkv * D], 'f32', 'k');
  const v = gpu.tensor([T, hkv * D], 'f32', 'v');
  const o = gpu.tensor([T, hq * D], 'f32', 'o');
  const cu = gpu.upload([0, T], [2], 'u32', 'cu_seqlens');
  const rec = gpu.recorder('setup');
  for (const t of [q, k, v]) fill.fill(rec, t, 'uniform', 1);
  await rec.submit();
  const flops = 4 * T * T * D * hq * (causal ? 0.5 : 1);
  const line: string[] = [];
  for (const tile of TILES) {
    const attn = await Attention.create(gpu, { hq, hkv, headDim: D }, { forwardTile: tile });
    const f = attn.forwardTile;
    if (f.BO !== tile[0] || f.BI !== tile[1] || f.WG !== tile[2]) {
      line.push(`[${tile.join(', ')}] does not fit`);
      continue;
    }
    const t = await measure(gpu, /^attention\./, (r) => attn.forward(r, { q, k, v, o, cuSeqlens: cu, causal, scale: 1 / Math.sqrt(D) }), { maxReps: 20, gpuOnly: true });
    const ms = t.passMs ?? t.ms;
    line.push(`[${tile.join(', ')}] ${(1000 * ms).toFixed(1)} µs (${(flops / ms / 1e9).toFixed(1)} TFLOP/s)`);
  }
  console.log(`${label} (T${T} Hq${hq} Hkv${hkv} D${D}${causal ? ' causal' : ''}): ${line.join('; ')}`);
  for (const t of [q, k, v, o, cu]) t.release();
}
process.exit(0);
