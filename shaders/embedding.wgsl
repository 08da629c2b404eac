// Token embedding gather and row scatters at visual positions, over f32 rows of `width`.
//   embed_gather  out[t, :] = table[ids[t], :]  (f32 table [rows = vocab, width]); an id outside
//                 the table gives a zero row.
//   scatter_rows  dst[positions[j], :] = src[j, :]   image embeddings into the <|image_pad|> rows
//                 (masked_scatter, in order);
//                 with ACCUMULATE: dst[positions[j], :] += src[j, :], the DeepStack residual add
//                 after decoder layers 0, 1, 2. Positions must be distinct (they are: one per
//                 visual token), so no two threads touch one element. Its backward is the
//                 identity on dst's gradient; the gradient w.r.t. src (frozen vision features)
//                 is not needed, so there is no backward kernel.
//   sum_rows      dst[p.row, :] += Σ_j src[positions[j], :]  the rows a gather read several times
//                 (training's shared prompt row predicts every completion's first token) summed
//                 back into it, in order: the backward of a gather with a repeated index.
// One thread per output element. Grids are 2-D (src/gpu/grid.ts): flat group id = wid.x + wid.y * nwg.x.

struct Params {
  n: u32,      // elements written: ids·width (gather) or positions·width (scatter); sum_rows: positions
  width: u32,  // row width
  rows: u32,   // rows of the table (gather) or of dst (scatter), for bounds
  row: u32,    // sum_rows: the row of dst
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> src: array<f32>;
@group(0) @binding(5) var<storage, read> positions: array<u32>;
@group(0) @binding(6) var<storage, read_write> dst: array<f32>;

override WG: u32 = 256;

fn flat_index(wid: vec3u, nwg: vec3u, lid: u32) -> u32 {
  return (wid.x + wid.y * nwg.x) * WG + lid;
}

@compute @workgroup_size(WG)
fn embed_gather(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i >= p.n) {
    return;
  }
  let id = ids[i / p.width];
  var v = 0.0;
  if (id < p.rows) {
    v = table[id * p.width + i % p.width];
  }
  out[i] = v;
}

@compute @workgroup_size(WG)
fn scatter_rows(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i >= p.n) {
    return;
  }
  let row = positions[i / p.width];
  if (row >= p.rows) {
    return;
  }
  let k = row * p.width + i % p.width;
#if ACCUMULATE
  dst[k] = dst[k] + src[i];
#else
  dst[k] = src[i];
#endif
}

// One thread per column of the row; p.n: the source rows in positions.
@compute @workgroup_size(WG)
fn sum_rows(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let c = flat_index(wid, nwg, lid);
  if (c >= p.width) {
    return;
  }
  var v = dst[p.row * p.width + c];
  for (var j = 0u; j < p.n; j++) {
    v += src[positions[j] * p.width + c];
  }
  dst[p.row * p.width + c] = v;
}
