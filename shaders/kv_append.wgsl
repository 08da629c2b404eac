// KV cache (src/ops/kvCache.ts; attention_head.wgsl has its layout): write count·n new rows
// (k_new, v_new [count·n, Hkv·D], f32) at positions lengths[slot] + i, stored as the cache's element
// (kv_elem.wgsl: f32, or f16 with KV_F16). Grid grid1d(elements, 256).

struct Params {
  rows: u32,  // n, new rows per sequence
  hkv: u32,
  nseq: u32,  // count of slots
  slot0: u32, // the first
  cap: u32,   // the cache slot stride in rows
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> lengths: array<u32>;
@group(0) @binding(2) var<storage, read> k_new: array<f32>;
@group(0) @binding(3) var<storage, read> v_new: array<f32>;
@group(0) @binding(4) var<storage, read_write> k_cache: array<kv_t>;
@group(0) @binding(5) var<storage, read_write> v_cache: array<kv_t>;

#include kv_elem

const D: u32 = {{D}}u;
const FLAT_WG: u32 = 256u;

@compute @workgroup_size(FLAT_WG)
fn kv_append(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = (wid.x + wid.y * nwg.x) * FLAT_WG + lid;
  let row_len = params.hkv * D;
  if (e >= params.nseq * params.rows * row_len) { return; }
  let row = e / row_len;
  let slot = params.slot0 + row / params.rows;
  let dst = (slot * params.cap + lengths[slot] + row % params.rows) * row_len + e % row_len;
  k_cache[dst] = to_kv(k_new[e]);
  v_cache[dst] = to_kv(v_new[e]);
}
