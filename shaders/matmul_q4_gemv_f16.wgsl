enable chromium_experimental_subgroup_matrix;
// Subgroup-matrix calls run in each subgroup's own step loop: uniform per subgroup, which is what
// the hardware needs; the workgroup-level analysis cannot see that.
diagnostic(off, chromium_experimental.subgroup_matrix_uniformity);
// requires: f16, subgroups

// 4-bit GEMV of 1 to FN rows of x (decode) on f16 tensor cores: y[m, n] (+)= Σ_k x[m, k] W[n, k].
// A workgroup owns RT·FR rows of W; its KS subgroups split the reduction, subgroup s taking K steps
// s, s + KS, ... (BK = 32·BG columns a step: BG Q4 groups). Each step stages its rows of W
// (dequantized with the group scale) and x's rows (times the power of two xs) as f16 in the
// subgroup's own blocks of workgroup memory; W is the left matrix (FR rows of W x FK), x the right
// (FK x FN, its rows past M zero), so a fragment holds FR outputs of every row of x. The next step's
// global loads are issued before this step's MMAs. The KS partial fragments meet once, in
// workgroup memory, in the epilogue, which also adds the LoRA update (q4_gemv_common.wgsl) and
// stores to the joined weight's parts (q4_joined_parts.wgsl).
// Error: x·xs and W each rounded to f16 (relative 2^-11; x·xs below 2^-14 by f16's subnormal step
// 2^-24), f32 accumulation.

struct Params {
  m: u32,          // rows of x (and of y), 1..FN
  n: u32,          // rows of W (out features)
  k: u32,          // the reduction, a multiple of BK
  accumulate: u32, // 1: add into y instead of overwriting it
  split1: u32,     // the output's parts (q4_joined_parts.wgsl; n, n: one [m, n] output)
  split2: u32,
  lora_r: u32,     // LORA: the adapter's rank,
  lora_np: u32,    // partials of u per row of x,
  lora_s: f32,     // and its scale alpha / r
  xs: f32,         // x's scale before rounding to f16, a power of two (undone on y)
}

@group(0) @binding(0) var<uniform> params: Params;

#include q4_format
#include q4_gemv_common
#include q4_joined_parts

const FR = {{FR}}u;       // W's rows a fragment (the configuration's M)
const FN = {{FN}}u;       // x's rows a fragment (N)
const FK = {{FK}}u;       // the fragment's K
const KS = {{KS}}u;       // subgroups a workgroup, each a share of the reduction
const RT = {{RT}}u;       // fragments along W's rows a subgroup (#repeat)
const BG = {{BG}}u;       // Q4 groups along K a step
const BK = 32u * BG;
const WG = 32u * KS;
const ROWS = RT * FR;     // W's rows a workgroup
const AS = BK + 8u;       // row stride of the staged blocks (f16): 8 past a multiple of 32 spreads rows over bank groups
// KSTEPS = BK / FK fragment steps a staged step, unrolled (#repeat) so that their offsets are constants.
const W_ITEMS = ROWS * BG;           // vec4s of codes a step (one group of one row each)
const W_PER = (W_ITEMS + 31u) / 32u;
const X_ITEMS = FN * BK / 8u;        // runs of 8 values of x a step (rows past M not loaded)
const X_PER = (X_ITEMS + 31u) / 32u;

// Fixed-size blocks, each fragment load at a constant offset inside one: Dawn's robustness then
// adds no bounds test (matmul_q4_f16.wgsl).
var<workgroup> w_s: array<array<f16, FR * AS>, KS * RT>;
var<workgroup> x_s: array<array<f16, FN * AS>, KS>;
var<workgroup> out_s: array<array<f32, FR * FN>, KS * RT>;

struct Staged {
  c: array<vec4<u32>, W_PER>,
  d: array<f32, W_PER>,
  x: array<vec4<f32>, 2u * X_PER>,
}

// The loads of K step `step` (past `steps`: weights 0 and x 0, so that every subgroup runs the
// same number of rounds).
fn fetch(step: u32, steps: u32, n0: u32, lane: u32) -> Staged {
  var st: Staged;
  let live = step < steps;
  let groups = params.k / 32u;
  for (var t = 0u; t < W_PER; t++) {
    let i = lane + 32u * t;
    st.c[t] = vec4<u32>(0x88888888u);
    st.d[t] = 0.0;
    if (live && i < W_ITEMS) {
      // Row i / BG of the workgroup's (past N: the last row again, its sums dropped), group i % BG.
      let g = min(n0 + i / BG, params.n - 1u) * groups + step * BG + i % BG;
      st.c[t] = codes4[g];
      st.d[t] = scale_of(g);
    }
  }
  for (var t = 0u; t < X_PER; t++) {
    let i = lane + 32u * t;
    let m = i / (BK / 8u);
    st.x[2u * t] = vec4<f32>(0.0);
    st.x[2u * t + 1u] = vec4<f32>(0.0);
    if (live && i < X_ITEMS && m < params.m) {
      let at = m * (params.k / 4u) + step * (BK / 4u) + 2u * (i % (BK / 8u));
      st.x[2u * t] = x[at];
      st.x[2u * t + 1u] = x[at + 1u];
    }
  }
  return st;
}

