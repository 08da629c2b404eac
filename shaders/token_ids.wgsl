// Token ids moved into a block of a token table stored in row blocks: out[i] = ids[i] − first
// (wrapping in u32, so an id below the block becomes a huge index that the gathers read as zeros).
// On the GPU so that decode can feed the ids it sampled straight back into the embedding.

struct Params {
  n: u32,
  first: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

override WG: u32 = 64u;

@compute @workgroup_size(WG)
fn shift_ids(@builtin(global_invocation_id) gid: vec3u) {
  let i = gid.x;
  if (i < p.n) {
    out[i] = ids[i] - p.first;
  }
}
