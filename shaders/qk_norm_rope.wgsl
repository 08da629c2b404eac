// Qwen3's per-head q/k RMSNorm followed by RoPE, for q and k in one dispatch (inference: the
// training forward keeps the norms' rstd and runs them apart). One workgroup per (row, head) of
// q [T, Hq·D] and k [T, Hkv·D]; each thread holds its rotated pairs (j, j + D/2) in registers
// (read once), so a head is one load, one reduction and one store:
//   n = x·rsqrt(mean(x²) + eps)·w,   out_j = n_j·cos − n_{j+h}·sin,  out_{j+h} = n_{j+h}·cos + n_j·sin
// with (cos, sin) from the rope table [T, D/2, 2] (src/ops/rope.ts), as rmsnorm_fwd then rope_apply.
// With CACHE (generation), k and v go straight into the KV cache instead of k (kv_append's
// dispatch): rows are `count` slots of `n` new rows each, row t at position lengths[slot] + t % n
// of slot slot0 + t / n (row slot·cap + position of the cache, src/ops/kvCache.ts); v's heads take
// workgroups of their own after the k heads (a copy, no norm); both stored as the cache's element
// (kv_elem.wgsl: f16 with KV_F16).
// With LORA (decode with a transient adapter), q_raw, k_raw and v are the base projections and
// each value read takes its LoRA update s·u·Bᵀ here (u [T, 3r]: the q, k, v parts of
// src/ops/loraGemv.ts's down dispatch over the three adapters), in place of lora_up's dispatch;
// with LVEC4 (r a multiple of 4) u and B are read as vec4s.

