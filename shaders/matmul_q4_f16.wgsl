enable chromium_experimental_subgroup_matrix;
// Subgroup-matrix calls run in each subgroup's own tile loop: uniform per subgroup, which is what
// the hardware needs; the workgroup-level analysis cannot see that.
diagnostic(off, chromium_experimental.subgroup_matrix_uniformity);
// requires: f16, subgroups

// 4-bit weights on f16 tensor cores (f16 x f16 -> f32 subgroup matrices, FR x FR x FK):
//   gemm:    y [M, N] (+)= x [M, K] · Wᵀ      (W [N, K] in the Q4 format; reduction over K)
//   DINPUT:  dX [M, K] (+)= dY [M, N] · W     (the same file with the reduction over W's rows; Q4 W)
//   W16:     W given in f16 instead of Q4, forward only (dense weights, or Q4 expanded once a call
//            by f16_convert.wgsl, transposed for an input gradient, which is then this product on Wᵀ),
//            with a bias [N] added as y is stored where params.bias is 1 (dense weights' biases)
// Params name the product, not the weight: `n` output columns, `k` the reduction.
// x comes as f16, scaled per row by a power of two (f16_row_scale.wgsl: no overflow, no flush to
// zero); x and an f16 W in blocks of 32 x 32 (f16_blocks.wgsl), so that a step's loads are runs of
// 2 KiB. Each K step of 32 (one Q4 group along the weight's K) stages x's rows and W (dequantized
// with its group's scale) as f16 in workgroup memory; the accumulators stay in the tensor cores'
// registers across the whole reduction and meet workgroup memory only in the epilogue. Global loads
// of step s + 1 are issued before step s's MMAs; they are staged into the other of two buffers
// (NBUF 2), or, with one buffer, between two barriers after the MMAs (sixteen subgroups on one
// buffer ran faster than eight on two in the same workgroup memory: BENCHMARKS.md).
// Error: x and W each rounded to f16 (relative 2^-11), f32 accumulation.

