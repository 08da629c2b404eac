// Qwen3's per-head q/k RMSNorm followed by RoPE, for q and k in one dispatch (inference: the
// training forward keeps the norms' rstd and runs them apart). One workgroup per (row, head) of
// q [T, Hq·D] and k [T, Hkv·D]; each thread holds the rotated pairs (j, j + D/2):
//   n = x·rsqrt(mean(x²) + eps)·w,   out_j = n_j·cos − n_{j+h}·sin,  out_{j+h} = n_{j+h}·cos + n_j·sin
// with (cos, sin) from the rope table [T, D/2, 2] (src/ops/rope.ts), as rmsnorm_fwd then rope_apply.

struct Params {
  rows: u32,
  hq: u32,
  hkv: u32,
  half: u32,
  eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q_raw: array<f32>;
@group(0) @binding(2) var<storage, read> k_raw: array<f32>;
@group(0) @binding(3) var<storage, read> q_weight: array<f32>;
@group(0) @binding(4) var<storage, read> k_weight: array<f32>;
@group(0) @binding(5) var<storage, read> table: array<vec2f>;
@group(0) @binding(6) var<storage, read_write> q: array<f32>;
@group(0) @binding(7) var<storage, read_write> k: array<f32>;

override WG: u32 = 64; // a power of two (tree reduction)

var<workgroup> red: array<f32, WG>;

fn load(is_q: bool, i: u32) -> f32 {
  if (is_q) {
    return q_raw[i];
  }
  return k_raw[i];
}

fn weight(is_q: bool, i: u32) -> f32 {
  if (is_q) {
    return q_weight[i];
  }
  return k_weight[i];
}

fn store(is_q: bool, i: u32, v: f32) {
  if (is_q) {
    q[i] = v;
  } else {
    k[i] = v;
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
  var ss = 0.0;
  for (var j = lid; j < d; j += WG) {
    let v = load(is_q, base + j);
    ss += v * v;
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
  for (var j = lid; j < p.half; j += WG) {
    let n1 = (load(is_q, base + j) * r) * weight(is_q, j);
    let n2 = (load(is_q, base + j + p.half) * r) * weight(is_q, j + p.half);
    let c = table[t * p.half + j];
    store(is_q, base + j, n1 * c.x - n2 * c.y);
    store(is_q, base + j + p.half, n2 * c.x + n1 * c.y);
  }
}
