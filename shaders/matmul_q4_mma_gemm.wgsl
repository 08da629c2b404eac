enable chromium_experimental_subgroup_matrix;
// Subgroup-matrix calls run in each subgroup's own tile loop: uniform per subgroup, which is what
// the hardware needs; the workgroup-level analysis cannot see that.
diagnostic(off, chromium_experimental.subgroup_matrix_uniformity);
// requires: subgroups
// Loads and stores take the majorness as a template argument and count offsets and strides in
// elements of the array: words of the i32 arrays, which hold int8 matrices 4 to a word (I8W; byte
// offsets below are divided by it). A compiler without that spelling gets the file rewritten into
// the older one (src/gpu/subgroupMatrixSpelling.ts).

// y = x·Wᵀ with 4-bit weights on int8 tensor cores (Chromium's subgroup-matrix extension,
// i8 x i8 -> i32, M16 N16 K32): W4A8-style with two activation limbs (matmul_q4_mma_quantize.wgsl's
// quantize_rows). Exact on the weight side: c − 8 ∈ [−8, 7] is an int8, and a Q4 group (32 along
// K) is one MMA's K, so each MMA sees one weight scale per column.
// Per group, R = 128·(hi·C) + lo·C with C = c − 8, exact in i32 (|R| ≤ 32·16256·8 < 2^22), then
// y[m, n] += s[m, g]·d[n, g]·R in f32. The MMA result is opaque, so R goes through workgroup
// memory (`part`) to be scaled per element; that round trip, not the MMA, bounds the speed.
//
// A workgroup of WG threads computes a BM x BN tile of y, one K group (32) per step. Each step
// stages the two limbs of x and the unpacked int8 weights in workgroup memory (the next step's
// global loads are issued before this step's MMAs), then each subgroup walks 16x16 tiles, stored
// to `part`; after a barrier every thread scales its fixed elements of `part` into f32
// accumulators. Thread t owns column t % BN and rows t / BN + j·(WG / BN).

