// y = x·Wᵀ with 4-bit weights on int8 tensor cores (Chromium's subgroup-matrix extension,
// i8 x i8 -> i32, M16 N16 K32): W4A8-style with two activation limbs. The Q4 weight format is the
// one documented at the top of shaders/matmul_q4.wgsl (codes c, f16 scale d per group of 32 along
// K, w = d·(c − 8)); src/ops/matmulQ4Mma.ts binds this file.
//
// Why it is exact on the weight side: c − 8 ∈ [−8, 7] is an int8, and a Q4 group (32 along K) is
// one MMA's K, so each MMA sees one weight scale per column.
//
// quantize_rows: per (row m, group g) of x, q = round(x / s) with s = absmax / 16256 (16256 = 127·128)
// is split into two int8 limbs, hi = round(q / 128) ∈ [−127, 127] and lo = q − 128·hi ∈ [−64, 64]:
// about 15 bits of the group's range (rounding error ≤ absmax / 32512), finer than bf16's 8.
// gemm: per group, R = 128·(hi·C) + lo·C with C = c − 8, exact in i32 (|R| ≤ 32·16256·8 < 2^22),
// then y[m, n] += s[m, g]·d[n, g]·R in f32. The MMA result is opaque, so R goes through workgroup
// memory (`part`) to be scaled per element; that round trip, not the MMA, bounds the speed.
//
// Accuracy on the H100 against dequantize-then-f64, Gaussian x with 4 outlier channels of 50x,
// M 1..300, N 1..515, K 32..6144: max |y − y_ref| ≤ 1.3e-4 of max |y_ref| (5e-4 of Σ|x·w| per
// element), always within the bound the limb rounding allows (tools/device/mmaCheck.ts).
//
// Layouts written by quantize_rows, read by gemm:
//   xq: vec4<u32> [M, K/32, 4]: vec4s 0, 1 the hi limb of group (m, g), vec4s 2, 3 the lo limb;
//       32 int8 per limb, in the byte order of the unpacked weights below (k = 0, 2, 4, 6 of each
//       8 in one word, then 1, 3, 5, 7), so that a masked code word needs no shuffling.
//   sx: f32 [M, K/32], the scale s of each group.
enable chromium_experimental_subgroup_matrix;
// Subgroup-matrix calls run in each subgroup's own tile loop: uniform per subgroup, which is what
// the hardware needs; the workgroup-level analysis cannot see that.
diagnostic(off, chromium_experimental.subgroup_matrix_uniformity);
// requires: subgroups
// Loads and stores take the majorness as a template argument and count offsets and strides in
// elements of the array: words of the i32 arrays, which hold int8 matrices 4 to a word (I8W; byte
// offsets below are divided by it). A compiler without that spelling gets the file rewritten into
// the older one (src/gpu/subgroupMatrixSpelling.ts).

