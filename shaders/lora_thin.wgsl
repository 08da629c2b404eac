// LoRA's rank-thin products of training, for up to three adapters g in one dispatch
// (src/ops/lora.ts: Lora.forwardGroup's u, Lora.backwardGroup's t):
//   out_g [T, r] = scale_g · X_g [T, k_g] · W_gᵀ,  W_g (j, kk) = A_g[j, kk]   (u = x·Aᵀ; SHARED_X: one x for all g)
//                                                  or B_g[kk, j] (TRANS_W: t = s·dY_g·B_g, X_g = dY_g, k_g = out_g)
// The GEMM of src/ops/matmul.ts takes two dispatches for each (a K split into partials, then their
// sum: C has too few blocks to fill the GPU otherwise) and rereads x for every adapter. Here a
// workgroup owns BR rows x 8 ranks of one adapter's output and walks all of K: its 256 threads are
// BR/2 sub-tiles of 4 x 4 outputs times LANES along K, lane l summing the vec4s l, l + LANES, ... of
// K, so a warp reads 512 contiguous bytes of each row of X; the lanes' sums meet in workgroup
// memory at the end (two rounds). Several adapters on one x run side by side (grid y), their row blocks of x hit in
// L2. ROW_QUADS 4 (16 rows, 32 lanes) or 2 (8 rows, 64 lanes: twice the workgroups where the
// first leaves the GPU short of them, src/ops/lora.ts THIN_MIN_GROUPS).
// With TRANS_W, B_g's columns are staged in workgroup memory a chunk of K at a time.
// k_g % 4 == 0 (src/ops/lora.ts checks). Grid: x = blocks of BR rows, y = adapters · rank blocks.
// SECOND / THIRD add the adapters g = 1, 2. W_TYPE is vec4<f32> (rows of A read as vec4s) or f32 (TRANS_W).
// SUBGROUPS (subgroups of exactly SG_SIZE lanes, dividing LANES): a sub-tile's lanes are whole
// subgroups, which sum their lanes with subgroupAdd; the H = LANES / SG_SIZE subgroups of a
// sub-tile meet in workgroup memory once (without: two rounds of LANES partial sums a output).
#if SUBGROUPS
// requires: subgroups
#endif

