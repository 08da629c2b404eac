import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { expectClose, randNormal } from '../helpers/reference';
import { Sampler, type SamplingConfig } from '../../src/ops/sampling';
import { ShapeError, shaderSource, type Gpu } from '../../src/gpu';

// ---- CPU reference: Philox4x32-10 and the sampling rule of shaders/sampling.wgsl, in f64 ----

function mulhilo(a: number, b: number): [number, number] {
  const p = BigInt(a) * BigInt(b);
  return [Number(p >> 32n), Number(p & 0xffffffffn)];
}

function philox(counter: readonly number[], key: readonly number[]): number[] {
  let [c0, c1, c2, c3] = counter;
  let [k0, k1] = key;
  for (let r = 0; r < 10; r++) {
    const [h0, l0] = mulhilo(0xd2511f53, c0);
    const [h1, l1] = mulhilo(0xcd9e8d57, c2);
    [c0, c1, c2, c3] = [(h1 ^ c1 ^ k0) >>> 0, l1, (h0 ^ c3 ^ k1) >>> 0, l0];
    k0 = (k0 + 0x9e3779b9) >>> 0;
    k1 = (k1 + 0xbb67ae85) >>> 0;
  }
  return [c0, c1, c2, c3];
}

// Random123's known-answer vectors for philox4x32-10: counter, key, output.
const KAT: [number[], number[], number[]][] = [
  [[0, 0, 0, 0], [0, 0], [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]],
  [[0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff], [0xffffffff, 0xffffffff], [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]],
  [[0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0], [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]],
];

/** The kept set and the probabilities the sampler draws from (index order), or null for greedy. */
function keptDistribution(x: ArrayLike<number>, cfg: SamplingConfig): { kept: boolean[]; prob: Float64Array; full: Float64Array } {
  const n = x.length;
  const z = Float64Array.from(x, (v) => v / cfg.temperature);
  const m = z.reduce((a, b) => Math.max(a, b), -Infinity);
  const e = z.map((v) => Math.exp(v - m));
  const order = [...e.keys()].sort((a, b) => x[b] - x[a]);
  let kept = new Array<boolean>(n).fill(true);
  const k = cfg.topK ?? 0;
  if (k > 0 && k < n) {
    const tau = x[order[k - 1]];
    kept = kept.map((_, i) => x[i] >= tau);
  }
  const p = cfg.topP ?? 1;
  if (p < 1) {
    const s = order.reduce((acc, i) => acc + (kept[i] ? e[i] : 0), 0);
    // Walk down in value; `above` is the kept mass of strictly larger values.
    const next = [...kept];
    let above = 0;
    for (let a = 0; a < n; ) {
      let b = a;
      let tied = 0;
      for (; b < n && x[order[b]] === x[order[a]]; b++) if (kept[order[b]]) tied += e[order[b]];
      for (let c = a; c < b; c++) next[order[c]] = kept[order[c]] && above < p * s;
      above += tied;
      a = b;
    }
    kept = next;
  }
  const w = kept.reduce((acc, kp, i) => acc + (kp ? e[i] : 0), 0);
  const sAll = e.reduce((a, b) => a + b, 0);
  return { kept, prob: e.map((v, i) => (kept[i] ? v / w : 0)), full: e.map((v) => v / sAll) };
}

function uniform01(seed: number, row: number, step: number): number {
  return (philox([row, step, 0, 0], [seed, 0])[0] >>> 8) / 16777216;
}

/** The token the sampler must draw: inverse CDF in index order. */
function expectedDraw(prob: Float64Array, u: number): number {
  let run = 0;
  let last = -1;
  for (let i = 0; i < prob.length; i++) {
    if (prob[i] === 0) continue;
    run += prob[i];
    last = i;
    if (run > u) return i;
  }
  return last;
}

function argmax(x: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i] > x[best]) best = i;
  return best;
}