struct Params {
  m: u32,          // rows of x
  n: u32,          // rows of W (out features)
  k: u32,          // columns (in features), a multiple of 32
  accumulate: u32, // 1: add into y instead of overwriting it
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xq: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> sx: array<f32>;
@group(0) @binding(4) var<storage, read> xq_in: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read> sx_in: array<f32>;
@group(0) @binding(6) var<storage, read> codes4: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read> scales: array<u32>;
@group(0) @binding(8) var<storage, read_write> y: array<f32>;
@group(0) @binding(9) var<storage, read> tw_in: array<f32>;          // W's block steps: the GEMM's [N, K/KB]; requant_wt's block_steps [N/KB, K/32]
@group(0) @binding(10) var<storage, read_write> tw_out: array<f32>;
@group(0) @binding(11) var<storage, read> w8_in: array<vec4<u32>>;     // W re-rounded to int8 (requant_w), or Wᵀ (requant_wt): [N, K/32, 2]
@group(0) @binding(12) var<storage, read_write> w8_out: array<vec4<u32>>;
@group(0) @binding(13) var<storage, read> rmax_in: array<f32>;          // ROWCOL: each row's largest |x|
@group(0) @binding(14) var<storage, read_write> rmax_out: array<f32>;

const QMAX = 16256.0; // 127·128
const I8W = 4u;       // int8 elements a word of an i32 array

fn pack_i8(v: vec4<f32>) -> u32 {
  let b = bitcast<vec4<u32>>(vec4<i32>(v)) & vec4<u32>(0xFFu);
  return b.x | (b.y << 8u) | (b.z << 16u) | (b.w << 24u);
}

// Values k = 8o + 0..3 (a) and 8o + 4..7 (b) of a group at the scale 1/inv as limb words:
// (hi of k = 8o + 0, 2, 4, 6, hi of 8o + 1, 3, 5, 7, lo of the evens, lo of the odds).
fn limb_words(a: vec4<f32>, b: vec4<f32>, inv: f32) -> vec4<u32> {
  let qe = round(vec4<f32>(a.x, a.z, b.x, b.z) * inv);
  let qo = round(vec4<f32>(a.y, a.w, b.y, b.w) * inv);
  let he = round(qe / 128.0);
  let ho = round(qo / 128.0);
  return vec4<u32>(pack_i8(he), pack_i8(ho), pack_i8(qe - 128.0 * he), pack_i8(qo - 128.0 * ho));
}

// The two limbs of one group of x (32 values, `v`) at the scale 1/inv, written to group gi of xq.
fn put_limbs(gi: u32, v: array<vec4<f32>, 8>, inv: f32) {
  var hi: array<u32, 8>;
  var lo: array<u32, 8>;
  for (var o = 0u; o < 4u; o++) {
    let w = limb_words(v[2u * o], v[2u * o + 1u], inv);
    hi[2u * o] = w.x;
    hi[2u * o + 1u] = w.y;
    lo[2u * o] = w.z;
    lo[2u * o + 1u] = w.w;
  }
  xq[4u * gi] = vec4<u32>(hi[0], hi[1], hi[2], hi[3]);
  xq[4u * gi + 1u] = vec4<u32>(hi[4], hi[5], hi[6], hi[7]);
  xq[4u * gi + 2u] = vec4<u32>(lo[0], lo[1], lo[2], lo[3]);
  xq[4u * gi + 3u] = vec4<u32>(lo[4], lo[5], lo[6], lo[7]);
}

fn absmax(v: array<vec4<f32>, 8>) -> f32 {
  var amax = 0.0;
  for (var j = 0u; j < 8u; j++) {
    let a = abs(v[j]);
    amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
  }
  return amax;
}

fn group_of_x(gi: u32) -> array<vec4<f32>, 8> {
  var v: array<vec4<f32>, 8>;
  for (var j = 0u; j < 8u; j++) {
    v[j] = x[gi * 8u + j];
  }
  return v;
}

@compute @workgroup_size(64)
fn quantize_rows(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * 64u; // (row, group) index m·G + g
  if (i >= params.m * (params.k / 32u)) {
    return;
  }
  let v = group_of_x(i);
  let amax = absmax(v);
  sx[i] = amax / QMAX;
  put_limbs(i, v, select(0.0, QMAX / amax, amax > 0.0));
}

// ---------------------------------------------------------------------------------------------
// GEMM: a workgroup of WG threads computes a BM x BN tile of y, one K group (32) per step. Each
// step stages the two limbs of x and the unpacked int8 weights in workgroup memory (the next
// step's global loads are issued before this step's MMAs), then each subgroup walks 16x16 tiles:
// R = 128·(hi·C) + lo·C, stored to `part`; after a barrier every thread scales its fixed elements
// of `part` into f32 accumulators. Thread t owns column t % BN and rows t / BN + j·(WG / BN).
// On the H100 (Dawn 0.6.2) the result stores dominate: without them the loads and MMAs alone ran
// at 139 TFLOP/s (M8192 N6144 K2048); with them, and no staging or epilogue, at 43; the whole
// kernel at 24 before the padded stride and 2x2 blocks, 27 to 30 after.
// ---------------------------------------------------------------------------------------------
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

fn scale_of(s: u32) -> f32 {
  return unpack2x16float(scales[s >> 1u])[s & 1u];
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

// ---------------------------------------------------------------------------------------------
// K-blocked GEMM (quantize_rows_kb, gemm_kb): the i32 products accumulate inside the subgroup
// matrices over a block of KB = 32·SUB along K, and go through `part` once a block instead of once
// a group, which cuts the result stores that bound `gemm` by SUB. It needs one scale per (row,
// block) of x and one per (column, block) of W, so the weights are re-rounded to int8:
//   w8 = round((c − 8)·d_g / t), t = 8·max_g |d_g| / 127 over the block's groups,
// an error of at most t/2 per weight (1/32 of the block's largest Q4 step) on top of Q4's own;
// not bit-faithful to the Q4 weights, which is why it is a separate entry. The forward re-rounds
// W once per call (requant_w) and stages the int8 weights as they are. x keeps two limbs (or one,
// LIMBS), now at its block's absmax. Each subgroup (exactly 32 wide) owns a 32x32 share of y (2x2
// tiles) and sums 128·hi·w8 + lo·w8 in one i32 accumulator per tile: |R| ≤ 128.5·127·127·KB <
// 2^31 for KB ≤ 128 (one limb: 127·127·KB, and KB = 256 is allowed, staged as two chunks of 128).
// dX = dY·W (the input gradient) is the same GEMM on Wᵀ re-rounded by requant_wt: x is dY [M, N],
// y is dX [M, K], and the blocks run along N, so a weight's step is per (group of K, block of N),
// t = 8·max_n |d[n, g]| / 127 (block_steps, once per weight).
// A whole block is staged per barrier (one 32-K step per barrier left the kernel bound by its
// loads and barriers: without any MMA it ran as long as with them), and `part` shares the
// staging memory, which is free once the block's MMAs are done. On the H100 (M8192 N6144 K2048,
// 128x64, K block 128): 3.74 ms, 55 TFLOP/s (`gemm`: 6.93 ms); the same kernel without its MMAs
// still takes 2.4 ms, so staging and barriers, not the tensor cores, are what is left to win.
// With one limb 2.41 ms (85 TFLOP/s), and with W re-rounded before the GEMM instead of per tile
// 2.01 ms (in a probe; the byte copy of twice the weight bytes costs less than re-rounding them).
// dX re-rounded its tile of Wᵀ in the kernel before (52 TFLOP/s with two limbs, 83 with one); as
// this GEMM on requant_wt's Wᵀ, 63 and 105 (M8192 N6144 K2048); with two limbs' padded layout
// below, forward 72 and dX 68 (tools/device/gemmSpeed.ts).
// Not staging at all was slower: each subgroup loading its fragments straight from storage (x and
// the int8 weights laid out fragment by fragment, 512 contiguous bytes each, so a fragment load is
// four whole cache lines; the partials double-buffered where two fit, one barrier a block) ran the
// forward at 44 to 48 TFLOP/s with two limbs (64x128, 128x64; 64x64: 32) and 86 with one.
// Where the two-limb forward's 2.88 ms go (64x128, M8192 N6144 K2048, H100; each figure a build
// with one part removed, so not additive): without the per-block epilogue (part's store and
// scale_part, two barriers) 2.29; without the lo limb's MMAs 2.52; without the prefetch of the
// next chunk 2.63; without any MMA 1.79. So even with no epilogue it would run at 90 TFLOP/s. With
// steps per block the epilogue cannot go: nothing but a trip through workgroup memory scales a
// result matrix by row and column. 64x64 tiles with `part` in memory of its own (two barriers a
// block instead of four) ran at 56, against 54 sharing it (and 72 at 64x128, where a separate
// `part` does not fit in 48 KB). The next chunk's loads are issued after this chunk's MMAs, not
// before them: their registers are then not held through the MMAs, and their latency still hides
// behind the barriers, the epilogue and the other workgroups' MMAs. Two limbs by block 72.6 -> 76
// TFLOP/s, dX 68.7 -> 72; one limb 113 -> 118, dX 108 -> 113; steps by row 101 -> 107, dX 95 ->
// 100, although they have no epilogue a chunk to hide behind.
// ROWCOL (steps 'row', two limbs, K block 128 for the staging only): one step per row of x, its
// largest |x| over the whole of K / 16256 (row_absmax, then quantize_rows_kb), and one per
// column of W (row_steps, once per weight: t = 8·max |d| / 127 over the row of W's groups; for dX,
// block_steps over all of N). The bound is the block one's with the block the whole of K: x to
// within half a step, each weight to within t/2. Σ hi·w8 and Σ lo·w8 have accumulators of their
// own (|Σ| ≤ 127·127·K < 2^31 up to K = 133,000), so the chunks run without the epilogue and the
// sums go through workgroup memory once, after the last chunk (hi scaled by 128 there). On the H100
// at M8192 N6144 K2048: forward 86 TFLOP/s, dX 80 (by block: 72, 68); 88 with the steps staged
// once instead of with every chunk; 101, dX 97, with fewer registers a thread: each group's two
// weight fragments multiplied into both limbs' sums at once (2 fragments live, not 8) and the
// epilogue after the loop (acc not carried through it); 107, dX 100, with the next chunk's loads
// after the MMAs (above). Tried and slower there: chunks of 64 in two staging buffers (one barrier
// a chunk, no wait for the slowest subgroup's MMAs): 81.5 (at 86); 128x64 tiles: 93.5 (at 101);
// 64x64: 68. With one limb, 128x128 tiles (512 threads, the partials through memory in two halves
// of rows): 108 against 112 at 128x64. At 88, the staging
// stores cost most beside the MMAs: with stage_kb's stores skipped (the loads kept) it ran at 104,
// with only x's skipped at 96. Two ways to make them cheaper did not pay: each lane writing its
// vec4's words in its own order, so that every scalar store covers 32 banks (the vector indexed by
// a variable): 64; the lo limb's rows 64 bytes further, so that hi and lo 16-byte stores of a row
// fall in distinct banks: no change.
// ---------------------------------------------------------------------------------------------
const SUB = {{SUB}}u;     // groups a block (of the scales)
const STG = min(SUB, 4u); // groups staged at a time: a block of 256 is staged and multiplied in two
                          // chunks of 128 (workgroup memory), its i32 sums kept across both
const CPB = SUB / STG;    // chunks a block
const SGM = BM / 32u;     // subgroups along M
const KB_MAX = 127.0 / 8.0;
// x's int8 limbs a block: 2 (about 15 bits of the block's range, as above), or 1: q = round(x / s)
// with s = absmax / 127, 7 bits of the block's range (bf16 keeps 8 of each value's), half the
// MMAs and half the staged bytes of x.
const LIMBS = {{LIMBS}}u;
const XQV = 2u * LIMBS;   // vec4<u32> of xq a (row, group): the hi limb's 2, then the lo limb's
const QMAX_KB = select(127.0, QMAX, LIMBS == 2u);

// limb_words for the K-blocked kernels: with one limb, x·inv itself is the hi limb (z, w unused).
fn limb_words_kb(a: vec4<f32>, b: vec4<f32>, inv: f32) -> vec4<u32> {
  if (LIMBS == 1u) {
    return vec4<u32>(pack_i8(round(vec4<f32>(a.x, a.z, b.x, b.z) * inv)), pack_i8(round(vec4<f32>(a.y, a.w, b.y, b.w) * inv)), 0u, 0u);
  }
  return limb_words(a, b, inv);
}

// x's block: two limbs at the block's absmax; sx is [M, K/KB]. A lane per vec4 of x, so that a
// subgroup reads 512 contiguous bytes (a thread per block read 512 bytes apart from its
// neighbours'): the 8·SUB lanes of a block take its absmax by shuffles, and the lanes of each
// pair (k = 8o + 0..3 and 8o + 4..7) swap values to pack put_limbs' byte order (k = 8o + 0, 2,
// 4, 6, then 8o + 1, 3, 5, 7); the first lane of each quad writes the quad's hi vec4, the second
// its lo vec4. Subgroups of exactly 32 (MatmulQ4Mma checks).
const QL = 8u * SUB; // lanes a block: 64 (two subgroups) for blocks of 256

var<workgroup> q_amax: array<f32, 8>; // blocks of 256: each subgroup's absmax

@compute @workgroup_size(256)
fn quantize_rows_kb(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
  @builtin(subgroup_id) sg: u32,
  @builtin(subgroup_invocation_id) lane: u32,
) {
  let e = ((wid.x + wid.y * nwg.x) * 8u + sg) * 32u + lane; // x[4e .. 4e + 3]
  let live = e < params.m * params.k / 4u;
  var v = vec4<f32>(0.0);
  if (live) {
    v = x[e];
  }
#if ROWCOL
  let amax = rmax_in[min(4u * e / params.k, params.m - 1u)];
#else
  let a = abs(v);
  var amax = max(max(a.x, a.y), max(a.z, a.w));
  for (var d = 1u; d < min(QL, 32u); d *= 2u) {
    amax = max(amax, subgroupShuffleXor(amax, d));
  }
  if (QL > 32u) {
    // The block spans subgroups sg and sg ^ 1 (a block of 64 vec4s starts at an even subgroup).
    if (lane == 0u) {
      q_amax[sg] = amax;
    }
    workgroupBarrier();
    amax = max(q_amax[sg], q_amax[sg ^ 1u]);
  }
#endif
  let inv = select(0.0, QMAX_KB / amax, amax > 0.0);
  let other = subgroupShuffleXor(v, 1u);
  let odd = (lane & 1u) == 1u;
  let w = limb_words_kb(select(v, other, odd), select(other, v, odd), inv);
  let wn = subgroupShuffleXor(w, 2u); // the quad's other pair
  if (!live) {
    return;
  }
  let q = XQV * (e / 8u) + (e % 8u) / 4u; // group e/8's hi vec4 of this quad; + 2 its lo vec4
  if ((lane & 3u) == 0u) {
    xq[q] = vec4<u32>(w.xy, wn.xy);
  } else if ((lane & 3u) == 1u && LIMBS == 2u) {
    xq[q + 2u] = vec4<u32>(w.zw, wn.zw);
  }
#if ROWCOL
  if ((4u * e) % params.k == 0u) {
    sx[4u * e / params.k] = amax / QMAX_KB;
  }
#else
  if (e % QL == 0u) {
    sx[4u * e / KB] = amax / QMAX_KB;
  }
#endif
}

// ROWCOL: each row's largest |x| over the whole of K, a workgroup a row (subgroups of exactly 32).
var<workgroup> ra_part: array<f32, 8>;

@compute @workgroup_size(256)
fn row_absmax(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_id) sg: u32,
  @builtin(subgroup_invocation_id) lane: u32,
) {
  let m = wid.x + wid.y * nwg.x;
  if (m >= params.m) {
    return;
  }
  let k4 = params.k / 4u;
  var amax = 0.0;
  for (var i = lid; i < k4; i += 256u) {
    let a = abs(x[m * k4 + i]);
    amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
  }
  amax = subgroupMax(amax);
  if (lane == 0u) {
    ra_part[sg] = amax;
  }
  workgroupBarrier();
  if (lid == 0u) {
    var a = 0.0;
    for (var s = 0u; s < 8u; s++) {
      a = max(a, ra_part[s]);
    }
    rmax_out[m] = a;
  }
}

const KB = 32u * SUB;
const KB_A_ITEMS = BM * STG * XQV;                // vec4<u32> of x limbs a chunk
const KB_A_PER = (KB_A_ITEMS + WG - 1u) / WG;
const KB_B_ITEMS = BN * STG;                      // weight items (32 weights) a chunk
const KB_B_PER = (KB_B_ITEMS + WG - 1u) / WG;
// The staged chunk, in bytes (int8 elements; the loads count words, I8W): x's rows per limb,
// then W's rows (column-major tiles). A fragment load reads 8 rows of 16 bytes at a time. With one
// limb, [STG][rows][32]: rows r and r + 4 of a fragment share banks. With two limbs, [rows][RS]:
// each row the chunk's STG groups and 16 bytes of padding, so that the 8 rows cover all 32 banks.
// On the H100 the padded layout made the two-limb kernel 9% faster (M8192 N6144 K2048: 66 -> 72
// TFLOP/s, with the weight fragments held for both limbs; without that, 64) and the one-limb
// kernel 8% slower (114 -> 105); 32 bytes of padding, or none, were slower still.
// Offsets are written inline as row·RS + s·GS (no helper function: with one, the two-limb kernel
// ran 25% slower on the H100, as if its loops over the held fragments were no longer unrolled).
const PADDED = LIMBS == 2u;
const RS = select(32u, 32u * STG + 16u, PADDED);  // row stride
const A_GS = select(BM * 32u, 32u, PADDED);       // group stride of x's rows
const B_GS = select(BN * 32u, 32u, PADDED);       // and of W's
const KB_LO = select(BM * 32u * STG, BM * RS, PADDED); // the lo limb's rows
const B_BYTES = select(BN * 32u * STG, BN * RS, PADDED);
const KB_B = LIMBS * KB_LO;                       // the weights' rows
const KB_WORDS = max((KB_B + B_BYTES) / 4u, BM * PS);

var<workgroup> smem: array<i32, KB_WORDS>;        // the staged chunk, then `part` (i32, stride PS)
var<workgroup> kb_sx: array<f32, BM>;
var<workgroup> kb_t: array<f32, BN>;

// What one thread loads for a chunk, issued after the previous chunk's MMAs and kept raw until
// `stage_kb`, so that nothing waits on these loads before the barriers that follow those MMAs.
struct StagedKb {
  a: array<vec4<u32>, KB_A_PER>,
  b: array<vec4<u32>, KB_B_PER>,                  // an item's 32 int8 weights: 16 bytes,
  b2: array<vec4<u32>, KB_B_PER>,                 // then the next 16
#if !ROWCOL
  t: array<f32, KB_B_PER>,                        // the item's block step (ROWCOL: staged once, in gemm_kb)
  sx: f32,
#endif
}

// For dX: tw[b·G + g] = 8·max |d[n, g]| / 127 over the rows n of block b of N (G = K/32 groups).
@compute @workgroup_size(64)
fn block_steps(@builtin(global_invocation_id) gid: vec3u) {
  let groups = params.k / 32u;
  let i = gid.x;
#if ROWCOL
  // One block: all of N.
  let span = params.n;
#else
  let span = KB;
#endif
  if (i >= (params.n + span - 1u) / span * groups) {
    return;
  }
  let b = i / groups;
  let g = i % groups;
  var dmax = 0.0;
  for (var n = b * span; n < min(params.n, (b + 1u) * span); n++) {
    dmax = max(dmax, abs(scale_of(n * groups + g)));
  }
  tw_out[i] = dmax / KB_MAX;
}

// ROWCOL, forward: tw[n] = 8·max_g |d[n, g]| / 127 over the whole row n of W (once per weight).
@compute @workgroup_size(64)
fn row_steps(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let groups = params.k / 32u;
  let n = gid.x + gid.y * nwg.x * 64u;
  if (n >= params.n) {
    return;
  }
  var dmax = 0.0;
  for (var g = 0u; g < groups; g++) {
    dmax = max(dmax, abs(scale_of(n * groups + g)));
  }
  tw_out[n] = dmax / KB_MAX;
}

// Forward: W re-rounded to int8 once per call, before the GEMM (each of its workgroups re-rounding
// its tile's weights cost ~16% of the kernel on the H100: every weight was re-rounded once per
// 128 rows of x). One thread per (row n of W, group g): the group's 32 codes as round((c − 8)·d/t)
// with t = 8·max |d| / 127 over the SUB groups of g's block, in the staged byte order (words 2w,
// 2w + 1: word w's even weights, then its odd ones); t of each block into tw_out [N, K/KB].
@compute @workgroup_size(64)
fn requant_w(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let groups = params.k / 32u;
  let i = gid.x + gid.y * nwg.x * 64u; // n·G + g
  if (i >= params.n * groups) {
    return;
  }
#if ROWCOL
  let t = tw_in[i / groups]; // row_steps'
  let dmax = t;
#else
  let first = i - i % SUB; // the block's first group
  var dmax = 0.0;
  for (var h = 0u; h < SUB; h++) {
    dmax = max(dmax, abs(scale_of(first + h)));
  }
  let t = dmax / KB_MAX;
#endif
  let f = select(0.0, scale_of(i) / t, dmax > 0.0);
  let c = codes4[i];
  var q: array<i32, 8>;
  for (var w = 0u; w < 4u; w++) {
    q[2u * w] = requant(c[w] & 0x0F0F0F0Fu, f);              // k = 8w + 0, 2, 4, 6
    q[2u * w + 1u] = requant((c[w] >> 4u) & 0x0F0F0F0Fu, f); // k = 8w + 1, 3, 5, 7
  }
  w8_out[2u * i] = bitcast<vec4<u32>>(vec4<i32>(q[0], q[1], q[2], q[3]));
  w8_out[2u * i + 1u] = bitcast<vec4<u32>>(vec4<i32>(q[4], q[5], q[6], q[7]));
#if ROWCOL
  if (i % groups == 0u) {
    tw_out[i / groups] = t;
  }
#else
  if (i % SUB == 0u) {
    tw_out[i / SUB] = t;
  }
#endif
}

// An f32 weight W [N, K] (x binds it) rounded to int8 once, in requant_w's layout, for products
// with an f32 weight (the vision tower's): one thread per (row n, group g), its 32 weights as
// round(w / t) with t = max |w| / 127 over the SUB groups of g's block; t into tw_out [N, K/KB].
@compute @workgroup_size(64)
fn quantize_w(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let groups = params.k / 32u;
  let i = gid.x + gid.y * nwg.x * 64u; // n·G + g
  if (i >= params.n * groups) {
    return;
  }
  let first = i - i % SUB;
  var wmax = vec4<f32>(0.0);
  for (var v = 8u * first; v < 8u * (first + SUB); v++) {
    wmax = max(wmax, abs(x[v]));
  }
  let t = max(max(wmax.x, wmax.y), max(wmax.z, wmax.w)) / 127.0;
  let f = select(0.0, 1.0 / t, t > 0.0);
  var q: array<i32, 8>;
  for (var w = 0u; w < 4u; w++) {
    let a = x[8u * i + 2u * w];      // k = 8w + 0 .. 3
    let b = x[8u * i + 2u * w + 1u]; // k = 8w + 4 .. 7
    q[2u * w] = bitcast<i32>(pack4xI8(vec4<i32>(round(vec4<f32>(a.x, a.z, b.x, b.z) * f))));      // k = 8w + 0, 2, 4, 6
    q[2u * w + 1u] = bitcast<i32>(pack4xI8(vec4<i32>(round(vec4<f32>(a.y, a.w, b.y, b.w) * f)))); // k = 8w + 1, 3, 5, 7
  }
  w8_out[2u * i] = bitcast<vec4<u32>>(vec4<i32>(q[0], q[1], q[2], q[3]));
  w8_out[2u * i + 1u] = bitcast<vec4<u32>>(vec4<i32>(q[4], q[5], q[6], q[7]));
  if (i % SUB == 0u) {
    tw_out[i / SUB] = t;
  }
}

// Wᵀ for dX = dY·W, as requant_w lays out a weight: one thread per (column k of W, rows 32j ..
// 32j + 31 of W, the reduction's group j), those 32 weights as round((c − 8)·d[n, g]/t) with t
// block_steps' step of (block j / SUB, group g = k / 32) (tw_in), rows 8o + 0, 2, 4, 6 in word 2o
// and 8o + 1, 3, 5, 7 in word 2o + 1 (dY's limb order); t into tw_out [K, N/KB] once a block.
// N is a whole number of blocks (the host checks), so every row exists. Neighbouring threads take
// neighbouring columns of the same rows, so that a subgroup's reads of a row are one 16-byte run
// (with neighbouring row groups instead, each of a subgroup's 32 reads fell on its own row: the
// dX call at M512 N6144 K2048 took 0.39 ms on the H100, now 0.26 against the forward's 0.25).
@compute @workgroup_size(64)
fn requant_wt(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let wg = params.k / 32u; // W's groups a row
  let rg = params.n / 32u; // groups of 32 rows of W
  let i = gid.x + gid.y * nwg.x * 64u; // j·K + k
  if (i >= params.k * rg) {
    return;
  }
  let k = i % params.k;
  let j = i / params.k;
  let g = k / 32u;
#if ROWCOL
  let t = tw_in[g];
#else
  let t = tw_in[(j / SUB) * wg + g];
#endif
  let shift = 4u * (k % 8u);
  var q: array<u32, 8>;
  for (var o = 0u; o < 4u; o++) {
    for (var p = 0u; p < 2u; p++) { // even rows, then odd
      var v = vec4<f32>(0.0);
      for (var b = 0u; b < 4u; b++) {
        let n = 32u * j + 8u * o + 2u * b + p;
        let word = n * (params.k / 8u) + k / 8u;
        let c = (codes4[word / 4u][word % 4u] >> shift) & 0xFu;
        let f = select(0.0, scale_of(n * wg + g) / t, t > 0.0);
        v[b] = round((f32(c) - 8.0) * f);
      }
      q[2u * o + p] = pack4xI8(vec4<i32>(v));
    }
  }
  let o = 2u * (k * rg + j);
  w8_out[o] = vec4<u32>(q[0], q[1], q[2], q[3]);
  w8_out[o + 1u] = vec4<u32>(q[4], q[5], q[6], q[7]);
#if ROWCOL
  if (j == 0u) {
    tw_out[k] = t;
  }
#else
  if (j % SUB == 0u) {
    tw_out[k * (rg / SUB) + j / SUB] = t;
  }
#endif
}

// Chunk c (STG groups along the reduction) of block c / CPB. Item j of the weights: column j / STG,
// group j % STG (a column's weights are contiguous).
fn fetch_kb(c: u32, m0: u32, n0: u32, lid: u32) -> StagedKb {
  let groups = params.k / 32u;
  let g0 = c * STG;  // the chunk's first group
  let blk = c / CPB; // its block of the scales
  var st: StagedKb;
  for (var t = 0u; t < KB_A_PER; t++) {
    let i = lid + t * WG;
    let m = m0 + i / (STG * XQV);
    if (i < KB_A_ITEMS && m < params.m) {
      st.a[t] = xq_in[(m * groups + g0) * XQV + i % (STG * XQV)];
    }
  }
  for (var t = 0u; t < KB_B_PER; t++) {
    let j = lid + t * WG;
    // Rows past N stage weight 0 (a step of 0 besides).
    st.b[t] = vec4<u32>(0u);
    st.b2[t] = vec4<u32>(0u);
#if !ROWCOL
    st.t[t] = 0.0;
#endif
    let n = n0 + j / STG;
    if (j < KB_B_ITEMS && n < params.n) {
      let at = 2u * (n * groups + g0 + j % STG);
      st.b[t] = w8_in[at];
      st.b2[t] = w8_in[at + 1u];
#if !ROWCOL
      st.t[t] = tw_in[n * (groups / SUB) + blk];
#endif
    }
  }
#if !ROWCOL
  if (lid < BM && m0 + lid < params.m) {
    st.sx = sx_in[(m0 + lid) * (groups / SUB) + blk];
  }
#endif
  return st;
}

// Four codes (one per byte of a masked word) as round((c − 8)·f), packed int8.
fn requant(nibbles: u32, f: f32) -> i32 {
  return bitcast<i32>(pack4xI8(vec4<i32>(round((vec4<f32>(unpack4xU8(nibbles)) - 8.0) * f))));
}

fn stage_kb(st: StagedKb, lid: u32) {
  for (var t = 0u; t < KB_A_PER; t++) {
    let i = lid + t * WG;
    if (i < KB_A_ITEMS) {
      let row = i / (STG * XQV);
      let s = (i / XQV) % STG;
      let q = i % XQV;
      let o = (q / 2u) * (KB_LO / 4u) + row * (RS / 4u) + s * (A_GS / 4u) + (q % 2u) * 4u;
      let v = bitcast<vec4<i32>>(st.a[t]);
      smem[o] = v.x;
      smem[o + 1u] = v.y;
      smem[o + 2u] = v.z;
      smem[o + 3u] = v.w;
    }
  }
  // requant_w's int8 weights, copied.
  for (var t = 0u; t < KB_B_PER; t++) {
    let j = lid + t * WG;
    if (j < KB_B_ITEMS) {
      let col = j / STG;
      let s = j % STG;
      let o = KB_B / 4u + col * (RS / 4u) + s * (B_GS / 4u);
      let lo = bitcast<vec4<i32>>(st.b[t]);
      let hi = bitcast<vec4<i32>>(st.b2[t]);
      smem[o] = lo.x;
      smem[o + 1u] = lo.y;
      smem[o + 2u] = lo.z;
      smem[o + 3u] = lo.w;
      smem[o + 4u] = hi.x;
      smem[o + 5u] = hi.y;
      smem[o + 6u] = hi.z;
      smem[o + 7u] = hi.w;
#if !ROWCOL
      if (s == 0u) {
        kb_t[col] = st.t[t];
      }
#endif
    }
  }
#if !ROWCOL
  if (lid < BM) {
    kb_sx[lid] = st.sx;
  }
#endif
}

// acc += f·sx·t·part over this thread's elements (column lid % BN).
fn scale_part(acc: ptr<function, array<f32, ACC>>, lid: u32, f: f32) {
  let col = lid % BN;
  let sw = f * kb_t[col];
  for (var j = 0u; j < ACC; j++) {
    let row = lid / BN + j * (WG / BN);
    (*acc)[j] = fma(f32(smem[row * PS + col]), kb_sx[row] * sw, (*acc)[j]);
  }
}

@compute @workgroup_size(WG)
fn gemm_kb(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_id) sg: u32,
) {
  let chunks = params.k / (32u * STG);
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  let ti0 = (sg % SGM) * 2u;
  let tj0 = (sg / SGM) * 2u;
  var acc: array<f32, ACC>;
  // Steps by block: R = 128·Σ hi·w8 + Σ lo·w8 (one limb: Σ hi·w8) over a block, in one accumulator
  // per tile: the hi products first, scaled by 128, then the lo products on top (two limbs take
  // blocks of one chunk). The chunk's weight fragments are loaded once and held for both passes.
  var r: array<subgroup_matrix_result<i32, 16, 16>, 4>; // [2i + j]: tile (ti0 + i, tj0 + j)
#if ROWCOL
  // Steps by row: Σ hi·w8 (r) and Σ lo·w8 (rl) over all of K in accumulators of their own (each
  // within 127·127·K of zero), scaled once, after the loop.
  var rl: array<subgroup_matrix_result<i32, 16, 16>, 4>;
  for (var t = 0u; t < 4u; t++) {
    r[t] = subgroup_matrix_result<i32, 16, 16>();
    rl[t] = subgroup_matrix_result<i32, 16, 16>();
  }
  // The steps hold for all of K: staged once, before chunk 0's barrier.
  if (lid < BN && n0 + lid < params.n) {
    kb_t[lid] = tw_in[n0 + lid];
  }
  if (lid < BM && m0 + lid < params.m) {
    kb_sx[lid] = sx_in[m0 + lid];
  }
#else
  var bf: array<subgroup_matrix_right<i8, 16, 32>, 2u * STG>; // [2s + j]: group s, tile column tj0 + j
#endif
  var st = fetch_kb(0u, m0, n0, lid);
  for (var c = 0u; c < chunks; c++) {
    stage_kb(st, lid);
    workgroupBarrier();
#if ROWCOL
    // Each group's two weight fragments serve both limbs at once: two fragments live instead of
    // steps by block's 2·STG (fewer registers a thread; see ROWCOL above).
    for (var s = 0u; s < STG; s++) {
      let b0 = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>, col_major>(&smem, (KB_B + tj0 * 16u * RS + s * B_GS) / I8W, RS / I8W);
      let b1 = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>, col_major>(&smem, (KB_B + (tj0 + 1u) * 16u * RS + s * B_GS) / I8W, RS / I8W);
      for (var i = 0u; i < 2u; i++) {
        let ah = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&smem, ((ti0 + i) * 16u * RS + s * A_GS) / I8W, RS / I8W);
        r[2u * i] = subgroupMatrixMultiplyAccumulate(ah, b0, r[2u * i]);
        r[2u * i + 1u] = subgroupMatrixMultiplyAccumulate(ah, b1, r[2u * i + 1u]);
        let al = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&smem, (KB_LO + (ti0 + i) * 16u * RS + s * A_GS) / I8W, RS / I8W);
        rl[2u * i] = subgroupMatrixMultiplyAccumulate(al, b0, rl[2u * i]);
        rl[2u * i + 1u] = subgroupMatrixMultiplyAccumulate(al, b1, rl[2u * i + 1u]);
      }
    }
