// KV cache: the filled positions of slots slot0 .. slot0 + nseq − 1. Grid ceil(nseq / 256).

struct Params {
  rows: u32,  // positions: set to, or added
  nseq: u32,
  slot0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> lengths_rw: array<u32>;

const FLAT_WG: u32 = 256u;

// lengths[slot0 + i] = rows for i < nseq. Grid ceil(nseq / 256).
@compute @workgroup_size(FLAT_WG)
fn kv_set_lengths(@builtin(global_invocation_id) gid: vec3u) {
  if (gid.x < params.nseq) { lengths_rw[params.slot0 + gid.x] = params.rows; }
}

// lengths[slot0 + i] += rows for i < nseq, after every layer has appended. Grid ceil(nseq / 256).
@compute @workgroup_size(FLAT_WG)
fn kv_advance(@builtin(global_invocation_id) gid: vec3u) {
  if (gid.x < params.nseq) { lengths_rw[params.slot0 + gid.x] += params.rows; }
}
