enable chromium_experimental_subgroup_matrix;
// Subgroup-matrix calls run in each subgroup's own tile loop: uniform per subgroup, which is what
// the hardware needs; the workgroup-level analysis cannot see that.
diagnostic(off, chromium_experimental.subgroup_matrix_uniformity);
// requires: subgroups
// Loads and stores take the majorness as a template argument and count offsets and strides in
// elements of the array: words of the i32 arrays, which hold int8 matrices 4 to a word. A compiler
// without that spelling gets the file rewritten into the older one (src/gpu/subgroupMatrixSpelling.ts).

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

const QMAX = 16256.0; // 127·128
const BM = {{BM}}u;
const BN = {{BN}}u;
const WG = {{WG}}u;
const ACC = BM * BN / WG;             // f32 accumulators per thread
const SUB = {{SUB}}u;     // groups a block (of the scales)
const STG = {{STG}}u;     // groups staged at a time, min(SUB, 4): a block of 256 is staged and
                          // multiplied in two chunks of 128 (workgroup memory), its i32 sums kept
                          // across both
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
// Workgroup memory is an array of fixed-size blocks, and every fragment load and result store
// reads or writes inside one block at a constant offset (the loops over groups, fragments and tiles
// unrolled: #repeat), so that Dawn's robustness wraps none of them in a bounds test (BENCHMARKS.md).
// A staging block holds a subgroup's pair of 16-row fragments (x's tiles 2·p and 2·p + 1 along M of
// one limb, or W's along N), the chunk's STG groups each. A fragment load reads 8 rows of 16 bytes
// at a time. With two limbs, [fragment][row][RSW words]: each row the STG groups and 16 bytes of
// padding, so that the 8 rows cover all 32 banks. With one limb, [group][fragment][row][8 words]:
// rows r and r + 4 of a fragment share banks, but padding cost more than it saved there.
// After a chunk's MMAs, block sg holds subgroup sg's 32x32 i32 sums (`part`, row stride PSB).
const PADDED = LIMBS == 2u;
const RSW = select(8u, (32u * STG + 16u) / 4u, PADDED); // row stride, words
const GSW = select(256u, 8u, PADDED);                   // group stride
const FSW = select(128u, 16u * RSW, PADDED);            // the pair's second fragment
const PAIR_WORDS = select(256u * STG, 32u * RSW, PADDED);
// part's row stride: 8 words past a multiple of 32 banks, so that a result store's rows spread over
// the banks (36 words measured no faster: BENCHMARKS.md, Tried and not kept).
const PSB = 40u;
const BLK = max(PAIR_WORDS, 32u * PSB);
const A_PAIRS = BM / 32u;          // x's pair blocks a limb (the lo limb's follow the hi limb's)
const W_PAIR0 = LIMBS * A_PAIRS;   // W's first pair block
const NBLK = max(W_PAIR0 + BN / 32u, WG / 32u);

