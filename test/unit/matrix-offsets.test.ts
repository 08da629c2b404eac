// The tensor-core kernels keep every subgroup-matrix load and store from workgroup memory at a
// constant offset and stride into a fixed-size array: Dawn's robustness then needs no bounds test
// around them (a computed offset gets one, with a copy of the matrix, and cost those kernels a third
// of their time). A dynamic offset slips in easily when a loop is no longer unrolled by #repeat or a
// layout changes, and software Vulkan cannot run these kernels, so the rule is checked on their text.
import { describe, expect, it } from 'vitest';
import { preprocess, shaderSource, type Defines } from '../../src/gpu';

interface Call {
  fn: 'Load' | 'Store';
  args: string[];
}

/** From `open` at `i`, the index just past its matching `close` (brackets of other kinds nested). */
function skipBalanced(code: string, i: number, open: string, close: string): number {
  let depth = 0;
  for (let j = i; j < code.length; j++) {
    if (code[j] === open) depth++;
    else if (code[j] === close && --depth === 0) return j + 1;
  }
  throw new Error(`unbalanced '${open}' at ${i}`);
}

function splitArgs(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let from = 0;
  for (let j = 0; j < text.length; j++) {
    const c = text[j];
    if (c === '(' || c === '[') depth++;
    else if (c === ')' || c === ']') depth--;
    else if (c === ',' && depth === 0) {
      out.push(text.slice(from, j).trim());
      from = j + 1;
    }
  }
  out.push(text.slice(from).trim());
  return out;
}

function matrixCalls(code: string): Call[] {
  const calls: Call[] = [];
  const re = /subgroupMatrix(Load|Store)\s*</g;
  for (let m = re.exec(code); m; m = re.exec(code)) {
    const afterTemplate = skipBalanced(code, m.index + m[0].length - 1, '<', '>');
    const open = code.indexOf('(', afterTemplate);
    const close = skipBalanced(code, open, '(', ')');
    calls.push({ fn: m[1] as Call['fn'], args: splitArgs(code.slice(open + 1, close - 1)) });
  }
  return calls;
}

/** Whether `expr` uses only literals, operators and the module's constants. */
function isConstant(expr: string, consts: ReadonlySet<string>): boolean {
  const noLiterals = expr.replace(/\b\d+[ui]?\b/g, '');
  const words = noLiterals.match(/[A-Za-z_]\w*/g) ?? [];
  const rest = noLiterals.replace(/[A-Za-z_]\w*/g, '');
  return words.every((w) => consts.has(w) || w === 'select' || w === 'min' || w === 'max') && /^[\s+\-*/%()]*$/.test(rest);
}

/** The calls of `code` that break the rule, and how many it checked. */
function offenders(code: string): { checked: number; storage: number; bad: string[] } {
  const consts = new Set([...code.matchAll(/^const (\w+)/gm)].map((m) => m[1]));
  const workgroup = new Set([...code.matchAll(/var<workgroup>\s+(\w+)\s*:/g)].map((m) => m[1]));
  const storage = new Set([...code.matchAll(/var<storage[^>]*>\s+(\w+)\s*:/g)].map((m) => m[1]));
  let checked = 0;
  let fromStorage = 0;
  const bad: string[] = [];
  for (const call of matrixCalls(code)) {
    const [ptr, offset] = call.args;
    const stride = call.args[call.fn === 'Load' ? 2 : 3];
    const name = /^&(\w+)/.exec(ptr)?.[1];
    if (name !== undefined && storage.has(name)) {
      fromStorage++; // loaded once a workgroup, before its loop
      continue;
    }
    checked++;
    if (name === undefined || !workgroup.has(name)) bad.push(`${call.fn}(${call.args.join(', ')}): not a pointer into a workgroup array`);
    else if (!isConstant(offset, consts) || !isConstant(stride, consts)) bad.push(`${call.fn}(${call.args.join(', ')}): offset or stride not constant`);
  }
  return { checked, storage: fromStorage, bad };
}