struct Params {
  rows: u32,
  hq: u32,
  hkv: u32,
  half: u32,
  eps: f32,
  n: u32,
  slot0: u32,
  cap: u32,
  r: u32,
  sq: f32,
  sk: f32,
  sv: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q_raw: array<f32>;
@group(0) @binding(2) var<storage, read> k_raw: array<f32>;
@group(0) @binding(3) var<storage, read> q_weight: array<f32>;
@group(0) @binding(4) var<storage, read> k_weight: array<f32>;
@group(0) @binding(5) var<storage, read> table: array<vec2f>;
@group(0) @binding(6) var<storage, read_write> q: array<f32>;
@group(0) @binding(7) var<storage, read_write> k: array<f32>;
@group(0) @binding(8) var<storage, read> v: array<f32>;
@group(0) @binding(9) var<storage, read_write> k_cache: array<kv_t>;
@group(0) @binding(10) var<storage, read_write> v_cache: array<kv_t>;
@group(0) @binding(11) var<storage, read> lengths: array<u32>;
@group(0) @binding(12) var<storage, read> u_in: array<{{LELEM}}>;
@group(0) @binding(13) var<storage, read> bq: array<{{LELEM}}>;
@group(0) @binding(14) var<storage, read> bk: array<{{LELEM}}>;
@group(0) @binding(15) var<storage, read> bv: array<{{LELEM}}>;

#include kv_elem

const WG: u32 = 64u;
/** Rotated pairs a thread holds: D/2 ≤ WG·PAIRS (src/ops/qkNormRope.ts MAX_HEAD_DIM). */
const PAIRS: u32 = 4u;
/** Partial sums of the reduction's first stage (each over WG / FOLD threads). */
const FOLD: u32 = 8u;

var<workgroup> red: array<f32, WG>;
var<workgroup> part: array<f32, FOLD>;

#if LORA
fn dot_l(a: {{LELEM}}, b: {{LELEM}}) -> f32 {
#if LVEC4
  return dot(a, b);
#else
  return a * b;
#endif
}

// Element `at` of the B of projection `which` (0 q, 1 k, 2 v).
fn b_of(which: u32, at: u32) -> {{LELEM}} {
  if (which == 0u) {
    return bq[at];
  } else if (which == 1u) {
    return bk[at];
  }
  return bv[at];
}

// s·Σ_j u[t, which·r + j]·B[col, j] for the two columns a thread holds (a rotated pair), in one
// loop: a decode step fetches this kernel's code cold, so the code is kept short.
fn lora_delta(which: u32, t: u32, cols: vec2u) -> vec2f {
  let rw = p.r / {{LW}}u;
  let ub = (t * 3u + which) * rw;
  var s = vec2f(0.0);
  for (var j = 0u; j < rw; j++) {
    let u = u_in[ub + j];
    s += vec2f(dot_l(u, b_of(which, cols.x * rw + j)), dot_l(u, b_of(which, cols.y * rw + j)));
  }
  return select(select(p.sv, p.sk, which == 1u), p.sq, which == 0u) * s;
}
#endif

// Projection `which` of row t at indices i of its rows, columns cols of the row (with its LoRA update).
fn values(which: u32, t: u32, i: vec2u, cols: vec2u) -> vec2f {
  var x: vec2f;
  if (which == 0u) {
    x = vec2f(q_raw[i.x], q_raw[i.y]);
  } else if (which == 1u) {
    x = vec2f(k_raw[i.x], k_raw[i.y]);
  } else {
#if CACHE
    x = vec2f(v[i.x], v[i.y]);
#endif
  }
#if LORA
  x += lora_delta(which, t, cols);
#endif
  return x;
}

fn weight(is_q: bool, i: u32) -> f32 {
  if (is_q) {
    return q_weight[i];
  }
  return k_weight[i];
}

// Index i of k's rows [T, Hkv·D] is written at out_k (its cache place with CACHE).
fn store(is_q: bool, i: u32, out_k: u32, value: f32) {
  if (is_q) {
    q[i] = value;
  } else {
#if CACHE
    k_cache[out_k] = to_kv(value);
#else
    k[out_k] = value;
#endif
  }
}

@compute @workgroup_size(WG)
fn qk_norm_rope(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let g = wid.x + wid.y * nwg.x;
#if CACHE
  let heads = p.hq + 2u * p.hkv; // q, k, then v heads
#else
  let heads = p.hq + p.hkv;
#endif
  if (g >= p.rows * heads) {
    return;
  }
  let t = g / heads;
  let h = g % heads;
  let d = 2u * p.half;
  let is_q = h < p.hq;
  let kvh = select(h - p.hq, 0u, is_q) % p.hkv; // the k or v head
#if CACHE
  let slot = p.slot0 + t / p.n;
  let kv = ((slot * p.cap + lengths[slot] + t % p.n) * p.hkv + kvh) * d;
  if (h >= p.hq + p.hkv) {
    let base = (t * p.hkv + kvh) * d;
    for (var j = lid; j < p.half; j += WG) {
      let x = values(2u, t, vec2u(base + j, base + j + p.half), vec2u(kvh * d + j, kvh * d + j + p.half));
      v_cache[kv + j] = to_kv(x.x);
      v_cache[kv + j + p.half] = to_kv(x.y);
    }
    return;
  }
#else
  let kv = (t * p.hkv + kvh) * d;
#endif
  let base = select((t * p.hkv + kvh) * d, (t * p.hq + h) * d, is_q);
  let which = select(1u, 0u, is_q);
  let col = select(kvh, h, is_q) * d; // the head's first column in its projection's row
  var lo = array<f32, PAIRS>();
  var hi = array<f32, PAIRS>();
  var ss = 0.0;
  for (var i = 0u; i < PAIRS; i++) {
    let j = lid + i * WG;
    if (j < p.half) {
      let x = values(which, t, vec2u(base + j, base + j + p.half), vec2u(col + j, col + j + p.half));
      lo[i] = x.x;
      hi[i] = x.y;
      ss += lo[i] * lo[i] + hi[i] * hi[i];
    }
  }
  red[lid] = ss;
  workgroupBarrier();
  if (lid < FOLD) {
    var s = 0.0;
    for (var c = 0u; c < WG / FOLD; c++) {
      s += red[lid * (WG / FOLD) + c];
    }
    part[lid] = s;
  }
  workgroupBarrier();
  var total = 0.0;
  for (var c = 0u; c < FOLD; c++) {
    total += part[c];
  }
  let r = inverseSqrt(total / f32(d) + p.eps);
  for (var i = 0u; i < PAIRS; i++) {
    let j = lid + i * WG;
    if (j < p.half) {
      let n1 = (lo[i] * r) * weight(is_q, j);
      let n2 = (hi[i] * r) * weight(is_q, j + p.half);
      let c = table[t * p.half + j];
      store(is_q, base + j, kv + j, n1 * c.x - n2 * c.y);
      store(is_q, base + j + p.half, kv + j + p.half, n2 * c.x + n1 * c.y);
    }
  }
}
