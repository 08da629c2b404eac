import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, finiteDifferences, randUniform } from '../helpers/reference';
import { dkvSplitsOf } from '../../src/ops/dkvSplits';
import { Attention, decodeTileFor, tileFor, type AttentionOptions } from '../../src/ops/attention';
import { KvCache } from '../../src/ops/kvCache';
import { int8GroupWords } from '../../src/ops/matmulQ4';
import { gemvGivenAndSelfQuantized } from '../helpers/int8Groups';
import { ShapeError, type Gpu, type Tensor } from '../../src/gpu';

interface Dims {
  hq: number;
  hkv: number;
  D: number;
}

type Arr = ArrayLike<number>;

/**
 * The keys packed row t (of sequence s) attends to: its own sequence's (causal or not), after the
 * shared prompt's [0, prefix) for the rows of every sequence but the prompt's.
 */
function keysOf(t: number, s: number, cu: number[], causal: boolean, prefix: number): number[] {
  const keys: number[] = [];
  if (prefix > 0 && s > 0) for (let j = 0; j < prefix; j++) keys.push(j);
  for (let j = cu[s]; j < (causal ? t + 1 : cu[s + 1]); j++) keys.push(j);
  return keys;
}

/** f64 reference forward over packed sequences: o [T, Hq·D], lse [T, Hq]. */
function cpuForward(q: Arr, k: Arr, v: Arr, { hq, hkv, D }: Dims, cu: number[], causal: boolean, scale: number, prefix = 0) {
  const T = cu[cu.length - 1];
  const G = hq / hkv;
  const o = new Float64Array(T * hq * D);
  const lse = new Float64Array(T * hq);
  for (let s = 0; s + 1 < cu.length; s++) {
    for (let t = cu[s]; t < cu[s + 1]; t++) {
      const keys = keysOf(t, s, cu, causal, prefix);
      for (let h = 0; h < hq; h++) {
        const kh = Math.floor(h / G);
        const sc = keys.map((j) => {
          let dot = 0;
          for (let d = 0; d < D; d++) dot += q[(t * hq + h) * D + d] * k[(j * hkv + kh) * D + d];
          return dot * scale;
        });
        const m = Math.max(...sc);
        let l = 0;
        for (const x of sc) l += Math.exp(x - m);
        lse[t * hq + h] = m + Math.log(l);
        keys.forEach((j, i) => {
          const p = Math.exp(sc[i] - m) / l;
          for (let d = 0; d < D; d++) o[(t * hq + h) * D + d] += p * v[(j * hkv + kh) * D + d];
        });
      }
    }
  }
  return { o, lse };
}

/** f64 reference backward (analytic), row by row: O(T·D) memory like the kernels. */
function cpuBackward(q: Arr, k: Arr, v: Arr, dout: Arr, { hq, hkv, D }: Dims, cu: number[], causal: boolean, scale: number, prefix = 0) {
  const T = cu[cu.length - 1];
  const G = hq / hkv;
  const dq = new Float64Array(T * hq * D);
  const dk = new Float64Array(T * hkv * D);
  const dv = new Float64Array(T * hkv * D);
  for (let s = 0; s + 1 < cu.length; s++) {
    for (let t = cu[s]; t < cu[s + 1]; t++) {
      const keys = keysOf(t, s, cu, causal, prefix);
      for (let h = 0; h < hq; h++) {
        const kh = Math.floor(h / G);
        const qi = (t * hq + h) * D;
        const p = new Float64Array(keys.length);
        const dp = new Float64Array(keys.length);
        let m = -Infinity;
        keys.forEach((j, i) => {
          let dot = 0;
          let dd = 0;
          for (let d = 0; d < D; d++) {
            dot += q[qi + d] * k[(j * hkv + kh) * D + d];
            dd += dout[qi + d] * v[(j * hkv + kh) * D + d];
          }
          p[i] = dot * scale;
          dp[i] = dd;
          m = Math.max(m, dot * scale);
        });
        let l = 0;
        for (let i = 0; i < p.length; i++) l += (p[i] = Math.exp(p[i] - m));
        let delta = 0;
        for (let i = 0; i < p.length; i++) delta += (p[i] /= l) * dp[i];
        keys.forEach((j, i) => {
          const pj = p[i];
          const ds = pj * (dp[i] - delta) * scale;
          const kj = (j * hkv + kh) * D;
          for (let d = 0; d < D; d++) {
            dq[qi + d] += ds * k[kj + d];
            dk[kj + d] += ds * q[qi + d];
            dv[kj + d] += pj * dout[qi + d];
          }
        });
      }
    }
  }
  return { dq, dk, dv };
}

function cuFor(lengths: number[]): number[] {
  const cu = [0];
  for (const n of lengths) cu.push(cu[cu.length - 1] + n);
  return cu;
}

async function read(gpu: Gpu, t: Tensor): Promise<Float32Array> {
  return gpu.readF32(t);
}

/** Uploads packed random q, k, v, runs the forward (with lse) and returns inputs and outputs. */
async function runForward(gpu: Gpu, dims: Dims, lengths: number[], causal: boolean, seed: number, opts?: AttentionOptions, sharedPrefix = 0) {
  const { hq, hkv, D } = dims;
  const cu = cuFor(lengths);
  const T = cu[cu.length - 1];
  const scale = 1 / Math.sqrt(D);
  const q = randUniform(T * hq * D, seed);
  const k = randUniform(T * hkv * D, seed + 1);
  const v = randUniform(T * hkv * D, seed + 2);
  const att = await Attention.create(gpu, { hq, hkv, headDim: D }, opts);
  const t = {
    q: gpu.upload(q, [T, hq * D], 'f32', 'q'),
    k: gpu.upload(k, [T, hkv * D], 'f32', 'k'),
    v: gpu.upload(v, [T, hkv * D], 'f32', 'v'),
    cuSeqlens: gpu.upload(new Uint32Array(cu), [cu.length], 'u32', 'cu_seqlens'),
    o: gpu.tensor([T, hq * D], 'f32', 'o'),
    lse: gpu.tensor([T, hq], 'f32', 'lse'),
  };
  const rec = gpu.recorder();
  att.forward(rec, { ...t, causal, scale, sharedPrefix });
  await rec.submit();
  return { att, cu, T, scale, q, k, v, t, o: await read(gpu, t.o), lse: await read(gpu, t.lse) };
}

function releaseAll(ts: Record<string, Tensor>): void {
  for (const t of Object.values(ts)) t.release();
}

