// KV cache: copy positions [0, rows) of slot slot0 to slot dst_slot (forking a prefilled prompt).
// Elements of either type (kv_elem.wgsl). Grid grid1d(elements, 256).

struct Params {
  rows: u32,     // positions to copy
  hkv: u32,
  slot0: u32,    // the source slot
  cap: u32,      // the cache slot stride in rows
  dst_slot: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> k_cache: array<kv_t>;
@group(0) @binding(2) var<storage, read_write> v_cache: array<kv_t>;

#include kv_elem

const D: u32 = {{D}}u;
const FLAT_WG: u32 = 256u;

@compute @workgroup_size(FLAT_WG)
fn kv_copy(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = (wid.x + wid.y * nwg.x) * FLAT_WG + lid;
  let row_len = params.hkv * D;
  if (e >= params.rows * row_len) { return; }
  let src = params.slot0 * params.cap * row_len + e;
  let dst = params.dst_slot * params.cap * row_len + e;
  k_cache[dst] = k_cache[src];
  v_cache[dst] = v_cache[src];
}
