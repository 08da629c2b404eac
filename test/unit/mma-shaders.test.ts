// The int8 tensor-core GEMM's shader files build for every variant the op compiles. Software
// Vulkan offers no subgroup matrices, so here the two GEMM files (which enable them) can only be
// checked to parse, with every template filled and include resolved; the files beside them (x's
// limbs, the weights' int8 rounding) compile in full. On a GPU with the extension everything
// compiles (tools/device/mmaCheck.ts then runs them).
import { describe, expect, it } from 'vitest';
import { createNodeGpu } from '../../src/node/gpu';
import { preprocess, shaderSource, type Defines } from '../../src/gpu';
import { DEFAULT_MMA_TILE, mmaDefines, mmaUnsupported } from '../../src/ops/matmulQ4Mma';
import { PATHS } from '../../src/ops/projection';

const gpu = await createNodeGpu({ driver: process.env.VLRL_VK ?? 'lavapipe', dawnFlags: ['enable-dawn-features=allow_unsafe_apis'] });
const mma = mmaUnsupported(gpu) === null;

// The defines MatmulQ4Mma.create passes (mmaDefines): tiles, K blocks, limbs and steps it accepts.
const TILE_128x64 = { rows: 128, cols: 64, threads: 256 } as const;
const variants: Defines[] = [
  mmaDefines(DEFAULT_MMA_TILE, 32, 2, false, true),
  mmaDefines(TILE_128x64, 32, 2, false, false),
  mmaDefines(DEFAULT_MMA_TILE, 64, 2, false, true),
  mmaDefines(PATHS.mmaTile[2], PATHS.mmaKBlock[2], 2, false, true),
  mmaDefines(TILE_128x64, 128, 2, true, true),
  mmaDefines(DEFAULT_MMA_TILE, 128, 1, false, true),
  mmaDefines(PATHS.mmaTile[1], PATHS.mmaKBlock[1], 1, false, true),
];

const ROWS = { m: 'u32', k: 'u32' } as const;
const WEIGHTS = { n: 'u32', k: 'u32' } as const;
const GEMM = { m: 'u32', n: 'u32', k: 'u32', accumulate: 'u32' } as const;

/** The kernels of a variant, as MatmulQ4Mma.create chooses them. */
function kernelsOf(d: Defines): { shader: string; entry: string; uniforms: Record<string, 'u32'> }[] {
  const blocked = Number(d.SUB) > 1;
  const rows = d.ROWCOL === true;
  const quantize = (entry: string) => ({ shader: 'matmul_q4_mma_quantize', entry, uniforms: ROWS });
  const weights = (entry: string) => ({ shader: 'matmul_q4_mma_weights', entry, uniforms: WEIGHTS });
  return [
    quantize(blocked ? 'quantize_rows_kb' : 'quantize_rows'),
    blocked ? { shader: 'matmul_q4_mma_gemm_kb', entry: 'gemm_kb', uniforms: GEMM } : { shader: 'matmul_q4_mma_gemm', entry: 'gemm', uniforms: GEMM },
    ...(blocked ? ['requant_w', 'block_steps', 'requant_wt'].map(weights) : []),
    ...(rows ? [quantize('row_absmax'), weights('row_steps')] : blocked ? [weights('quantize_w')] : []),
  ];
}

const needsMatrices = (shader: string) => /enable\s+chromium_experimental_subgroup_matrix/.test(shaderSource(shader));

describe('int8 tensor-core GEMM shaders', () => {
  it('every variant compiles where the device allows, and parses where it lacks subgroup matrices', async () => {
    let compiled = 0;
    let parsed = 0;
    for (const defines of variants) {
      for (const k of kernelsOf(defines)) {
        const what = `${k.shader}.${k.entry} ${JSON.stringify(defines)}`;
        if (mma || !needsMatrices(k.shader)) {
          await expect(gpu.kernel({ ...k, defines }), what).resolves.toBeDefined();
          compiled++;
          continue;
        }
        const code = preprocess(shaderSource(k.shader), defines);
        expect(code, what).toContain(`fn ${k.entry}(`);
        const module = gpu.device.createShaderModule({ code });
        const errors = (await module.getCompilationInfo()).messages.filter((m) => m.type === 'error');
        // The one error allowed is the extension this device does not offer: anything the parser
        // rejects comes first.
        for (const e of errors) expect(`${e.lineNum}:${e.linePos} ${e.message}`, what).toMatch(/subgroup_matrix/);
        parsed++;
      }
    }
    expect(compiled).toBeGreaterThan(0);
    if (!mma) expect(parsed).toBe(variants.length);
  }, 600_000);

  it('a broken GEMM file would fail the parse check', async () => {
    const code = preprocess(shaderSource('matmul_q4_mma_gemm_kb'), variants[2]).replace('fn gemm_kb(', 'fn gemm_kb((');
    const module = gpu.device.createShaderModule({ code });
    const errors = (await module.getCompilationInfo()).messages.filter((m) => m.type === 'error');
    expect(errors.length).toBeGreaterThan(0);
    expect(errors.some((e) => !/subgroup_matrix/.test(e.message))).toBe(true);
  });
});