const F16_TILES: Defines[] = [
  { BM: 128, BN: 128, WG: 256, TN: 4, TN4: true, FR: 16, FK: 16, KSTEPS: 2 },
  { BM: 64, BN: 128, WG: 256, TN: 2, TN4: false, FR: 16, FK: 16, KSTEPS: 2 },
  { BM: 64, BN: 64, WG: 256, TN: 4, TN4: true, FR: 8, FK: 8, KSTEPS: 4 },
];
const KB: Defines[] = [
  { BM: 64, BN: 64, WG: 128, SUB: 2, STG: 2, LIMBS: 2, ROWCOL: false },
  { BM: 64, BN: 128, WG: 256, SUB: 4, STG: 4, LIMBS: 2, ROWCOL: false },
  { BM: 64, BN: 128, WG: 256, SUB: 4, STG: 4, LIMBS: 2, ROWCOL: true },
  { BM: 128, BN: 64, WG: 256, SUB: 8, STG: 4, LIMBS: 1, ROWCOL: false },
];
const ATTENTION: Defines[] = [
  { D: 128, FR: 16, SGS: 8, BI: 32, KT: 2, O8: true },
  { D: 64, FR: 16, SGS: 8, BI: 32, KT: 2, O8: false },
  { D: 64, FR: 8, SGS: 8, BI: 32, KT: 4, O8: true },
];

const variants: { shader: string; defines: Defines }[] = [
  ...F16_TILES.flatMap((t) => [false, true].flatMap((W16) => [false, true].map((DINPUT) => ({ shader: 'matmul_q4_f16', defines: { ...t, W16, DINPUT } })))),
  ...KB.map((d) => ({ shader: 'matmul_q4_mma_gemm_kb', defines: { ...d, BLOCKED: true } })),
  ...ATTENTION.flatMap((d) => [
    { shader: 'attention_f16', defines: { ...d, LSE: true } },
    { shader: 'attention_f16_bwd', defines: { ...d, DKV_SPLIT: false } },
    { shader: 'attention_f16_bwd', defines: { ...d, DKV_SPLIT: true } },
  ]),
];

describe('tensor-core kernels: matrix loads and stores from workgroup memory', () => {
  it.each(variants.map((v) => [`${v.shader} ${JSON.stringify(v.defines)}`, v] as const))('%s: constant offsets and strides', (_, v) => {
    const { checked, bad } = offenders(preprocess(shaderSource(v.shader), v.defines));
    expect(bad).toEqual([]);
    expect(checked).toBeGreaterThan(0);
  });

  it('catches a computed offset, a computed stride and a flat staging pointer', () => {
    const good = 'const FR = 16u;\nconst AS = 40u;\nvar<workgroup> a_s: array<array<f16, 640>, 8>;\nvar<storage, read> q: array<f16>;\n';
    const load = (ptr: string, off: string, stride = 'AS') => `let a = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(${ptr}, ${off}, ${stride});\n`;
    expect(offenders(good + load('&a_s[i + 1u]', '1u * FR')).bad).toEqual([]);
    expect(offenders(good + load('&a_s[i]', 'kk * FR')).bad).toHaveLength(1);
    expect(offenders(good + load('&a_s[i]', '0u', 'stride')).bad).toHaveLength(1);
    expect(offenders(good + load('&q', 'base + 16u', 'stride'))).toEqual({ checked: 0, storage: 1, bad: [] });
    expect(offenders(good + 'subgroupMatrixStore<row_major>(&a_s[sg], (1u / 2u) * 16u * AS, r[1u], AS);\n').bad).toEqual([]);
    expect(offenders(good + 'subgroupMatrixStore<row_major>(&a_s[sg], t * 16u, r[t], AS);\n').bad).toHaveLength(1);
  });
});