async function sample(gpu: Gpu, sampler: Sampler, logits: Float32Array, rows: number, cfg: SamplingConfig, seed: number, step: number) {
  const vocab = logits.length / rows;
  const t = gpu.upload(logits, [rows, vocab], 'f32', 'logits');
  const out = { ids: gpu.tensor([rows], 'u32', 'ids'), logp: gpu.tensor([rows], 'f32', 'logp') };
  const rec = gpu.recorder();
  sampler.sample(rec, t, cfg, { seed, step }, out);
  await rec.submit();
  const ids = (await gpu.read(out.ids)) as Uint32Array;
  const logp = await gpu.readF32(out.logp);
  t.release();
  out.ids.release();
  out.logp.release();
  return { ids, logp };
}

/** Rows of one logit vector repeated. */
function repeatRows(row: ArrayLike<number>, rows: number): Float32Array {
  const out = new Float32Array(rows * row.length);
  for (let r = 0; r < rows; r++) out.set(Array.from(row), r * row.length);
  return out;
}

describe('sampling', () => {
  it('implements Philox4x32-10 (known-answer vectors, CPU and GPU)', async () => {
    for (const [c, k, want] of KAT) expect(philox(c, k)).toEqual(want);
    const gpu = await testGpu();
    const code = `${shaderSource('sampling')}
@group(0) @binding(9) var<storage, read> kat_in: array<vec4u>;
@group(0) @binding(10) var<storage, read_write> kat_out: array<vec4u>;
@compute @workgroup_size(1)
fn kat(@builtin(workgroup_id) wid: vec3u) {
  kat_out[wid.x] = philox4x32_10(kat_in[2u * wid.x], kat_in[2u * wid.x + 1u].xy);
}`;
    const kernel = await gpu.kernel({ name: 'test.philox_kat', code, entry: 'kat' });
    const input = KAT.flatMap(([c, k]) => [...c, ...k, 0, 0]);
    const tin = gpu.upload(new Uint32Array(input), [KAT.length * 8], 'u32', 'kat_in');
    const tout = gpu.tensor([KAT.length * 4], 'u32', 'kat_out');
    const rec = gpu.recorder();
    rec.dispatch(kernel, { kat_in: tin, kat_out: tout }, KAT.length);
    await rec.submit();
    expect([...((await gpu.read(tout)) as Uint32Array)]).toEqual(KAT.flatMap(([, , w]) => w));
  });

  it('greedy is the argmax (lowest index on ties) with the raw log-softmax', async () => {
    const gpu = await testGpu();
    const sampler = await Sampler.create(gpu);
    const vocab = 1001;
    const rows = 4;
    const logits = randNormal(rows * vocab, 7, 2);
    logits[0 * vocab + 128] = 9; // ties: the lower index wins (here across neighbouring threads)
    logits[0 * vocab + 129] = 9;
    logits[1 * vocab + 500] = 9; // (here within the reduction tree)
    logits[1 * vocab + 900] = 9;
    logits[2 * vocab + 1000] = 20; // the last column
    logits[3 * vocab + 0] = 20; // the first column
    const { ids, logp } = await sample(gpu, sampler, logits, rows, { temperature: 0 }, 1, 0);
    const want = [0, 1, 2, 3].map((r) => argmax(logits.subarray(r * vocab, (r + 1) * vocab)));
    expect([...ids]).toEqual(want);
    expect([want[0], want[1]]).toEqual([128, 500]);
    const wantLogp = want.map((id, r) => {
      const row = logits.subarray(r * vocab, (r + 1) * vocab);
      const m = row.reduce((a, b) => Math.max(a, b), -Infinity);
      return row[id] - m - Math.log(row.reduce((a, v) => a + Math.exp(v - m), 0));
    });
    expectClose(logp, wantLogp, { rtol: 1e-5, atol: 1e-6, what: 'greedy logp' });
  });

  it('top-k = 1 is greedy', async () => {
    const gpu = await testGpu();
    const sampler = await Sampler.create(gpu);
    const rows = 5;
    const vocab = 777;
    const logits = randNormal(rows * vocab, 9, 1);
    const greedy = await sample(gpu, sampler, logits, rows, { temperature: 0 }, 3, 0);
    for (const seed of [1, 2, 3]) {
      const k1 = await sample(gpu, sampler, logits, rows, { temperature: 1.3, topK: 1, topP: 0.9 }, seed, 4);
      expect([...k1.ids]).toEqual([...greedy.ids]);
      expectClose(k1.logp, new Float32Array(rows), { atol: 1e-7, what: 'log p of the only kept token' });
    }
  });

  const configs: SamplingConfig[] = [
    { temperature: 1 },
    { temperature: 0.7, topK: 5 },
    { temperature: 0.7, topP: 0.8 },
    { temperature: 1.2, topK: 6, topP: 0.9 },
    { temperature: 0.7, topK: 6, topP: 0.85, logprobs: 'full' },
  ];
  for (const cfg of configs) {
    it(`draws from the truncated softmax: ${JSON.stringify(cfg)}`, async () => {
      const gpu = await testGpu();
      const sampler = await Sampler.create(gpu);
      const row = [0.3, 1.9, -0.5, 1.2, 0.8, 1.5, -1.1, 0.1, 1.0, 0.6, -0.2];
      const rows = 128;
      const steps = 8;
      const { kept, prob, full } = keptDistribution(row, cfg);
      const counts = new Float64Array(row.length);
      for (let step = 0; step < steps; step++) {
        const { ids, logp } = await sample(gpu, sampler, repeatRows(row, rows), rows, cfg, 1234, step);
        const want = Int32Array.from({ length: rows }, (_, r) => expectedDraw(prob, uniform01(1234, r, step)));
        expect([...ids], 'the exact draws of (seed, row, step)').toEqual([...want]);
        for (const id of ids) counts[id]++;
        const lp = cfg.logprobs === 'full' ? full : prob;
        expectClose(logp, Float64Array.from(ids, (id) => Math.log(lp[id])), { rtol: 1e-5, atol: 1e-6, what: 'logp' });
      }
      // Pearson chi-square over the kept tokens; 1e-4 critical values for df = 1..10.
      const critical = [15.14, 18.42, 21.11, 23.51, 25.74, 27.86, 29.88, 31.83, 33.72, 35.56];
      const total = rows * steps;
      let chi2 = 0;
      let df = -1;
      prob.forEach((p, i) => {
        if (!kept[i]) {
          expect(counts[i], `token ${i} is cut off`).toBe(0);
          return;
        }
        chi2 += (counts[i] - total * p) ** 2 / (total * p);
        df++;
      });
      if (df > 0) expect(chi2).toBeLessThan(critical[df - 1]);
      let tv = 0;
      prob.forEach((p, i) => (tv += Math.abs(counts[i] / total - p) / 2));
      expect(tv).toBeLessThan(0.05);
    });
  }

  it('keeps ties at the top-k cut-off, and applies top-p on the renormalised top-k', async () => {
    const gpu = await testGpu();
    const sampler = await Sampler.create(gpu);
    const row = [3, 2, 2, 1, 0];
    const rows = 256;
    const seen = new Set<number>();
    const { ids } = await sample(gpu, sampler, repeatRows(row, rows), rows, { temperature: 1, topK: 2 }, 5, 0);
    for (const id of ids) seen.add(id);
    expect([...seen].sort()).toEqual([0, 1, 2]);
    // p = [e^3, e^2, e^2]/Σ = [0.576, 0.212, 0.212] after top-k: top-p 0.7 keeps 0 and the tied 1, 2.
    const r2 = await sample(gpu, sampler, repeatRows(row, rows), rows, { temperature: 1, topK: 3, topP: 0.7 }, 5, 1);
    expect(new Set(r2.ids)).toEqual(new Set([0, 1, 2]));
    const r3 = await sample(gpu, sampler, repeatRows(row, rows), rows, { temperature: 1, topK: 3, topP: 0.5 }, 5, 2);
    expect(new Set(r3.ids)).toEqual(new Set([0]));
  });

  it('handles the full Qwen vocabulary (151,936) with top-k and top-p', async () => {
    const gpu = await testGpu();
    const sampler = await Sampler.create(gpu);
    const vocab = 151_936;
    const rows = 2;
    const logits = randNormal(rows * vocab, 17, 3);
    for (const cfg of [
      { temperature: 0.7, topK: 50, topP: 0.9 },
      { temperature: 1, topK: 20 },
      { temperature: 1, topP: 0.95 },
    ] as SamplingConfig[]) {
      const { ids, logp } = await sample(gpu, sampler, logits, rows, cfg, 99, 7);
      for (let r = 0; r < rows; r++) {
        const { kept, prob } = keptDistribution(logits.subarray(r * vocab, (r + 1) * vocab), cfg);
        if (cfg.topK && !cfg.topP) expect(kept.filter((k) => k).length).toBe(cfg.topK);
        expect(ids[r]).toBe(expectedDraw(prob, uniform01(99, r, 7)));
        expectClose([logp[r]], [Math.log(prob[ids[r]])], { rtol: 1e-4, atol: 1e-5, what: `logp row ${r}` });
      }
    }
  });

  it('greedy and plain sampling over the full vocabulary (chunked path): exact draws, argmax ties across chunks', async () => {
    const gpu = await testGpu();
    const sampler = await Sampler.create(gpu);
    const vocab = 151_936;
    const rows = 3;
    const logits = randNormal(rows * vocab, 23, 3);
    logits[0 * vocab + 2047] = 30; // a tie across chunks (1024 logits each): the lower index wins
    logits[0 * vocab + 2048] = 30;
    logits[1 * vocab + vocab - 1] = 30; // in the last, partial chunk
    const greedy = await sample(gpu, sampler, logits, rows, { temperature: 0 }, 1, 0);
    expect([...greedy.ids]).toEqual([0, 1, 2].map((r) => argmax(logits.subarray(r * vocab, (r + 1) * vocab))));
    expect([greedy.ids[0], greedy.ids[1]]).toEqual([2047, vocab - 1]);
    for (const [cfg, seed, step] of [[{ temperature: 1 }, 5, 3], [{ temperature: 0.6, logprobs: 'full' }, 8, 0]] as [SamplingConfig, number, number][]) {
      const { ids, logp } = await sample(gpu, sampler, logits, rows, cfg, seed, step);
      for (let r = 0; r < rows; r++) {
        const { prob } = keptDistribution(logits.subarray(r * vocab, (r + 1) * vocab), cfg);
        expect(ids[r], `row ${r}`).toBe(expectedDraw(prob, uniform01(seed, r, step)));
        expectClose([logp[r]], [Math.log(prob[ids[r]])], { rtol: 1e-4, atol: 1e-5, what: `logp row ${r}` });
      }
    }
  });

  it('is reproducible for a (seed, step) and varies with them', async () => {
    const gpu = await testGpu();
    const sampler = await Sampler.create(gpu);
    const rows = 64;
    const logits = randNormal(rows * 300, 21, 1);
    const cfg = { temperature: 1, topP: 0.95 };
    const a = await sample(gpu, sampler, logits, rows, cfg, 42, 3);
    const b = await sample(gpu, sampler, logits, rows, cfg, 42, 3);
    const c = await sample(gpu, sampler, logits, rows, cfg, 43, 3);
    const d = await sample(gpu, sampler, logits, rows, cfg, 42, 4);
    expect([...b.ids]).toEqual([...a.ids]);
    expect([...b.logp]).toEqual([...a.logp]);
    expect([...c.ids]).not.toEqual([...a.ids]);
    expect([...d.ids]).not.toEqual([...a.ids]);
  });

  it('rejects bad arguments with ShapeError', async () => {
    const gpu = await testGpu();
    const sampler = await Sampler.create(gpu);
    const logits = gpu.tensor([2, 10], 'f32', 'logits');
    const out = { ids: gpu.tensor([2], 'u32', 'ids'), logp: gpu.tensor([2], 'f32', 'logp') };
    const rec = gpu.recorder();
    expect(() => sampler.sample(rec, logits, { temperature: 1, topP: 0 }, { seed: 1, step: 0 }, out)).toThrow(ShapeError);
    expect(() => sampler.sample(rec, logits, { temperature: 1, topK: 1.5 }, { seed: 1, step: 0 }, out)).toThrow(/topK/);
    expect(() => sampler.sample(rec, logits, { temperature: 1 }, { seed: -1, step: 0 }, out)).toThrow(/seed/);
    expect(() => sampler.sample(rec, logits, { temperature: 1 }, { seed: 1, step: 0 }, { ids: out.logp, logp: out.logp })).toThrow(/ids/);
  });
});