struct Params {
  rows: u32,
  r: u32,
  rank_blocks: u32, // ceil(r / BC)
  k0: u32,
  k1: u32,
  k2: u32,
  s0: f32,
  s1: f32,
  s2: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x0: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> w0: array<{{W_TYPE}}>;
@group(0) @binding(3) var<storage, read_write> o0: array<f32>;
#if SECOND
#if !SHARED_X
@group(0) @binding(4) var<storage, read> x1: array<vec4<f32>>;
#endif
@group(0) @binding(5) var<storage, read> w1: array<{{W_TYPE}}>;
@group(0) @binding(6) var<storage, read_write> o1: array<f32>;
#endif
#if THIRD
#if !SHARED_X
@group(0) @binding(7) var<storage, read> x2: array<vec4<f32>>;
#endif
@group(0) @binding(8) var<storage, read> w2: array<{{W_TYPE}}>;
@group(0) @binding(9) var<storage, read_write> o2: array<f32>;
#endif

const ROW_QUADS = {{ROW_QUADS}}u;
const BR = 4u * ROW_QUADS;             // rows a workgroup
const BC = 8u;                         // ranks a workgroup: two quads
const LANES = 256u / (2u * ROW_QUADS); // threads along K per sub-tile
const OUTS = BR * BC;
const PAD = LANES + 1u; // a row of `red` per output of a round; +1 keeps the summing threads on distinct banks
#if SUBGROUPS
const SG_SIZE = {{SG_SIZE}}u;
const H = LANES / SG_SIZE; // subgroups a sub-tile
var<workgroup> red: array<f32, 256u / LANES * H * 16u>; // [sub-tile][subgroup][4 rows x 4 ranks]
#else
var<workgroup> red: array<f32, OUTS / 2u * PAD>;
#endif
#if TRANS_W
const WPAD = LANES + 1u; // vec4s a staged rank, +1 spreads the staging writes over banks
var<workgroup> wts: array<vec4<f32>, BC * WPAD>;
#endif

// g is uniform across a workgroup (from its id): these branches never diverge.
fn k_of(g: u32) -> u32 {
  return select(select(p.k0, p.k1, g == 1u), p.k2, g == 2u);
}

fn scale_of(g: u32) -> f32 {
  return select(select(p.s0, p.s1, g == 1u), p.s2, g == 2u);
}

fn x_at(g: u32, i: u32) -> vec4<f32> {
#if !SHARED_X
#if THIRD
  if (g == 2u) {
    return x2[i];
  }
#endif
#if SECOND
  if (g == 1u) {
    return x1[i];
  }
#endif
#endif
  return x0[i];
}

fn w_at(g: u32, i: u32) -> {{W_TYPE}} {
#if THIRD
  if (g == 2u) {
    return w2[i];
  }
#endif
#if SECOND
  if (g == 1u) {
    return w1[i];
  }
#endif
  return w0[i];
}

// W_g (j, 4·k4 .. 4·k4 + 3).
fn w_row(g: u32, j: u32, k4: u32, k: u32) -> vec4<f32> {
#if TRANS_W
  let i = 4u * k4 * p.r + j;
  return vec4<f32>(w_at(g, i), w_at(g, i + p.r), w_at(g, i + 2u * p.r), w_at(g, i + 3u * p.r));
#else
  return w_at(g, j * (k / 4u) + k4);
#endif
}

fn store(g: u32, i: u32, v: f32) {
#if THIRD
  if (g == 2u) {
    o2[i] = v;
    return;
  }
#endif
#if SECOND
  if (g == 1u) {
    o1[i] = v;
    return;
  }
#endif
  o0[i] = v;
}

@compute @workgroup_size(256)
fn thin(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(local_invocation_index) li: u32,
#if SUBGROUPS
  @builtin(subgroup_id) sgid: u32,
  @builtin(subgroup_invocation_id) sgl: u32,
#endif
) {
  let g = wid.y / p.rank_blocks;
  let j0 = (wid.y % p.rank_blocks) * BC;
  let k = k_of(g);
  let k4n = k / 4u;
#if SUBGROUPS
  // By subgroup, not by invocation index (WGSL does not say how the two map).
  let lane = (sgid % H) * SG_SIZE + sgl;
  let sub = sgid / H;
#else
  let lane = li % LANES;
  let sub = li / LANES;          // sub-tiles: ROW_QUADS of rows x 2 of ranks
#endif
  let row0 = wid.x * BR + (sub / 2u) * 4u;
  // Rows past the end read the last one; their sums are never written.
  var xo: array<u32, 4>;
  for (var i = 0u; i < 4u; i++) {
    xo[i] = min(row0 + i, p.rows - 1u) * k4n;
  }
  var acc: array<vec4<f32>, 4>; // acc[row][rank]
#if TRANS_W
  // B_g's rows are r floats apart: read straight, a warp's loads would touch 32 lines each. A
  // chunk of LANES vec4s of K x BC ranks is staged first (rank-major, vec4s along K), then read
  // as one vec4 a lane.
  let wq = (sub % 2u) * 4u; // this thread's first rank in the block
  for (var c0 = 0u; c0 < k4n; c0 += LANES) {
    for (var e = li; e < BC * LANES; e += 256u) {
      let jl = e % BC;
      let k4l = e / BC;
      let ks = c0 + k4l;
      var v = vec4<f32>(0.0);
      if (j0 + jl < p.r && ks < k4n) {
        v = w_row(g, j0 + jl, ks, k);
      }
      wts[jl * WPAD + k4l] = v;
    }
    workgroupBarrier();
    let k4 = c0 + lane;
    if (k4 < k4n) {
      let w = mat4x4<f32>(wts[wq * WPAD + lane], wts[(wq + 1u) * WPAD + lane], wts[(wq + 2u) * WPAD + lane], wts[(wq + 3u) * WPAD + lane]);
      for (var i = 0u; i < 4u; i++) {
        acc[i] += x_at(g, xo[i] + k4) * w;
      }
    }
    workgroupBarrier();
  }
#else
  // This thread's 4 ranks (past the end: the last rank, never written).
  var jc: array<u32, 4>;
  for (var c = 0u; c < 4u; c++) {
    jc[c] = min(j0 + (sub % 2u) * 4u + c, p.r - 1u);
  }
  for (var k4 = lane; k4 < k4n; k4 += LANES) {
    let w = mat4x4<f32>(w_row(g, jc[0], k4, k), w_row(g, jc[1], k4, k), w_row(g, jc[2], k4, k), w_row(g, jc[3], k4, k));
    for (var i = 0u; i < 4u; i++) {
      // x·W: component c is dot(x, column c of the matrix) = dot(x, W_g row jc[c]).
      acc[i] += x_at(g, xo[i] + k4) * w;
    }
  }
#endif
#if SUBGROUPS
  for (var i = 0u; i < 4u; i++) {
    acc[i] = subgroupAdd(acc[i]);
  }
  if (sgl == 0u) {
    for (var i = 0u; i < 4u; i++) {
      for (var c = 0u; c < 4u; c++) {
        red[(sub * H + sgid % H) * 16u + 4u * i + c] = acc[i][c];
      }
    }
  }
  workgroupBarrier();
  if (li < OUTS) {
    let sub2 = li / 16u;
    let e = li % 16u;
    var s = 0.0;
    for (var h = 0u; h < H; h++) {
      s += red[(sub2 * H + h) * 16u + e];
    }
    let row = wid.x * BR + (sub2 / 2u) * 4u + e / 4u;
    let j = j0 + (sub2 % 2u) * 4u + e % 4u;
    if (row < p.rows && j < p.r) {
      store(g, row * p.r + j, scale_of(g) * s);
    }
  }
#else
  // The lanes' sums meet in two rounds of two rows each (half the workgroup memory of one round).
  for (var h = 0u; h < 2u; h++) {
    for (var i2 = 0u; i2 < 2u; i2++) {
      for (var c = 0u; c < 4u; c++) {
        red[(sub * 8u + 4u * i2 + c) * PAD + lane] = acc[2u * h + i2][c];
      }
    }
    workgroupBarrier();
    if (li < OUTS / 2u) {
      var s = 0.0;
      for (var l = 0u; l < LANES; l++) {
        s += red[li * PAD + l];
      }
      let sub2 = li / 8u;
      let e = li % 8u;
      let row = wid.x * BR + (sub2 / 2u) * 4u + 2u * h + e / 4u;
      let j = j0 + (sub2 % 2u) * 4u + e % 4u;
      if (row < p.rows && j < p.r) {
        store(g, row * p.r + j, scale_of(g) * s);
      }
    }
    workgroupBarrier();
  }
#endif
}