describe('attention forward (packed sequences)', () => {
  const cases: [string, Dims, number[], boolean][] = [
    ['T=1, GQA 2/1, D=8', { hq: 2, hkv: 1, D: 8 }, [1], true],
    ['T=5, GQA 4/2, D=16', { hq: 4, hkv: 2, D: 16 }, [5], true],
    ['T=33, MHA 3/3, D=64', { hq: 3, hkv: 3, D: 64 }, [33], true],
    ['3 packed sequences 5+1+27, GQA 4/2, D=8', { hq: 4, hkv: 2, D: 8 }, [5, 1, 27], true],
    ['D=12 (not a power of two), GQA 6/2', { hq: 6, hkv: 2, D: 12 }, [19], true],
    ['vision: 3 images 16+9+20, bidirectional, 2 heads, D=64', { hq: 2, hkv: 2, D: 64 }, [16, 9, 20], false],
    ['vision: 2 images 7+33, bidirectional, GQA 4/2, D=16', { hq: 4, hkv: 2, D: 16 }, [7, 33], false],
  ];
  for (const [name, dims, lengths, causal] of cases) {
    it(`matches the f64 reference: ${name}`, async () => {
      const gpu = await testGpu();
      const r = await runForward(gpu, dims, lengths, causal, 11 * lengths.length + dims.D);
      const ref = cpuForward(r.q, r.k, r.v, dims, r.cu, causal, r.scale);
      expectClose(r.o, ref.o, { rtol: 1e-4, atol: 2e-6, what: `o ${name}` });
      expectClose(r.lse, ref.lse, { rtol: 1e-5, atol: 2e-6, what: `lse ${name}` });
      releaseAll(r.t);
    });
  }

  it('keeps images apart: changing one image leaves the others unchanged', async () => {
    const gpu = await testGpu();
    const dims = { hq: 2, hkv: 2, D: 8 };
    const r = await runForward(gpu, dims, [6, 10], false, 5);
    const k2 = r.k.slice();
    for (let i = 6 * dims.hkv * dims.D; i < k2.length; i++) k2[i] = -k2[i];
    gpu.write(r.t.k, k2);
    const rec = gpu.recorder();
    r.att.forward(rec, { ...r.t, causal: false, scale: r.scale });
    await rec.submit();
    const o2 = await read(gpu, r.t.o);
    const first = 6 * dims.hq * dims.D;
    expect(Array.from(o2.subarray(0, first))).toEqual(Array.from(r.o.subarray(0, first)));
    expect(Array.from(o2.subarray(first))).not.toEqual(Array.from(r.o.subarray(first)));
    releaseAll(r.t);
  });

  it('rejects bad shapes with ShapeError', async () => {
    const gpu = await testGpu();
    await expect(Attention.create(gpu, { hq: 3, hkv: 2, headDim: 8 })).rejects.toBeInstanceOf(ShapeError);
    await expect(Attention.create(gpu, { hq: 2, hkv: 1, headDim: 300 })).rejects.toBeInstanceOf(ShapeError);
    const att = await Attention.create(gpu, { hq: 2, hkv: 1, headDim: 8 });
    const q = gpu.tensor([4, 16], 'f32', 'q');
    const kBad = gpu.tensor([4, 16], 'f32', 'k');
    const cu = gpu.upload(new Uint32Array([0, 4]), [2], 'u32', 'cu');
    expect(() => att.forward(gpu.recorder(), { q, k: kBad, v: kBad, o: q, cuSeqlens: cu, causal: true, scale: 1 })).toThrow(/attention_fwd.*'k'/);
    releaseAll({ q, kBad, cu });
  });
});

/**
 * Model steps over a KV cache with random q/k/v, every layer; remembers the rows each slot
 * received (hist) and the outputs it got (got), for the f64 reference in `check`.
 */
function cachedRun(gpu: Gpu, att: Attention, cache: KvCache, dims: Dims, scale: number, workspace: Tensor, seed0: number) {
  const { hq, hkv, D } = dims;
  const { layers, slots } = cache.config;
  const hist = Array.from({ length: layers }, () => Array.from({ length: slots }, () => ({ q: [] as number[], k: [] as number[], v: [] as number[] })));
  const got = Array.from({ length: layers }, () => Array.from({ length: slots }, () => [] as number[]));
  let seed = seed0;
  /** One model step over slots [slot0, slot0 + count), n rows each, every layer; split-K with chunks. */
  const step = async (slot0: number, count: number, n: number, chunks?: number) => {
    const rows = count * n;
    const rec = gpu.recorder();
    const temps: Tensor[] = [];
    const outs: Tensor[] = [];
    for (let l = 0; l < layers; l++) {
      const q = randUniform(rows * hq * D, seed++);
      const k = randUniform(rows * hkv * D, seed++);
      const v = randUniform(rows * hkv * D, seed++);
      for (let b = 0; b < count; b++) {
        const h = hist[l][slot0 + b];
        h.q.push(...q.subarray(b * n * hq * D, (b + 1) * n * hq * D));
        h.k.push(...k.subarray(b * n * hkv * D, (b + 1) * n * hkv * D));
        h.v.push(...v.subarray(b * n * hkv * D, (b + 1) * n * hkv * D));
      }
      const tq = gpu.upload(q, [rows, hq * D], 'f32', 'q');
      const tk = gpu.upload(k, [rows, hkv * D], 'f32', 'k_new');
      const tv = gpu.upload(v, [rows, hkv * D], 'f32', 'v_new');
      const to = gpu.tensor([rows, hq * D], 'f32', 'o');
      cache.append(rec, l, tk, tv, slot0, count);
      att.forwardCached(rec, tq, cache, l, to, { slot0, count, scale, split: chunks ? { workspace, chunks } : undefined });
      temps.push(tq, tk, tv);
      outs.push(to);
    }
    cache.advance(rec, slot0, count, n);
    await rec.submit();
    for (let l = 0; l < layers; l++) {
      const o = await read(gpu, outs[l]);
      for (let b = 0; b < count; b++) got[l][slot0 + b].push(...o.subarray(b * n * hq * D, (b + 1) * n * hq * D));
    }
    for (const t of [...temps, ...outs]) t.release();
  };
  /** Slots `to` continue from slot `from`'s history (after a fork or share). */
  const inherit = (from: number, to: readonly number[]) => {
    for (let l = 0; l < layers; l++) {
      for (const s of to) {
        const src = hist[l][from];
        hist[l][s] = { q: src.q.slice(), k: src.k.slice(), v: src.v.slice() };
        got[l][s] = got[l][from].slice();
      }
    }
  };
  /** Every output so far equals one full causal pass over each slot's rows. */
  const check = () => {
    for (let l = 0; l < layers; l++) {
      for (let s = 0; s < slots; s++) {
        const h = hist[l][s];
        const T = h.k.length / (hkv * D);
        const ref = cpuForward(h.q, h.k, h.v, dims, [0, T], true, scale);
        expectClose(got[l][s], ref.o, { rtol: 1e-4, atol: 2e-6, what: `layer ${l} slot ${s}` });
      }
    }
  };
  return { hist, step, inherit, check };
}

