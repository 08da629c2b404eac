// The 4-bit GEMV layouts the kernel benchmark sweeps (src/bench/suites.ts reports the best per
// shape and rows of x, every try in its sweep log): lanes per 4-row block, threads per workgroup,
// and a persistent grid (a fixed number of workgroups walking the row blocks) or one per block.
// One row of x and 2..8 rows run different kernels (shaders/matmul_q4.wgsl: gemv, gemv_rows), so a
// layout may win for one and not the other; the subgroup reduction is the one-row kernel's only.
import type { Gpu } from '../gpu';
import { DEFAULT_GEMV, DOT4_I8, type GemvShape, type MatmulQ4Options } from '../ops/matmulQ4';

const name = (g: GemvShape) =>
  `TPR${g.threadsPerRow} TG${g.groups}${g.persist ? ` persist ${g.persist}` : ''}${g.xDirect ? ' x direct' : ''}${g.xChunk ? ` chunk ${g.xChunk}` : ''}${g.unrolled ? ' unrolled' : ''}${g.int8 ? ' int8' : ''}${g.preq ? ' preq' : ''}`;

export function gemvOptions(gpu: Gpu, quick: boolean): { setting: string; value: MatmulQ4Options }[] {
  const layouts: GemvShape[] = quick
    ? [DEFAULT_GEMV, { threadsPerRow: 8, groups: 16, persist: 8 }, { threadsPerRow: 4, groups: 64 }]
    : [
        ...[8, 16, 32, 64].flatMap((tpr) => [128, 256].map((threads) => ({ threadsPerRow: tpr, groups: threads / tpr }))),
        { threadsPerRow: 8, groups: 8 },
        // Few lanes per row block: more rows of W share each staged x (several rows of x).
        { threadsPerRow: 4, groups: 32 },
        { threadsPerRow: 4, groups: 64 },
        // Few rows per workgroup: many workgroups for a small N (6144 rows are 96 blocks of 64).
        { threadsPerRow: 32, groups: 2 },
        { threadsPerRow: 64, groups: 1 },
        // x read from memory, not staged: no barrier before the first multiply.
        ...[[8, 16], [16, 8], [16, 4], [32, 2], [32, 4], [32, 8], [64, 2], [64, 4]].map(([threadsPerRow, groups]) => ({ threadsPerRow, groups, xDirect: true })),
        { threadsPerRow: 8, groups: 16, persist: 528 },
        // One or two lanes per row block: a warp's lanes take different rows of W at the same k,
        // so their loads of staged x are broadcasts (one address a warp) instead of 32 addresses.
        ...[[1, 64], [1, 128], [2, 64], [2, 128]].map(([threadsPerRow, groups]) => ({ threadsPerRow, groups })),
        // Shorter chunks of staged x: 8 rows of 2048 columns fill 64 KiB, three workgroups an SM.
        ...[[1, 128], [2, 64], [4, 64], [8, 32], [16, 16], [64, 4]].map(([threadsPerRow, groups]) => ({ threadsPerRow, groups, xChunk: 512 })),
        ...[[8, 32], [16, 16]].map(([threadsPerRow, groups]) => ({ threadsPerRow, groups, xChunk: 1024 })),
        // The step's four code words unrolled by hand (gemv_rows).
        ...[[8, 32, 1024], [16, 8, 0], [16, 16, 0], [64, 4, 0], [4, 64, 0]].map(([threadsPerRow, groups, xChunk]) => ({ threadsPerRow, groups, unrolled: true, ...(xChunk ? { xChunk } : {}) })),
        { threadsPerRow: 64, groups: 2, xDirect: true, unrolled: true },
      ];
  // x quantized to int8 and packed dot products (2..8 rows of x).
  if (gpu.hasWgsl(DOT4_I8)) {
    const int8: [number, number, number][] = quick
      ? [[8, 16, 0]]
      : [[8, 32, 0], [8, 32, 1024], [8, 16, 0], [4, 64, 0], [16, 16, 0], [16, 8, 0], [32, 8, 0], [32, 4, 0], [64, 4, 0], [64, 2, 0], [16, 16, 1024], [64, 4, 1024]];
    layouts.push(...int8.map(([threadsPerRow, groups, xChunk]) => ({ threadsPerRow, groups, int8: true, ...(xChunk ? { xChunk } : {}) })));
    // x quantized once by a dispatch of its own: no staging, so small workgroups cost little.
    const preq: [number, number][] = quick ? [[8, 16]] : [[8, 32], [8, 16], [8, 8], [16, 16], [16, 8], [16, 4], [32, 8], [32, 4], [32, 2], [64, 4], [64, 2], [4, 64], [4, 32]];
    layouts.push(...preq.map(([threadsPerRow, groups]) => ({ threadsPerRow, groups, int8: true, preq: true })));
  }
  const sgMin = gpu.has('subgroups') ? (gpu.device.adapterInfo?.subgroupMinSize ?? 0) : 0;
  const out = layouts.map((g) => {
    const sub = sgMin >= g.threadsPerRow;
    return { setting: `${name(g)}${sub ? ' subgroups' : ''}`, value: { gemv: g, subgroups: sub } as MatmulQ4Options };
  });
  // Reducing through workgroup memory (the path of devices without subgroups: on the H100 faster
  // than a 5-step shuffle for 32 lanes), and staging a K of 6144 (Qwen3-VL's intermediate size)
  // whole instead of in chunks of 2048.
  if (gpu.has('subgroups')) {
    for (const g of quick ? [DEFAULT_GEMV] : [DEFAULT_GEMV, { threadsPerRow: 16, groups: 8 }]) {
      out.push({ setting: `${name(g)} no subgroups`, value: { gemv: g, subgroups: false } });
    }
  }
  // One row of x in two int8 limbs (the LM head in decode): 32 lanes a row block reduced through
  // workgroup memory (a 5-step shuffle of vec4s cost 87 µs on the H100's LM head, memory 63).
  if (gpu.has('subgroups') && gpu.hasWgsl(DOT4_I8)) {
    for (const groups of quick ? [2] : [1, 2, 4]) {
      const g: GemvShape = { threadsPerRow: 32, groups, int8: true, preq: true };
      out.push({ setting: `${name(g)} no subgroups`, value: { gemv: g, subgroups: false } });
    }
  }
  if (!quick) out.push({ setting: `${name({ threadsPerRow: 32, groups: 8 })} x chunk 6144`, value: { gemv: { threadsPerRow: 32, groups: 8 }, xChunk: 6144 } });
  return out;
}
