// Weights into f16 for matmul_q4_f16.wgsl's W16 variant, [N][K] row-major, two halves a word:
//   dense_to_f16: an f32 weight (the vision tower's), rounded once at load;
//   q4_to_f16:    a Q4 weight dequantized, w = d·(c − 8) rounded to f16 (as the Q4 kernel stages it).
// requires: f16

struct Params {
  count: u32, // words of w16 to write (N·K / 2)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> codes: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read_write> w16: array<u32>;

const WG = 256u;

fn index(wid: vec3u, nwg: vec3u, lid: u32) -> u32 {
  return (wid.x + wid.y * nwg.x) * WG + lid;
}

@compute @workgroup_size(WG)
fn dense_to_f16(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = index(wid, nwg, lid);
  if (i < params.count) {
    w16[i] = pack2x16float(w[i]);
  }
}

fn scale_of(s: u32) -> f32 {
  return unpack2x16float(scales[s >> 1u])[s & 1u];
}

// Word i holds weights 2i and 2i + 1 of the flat [N][K] order: codes word i / 4, group i / 16.
@compute @workgroup_size(WG)
fn q4_to_f16(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = index(wid, nwg, lid);
  if (i < params.count) {
    let c = (codes[i / 4u] >> (8u * (i % 4u))) & 0xFFu;
    let d = scale_of(i / 16u);
    w16[i] = pack2x16float(vec2<f32>(f32(c & 15u) - 8.0, f32(c >> 4u) - 8.0) * d);
  }
}
