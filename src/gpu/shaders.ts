// WGSL sources, loaded from shaders/ the same way everywhere: Vite (app and library builds),
// vitest and vite-node all resolve this glob at build/transform time, so Node and the browser
// run byte-identical shader text.
const files = import.meta.glob('../../shaders/*.wgsl', { query: '?raw', import: 'default', eager: true }) as Record<
  string,
  string
>;

const byName = new Map<string, string>();
for (const [path, text] of Object.entries(files)) {
  byName.set(path.slice(path.lastIndexOf('/') + 1, -'.wgsl'.length), text);
}

/** The text of shaders/<name>.wgsl. */
export function shaderSource(name: string): string {
  const text = byName.get(name);
  if (text === undefined) throw new Error(`no shader file shaders/${name}.wgsl (have: ${[...byName.keys()].join(', ')})`);
  return text;
}

export type Defines = Record<string, string | number | boolean>;

/**
 * A small template step, enough for one file per op family:
 *  - `#if NAME` / `#else` / `#endif` keep or drop lines by a define's truthiness (nesting allowed);
 *  - `{{NAME}}` is replaced by the define's value;
 *  - `#include NAME` (where active) inserts shaders/NAME.wgsl, preprocessed with the same defines:
 *    declarations that several kernel files share (compiler messages then count lines of the whole
 *    text). A file is inserted once per text, however many includes name it.
 *  - `#repeat I COUNT` ... `#endrepeat` writes its lines COUNT times (a define's value, or a number),
 *    `{{I}}` taking 0 .. COUNT - 1: unrolled code whose offsets the compiler sees as constants
 *    (a subgroup-matrix load at a constant offset into a fixed-size array needs no bounds branch).
 *    The lines after a repeat move down by the extra copies.
 * Everything else is plain WGSL. Numeric knobs that need no code change are better passed as
 * pipeline-overridable constants (`override`), which do not multiply the shader text.
 */
export function preprocess(source: string, defines: Defines = {}, included: Set<string> = new Set()): string {
  const out: string[] = [];
  const stack: { active: boolean; taken: boolean }[] = [];
  const active = () => stack.every((s) => s.active);
  const lines = source.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const rep = /^\s*#repeat\s+(\w+)\s+(\w+)\s*$/.exec(line);
    if (rep) {
      let depth = 1;
      let j = i + 1;
      for (; j < lines.length && depth > 0; j++) {
        if (/^\s*#repeat\b/.test(lines[j])) depth++;
        else if (/^\s*#endrepeat\b/.test(lines[j])) depth--;
      }
      if (depth > 0) throw new Error(`#repeat without #endrepeat at line ${i + 1}`);
      const body = lines.slice(i + 1, j - 1).join('\n');
      if (active()) {
        const count = /^\d+$/.test(rep[2]) ? Number(rep[2]) : Number(defines[rep[2]]);
        if (!Number.isInteger(count) || count < 0) throw new Error(`#repeat count ${rep[2]} is not a whole number (line ${i + 1})`);
        out.push('');
        for (let k = 0; k < count; k++) out.push(preprocess(body, { ...defines, [rep[1]]: k }, included));
        out.push('');
      } else {
        out.push(...lines.slice(i, j).map(() => ''));
      }
      i = j - 1;
      continue;
    }
    if (/^\s*#endrepeat\b/.test(line)) throw new Error(`#endrepeat without #repeat at line ${i + 1}`);
    const inc = /^\s*#include\s+(\w+)\s*$/.exec(line);
    if (inc) {
      const first = active() && !included.has(inc[1]);
      if (first) included.add(inc[1]);
      out.push(first ? preprocess(shaderSource(inc[1]), defines, included) : '');
      continue;
    }
    const m = /^\s*#(if|else|endif)\b\s*(!?)(\w*)/.exec(line);
    if (m) {
      if (m[1] === 'if') {
        const v = defines[m[3]];
        const truth = v !== undefined && v !== false && v !== 0 && v !== '';
        const want = m[2] === '!' ? !truth : truth;
        stack.push({ active: want, taken: want });
      } else if (m[1] === 'else') {
        const top = stack[stack.length - 1];
        if (!top) throw new Error(`#else without #if at line ${i + 1}`);
        top.active = !top.taken;
      } else {
        if (!stack.pop()) throw new Error(`#endif without #if at line ${i + 1}`);
      }
      out.push(''); // keep line numbers stable for compiler messages
      continue;
    }
    if (!active()) {
      out.push('');
      continue;
    }
    out.push(
      line.replace(/\{\{(\w+)\}\}/g, (_, k: string) => {
        if (!(k in defines)) throw new Error(`template value {{${k}}} is not defined (line ${i + 1})`);
        return String(defines[k]);
      }),
    );
  }
  if (stack.length) throw new Error('unterminated #if');
  return out.join('\n');
}
