// Backward through the frozen weight: dx[m, k] (+)= Σ_n dy[m, n] W[n, k]. A workgroup of 16x16
// threads computes a 128x64 tile of dx (8 rows m x 4 columns k per thread), stepping N 16 rows at
// a time; the dy tile and the dequantized W tile [16 n, 64 k] are staged n-major (12.3 KiB, within
// WebGPU's default 16). The next step's dy values and code word are loaded into registers before
// the current step's arithmetic, so their latency hides behind it.

struct Params {
  m: u32,          // rows of dy and dx
  n: u32,          // rows of W (out features): dy's columns
  k: u32,          // columns of W (in features): dx's, a multiple of 32
  accumulate: u32, // 1: add into dx instead of overwriting it
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> codes: array<u32>;
@group(0) @binding(2) var<storage, read> scales: array<u32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<vec4<f32>>;

#include q4_format

const DX_TM = 128u; // rows of dy per tile
const DX_TK = 64u;  // columns of dx per tile
const BN = 16u;     // rows of W per step
// dys's row stride in vec4s, one past DX_TM / 4: with 32, the 16 lanes staging one row m of dy
// (n = 0..15) all stored to one bank (BENCHMARKS.md, kernel tuning choices).
const DYS = DX_TM / 4u + 1u;
var<workgroup> dys: array<vec4<f32>, BN * DYS>; // dys[n * DYS + i][j] = dy[m0 + 4i + j, n0 + n]
var<workgroup> wt: array<vec4<f32>, BN * DX_TK / 4u>;  // wt[n * 16 + i][j] = W[n0 + n, k0 + 4i + j]

// Thread lid's share of the step at n0: 8 values of the dy tile (128 rows x 16 columns) and, for
// the first 128 threads, one code word of the W tile (16 rows x 8 words) with its scale.
struct DxStep {
  dy: array<f32, 8>,
  code: u32,
  scale: f32,
}

fn dx_load(lid: u32, m0: u32, k0: u32, n0: u32) -> DxStep {
  var st: DxStep;
  for (var r = 0u; r < 8u; r++) {
    let i = lid + r * 256u;
    let mi = i / BN;
    let ni = i % BN;
    st.dy[r] = 0.0;
    if (m0 + mi < params.m && n0 + ni < params.n) {
      st.dy[r] = dy[(m0 + mi) * params.n + n0 + ni];
    }
  }
  st.code = 0x88888888u; // code 8 is weight 0
  st.scale = 0.0;
  let ni = lid / 8u;
  let k = k0 + (lid % 8u) * 8u;
  if (lid < BN * 8u && n0 + ni < params.n && k < params.k) {
    st.code = codes[(n0 + ni) * (params.k / 8u) + k / 8u];
    st.scale = scale_of((n0 + ni) * (params.k / 32u) + k / 32u);
  }
  return st;
}

fn dx_store(lid: u32, st: DxStep) {
  for (var r = 0u; r < 8u; r++) {
    let i = lid + r * 256u;
    let mi = i / BN;
    let ni = i % BN;
    dys[ni * DYS + mi / 4u][mi % 4u] = st.dy[r];
  }
  if (lid < BN * 8u) {
    let ni = lid / 8u;
    let wi = lid % 8u;
    wt[ni * (DX_TK / 4u) + wi * 2u] = st.scale * lo4(st.code);
    wt[ni * (DX_TK / 4u) + wi * 2u + 1u] = st.scale * hi4(st.code);
  }
}

@compute @workgroup_size(256)
fn dinput(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let tx = lid % 16u; // 4 columns k
  let ty = lid / 16u; // 8 rows m
  let m0 = wid.y * DX_TM;
  let k0 = wid.x * DX_TK;
  var acc = array<vec4<f32>, 8>();
  var st = dx_load(lid, m0, k0, 0u);
  for (var n0 = 0u; n0 < params.n; n0 += BN) {
    dx_store(lid, st);
    workgroupBarrier();
    if (n0 + BN < params.n) {
      st = dx_load(lid, m0, k0, n0 + BN);
    }
    for (var n = 0u; n < BN; n++) {
      let a0 = dys[n * DYS + 2u * ty];
      let a1 = dys[n * DYS + 2u * ty + 1u];
      let b = wt[n * (DX_TK / 4u) + tx];
      acc[0] += a0.x * b;
      acc[1] += a0.y * b;
      acc[2] += a0.z * b;
      acc[3] += a0.w * b;
      acc[4] += a1.x * b;
      acc[5] += a1.y * b;
      acc[6] += a1.z * b;
      acc[7] += a1.w * b;
    }
    workgroupBarrier();
  }
  let k = k0 + tx * 4u;
  for (var i = 0u; i < 8u; i++) {
    let m = m0 + ty * 8u + i;
    if (m < params.m && k < params.k) {
      let o = (m * params.k + k) / 4u;
      var v = acc[i];
      if (params.accumulate != 0u) {
        v += dx[o];
      }
      dx[o] = v;
    }
  }
}
