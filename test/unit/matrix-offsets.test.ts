// The tensor-core kernels keep every subgroup-matrix load and store from workgroup memory at a
// constant offset and stride into a fixed-size array, inside it: Dawn's robustness then needs no
// bounds test around them (a computed offset gets one, with a copy of the matrix, and cost those
// kernels a third of their time; a constant one past the end would load zeros). A dynamic offset
// slips in easily when a loop is no longer unrolled by #repeat or a layout changes, and software
// Vulkan cannot run these kernels (nor does any machine here run Apple's 8x8 variants), so the
// rule is checked on their text, the constants evaluated as WGSL would.
import { describe, expect, it } from 'vitest';
import { matrixCalls, preprocess, shaderSource, type Defines } from '../../src/gpu';
import { topLevelArgs } from '../../src/gpu/subgroupMatrixSpelling';
import { attentionF16Defines, DEFAULT_ATTENTION_F16_TILE } from '../../src/ops/attentionF16';
import { F16_TILES, f16GemmDefines } from '../../src/ops/matmulQ4F16';
import { DEFAULT_MMA_TILE, mmaDefines } from '../../src/ops/matmulQ4Mma';
import { PATHS } from '../../src/ops/projection';

/** The value of a WGSL constant expression over u32s and bools (integer division), or undefined
 * where it holds anything else (floats, unknown names). */
function evaluate(expr: string, consts: ReadonlyMap<string, number>): number | undefined {
  const tokens = expr.match(/\d+\.\d*(e[+-]?\d+)?|\d+[ui]?|[A-Za-z_]\w*|==|!=|<=|>=|&&|\|\||[-+*/%()<>!,]/g) ?? [];
  let i = 0;
  const fail = (): never => {
    throw new Error(expr);
  };
  const peek = () => tokens[i];
  const next = () => tokens[i++] ?? fail();
  const binary = (ops: Record<string, (a: number, b: number) => number>, sub: () => number) => () => {
    let v = sub();
    while (peek() !== undefined && peek() in ops) v = ops[next()](v, sub());
    return v;
  };
  const primary = (): number => {
    const t = next();
    if (t === '(') {
      const v = or();
      if (next() !== ')') fail();
      return v;
    }
    if (t === '-') return -primary();
    if (t === '!') return primary() ? 0 : 1;
    if (/^\d+[ui]?$/.test(t)) return parseInt(t, 10);
    if (t === 'true' || t === 'false') return t === 'true' ? 1 : 0;
    if (t === 'select' || t === 'min' || t === 'max') {
      if (next() !== '(') fail();
      const args = [or()];
      while (peek() === ',') {
        next();
        args.push(or());
      }
      if (next() !== ')') fail();
      if (t === 'select') return args[2] ? args[1] : args[0];
      return t === 'min' ? Math.min(...args) : Math.max(...args);
    }
    const v = consts.get(t);
    return v === undefined ? fail() : v;
  };
  const product = binary({ '*': (a, b) => a * b, '/': (a, b) => Math.trunc(a / b), '%': (a, b) => a % b }, primary);
  const sum = binary({ '+': (a, b) => a + b, '-': (a, b) => a - b }, product);
  const compare = binary({ '==': (a, b) => +(a === b), '!=': (a, b) => +(a !== b), '<': (a, b) => +(a < b), '>': (a, b) => +(a > b), '<=': (a, b) => +(a <= b), '>=': (a, b) => +(a >= b) }, sum);
  const and = binary({ '&&': (a, b) => +(a && b) }, compare);
  const or = binary({ '||': (a, b) => +(a || b) }, and);
  try {
    const v = or();
    return i === tokens.length ? v : undefined;
  } catch {
    return undefined;
  }
}

/** The module's constants, in declaration order (those that are u32 or bool expressions). */
function constantsOf(code: string): Map<string, number> {
  const consts = new Map<string, number>();
  for (const m of code.matchAll(/^const (\w+)\s*(?::\s*\w+\s*)?=\s*([^;]+);/gm)) {
    const v = evaluate(m[2], consts);
    if (v !== undefined) consts.set(m[1], v);
  }
  return consts;
}

/** A matrix type's component type, columns and rows (`subgroup_matrix_left<f16, K, M>`: K columns,
 * M rows), through the module's aliases. */
