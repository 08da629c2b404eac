// Row normalizations over [rows, n] f32 (one workgroup per row, any n):
//   rmsnorm_fwd   y = x · rsqrt(mean(x²) + eps) · w  (Qwen3VLTextRMSNorm; also q_norm/k_norm on rows
//                 of head_dim); with SAVE_RSTD the per-row rsqrt is kept for the backward.
//   rmsnorm_fwd_vec4  the same over vec4s for rows with n % 4 == 0, RT threads a row and WG / RT rows
//                 a workgroup: the hidden rows one a workgroup (RT = WG: a row of 2048 is two loads
//                 per thread of 256, not sixteen dependent-latency loads of 128), the q/k heads' rows
//                 of 128 eight a workgroup (RT = 32: one a workgroup left most threads idle behind a
//                 seven-step reduction); with ADD the norm of x + add (add: an update a decode step's
//                 last layer still owes its output, src/model/decoder.ts), x left as it is
//   rmsnorm_bwd   dx from dy, x, w and the saved rstd r (w is frozen, so no dw):
//                 dx = r·(w⊙dy) − x · r³/n · Σ(w⊙dy⊙x);  ACCUMULATE adds into dx (residual stream).
//   rmsnorm_bwd_vec4  the same over vec4s, RT threads a row (as rmsnorm_fwd_vec4).
//   layernorm_fwd y = (x − mean) · rsqrt(var + eps) · w + b  (vision tower);
//                 mean first, then the variance about it (no E[x²] − mean² cancellation).
//   layernorm_bwd dx from dy, x, w (the row's mean and r = rsqrt(var + eps) recomputed; w, b frozen):
//                 with g = w⊙dy and x̂ = (x − mean)·r, dx = r·(g − mean(g) − x̂·mean(g⊙x̂));
//                 ACCUMULATE adds into dx (LoRA on the vision blocks: the residual stream).
// Grids are 2-D (src/gpu/grid.ts): row = wid.x + wid.y * nwg.x.

struct Params {
  rows: u32,
  n: u32,
  eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(6) var<storage, read> dy: array<f32>;
@group(0) @binding(7) var<storage, read_write> dx: array<f32>;
@group(0) @binding(8) var<storage, read> x4: array<vec4f>;
@group(0) @binding(9) var<storage, read> weight4: array<vec4f>;
@group(0) @binding(10) var<storage, read_write> y4: array<vec4f>;
@group(0) @binding(11) var<storage, read> dy4: array<vec4f>;
@group(0) @binding(12) var<storage, read_write> dx4: array<vec4f>;
@group(0) @binding(13) var<storage, read> add4: array<vec4f>;

override WG: u32 = 128; // a power of two (tree reduction)
override RT: u32 = WG;  // the vec4 kernels' threads a row, a power of two dividing WG

var<workgroup> partial: array<f32, WG>;

// Sum of v over the `width` threads of lid's group (lid / width): the workgroup, or a row of RT.
// Call from uniform control flow.
fn group_sum(v: f32, lid: u32, width: u32) -> f32 {
  partial[lid] = v;
  workgroupBarrier();
  for (var s = width / 2u; s > 0u; s = s >> 1u) {
    if (lid % width < s) {
      partial[lid] = partial[lid] + partial[lid + s];
    }
    workgroupBarrier();
  }
  let total = partial[lid - lid % width];
  workgroupBarrier(); // the next call may overwrite partial
  return total;
}

fn workgroup_sum(v: f32, lid: u32) -> f32 {
  return group_sum(v, lid, WG);
}

@compute @workgroup_size(WG)
fn rmsnorm_fwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.rows) {
    return;
  }
  let base = row * p.n;
  var ss = 0.0;
  for (var i = lid; i < p.n; i += WG) {
    let v = x[base + i];
    ss += v * v;
  }
  let r = inverseSqrt(workgroup_sum(ss, lid) / f32(p.n) + p.eps);
  for (var i = lid; i < p.n; i += WG) {
    y[base + i] = (x[base + i] * r) * weight[i];
  }
#if SAVE_RSTD
  if (lid == 0u) {
    rstd[row] = r;
  }
#endif
}

// Element i of the normalised rows as vec4s: x, or x + add (ADD).
fn row_vec4(i: u32) -> vec4f {
#if ADD
  return x4[i] + add4[i];
#else
  return x4[i];
#endif
}

