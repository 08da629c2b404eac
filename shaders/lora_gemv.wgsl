// LoRA's update for a few rows (decode, rows ≤ 8): y_g += s_g·(x·A_gᵀ)·B_gᵀ for up to three
// adapters g that share the input x [rows, k] (q/k/v of one normed row, gate/up of another),
// each with A_g [r, k], B_g [n_g, r], y_g [rows, n_g], as two wide dispatches for all of them
// (src/ops/lora.ts's tiled GEMMs run one workgroup each at these shapes):
//   lora_down  u [rows, G·r] = x·[A_0; A_1; A_2]ᵀ: one workgroup per (row of the stacked A, row
//              of x), WG threads along k, then one reduction. Every workgroup reads at most a few
//              KiB (one row of each): the work of a call is short only when spread this wide.
//   lora_up    y_g += s_g·u_g·B_gᵀ: one thread per output element over the concatenated columns
//              of every y_g, r products each (small workgroups: more SMs issue the B loads)
// SECOND / THIRD add the adapters g = 1, 2. With SWIGLU (gate g = 0, up g = 1, n_0 = n_1),
// lora_up writes act = silu(gate)·up from the base projections in y_0, y_1 plus their updates,
// which takes swiglu_fwd's dispatch (y_0, y_1 themselves are left as the base projections).
// With NORM, lora_down takes the residual rows h as x and applies the RMSNorm first:
// xn = h·rsqrt(mean(h²) + eps)·w. Since u = rsqrt(mean(h²) + eps)·Σ h·(w·A), the sums of squares
// and the products are taken in one pass over k and reduced together; every workgroup also writes
// its slice of its row of xn for the base projections: the norm's own dispatch is saved.
// With ADD (NORM), x is h plus an update owed to it (x_add), read as one.
// With QUANT (NORM and VEC4, k a multiple of 32) it also writes the normed rows as int8 groups for
// the int8 GEMV after it (shaders/int8_groups.wgsl's layout, by shaders/int8_lanes.wgsl); FOLD with
// QUANT writes act so for down_proj's.
// With FOLD (SWIGLU only), the same dispatch starts the down_proj adapter's down product on act:
// each workgroup's UP_WG columns of act (one row: n_0 % UP_WG == 0) times those columns of
// A_fold [r, n_0] give parts [rows, n_0 / UP_WG, r]; with PARTS, lora_up (one adapter) sums a
// row's np partials into u first. So down_proj's update after its base GEMV takes one dispatch, not two (a decode
// step is bound by recording its dispatches), and none where the GEMV's own workgroups sum the
// partials (its LoRA epilogue) or workgroups beside them do (shaders/matmul_q4_gemv_rows.wgsl's
// residual).
// With VEC4 (k and r multiples of 4) x, A, u and B are read as vec4s: the loops are latency-bound,
// so a quarter of the iterations is most of the gain.
// lora_up's grid is 2-D (src/gpu/grid.ts): flat group id = wid.x + wid.y * nwg.x.