// Codes become f16 without conversions: nibbles p and p + 4 of a word, masked into the mantissas
// of 1024 (0x6400) in each half, are 1024 + c exactly; minus 1032, times d, is d·(c − 8) rounded
// once, as f16_convert.wgsl expands the weight for the GEMM. They are staged as the pair (p, p + 4):
// K runs in the order 0, 4, 1, 5, 2, 6, 3, 7 within each 8, x's staging alike (the sum is the
// same). A lane's rows are 16-byte aligned, so the lanes' first words fall in 8 of the 32 banks;
// each lane starts its pairs at its own p (rot), which puts a store's 32 lanes in 32 banks.
fn rot(i: u32) -> u32 {
  if (BG == 4u) {
    return ((i % 4u) / 2u + 2u * (i / 16u)) % 4u;
  }
  return (i / 8u) % 4u;
}

fn stage(st: Staged, sg: u32, lane: u32) {
  for (var t = 0u; t < W_PER; t++) {
    let i = lane + 32u * t;
    if (i >= W_ITEMS) {
      continue;
    }
    let r = i / BG;
    let blk = sg * RT + r / FR;
    let o = (r % FR) * AS + (i % BG) * 32u;
    let d = vec2<f16>(f16(st.d[t]));
    let q = rot(i);
    for (var j = 0u; j < 4u; j++) {
      let w = st.c[t][j];
      for (var pp = 0u; pp < 4u; pp++) {
        let p = (pp + q) % 4u;
        let h = (bitcast<vec2<f16>>(((w >> (4u * p)) & 0x000F000Fu) | 0x64006400u) - vec2<f16>(1032.0h)) * d;
        w_s[blk][o + 8u * j + 2u * p] = h.x;
        w_s[blk][o + 8u * j + 2u * p + 1u] = h.y;
      }
    }
  }
  for (var t = 0u; t < X_PER; t++) {
    let i = lane + 32u * t;
    let m = i / (BK / 8u);
    if (i >= X_ITEMS || m >= params.m) {
      continue;
    }
    let o = m * AS + (i % (BK / 8u)) * 8u;
    let a = vec4<f16>(st.x[2u * t] * params.xs);
    let b = vec4<f16>(st.x[2u * t + 1u] * params.xs);
    for (var p = 0u; p < 4u; p++) {
      x_s[sg][o + 2u * p] = a[p];
      x_s[sg][o + 2u * p + 1u] = b[p];
    }
  }
}

#if ABLATE
// Measurement only (gemvF16.ts --ablate): accumulate's bit 2 skips the global loads of each next
// step, bit 4 the staging, bit 8 the MMAs (with their fragment loads).
fn skip(bit: u32) -> bool {
  return (params.accumulate & bit) != 0u;
}
#endif

// Where output (m, n) lives: in its part (params.split1/2).
fn out_at(m: u32, n: u32) -> u32 {
  return joined_at(m, n, params.m, params.n, params.split1, params.split2);
}

@compute @workgroup_size(WG)
fn gemv_f16(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_id) sg: u32,
  @builtin(subgroup_invocation_id) lane: u32,
) {
#if LORA
  lora_gather(lid, WG, params.m);
#endif
  let n0 = (wid.x + wid.y * nwg.x) * ROWS;
  // x's rows past M stay 0 (stage writes rows below M only).
  for (var e = lane; e < FN * AS; e += 32u) {
    x_s[sg][e] = 0.0h;
  }
  let steps = params.k / BK;
  let rounds = (steps + KS - 1u) / KS;
#repeat T RT
  var c{{T}} = subgroup_matrix_result<f32, FN, FR>();
#endrepeat
  var st = fetch(sg, steps, n0, lane);
  for (var it = 0u; it < rounds; it++) {
    workgroupBarrier(); // the previous step's fragments are loaded (and x's zeros written)
#if ABLATE
    if (!skip(4u)) {
      stage(st, sg, lane);
    }
#else
    stage(st, sg, lane);
#endif
    workgroupBarrier();
#if ABLATE
    if (!skip(2u)) {
      st = fetch(sg + (it + 1u) * KS, steps, n0, lane);
    }
    if (!skip(8u)) {
#else
    st = fetch(sg + (it + 1u) * KS, steps, n0, lane);
    // The MMAs in a branch the compiler cannot see through (accumulate is 0 or 1), as in
    // matmul_q4_f16.wgsl: the next step's loads stay above them.
    if (params.accumulate < 2u) {
#endif
#repeat KI KSTEPS
      {
        let b = subgroupMatrixLoad<subgroup_matrix_right<f16, FN, FK>, col_major>(&x_s[sg], {{KI}}u * FK, AS);
#repeat T RT
        let a{{T}} = subgroupMatrixLoad<subgroup_matrix_left<f16, FK, FR>, row_major>(&w_s[sg * RT + {{T}}u], {{KI}}u * FK, AS);
        c{{T}} = subgroupMatrixMultiplyAccumulate(a{{T}}, b, c{{T}});
#endrepeat
      }
#endrepeat
    }
  }
#repeat T RT
  subgroupMatrixStore<row_major>(&out_s[sg * RT + {{T}}u], 0u, c{{T}}, FN);
#endrepeat
  workgroupBarrier();
  // Output (m, n0 + r), consecutive threads on consecutive n: the KS partials, then the epilogue.
  for (var e = lid; e < ROWS * params.m; e += WG) {
    let m = e / ROWS;
    let r = e % ROWS;
    let n = n0 + r;
    if (n < params.n) {
      var v = 0.0;
      for (var s = 0u; s < KS; s++) {
        v += out_s[s * RT + r / FR][(r % FR) * FN + m];
      }
      v = v / params.xs + lora_out(m, n);
      let o = out_at(m, n);
      if ((params.accumulate & 1u) != 0u) {
        v += y[o];
      }
      y[o] = v;
    }
  }
}
