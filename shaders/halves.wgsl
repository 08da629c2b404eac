// Dense weights in 16-bit halves, two a u32 word (element e in word e / 2, the low half first):
//   widen_halves: bf16 (BF16) or f16 halves to f32, exactly (the f32 GEMM and the tensor-core
//                 copies read f32: matmul.ts, projection.ts);
//   narrow_bf16:  f32 to bf16, rounded to nearest even (random weights laid out as a bf16
//                 checkpoint loads: randomWeights.ts).
// A thread a word. Grid: grid1d over the words.

struct Params {
  count: u32, // elements (an odd count leaves the last word's high half alone)
}

@group(0) @binding(0) var<uniform> params: Params;
#if NARROW
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
#else
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
#endif

fn word(wid: vec3u, nwg: vec3u, lid: u32) -> u32 {
  return (wid.x + wid.y * nwg.x) * 256u + lid;
}

#if NARROW
// The upper half of x's bits, rounded to nearest even on the lower half (x finite).
fn bf16_bits(x: f32) -> u32 {
  let u = bitcast<u32>(x);
  return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
}

@compute @workgroup_size(256)
fn narrow_bf16(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = word(wid, nwg, lid);
  if (2u * i < params.count) {
    let hi = select(0u, bf16_bits(src[2u * i + 1u]), 2u * i + 1u < params.count);
    dst[i] = bf16_bits(src[2u * i]) | (hi << 16u);
  }
}
#else
@compute @workgroup_size(256)
fn widen_halves(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = word(wid, nwg, lid);
  if (2u * i < params.count) {
    let w = src[i];
#if BF16
    // bf16 is the top half of an f32.
    let v = vec2(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u));
#else
    let v = unpack2x16float(w);
#endif
    dst[2u * i] = v.x;
    if (2u * i + 1u < params.count) {
      dst[2u * i + 1u] = v.y;
    }
  }
}
#endif