describe('attention over a KV cache', () => {
  it('prefill, fork, uneven prefill, then batched decode equal one full causal pass per sequence (2 layers)', async () => {
    const gpu = await testGpu();
    const dims = { hq: 4, hkv: 2, D: 16 };
    const { hq, hkv, D } = dims;
    const scale = 1 / Math.sqrt(D);
    const layers = 2;
    const slots = 3;
    const att = await Attention.create(gpu, { hq, hkv, headDim: D });
    const cache = await KvCache.create(gpu, { layers, slots, capacity: 40, hkv, headDim: D });
    const workspace = gpu.tensor(att.splitWorkspaceShape(slots, 64), 'f32', 'split_workspace');
    // Per layer and slot, the q/k/v rows each sequence received (the reference replays them).
    const { hist, step, inherit, check } = cachedRun(gpu, att, cache, dims, scale, workspace, 100);

    await step(0, 1, 20); // prefill the prompt into slot 0 (more than one 16-key tile)
    const rec = gpu.recorder();
    cache.fork(rec, 0, [1, 2], 20);
    await rec.submit();
    inherit(0, [1, 2]);
    await step(2, 1, 3); // slot 2 gets 3 more rows: the batch below has lengths 20, 20, 23
    expect(cache.past).toEqual([20, 20, 23]);
    // Decode without split-K, then split in 2, 3 and 64 chunks (of 16 keys at least: the last empty).
    for (const chunks of [undefined, 2, 3, 64, 1]) await step(0, 3, 1, chunks);
    await step(1, 2, 1, Attention.decodeChunks(cache.past[2] + 1)); // a sub-range of the slots
    expect(cache.past).toEqual([25, 26, 29]);
    expect(Array.from(await gpu.read(cache.lengths))).toEqual([25, 26, 29]);
    check();
    // The cache holds exactly the rows each sequence received.
    const kc = await read(gpu, cache.k[1]);
    const rowLen = hkv * D;
    expectClose(kc.subarray(40 * rowLen, 40 * rowLen + hist[1][1].k.length), hist[1][1].k, { rtol: 0, atol: 0, what: 'forked k rows' });

    // A step past the capacity (40) is refused before anything is recorded.
    const big = gpu.tensor([3 * 12, hkv * D], 'f32', 'k_new');
    expect(() => cache.append(gpu.recorder(), 0, big, big, 0, 3)).toThrow(/slot 2 holds 29 positions; 12 more exceed its capacity 40/);
    expect(() =>
      att.forwardCached(gpu.recorder(), gpu.tensor([3, hq * D], 'f32', 'q'), cache, 0, gpu.tensor([3, hq * D], 'f32', 'o'), {
        slot0: 0,
        count: 3,
        scale,
        split: { workspace, chunks: 65 },
      }),
    ).toThrow(ShapeError);
    big.release();
    workspace.release();
    cache.release();
  });

  it('shared prefix (share, no copy): 8 sequences, sub-ranges, 2 new rows (prefix tasks of 4 sequences), chunk counts 1 to 64 over an odd prompt', async () => {
    const gpu = await testGpu();
    const dims = { hq: 4, hkv: 2, D: 16 };
    const { hkv, D } = dims;
    const scale = 0.4;
    const slots = 8;
    const all = Array.from({ length: slots }, (_, s) => s);
    const att = await Attention.create(gpu, { hq: dims.hq, hkv, headDim: D });
    const cache = await KvCache.create(gpu, { layers: 1, slots, capacity: 48, hkv, headDim: D });
    const workspace = gpu.tensor(att.splitWorkspaceShape(2 * slots, 64), 'f32', 'split_workspace');
    const { step, inherit, check } = cachedRun(gpu, att, cache, dims, scale, workspace, 700);
    await step(0, 1, 37); // the prompt, into slot 0
    // NaN where a copy of the prompt would go: attention must read slot 0's rows instead.
    const rowLen = hkv * D;
    for (const t of [cache.k[0], cache.v[0]]) {
      const x = await read(gpu, t);
      x.fill(NaN, 48 * rowLen);
      gpu.write(t, x);
    }
    let rec = gpu.recorder();
    cache.share(rec, 0, all, 37);
    await rec.submit();
    inherit(0, all.slice(1));
    expect(Array.from(await gpu.read(cache.lengths))).toEqual(all.map(() => 37));
    // Unsplit; own chunks only (1); prefix + own chunks (2, 7; 64: most prefix chunks hold 1 key or
    // none; generate's count: 2 prefix chunks of 19 keys, the own keys in 2).
    expect(Attention.sharedDecodeChunks(37, 48 - 37)).toBe(4);
    for (const chunks of [undefined, 1, 2, 7, 64, Attention.sharedDecodeChunks(37, 48 - 37)]) await step(0, slots, 1, chunks);
    await step(2, 3, 1, 5); // 3 sequences: one prefix task of 6 rows
    await step(5, 1, 1, 3); // one sequence over slot 0's prefix
    await step(0, slots, 2, 4); // n·G = 4 rows a sequence: prefix tasks of 4 sequences
    check();
    expect(Number.isNaN((await read(gpu, cache.k[0]))[48 * rowLen])).toBe(true); // slot 1's position 0: never written

    rec = gpu.recorder();
    cache.reset(rec, 7, 1); // slot 7 stops sharing
    const q = gpu.tensor([2, dims.hq * D], 'f32', 'q');
    expect(() => att.forwardCached(gpu.recorder(), q, cache, 0, q, { slot0: 6, count: 2, scale })).toThrow(/mix slots that share a prefix/);
    expect(() => cache.reset(gpu.recorder(), 0, 1)).toThrow(/slot 0 holds the prefix that slots \[1, 2, 3, 4, 5, 6\] share/);
    expect(() => cache.fork(gpu.recorder(), 1, [7], 10)).toThrow(/slot 1 reads its first 37 positions from slot 0/);
    expect(() => cache.share(gpu.recorder(), 0, [7], 10)).toThrow(/still share a prefix/);
    cache.reset(rec); // every slot: the share ends
    cache.share(rec, 0, [], 0);
    await rec.submit();
    q.release();
    workspace.release();
    cache.release();
  });

  it('head_dim 128 (the model\'s heads) over several key blocks: one sequence and four sharing a prompt, unsplit and split', async () => {
    const gpu = await testGpu();
    const dims = { hq: 4, hkv: 2, D: 128 };
    const { hkv, D } = dims;
    const slots = 4;
    const all = Array.from({ length: slots }, (_, s) => s);
    const att = await Attention.create(gpu, { hq: dims.hq, hkv, headDim: D });
    const cache = await KvCache.create(gpu, { layers: 1, slots, capacity: 80, hkv, headDim: D });
    const workspace = gpu.tensor(att.splitWorkspaceShape(slots, 64), 'f32', 'split_workspace');
    const { step, inherit, check } = cachedRun(gpu, att, cache, dims, 1 / Math.sqrt(D), workspace, 1100);
    await step(0, 1, 70); // the prompt: several blocks of keys for the decode below
    // One sequence, then four sharing a prompt. With 48 KiB of workgroup memory their layouts load
    // the next block of keys during this one; within lavapipe's limit, narrower ones a block at a time.
    await step(0, 1, 1);
    await step(0, 1, 1, 2);
    const rec = gpu.recorder();
    cache.share(rec, 0, all, 72);
    await rec.submit();
    inherit(0, all.slice(1));
    for (const chunks of [undefined, 3, 5]) await step(0, slots, 1, chunks);
    check();
    workspace.release();
    cache.release();
  });

  it('a cache made with a prefix stores the prompt once: P + slots·(capacity − P) rows, the same attention, no fork', async () => {
    const gpu = await testGpu();
    const dims = { hq: 4, hkv: 2, D: 16 };
    const { hkv, D } = dims;
    const scale = 0.4;
    const slots = 8;
    const P = 37;
    const all = Array.from({ length: slots }, (_, s) => s);
    const att = await Attention.create(gpu, { hq: dims.hq, hkv, headDim: D });
    const cache = await KvCache.create(gpu, { layers: 2, slots, capacity: 48, hkv, headDim: D, prefix: P });
    expect(cache.k[0].shape).toEqual([P + slots * 11, hkv * D]);
    expect(cache.stride).toBe(11);
    const workspace = gpu.tensor(att.splitWorkspaceShape(3 * slots, 64), 'f32', 'split_workspace');
    const { step, inherit, check } = cachedRun(gpu, att, cache, dims, scale, workspace, 900);
    await step(0, 1, P); // the prompt, into slot 0
    // Before the share, no slot but 0 has rows for positions below P.
    expect(() => cache.append(gpu.recorder(), 0, gpu.tensor([1, hkv * D], 'f32', 'k'), gpu.tensor([1, hkv * D], 'f32', 'v'), 3, 1)).toThrow(/slot 3 has no rows of its own for positions below 37/);
    expect(() => cache.fork(gpu.recorder(), 0, [1], P)).toThrow(/does not copy it/);
    expect(() => cache.share(gpu.recorder(), 0, all, P - 1)).toThrow(/at least its 37 positions of slot 0/);
    const rec = gpu.recorder();
    cache.share(rec, 0, all, P);
    await rec.submit();
    inherit(0, all.slice(1));
    // Up to a slot's capacity (11 positions of its own), unsplit and split, some a sub-range.
    for (const chunks of [undefined, 1, 2, 7]) await step(0, slots, 1, chunks);
    await step(2, 3, 2, 5);
    await step(0, slots, 2, 4);
    await step(7, 1, 3, 3);
    await step(0, 7, 3, 64);
    expect(cache.past).toEqual([46, 46, 48, 48, 48, 46, 46, 46]);
    check();
    expect(() => cache.append(gpu.recorder(), 0, gpu.tensor([1, hkv * D], 'f32', 'k'), gpu.tensor([1, hkv * D], 'f32', 'v'), 2, 1)).toThrow(/slot 2 holds 48 positions; 1 more exceed its capacity 48/);
    workspace.release();
    cache.release();
  });

  it('decode with one kv head per query head and D=64 (vision-size heads), T=1 prompt', async () => {
    const gpu = await testGpu();
    const dims = { hq: 3, hkv: 3, D: 64 };
    const { hq, hkv, D } = dims;
    const scale = 0.3;
    const att = await Attention.create(gpu, { hq, hkv, headDim: D });
    const cache = await KvCache.create(gpu, { layers: 1, slots: 1, capacity: 4, hkv, headDim: D });
    const T = 4;
    const q = randUniform(T * hq * D, 1);
    const k = randUniform(T * hkv * D, 2);
    const v = randUniform(T * hkv * D, 3);
    const out: number[] = [];
    for (let t = 0; t < T; t++) {
      const tq = gpu.upload(q.subarray(t * hq * D, (t + 1) * hq * D), [1, hq * D], 'f32', 'q');
      const tk = gpu.upload(k.subarray(t * hkv * D, (t + 1) * hkv * D), [1, hkv * D], 'f32', 'k');
      const tv = gpu.upload(v.subarray(t * hkv * D, (t + 1) * hkv * D), [1, hkv * D], 'f32', 'v');
      const to = gpu.tensor([1, hq * D], 'f32', 'o');
      const rec = gpu.recorder();
      cache.append(rec, 0, tk, tv, 0, 1);
      att.forwardCached(rec, tq, cache, 0, to, { slot0: 0, count: 1, scale });
      cache.advance(rec, 0, 1, 1);
      await rec.submit();
      out.push(...(await read(gpu, to)));
      releaseAll({ tq, tk, tv, to });
    }
    expectClose(out, cpuForward(q, k, v, dims, [0, T], true, scale).o, { rtol: 1e-4, atol: 2e-6, what: 'decode' });
    expect(() => cache.checkBatch('x', 0, 1, 1)).toThrow(ShapeError);
    const rec = gpu.recorder();
    cache.reset(rec);
    await rec.submit();
    expect(Array.from(await gpu.read(cache.lengths))).toEqual([0]);
    cache.release();
  });
});

