// Quantize a weight W [N, K] from its raw checkpoint bytes (f32, f16 or bf16) to the Q4 format
// documented in shaders/q4_format.wgsl: groups of 32 along K, codes c = round(w/d) + 8
// in 0..15, d = m / -8 with m the group's weight of largest magnitude, d stored as f16.
//
// The source is bound as raw u32 words (two f16/bf16 values per word, low half first, as the
// safetensors bytes lie), so no full-precision f32 copy of the weight is ever made.

struct Params {
  n: u32,    // rows in this call's source
  k: u32,    // a multiple of 32
  first: u32, // index of the first group written: (first row of the source) * K / 32, even
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> codes: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> scales: array<u32>;

override SRC: u32 = 0u; // 0: f32, 1: f16, 2: bf16

// Weight e (flat index n*K + k) of the source, as f32.
fn load(e: u32) -> f32 {
  if (SRC == 0u) {
    return bitcast<f32>(src[e]);
  }
  let word = src[e >> 1u];
  if (SRC == 1u) {
    return unpack2x16float(word)[e & 1u];
  }
  return bitcast<f32>(select(word << 16u, word & 0xffff0000u, (e & 1u) == 1u));
}

// v rounded to the nearest f16 (ties to even), as an f32. Done by hand because a compiler may fold
// unpack2x16float(pack2x16float(v)) to v (lavapipe does), and the codes must be computed with the
// scale exactly as stored. The f16 step below v's magnitude is 2^(E-10), E its exponent clamped
// at -14 (f16 subnormals); dividing by a power of two is exact. |v| stays far below 65504 here.
fn round_to_f16(v: f32) -> f32 {
  let e = i32((bitcast<u32>(v) >> 23u) & 0xffu) - 127;
  let step = bitcast<f32>(u32(max(e, -14) - 10 + 127) << 23u);
  return round(v / step) * step;
}

// round(v / d), ties to even, exactly. WGSL lets a division be off by 2.5 ulp (NVIDIA's is), which
// moves quotients that sit exactly on a half (common: bf16 weights over f16 scales) to the wrong
// side; the division only picks the neighbour k, and v against (k + 0.5)·d, exact in f32 since d
// has 11 significant bits and k + 0.5 at most 6, decides.
fn round_div(v: f32, d: f32) -> f32 {
  let k = floor(v / d);
  let past = (v - (k + 0.5) * d) * sign(d);
  if (past > 0.0) {
    return k + 1.0;
  }
  if (past < 0.0) {
    return k;
  }
  return select(k + 1.0, k, k % 2.0 == 0.0);
}

// Quantize group s of the source (flat index n*G + g): write its four code words, return its f16
// scale.
fn quantize_group(s: u32) -> f32 {
  let base = s * 32u; // groups tile the flat [N, K] array since K is a multiple of 32
  var v: array<f32, 32>;
  var m = 0.0;
  for (var i = 0u; i < 32u; i++) {
    v[i] = load(base + i);
    if (abs(v[i]) > abs(m)) {
      m = v[i];
    }
  }
  let d = round_to_f16(m / -8.0);
  var words = vec4<u32>(0u);
  for (var i = 0u; i < 32u; i++) {
    var c = 8u;
    if (d != 0.0) {
      c = u32(clamp(round_div(v[i], d) + 8.0, 0.0, 15.0));
    }
    words[i / 8u] |= c << (4u * (i % 8u));
  }
  codes[params.first + s] = words;
  return d;
}

// One thread per pair of groups, because two scales share a u32. A weight may be quantized in
// blocks of rows (a call per block, as a checkpoint streams in) when each block starts on an
// even group.
// Grid: flat group id = wid.x + wid.y * nwg.x, 64 pairs per workgroup.
@compute @workgroup_size(64)
fn quantize(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let p = (wid.x + wid.y * nwg.x) * 64u + lid;
  let total = params.n * (params.k / 32u);
  if (2u * p >= total) {
    return;
  }
  let d0 = quantize_group(2u * p);
  var d1 = 0.0;
  if (2u * p + 1u < total) {
    d1 = quantize_group(2u * p + 1u);
  }
  scales[params.first / 2u + p] = pack2x16float(vec2<f32>(d0, d1));
}
