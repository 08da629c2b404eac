// The 4-bit GEMV's table of layouts (src/ops/matmulQ4Tuning.ts): every call finds a layout, and
// the Qwen3-VL-2B shapes take the layouts BENCHMARKS.md's "Kernel tuning choices" justify.
import { describe, expect, it } from 'vitest';
import { DEFAULT_GEMV, GEMV_TABLE, gemmSplitOf, gemvLayout, gemvLayouts, SMALL_N } from '../../src/ops/matmulQ4Tuning';

const LM_HEAD = 151936;

describe('4-bit GEMV tuning table', () => {
  it('has a layout for every row count, weight shape and x form', () => {
    for (let m = 1; m <= 8; m++) {
      for (const n of [1, 2048, 2049, 4096, 6144, 8193, 12288, SMALL_N, SMALL_N + 1, LM_HEAD]) {
        for (const k of [32, 2048, 2080, 6144]) {
          for (const int8 of [false, true]) expect(() => gemvLayout(m, n, k, int8), `${m} x [${n}, ${k}] int8 ${int8}`).not.toThrow();
        }
      }
    }
  });

  it('int8 rules apply only where int8 is allowed, and only int8 layouts come from them', () => {
    for (const r of GEMV_TABLE) expect(r.layout.int8 === true, JSON.stringify(r)).toBe(r.x === 'int8');
    for (let m = 1; m <= 8; m++) for (const n of [2048, LM_HEAD]) expect(gemvLayout(m, n, 2048, false).int8 ?? false).toBe(false);
    expect(gemvLayouts('int8').every((l) => l.int8)).toBe(true);
    expect(gemvLayouts('f32').some((l) => l.int8)).toBe(false);
  });

  it('picks the measured layouts for the 2B shapes', () => {
    // One row: the LM head at the default, two int8 limbs where allowed; small weights read x from memory.
    expect(gemvLayout(1, LM_HEAD, 2048, false)).toBe(DEFAULT_GEMV);
    expect(gemvLayout(1, LM_HEAD, 2048, true)).toMatchObject({ threadsPerRow: 32, groups: 2, int8: true });
    expect(gemvLayout(1, 2048, 2048, true)).toMatchObject({ threadsPerRow: 64, groups: 2, xDirect: true });
    expect(gemvLayout(1, 2048, 6144, false)).toMatchObject({ threadsPerRow: 64, groups: 2, xDirect: true });
    expect(gemvLayout(1, 4096, 2048, false)).toMatchObject({ threadsPerRow: 32, groups: 4 });
    expect(gemvLayout(1, 12288, 2048, false)).toMatchObject({ threadsPerRow: 16, groups: 8 });
    // 2..4 rows of f32 x: joined q/k/v and gate/up; int8 on the decoder's weights, f32 on the head.
    expect(gemvLayout(2, 4096, 2048, false)).toMatchObject({ threadsPerRow: 32, groups: 8 });
    expect(gemvLayout(2, 12288, 2048, false)).toMatchObject({ threadsPerRow: 16, groups: 8 });
    expect(gemvLayout(4, LM_HEAD, 2048, true)).toMatchObject({ threadsPerRow: 8, groups: 32 });
    expect(gemvLayout(3, 12288, 2048, true)).toMatchObject({ threadsPerRow: 32, groups: 4, int8: true, preq: true });
    // 5..8 rows.
    expect(gemvLayout(8, LM_HEAD, 2048, false)).toMatchObject({ threadsPerRow: 8, groups: 32, xChunk: 1024, unrolled: true });
    expect(gemvLayout(8, LM_HEAD, 2048, true)).toMatchObject({ threadsPerRow: 8, groups: 8, int8: true });
    expect(gemvLayout(8, 2048, 6144, false)).toMatchObject({ threadsPerRow: 64, groups: 4, unrolled: true });
    expect(gemvLayout(8, 6144, 2048, false)).toMatchObject({ threadsPerRow: 16, groups: 16, unrolled: true });
    expect(gemvLayout(8, 2048, 2048, false)).toMatchObject({ threadsPerRow: 64, groups: 2, xDirect: true });
  });

  it('gives the head layouts to vocabulary-sized weights only: the 4B and 8B joined gate/up are decoder weights', () => {
    for (const [n, k] of [[2 * 9728, 2560], [2 * 12288, 4096]]) {
      // One row reads f32 x (the kernel before writes int8 groups for 2 to 8 rows only); 2 to 8 rows the decoder's one layout.
      expect(gemvLayout(1, n, k, true).int8 ?? false, `1 x [${n}, ${k}]`).toBe(false);
      for (let m = 2; m <= 8; m++) expect(gemvLayout(m, n, k, true), `${m} x [${n}, ${k}]`).toEqual(gemvLayout(m, 2048, 2048, true));
    }
    expect(gemvLayout(1, LM_HEAD, 4096, true).int8).toBe(true);
  });

  it('splits a GEMM of few tiles over a long K: the most of 8, 4, 2 chunks within 512 workgroups and chunks of K ≥ 256', () => {
    // A 512-token prefill's products in 128x64 tiles: k/v_proj (64 tiles), q/o_proj (128), down_proj (128
    // over K 6144), gate/up_proj (384); then 1024 rows of q_proj, a long prompt and a short K.
    expect(gemmSplitOf(64, 2048)).toBe(8);
    expect(gemmSplitOf(128, 2048)).toBe(4);
    expect(gemmSplitOf(128, 6144)).toBe(4);
    expect(gemmSplitOf(384, 2048)).toBe(1);
    expect(gemmSplitOf(256, 2048)).toBe(2);
    expect(gemmSplitOf(512, 6144)).toBe(1);
    expect(gemmSplitOf(16, 512)).toBe(2);
    expect(gemmSplitOf(64, 512)).toBe(2);
    expect(gemmSplitOf(16, 256)).toBe(1);
  });
});