function matrixShape(type: string, code: string, consts: ReadonlyMap<string, number>): { comp: string; cols: number; rows: number } {
  const alias = new RegExp(`alias ${type}\\s*=\\s*([^;]+);`).exec(code);
  const m = /subgroup_matrix_\w+<\s*(\w+)\s*,\s*([^,>]+),\s*([^,>]+)>/.exec(alias ? alias[1] : type);
  if (!m) throw new Error(`no matrix type in '${type}'`);
  return { comp: m[1], cols: evaluate(m[2], consts)!, rows: evaluate(m[3], consts)! };
}

/** `array<E, N>` as [E, N] (both as written). */
function arrayOf(type: string): [string, string] {
  const m = /^\s*array\s*<([\s\S]*)>\s*$/.exec(type);
  if (!m) return [type.trim(), ''];
  const parts = topLevelArgs(m[1], true);
  return [parts[0], parts[1] ?? ''];
}

/** The calls of `code` that break the rule, and how many it checked. */
function offenders(code: string): { checked: number; storage: number; bad: string[] } {
  const values = constantsOf(code);
  // Workgroup arrays by name: [element type, length], the element an array itself for blocks.
  const workgroup = new Map<string, [string, string]>();
  for (const m of code.matchAll(/var<workgroup>\s+(\w+)\s*:\s*([^;]+);/g)) workgroup.set(m[1], arrayOf(m[2]));
  const result = /subgroup_matrix_result<[^>]+>/.exec(code)?.[0] ?? /alias (\w+)\s*=\s*subgroup_matrix_result/.exec(code)?.[1];
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
    const what = `${call.fn}(${call.args.join(', ')})`;
    if (name === undefined || !workgroup.has(name)) bad.push(`${what}: not a pointer into a workgroup array`);
    else {
      // Offset, stride and the pointee's length must be the module's constants; then Tint's test:
      // offset + stride·(major − 1) + minor <= the length, in components (offsets and strides
      // count elements of the array: words for 8-bit matrices).
      const [element, count] = workgroup.get(name)!;
      // `&a[i]` points at a block (the element), `&a` at the whole array.
      const pointee = /^&\w+\s*\[/.test(ptr) ? arrayOf(element)[1] : count;
      const [off, str, len] = [evaluate(offset, values), evaluate(stride, values), evaluate(pointee, values)];
      if (off === undefined || str === undefined || len === undefined) {
        bad.push(`${what}: offset or stride not constant`);
        continue;
      }
      const type = call.fn === 'Load' ? call.template[0] : result;
      if (type === undefined) throw new Error(`${what}: no result type to store`);
      const { comp, cols, rows } = matrixShape(type, code, values);
      const colMajor = (call.fn === 'Load' ? call.template[1] : call.template[0]) === 'col_major';
      const per = comp === 'i8' || comp === 'u8' ? 4 : 1;
      const [major, minor] = colMajor ? [cols, rows] : [rows, cols];
      const end = off * per + str * per * (major - 1) + minor;
      if (str * per < minor) bad.push(`${what}: stride ${str} shorter than a ${minor}-wide row`);
      else if (end > len * per) bad.push(`${what}: ends at ${end}, past ${len * per}`);
    }
  }
  return { checked, storage: fromStorage, bad };
}

// The variants the ops compile, from their own define builders and tile tables: every f16 tile by
// fragment size (16x16x16, Apple's 8x8x8), the int8 settings' tiles (PATHS) and the 64x64 tile of a
// K block of 64, attention's heads of 128 and 64 on the default tile.
const F16_VARIANTS: { f16: Defines; q4: Defines }[] = Object.entries(F16_TILES).flatMap(([fr, tiles]) => tiles.map((t) => ({ f16: f16GemmDefines(t.f16, Number(fr), Number(fr)), q4: f16GemmDefines(t.q4, Number(fr), Number(fr)) })));
const KB: Defines[] = [
  mmaDefines(DEFAULT_MMA_TILE, 64, 2, false, true),
  mmaDefines(PATHS.mmaTile[2], PATHS.mmaKBlock[2], 2, false, true),
  mmaDefines(PATHS.mmaTile[2], PATHS.mmaKBlock[2], 2, true, true),
  mmaDefines(PATHS.mmaTile[1], PATHS.mmaKBlock[1], 1, false, true),
];
const ATTENTION: Defines[] = [
  attentionF16Defines(128, 16, DEFAULT_ATTENTION_F16_TILE),
  attentionF16Defines(64, 16, DEFAULT_ATTENTION_F16_TILE),
  attentionF16Defines(64, 8, DEFAULT_ATTENTION_F16_TILE),
];

