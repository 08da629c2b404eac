// The vision tower's learned position embedding, added to the patch embeddings:
//   pos_embed_add  x[p, :] += Σ_{c<4} weight[p, c] · table[index[p, c], :]
// Each patch's 4 table rows and bilinear weights come from the CPU (src/model/visionPosEmbed.ts),
// already in the tower's 2x2 merge-block order and repeated over frames, packed as u32 [N, 8]:
// 4 row indices, then the 4 weights as f32 bits. The corners are summed in transformers' order
// (floor-floor, floor-ceil, ceil-floor, ceil-ceil) before the one add into x.
// Also the bias of the tower's 4-bit dense layers, which the 4-bit matmul does not add itself:
//   bias_add       x[r, c] += bias[c]
// Frozen tower: no backward. One thread per element; grids are 2-D (src/gpu/grid.ts).

struct Params {
  n: u32,       // patches · width
  width: u32,   // hidden size
  rows: u32,    // rows of the table, for bounds
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read> interp: array<u32>;
@group(0) @binding(3) var<storage, read_write> x: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn pos_embed_add(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * WG + lid;
  if (i >= p.n) {
    return;
  }
  let row0 = (i / p.width) * 8u;
  let col = i % p.width;
  var s = 0.0;
  for (var c = 0u; c < 4u; c++) {
    let row = min(interp[row0 + c], p.rows - 1u);
    s += bitcast<f32>(interp[row0 + 4u + c]) * table[row * p.width + col];
  }
  x[i] = x[i] + s;
}

@compute @workgroup_size(WG)
fn bias_add(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * WG + lid;
  if (i >= p.n) {
    return;
  }
  x[i] = x[i] + bias[i % p.width];
}
