// LoRA's weight gradients for up to three adapters g of one input x (src/ops/lora.ts:
// Lora.backwardGroup), every one in two dispatches, where the f32 GEMM takes two per gradient
// (a split along the rows, then the partials' sum):
//   dA_g [r, in]    += t_gᵀ·x          t_g = s_g·dY_g·B_g [T, r]
//   dB_g [out_g, r] += s_g·dY_gᵀ·u_g   u_g = x·A_gᵀ [T, r]
// Both are out[n, j] = Σ_rows P[row, n]·Q[row, j] with a wide P (x, or dY_g) and a thin Q (the
// adapters' t stacked by rank, J = g·r + j, or u_g). grad_parts: a workgroup owns 256 columns of
// one P and up to QMAX ranks of its Q over one chunk of rows (grid y); each thread sums 4 columns
// (a vec4 of P's row) x QMAX ranks in registers, so a row costs one vec4 load of P, QMAX/4
// broadcast loads of Q (staged in workgroup memory 64 rows at a time) and 4·QMAX FMAs; x is read
// once for every adapter's dA. Partials go to
// part [chunks, set]: a set is dA stacked [G·r, in] (dA_g's rows in order), then each dB_g [out_g, r].
// grad_sum adds the chunks' partials of each element, in chunk order, to its gradient.
// Tiles (grid x): dA's n-blocks x rank chunks of G·r, then dB_0's, dB_1's, dB_2's n-blocks x rank
// chunks of r. Widths are whole vec4s (src/ops/lora.ts checks). SECOND / THIRD add g = 1, 2.

