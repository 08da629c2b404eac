// Next-token sampling, one workgroup per row of logits [rows, vocab]: repetition penalty,
// temperature, top-k, top-p, min-p, greedy, seeded. Only the token id and its log-prob are written.
//
// Order as transformers' generate: the repetition penalty on the raw logits (`penalize`, in place:
// a token already in the row's sequence, as the `seen` bitmap says, has a negative logit multiplied
// by the penalty and a positive one divided by it; `mark` adds each step's token to the bitmap),
// then z = logits / temperature, then top-k, then top-p on the renormalised top-k distribution,
// then min-p: a kept token stays iff its probability is at least min_p times the largest one's,
// i.e. z - zmax >= log(min_p) (the most likely token always stays). Both cut-offs are thresholds on the value (ties at the cut-off
// are all kept, as transformers' TopKLogitsWarper does), found without sorting by a radix select
// over the order-preserving u32 key of each logit, 4 bits per pass (8 passes):
//   top-k: τ_k = the k-th largest key, selecting on counts;
//   top-p: τ_p = the largest key whose mass at or above it reaches p·Σ_{key ≥ τ_k} e^z, selecting
//          on masses; a token is kept iff the mass strictly above it is < p (transformers' rule).
// The draw is inverse-CDF in index order with u from Philox4x32-10 (key = (seed, 0), counter =
// (row, step, 0, 0)), so a (seed, row, step) gives the same token on every driver.
// Greedy (temperature 0): the argmax of the raw logits, lowest index on ties (as torch.argmax).
//
// Greedy and plain sampling (no top-k, no top-p) take two wide dispatches instead of `sample`'s one
// workgroup per row (latency-bound on a row of 151,936):
//   sample_chunks  one workgroup per (chunk of CHUNK logits, row): the chunk's raw max and its
//                  lowest index, its max z and Σ e^(z − max z)
//   sample_finish  one workgroup per row: the row's argmax, max z and Σ e^(z − zmax) from its
//                  chunks; greedy ends there; else the draw u·W is found in chunk order (chunk
//                  masses rescaled to zmax), then inside the chunk from its e^(z − zmax) in index
//                  order: the same inverse CDF in index order as `sample`, sums grouped differently.
//
// Log-prob reported: `processed` (default) is log_softmax over the kept tokens after temperature,
// top-k and top-p, which is what vLLM returns with logprobs_mode="processed_logprobs" (the mode TRL
// asks for); `full` is the log-prob under the whole tempered softmax. Greedy reports the log-softmax
// of the raw logits, as vLLM does for greedy requests.

struct Params {
  vocab: u32,
  inv_temp: f32,    // 1 when greedy
  greedy: u32,
  top_k: u32,       // 0: off
  top_p: f32,       // ≥ 1: off
  seed: u32,
  step: u32,        // plus step_in[0]: the step from the GPU (decode records steps ahead)
  full_logprob: u32,
  chunks: u32,      // sample_chunks / sample_finish: chunks per row
  log_min_p: f32,   // log(min_p); -inf (a very negative number): off
  penalty: f32,     // repetition penalty (penalize)
  words: u32,       // u32 words per row of `seen`
  rows: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;    // [rows, vocab]
@group(0) @binding(2) var<storage, read_write> ids: array<u32>; // [rows]
@group(0) @binding(3) var<storage, read_write> logp: array<f32>; // [rows]
// Per (row, chunk): raw max, its index (bits), max z, Σ e^(z − max z)
@group(0) @binding(4) var<storage, read_write> part: array<vec4f>; // [rows, chunks]
@group(0) @binding(5) var<storage, read> part_in: array<vec4f>;
@group(0) @binding(6) var<storage, read> step_in: array<u32>; // [1]: added to params.step
@group(0) @binding(7) var<storage, read_write> logits_rw: array<f32>; // penalize: the logits, in place
@group(0) @binding(8) var<storage, read_write> seen: array<u32>;      // [rows, words]: bit j: token j is in the sequence
@group(0) @binding(9) var<storage, read> ids_in: array<u32>;          // mark: the tokens just sampled

const WG: u32 = 128u;
const BINS: u32 = 16u;
const EMPTY: f32 = -3.0e38;
const CHUNK: u32 = 1024u; // logits per sample_chunks workgroup (src/ops/sampling.ts SAMPLE_CHUNK)
const PER_THREAD: u32 = CHUNK / WG;

// ---- Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3") ----

// (high, low) 32-bit halves of the 64-bit product a·b, from 16-bit pieces (WGSL has no mulhi).
fn mulhilo(a: u32, b: u32) -> vec2u {
  let al = a & 0xffffu;
  let ah = a >> 16u;
  let bl = b & 0xffffu;
  let bh = b >> 16u;
  let ll = al * bl;
  let lh = al * bh;
  let hl = ah * bl;
  let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
  return vec2u(ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u), a * b);
}

