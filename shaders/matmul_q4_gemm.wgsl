// GEMM: y[m, n] (+)= Σ_k x[m, k] W[n, k] for any M. A workgroup of 16x16 threads computes a
// (16·GTM)x(16·GTN) tile of y, GTM rows by GTN columns per thread, stepping K by GBK (32: one
// group, or 16: half of one, to halve workgroup memory for large tiles). Each step stages the x
// tile and the dequantized W tile in workgroup memory, k-major, so that per k a thread reads
// GTM/4 + GTN/4 vec4s and does GTM·GTN multiply-adds. (Loading the next step into registers
// before the current step's arithmetic, as dinput does, was slower here.)
// y may be a joined weight's parts stored apart (split1, split2: out_at, as gemv_rows stores them).
// Split along K (a y of few tiles over a long K, where the tiles alone leave SMs idle): grid z is
// the chunk, K [z·k_chunk, (z+1)·k_chunk), and chunk z writes its own partial [m, n] at z·m·n of
// y (accumulate 0); split_sum (matmul_q4_split_sum.wgsl) adds them in chunk order (deterministic)
// into y, parts apart.

struct Params {
  m: u32,          // rows of x
  n: u32,          // rows of W (out features)
  k: u32,          // columns of W (in features), a multiple of 32
  accumulate: u32, // 1: add into y instead of overwriting it
  split1: u32,     // the output's parts (q4_joined_parts.wgsl; n, n: one [m, n] output)
  split2: u32,
  k_chunk: u32,    // K per chunk of a split along K (k: unsplit)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> codes: array<u32>;
@group(0) @binding(2) var<storage, read> scales: array<u32>;
@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>; // split: the partials [chunks, m, n]

#include q4_format
#include q4_joined_parts

fn out_at(m: u32, n: u32) -> u32 {
  return joined_at(m, n, params.m, params.n, params.split1, params.split2);
}

const MAX_GT = 8u;
override GTM: u32 = 4u;  // rows of y per thread: 4 or 8
override GTN: u32 = 4u;  // columns of y per thread: 4 or 8
override GBK: u32 = 32u; // K per step: 32 or 16
var<workgroup> xs: array<vec4<f32>, GBK * 4u * GTM>; // xs[k * 4GTM + i][j] = x[m0 + 4i + j, k0 + k]
var<workgroup> ws: array<vec4<f32>, GBK * 4u * GTN>; // ws[k * 4GTN + i][j] = W[n0 + 4i + j, k0 + k]

@compute @workgroup_size(256)
fn gemm(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let tx = lid % 16u; // columns n0 + GTN·tx ..
  let ty = lid / 16u; // rows m0 + GTM·ty ..
  let xv = 4u * GTM;  // vec4s across the x tile (16·GTM rows)
  let wv = 4u * GTN;  // vec4s across the W tile (16·GTN rows)
  let m0 = wid.y * 16u * GTM;
  let n0 = wid.x * 16u * GTN;
  let groups = params.k / 32u;
  let xrow = params.k / 4u;
  let kb = wid.z * params.k_chunk;
  let ke = min(params.k, kb + params.k_chunk);
  var acc: array<array<vec4<f32>, MAX_GT / 4u>, MAX_GT>;
  for (var k0 = kb; k0 < ke; k0 += GBK) {
    // x tile: 16·GTM rows x GBK/4 vec4s, stored transposed.
    for (var r = 0u; r < GTM * GBK / 64u; r++) {
      let i = lid + r * 256u;
      let mi = i / (GBK / 4u);
      let kv = i % (GBK / 4u);
      var v = vec4<f32>(0.0);
      if (m0 + mi < params.m) {
        v = x[(m0 + mi) * xrow + k0 / 4u + kv];
      }
      for (var j = 0u; j < 4u; j++) {
        xs[(kv * 4u + j) * xv + mi / 4u][mi % 4u] = v[j];
      }
    }
    // W tile: 16·GTN rows x GBK/8 words (8 weights each), dequantized.
    for (var r = 0u; r < (GTN * GBK + 127u) / 128u; r++) { // a 4-column, 16-deep tile has 128 words
      let i = lid + r * 256u;
      let ni = i / (GBK / 8u);
      let wi = i % (GBK / 8u);
      var lo = vec4<f32>(0.0);
      var hi = vec4<f32>(0.0);
      if (ni >= 16u * GTN) {
        continue;
      }
      if (n0 + ni < params.n) {
        let c = codes[(n0 + ni) * (params.k / 8u) + k0 / 8u + wi];
        let d = scale_of((n0 + ni) * groups + (k0 + wi * 8u) / 32u);
        lo = d * lo4(c);
        hi = d * hi4(c);
      }
      for (var j = 0u; j < 4u; j++) {
        ws[(wi * 8u + j) * wv + ni / 4u][ni % 4u] = lo[j];
        ws[(wi * 8u + 4u + j) * wv + ni / 4u][ni % 4u] = hi[j];
      }
    }
    workgroupBarrier();
    for (var k = 0u; k < GBK; k++) {
      var a: array<vec4<f32>, MAX_GT / 4u>;
      var b: array<vec4<f32>, MAX_GT / 4u>;
      for (var t = 0u; t < GTM / 4u; t++) {
        a[t] = xs[k * xv + ty * (GTM / 4u) + t];
      }
      for (var t = 0u; t < GTN / 4u; t++) {
        b[t] = ws[k * wv + tx * (GTN / 4u) + t];
      }
      for (var i = 0u; i < GTM; i++) {
        let ai = a[i / 4u][i % 4u];
        for (var t = 0u; t < GTN / 4u; t++) {
          acc[i][t] += ai * b[t];
        }
      }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < GTM; i++) {
    let m = m0 + ty * GTM + i;
    for (var j = 0u; j < GTN; j++) {
      let n = n0 + tx * GTN + j;
      if (m < params.m && n < params.n) {
        var o = (wid.z * params.m + m) * params.n + n;
        if (params.k_chunk >= params.k) {
          o = out_at(m, n);
        }
        var v = acc[i][j / 4u][j % 4u];
        if (params.accumulate != 0u) {
          v += y[o];
        }
        y[o] = v;
      }
    }
  }
}
