// The subgroup-matrix load/store builtins have two spellings. Current Dawn (the `webgpu` package's,
// and Chrome's from the same time) takes the majorness as a template argument and counts offsets
// and strides in elements of the array the pointer points at:
//   subgroupMatrixLoad<T, row_major | col_major>(p, offset, stride)
//   subgroupMatrixStore<row_major | col_major>(p, offset, value, stride)
// The first releases took it as a bool argument and counted elements of the matrix's component
// type (bytes for 8-bit matrices in an array<i32>), and newer Dawn only warns about that form.
// Shaders are written in the current spelling; a device whose compiler rejects it gets them
// rewritten by `legacySubgroupMatrixSpelling` (compileMatrixKernels does that).
import { ShaderCompileError } from './errors';
import type { Gpu } from './runtime';
import type { Kernel, UniformType } from './kernel';
import { preprocess, shaderSource, type Defines } from './shaders';

/** The text from `open` (at `i`) to its matching `close`, exclusive, and the index after it. */
function enclosed(code: string, i: number, open: string, close: string): { inner: string; end: number } {
  let depth = 0;
  for (let j = i; j < code.length; j++) {
    if (code[j] === open) depth++;
    else if (code[j] === close && --depth === 0) return { inner: code.slice(i + 1, j), end: j + 1 };
  }
  throw new Error(`subgroup matrix spelling: unbalanced '${open}' at ${i}`);
}

/** `text` split at its top-level commas (none inside () or [], nor <> for template arguments:
 * call arguments may hold comparisons and shifts), trimmed. */
export function topLevelArgs(text: string, angles: boolean): string[] {
  const out: string[] = [];
  const opens = angles ? '(<[' : '([';
  const closes = angles ? ')>]' : ')]';
  let depth = 0;
  let from = 0;
  for (let j = 0; j < text.length; j++) {
    const c = text[j];
    if (opens.includes(c)) depth++;
    else if (closes.includes(c)) depth--;
    else if (c === ',' && depth === 0) {
      out.push(text.slice(from, j).trim());
      from = j + 1;
    }
  }
  out.push(text.slice(from).trim());
  return out;
}

function majorness(arg: string): string {
  if (arg === 'row_major') return 'false';
  if (arg === 'col_major') return 'true';
  throw new Error(`subgroup matrix spelling: majorness '${arg}' is not row_major or col_major`);
}

/** `e` in units `factor` times smaller (array elements to component elements). */
function scaled(e: string, factor: number): string {
  return factor === 1 ? e : `(${e}) * ${factor}u`;
}

/**
 * `code` with every load and store rewritten into the bool-majorness spelling. An 8-bit matrix
 * (i8, u8) is taken to be loaded from an array of 32-bit words, so its offset and stride are
 * multiplied by 4; stores are taken to be of 32-bit components (the shaders store only results).
 */
export function legacySubgroupMatrixSpelling(code: string): string {
  let out = '';
  let at = 0;
  for (const call of matrixCalls(code)) {
    const { fn, template, args } = call;
    const written = `subgroupMatrix${fn}<${template.join(', ')}>(${args.join(', ')})`;
    let text: string;
    if (fn === 'Load') {
      const [type, major] = template;
      if (major === undefined || args.length !== 3) throw new Error(`subgroup matrix spelling: unexpected load ${written}`);
      const factor = /^subgroup_matrix_\w+\s*<\s*[iu]8\s*,/.test(type) ? 4 : 1;
      text = `subgroupMatrixLoad<${type}>(${args[0]}, ${scaled(args[1], factor)}, ${majorness(major)}, ${scaled(args[2], factor)})`;
    } else {
      if (args.length !== 4) throw new Error(`subgroup matrix spelling: unexpected store ${written}`);
      text = `subgroupMatrixStore(${args[0]}, ${args[1]}, ${args[2]}, ${majorness(template[0])}, ${args[3]})`;
    }
    out += code.slice(at, call.start) + text;
    at = call.end;
  }
  return out + code.slice(at);
}

/** A subgroup-matrix load or store as written in the current spelling. */
export interface MatrixCall {
  fn: 'Load' | 'Store';
  /** Load: [matrix type, majorness]; Store: [majorness]. */
  template: string[];
  args: string[];
  /** Where the call starts in the text and the index after its closing parenthesis. */
  start: number;
  end: number;
}

/** Every subgroupMatrixLoad<…>(…) and subgroupMatrixStore<…>(…) of `code`, in order. */
export function matrixCalls(code: string): MatrixCall[] {
  const calls: MatrixCall[] = [];
  const re = /subgroupMatrix(Load|Store)\s*</g;
  for (let m = re.exec(code); m; m = re.exec(code)) {
    const tmpl = enclosed(code, m.index + m[0].length - 1, '<', '>');
    const open = code.indexOf('(', tmpl.end);
    if (open < 0 || code.slice(tmpl.end, open).trim() !== '') throw new Error(`subgroup matrix spelling: no call after ${m[0]}${tmpl.inner}>`);
    const call = enclosed(code, open, '(', ')');
    calls.push({ fn: m[1] as MatrixCall['fn'], template: topLevelArgs(tmpl.inner, true), args: topLevelArgs(call.inner, false), start: m.index, end: call.end });
    re.lastIndex = call.end;
  }
  return calls;
}

/** A subgroup-matrix kernel: its file under shaders/, entry point and params struct. */
export interface MatrixKernelEntry {
  shader: string;
  entry: string;
  uniforms: Record<string, UniformType>;
}

/** The kernels of `entries`, named `<family>.<entry>`; where the compiler rejects the files'
 * spelling of the subgroup-matrix loads and stores, the same kernels from the older spelling (an
 * error then gives both compilers' messages). */
export async function compileMatrixKernels(gpu: Gpu, family: string, entries: readonly MatrixKernelEntry[], defines: Defines): Promise<Kernel[]> {
  const compile = (legacy: boolean) =>
    Promise.all(
      entries.map(({ shader, entry, uniforms }) => {
        const name = `${family}.${entry}`;
        // The rewrite takes the text with its includes in place and its templates filled.
        const code = legacy ? legacySubgroupMatrixSpelling(preprocess(shaderSource(shader), defines)) : undefined;
        return gpu.kernel(code ? { name, code, entry, uniforms } : { name, shader, entry, defines, uniforms });
      }),
    );
  try {
    return await compile(false);
  } catch (current) {
    if (!(current instanceof ShaderCompileError)) throw current;
    try {
      return await compile(true);
    } catch (older) {
      if (!(older instanceof ShaderCompileError)) throw older;
      throw new ShaderCompileError(current.kernel, [...current.messages, 'and in the older spelling of the subgroup-matrix builtins:', ...older.messages]);
    }
  }
}