fn philox4x32_10(counter: vec4u, key: vec2u) -> vec4u {
  var c = counter;
  var k = key;
  for (var r = 0u; r < 10u; r++) {
    let p0 = mulhilo(0xD2511F53u, c.x);
    let p1 = mulhilo(0xCD9E8D57u, c.z);
    c = vec4u(p1.x ^ c.y ^ k.x, p1.y, p0.x ^ c.w ^ k.y, p0.y);
    k += vec2u(0x9E3779B9u, 0xBB67AE85u);
  }
  return c;
}

// Uniform in [0, 1) with 24 random bits (exact in f32).
fn uniform01(seed: u32, row: u32, step: u32) -> f32 {
  let r = philox4x32_10(vec4u(row, step, 0u, 0u), vec2u(seed, 0u));
  return f32(r.x >> 8u) * (1.0 / 16777216.0);
}

// ---- helpers ----

// Order-preserving map f32 -> u32: a < b as floats iff key(a) < key(b) as integers.
fn key_of(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

var<workgroup> red_f: array<f32, WG>;
var<workgroup> red_g: array<f32, WG>;
var<workgroup> red_x: array<f32, WG>;
var<workgroup> red_u: array<u32, WG>;
var<workgroup> hist: array<f32, 2048>;   // BINS * WG partial histograms; later the block prefix sums
var<workgroup> sh_prefix: u32;
var<workgroup> sh_goal: f32;
var<workgroup> chosen: atomic<u32>;      // index + 1 of the drawn token, 0: none
var<workgroup> last_kept: atomic<u32>;   // index + 1 of the last kept token

fn sum_f(lid: u32, v: f32) -> f32 {
  red_f[lid] = v;
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
    if (lid < stride) {
      red_f[lid] += red_f[lid + stride];
    }
    workgroupBarrier();
  }
  let total = red_f[0];
  workgroupBarrier();
  return total;
}

// One radix pass: per 4-bit digit at `shift`, the total weight of the tokens whose key matches
// `prefix` on `mask` (weight 1 counts them; e^(z-m) over keys ≥ floor measures their mass). Thread 0
// then walks the digits from the top until the running total reaches `goal`, and the chosen digit
// extends the prefix. Returns the prefix and the goal within the chosen digit to every thread.
struct Selection {
  prefix: u32,
  goal: f32,
}

fn radix_pass(lid: u32, base: u32, prefix: u32, mask: u32, shift: u32, goal: f32, by_mass: bool, m: f32, floor: u32) -> Selection {
  var acc: array<f32, BINS>;
  for (var j = lid; j < params.vocab; j += WG) {
    let x = logits[base + j];
    let k = key_of(x);
    if ((k & mask) == prefix) {
      let w = select(1.0, select(0.0, exp(x * params.inv_temp - m), k >= floor), by_mass);
      acc[(k >> shift) & 0xfu] += w;
    }
  }
  for (var b = 0u; b < BINS; b++) {
    hist[b * WG + lid] = acc[b];
  }
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
    if (lid < stride) {
      for (var b = 0u; b < BINS; b++) {
        hist[b * WG + lid] += hist[b * WG + lid + stride];
      }
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    var above = 0.0;
    var pick = BINS;
    var lowest = 0u;
    var above_lowest = 0.0;
    for (var b = i32(BINS) - 1; b >= 0; b--) {
      let h = hist[u32(b) * WG];
      if (h > 0.0) {
        lowest = u32(b);
        above_lowest = above;
      }
      if (pick == BINS && h > 0.0 && above + h >= goal) {
        pick = u32(b);
        sh_goal = goal - above;
      }
      above += h;
    }
    // Rounding can leave the total just short of the goal: keep everything (the lowest digit).
    if (pick == BINS) {
      pick = lowest;
      sh_goal = goal - above_lowest;
    }
    sh_prefix = prefix | (pick << shift);
  }
  workgroupBarrier();
  let r = Selection(sh_prefix, sh_goal);
  workgroupBarrier();
  return r;
}

