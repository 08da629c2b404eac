import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, randUniform } from '../helpers/reference';
import { Elementwise } from '../../src/ops/elementwise';
import { BufferAllocationError, DeviceLostError, KernelOnUse, MissingFeatureError, ShaderCompileError, requestDevice, requestAdapter, type Kernel } from '../../src/gpu';
import { createNodeGpu } from '../../src/node/gpu';
import { sizeClass, Tensor } from '../../src/gpu/tensor';
import { preprocess } from '../../src/gpu/shaders';

describe('gpu runtime', () => {
  it('runs a WGSL kernel and matches the CPU, odd sizes and a 2-D grid included', async () => {
    const gpu = await testGpu();
    const ew = await Elementwise.create(gpu);
    for (const n of [1, 255, 257, 70_000]) {
      const x = randUniform(n, 1 + n);
      const y = randUniform(n, 2 + n);
      const tx = gpu.upload(x, [n], 'f32', 'x');
      const ty = gpu.upload(y, [n], 'f32', 'y');
      const rec = gpu.recorder();
      ew.axpy(rec, tx, ty, 0.5);
      ew.axpy(rec, tx, ty, -2); // several dispatches in one encoder, ordered
      await rec.submit();
      const got = await gpu.readF32(ty);
      const want = y.map((v, i) => v + 0.5 * x[i] - 2 * x[i]);
      expectClose(got, want, { rtol: 1e-6, atol: 1e-6, what: `axpy n=${n}` });
      tx.release();
      ty.release();
    }
  });

  it('reuses pooled buffers: a steady loop creates none', async () => {
    const gpu = await testGpu();
    const a = gpu.tensor([1000], 'f32', 'a');
    a.release();
    const before = gpu.pool.stats.created;
    for (let i = 0; i < 10; i++) gpu.tensor([900 + i], 'f32', 'loop').release();
    expect(gpu.pool.stats.created).toBe(before);
    expect(sizeClass(3 << 20)).toBeGreaterThanOrEqual(3 << 20);
    expect(sizeClass(3 << 20)).toBeLessThanOrEqual(Math.ceil((3 << 20) * 1.125));
  });

  it('turns a WGSL compile error into ShaderCompileError naming the kernel', async () => {
    const gpu = await testGpu();
    const bad = gpu.kernel({ name: 'broken_kernel', code: '@compute @workgroup_size(1) fn main() { let x: f32 = undefined_thing; }', entry: 'main' });
    await expect(bad).rejects.toBeInstanceOf(ShaderCompileError);
    await expect(bad).rejects.toThrow(/broken_kernel/);
  });

  it('compiles on first use (kernelNow): cached with kernel(), and a broken one fails the next submit as ShaderCompileError', async () => {
    const gpu = await testGpu();
    const spec = { name: 'now_ok', code: '@group(0) @binding(0) var<storage, read_write> o: array<u32>;\n@compute @workgroup_size(1) fn main() { o[0] = 7u; }', entry: 'main' };
    const k = gpu.kernelNow(spec);
    expect(gpu.kernelNow(spec)).toBe(k);
    expect(await gpu.kernel(spec)).toBe(k);
    const other = { ...spec, code: spec.code.replace('7u', '8u') }; // compiled by kernel() first
    const compiled = await gpu.kernel(other);
    expect(compiled).not.toBe(k);
    expect(gpu.kernelNow(other)).toBe(compiled);
    const out = gpu.tensor([1], 'u32', 'now_out');
    await gpu.recorder().dispatch(k, { o: out }, 1).submit();
    expect([...(await gpu.read(out))]).toEqual([7]);
    gpu.kernelNow({ name: 'now_broken', code: '@compute @workgroup_size(1) fn main() { let x: f32 = undefined_thing; }', entry: 'main' });
    await expect(gpu.recorder().dispatch(k, { o: out }, 1).submit()).rejects.toThrow(/now_broken/);
    out.release();
  });

  it('compiles a kernel named with kernelOnUse at its first use, once; a broken one fails the submit after that use', async () => {
    const gpu = await testGpu();
    const spec = { name: 'on_use_ok', code: '@group(0) @binding(0) var<storage, read_write> o: array<u32>;\n@compute @workgroup_size(1) fn main() { o[0] = 9u; }', entry: 'main' };
    let compiles = 0;
    const k = new KernelOnUse(spec.name, () => {
      compiles++;
      return gpu.kernelNow(spec);
    });
    expect(k.name).toBe('on_use_ok');
    expect(compiles).toBe(0);
    const out = gpu.tensor([1], 'u32', 'on_use_out');
    await gpu.recorder().dispatch(k, { o: out }, 1).submit();
    await gpu.recorder().dispatch(k, { o: out }, 1).submit();
    expect(compiles).toBe(1);
    expect(k.id).toBe(gpu.kernelNow(spec).id);
    expect([...(await gpu.read(out))]).toEqual([9]);
    // Named but not used: nothing compiled, so nothing fails.
    const broken = gpu.kernelOnUse({ name: 'on_use_broken', code: '@compute @workgroup_size(1) fn main() { let x: f32 = undefined_thing; }', entry: 'main' });
    expect(broken.name).toBe('on_use_broken');
    await gpu.recorder().dispatch(k, { o: out }, 1).submit();
    void broken.pipeline; // its first use
    await expect(gpu.recorder().dispatch(k, { o: out }, 1).submit()).rejects.toThrow(/on_use_broken/);
    out.release();
  });

  it('submits at flush while a kernel first used there is still being checked: a queue write made next lands after it', async () => {
    const gpu = await testGpu();
    const copy = gpu.kernelOnUse({
      name: 'on_use_copy',
      code: '@group(0) @binding(0) var<storage, read> a: array<u32>;\n@group(0) @binding(1) var<storage, read_write> b: array<u32>;\n@compute @workgroup_size(1) fn main() { b[0] = a[0]; }',
      entry: 'main',
    });
    const a = gpu.upload(new Uint32Array([1]), [1], 'u32', 'on_use_a');
    const b = gpu.tensor([1], 'u32', 'on_use_b');
    const done = gpu.recorder().dispatch(copy, { a, b }, 1).submit();
    gpu.write(a, new Uint32Array([2]));
    await done;
    expect([...(await gpu.read(b))]).toEqual([1]);
    a.release();
    b.release();
  });

  it('reuses a bind group only for the same buffer range and uniform values', async () => {
    const gpu = await testGpu();
    const code = `struct P { v: u32, w: f32 }
@group(0) @binding(0) var<storage, read_write> o: array<u32>;
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3u) { if (g.x < arrayLength(&o)) { o[g.x] = p.v + u32(p.w); } }`;
    const k = await gpu.kernel({ name: 'fill_range', code, entry: 'main', uniforms: { v: 'u32', w: 'f32' } });
    const buf = gpu.tensor([256], 'u32', 'fill_buf');
    const other = gpu.tensor([256], 'u32', 'fill_other');
    const at = (t: Tensor, offset: number, n: number) => new Tensor(t.buffer, [n], 'u32', t.label, t.byteOffset + offset);
    const stats = gpu.bindingCache.stats;
    const rec = gpu.recorder();
    rec.clear(buf);
    rec.clear(other);
    const fill = (t: Tensor, v: number) => rec.dispatch(k, { o: t }, 4, { v, w: 0 });
    fill(at(buf, 0, 64), 1);
    const created = stats.groupsCreated;
    const hits = stats.groupHits;
    fill(at(buf, 0, 64), 1); // a new Tensor over the same range: the same group
    expect([stats.groupsCreated, stats.groupHits]).toEqual([created, hits + 1]);
    fill(at(buf, 256, 64), 2); // another offset
    fill(at(buf, 512, 32), 3); // another offset and size
    fill(at(buf, 768, 16), 4);
    fill(at(buf, 768, 8), 5); // the same offset, a smaller size: words 8..15 keep 4
    fill(at(other, 0, 64), 6); // another buffer at the same range
    rec.dispatch(k, { o: at(other, 256, 64) }, 4, { v: 7, w: 1 }); // uniforms differing in a float
    expect(stats.groupsCreated).toBe(created + 6);
    await rec.submit();
    const a = [...(await gpu.read(buf))];
    const b = [...(await gpu.read(other))];
    const want = (runs: [number, number][]) => runs.flatMap(([v, n]) => new Array<number>(n).fill(v));
    expect(a).toEqual(want([[1, 64], [2, 64], [3, 32], [0, 32], [5, 8], [4, 8], [0, 48]]));
    expect(b).toEqual(want([[6, 64], [8, 64], [0, 128]]));
    buf.release();
    other.release();
  });

  it('replays a captured tape: the same commands and host effects, its buffers held until released', async () => {
    const gpu = await testGpu();
    const ew = await Elementwise.create(gpu);
    const x = gpu.upload([1, 2, 3], [3], 'f32', 'tape_x');
    const y = gpu.upload([10, 20, 30], [3], 'f32', 'tape_y');
    const z = gpu.upload([0, 0, 0], [3], 'f32', 'tape_z');
    let effects = 0;
    const rec = gpu.recorder('tape');
    const step = () => {
      ew.axpy(rec, x, y, 2); // y += 2x
      rec.copy(y, z);
      rec.hostEffect(() => effects++);
      return 'done';
    };
    const { value, tape } = rec.capture(step);
    expect(value).toBe('done');
    expect(effects).toBe(1);
    expect(tape.kernels.size).toBe(1);
    // What the code recorded runs; each replay records it again, host effects included.
    rec.replay(tape).replay(tape);
    expect(effects).toBe(3);
    await rec.submit();
    expect([...(await gpu.readF32(z))]).toEqual([16, 32, 48]);
    // The tape holds what it binds: releasing one of its tensors fails until the tape goes.
    expect(() => y.release()).toThrow(/tape/);
    tape.release();
    expect(() => rec.replay(tape)).toThrow(/released/);
    // Host writes cannot be captured (a replay would not repeat them); the capture fails and holds nothing.
    expect(() => rec.capture(() => gpu.write(x, [0, 0, 0]))).toThrow(/capturing a tape/);
    expect(gpu.taping).toBe(0);
    for (const t of [x, y, z]) t.release();
  });

  it('uploads through a reused write-mapped staging buffer: the data arrives, odd byte counts and views included', async () => {
    const gpu = await testGpu();
    const big = randUniform(70_000, 5);
    for (let round = 0; round < 3; round++) {
      // A view into a larger array: only its own bytes are copied.
      const view = big.subarray(round, 60_000 + round);
      const t = await gpu.uploadMapped(view, [view.length], 'f32', 'pixels');
      expect(await gpu.readF32(t)).toEqual(view);
      t.release();
    }
    const bytes = Uint8Array.from([1, 2, 3, 4, 5]);
    const u = await gpu.uploadMapped(bytes, [5], 'u8', 'odd');
    expect((await gpu.read(u)).slice(0, 5)).toEqual(bytes);
    await expect(gpu.uploadMapped(new Float32Array(9), [8], 'f32', 'short')).rejects.toThrow(BufferAllocationError);
  });

  it('turns a too-large buffer into BufferAllocationError naming the buffer', async () => {
    const gpu = await testGpu();
    const n = Math.floor(gpu.limits.maxBufferSize / 4) + 1024;
    expect(() => gpu.tensor([n], 'f32', 'huge_activations')).toThrow(BufferAllocationError);
    expect(() => gpu.tensor([n], 'f32', 'huge_activations')).toThrow(/huge_activations/);
  });

  it('reports a missing feature as MissingFeatureError naming it', async () => {
    const gpu = await testGpu();
    const { create } = await import('webgpu');
    const instance = create([]);
    const adapter = await requestAdapter(instance);
    const absent = ['shader-f16', 'chromium-experimental-subgroup-matrix'].find((f) => !adapter.features.has(f)) as
      | 'shader-f16'
      | 'chromium-experimental-subgroup-matrix';
    await expect(requestDevice(adapter, { requiredFeatures: [absent] })).rejects.toBeInstanceOf(MissingFeatureError);
    await expect(requestDevice(adapter, { requiredFeatures: [absent] })).rejects.toThrow(absent);
    // The runtime's own check names the feature and what it was needed for.
    const stub = Object.create(gpu, { features: { value: new Set() } }) as typeof gpu;
    expect(() => stub.require('timestamp-query', 'profiling')).toThrow(/timestamp-query.*profiling/);
    expect(instance).toBeTruthy(); // keeps Dawn's instance alive until the test ends
  });

  it('times kernels with timestamp queries', async () => {
    const gpu = await testGpu();
    if (!gpu.has('timestamp-query')) return;
    const ew = await Elementwise.create(gpu);
    const prof = gpu.startProfiling();
    const x = gpu.upload(randUniform(4096, 3), [4096], 'f32', 'x');
    const y = gpu.zeros([4096], 'f32', 'y');
    const rec = gpu.recorder();
    for (let i = 0; i < 3; i++) ew.axpy(rec, x, y, 1);
    await rec.submit();
    gpu.stopProfiling();
    const rows = prof.report();
    expect(rows.find((r) => r.name === 'elementwise.axpy')?.calls).toBe(3);
    expect((await gpu.readF32(y))[7]).toBeCloseTo(3 * (await gpu.readF32(x))[7], 5);
  });

  it("counts each kernel's dispatches in 'pass' mode, and can leave a kernel out, run it as one workgroup or twice in a row (what a kernel costs in stream)", async () => {
    const gpu = await testGpu();
    if (!gpu.has('timestamp-query')) return;
    const ew = await Elementwise.create(gpu);
    const n = 4096;
    const xs = randUniform(n, 5);
    const x = gpu.upload(xs, [n], 'f32', 'x');
    const y = gpu.zeros([n], 'f32', 'y');
    const run = async (omit?: ReadonlySet<Kernel>, shrink?: ReadonlySet<Kernel>, twice?: ReadonlySet<Kernel>) => {
      const prof = gpu.startProfiling('pass', { omit, shrink, twice });
      const rec = gpu.recorder();
      for (let i = 0; i < 3; i++) ew.axpy(rec, x, y, 1);
      await rec.submit();
      gpu.stopProfiling();
      return prof;
    };
    const prof = await run();
    const [[axpy, seen]] = [...prof.dispatched];
    expect(axpy.name).toBe('elementwise.axpy');
    expect(seen.calls).toBe(3);
    expect(seen.grid[0]).toBeGreaterThan(1);
    expect(prof.report().map((r) => r.name)).toEqual(['pass']);
    // Left out: y keeps the first run's 3x, and nothing is counted.
    expect((await run(new Set([axpy]))).dispatched.size).toBe(0);
    let got = await gpu.readF32(y);
    expect(got[0]).toBeCloseTo(3 * xs[0], 5);
    expect(got[n - 1]).toBeCloseTo(3 * xs[n - 1], 5);
    // One workgroup: only its elements grow.
    await run(undefined, new Set([axpy]));
    got = await gpu.readF32(y);
    expect(got[0]).toBeCloseTo(6 * xs[0], 5);
    expect(got[n - 1]).toBeCloseTo(3 * xs[n - 1], 5);
    // Twice: each of the 3 calls adds x two times; its calls are counted once.
    expect((await run(undefined, undefined, new Set([axpy]))).dispatched.get(axpy)?.calls).toBe(3);
    got = await gpu.readF32(y);
    expect(got[0]).toBeCloseTo(12 * xs[0], 5);
    expect(got[n - 1]).toBeCloseTo(9 * xs[n - 1], 5);
    expect(() => gpu.startProfiling('dispatch', { omit: new Set([axpy]) })).toThrow(/pass mode/);
    x.release();
    y.release();
  });

  it("gives the GPU's span from the first stamped begin to the last end: busy time plus the idle between submits", async () => {
    const gpu = await testGpu();
    if (!gpu.has('timestamp-query')) return;
    const ew = await Elementwise.create(gpu);
    const x = gpu.upload(randUniform(4096, 3), [4096], 'f32', 'x');
    const y = gpu.zeros([4096], 'f32', 'y');
    const prof = gpu.startProfiling('pass');
    expect(prof.spanMs()).toBe(0);
    for (let i = 0; i < 2; i++) {
      const rec = gpu.recorder();
      ew.axpy(rec, x, y, 1);
      await rec.submit();
      await gpu.sync();
      // The GPU waits for the host between the two submits.
      if (i === 0) await new Promise((r) => setTimeout(r, 50));
    }
    gpu.stopProfiling();
    const busy = prof.report().reduce((t, r) => t + r.totalMs, 0);
    expect(prof.report()[0].calls).toBe(2);
    expect(prof.spanMs()).toBeGreaterThan(busy + 40);
    gpu.startProfiling('pass');
    gpu.stopProfiling();
    expect(prof.spanMs()).toBe(0);
    x.release();
    y.release();
  });

  it('reports device loss to the caller as DeviceLostError, and refuses work afterwards', async () => {
    const gpu = await createNodeGpu({ driver: process.env.VLRL_VK ?? 'lavapipe' }); // its own device: this one is destroyed
    const seen: DeviceLostError[] = [];
    gpu.onLost((e) => seen.push(e));
    gpu.destroy();
    const err = await gpu.lost;
    expect(err).toBeInstanceOf(DeviceLostError);
    expect(err.reason).toBe('destroyed');
    expect(seen).toEqual([err]);
    expect(() => gpu.tensor([4], 'f32', 'after_loss')).toThrow(DeviceLostError);
  });

  it('templates shader text with #if and {{values}}', () => {
    const src = 'a\n#if F16\nenable f16;\n#else\nx {{N}}\n#endif\nb';
    expect(preprocess(src, { N: 3 }).split('\n').filter((l) => l)).toEqual(['a', 'x 3', 'b']);
    expect(preprocess(src, { F16: true, N: 1 }).split('\n').filter((l) => l)).toEqual(['a', 'enable f16;', 'b']);
    // #include inserts a shader file where active, preprocessed with the same defines.
    const inc = '#if Q\n#include int8_groups\n#endif\nfn f() {}';
    expect(preprocess(inc, { Q: true })).toContain('fn quantize_group(');
    expect(preprocess(inc, {})).not.toContain('quantize_group');
    expect(() => preprocess('#include no_such_file', {})).toThrow(/no shader file/);
    // A file named by two includes goes in once.
    const twice = preprocess('#include q4_format\n#include q4_format\nfn g() {}', {});
    expect(twice.match(/fn scale_of\(/g)).toHaveLength(1);
    // #repeat unrolls its lines with the index as a value, nested, under #if, by a define or a number.
    const rep = '#repeat I N\nr{{I}}\n#if F\n#repeat J 2\nc{{I}}{{J}}\n#endrepeat\n#endif\n#endrepeat\nz';
    expect(preprocess(rep, { N: 2, F: true }).split('\n').filter((l) => l)).toEqual(['r0', 'c00', 'c01', 'r1', 'c10', 'c11', 'z']);
    expect(preprocess(rep, { N: 3 }).split('\n').filter((l) => l)).toEqual(['r0', 'r1', 'r2', 'z']);
    expect(preprocess('#if F\n#repeat I 4\nr{{I}}\n#endrepeat\n#endif\nz', {}).split('\n')).toEqual(['', '', '', '', '', 'z']);
    expect(() => preprocess('#repeat I 2\nr', {})).toThrow(/without #endrepeat/);
    expect(() => preprocess('#endrepeat', {})).toThrow(/without #repeat/);
    expect(() => preprocess('#repeat I M\nr\n#endrepeat', {})).toThrow(/not a whole number/);
  });
});
