enable chromium_experimental_subgroup_matrix;
// Subgroup-matrix calls run in each subgroup's own tile loop: uniform per subgroup, which is what
// the hardware needs; the workgroup-level analysis cannot see that.
diagnostic(off, chromium_experimental.subgroup_matrix_uniformity);
// requires: subgroups
// Loads and stores take the majorness as a template argument and count offsets and strides in
// elements of the array: words of the i32 arrays, which hold int8 matrices 4 to a word (I8W; byte
// offsets below are divided by it). A compiler without that spelling gets the file rewritten into
// the older one (src/gpu/subgroupMatrixSpelling.ts).

// K-blocked GEMM on int8 tensor cores: the i32 products accumulate inside the subgroup matrices
// over a block of KB = 32·SUB along K and go through `part` once a block instead of once a group
// (matmul_q4_mma_gemm.wgsl), which cuts the result stores that bound that kernel by SUB. It needs
// one scale per (row, block) of x and one per (column, block) of W, so the weights are re-rounded
// to int8 (matmul_q4_mma_weights.wgsl):
//   w8 = round((c − 8)·d_g / t), t = 8·max_g |d_g| / 127 over the block's groups,
// an error of at most t/2 per weight (1/32 of the block's largest Q4 step) on top of Q4's own;
// not bit-faithful to the Q4 weights, which is why it is a separate entry. x keeps two limbs (or
// one, LIMBS), now at its block's absmax. Each subgroup (exactly 32 wide) owns a 32x32 share of y
// (2x2 tiles) and sums 128·hi·w8 + lo·w8 in one i32 accumulator per tile: |R| ≤ 128.5·127·127·KB <
// 2^31 for KB ≤ 128 (one limb: 127·127·KB, and KB = 256 is allowed, staged as two chunks of 128).
// dX = dY·W (the input gradient) is the same GEMM on Wᵀ re-rounded by requant_wt: x is dY [M, N],
// y is dX [M, K], and the blocks run along N.
// A whole block is staged per barrier (one 32-K step per barrier left the kernel bound by its
// loads and barriers), and `part` shares the staging memory, free once the block's MMAs are done.
// Staging beats loading fragments straight from storage. The next chunk's loads are issued after
// this chunk's MMAs, not before them: their registers are then not held through the MMAs, and
// their latency still hides behind the barriers, the epilogue and the other workgroups' MMAs.
// ROWCOL (steps 'row', two limbs, K block 128 for the staging only): one step per row of x, its
// largest |x| over the whole of K / 16256 (row_absmax, then quantize_rows_kb), and one per
// column of W (row_steps: t = 8·max |d| / 127 over the row of W's groups; for dX, block_steps over
// all of N). The bound is the block one's with the block the whole of K. Σ hi·w8 and Σ lo·w8 have
// accumulators of their own (|Σ| ≤ 127·127·K < 2^31 up to K = 133,000), so the chunks run without
// the epilogue and the sums go through workgroup memory once, after the last chunk (hi scaled by
// 128 there); each group's two weight fragments are multiplied into both limbs' sums at once.
// BENCHMARKS.md ("Kernel tuning choices") has the measurements behind these choices.

struct Params {
  m: u32,          // rows of x
  n: u32,          // columns of y (rows of W)
  k: u32,          // the reduction, a multiple of the K block
  accumulate: u32, // 1: add into y instead of overwriting it
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> xq_in: array<vec4<u32>>; // quantize_rows_kb' limbs
@group(0) @binding(2) var<storage, read> sx_in: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> tw_in: array<f32>;   // W's steps [N, K/KB] (ROWCOL: [N])
@group(0) @binding(5) var<storage, read> w8_in: array<vec4<u32>>; // W as int8 (matmul_q4_mma_weights.wgsl): [N, K/32, 2]

const I8W = 4u;       // int8 elements a word of an i32 array
const QMAX = 16256.0; // 127·128
const BM = {{BM}}u;
const BN = {{BN}}u;
const WG = {{WG}}u;
const ACC = BM * BN / WG;             // f32 accumulators per thread
// Row stride of `part`: 8 words past a multiple of 32 banks, so that the 8 rows a result store
// writes at once fall in different banks (at stride BN they all hit the same 8 banks).
const PS = BN + 8u;
const SUB = {{SUB}}u;     // groups a block (of the scales)
const STG = min(SUB, 4u); // groups staged at a time: a block of 256 is staged and multiplied in two
                          // chunks of 128 (workgroup memory), its i32 sums kept across both
const CPB = SUB / STG;    // chunks a block
const SGM = BM / 32u;     // subgroups along M
// x's int8 limbs a block: 2 (about 15 bits of the block's range, as above), or 1: q = round(x / s)
// with s = absmax / 127, 7 bits of the block's range (bf16 keeps 8 of each value's), half the
// MMAs and half the staged bytes of x.
const LIMBS = {{LIMBS}}u;
const XQV = 2u * LIMBS;   // vec4<u32> of xq a (row, group): the hi limb's 2, then the lo limb's
const QMAX_KB = select(127.0, QMAX, LIMBS == 2u);

const KB = 32u * SUB;
const KB_A_ITEMS = BM * STG * XQV;                // vec4<u32> of x limbs a chunk
const KB_A_PER = (KB_A_ITEMS + WG - 1u) / WG;
const KB_B_ITEMS = BN * STG;                      // weight items (32 weights) a chunk
const KB_B_PER = (KB_B_ITEMS + WG - 1u) / WG;
// The staged chunk, in bytes (int8 elements; the loads count words, I8W): x's rows per limb,
// then W's rows (column-major tiles). A fragment load reads 8 rows of 16 bytes at a time. With one
// limb, [STG][rows][32]: rows r and r + 4 of a fragment share banks. With two limbs, [rows][RS]:
// each row the chunk's STG groups and 16 bytes of padding, so that the 8 rows cover all 32 banks.
// Padding pays for two limbs only (one limb keeps the unpadded layout).
// Offsets are written inline as row·RS + s·GS: a helper function made the two-limb kernel much
// slower, as if its loops over the held fragments were no longer unrolled.
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