struct Params {
  m: u32,          // rows of x
  n: u32,          // rows of W (out features)
  k: u32,          // columns (in features), a multiple of 32
  accumulate: u32, // 1: add into y instead of overwriting it
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> xq_in: array<vec4<u32>>; // quantize_rows' limbs
@group(0) @binding(2) var<storage, read> sx_in: array<f32>;
@group(0) @binding(3) var<storage, read> codes4: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> scales: array<u32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

#include q4_format

const I8W = 4u;       // int8 elements a word of an i32 array
const BM = {{BM}}u;
const BN = {{BN}}u;
const WG = {{WG}}u;
const TILES_M = BM / 16u;
const TILES_N = BN / 16u;
const TILES = TILES_M * TILES_N;
const A_VECS = BM * 4u;               // vec4<u32> of x limbs per step
const A_PER = (A_VECS + WG - 1u) / WG; // per thread
const B_PER = (BN + WG - 1u) / WG;     // code vec4s (one row of W's group) per thread
const ACC = BM * BN / WG;             // f32 accumulators per thread
// Row stride of `part`: 8 words past a multiple of 32 banks, so that the 8 rows a result store
// writes at once fall in different banks (at stride BN they all hit the same 8 banks).
const PS = BN + 8u;
const MAGIC = 0x4B400000;             // 1.5·2^23: i + MAGIC as f32 bits is 1.5·2^23 + i for |i| < 2^22
const MAGIC_F = 12582912.0;
const PAD_CODES = 0x88888888u;        // codes 8: weight 0 (rows past N)

var<workgroup> a_hi: array<i32, BM * 8u>; // [BM rows][32 int8], row-major
var<workgroup> a_lo: array<i32, BM * 8u>;
var<workgroup> b_q: array<i32, BN * 8u>;  // [BN rows of W][32 int8]: the right matrix, column-major
var<workgroup> part: array<i32, BM * PS>; // R of the step, row-major with row stride PS
var<workgroup> s_x: array<f32, 2u * BM>;  // double-buffered: the epilogue of step g reads half g & 1
var<workgroup> s_w: array<f32, 2u * BN>;

struct Staged {
  a: array<vec4<u32>, A_PER>,
  b: array<vec4<u32>, B_PER>,
  sx: f32,
  sw: f32,
}

fn fetch(g: u32, m0: u32, n0: u32, lid: u32) -> Staged {
  let groups = params.k / 32u;
  var st: Staged;
  for (var t = 0u; t < A_PER; t++) {
    let i = lid + t * WG;
    let m = m0 + i / 4u;
    if (i < A_VECS && m < params.m) {
      st.a[t] = xq_in[(m * groups + g) * 4u + i % 4u];
    }
  }
  for (var t = 0u; t < B_PER; t++) {
    let n = n0 + lid + t * WG;
    st.b[t] = vec4<u32>(PAD_CODES);
    if (lid + t * WG < BN && n < params.n) {
      st.b[t] = codes4[n * groups + g];
    }
  }
  if (lid < BM && m0 + lid < params.m) {
    st.sx = sx_in[(m0 + lid) * groups + g];
  }
  if (lid < BN && n0 + lid < params.n) {
    st.sw = scale_of((n0 + lid) * groups + g);
  }
  return st;
}

// Four codes c (one per byte, from a masked word) as int8 c − 8: the low nibble of c − 8 is c ^ 8,
// and its sign (bit 3 of c ^ 8) fills the high nibble.
fn to_i8(nibbles: u32) -> i32 {
  let u = nibbles ^ 0x08080808u;
  return bitcast<i32>(u | ((u & 0x08080808u) * 0x1Eu));
}

fn stage(st: Staged, half: u32, lid: u32) {
  for (var t = 0u; t < A_PER; t++) {
    let i = lid + t * WG;
    if (i < A_VECS) {
      let row = i / 4u;
      let q = i % 4u;
      let v = bitcast<vec4<i32>>(st.a[t]);
      let o = row * 8u + (q % 2u) * 4u;
      if (q < 2u) {
        a_hi[o] = v.x;
        a_hi[o + 1u] = v.y;
        a_hi[o + 2u] = v.z;
        a_hi[o + 3u] = v.w;
      } else {
        a_lo[o] = v.x;
        a_lo[o + 1u] = v.y;
        a_lo[o + 2u] = v.z;
        a_lo[o + 3u] = v.w;
      }
    }
  }
  for (var t = 0u; t < B_PER; t++) {
    let r = lid + t * WG;
    if (r < BN) {
      for (var w = 0u; w < 4u; w++) {
        let c = st.b[t][w];
        b_q[r * 8u + 2u * w] = to_i8(c & 0x0F0F0F0Fu);        // k = 8w + 0, 2, 4, 6
        b_q[r * 8u + 2u * w + 1u] = to_i8((c >> 4u) & 0x0F0F0F0Fu); // k = 8w + 1, 3, 5, 7
      }
    }
  }
  if (lid < BM) {
    s_x[half * BM + lid] = st.sx;
  }
  if (lid < BN) {
    s_w[half * BN + lid] = st.sw;
  }
}

@compute @workgroup_size(WG)
fn gemm(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_id) sg: u32,
  @builtin(subgroup_size) sg_size: u32,
) {
  let groups = params.k / 32u;
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  let col = lid % BN;
  var acc: array<f32, ACC>;
  var st = fetch(0u, m0, n0, lid);
  for (var g = 0u; g < groups; g++) {
    let half = g & 1u;
    stage(st, half, lid);
    workgroupBarrier();
    if (g + 1u < groups) {
      st = fetch(g + 1u, m0, n0, lid);
    }
#if BLOCKED
    // Four subgroups of 32 as 2x2, each over a block of tiles: a weight fragment is loaded once
    // per block row and an x fragment once per block column (the walk below reloads all three).
    {
      let ti0 = (sg % 2u) * (TILES_M / 2u);
      let tj0 = (sg / 2u) * (TILES_N / 2u);
      var bs: array<subgroup_matrix_right<i8, 16, 32>, TILES_N / 2u>;
      for (var j = 0u; j < TILES_N / 2u; j++) {
        bs[j] = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>, col_major>(&b_q, (tj0 + j) * 512u / I8W, 32u / I8W);
      }
      for (var i = 0u; i < TILES_M / 2u; i++) {
        let ah = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&a_hi, (ti0 + i) * 512u / I8W, 32u / I8W);
        let al = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&a_lo, (ti0 + i) * 512u / I8W, 32u / I8W);
        for (var j = 0u; j < TILES_N / 2u; j++) {
          var r = subgroupMatrixMultiply<i32>(ah, bs[j]);
          r = subgroupMatrixScalarMultiply(r, 128);
          r = subgroupMatrixMultiplyAccumulate(al, bs[j], r);
          subgroupMatrixStore<row_major>(&part, (ti0 + i) * 16u * PS + (tj0 + j) * 16u, r, PS);
        }
      }
    }
#else
    for (var t = sg; t < TILES; t += WG / sg_size) {
      let ti = t % TILES_M;
      let tj = t / TILES_M;
      let ah = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&a_hi, ti * 512u / I8W, 32u / I8W);
      let al = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&a_lo, ti * 512u / I8W, 32u / I8W);
      let b = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>, col_major>(&b_q, tj * 512u / I8W, 32u / I8W);
      var r = subgroupMatrixMultiply<i32>(ah, b);
      r = subgroupMatrixScalarMultiply(r, 128);
      r = subgroupMatrixMultiplyAccumulate(al, b, r);
      subgroupMatrixStore<row_major>(&part, ti * 16u * PS + tj * 16u, r, PS);
    }
#endif
    workgroupBarrier();
    let sw = s_w[half * BN + col];
    for (var j = 0u; j < ACC; j++) {
      let row = lid / BN + j * (WG / BN);
      let v = bitcast<f32>(part[row * PS + col] + MAGIC) - MAGIC_F;
      acc[j] = fma(v, s_x[half * BM + row] * sw, acc[j]);
    }
  }
  let n = n0 + col;
  for (var j = 0u; j < ACC; j++) {
    let m = m0 + lid / BN + j * (WG / BN);
    if (m < params.m && n < params.n) {
      let o = m * params.n + n;
      var v = acc[j];
      if (params.accumulate != 0u) {
        v += y[o];
      }
      y[o] = v;
    }
  }
}