/** The backward's tensors for T rows: dout uploaded from `w`, the workspace and the gradients. */
function backwardTensors(gpu: Gpu, { hq, hkv, D }: Dims, T: number, w: Float32Array) {
  return {
    dout: gpu.upload(w, [T, hq * D], 'f32', 'dout'),
    rowStats: gpu.tensor(Attention.rowStatsShape(T, hq), 'f32', 'row_stats'),
    dq: gpu.tensor([T, hq * D], 'f32', 'dq'),
    dk: gpu.tensor([T, hkv * D], 'f32', 'dk'),
    dv: gpu.tensor([T, hkv * D], 'f32', 'dv'),
  };
}

/** Runs forward (for o, lse) then backward on the GPU with dout = w; returns the gradients. */
async function runBackward(gpu: Gpu, dims: Dims, lengths: number[], causal: boolean, seed: number, opts?: AttentionOptions, sharedPrefix = 0) {
  const f = await runForward(gpu, dims, lengths, causal, seed, opts, sharedPrefix);
  const { hq, D } = dims;
  const T = f.T;
  const w = randUniform(T * hq * D, seed + 3);
  const t = backwardTensors(gpu, dims, T, w);
  const rec = gpu.recorder();
  f.att.backward(rec, { ...f.t, ...t, causal, scale: f.scale, sharedPrefix });
  await rec.submit();
  const out = { dq: await read(gpu, t.dq), dk: await read(gpu, t.dk), dv: await read(gpu, t.dv) };
  releaseAll(t);
  releaseAll(f.t);
  return { ...f, w, ...out };
}

