// Gather: rows[t, :] = W[ids[t], :] dequantized (embedding lookup from a 4-bit table). One
// thread per code word writes 8 weights; an id outside [0, N) gives a row of zeros.
// Grid: flat group id = wid.x + wid.y * nwg.x, 256 words per group.

struct Params {
  tokens: u32, // ids to gather
  n: u32,      // rows of W (table entries)
  k: u32,      // columns of W, a multiple of 32
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> codes: array<u32>;
@group(0) @binding(2) var<storage, read> scales: array<u32>;
@group(0) @binding(3) var<storage, read> ids: array<u32>;
@group(0) @binding(4) var<storage, read_write> rows: array<vec4<f32>>;

#include q4_format

@compute @workgroup_size(256)
fn gather(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  let words = params.k / 8u;
  if (i >= params.tokens * words) {
    return;
  }
  let t = i / words;
  let wi = i % words;
  let id = ids[t];
  var lo = vec4<f32>(0.0);
  var hi = vec4<f32>(0.0);
  if (id < params.n) {
    let c = codes[id * words + wi];
    let d = scale_of(id * (params.k / 32u) + wi / 4u);
    lo = d * lo4(c);
    hi = d * hi4(c);
  }
  rows[i * 2u] = lo;
  rows[i * 2u + 1u] = hi;
}
