// The 4-bit GEMV layouts the kernel benchmark sweeps (src/bench/suites.ts reports the best per
// shape, every try in its sweep log): lanes per 4-row block, threads per workgroup, and a
// persistent grid (a fixed number of workgroups walking the row blocks) or one per block.
import type { Gpu } from '../gpu';
import { DEFAULT_GEMV, type GemvShape, type MatmulQ4Options } from '../ops/matmulQ4';

const name = (g: GemvShape) => `TPR${g.threadsPerRow} TG${g.groups}${g.persist ? ` persist ${g.persist}` : ''}`;

export function gemvOptions(gpu: Gpu, quick: boolean): { setting: string; value: MatmulQ4Options }[] {
  const layouts: GemvShape[] = quick
    ? [DEFAULT_GEMV, { threadsPerRow: 8, groups: 16, persist: 8 }]
    : [8, 16, 32].flatMap((tpr) => [128, 256].flatMap((threads) => [0, 1024].map((persist) => ({ threadsPerRow: tpr, groups: threads / tpr, persist }))));
  const out = layouts.map((g) => ({ setting: name(g), value: { gemv: g } as MatmulQ4Options }));
  // The default layout reducing through workgroup memory (the path of devices without subgroups),
  // and staging a K of 6144 (Qwen3-VL's intermediate size) whole instead of in chunks of 2048.
  if (gpu.has('subgroups')) out.push({ setting: `${name(DEFAULT_GEMV)} no subgroups`, value: { gemv: DEFAULT_GEMV, subgroups: false } });
  if (!quick) out.push({ setting: `${name(DEFAULT_GEMV)} x chunk 6144`, value: { gemv: DEFAULT_GEMV, xChunk: 6144 } });
  return out;
}
