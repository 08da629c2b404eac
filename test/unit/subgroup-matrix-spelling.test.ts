import { describe, expect, it } from 'vitest';
import { legacySubgroupMatrixSpelling, shaderSource } from '../../src/gpu';

describe('legacySubgroupMatrixSpelling', () => {
  it('moves the majorness into a bool argument and counts 8-bit matrices in bytes', () => {
    const load = 'let a = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&smem, (KB_LO + i * RS) / I8W, RS / I8W);';
    expect(legacySubgroupMatrixSpelling(load)).toBe('let a = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>>(&smem, ((KB_LO + i * RS) / I8W) * 4u, false, (RS / I8W) * 4u);');
    const right = 'b = subgroupMatrixLoad<subgroup_matrix_right<u8, 16, 32>, col_major>(&w, f(a, b), 8u);';
    expect(legacySubgroupMatrixSpelling(right)).toBe('b = subgroupMatrixLoad<subgroup_matrix_right<u8, 16, 32>>(&w, (f(a, b)) * 4u, true, (8u) * 4u);');
  });

  it('keeps the units of 32-bit matrices and of stores', () => {
    const load = 'r = subgroupMatrixLoad<subgroup_matrix_result<f32, 8, 8>, col_major>(&s.arr, select(0u, 1u, a < b), 8u);';
    expect(legacySubgroupMatrixSpelling(load)).toBe('r = subgroupMatrixLoad<subgroup_matrix_result<f32, 8, 8>>(&s.arr, select(0u, 1u, a < b), true, 8u);');
    const store = 'subgroupMatrixStore<row_major>(&part, (t / 2u) * 16u * PS, r[t], PS);';
    expect(legacySubgroupMatrixSpelling(store)).toBe('subgroupMatrixStore(&part, (t / 2u) * 16u * PS, r[t], false, PS);');
  });

  it('rewrites every load and store of the tensor-core GEMMs and nothing else', () => {
    const source = ['matmul_q4_mma_gemm', 'matmul_q4_mma_gemm_kb'].map(shaderSource).join('\n');
    const legacy = legacySubgroupMatrixSpelling(source);
    const calls = (text: string, re: RegExp) => text.match(re)?.length ?? 0;
    expect(calls(source, /subgroupMatrix(Load|Store)\s*</g)).toBeGreaterThan(10);
    // No template majorness is left, and the call count is unchanged.
    expect(calls(legacy, /(row|col)_major/g)).toBe(0);
    expect(calls(legacy, /subgroupMatrix(Load|Store)\b/g)).toBe(calls(source, /subgroupMatrix(Load|Store)\b/g));
    // Outside the calls the text is the same.
    const strip = (text: string) => text.replace(/subgroupMatrix(Load|Store)[^;]*;/g, '');
    expect(strip(legacy)).toBe(strip(source));
  });

  it('refuses what it cannot rewrite', () => {
    expect(() => legacySubgroupMatrixSpelling('subgroupMatrixLoad<T, diagonal>(&p, 0u, 8u)')).toThrow(/majorness/);
    expect(() => legacySubgroupMatrixSpelling('subgroupMatrixStore<row_major>(&p, 0u, v)')).toThrow(/unexpected store/);
    expect(() => legacySubgroupMatrixSpelling('subgroupMatrixLoad<T, row_major>(&p, 0u')).toThrow(/unbalanced/);
  });
});
