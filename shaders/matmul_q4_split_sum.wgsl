// The sum of a split-K 4-bit GEMM's partials (matmul_q4_gemm.wgsl): y at element i = (row,
// column) of [m, n] (its part's place, q4_joined_parts.wgsl) (+)= Σ_z parts[z·m·n + i], z over the
// chunks in order (deterministic, no atomics). Grid: flat group id = wid.x + wid.y * nwg.x, 256
// elements per group.

struct Params {
  m: u32,
  n: u32,
  chunks: u32,     // partials to add
  accumulate: u32, // 1: add into y instead of overwriting it
  split1: u32,     // the output's parts (q4_joined_parts.wgsl)
  split2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> parts: array<f32>; // [chunks, m, n]
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

#include q4_joined_parts

@compute @workgroup_size(256)
fn split_sum(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  let total = params.m * params.n;
  if (i >= total) {
    return;
  }
  let chunks = params.chunks;
  var v = parts[i];
  for (var z = 1u; z < chunks; z++) {
    v += parts[z * total + i];
  }
  let o = joined_at(i / params.n, i % params.n, params.m, params.n, params.split1, params.split2);
  if (params.accumulate != 0u) {
    v += y[o];
  }
  y[o] = v;
}
