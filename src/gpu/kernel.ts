// Compiled kernels: a WGSL entry point with its pipeline, its binding names and its uniform layout.
import { ShaderCompileError } from './errors';
import { preprocess, shaderSource, type Defines } from './shaders';

/** Scalar uniform fields, packed in declaration order at 4 bytes each (a WGSL struct of scalars). */
export type UniformType = 'u32' | 'i32' | 'f32';

export interface KernelSpec {
  /** A readable name used in errors and profiles; defaults to `${shader}.${entry}`. */
  name?: string;
  /** File under shaders/ (without .wgsl), or inline WGSL text via `code`. */
  shader?: string;
  code?: string;
  entry: string;
  defines?: Defines;
  /** Values for `override` declarations (workgroup sizes, tile sizes...). */
  constants?: Record<string, number>;
  /**
   * The fields of the entry's `var<uniform>` struct, in order. They are packed from the object
   * passed at dispatch. The struct must consist of these 4-byte scalars only.
   */
  uniforms?: Record<string, UniformType>;
}

export interface Kernel {
  readonly name: string;
  /** Unique per compiled kernel (bind group cache keys). */
  readonly id: number;
  readonly pipeline: GPUComputePipeline;
  /** The pipeline's group 0 layout, fetched once (each fetch is a call into the implementation). */
  readonly layout: GPUBindGroupLayout;
  /** binding name -> (group 0) binding index, from the WGSL declarations. */
  readonly bindings: ReadonlyMap<string, number>;
  /** Name of the uniform variable, if the entry uses one. */
  readonly uniformVar: string | undefined;
  readonly uniformFields: readonly [string, UniformType][];
  /** Uniform struct size in bytes, padded to 16. */
  readonly uniformBytes: number;
}

/** Parse `@group(0) @binding(N) var<...> name` declarations. Only group 0 is used by the engine. */
export function parseBindings(code: string): { bindings: Map<string, number>; uniformVars: string[] } {
  const bindings = new Map<string, number>();
  const uniformVars: string[] = [];
  const re = /@group\(\s*0\s*\)\s*@binding\(\s*(\d+)\s*\)\s*var(?:<\s*(\w+)[^>]*>)?\s+(\w+)/g;
  for (let m = re.exec(code); m; m = re.exec(code)) {
    bindings.set(m[3], Number(m[1]));
    if (m[2] === 'uniform') uniformVars.push(m[3]);
  }
  return { bindings, uniformVars };
}

/** Features that must be enabled in WGSL, prepended when the device has them and the text asks. */
function withEnables(code: string, enables: readonly string[]): string {
  const lines = enables.filter((e) => !new RegExp(`^\\s*enable\\s+${e}\\s*;`, 'm').test(code)).map((e) => `enable ${e};`);
  return lines.length ? `${lines.join('\n')}\n${code}` : code;
}

export function kernelKey(spec: KernelSpec): string {
  return JSON.stringify([spec.shader ?? spec.code, spec.entry, spec.defines ?? {}, spec.constants ?? {}, spec.uniforms ?? {}]);
}

let kernelCount = 0;

/** The name a kernel goes by in errors and profiles. */
export function kernelName(spec: KernelSpec): string {
  return spec.name ?? `${spec.shader ?? 'inline'}.${spec.entry}`;
}

function kernelCode(name: string, spec: KernelSpec, enables: readonly string[]): string {
  let code: string;
  try {
    code = preprocess(spec.code ?? shaderSource(spec.shader ?? ''), spec.defines);
  } catch (e) {
    throw new ShaderCompileError(name, [(e as Error).message]);
  }
  // `enable` lines are only added for features the text declares it wants with `// requires: f16`.
  const wanted = enables.filter((e) => new RegExp(`//\\s*requires:.*\\b${e}\\b`).test(code));
  return withEnables(code, wanted);
}

