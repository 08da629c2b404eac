// LoRA's update for a few rows (decode): y += s·(x·Aᵀ)·Bᵀ with x [rows, k], A [r, k], B [n, r],
// y [rows, n], as two wide dispatches instead of src/ops/lora.ts's two tiled GEMMs (one 64x64
// tile each at these shapes: on the H100 ~107 µs a GEMM, 392 of them a decode step):
//   lora_down  u [rows, r] = x·Aᵀ: one workgroup per element of u, WG threads along k, tree sum
//   lora_up    y += s·u·Bᵀ: one thread per element of y, r products each
// (A first version computed u inside every workgroup of lora_up: 81 µs a call at 1 row, 306 µs
// at 8, dominated by the serial dot products that each workgroup repeated.)

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
@group(0) @binding(5) var<storage, read_write> u: array<f32>;
@group(0) @binding(6) var<storage, read> u_in: array<f32>;

const WG: u32 = 256u;

var<workgroup> red: array<f32, WG>;

@compute @workgroup_size(WG)
fn lora_down(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = wid.x + wid.y * nwg.x;
  if (e >= p.rows * p.r) {
    return;
  }
  let xr = (e / p.r) * p.k;
  let ar = (e % p.r) * p.k;
  var acc = 0.0;
  for (var kk = lid; kk < p.k; kk += WG) {
    acc += x[xr + kk] * a[ar + kk];
  }
  red[lid] = acc;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) {
      red[lid] += red[lid + s];
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    u[e] = red[0];
  }
}

@compute @workgroup_size(WG)
fn lora_up(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = (wid.x + wid.y * nwg.x) * WG + lid;
  if (e >= p.rows * p.n) {
    return;
  }
  let t = e / p.n;
  let col = e % p.n;
  var s = 0.0;
  for (var j = 0u; j < p.r; j++) {
    s += u_in[t * p.r + j] * b[col * p.r + j];
  }
  y[e] += p.scale * s;
}