// The k-th largest key (k ≥ 1) by count, or the cut-off at mass `goal` among keys ≥ floor.
fn radix_select(lid: u32, base: u32, goal0: f32, by_mass: bool, m: f32, floor: u32) -> u32 {
  var prefix = 0u;
  var mask = 0u;
  var goal = goal0;
  for (var shift = 28i; shift >= 0; shift -= 4) {
    let r = radix_pass(lid, base, prefix, mask, u32(shift), goal, by_mass, m, floor);
    prefix = r.prefix;
    goal = r.goal;
    mask |= 0xfu << u32(shift);
  }
  return prefix;
}

// Argmax (lowest index on ties) and online softmax state (max z, Σ e^(z − max z)) over the
// workgroup: each thread's (xmax, amax, m, s) in, the workgroup's out (to every thread).
struct Stats {
  xmax: f32,
  amax: u32,
  m: f32,
  s: f32,
}

fn reduce_stats(lid: u32, mine: Stats) -> Stats {
  red_x[lid] = mine.xmax;
  red_u[lid] = mine.amax;
  red_f[lid] = mine.m;
  red_g[lid] = mine.s;
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
    if (lid < stride) {
      let xo = red_x[lid + stride];
      let ao = red_u[lid + stride];
      if (xo > red_x[lid] || (xo == red_x[lid] && ao < red_u[lid])) {
        red_x[lid] = xo;
        red_u[lid] = ao;
      }
      let m1 = red_f[lid];
      let m2 = red_f[lid + stride];
      let mm = max(m1, m2);
      red_g[lid] = red_g[lid] * exp(m1 - mm) + red_g[lid + stride] * exp(m2 - mm);
      red_f[lid] = mm;
    }
    workgroupBarrier();
  }
  let r = Stats(red_x[0], red_u[0], red_f[0], red_g[0]);
  workgroupBarrier();
  return r;
}

// Adds logit x at index j to a thread's state: argmax (first index wins ties, as j increases) and
// the online softmax of z = x / temperature.
fn fold_logit(st: ptr<function, Stats>, x: f32, j: u32) {
  if (x > (*st).xmax) {
    (*st).xmax = x;
    (*st).amax = j;
  }
  let z = x * params.inv_temp;
  if (z > (*st).m) {
    (*st).s = (*st).s * exp((*st).m - z) + 1.0;
    (*st).m = z;
  } else {
    (*st).s += exp(z - (*st).m);
  }
}

// Exclusive prefix of each thread's `mine` into hist[0..WG], total at hist[WG] (thread 0, serial:
// a fixed order), visible to every thread on return.
fn exclusive_prefix(lid: u32, mine: f32) {
  red_f[lid] = mine;
  workgroupBarrier();
  if (lid == 0u) {
    var run = 0.0;
    for (var t = 0u; t < WG; t++) {
      hist[t] = run;
      run += red_f[t];
    }
    hist[WG] = run;
  }
  workgroupBarrier();
}

// A token survives the cut-offs: top-k / top-p (key ≥ tau) and min-p.
fn kept(x: f32, tau: u32, zmax: f32) -> bool {
  return key_of(x) >= tau && x * params.inv_temp - zmax >= params.log_min_p;
}

