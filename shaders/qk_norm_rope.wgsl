// Qwen3's per-head q/k RMSNorm followed by RoPE, for q and k in one dispatch (inference: the
// training forward keeps the norms' rstd and runs them apart). One workgroup per (row, head) of
// q [T, Hq·D] and k [T, Hkv·D]; each thread holds the rotated pairs (j, j + D/2):
//   n = x·rsqrt(mean(x²) + eps)·w,   out_j = n_j·cos − n_{j+h}·sin,  out_{j+h} = n_{j+h}·cos + n_j·sin
// with (cos, sin) from the rope table [T, D/2, 2] (src/ops/rope.ts), as rmsnorm_fwd then rope_apply.
// With CACHE (generation), k and v go straight into the KV cache instead of k (kv_append's
// dispatch): rows are `count` slots of `n` new rows each, row t at position lengths[slot] + t % n
// of slot slot0 + t / n (cache layout [slots, cap, Hkv·D], src/ops/kvCache.ts); the workgroup of
// k head h also copies v's head h.
// With LORA (decode with a transient adapter), q_raw, k_raw and v are the base projections and
// each value read takes its LoRA update s·u·Bᵀ here (u [T, 3r]: the q, k, v parts of
// src/ops/loraGemv.ts's down dispatch over the three adapters), in place of lora_up's dispatch.

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
@group(0) @binding(9) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(10) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(11) var<storage, read> lengths: array<u32>;
@group(0) @binding(12) var<storage, read> u_in: array<f32>;
@group(0) @binding(13) var<storage, read> bq: array<f32>;
@group(0) @binding(14) var<storage, read> bk: array<f32>;
@group(0) @binding(15) var<storage, read> bv: array<f32>;

override WG: u32 = 64; // a power of two (tree reduction)

var<workgroup> red: array<f32, WG>;

// Projection `which` (0 q, 1 k, 2 v) of row t at column col: the value at i plus, with LORA, its
// update s·Σ_j u[t, which·r + j]·B[col, j].
fn value(which: u32, t: u32, i: u32, col: u32) -> f32 {
  var x: f32;
  if (which == 0u) {
    x = q_raw[i];
  } else if (which == 1u) {
    x = k_raw[i];
  } else {
#if CACHE
    x = v[i];
#endif
  }
#if LORA
  let ub = t * 3u * p.r + which * p.r;
  let bb = col * p.r;
  var s = 0.0;
  for (var j = 0u; j < p.r; j++) {
    var b: f32;
    if (which == 0u) {
      b = bq[bb + j];
    } else if (which == 1u) {
      b = bk[bb + j];
    } else {
      b = bv[bb + j];
    }
    s += u_in[ub + j] * b;
  }
  x += select(select(p.sv, p.sk, which == 1u), p.sq, which == 0u) * s;
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
    k_cache[out_k] = value;
#else
    k[out_k] = value;
#endif
  }
}

@compute @workgroup_size(WG)
fn qk_norm_rope(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let g = wid.x + wid.y * nwg.x;
  let heads = p.hq + p.hkv;
  if (g >= p.rows * heads) {
    return;
  }
  let t = g / heads;
  let h = g % heads;
  let is_q = h < p.hq;
  let d = 2u * p.half;
  let base = select(t * p.hkv + (h - p.hq), t * p.hq + h, is_q) * d;
  let which = select(1u, 0u, is_q);
  let col = select(h - p.hq, h, is_q) * d; // the head's first column in its projection's row
  var ss = 0.0;
  for (var j = lid; j < d; j += WG) {
    let x = value(which, t, base + j, col + j);
    ss += x * x;
  }
  red[lid] = ss;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) {
      red[lid] += red[lid + s];
    }
    workgroupBarrier();
  }
  let r = inverseSqrt(red[0] / f32(d) + p.eps);
#if CACHE
  let slot = p.slot0 + t / p.n;
  let kv = select(((slot * p.cap + lengths[slot] + t % p.n) * p.hkv + h - p.hq) * d, 0u, is_q);
#else
  let kv = base;
#endif
  for (var j = lid; j < p.half; j += WG) {
    let n1 = (value(which, t, base + j, col + j) * r) * weight(is_q, j);
    let n2 = (value(which, t, base + j + p.half, col + j + p.half) * r) * weight(is_q, j + p.half);
    let c = table[t * p.half + j];
    store(is_q, base + j, kv + j, n1 * c.x - n2 * c.y);
    store(is_q, base + j + p.half, kv + j + p.half, n2 * c.x + n1 * c.y);
  }
#if CACHE
  if (!is_q) {
    for (var j = lid; j < d; j += WG) {
      v_cache[kv + j] = value(2u, t, base + j, col + j);
    }
  }
#endif
}