struct Params {
  rows: u32,
  chunk_rows: u32,
  r: u32,
  width_a: u32, // in
  out0: u32,
  out1: u32,
  out2: u32,
  s0: f32,
  s1: f32,
  s2: f32,
  adapters: u32,
  a_tiles: u32, // n-blocks of in x rank chunks of G·r
  b_tiles0: u32,
  b_tiles1: u32,
  b_tiles2: u32,
  set_size: u32, // floats of one chunk's partials
  b_at0: u32,   // where dB_g starts in a set
  b_at1: u32,
  b_at2: u32,
  chunks: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
#if PARTS
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> dy0: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> u0: array<f32>;
@group(0) @binding(4) var<storage, read> t0: array<f32>;
#if SECOND
@group(0) @binding(5) var<storage, read> dy1: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> u1: array<f32>;
@group(0) @binding(7) var<storage, read> t1: array<f32>;
#endif
#if THIRD
@group(0) @binding(8) var<storage, read> dy2: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read> u2: array<f32>;
@group(0) @binding(10) var<storage, read> t2: array<f32>;
#endif
@group(0) @binding(11) var<storage, read_write> part: array<f32>;
#else
@group(0) @binding(11) var<storage, read> part: array<f32>;
@group(0) @binding(12) var<storage, read_write> da0: array<f32>;
@group(0) @binding(13) var<storage, read_write> db0: array<f32>;
#if SECOND
@group(0) @binding(14) var<storage, read_write> da1: array<f32>;
@group(0) @binding(15) var<storage, read_write> db1: array<f32>;
#endif
#if THIRD
@group(0) @binding(16) var<storage, read_write> da2: array<f32>;
@group(0) @binding(17) var<storage, read_write> db2: array<f32>;
#endif
#endif

const NB4 = 64u;          // vec4 columns a workgroup: one a thread of its 64, 256 columns
const QMAX = {{QMAX}}u;   // ranks a workgroup (a multiple of 4; the accumulators are QMAX vec4s)
const UNROLL = 4u;        // rows of P loaded before they are summed: more loads in flight
const QROWS = 64u;        // rows of Q staged at a time, one a thread (a multiple of UNROLL)
const Q4 = QMAX / 4u;

fn sel_u(g: u32, a: u32, b: u32, c: u32) -> u32 {
  return select(select(a, b, g == 1u), c, g == 2u);
}

#if PARTS
// Q's rows staged: [row][QMAX / 4] vec4s of ranks, read by every thread at once (broadcast).
var<workgroup> qs: array<vec4<f32>, QROWS * Q4>;

// P's vec4 i of adapter g's dY, or of x (g = 3).
fn p_at(g: u32, i: u32) -> vec4<f32> {
#if THIRD
  if (g == 2u) {
    return dy2[i];
  }
#endif
#if SECOND
  if (g == 1u) {
    return dy1[i];
  }
#endif
  if (g == 0u) {
    return dy0[i];
  }
  return x[i];
}

// Q element: adapter g's t (dA tiles) or u (dB tiles) at i; is_t is uniform across a workgroup.
fn q_at(g: u32, is_t: bool, i: u32) -> f32 {
  if (is_t) {
#if THIRD
    if (g == 2u) {
      return t2[i];
    }
#endif
#if SECOND
    if (g == 1u) {
      return t1[i];
    }
#endif
    return t0[i];
  }
#if THIRD
  if (g == 2u) {
    return u2[i];
  }
#endif
#if SECOND
  if (g == 1u) {
    return u1[i];
  }
#endif
  return u0[i];
}

@compute @workgroup_size(64)
fn grad_parts(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let r = p.r;
  // The tile: dA's (pg = 3: P = x, Q = the stacked t) or dB_g's (pg = g: P = dY_g, Q = u_g).
  var tile = wid.x;
  var pg = 3u;
  var width = p.width_a;
  var ranks = p.adapters * r;
  var out_at = 0u;
  var scale = 1.0;
  if (tile >= p.a_tiles) {
    tile -= p.a_tiles;
    pg = 0u;
    if (tile >= p.b_tiles0) {
      tile -= p.b_tiles0;
      pg = 1u;
      if (tile >= p.b_tiles1) {
        tile -= p.b_tiles1;
        pg = 2u;
      }
    }
    width = sel_u(pg, p.out0, p.out1, p.out2);
    ranks = r;
    out_at = sel_u(pg, p.b_at0, p.b_at1, p.b_at2);
    scale = select(select(p.s0, p.s1, pg == 1u), p.s2, pg == 2u);
  }
  let chunks_q = (ranks + QMAX - 1u) / QMAX;
  let j0 = (tile % chunks_q) * QMAX;
  let c4 = (tile / chunks_q) * NB4 + lid;
  let w4 = width / 4u;
  let live = c4 < w4;
  let cc = min(c4, w4 - 1u); // a column past the end reads the last; never written
  let is_t = pg == 3u;
  let row0 = wid.y * p.chunk_rows;
  let row1 = min(row0 + p.chunk_rows, p.rows);
  var acc: array<vec4<f32>, QMAX>;
  for (var rb = row0; rb < row1; rb += QROWS) {
    // Q's next QROWS rows into workgroup memory, a row a thread; zeros past the chunk's rows and
    // ranks, so the rows of P read there (the last row again) add nothing. A rank J of the stacked
    // t is rank J % r of adapter J / r.
    let rq = rb + lid;
    for (var q4 = 0u; q4 < Q4; q4++) {
      var v = vec4<f32>(0.0);
      for (var c = 0u; c < 4u; c++) {
        let J = j0 + 4u * q4 + c;
        if (rq < row1 && J < ranks) {
          v[c] = q_at(select(pg, J / r, is_t), is_t, rq * r + J % r);
        }
      }
      qs[lid * Q4 + q4] = v;
    }
    workgroupBarrier();
    let n_rows = min(QROWS, row1 - rb);
    for (var i0 = 0u; i0 < n_rows; i0 += UNROLL) {
      var pv: array<vec4<f32>, UNROLL>;
      for (var i = 0u; i < UNROLL; i++) {
        pv[i] = p_at(pg, min(rb + i0 + i, row1 - 1u) * w4 + cc);
      }
      for (var i = 0u; i < UNROLL; i++) {
        for (var q4 = 0u; q4 < Q4; q4++) {
          let qv = qs[(i0 + i) * Q4 + q4];
          acc[4u * q4] = fma(pv[i], vec4<f32>(qv.x), acc[4u * q4]);
          acc[4u * q4 + 1u] = fma(pv[i], vec4<f32>(qv.y), acc[4u * q4 + 1u]);
          acc[4u * q4 + 2u] = fma(pv[i], vec4<f32>(qv.z), acc[4u * q4 + 2u]);
          acc[4u * q4 + 3u] = fma(pv[i], vec4<f32>(qv.w), acc[4u * q4 + 3u]);
        }
      }
    }
    workgroupBarrier();
  }
  if (!live) {
    return;
  }
  let base = wid.y * p.set_size;
  for (var q = 0u; q < QMAX; q++) {
    let J = j0 + q;
    if (J >= ranks) {
      break;
    }
    let v = scale * acc[q];
    let n = 4u * c4;
    if (is_t) {
      // dA stacked [G·r, in]: 4 adjacent columns of row J.
      let o = base + J * width + n;
      part[o] = v.x;
      part[o + 1u] = v.y;
      part[o + 2u] = v.z;
      part[o + 3u] = v.w;
    } else {
      // dB_g [out_g, r]: rank J of 4 adjacent rows.
      let o = base + out_at + n * r + J;
      part[o] = v.x;
      part[o + r] = v.y;
      part[o + 2u * r] = v.z;
      part[o + 3u * r] = v.w;
    }
  }
}
#else
fn add_da(g: u32, i: u32, v: f32) {
#if THIRD
  if (g == 2u) {
    da2[i] += v;
    return;
  }
#endif
#if SECOND
  if (g == 1u) {
    da1[i] += v;
    return;
  }
#endif
  da0[i] += v;
}

fn add_db(g: u32, i: u32, v: f32) {
#if THIRD
  if (g == 2u) {
    db2[i] += v;
    return;
  }
#endif
#if SECOND
  if (g == 1u) {
    db1[i] += v;
    return;
  }
#endif
  db0[i] += v;
}

// One thread per element of a set (grid 2-D: src/gpu/grid.ts).
@compute @workgroup_size(256)
fn grad_sum(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (e >= p.set_size) {
    return;
  }
  var v = 0.0;
  for (var s = 0u; s < p.chunks; s++) {
    v += part[s * p.set_size + e];
  }
  let ra = p.r * p.width_a;
  if (e < p.adapters * ra) {
    add_da(e / ra, e % ra, v);
    return;
  }
  var g = 0u;
  if (e >= p.b_at1 && p.adapters > 1u) {
    g = 1u;
  }
  if (e >= p.b_at2 && p.adapters > 2u) {
    g = 2u;
  }
  add_db(g, e - sel_u(g, p.b_at0, p.b_at1, p.b_at2), v);
}
#endif
