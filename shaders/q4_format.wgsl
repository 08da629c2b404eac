// The Q4 weight format, shared by every kernel that reads 4-bit weights (the matmul_q4_* files,
// matmul_q4_mma_*; shaders/quantize_q4.wgsl writes it). The including file binds `scales`.
//
// The Q4 format of a weight W [N, K] (nn.Linear [out, in]; K a multiple of 32, N anything):
//   groups:  32 consecutive weights along K share one scale; G = K / 32 groups per row, and group
//            (n, g) has the flat index s = n*G + g.
//   codes:   u32 [N, K/8]. Weight (n, k) is the 4-bit code c in bits 4*(k%8) .. 4*(k%8)+3 of word
//            n*K/8 + k/8, so the four words of group s are the vec4<u32> number s.
//   scales:  u32 [ceil(N*G/2)]. Scale d of group s is the f16 in half (s & 1) of word s >> 1 (the
//            low half first, as pack2x16float writes it).
//   value:   w = d * (c - 8).
// The scale is symmetric absmax with the sign kept: d = m / -8, where m is the group's weight of
// largest magnitude, so m itself is code 0 (exactly -8·d) and the other weights use codes 0..15.
// On Gaussian weights its relative RMS error is 0.085, below a scale+offset form at the same
// 4.5 bits per weight (offset and scale f16, groups of 64: 0.089).

fn scale_of(s: u32) -> f32 {
  return unpack2x16float(scales[s >> 1u])[s & 1u];
}

// The eight codes of one word as signed values (c - 8): weights k%8 = 0..3, then 4..7.
fn lo4(w: u32) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(15u)) - 8.0;
}
fn hi4(w: u32) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(w) >> vec4<u32>(16u, 20u, 24u, 28u)) & vec4<u32>(15u)) - 8.0;
}