#else
    if (c % CPB == 0u) {
      for (var t = 0u; t < 4u; t++) {
        r[t] = subgroup_matrix_result<i32, 16, 16>();
      }
    }
    for (var s = 0u; s < STG; s++) {
      for (var j = 0u; j < 2u; j++) {
        bf[2u * s + j] = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>, col_major>(&smem, (KB_B + (tj0 + j) * 16u * RS + s * B_GS) / I8W, RS / I8W);
      }
      for (var i = 0u; i < 2u; i++) {
        let a = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&smem, ((ti0 + i) * 16u * RS + s * A_GS) / I8W, RS / I8W);
        r[2u * i] = subgroupMatrixMultiplyAccumulate(a, bf[2u * s], r[2u * i]);
        r[2u * i + 1u] = subgroupMatrixMultiplyAccumulate(a, bf[2u * s + 1u], r[2u * i + 1u]);
      }
    }
    if (LIMBS == 2u) {
      // 128·(the block's hi sums), then the lo products on top.
      for (var t = 0u; t < 4u; t++) {
        r[t] = subgroupMatrixScalarMultiply(r[t], 128);
      }
      for (var s = 0u; s < STG; s++) {
        for (var i = 0u; i < 2u; i++) {
          let a = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&smem, (KB_LO + (ti0 + i) * 16u * RS + s * A_GS) / I8W, RS / I8W);
          r[2u * i] = subgroupMatrixMultiplyAccumulate(a, bf[2u * s], r[2u * i]);
          r[2u * i + 1u] = subgroupMatrixMultiplyAccumulate(a, bf[2u * s + 1u], r[2u * i + 1u]);
        }
      }
    }