describe('attention backward', () => {
  const cases: [string, Dims, number[], boolean][] = [
    ['T=1, GQA 2/1, D=8', { hq: 2, hkv: 1, D: 8 }, [1], true],
    ['T=5, GQA 2/1, D=8', { hq: 2, hkv: 1, D: 8 }, [5], true],
    ['T=33, GQA 4/2, D=16', { hq: 4, hkv: 2, D: 16 }, [33], true],
    ['T=33, MHA 3/3, D=64', { hq: 3, hkv: 3, D: 64 }, [33], true],
    ['packed 9+1+23, GQA 4/2, D=16', { hq: 4, hkv: 2, D: 16 }, [9, 1, 23], true],
    ['bidirectional 7+12, GQA 2/1, D=8', { hq: 2, hkv: 1, D: 8 }, [7, 12], false],
  ];
  for (const [name, dims, lengths, causal] of cases) {
    it(`matches the f64 analytic gradient: ${name}`, async () => {
      const gpu = await testGpu();
      const r = await runBackward(gpu, dims, lengths, causal, 7 * dims.D + lengths.length);
      const ref = cpuBackward(r.q, r.k, r.v, r.w, dims, r.cu, causal, r.scale);
      for (const g of ['dq', 'dk', 'dv'] as const) {
        expectClose(r[g], ref[g], { rtol: 1e-4, atol: 1e-5, what: `${g} ${name}` });
      }
    });
  }

  it('equals finite differences of the forward (GPU and the CPU analytic reference)', async () => {
    const gpu = await testGpu();
    const dims = { hq: 4, hkv: 2, D: 8 };
    const lengths = [3, 6];
    const causal = true;
    const r = await runBackward(gpu, dims, lengths, causal, 3);
    const ref = cpuBackward(r.q, r.k, r.v, r.w, dims, r.cu, causal, r.scale);
    const loss = (q: Arr, k: Arr, v: Arr) => {
      const { o } = cpuForward(q, k, v, dims, r.cu, causal, r.scale);
      let s = 0;
      for (let i = 0; i < o.length; i++) s += o[i] * r.w[i];
      return s;
    };
    const fd = {
      dq: finiteDifferences((x) => loss(x, r.k, r.v), r.q),
      dk: finiteDifferences((x) => loss(r.q, x, r.v), r.k),
      dv: finiteDifferences((x) => loss(r.q, r.k, x), r.v),
    };
    for (const g of ['dq', 'dk', 'dv'] as const) {
      expectClose(ref[g], fd[g], { rtol: 1e-6, atol: 1e-8, what: `cpu ${g} vs finite differences` });
      expectClose(r[g], fd[g], { rtol: 1e-4, atol: 1e-5, what: `gpu ${g} vs finite differences` });
    }
  });

  it('trains on T = 2048 (1 kv head, 2 query heads, D=16) in O(T·D) memory', async () => {
    const gpu = await testGpu();
    const dims = { hq: 2, hkv: 1, D: 16 };
    const T = 2048;
    const r = await runBackward(gpu, dims, [T], true, 42);
    const ref = cpuBackward(r.q, r.k, r.v, r.w, dims, r.cu, true, r.scale);
    const fwd = cpuForward(r.q, r.k, r.v, dims, r.cu, true, r.scale);
    // Every row is checked; the sample printed on failure is the worst one.
    expectClose(r.o, fwd.o, { rtol: 1e-4, atol: 1e-5, what: 'o, T=2048' });
    expectClose(r.lse, fwd.lse, { rtol: 1e-5, atol: 1e-5, what: 'lse, T=2048' });
    for (const g of ['dq', 'dk', 'dv'] as const) expectClose(r[g], ref[g], { rtol: 1e-4, atol: 1e-5, what: `${g}, T=2048` });
  }, 120_000);
});