@compute @workgroup_size(WG)
fn sample(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let row = wid.x;
  let n = params.vocab;
  let base = row * n;

  // Pass 1: argmax of the raw logits (lowest index on ties) and the online softmax sum of z.
  var mine = Stats(EMPTY, 0u, EMPTY, 0.0);
  for (var j = lid; j < n; j += WG) {
    fold_logit(&mine, logits[base + j], j);
  }
  let all = reduce_stats(lid, mine);
  let argmax = all.amax;
  let zmax = all.m;
  let sum_all = all.s;

  if (params.greedy != 0u) {
    if (lid == 0u) {
      ids[row] = argmax;
      logp[row] = logits[base + argmax] - zmax - log(sum_all);
    }
    return;
  }

  // Cut-offs: keep the tokens with key ≥ tau.
  var tau = 0u;
  if (params.top_k > 0u && params.top_k < n) {
    tau = radix_select(lid, base, f32(params.top_k), false, zmax, 0u);
  }
  if (params.top_p < 1.0) {
    var part = 0.0;
    for (var j = lid; j < n; j += WG) {
      let x = logits[base + j];
      if (key_of(x) >= tau) {
        part += exp(x * params.inv_temp - zmax);
      }
    }
    let mass = sum_f(lid, part);
    tau = radix_select(lid, base, params.top_p * mass, true, zmax, tau);
  }

  // Draw: inverse CDF over the kept tokens in index order, each thread owning a contiguous block.
  let block = (n + WG - 1u) / WG;
  let lo = min(lid * block, n);
  let hi = min(lo + block, n);
  var part = 0.0;
  var last = 0u;
  for (var j = lo; j < hi; j++) {
    let x = logits[base + j];
    if (kept(x, tau, zmax)) {
      part += exp(x * params.inv_temp - zmax);
      last = j + 1u;
    }
  }
  atomicMax(&last_kept, last);
  exclusive_prefix(lid, part);
  let draw = uniform01(params.seed, row, params.step + step_in[0]) * hist[WG];
  if (hist[lid] <= draw && draw < hist[lid + 1u]) {
    var run = hist[lid];
    var pick = last;
    for (var j = lo; j < hi; j++) {
      let x = logits[base + j];
      if (kept(x, tau, zmax)) {
        run += exp(x * params.inv_temp - zmax);
        if (run > draw) {
          pick = j + 1u;
          break;
        }
      }
    }
    atomicMax(&chosen, pick);
  }
  workgroupBarrier();
  if (lid == 0u) {
    var id = atomicLoad(&chosen);
    // u·W rounded up to W: no block claims it; take the last kept token.
    if (id == 0u) {
      id = atomicLoad(&last_kept);
    }
    id -= 1u;
    ids[row] = id;
    let zrel = logits[base + id] * params.inv_temp - zmax;
    logp[row] = zrel - log(select(hist[WG], sum_all, params.full_logprob != 0u));
  }
}


@compute @workgroup_size(WG)
fn sample_chunks(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let c = wid.x;
  let row = wid.y;
  let n = params.vocab;
  var st = Stats(EMPTY, 0u, EMPTY, 0.0);
  for (var i = 0u; i < PER_THREAD; i++) {
    let j = c * CHUNK + i * WG + lid;
    if (j < n) {
      fold_logit(&st, logits[row * n + j], j);
    }
  }
  let r = reduce_stats(lid, st);
  if (lid == 0u) {
    part[row * params.chunks + c] = vec4f(r.xmax, bitcast<f32>(r.amax), r.m, r.s);
  }
}

var<workgroup> pick_chunk: u32;

// True for the one thread whose [hist[lid], hist[lid + 1]) holds `goal` after exclusive_prefix.
fn find_block(lid: u32, mine: f32, goal: f32) -> bool {
  exclusive_prefix(lid, mine);
  return hist[lid] <= goal && goal < hist[lid + 1u];
}

