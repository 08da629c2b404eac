// Dense f32 GEMM, tiled in workgroup memory:
//   C = alpha · op(A) · op(B) + beta · C (+ bias[col])
// op(A) is [M, K], op(B) is [K, N], C is [M, N]; all row-major with leading dimensions
// lda/ldb/ldc (elements between rows as stored) and element offsets, so a caller can address a
// slice (one head's columns of a [T, H·D] activation) without copying.
//
// Defines:  TRANS_A  A is stored [K, M] (op(A) = Aᵀ), else [M, K]
//           TRANS_B  B is stored [N, K] (op(B) = Bᵀ), else [K, N]; the Linear layer y = x·Wᵀ
//                    with W [out, in] is TRANS_B
//           BIAS     add bias[col] after the product (Linear layers with a bias)
// Batched form: workgroup_id.z selects the batch; stride_a/b/c/bias are the element distances
// between consecutive batches (0 broadcasts one operand over the batch): the vision tower's q, k
// and v are one batched product of three weights and three biases over the same x.
//
// Backward of the Linear layer y = x·Wᵀ is the same kernel: dX = dY·W (no transposes) and
// dW = dYᵀ·X (TRANS_A); beta = 1 accumulates into an existing gradient.
//
// Tiling (defines, one compiled variant per tile shape): a TX x TY workgroup (256 invocations)
// computes a BM x BN block of C (BM = TY·TM, BN = TX·TN), each invocation a TM x TN sub-block whose
// rows are TY apart and columns TX apart, so neighbouring invocations touch neighbouring addresses
// (in workgroup memory and in C). K advances BK at a time through two workgroup tiles stored
// k-major; the next step's elements are fetched into registers before the current tiles are
// multiplied, so global latency hides behind the arithmetic. Shapes (src/ops/matmul.ts picks):
// 64x128 (8x4 each) for large products, 64x64 (4x4) where 64x128 leaves SMs idle, 256x16 and
// 16x256 for LoRA's rank-r sides. Out-of-range elements of edge tiles load as zero, so any M, N,
// K works.

