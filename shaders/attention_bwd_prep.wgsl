// Attention backward, first pass: row_stats[t, h] = (lse, delta = Σ_d dO·O), the workspace of
// attention_bwd_dq and attention_bwd_dkv ([T, Hq, 2], one binding for both so that those stay
// within 8 storage buffers).

struct Params {
  rows: u32, // T
  hq: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> o: array<f32>;
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;
@group(0) @binding(3) var<storage, read> dout: array<f32>;
@group(0) @binding(4) var<storage, read_write> row_stats: array<f32>;

#include attention_head

// Grid grid1d(T·Hq, 256).
@compute @workgroup_size(FLAT_WG)
fn attn_bwd_prep(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * FLAT_WG + lid;
  if (i >= params.rows * params.hq) { return; }
  var delta = 0.0;
  for (var d = 0u; d < D; d++) { delta += dout[i * D + d] * o[i * D + d]; }
  row_stats[2u * i] = lse[i];
  row_stats[2u * i + 1u] = delta;
}