struct Params {
  m: u32,          // rows of x (and of y)
  n: u32,          // columns of y
  k: u32,          // the reduction, a multiple of 32
  accumulate: u32, // 1: add into y instead of overwriting it (ABLATE: and 2, 4, 8, 16 below)
  split1: u32,     // the output's parts (q4_joined_parts.wgsl; n, n: one [m, n] output); no tile straddles two
  split2: u32,
  bias: u32,       // W16: 1 adds bias_v[column] to each output (dense weights' biases)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;  // x·rs rounded to f16, 8 a vec4, blocked (row_scale)
@group(0) @binding(2) var<storage, read> rs: array<f32>;       // row_scale's power of two per row of x
#if W16
@group(0) @binding(3) var<storage, read> w16: array<vec4<u32>>;   // W already in f16 [N][K], 8 a vec4, blocked (f16_convert.wgsl)
@group(0) @binding(6) var<storage, read> bias_v: array<f32>;      // [N] where params.bias is 1 (else any f32 buffer)
#else
@group(0) @binding(3) var<storage, read> codes2: array<vec2<u32>>; // the Q4 codes, 16 a vec2
@group(0) @binding(4) var<storage, read> scales: array<u32>;
#endif
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

#if !W16
#include q4_format
#endif
#include q4_joined_parts

const BM = {{BM}}u;       // rows of y a workgroup
const BN = {{BN}}u;       // columns of y a workgroup
const WG = {{WG}}u;       // threads, in subgroups of 32
const FR = {{FR}}u;       // the fragment's rows = columns (M = N of the configuration)
const FK = {{FK}}u;       // the fragment's K
const TM = 2u;            // fragments a subgroup along M
const TN = {{TN}}u;       // fragments a subgroup along N: 2 or 4 (#repeat)
const NBUF = {{NBUF}}u;   // staging buffers: 2, or 1 (NBUF1)
const BK = 32u;           // the reduction a step: one Q4 group
// KSTEPS = BK / FK fragment steps a staged step, unrolled (#repeat) so that their offsets are constants.
const SGS = WG / 32u;
const SG_N = BN / (FR * TN); // subgroups along N
const AS = BK + {{AS_PAD}}u; // row stride of the staged x (f16): AS_PAD 8 puts 8 rows in 8 bank groups
// Staging is an array of fixed-size blocks, each fragment load reading inside one block at a
// constant offset: Dawn's robustness then has nothing to check (a load at a computed offset into
// the whole array gets a bounds test and a copy of the matrix: BENCHMARKS.md).
const A_BLOCK = FR * AS;  // x: FR rows a block
const A_BLOCKS = BM / FR;
#if DINPUT
const CN = TN * FR;       // W's columns (along N) a subgroup reads
const CS = CN + 8u;       // their row stride: 8 past a multiple of 16 puts 8 rows in 8 bank groups
const B_BLOCK = BK * CS;  // W [BK][CN] row-major: one subgroup column's share of a step
const B_BLOCKS = BN / CN;
#else
const B_BLOCK = FR * AS;  // W's rows along N, FR a block: the right matrix column-major
const B_BLOCKS = BN / FR;
#endif
const A_VECS = BM * 4u;       // vec4s of x a step
const A_PER = A_VECS / WG;
#if W16
const B_VECS = BN * 4u;       // vec4s of f16 weights (8) a step
#else
const B_VECS = BN * 2u;       // vec2s of codes (16 weights) a step
#endif
const B_PER = (B_VECS + WG - 1u) / WG;

var<workgroup> a_s: array<array<f16, A_BLOCK>, NBUF * A_BLOCKS>;
var<workgroup> b_s: array<array<f16, B_BLOCK>, NBUF * B_BLOCKS>;
// The epilogue: one fragment a subgroup at a time, OUT_ROUNDS rounds of SGS / OUT_ROUNDS subgroups
// (2 where one fragment each for every subgroup would pass the workgroup memory).
const OUT_ROUNDS = {{OUT_ROUNDS}}u;
const OUT_SLOTS = SGS / OUT_ROUNDS;
var<workgroup> out_s: array<array<f32, FR * FR>, OUT_SLOTS>;

struct Staged {
  a: array<vec4<u32>, A_PER>,
#if W16
  b: array<vec4<u32>, B_PER>,
#else
  b: array<vec2<u32>, B_PER>,
  d: array<f32, B_PER>,
#endif
}

fn fetch(k0: u32, m0: u32, n0: u32, lid: u32) -> Staged {
  var st: Staged;
  // Row i / 4 of the tile, its 8 columns from k0 + (i % 4)·8: in block ((m0 + i / 4) / 32, k0 / 32),
  // 128 vec4s a block. This is f16_blocks.wgsl's blocked(m0 + i / 4, k0 + (i % 4)·8, k) / 8 with
  // m0 a multiple of 32 worked out: calling blocked() ran slower (BENCHMARKS.md, Tried).
  for (var t = 0u; t < A_PER; t++) {
    let i = lid + t * WG;
    st.a[t] = vec4<u32>(0u);
    if (m0 + i / 4u < params.m) {
      st.a[t] = x[((m0 / 32u + i / 128u) * (params.k / 32u) + k0 / 32u) * 128u + i % 128u];
    }
  }
  for (var t = 0u; t < B_PER; t++) {
    let i = lid + t * WG;
#if W16
    st.b[t] = vec4<u32>(0u);
    if (i >= B_VECS) {
      continue;
    }
    // Row n0 + i / 4 of W, its 8 columns from k0 + (i % 4)·8 (blocked as x).
    if (n0 + i / 4u < params.n) {
      st.b[t] = w16[((n0 / 32u + i / 128u) * (params.k / 32u) + k0 / 32u) * 128u + i % 128u];
    }
  }
  return st;
}
#else
    st.b[t] = vec2<u32>(0x88888888u); // codes 8: weight 0 past the edge
    st.d[t] = 0.0;
    if (i >= B_VECS) {
      continue;
    }
#if DINPUT
    // Row k0 + i / (BN / 16) of W, its 16 columns from n0 + (i % (BN / 16))·16.
    let row = k0 + i / (BN / 16u);
    let col = n0 + (i % (BN / 16u)) * 16u;
    if (col < params.n) {
      let g = row * (params.n / 32u) + col / 32u;
      st.b[t] = codes2[2u * g + (col / 16u) % 2u];
      st.d[t] = scale_of(g);
    }
#else
    // Row n0 + i / 2 of W, its 16 columns from k0 + (i % 2)·16.
    let row = n0 + i / 2u;
    if (row < params.n) {
      let g = row * (params.k / 32u) + k0 / 32u;
      st.b[t] = codes2[2u * g + i % 2u];
      st.d[t] = scale_of(g);
    }
#endif
  }
  return st;
}
#endif