@compute @workgroup_size(WG)
fn sample_finish(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let row = wid.x;
  let n = params.vocab;
  let nc = params.chunks;
  // The row's stats from its chunks; thread lid owns the contiguous chunks [lo, hi).
  let per = (nc + WG - 1u) / WG;
  let lo = min(lid * per, nc);
  let hi = min(lo + per, nc);
  var st = Stats(EMPTY, 0u, EMPTY, 0.0);
  for (var c = lo; c < hi; c++) {
    let q = part_in[row * nc + c];
    let a = bitcast<u32>(q.y);
    if (q.x > st.xmax) {
      st.xmax = q.x;
      st.amax = a;
    }
    let mm = max(st.m, q.z);
    st.s = st.s * exp(st.m - mm) + q.w * exp(q.z - mm);
    st.m = mm;
  }
  let all = reduce_stats(lid, st);
  let zmax = all.m;
  let sum_all = all.s;
  if (params.greedy != 0u) {
    if (lid == 0u) {
      ids[row] = all.amax;
      logp[row] = logits[row * n + all.amax] - zmax - log(sum_all);
    }
    return;
  }
  // Draw: the chunk holding u·W in index order (chunk masses rescaled to zmax) ...
  var mass = 0.0;
  for (var c = lo; c < hi; c++) {
    let q = part_in[row * nc + c];
    mass += q.w * exp(q.z - zmax);
  }
  if (lid == 0u) {
    pick_chunk = nc - 1u; // u·W rounded up to W: the last token
    sh_goal = 3.0e38;
  }
  let goal = uniform01(params.seed, row, params.step + step_in[0]) * sum_all;
  if (find_block(lid, mass, goal)) {
    var run = hist[lid];
    for (var c = lo; c < hi; c++) {
      let q = part_in[row * nc + c];
      let w = q.w * exp(q.z - zmax);
      if (run + w > goal || c + 1u == hi) {
        pick_chunk = c;
        sh_goal = goal - run;
        break;
      }
      run += w;
    }
  }
  workgroupBarrier();
  let c = pick_chunk;
  let g = sh_goal;
  workgroupBarrier();
  // ... then the token inside it: thread lid owns PER_THREAD contiguous logits of the chunk.
  let j0 = c * CHUNK + lid * PER_THREAD;
  var part_sum = 0.0;
  for (var i = 0u; i < PER_THREAD; i++) {
    if (j0 + i < n) {
      part_sum += exp(logits[row * n + j0 + i] * params.inv_temp - zmax);
    }
  }
  if (lid == 0u) {
    atomicStore(&chosen, min(c * CHUNK + CHUNK, n)); // index + 1 of the chunk's last token
  }
  if (find_block(lid, part_sum, g)) {
    var run = hist[lid];
    for (var i = 0u; i < PER_THREAD; i++) {
      let j = j0 + i;
      if (j < n) {
        run += exp(logits[row * n + j] * params.inv_temp - zmax);
        if (run > g) {
          atomicMin(&chosen, j + 1u);
          break;
        }
      }
    }
  }
  workgroupBarrier();
  if (lid == 0u) {
    let id = atomicLoad(&chosen) - 1u;
    ids[row] = id;
    // Nothing is cut: the processed and the full log-prob are the same.
    logp[row] = logits[row * n + id] * params.inv_temp - zmax - log(sum_all);
  }
}

// Repetition penalty in place, one thread per logit (grid as src/gpu/grid.ts over rows · vocab).
@compute @workgroup_size(WG)
fn penalize(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let k = (wid.x + wid.y * nwg.x) * WG + lid;
  if (k >= params.rows * params.vocab) {
    return;
  }
  let row = k / params.vocab;
  let j = k - row * params.vocab;
  if ((seen[row * params.words + j / 32u] & (1u << (j % 32u))) != 0u) {
    let x = logits_rw[k];
    logits_rw[k] = select(x / params.penalty, x * params.penalty, x < 0.0);
  }
}

// The sampled token of each row joins its sequence's bitmap.
@compute @workgroup_size(WG)
fn mark(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u) {
  let row = wid.x * WG + lid;
  if (row < params.rows) {
    let j = ids_in[row];
    seen[row * params.words + j / 32u] |= 1u << (j % 32u);
  }
}