describe('attention with a shared prefix (a prompt, then its completions)', () => {
  // [prompt, completion lengths...], dims, causal, workgroup budget. With G = 2 a 32-row tile
  // holds 16 tokens, so tiles straddle the prompt's end and the completions' boundaries.
  const cases: [string, Dims, number[], boolean, number?][] = [
    ['prompt 20, completions 7+1+13, GQA 4/2, D=16', { hq: 4, hkv: 2, D: 16 }, [20, 7, 1, 13], true],
    ['prompt 37, completions 40+3+25, GQA 4/2, D=128', { hq: 4, hkv: 2, D: 128 }, [37, 40, 3, 25], true],
    ['prompt 1, completions 1+1, GQA 2/1, D=8', { hq: 2, hkv: 1, D: 8 }, [1, 1, 1], true],
    ['prompt 9, completions 5+17, small tiles (8 KiB), GQA 4/2, D=64', { hq: 4, hkv: 2, D: 64 }, [9, 5, 17], true, 8192],
    ['bidirectional: prompt 6, completions 4+5, GQA 2/1, D=8', { hq: 2, hkv: 1, D: 8 }, [6, 4, 5], false],
  ];
  for (const [name, dims, lengths, causal, budget] of cases) {
    it(`matches the f64 reference, forward and backward: ${name}`, async () => {
      const gpu = await testGpu();
      const r = await runBackward(gpu, dims, lengths, causal, 11 * dims.D + lengths.length, budget ? { workgroupBytes: budget } : undefined, lengths[0]);
      const fwd = cpuForward(r.q, r.k, r.v, dims, r.cu, causal, r.scale, lengths[0]);
      expectClose(r.o, fwd.o, { rtol: 1e-4, atol: 1e-5, what: `o ${name}` });
      expectClose(r.lse, fwd.lse, { rtol: 1e-5, atol: 1e-5, what: `lse ${name}` });
      const ref = cpuBackward(r.q, r.k, r.v, r.w, dims, r.cu, causal, r.scale, lengths[0]);
      for (const g of ['dq', 'dk', 'dv'] as const) expectClose(r[g], ref[g], { rtol: 1e-4, atol: 2e-5, what: `${g} ${name}` });
    });
  }

  it('equals the kernels on every completion after its own copy of the prompt, the prompt\'s dk and dv summed over the copies', async () => {
    const gpu = await testGpu();
    const dims = { hq: 4, hkv: 2, D: 16 };
    const { hq, hkv, D } = dims;
    const P = 19;
    const comp = [6, 14, 1];
    const shared = await runBackward(gpu, dims, [P, ...comp], true, 5, undefined, P);
    // The same rows laid out as prompt + completion_i, sequence after sequence.
    const Tc = comp.reduce((a, n) => a + P + n, 0);
    const rowsOf = (i: number) => {
      const first = P + comp.slice(0, i).reduce((a, n) => a + n, 0);
      return [...Array.from({ length: P }, (_, j) => j), ...Array.from({ length: comp[i] }, (_, j) => first + j)];
    };
    const layout = comp.flatMap((_, i) => rowsOf(i)); // copy row -> shared row
    const pick = (src: Float32Array, width: number) => {
      const out = new Float32Array(Tc * width);
      layout.forEach((r, i) => out.set(src.subarray(r * width, (r + 1) * width), i * width));
      return out;
    };
    // A later copy of a prompt row (it gets no dO here, so that the prompt's gradient counts once).
    const laterCopy = (i: number) => layout[i] < P && i >= P + comp[0];
    const dout = pick(shared.w, hq * D);
    layout.forEach((_, i) => laterCopy(i) && dout.fill(0, i * hq * D, (i + 1) * hq * D));
    const att = shared.att;
    const cu = [0];
    for (const n of comp) cu.push(cu[cu.length - 1] + P + n);
    const t = {
      q: gpu.upload(pick(shared.q, hq * D), [Tc, hq * D], 'f32', 'q'),
      k: gpu.upload(pick(shared.k, hkv * D), [Tc, hkv * D], 'f32', 'k'),
      v: gpu.upload(pick(shared.v, hkv * D), [Tc, hkv * D], 'f32', 'v'),
      cuSeqlens: gpu.upload(new Uint32Array(cu), [cu.length], 'u32', 'cu'),
      o: gpu.tensor([Tc, hq * D], 'f32', 'o'),
      lse: gpu.tensor([Tc, hq], 'f32', 'lse'),
      ...backwardTensors(gpu, dims, Tc, dout),
    };
    const rec = gpu.recorder();
    att.forward(rec, { ...t, causal: true, scale: shared.scale });
    att.backward(rec, { ...t, causal: true, scale: shared.scale });
    await rec.submit();
    const [o, dq, dk, dv] = await Promise.all([t.o, t.dq, t.dk, t.dv].map((x) => read(gpu, x)));
    // o: every copy of a row equals the shared row; dq likewise, but for the later copies of the
    // prompt, which get no dO here.
    layout.forEach((r, i) => {
      expectClose(o.subarray(i * hq * D, (i + 1) * hq * D), shared.o.subarray(r * hq * D, (r + 1) * hq * D), { rtol: 1e-5, atol: 1e-6, what: `o of copy row ${i}` });
      if (!laterCopy(i)) expectClose(dq.subarray(i * hq * D, (i + 1) * hq * D), shared.dq.subarray(r * hq * D, (r + 1) * hq * D), { rtol: 1e-4, atol: 1e-5, what: `dq of copy row ${i}` });
    });
    // dk, dv of a shared row: the sum over its copies.
    for (const [got, want, what] of [[dk, shared.dk, 'dk'], [dv, shared.dv, 'dv']] as const) {
      const sum = new Float64Array(want.length);
      layout.forEach((r, i) => {
        for (let d = 0; d < hkv * D; d++) sum[r * hkv * D + d] += got[i * hkv * D + d];
      });
      expectClose(want, sum, { rtol: 1e-4, atol: 1e-5, what: `${what} vs the copies' sum` });
    }
    releaseAll(t);
  });

  it('sizes split decode over a shared prefix: chunks of 32 prefix keys, and the own keys in at least 2 of at most 128, 64 in all at most; and generation\'s', () => {
    expect(Attention.sharedDecodeChunks(512, 256)).toBe(18);
    expect(Attention.sharedDecodeChunks(512, 128)).toBe(18);
    expect(Attention.sharedDecodeChunks(500, 1000)).toBe(24);
    expect(Attention.sharedDecodeChunks(1, 1)).toBe(3);
    expect(Attention.sharedDecodeChunks(4096, 256)).toBe(64);
    // Generation: unsplit up to 64 keys; one sequence in chunks of 64; several over their shared prompt.
    expect(Attention.generateChunks(40, 24, 8)).toBe(1);
    expect(Attention.generateChunks(512, 256, 1)).toBe(12);
    expect(Attention.generateChunks(512, 256, 8)).toBe(18);
  });

  it("walks a prefix key tile's queries in chunks about an own tile's walk long, at most 8", () => {
    expect(dkvSplitsOf(2560, 512, 9)).toBe(8); // the default config: 512 + 8 x 256
    expect(dkvSplitsOf(2144, 96, 9)).toBe(8); // the benchmark's group: 96 + 8 x 256
    expect(dkvSplitsOf(41, 20, 4)).toBe(4);
    expect(dkvSplitsOf(1024, 512, 3)).toBe(3); // two completions of 256
    expect(dkvSplitsOf(300, 0, 2)).toBe(1); // no prefix
    expect(dkvSplitsOf(20, 20, 1)).toBe(1); // only the prompt
  });

  it('rejects a prefix that is not the first of two or more sequences', async () => {
    const gpu = await testGpu();
    const dims = { hq: 2, hkv: 1, D: 8 };
    await expect(runForward(gpu, dims, [4], true, 1, undefined, 2)).rejects.toThrow(ShapeError);
    await expect(runForward(gpu, dims, [4, 3], true, 1, undefined, 7)).rejects.toThrow(/sharedPrefix 7/);
    await expect(runForward(gpu, dims, [4, 3], true, 1, undefined, 1.5)).rejects.toThrow(ShapeError);
  });
});