fn stage(st: Staged, buf: u32, lid: u32) {
  for (var t = 0u; t < A_PER; t++) {
    let i = lid + t * WG;
    let r = i / 4u;
    let blk = buf * A_BLOCKS + r / FR;
    let o = (r % FR) * AS + (i % 4u) * 8u;
    for (var j = 0u; j < 4u; j++) {
      let h = bitcast<vec2<f16>>(st.a[t][j]);
      a_s[blk][o + 2u * j] = h.x;
      a_s[blk][o + 2u * j + 1u] = h.y;
    }
  }
  for (var t = 0u; t < B_PER; t++) {
    let i = lid + t * WG;
    if (i >= B_VECS) {
      continue;
    }
#if W16
    let r = i / 4u;
    let blk = buf * B_BLOCKS + r / FR;
    let o = (r % FR) * AS + (i % 4u) * 8u;
    for (var j = 0u; j < 4u; j++) {
      let h = bitcast<vec2<f16>>(st.b[t][j]);
      b_s[blk][o + 2u * j] = h.x;
      b_s[blk][o + 2u * j + 1u] = h.y;
    }
#else
#if DINPUT
    // Row i / (BN / 16) along K, 16 columns from (i % (BN / 16))·16 along N.
    let c = (i % (BN / 16u)) * 16u;
    let blk = buf * B_BLOCKS + c / CN;
    let o = (i / (BN / 16u)) * CS + c % CN;
#else
    let r = i / 2u;
    let blk = buf * B_BLOCKS + r / FR;
    let o = (r % FR) * AS + (i % 2u) * 16u;
#endif
    let d = st.d[t];
    let w0 = vec4<f16>(lo4(st.b[t].x) * d);
    let w1 = vec4<f16>(hi4(st.b[t].x) * d);
    let w2 = vec4<f16>(lo4(st.b[t].y) * d);
    let w3 = vec4<f16>(hi4(st.b[t].y) * d);
    for (var j = 0u; j < 4u; j++) {
      b_s[blk][o + j] = w0[j];
      b_s[blk][o + 4u + j] = w1[j];
      b_s[blk][o + 8u + j] = w2[j];
      b_s[blk][o + 12u + j] = w3[j];
    }
#endif
  }
}

#if ABLATE
// Measurement only (f16Gemm.ts --ablate): accumulate's bit 2 skips the global loads of each next
// step, bit 4 their staging, bit 8 the MMAs (with their fragment loads), bit 16 the loop's barriers
// (with 2 and 4 only: nothing then writes the staging), to see what each costs.
fn skip(bit: u32) -> bool {
  return (params.accumulate & bit) != 0u;
}

// The main loop's barriers.
fn step_barrier() {
  if (!skip(16u)) {
    workgroupBarrier();
  }
}
#else
// The main loop's barriers.
fn step_barrier() {
  workgroupBarrier();
}
#endif

// Fragment c (rows from m, columns from n of y) through this subgroup's corner of out_s in its
// round, then to y with the row's scale undone. Every subgroup calls it equally often and runs
// every round: the barriers are uniform.
fn put(c: subgroup_matrix_result<f32, FR, FR>, sg: u32, m: u32, n: u32, lane: u32) {
  let slot = sg % OUT_SLOTS;
  for (var round = 0u; round < OUT_ROUNDS; round++) {
    let mine = sg / OUT_SLOTS == round;
    if (mine) {
      subgroupMatrixStore<row_major>(&out_s[slot], 0u, c, FR);
    }
    workgroupBarrier();
    if (mine) {
      for (var e = lane; e < FR * FR; e += 32u) {
        let r = m + e / FR;
        let col = n + e % FR;
        if (r < params.m && col < params.n) {
          let o = joined_at(r, col, params.m, params.n, params.split1, params.split2);
          var v = out_s[slot][e] / rs[r];
#if W16
          if (params.bias != 0u) {
            v += bias_v[col];
          }
#endif
          if ((params.accumulate & 1u) != 0u) {
            v += y[o];
          }
          y[o] = v;
        }
      }
    }
    workgroupBarrier();
  }
}

