// dK and dV of the shared prefix's key rows [0, dkv_rows): the sums of DKV_SPLIT's partials in
// chunk order (deterministic). Grid: flat group id = wid.x + wid.y * nwg.x, FLAT_WG elements each.

struct Params {
  hkv: u32,
  dkv_splits: u32, // partials to add
  dkv_rows: u32,   // key rows of the shared prefix's tiles
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> part: array<f32>; // attention_bwd_dkv's DKV_SPLIT partials
@group(0) @binding(2) var<storage, read_write> dk: array<f32>;
@group(0) @binding(3) var<storage, read_write> dv: array<f32>;

#include attention_head

@compute @workgroup_size(FLAT_WG)
fn attn_dkv_sum(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * FLAT_WG + lid;
  let n = params.dkv_rows * params.hkv * D;
  if (i >= n) { return; }
  var sk = 0.0;
  var sv = 0.0;
  for (var z = 0u; z < params.dkv_splits; z++) {
    sk += part[2u * z * n + i];
    sv += part[(2u * z + 1u) * n + i];
  }
  dk[i] = sk;
  dv[i] = sv;
}