describe('attention tiles', () => {
  it('picks tiles that fit the workgroup memory budget, down to 16 KiB at head_dim 256', () => {
    const lim = (bytes: number) => ({ maxComputeWorkgroupStorageSize: bytes, maxComputeInvocationsPerWorkgroup: 256 });
    expect(tileFor(lim(49152), 128, 'forward')).toEqual({ BO: 32, BI: 16, WG: 256, CLN: 32 });
    expect(tileFor(lim(49152), 128, 'backward')).toEqual({ BO: 16, BI: 16, WG: 128, CLN: 32 });
    // A device of 128 threads a workgroup keeps the forward's tile with fewer threads.
    expect(tileFor({ maxComputeWorkgroupStorageSize: 49152, maxComputeInvocationsPerWorkgroup: 128 }, 128, 'forward')).toEqual({ BO: 32, BI: 16, WG: 128, CLN: 32 });
    // Decode's two layouts (a sequence's own rows; several sequences' over a shared prefix).
    expect(decodeTileFor(lim(49152), 128, 8)).toEqual({ RMAX: 8, KB: 32, DWG: 256, PCL: 32 });
    expect(decodeTileFor(lim(49152), 128, 16)).toEqual({ RMAX: 16, KB: 32, DWG: 256, PCL: 32 });
    for (const D of [1, 12, 64, 128, 256]) {
      for (const pass of ['forward', 'backward'] as const) {
        const t = tileFor(lim(16384), D, pass);
        expect(t.WG % t.BO).toBe(0);
        expect(t.BI % (t.WG / t.BO)).toBe(0);
        expect((t.BO * t.CLN) % t.WG).toBe(0);
      }
      expect(decodeTileFor(lim(16384), D, 8).RMAX).toBe(8);
    }
    expect(tileFor(lim(16384), 256, 'forward').BO).toBeLessThan(32);
    // A preferred tile (the vision tower's) where it fits, else the usual pick; a malformed one is refused.
    expect(tileFor(lim(49152), 64, 'forward', [32, 16, 128])).toEqual({ BO: 32, BI: 16, WG: 128, CLN: 16 });
    expect(tileFor(lim(16384), 128, 'forward', [32, 16, 128])).toEqual(tileFor(lim(16384), 128, 'forward'));
    expect(() => tileFor(lim(49152), 64, 'forward', [32, 2, 128])).toThrow(/must divide BI/);
  });

  it('small tiles (8 KiB budget) match the f64 reference, forward and backward: packed 20+17, GQA 4/2, D=64', async () => {
    const gpu = await testGpu();
    const dims = { hq: 4, hkv: 2, D: 64 };
    const lengths = [20, 17];
    const r = await runBackward(gpu, dims, lengths, true, 9, { workgroupBytes: 8192 });
    expect(r.att.forwardTile.BO).toBeLessThan(16);
    expect(r.att.backwardTile.BO).toBeLessThan(8);
    const fwd = cpuForward(r.q, r.k, r.v, dims, r.cu, true, r.scale);
    expectClose(r.o, fwd.o, { rtol: 1e-4, atol: 2e-6, what: 'o, small tiles' });
    expectClose(r.lse, fwd.lse, { rtol: 1e-5, atol: 2e-6, what: 'lse, small tiles' });
    const ref = cpuBackward(r.q, r.k, r.v, r.w, dims, r.cu, true, r.scale);
    for (const g of ['dq', 'dk', 'dv'] as const) expectClose(r[g], ref[g], { rtol: 1e-4, atol: 1e-5, what: `${g}, small tiles` });
  });

  it('head_dim 128 (the 2B model), T=41 not a multiple of any tile, GQA 4/2: forward and backward', async () => {
    const gpu = await testGpu();
    const dims = { hq: 4, hkv: 2, D: 128 };
    const r = await runBackward(gpu, dims, [41], true, 21);
    expectClose(r.o, cpuForward(r.q, r.k, r.v, dims, r.cu, true, r.scale).o, { rtol: 1e-4, atol: 2e-6, what: 'o, D=128' });
    const ref = cpuBackward(r.q, r.k, r.v, r.w, dims, r.cu, true, r.scale);
    for (const g of ['dq', 'dk', 'dv'] as const) expectClose(r[g], ref[g], { rtol: 1e-4, atol: 1e-5, what: `${g}, D=128` });
  });

  it('head_dim 6 (not a multiple of 4: the f32 loads, zero-padded vec4s), packed 5+11, GQA 2/1: forward and backward', async () => {
    const gpu = await testGpu();
    const dims = { hq: 2, hkv: 1, D: 6 };
    const r = await runBackward(gpu, dims, [5, 11], true, 31);
    expectClose(r.o, cpuForward(r.q, r.k, r.v, dims, r.cu, true, r.scale).o, { rtol: 1e-4, atol: 2e-6, what: 'o, D=6' });
    const ref = cpuBackward(r.q, r.k, r.v, r.w, dims, r.cu, true, r.scale);
    for (const g of ['dq', 'dk', 'dv'] as const) expectClose(r[g], ref[g], { rtol: 1e-4, atol: 1e-5, what: `${g}, D=6` });
  });

  it('decode with an o_proj fold (split in 4 chunks; 1 chunk and unsplit: the decode kernel alone): o unchanged, and per (row, head) the partials A[:, head]·o[row, head] (r 3 and 16)', async () => {
    const gpu = await testGpu();
    const dims = { hq: 4, hkv: 2, D: 16 };
    const { hq, hkv, D } = dims;
    const att = await Attention.create(gpu, { hq, hkv, headDim: D });
    const cache = await KvCache.create(gpu, { layers: 1, slots: 2, capacity: 32, hkv, headDim: D });
    const workspace = gpu.tensor(att.splitWorkspaceShape(2, 4), 'f32', 'split_workspace');
    const rec = gpu.recorder();
    const keys = 13;
    const k0 = gpu.upload(randUniform(2 * keys * hkv * D, 801), [2 * keys, hkv * D], 'f32', 'k');
    const v0 = gpu.upload(randUniform(2 * keys * hkv * D, 802), [2 * keys, hkv * D], 'f32', 'v');
    cache.append(rec, 0, k0, v0, 0, 2);
    cache.advance(rec, 0, 2, keys);
    // The decode step's own key and value (one new row a sequence).
    const k1 = gpu.upload(randUniform(2 * hkv * D, 805), [2, hkv * D], 'f32', 'k1');
    const v1 = gpu.upload(randUniform(2 * hkv * D, 806), [2, hkv * D], 'f32', 'v1');
    cache.append(rec, 0, k1, v1, 0, 2);
    await rec.submit();
    for (const [r, split] of [[3, { workspace, chunks: 4 }], [16, { workspace, chunks: 4 }], [3, { workspace, chunks: 1 }], [16, undefined]] as const) {
      const q = gpu.upload(randUniform(2 * hq * D, 803 + r), [2, hq * D], 'f32', 'q');
      const A = randUniform(r * hq * D, 804 + r);
      const tA = gpu.upload(A, [r, hq * D], 'f32', 'A');
      const [o, o2] = [gpu.tensor([2, hq * D], 'f32', 'o'), gpu.tensor([2, hq * D], 'f32', 'o2')];
      const parts = gpu.tensor([2 * hq * r], 'f32', 'parts');
      const rec2 = gpu.recorder();
      expect(att.forwardCached(rec2, q, cache, 0, o, { slot0: 0, count: 2, scale: 0.3, split, fold: { A: tA, r, parts } })).toBe(true);
      expect(att.forwardCached(rec2, q, cache, 0, o2, { slot0: 0, count: 2, scale: 0.3, split })).toBe(false);
      await rec2.submit();
      const got = await read(gpu, o);
      expect([...got]).toEqual([...(await read(gpu, o2))]);
      const want = new Float64Array(2 * hq * r);
      for (let row = 0; row < 2; row++) {
        for (let h = 0; h < hq; h++) {
          for (let j = 0; j < r; j++) {
            let acc = 0;
            for (let d = 0; d < D; d++) acc += A[j * hq * D + h * D + d] * got[row * hq * D + h * D + d];
            want[(row * hq + h) * r + j] = acc;
          }
        }
      }
      expectClose(await read(gpu, parts), want, { rtol: 1e-5, atol: 1e-6, what: `partials, r ${r}, ${split?.chunks ?? 'no'} chunks` });
      for (const t of [q, tA, o, o2, parts]) t.release();
    }
    for (const t of [k0, v0, k1, v1, workspace]) t.release();
    cache.release();
  });

  it('decode with an o_proj fold writes the merged rows as int8 groups too (split in 4 chunks, and in 1: the decode kernel alone): the 4-bit GEMV given them writes what it writes quantizing o itself, bit for bit (D 32; D 16 and one row refuse)', async () => {
    const gpu = await testGpu();
    const dims = { hq: 4, hkv: 2, D: 32 };
    const { hq, hkv, D } = dims;
    const att = await Attention.create(gpu, { hq, hkv, headDim: D });
    const narrow = await Attention.create(gpu, { hq, hkv, headDim: 16 });
    expect(narrow.foldQuantizes).toBe(false);
    if (!att.foldQuantizes) return; // no packed dot products in this WGSL
    const cache = await KvCache.create(gpu, { layers: 1, slots: 3, capacity: 32, hkv, headDim: D });
    const workspace = gpu.tensor(att.splitWorkspaceShape(3, 4), 'f32', 'split_workspace');
    const rec = gpu.recorder();
    const k0 = gpu.upload(randUniform(3 * 20 * hkv * D, 811), [3 * 20, hkv * D], 'f32', 'k');
    const v0 = gpu.upload(randUniform(3 * 20 * hkv * D, 812), [3 * 20, hkv * D], 'f32', 'v');
    cache.append(rec, 0, k0, v0, 0, 3);
    cache.advance(rec, 0, 3, 20);
    await rec.submit();
    const r = 8;
    const q = gpu.upload(randUniform(3 * hq * D, 813), [3, hq * D], 'f32', 'q');
    const tA = gpu.upload(randUniform(r * hq * D, 814), [r, hq * D], 'f32', 'A');
    const [o, o2] = [gpu.tensor([3, hq * D], 'f32', 'o'), gpu.tensor([3, hq * D], 'f32', 'o2')];
    const [parts, parts2] = [gpu.tensor([3 * hq * r], 'f32', 'parts'), gpu.tensor([3 * hq * r], 'f32', 'parts2')];
    const xq = gpu.tensor([int8GroupWords(3, hq * D)], 'u32', 'xq');
    for (const chunks of [4, 1]) {
      const split = { workspace, chunks };
      const rec2 = gpu.recorder();
      expect(att.forwardCached(rec2, q, cache, 0, o, { slot0: 0, count: 3, scale: 0.3, split, fold: { A: tA, r, parts, quantized: xq } })).toBe(true);
      expect(att.forwardCached(rec2, q, cache, 0, o2, { slot0: 0, count: 3, scale: 0.3, split, fold: { A: tA, r, parts: parts2 } })).toBe(true);
      await rec2.submit();
      expect([...(await read(gpu, o))]).toEqual([...(await read(gpu, o2))]);
      expect([...(await read(gpu, parts))]).toEqual([...(await read(gpu, parts2))]);
      // o_proj's GEMV on o: given the groups, and quantizing o itself.
      const [given, self] = await gemvGivenAndSelfQuantized(gpu, o, xq, 815);
      expect([...given]).toEqual([...self]);
      expect(Math.max(...given.map(Math.abs))).toBeGreaterThan(0);
      expect(() => att.forwardCached(gpu.recorder(), q, cache, 0, o, { slot0: 0, count: 3, scale: 0.3, split, fold: { A: tA, r, parts, quantized: gpu.tensor([8], 'u32', 'small') } })).toThrow(ShapeError);
      // One row's groups are two limbs, which neither the combine nor the decode kernel writes.
      const q1 = gpu.upload(randUniform(hq * D, 816), [1, hq * D], 'f32', 'q1');
      const o1 = gpu.tensor([1, hq * D], 'f32', 'o1');
      expect(() => att.forwardCached(gpu.recorder(), q1, cache, 0, o1, { slot0: 0, count: 1, scale: 0.3, split, fold: { A: tA, r, parts, quantized: gpu.tensor([int8GroupWords(1, hq * D)], 'u32', 'xq1') } })).toThrow(ShapeError);
      for (const t of [q1, o1]) t.release();
    }
    for (const t of [k0, v0, q, tA, o, o2, parts, parts2, xq, workspace]) t.release();
    cache.release();
  });

  it('decode kernel with several new rows per sequence (n·G = 6 split in 3 chunks, then 8 rows and 1 row) over 28 keys', async () => {
    const gpu = await testGpu();
    const dims = { hq: 4, hkv: 2, D: 16 };
    const { hq, hkv, D } = dims;
    const scale = 0.25;
    const att = await Attention.create(gpu, { hq, hkv, headDim: D });
    const cache = await KvCache.create(gpu, { layers: 1, slots: 2, capacity: 48, hkv, headDim: D });
    const workspace = gpu.tensor(att.splitWorkspaceShape(2 * 4, 3), 'f32', 'split_workspace');
    const hist = [0, 1].map(() => ({ q: [] as number[], k: [] as number[], v: [] as number[], o: [] as number[] }));
    let seed = 500;
    const step = async (n: number, chunks?: number) => {
      const q = randUniform(2 * n * hq * D, seed++);
      const k = randUniform(2 * n * hkv * D, seed++);
      const v = randUniform(2 * n * hkv * D, seed++);
      const t = {
        q: gpu.upload(q, [2 * n, hq * D], 'f32', 'q'),
        k: gpu.upload(k, [2 * n, hkv * D], 'f32', 'k_new'),
        v: gpu.upload(v, [2 * n, hkv * D], 'f32', 'v_new'),
        o: gpu.tensor([2 * n, hq * D], 'f32', 'o'),
      };
      const rec = gpu.recorder();
      cache.append(rec, 0, t.k, t.v, 0, 2);
      att.forwardCached(rec, t.q, cache, 0, t.o, { slot0: 0, count: 2, scale, split: chunks ? { workspace, chunks } : undefined });
      cache.advance(rec, 0, 2, n);
      await rec.submit();
      const o = await read(gpu, t.o);
      for (const b of [0, 1]) {
        hist[b].q.push(...q.subarray(b * n * hq * D, (b + 1) * n * hq * D));
        hist[b].k.push(...k.subarray(b * n * hkv * D, (b + 1) * n * hkv * D));
        hist[b].v.push(...v.subarray(b * n * hkv * D, (b + 1) * n * hkv * D));
        hist[b].o.push(...o.subarray(b * n * hq * D, (b + 1) * n * hq * D));
      }
      releaseAll(t);
    };
    await step(17); // the tiled cached kernel (34 rows per kv head)
    await step(3, 3); // decode kernel, 6 rows, 3 chunks of 7 keys
    await step(3); // decode kernel, unsplit
    await step(4, 2); // decode kernel at its bound: 8 rows
    await step(1, 3); // one row per sequence (2 rows per kv head)
    expect(cache.past).toEqual([28, 28]);
    for (const b of [0, 1]) {
      const T = hist[b].k.length / (hkv * D);
      expectClose(hist[b].o, cpuForward(hist[b].q, hist[b].k, hist[b].v, dims, [0, T], true, scale).o, { rtol: 1e-4, atol: 2e-6, what: `slot ${b}` });
    }
    workspace.release();
    cache.release();
  });
});