@compute @workgroup_size(WG)
fn gemm(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_id) sg: u32,
  @builtin(subgroup_invocation_id) lane: u32,
) {
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  // This subgroup's block of TM x TN fragments.
  let fm0 = (sg / SG_N) * TM * FR;
  let fn0 = (sg % SG_N) * TN * FR;
  // Fragments as named values, not arrays: the compiler then keeps them in registers.
#repeat J TN
  var c0{{J}} = subgroup_matrix_result<f32, FR, FR>();
  var c1{{J}} = subgroup_matrix_result<f32, FR, FR>();
#endrepeat
  let steps = params.k / BK;
  stage(fetch(0u, m0, n0, lid), 0u, lid);
  workgroupBarrier();
  for (var s = 0u; s < steps; s++) {
#if NBUF1
    let buf = 0u;
#else
    let buf = s & 1u;
#endif
    var st: Staged;
    let more = s + 1u < steps;
#if ABLATE
    if (more && !skip(2u)) {
#else
    if (more) {
#endif
      st = fetch((s + 1u) * BK, m0, n0, lid);
    }
    let ab = buf * A_BLOCKS + fm0 / FR;
#if DINPUT
    let bb = buf * B_BLOCKS + sg % SG_N;
#else
    let bb = buf * B_BLOCKS + fn0 / FR;
#endif
    // The MMAs in a branch the compiler cannot see through (accumulate is 0 or 1): without it, the
    // compiler sinks the next step's global loads below the MMAs, next to their stores, where
    // their latency is no longer hidden (BENCHMARKS.md).
#if ABLATE
    if (!skip(8u)) {
#else
    if (params.accumulate < 2u) {
#endif
#repeat KI KSTEPS
      {
        let a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, FK, FR>, row_major>(&a_s[ab], {{KI}}u * FK, AS);
        let a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, FK, FR>, row_major>(&a_s[ab + 1u], {{KI}}u * FK, AS);
#repeat J TN
#if DINPUT
        let b{{J}} = subgroupMatrixLoad<subgroup_matrix_right<f16, FR, FK>, row_major>(&b_s[bb], {{KI}}u * FK * CS + {{J}}u * FR, CS);
#else
        let b{{J}} = subgroupMatrixLoad<subgroup_matrix_right<f16, FR, FK>, col_major>(&b_s[bb + {{J}}u], {{KI}}u * FK, AS);
#endif
#endrepeat
#repeat J TN
        c0{{J}} = subgroupMatrixMultiplyAccumulate(a0, b{{J}}, c0{{J}});
        c1{{J}} = subgroupMatrixMultiplyAccumulate(a1, b{{J}}, c1{{J}});
#endrepeat
      }
#endrepeat
    }
#if NBUF1
    // One buffer: every subgroup is done reading it before it is restaged.
    step_barrier();
#if ABLATE
    if (more && !skip(4u)) {
#else
    if (more) {
#endif
      stage(st, 0u, lid);
    }
#else
#if ABLATE
    if (more && !skip(4u)) {
#else
    if (more) {
#endif
      stage(st, buf ^ 1u, lid);
    }
#endif
    step_barrier();
  }
  // Each fragment through this subgroup's corner of out_s, then to y with the row's scale undone.
#repeat J TN
  put(c0{{J}}, sg, m0 + fm0, n0 + fn0 + {{J}}u * FR, lane);
  put(c1{{J}}, sg, m0 + fm0 + FR, n0 + fn0 + {{J}}u * FR, lane);
#endrepeat
}
