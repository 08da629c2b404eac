// LoRA's update for a few rows in one dispatch (decode): y += s·(x·Aᵀ)·Bᵀ with x [rows, k],
// A [r, k], B [n, r], y [rows, n], rows ≤ MAX_ROWS and r ≤ MAX_R.
//
// Every workgroup first computes all of u = x·Aᵀ (rows·r dot products of length k, LANES threads
// each, reduced in workgroup memory), then its WG columns of y. Recomputing u per workgroup reads
// A once per workgroup from L2; it saves the second dispatch and the round trip of u through
// memory, which is what a few rows cost (the two GEMMs of src/ops/lora.ts are launch-bound here).

struct Params {
  rows: u32,
  k: u32,
  n: u32,
  r: u32,
  scale: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> a: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
const LANES: u32 = 16u;
const MAX_ROWS: u32 = 8u;
const MAX_R: u32 = 64u;

var<workgroup> part: array<f32, WG>;
var<workgroup> u: array<f32, MAX_ROWS * MAX_R>;

@compute @workgroup_size(WG)
fn lora_gemv(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let lane = lid % LANES;
  let slot = lid / LANES;
  let pairs = p.rows * p.r;
  for (var first = 0u; first < pairs; first += WG / LANES) {
    let pair = first + slot;
    var acc = 0.0;
    if (pair < pairs) {
      let xr = (pair / p.r) * p.k;
      let ar = (pair % p.r) * p.k;
      for (var kk = lane; kk < p.k; kk += LANES) {
        acc += x[xr + kk] * a[ar + kk];
      }
    }
    part[lid] = acc;
    workgroupBarrier();
    if (lane == 0u && pair < pairs) {
      var s = 0.0;
      for (var i = 0u; i < LANES; i++) {
        s += part[slot * LANES + i];
      }
      u[pair] = s;
    }
    workgroupBarrier();
  }
  let col = (wid.x + wid.y * nwg.x) * WG + lid;
  if (col >= p.n) {
    return;
  }
  for (var t = 0u; t < p.rows; t++) {
    var s = 0.0;
    for (var j = 0u; j < p.r; j++) {
      s += u[t * p.r + j] * b[col * p.r + j];
    }
    y[t * p.n + col] += p.scale * s;
  }
}