function kernelOf(name: string, spec: KernelSpec, code: string, pipeline: GPUComputePipeline): Kernel {
  const { bindings, uniformVars } = parseBindings(code);
  const uniformFields = Object.entries(spec.uniforms ?? {});
  const uniformVar = uniformFields.length ? uniformVars[0] : undefined;
  if (uniformFields.length && !uniformVar) throw new ShaderCompileError(name, ['uniforms given but no var<uniform> declared']);
  return {
    name,
    id: ++kernelCount,
    pipeline,
    layout: pipeline.getBindGroupLayout(0),
    bindings,
    uniformVar,
    uniformFields,
    uniformBytes: Math.max(16, Math.ceil((uniformFields.length * 4) / 16) * 16),
  };
}

/**
 * Compile now, without waiting for the compiler's verdict: for kernels created on first use inside
 * a recording (variants that most runs never need). `verdict` settles with the ShaderCompileError
 * if the shader or pipeline was invalid (a dispatch of it then also fails its submit).
 */
export function compileKernelNow(device: GPUDevice, spec: KernelSpec, enables: readonly string[]): { kernel: Kernel; verdict: Promise<ShaderCompileError | null> } {
  const name = kernelName(spec);
  const code = kernelCode(name, spec, enables);
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ code, label: name });
  const pipeline = device.createComputePipeline({ label: name, layout: 'auto', compute: { module, entryPoint: spec.entry, constants: spec.constants } });
  const verdict = device.popErrorScope().then((err) => (err ? new ShaderCompileError(name, [err.message]) : null));
  return { kernel: kernelOf(name, spec, code, pipeline), verdict };
}

export async function compileKernel(device: GPUDevice, spec: KernelSpec, enables: readonly string[]): Promise<Kernel> {
  const name = kernelName(spec);
  const code = kernelCode(name, spec, enables);
  device.pushErrorScope('validation'); // the compiler's messages are read below; keep them off the console
  const module = device.createShaderModule({ code, label: name });
  const info = await module.getCompilationInfo();
  const scoped = await device.popErrorScope();
  const errors = info.messages.filter((m) => m.type === 'error');
  if (errors.length || scoped) {
    const lines = errors.map((m) => `${m.lineNum}:${m.linePos}: ${m.message}`);
    throw new ShaderCompileError(name, lines.length ? lines : [scoped!.message]);
  }
  // Synchronous creation inside an error scope: Dawn for Node never settles createComputePipelineAsync.
  device.pushErrorScope('validation');
  const pipeline = device.createComputePipeline({
    label: name,
    layout: 'auto',
    compute: { module, entryPoint: spec.entry, constants: spec.constants },
  });
  const err = await device.popErrorScope();
  if (err) throw new ShaderCompileError(name, [err.message]);
  return kernelOf(name, spec, code, pipeline);
}

/**
 * A kernel compiled when first used (its first dispatch, or a first look at its pipeline or
 * bindings), through `compile`. Ops name at creation every kernel they may dispatch, and a session
 * compiles only those it runs: loading a model for generation skips the training kernels, which
 * on a software GPU (SwiftShader compiles a kernel in 0.1 to 4 s) is most of the load.
 */
export class KernelOnUse implements Kernel {
  private compiled: Kernel | null = null;

  constructor(
    readonly name: string,
    private readonly compile: () => Kernel,
  ) {}

  private get kernel(): Kernel {
    return (this.compiled ??= this.compile());
  }
  get id(): number {
    return this.kernel.id;
  }
  get pipeline(): GPUComputePipeline {
    return this.kernel.pipeline;
  }
  get layout(): GPUBindGroupLayout {
    return this.kernel.layout;
  }
  get bindings(): ReadonlyMap<string, number> {
    return this.kernel.bindings;
  }
  get uniformVar(): string | undefined {
    return this.kernel.uniformVar;
  }
  get uniformFields(): readonly [string, UniformType][] {
    return this.kernel.uniformFields;
  }
  get uniformBytes(): number {
    return this.kernel.uniformBytes;
  }
}