#endif
    if (c + 1u < chunks) {
      st = fetch_kb(c + 1u, m0, n0, lid); // after the MMAs (see the K-blocked comment above)
    }
    workgroupBarrier(); // the chunk's MMAs are done with the staging
#if !ROWCOL
    if (c % CPB != CPB - 1u) {
      continue; // the block's next chunk adds to the same sums
    }
    for (var t = 0u; t < 4u; t++) {
      subgroupMatrixStore<row_major>(&smem, (ti0 + t / 2u) * 16u * PS + (tj0 + t % 2u) * 16u, r[t], PS);
    }
    workgroupBarrier();
    scale_part(&acc, lid, 1.0);
    workgroupBarrier();
#endif
  }
#if ROWCOL
  // One pass through workgroup memory for each sum, after the loop (inside it, acc would be
  // carried through every chunk in registers).
  for (var t = 0u; t < 4u; t++) {
    subgroupMatrixStore<row_major>(&smem, (ti0 + t / 2u) * 16u * PS + (tj0 + t % 2u) * 16u, r[t], PS);
  }
  workgroupBarrier();
  scale_part(&acc, lid, 128.0);
  workgroupBarrier();
  for (var t = 0u; t < 4u; t++) {
    subgroupMatrixStore<row_major>(&smem, (ti0 + t / 2u) * 16u * PS + (tj0 + t % 2u) * 16u, rl[t], PS);
  }
  workgroupBarrier();
  scale_part(&acc, lid, 1.0);
#endif
  let n = n0 + lid % BN;
  let width = params.n;
  for (var j = 0u; j < ACC; j++) {
    let m = m0 + lid / BN + j * (WG / BN);
    if (m < params.m && n < width) {
      let o = m * width + n;
      var v = acc[j];
      if (params.accumulate != 0u) {
        v += y[o];
      }
      y[o] = v;
    }
  }
}
