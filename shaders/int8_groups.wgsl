// Groups of 32 f32 values as int8, the form the 4-bit GEMV's int8 kernels read: included by
// matmul_q4_gemv_rows.wgsl and matmul_q4_quantize_x.wgsl, which quantize x themselves, and by the
// kernels that leave the x they write quantized for the GEMV after them: attention_decode.wgsl
// (quantize_group), lora_gemv.wgsl and attention_combine.wgsl (by lanes: int8_lanes.wgsl). Needs
// WGSL's packed_4x8_integer_dot_product (pack4xI8Clamp).

const I8_BIAS = 0x4B400000i;  // 1.5·2^23 as f32 bits: an integer n, |n| < 2^22, added is the float 1.5·2^23 + n

// The largest |v| of a group's 32 values.
fn group_absmax(v: array<vec4<f32>, 8>) -> f32 {
  var big = vec4<f32>(0.0);
  for (var j = 0u; j < 8u; j++) {
    big = max(big, abs(v[j]));
  }
  return max(max(big.x, big.y), max(big.z, big.w));
}

// 127/a: what rounds a group whose largest |value| is a to int8 (0 for a group of zeros).
fn group_inv(a: f32) -> f32 {
  return select(127.0 / a, 0.0, a == 0.0);
}

// The two words of a group's vec4s 2w and 2w + 1 (lo, hi) in the code words' byte order: their
// even components (weights 8w, 8w+2, 8w+4, 8w+6), then their odd ones.
fn pack_pair(lo: vec4<i32>, hi: vec4<i32>) -> vec2<u32> {
  return vec2<u32>(pack4xI8Clamp(vec4<i32>(lo.x, lo.z, hi.x, hi.z)), pack4xI8Clamp(vec4<i32>(lo.y, lo.w, hi.y, hi.w)));
}

// A group's third vec4: the scale s = a/127 and the integer's start BIAS − 8·Σq, as bits.
fn group_header(a: f32, sum: i32) -> vec4<u32> {
  return vec4<u32>(bitcast<u32>(a / 127.0), bitcast<u32>(I8_BIAS - 8i * sum), 0u, 0u);
}

// A group's 32 int8 values q (q[2w]: weights 8w..8w+3, q[2w + 1]: 8w+4..8w+7) packed in the byte
// order of the code words' even and odd weights (words 0-1, then 2-3), and their sum.
struct Limb {
  p: array<vec4<u32>, 2>,
  sum: i32,
}

fn pack_limb(q: array<vec4<i32>, 8>) -> Limb {
  var sum = vec4<i32>(0);
  var p: array<u32, 8>;
  for (var w = 0u; w < 4u; w++) {
    let lo = q[2u * w];
    let hi = q[2u * w + 1u];
    sum += lo + hi;
    let words = pack_pair(lo, hi);
    p[2u * w] = words.x;
    p[2u * w + 1u] = words.y;
  }
  return Limb(array<vec4<u32>, 2>(vec4<u32>(p[0], p[1], p[2], p[3]), vec4<u32>(p[4], p[5], p[6], p[7])), sum.x + sum.y + sum.z + sum.w);
}

// A group's 32 values as 3 vec4s: its packed q (two vec4s, pack_limb's order), then the scale
// s = a/127 and the integer's start BIAS − 8·Σq as bits (gemv_rows_i8's staged and quantize_x's layout).
fn quantize_group(v: array<vec4<f32>, 8>) -> array<vec4<u32>, 3> {
  let a = group_absmax(v);
  let inv = group_inv(a);
  var q: array<vec4<i32>, 8>;
  for (var j = 0u; j < 8u; j++) {
    q[j] = vec4<i32>(round(v[j] * inv));
  }
  let l = pack_limb(q);
  return array<vec4<u32>, 3>(l.p[0], l.p[1], group_header(a, l.sum));
}