struct Params {
  m: u32,
  n: u32,
  k: u32,
  lda: u32,
  ldb: u32,
  ldc: u32,
  off_a: u32,
  off_b: u32,
  off_c: u32,
  stride_a: u32,
  stride_b: u32,
  stride_c: u32,
  stride_bias: u32,
  alpha: f32,
  beta: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
#if BIAS
@group(0) @binding(4) var<storage, read> bias: array<f32>;
#endif

const TX = {{TX}}u; // invocations along N
const TY = {{TY}}u; // invocations along M; TX·TY = 256
const TM = {{TM}}u; // rows of C per invocation
const TN = {{TN}}u; // columns of C per invocation
const BM = TY * TM;
const BN = TX * TN;
const BK = 16u;
const LOADS_A = BM * BK / 256u; // tile elements each invocation loads per step
const LOADS_B = BK * BN / 256u;
// One padding column breaks the power-of-two stride of k-fastest stores.
const SA = BM + 1u;
const SB = BN + 1u;

var<workgroup> tile_a: array<f32, BK * SA>; // [kk][row]
var<workgroup> tile_b: array<f32, BK * SB>; // [kk][col]

// Element (row, kk) of op(A), zero outside [M, K].
fn load_a(base: u32, row: u32, kk: u32) -> f32 {
  if (row >= params.m || kk >= params.k) {
    return 0.0;
  }
#if TRANS_A
  return a[base + kk * params.lda + row];
#else
  return a[base + row * params.lda + kk];
#endif
}

// Element (kk, col) of op(B), zero outside [K, N].
fn load_b(base: u32, kk: u32, col: u32) -> f32 {
  if (kk >= params.k || col >= params.n) {
    return 0.0;
  }
#if TRANS_B
  return b[base + col * params.ldb + kk];
#else
  return b[base + kk * params.ldb + col];
#endif
}

// Where element e of a step's A tile lives in the tile: each operand is loaded along its
// contiguous axis so that neighbouring invocations read neighbouring addresses.
fn a_slot(e: u32) -> vec2u { // (row, kk)
#if TRANS_A
  return vec2u(e % BM, e / BM);
#else
  return vec2u(e / BK, e % BK);
#endif
}

fn b_slot(e: u32) -> vec2u { // (kk, col)
#if TRANS_B
  return vec2u(e % BK, e / BK);
#else
  return vec2u(e / BN, e % BN);
#endif
}

@compute @workgroup_size(TX, TY)
fn gemm(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid3: vec3u, @builtin(local_invocation_index) lid: u32) {
  let tx = lid3.x;
  let ty = lid3.y;
  let row0 = wid.y * BM;
  let col0 = wid.x * BN;
  let base_a = params.off_a + wid.z * params.stride_a;
  let base_b = params.off_b + wid.z * params.stride_b;
  let base_c = params.off_c + wid.z * params.stride_c;

  var acc: array<array<f32, TN>, TM>;
  var na: array<f32, LOADS_A>;
  var nb: array<f32, LOADS_B>;
  for (var s = 0u; s < LOADS_A; s++) {
    let at = a_slot(lid + s * 256u);
    na[s] = load_a(base_a, row0 + at.x, at.y);
  }
  for (var s = 0u; s < LOADS_B; s++) {
    let bt = b_slot(lid + s * 256u);
    nb[s] = load_b(base_b, bt.x, col0 + bt.y);
  }
  for (var k0 = 0u; k0 < params.k; k0 += BK) {
    for (var s = 0u; s < LOADS_A; s++) {
      let at = a_slot(lid + s * 256u);
      tile_a[at.y * SA + at.x] = na[s];
    }
    for (var s = 0u; s < LOADS_B; s++) {
      let bt = b_slot(lid + s * 256u);
      tile_b[bt.x * SB + bt.y] = nb[s];
    }
    workgroupBarrier();
    // The next step's elements are in flight while this step multiplies.
    let k1 = k0 + BK;
    if (k1 < params.k) {
      for (var s = 0u; s < LOADS_A; s++) {
        let at = a_slot(lid + s * 256u);
        na[s] = load_a(base_a, row0 + at.x, k1 + at.y);
      }
      for (var s = 0u; s < LOADS_B; s++) {
        let bt = b_slot(lid + s * 256u);
        nb[s] = load_b(base_b, k1 + bt.x, col0 + bt.y);
      }
    }
    for (var kk = 0u; kk < BK; kk++) {
      var ra: array<f32, TM>;
      var rb: array<f32, TN>;
      for (var i = 0u; i < TM; i++) {
        ra[i] = tile_a[kk * SA + ty + i * TY];
      }
      for (var j = 0u; j < TN; j++) {
        rb[j] = tile_b[kk * SB + tx + j * TX];
      }
      for (var i = 0u; i < TM; i++) {
        for (var j = 0u; j < TN; j++) {
          acc[i][j] = fma(ra[i], rb[j], acc[i][j]);
        }
      }
    }
    workgroupBarrier();
  }

  for (var i = 0u; i < TM; i++) {
    let row = row0 + ty + i * TY;
    if (row >= params.m) {
      continue;
    }
    for (var j = 0u; j < TN; j++) {
      let col = col0 + tx + j * TX;
      if (col >= params.n) {
        continue;
      }
      let idx = base_c + row * params.ldc + col;
      var v = params.alpha * acc[i][j];
      // beta = 0 must not read C: a fresh pooled buffer may hold NaN bit patterns.
      if (params.beta != 0.0) {
        v += params.beta * c[idx];
      }
#if BIAS
      v += bias[wid.z * params.stride_bias + col];
#endif
      c[idx] = v;
    }
  }
}
