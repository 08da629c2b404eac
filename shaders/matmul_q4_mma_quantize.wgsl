// x's rows as int8 limbs for the 4-bit GEMMs on int8 tensor cores (src/ops/matmulQ4Mma.ts):
// quantize_rows per (row, group of 32) for matmul_q4_mma_gemm.wgsl; quantize_rows_kb per (row,
// K block), or with ROWCOL per row after row_absmax, for matmul_q4_mma_gemm_kb.wgsl.
//
// quantize_rows: per (row m, group g) of x, q = round(x / s) with s = absmax / 16256 (16256 = 127·128)
// is split into two int8 limbs, hi = round(q / 128) ∈ [−127, 127] and lo = q − 128·hi ∈ [−64, 64]:
// about 15 bits of the group's range (rounding error ≤ absmax / 32512), finer than bf16's 8.
//
// Layouts written by quantize_rows, read by matmul_q4_mma_gemm (quantize_rows_kb: XQV vec4s a
// group, sx per block or per row):
//   xq: vec4<u32> [M, K/32, 4]: vec4s 0, 1 the hi limb of group (m, g), vec4s 2, 3 the lo limb;
//       32 int8 per limb, in the byte order of the unpacked weights below (k = 0, 2, 4, 6 of each
//       8 in one word, then 1, 3, 5, 7), so that a masked code word needs no shuffling.
//   sx: f32 [M, K/32], the scale s of each group.
// requires: subgroups

struct Params {
  m: u32, // rows of x
  k: u32, // columns, a multiple of 32
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xq: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> sx: array<f32>;
@group(0) @binding(4) var<storage, read> rmax_in: array<f32>;  // ROWCOL: each row's largest |x| (row_absmax)
@group(0) @binding(5) var<storage, read_write> rmax_out: array<f32>;

const QMAX = 16256.0; // 127·128

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

const SUB = {{SUB}}u;     // groups a K block
const KB = 32u * SUB;
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
