import { describe, expect, it } from 'vitest';
import { BufferPool } from '../../src/gpu/tensor';

const MiB = 2 ** 20;

/** A pool over fake buffers that record their destruction; weights (64 MiB) stay in use. */
function fakePool() {
  const destroyed: string[] = [];
  let made = 0;
  const pool = new BufferPool((bytes, label) => {
    const id = `${label}#${made++}`;
    return { label: id, size: bytes, destroy: () => destroyed.push(id) } as unknown as GPUBuffer;
  });
  pool.acquire(64 * MiB, 'weights');
  return { pool, destroyed };
}

/** "Generation": a 48 MiB cache and a 3 MiB workspace; "training": two 20 MiB activations and the same workspace size. */
function generate(pool: BufferPool): void {
  const kv = pool.acquire(48 * MiB, 'kv');
  const ws = pool.acquire(3 * MiB, 'ws');
  pool.release(ws);
  pool.release(kv);
}
function train(pool: BufferPool): void {
  const bufs = [pool.acquire(20 * MiB, 'h'), pool.acquire(20 * MiB, 'h'), pool.acquire(3 * MiB, 'ws')];
  for (const b of bufs) pool.release(b);
}

function steps(pool: BufferPool, n: number, keep: 'all' | 'own'): void {
  for (let i = 0; i < n; i++) {
    pool.enterPhase('generation', keep);
    generate(pool);
    pool.enterPhase('training', keep);
    train(pool);
  }
}

describe('BufferPool phases', () => {
  it("'all' keeps both phases' buffers: after the first step nothing is made again; the peak is the union", () => {
    const { pool } = fakePool();
    steps(pool, 1, 'all');
    expect(pool.stats.created).toBe(1 + 2 + 2); // weights; kv and ws; the two activations (ws reused)
    steps(pool, 4, 'all');
    expect(pool.stats.created).toBe(5);
    expect(pool.stats.peak).toBe((64 + 48 + 3 + 2 * 20) * MiB);
  });

  it("'own' gives the other phase's buffers back: each step makes them again, and the peak is the larger phase's", () => {
    const { pool, destroyed } = fakePool();
    steps(pool, 1, 'own');
    const first = pool.stats.created;
    const wsGone = destroyed.filter((d) => d.startsWith('ws')).length;
    steps(pool, 4, 'own');
    // Per step: generation's cache and training's two activations again; the shared workspace size stays.
    expect(pool.stats.created - first).toBe(4 * 3);
    expect(destroyed.filter((d) => d.startsWith('ws')).length).toBe(wsGone);
    expect(pool.stats.peak).toBe((64 + 48 + 3) * MiB);
  });

  it('gives back what a phase no longer uses once it has run again without it (one-off work), in either mode', () => {
    for (const keep of ['all', 'own'] as const) {
      const { pool, destroyed } = fakePool();
      steps(pool, 2, keep);
      pool.release(pool.acquire(7 * MiB, 'eval')); // counted in the training phase, which it ran in
      steps(pool, 1, keep);
      expect(destroyed.some((d) => d.startsWith('eval'))).toBe(keep === 'own');
      steps(pool, 1, keep); // training ran once without it
      expect(destroyed.some((d) => d.startsWith('eval'))).toBe(true);
    }
  });

  it("keeps what the coming phase used last time, by size class; a full trim empties the cache", () => {
    const { pool, destroyed } = fakePool();
    pool.enterPhase('a', 'own');
    const a = [pool.acquire(MiB, 'a1'), pool.acquire(MiB, 'a2')];
    for (const b of a) pool.release(b);
    pool.enterPhase('b', 'own'); // b never ran: everything cached goes
    expect(destroyed.length).toBe(2);
    expect(pool.stats.cached).toBe(0);
    const b1 = pool.acquire(MiB, 'b1'); // one buffer of the same class
    pool.release(b1);
    pool.enterPhase('a', 'own'); // a used two of that class: the one cached stays for it
    expect(pool.stats.cached).toBe(MiB);
    const again = [pool.acquire(MiB, 'a1'), pool.acquire(MiB, 'a2')];
    expect(again).toContain(b1);
    for (const x of again) pool.release(x);
    pool.enterPhase('b', 'own'); // b used one: one of the two stays
    expect(pool.stats.cached).toBe(MiB);
    pool.trim();
    expect(pool.stats.cached).toBe(0);
    expect(destroyed.length).toBe(4);
  });

  it('hands a phase that acquires in the same order the same buffers each time it comes back, whatever order they were released in', () => {
    const { pool } = fakePool();
    const runs: GPUBuffer[][] = [];
    for (let step = 0; step < 4; step++) {
      pool.enterPhase('generation', 'all');
      const g = [pool.acquire(MiB, 'g'), pool.acquire(MiB, 'g')];
      // Released in an order that changes from step to step, as asynchronous work can.
      for (const b of step % 2 ? g : [...g].reverse()) pool.release(b);
      pool.enterPhase('training', 'all');
      const t = [pool.acquire(MiB, 't'), pool.acquire(MiB, 't'), pool.acquire(MiB, 't')];
      runs.push(t);
      for (const b of step % 2 ? [...t].reverse() : t) pool.release(b);
    }
    // The bind groups made on a phase's buffers are found again only if the buffers are the same ones.
    for (const r of runs.slice(2)) expect(r).toEqual(runs[1]);
    for (let i = 0; i < 3; i++) expect(runs[3][i]).toBe(runs[1][i]);
  });
});