@compute @workgroup_size(WG)
fn rmsnorm_fwd_vec4(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  // Rows past the end take part in the barriers and write nothing.
  let row = (wid.x + wid.y * nwg.x) * (WG / RT) + lid / RT;
  let lane = lid % RT;
  let valid = row < p.rows;
  let n4 = p.n / 4u;
  let base = row * n4;
  var ss = 0.0;
  if (valid) {
    for (var i = lane; i < n4; i += RT) {
      let v = row_vec4(base + i);
      ss += dot(v, v);
    }
  }
  let r = inverseSqrt(group_sum(ss, lid, RT) / f32(p.n) + p.eps);
  if (valid) {
    for (var i = lane; i < n4; i += RT) {
      y4[base + i] = (row_vec4(base + i) * r) * weight4[i];
    }
#if SAVE_RSTD
    if (lane == 0u) {
      rstd[row] = r;
    }
#endif
  }
}

@compute @workgroup_size(WG)
fn rmsnorm_bwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.rows) {
    return;
  }
  let base = row * p.n;
  let r = rstd[row];
  var s = 0.0;
  for (var i = lid; i < p.n; i += WG) {
    s += dy[base + i] * weight[i] * x[base + i];
  }
  let c = workgroup_sum(s, lid) * r * r * r / f32(p.n);
  for (var i = lid; i < p.n; i += WG) {
    let g = dy[base + i] * weight[i] * r - x[base + i] * c;
#if ACCUMULATE
    dx[base + i] += g;
#else
    dx[base + i] = g;
#endif
  }
}

@compute @workgroup_size(WG)
fn rmsnorm_bwd_vec4(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let row = (wid.x + wid.y * nwg.x) * (WG / RT) + lid / RT;
  let lane = lid % RT;
  let valid = row < p.rows;
  let n4 = p.n / 4u;
  let base = row * n4;
  var r = 0.0;
  var s = 0.0;
  if (valid) {
    r = rstd[row];
    for (var i = lane; i < n4; i += RT) {
      s += dot(dy4[base + i] * weight4[i], x4[base + i]);
    }
  }
  let c = group_sum(s, lid, RT) * r * r * r / f32(p.n);
  if (valid) {
    for (var i = lane; i < n4; i += RT) {
      let g = dy4[base + i] * weight4[i] * r - x4[base + i] * c;
#if ACCUMULATE
      dx4[base + i] += g;
#else
      dx4[base + i] = g;
#endif
    }
  }
}

// The mean of the row at base and 1/sqrt(its variance + eps), two passes over x (the forward and the
// backward recompute them alike).
fn layernorm_stats(base: u32, lid: u32) -> vec2f {
  var s = 0.0;
  for (var i = lid; i < p.n; i += WG) {
    s += x[base + i];
  }
  let mean = workgroup_sum(s, lid) / f32(p.n);
  var ss = 0.0;
  for (var i = lid; i < p.n; i += WG) {
    let d = x[base + i] - mean;
    ss += d * d;
  }
  return vec2f(mean, inverseSqrt(workgroup_sum(ss, lid) / f32(p.n) + p.eps));
}

@compute @workgroup_size(WG)
fn layernorm_fwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.rows) {
    return;
  }
  let base = row * p.n;
  let stats = layernorm_stats(base, lid);
  let mean = stats.x;
  let r = stats.y;
  for (var i = lid; i < p.n; i += WG) {
    y[base + i] = (x[base + i] - mean) * r * weight[i] + bias[i];
  }
}

@compute @workgroup_size(WG)
fn layernorm_bwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.rows) {
    return;
  }
  let base = row * p.n;
  let stats = layernorm_stats(base, lid);
  let mean = stats.x;
  let r = stats.y;
  var sg = 0.0;
  var sgx = 0.0;
  for (var i = lid; i < p.n; i += WG) {
    let g = weight[i] * dy[base + i];
    sg += g;
    sgx += g * (x[base + i] - mean) * r;
  }
  let mg = workgroup_sum(sg, lid) / f32(p.n);
  let mgx = workgroup_sum(sgx, lid) / f32(p.n);
  for (var i = lid; i < p.n; i += WG) {
    let v = r * (weight[i] * dy[base + i] - mg - (x[base + i] - mean) * r * mgx);
#if ACCUMULATE
    dx[base + i] += v;
#else
    dx[base + i] = v;
#endif
  }
}