var<workgroup> smem: array<array<i32, BLK>, NBLK>;
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
      let blk = (q / 2u) * A_PAIRS + row / 32u;
      let o = ((row % 32u) / 16u) * FSW + (row % 16u) * RSW + s * GSW + (q % 2u) * 4u;
      let v = bitcast<vec4<i32>>(st.a[t]);
      smem[blk][o] = v.x;
      smem[blk][o + 1u] = v.y;
      smem[blk][o + 2u] = v.z;
      smem[blk][o + 3u] = v.w;
    }
  }
  // requant_w's int8 weights, copied.
  for (var t = 0u; t < KB_B_PER; t++) {
    let j = lid + t * WG;
    if (j < KB_B_ITEMS) {
      let col = j / STG;
      let s = j % STG;
      let blk = W_PAIR0 + col / 32u;
      let o = ((col % 32u) / 16u) * FSW + (col % 16u) * RSW + s * GSW;
      let lo = bitcast<vec4<i32>>(st.b[t]);
      let hi = bitcast<vec4<i32>>(st.b2[t]);
      smem[blk][o] = lo.x;
      smem[blk][o + 1u] = lo.y;
      smem[blk][o + 2u] = lo.z;
      smem[blk][o + 3u] = lo.w;
      smem[blk][o + 4u] = hi.x;
      smem[blk][o + 5u] = hi.y;
      smem[blk][o + 6u] = hi.z;
      smem[blk][o + 7u] = hi.w;
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

// acc += f·sx·t·part over this thread's elements (column lid % BN), each in the block of the
// subgroup that owns its 32x32 share.
fn scale_part(acc: ptr<function, array<f32, ACC>>, lid: u32, f: f32) {
  let col = lid % BN;
  let sw = f * kb_t[col];
  let owner = (col / 32u) * SGM;
  for (var j = 0u; j < ACC; j++) {
    let row = lid / BN + j * (WG / BN);
    (*acc)[j] = fma(f32(smem[owner + row / 32u][(row % 32u) * PSB + col % 32u]), kb_sx[row] * sw, (*acc)[j]);
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
  let pa = sg % SGM;            // x's pair block: tiles (ti0, ti0 + 1) = 2·pa + (0, 1) along M
  let pb = W_PAIR0 + sg / SGM;  // W's: tiles 2·(sg / SGM) + (0, 1) along N
  var acc: array<f32, ACC>;
  // Steps by block: R = 128·Σ hi·w8 + Σ lo·w8 (one limb: Σ hi·w8) over a block, in one accumulator
  // per tile: the hi products first, scaled by 128, then the lo products on top (two limbs take
  // blocks of one chunk). The chunk's weight fragments are loaded once and held for both passes.
  var r: array<subgroup_matrix_result<i32, 16, 16>, 4>; // [2i + j]: tile (2·pa + i, 2·(sg / SGM) + j)
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
  var bf: array<subgroup_matrix_right<i8, 16, 32>, 2u * STG>; // [2s + j]: group s, the pair's fragment j
#endif
  var st = fetch_kb(0u, m0, n0, lid);
  for (var c = 0u; c < chunks; c++) {
    stage_kb(st, lid);
    workgroupBarrier();
#if ROWCOL
    // Each group's two weight fragments serve both limbs at once: two fragments live instead of
    // steps by block's 2·STG (fewer registers a thread; see ROWCOL above).
#repeat S STG
    {
      let b0 = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>, col_major>(&smem[pb], {{S}}u * GSW, RSW);
      let b1 = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>, col_major>(&smem[pb], FSW + {{S}}u * GSW, RSW);
#repeat I 2
      {
        let ah = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&smem[pa], {{I}}u * FSW + {{S}}u * GSW, RSW);
        r[2u * {{I}}u] = subgroupMatrixMultiplyAccumulate(ah, b0, r[2u * {{I}}u]);
        r[2u * {{I}}u + 1u] = subgroupMatrixMultiplyAccumulate(ah, b1, r[2u * {{I}}u + 1u]);
        let al = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&smem[A_PAIRS + pa], {{I}}u * FSW + {{S}}u * GSW, RSW);
        rl[2u * {{I}}u] = subgroupMatrixMultiplyAccumulate(al, b0, rl[2u * {{I}}u]);
        rl[2u * {{I}}u + 1u] = subgroupMatrixMultiplyAccumulate(al, b1, rl[2u * {{I}}u + 1u]);
      }
#endrepeat
    }
#endrepeat
#else
    if (c % CPB == 0u) {
      for (var t = 0u; t < 4u; t++) {
        r[t] = subgroup_matrix_result<i32, 16, 16>();
      }
    }
#repeat S STG
#repeat J 2
    bf[2u * {{S}}u + {{J}}u] = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>, col_major>(&smem[pb], {{J}}u * FSW + {{S}}u * GSW, RSW);
#endrepeat
#repeat I 2
    {
      let a = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&smem[pa], {{I}}u * FSW + {{S}}u * GSW, RSW);
      r[2u * {{I}}u] = subgroupMatrixMultiplyAccumulate(a, bf[2u * {{S}}u], r[2u * {{I}}u]);
      r[2u * {{I}}u + 1u] = subgroupMatrixMultiplyAccumulate(a, bf[2u * {{S}}u + 1u], r[2u * {{I}}u + 1u]);
    }
#endrepeat
#endrepeat
    if (LIMBS == 2u) {
      // 128·(the block's hi sums), then the lo products on top.
      for (var t = 0u; t < 4u; t++) {
        r[t] = subgroupMatrixScalarMultiply(r[t], 128);
      }
#repeat S STG
#repeat I 2
      {
        let a = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&smem[A_PAIRS + pa], {{I}}u * FSW + {{S}}u * GSW, RSW);
        r[2u * {{I}}u] = subgroupMatrixMultiplyAccumulate(a, bf[2u * {{S}}u], r[2u * {{I}}u]);
        r[2u * {{I}}u + 1u] = subgroupMatrixMultiplyAccumulate(a, bf[2u * {{S}}u + 1u], r[2u * {{I}}u + 1u]);
      }
#endrepeat
#endrepeat
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
#repeat T 4
    subgroupMatrixStore<row_major>(&smem[sg], ({{T}}u / 2u) * 16u * PSB + ({{T}}u % 2u) * 16u, r[{{T}}u], PSB);
#endrepeat
    workgroupBarrier();
    scale_part(&acc, lid, 1.0);
    workgroupBarrier();
#endif
  }
#if ROWCOL
  // One pass through workgroup memory for each sum, after the loop (inside it, acc would be
  // carried through every chunk in registers).
#repeat T 4
  subgroupMatrixStore<row_major>(&smem[sg], ({{T}}u / 2u) * 16u * PSB + ({{T}}u % 2u) * 16u, r[{{T}}u], PSB);
#endrepeat
  workgroupBarrier();
  scale_part(&acc, lid, 128.0);
  workgroupBarrier();
#repeat T 4
  subgroupMatrixStore<row_major>(&smem[sg], ({{T}}u / 2u) * 16u * PSB + ({{T}}u % 2u) * 16u, rl[{{T}}u], PSB);
#endrepeat
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