struct Params {
  rows: u32,
  k: u32,
  r: u32,
  n0: u32,
  n1: u32,
  n2: u32,
  s0: f32,
  s1: f32,
  s2: f32,
  eps: f32,
  np: u32, // PARTS: partials per row
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<{{ELEM}}>;
@group(0) @binding(2) var<storage, read> a0: array<{{ELEM}}>;
@group(0) @binding(3) var<storage, read> a1: array<{{ELEM}}>;
@group(0) @binding(4) var<storage, read> a2: array<{{ELEM}}>;
@group(0) @binding(5) var<storage, read_write> u: array<f32>;
@group(0) @binding(6) var<storage, read> u_in: array<{{ELEM}}>;
@group(0) @binding(7) var<storage, read> b0: array<{{ELEM}}>;
@group(0) @binding(8) var<storage, read> b1: array<{{ELEM}}>;
@group(0) @binding(9) var<storage, read> b2: array<{{ELEM}}>;
@group(0) @binding(10) var<storage, read_write> y0: array<f32>;
@group(0) @binding(11) var<storage, read_write> y1: array<f32>;
@group(0) @binding(12) var<storage, read_write> y2: array<f32>;
@group(0) @binding(13) var<storage, read_write> act: array<f32>;
@group(0) @binding(14) var<storage, read> norm_w: array<{{ELEM}}>;
@group(0) @binding(15) var<storage, read_write> xn: array<{{ELEM}}>;
@group(0) @binding(16) var<storage, read> a_fold: array<f32>;
@group(0) @binding(17) var<storage, read_write> parts: array<f32>;
#if ADD
// With ADD (NORM): the rows are h + x_add, an update owed to h (decode's deferred down_proj
// update: src/ops/projection.ts, NormProjected); h itself is left as it is.
@group(0) @binding(19) var<storage, read> x_add: array<{{ELEM}}>;
#endif
#if QUANT
@group(0) @binding(18) var<storage, read_write> xq: array<vec4<u32>>;
const QL_WG: u32 = 256u; // the larger workgroup of the two entry points (lora_down's WG)
#include int8_groups
#include int8_lanes
#endif

const WG: u32 = 256u;
const UP_WG: u32 = 64u;
const ADAPTERS: u32 = {{ADAPTERS}}u;
/** Scalars per element of x, A, u_in, B: 1, or 4 with VEC4. */
const W: u32 = {{W}}u;
/** Values one reduction sums (each over the WG threads), and the threads that fold each in its second stage. */
const NV: u32 = 8u;
const LANES: u32 = WG / NV;

var<workgroup> red: array<f32, 2048>; // NV · WG
var<workgroup> part: array<f32, WG>;
var<workgroup> tot: array<f32, 2>;
var<workgroup> fold_sh: array<f32, UP_WG>;
var<workgroup> u_sh: array<f32, UP_WG>; // PARTS: the row's u; FOLD: the lanes' runs of the fold

fn dot_e(a: {{ELEM}}, b: {{ELEM}}) -> f32 {
#if VEC4
  return dot(a, b);
#else
  return a * b;
#endif
}

// Element i of x: with ADD, h + the owed update.
fn x_at(i: u32) -> {{ELEM}} {
#if ADD
  return x[i] + x_add[i];
#else
  return x[i];
#endif
}

fn a_at(g: u32, i: u32) -> {{ELEM}} {
#if THIRD
  if (g == 2u) {
    return a2[i];
  }
#endif
#if SECOND
  if (g == 1u) {
    return a1[i];
  }
#endif
  return a0[i];
}

// The sums over the workgroup of the NV values each thread stored at red[i·WG + lid]: thread
// i·LANES + q first folds value i's entries q, q + LANES, ..., then thread i (< NV) adds those
// LANES partials and returns value i's total (other threads return 0). Two barriers; red may be
// written again right after (the next call's first barrier orders it after these reads).
fn reduce_nv(lid: u32) -> f32 {
  workgroupBarrier();
  let i = lid / LANES;
  let q = lid % LANES;
  var s = 0.0;
  for (var c = 0u; c < NV; c++) {
    s += red[i * WG + c * LANES + q];
  }
  part[lid] = s;
  workgroupBarrier();
  var total = 0.0;
  if (lid < NV) {
    for (var c = 0u; c < LANES; c++) {
      total += part[lid * LANES + c];
    }
  }
  return total;
}

@compute @workgroup_size(WG)
fn lora_down(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = wid.x; // row of the stacked A: adapter e / r, its row e % r
  let t = wid.y; // row of x
  let width = ADAPTERS * p.r;
  let g = e / p.r;
  let kw = p.k / W;
  let ar = (e % p.r) * kw;
  let xr = t * kw;
  var dot_xa = 0.0;
#if NORM
  var ss = 0.0;
#endif
  for (var kk = lid; kk < kw; kk += WG) {
    let xv = x_at(xr + kk);
#if NORM
    dot_xa += dot_e(xv, a_at(g, ar + kk) * norm_w[kk]);
    ss += dot_e(xv, xv);
#else
    dot_xa += dot_e(xv, a_at(g, ar + kk));
#endif
  }
  red[lid] = dot_xa;
#if NORM
  red[WG + lid] = ss;
#else
  red[WG + lid] = 0.0;
#endif
  for (var i = 2u; i < NV; i++) {
    red[i * WG + lid] = 0.0;
  }
  let total = reduce_nv(lid);
  if (lid < 2u) {
    tot[lid] = total;
  }
  workgroupBarrier();
#if NORM
  let rstd = inverseSqrt(tot[1] / f32(p.k) + p.eps);
  if (lid == 0u) {
    u[t * width + e] = tot[0] * rstd;
  }
#if QUANT
  // This workgroup's whole groups of 32 (8 vec4s) of the normed row, a vec4 a thread: the values,
  // as below, and the groups as int8 (xq, quantize_x's layout in matmul_q4_quantize_x.wgsl) for the
  // 4-bit GEMV after, which then needs no quantize dispatch of its own.
  let groups = kw / 8u;
  let per = (groups + width - 1u) / width;
  let v_end = 8u * min(groups, (e + 1u) * per);
  for (var v0 = 8u * min(groups, e * per); v0 < v_end; v0 += WG) {
    let kk = min(v0 + lid, v_end - 1u);
    let v = (x_at(xr + kk) * rstd) * norm_w[kk];
    let live = v0 + lid < v_end;
    if (live) {
      xn[xr + kk] = v;
    }
    quantize_lanes(lid, v, live, 3u * (t * groups + kk / 8u));
  }
#else
  // This workgroup's slice of the normed row, as rmsnorm_fwd: (h·rstd)·w.
  let chunk = (kw + width - 1u) / width;
  let end = min(kw, (e + 1u) * chunk);
  for (var kk = e * chunk + lid; kk < end; kk += WG) {
    xn[xr + kk] = (x_at(xr + kk) * rstd) * norm_w[kk];
  }
#endif
#else
  if (lid == 0u) {
    u[t * width + e] = tot[0];
  }
#endif
}

// Σ_j u[t, g·r + j]·B_g[col, j] for the adapter g.
fn up_dot(g: u32, t: u32, col: u32, width: u32) -> f32 {
  let rw = p.r / W;
  let ub = (t * width + g * p.r) / W;
  let bb = col * rw;
  var s = 0.0;
  for (var j = 0u; j < rw; j++) {
    var bv: {{ELEM}};
#if THIRD
    if (g == 2u) {
      bv = b2[bb + j];
    }
#endif
#if SECOND
    if (g == 1u) {
      bv = b1[bb + j];
    }
#endif
    if (g == 0u) {
      bv = b0[bb + j];
    }
    s += dot_e(u_in[ub + j], bv);
  }
  return s;
}

#if SWIGLU
#include sigmoid
#endif

#if PARTS
// u_sh[0..r) gets row t's u: the sum of its np partials (left by FOLD here, or by the attention
// combine's FOLD for o_proj), thread lid taking column lid % r of partials lid / r, + UP_WG / r,
// ... (r divides UP_WG), then r threads fold those sums.
fn gather_u(lid: u32, t: u32) {
  let np = p.np;
  let stride = UP_WG / p.r;
  let j = lid % p.r;
  var s = 0.0;
  // Eight partials in flight a round (down_proj's 96 a row at r = 16 took 24 rounds of L2 latency
  // one at a time); past the last, a cached reload of it weighted 0.
  for (var w0 = lid / p.r; w0 < np; w0 += 8u * stride) {
    var v: array<f32, 8>;
    for (var h = 0u; h < 8u; h++) {
      let w = w0 + h * stride;
      v[h] = select(0.0, parts[(t * np + min(w, np - 1u)) * p.r + j], w < np);
    }
    s += ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  }
  fold_sh[lid] = s;
  workgroupBarrier();
  if (lid < p.r) {
    var total = 0.0;
    for (var q = 0u; q < stride; q++) {
      total += fold_sh[q * p.r + lid];
    }
    u_sh[lid] = total;
  }
  workgroupBarrier();
}

fn u_sh_at(j: u32) -> {{ELEM}} {
#if VEC4
  return vec4f(u_sh[4u * j], u_sh[4u * j + 1u], u_sh[4u * j + 2u], u_sh[4u * j + 3u]);
#else
  return u_sh[j];
#endif
}
#endif

@compute @workgroup_size(UP_WG)
fn lora_up(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let flat = wid.x + wid.y * nwg.x;
  let e = flat * UP_WG + lid;
  let width = ADAPTERS * p.r;
#if SWIGLU
  // No early return: FOLD's barrier below must be reached by every thread.
  var a = 0.0;
  if (e < p.rows * p.n0) {
    let t = e / p.n0;
    let col = e % p.n0;
    let gate = y0[e] + p.s0 * up_dot(0u, t, col, width);
    let up = y1[e] + p.s1 * up_dot(1u, t, col, width);
    a = gate * sigmoid(gate) * up;
    act[e] = a;
  }
#if FOLD
  fold_sh[lid] = a;
  workgroupBarrier();
  // UP_WG / r lanes a rank (r divides UP_WG), each over a run of the workgroup's columns, then the
  // runs summed: short chains in little code, as the combine's fold.
  let e0 = flat * UP_WG;
  let per = UP_WG / p.r;
  let run = UP_WG / per;
  let c0 = (lid % per) * run;
  let row_a = (lid / per) * p.n0 + e0 % p.n0;
  var s = 0.0;
  for (var c = c0; c < c0 + run; c++) {
    s += a_fold[row_a + c] * fold_sh[c];
  }
  u_sh[lid] = s;
  workgroupBarrier();
  if (lid < p.r && e0 < p.rows * p.n0) {
    var total = 0.0;
    for (var q = 0u; q < per; q++) {
      total += u_sh[lid * per + q];
    }
    parts[flat * p.r + lid] = total; // [row][e0 % n0 / UP_WG][lid]: flat = row·(n0 / UP_WG) + ...
  }
#if QUANT
  // This workgroup's act as int8 groups of 32 for down_proj's GEMV, a vec4 a lane: groups never
  // straddle rows (n0 % UP_WG == 0).
  let c4 = 4u * min(lid, UP_WG / 4u - 1u);
  quantize_lanes(lid, vec4f(fold_sh[c4], fold_sh[c4 + 1u], fold_sh[c4 + 2u], fold_sh[c4 + 3u]), lid < UP_WG / 4u && e0 < p.rows * p.n0, 3u * (e0 / 32u + lid / 8u));
#endif
#endif
#else
#if PARTS
  // Workgroups past the last row gather row rows - 1 harmlessly and write nothing.
  gather_u(lid, min((flat * UP_WG) / p.n0, p.rows - 1u));
  if (e < p.rows * p.n0) {
    let bb = (e % p.n0) * (p.r / W);
    var d = 0.0;
    for (var j = 0u; j < p.r / W; j++) {
      d += dot_e(u_sh_at(j), b0[bb + j]);
    }
    y0[e] += p.s0 * d;
  }
#else
  let n = p.n0 + p.n1 + p.n2;
  if (e >= p.rows * n) {
    return;
  }
  let t = e / n;
  let c = e % n;
  if (c < p.n0) {
    y0[t * p.n0 + c] += p.s0 * up_dot(0u, t, c, width);
    return;
  }
#if SECOND
  if (c < p.n0 + p.n1) {
    let cl = c - p.n0;
    y1[t * p.n1 + cl] += p.s1 * up_dot(1u, t, cl, width);
    return;
  }
#endif
#if THIRD
  let cl = c - p.n0 - p.n1;
  y2[t * p.n2 + cl] += p.s2 * up_dot(2u, t, cl, width);
#endif
#endif
#endif
}