const variants: { shader: string; defines: Defines }[] = [
  // W16 takes the forward only (an input gradient on f16 weights is the forward on Wᵀ).
  ...F16_VARIANTS.flatMap((t) => [
    { shader: 'matmul_q4_f16', defines: { ...t.q4, W16: false, DINPUT: false } },
    { shader: 'matmul_q4_f16', defines: { ...t.q4, W16: false, DINPUT: true } },
    { shader: 'matmul_q4_f16', defines: { ...t.f16, W16: true, DINPUT: false } },
  ]),
  ...KB.map((d) => ({ shader: 'matmul_q4_mma_gemm_kb', defines: d })),
  ...ATTENTION.flatMap((d) => [
    { shader: 'attention_f16', defines: { ...d, LSE: true } },
    { shader: 'attention_f16', defines: { ...d, LSE_IN: true } },
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

  it('catches a computed offset or stride, a pointer outside workgroup memory, and a matrix past its block', () => {
    const decls = [
      'const FR = 16u;',
      'const AS = 40u;',
      'const PADDED = true;',
      'const RS = select(8u, AS / 4u, PADDED);',
      'alias Acc = subgroup_matrix_result<f32, FR, FR>;',
      'var<workgroup> a_s: array<array<f16, FR * AS>, 8>;',
      'var<workgroup> o_s: array<f32, 16u * FR>;',
      'var<workgroup> w_s: array<array<i32, 160>, 4>;',
      'var<storage, read> q: array<f16>;',
      '',
    ].join('\n');
    const load = (ptr: string, off: string, stride = 'AS') => `${decls}let a = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(${ptr}, ${off}, ${stride});`;
    expect(offenders(load('&a_s[i + 1u]', '1u * FR')).bad).toEqual([]);
    expect(offenders(load('&a_s[i]', 'kk * FR')).bad).toEqual([expect.stringMatching(/not constant/)]);
    expect(offenders(load('&a_s[i]', '0u', 'stride')).bad).toEqual([expect.stringMatching(/not constant/)]);
    expect(offenders(load('&q', 'base + 16u', 'stride'))).toEqual({ checked: 0, storage: 1, bad: [] });
    // 16 rows of 16 at a stride of 40 end at offset + 616 in a block of 640.
    expect(offenders(load('&a_s[i]', '24u')).bad).toEqual([]);
    expect(offenders(load('&a_s[i]', '(1u + 2u * 3u) * 4u')).bad).toEqual([expect.stringMatching(/ends at 644, past 640/)]);
    expect(offenders(load('&a_s[i]', '0u', '8u')).bad).toEqual([expect.stringMatching(/stride 8 shorter/)]);
    // 8-bit matrices count words of their i32 array: 16 rows of 32 bytes at 40 bytes end at 4·offset + 632.
    const int8 = (off: string) => `${decls}let b = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&w_s[j], ${off}, RS);`;
    expect(offenders(int8('2u')).bad).toEqual([]);
    expect(offenders(int8('3u')).bad).toEqual([expect.stringMatching(/ends at 644, past 640/)]);
    // Stores take the module's result type; a pointer to the whole flat array counts its length.
    expect(offenders(`${decls}subgroupMatrixStore<row_major>(&a_s[sg], (1u / 2u) * 16u * AS, c, AS);`).bad).toEqual([]);
    expect(offenders(`${decls}subgroupMatrixStore<row_major>(&a_s[sg], t * 16u, c, AS);`).bad).toEqual([expect.stringMatching(/not constant/)]);
    expect(offenders(`${decls}subgroupMatrixStore<col_major>(&o_s, 0u, c, FR);`).bad).toEqual([]);
    expect(offenders(`${decls}subgroupMatrixStore<col_major>(&o_s, 1u, c, FR);`).bad).toEqual([expect.stringMatching(/past 256/)]);
  });
});
