// LoRA's update for a few rows (decode, rows ≤ 8): y_g += s_g·(x·A_gᵀ)·B_gᵀ for up to three
// adapters g that share the input x [rows, k] (q/k/v of one normed row, gate/up of another),
// each with A_g [r, k], B_g [n_g, r], y_g [rows, n_g], as two wide dispatches for all of them
// (src/ops/lora.ts's tiled GEMMs run one workgroup each at these shapes):
//   lora_down  u [rows, G·r] = x·[A_0; A_1; A_2]ᵀ: one workgroup per row of the stacked A, which
//              it reads once for every row of x (WG threads along k, then one reduction)
//   lora_up    y_g += s_g·u_g·B_gᵀ: one thread per output element over the concatenated columns
//              of every y_g, r products each (small workgroups: more SMs issue the B loads)
// SECOND / THIRD add the adapters g = 1, 2. With SWIGLU (gate g = 0, up g = 1, n_0 = n_1),
// lora_up writes act = silu(gate)·up from the base projections in y_0, y_1 plus their updates,
// which takes swiglu_fwd's dispatch (y_0, y_1 themselves are left as the base projections).
//   lora_row   one adapter, down and up in one dispatch, for o_proj and down_proj (whose updates
//              go into the residual stream): workgroup (i, j) takes RR rows of x from row j·RR and
//              the columns [i·cols, (i+1)·cols) of y. Each workgroup recomputes its rows' u = x·Aᵀ
//              (r·k products a row, A from L2: cheap beside one workgroup doing every column), then
//              adds s·u·Bᵀ to its columns. RR > 1 reads A once for RR rows.
// With NORM, lora_down takes the residual rows h as x and applies the RMSNorm first:
// xn = h·rsqrt(mean(h²) + eps)·w. Since u = rsqrt(mean(h²) + eps)·Σ h·(w·A), the sums of squares
// and the products are taken in one pass over k and reduced together; every workgroup also writes
// its slice of xn for the base projections: the norm's own dispatch is saved.
// With VEC4 (k and r multiples of 4) x, A, u and B are read as vec4s: the loops are latency-bound,
// so a quarter of the iterations is most of the gain.
// Grids of lora_down / lora_up are 2-D (src/gpu/grid.ts): flat group id = wid.x + wid.y * nwg.x.

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
  cols: u32,
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

const WG: u32 = 256u;
const UP_WG: u32 = 64u;
const ADAPTERS: u32 = {{ADAPTERS}}u;
/** Scalars per element of x, A, u_in, B: 1, or 4 with VEC4. */
const W: u32 = {{W}}u;
/** Rows per call (src/ops/loraGemv.ts LORA_GEMV_MAX_ROWS): constant trip counts keep accumulators in registers. */
const MAX_ROWS: u32 = 8u;
/** Values one reduction sums (each over the WG threads), and the threads that fold each in its second stage. */
const NV: u32 = 8u;
const LANES: u32 = WG / NV;
/** Accumulators a thread holds: lora_down's (product, sum of squares) per row, lora_row's rows × ranks of a pass. */
const ACC: u32 = 16u;
/** Values of u lora_row keeps (src/ops/loraGemv.ts: RR·r at most this). */
const U_MAX: u32 = 1024u;

/** lora_row: rows of x per workgroup (1, 2, 4 or 8); a pass over k takes ACC / RR ranks. */
override RR: u32 = 1u;

var<workgroup> red: array<f32, 2048>; // NV · WG
var<workgroup> part: array<f32, WG>;
var<workgroup> tot: array<f32, ACC>;
var<workgroup> u_sh: array<f32, U_MAX>;

fn dot_e(a: {{ELEM}}, b: {{ELEM}}) -> f32 {
#if VEC4
  return dot(a, b);
#else
  return a * b;
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
fn lora_down(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = wid.x + wid.y * nwg.x; // row of the stacked A: adapter e / r, its row e % r
  let width = ADAPTERS * p.r;
  if (e >= width) {
    return;
  }
  let g = e / p.r;
  let kw = p.k / W;
  let ar = (e % p.r) * kw;
#if NORM
  const VPR = 2u; // values per row: Σ x·(w·A), Σ x²
#else
  const VPR = 1u;
#endif
  var acc = array<f32, ACC>();
  for (var kk = lid; kk < kw; kk += WG) {
#if NORM
    let av = a_at(g, ar + kk) * norm_w[kk];
#else
    let av = a_at(g, ar + kk);
#endif
    for (var t = 0u; t < MAX_ROWS; t++) {
      if (t < p.rows) {
        let xv = x[t * kw + kk];
        acc[VPR * t] += dot_e(xv, av);
#if NORM
        acc[VPR * t + 1u] += dot_e(xv, xv);
#endif
      }
    }
  }
  let values = VPR * p.rows;
  for (var b = 0u; b < values; b += NV) {
    for (var i = 0u; i < NV; i++) {
      red[i * WG + lid] = acc[b + i];
    }
    let total = reduce_nv(lid);
    if (lid < NV) {
      tot[b + lid] = total;
    }
  }
  workgroupBarrier();
#if NORM
  if (lid < p.rows) {
    u[lid * width + e] = tot[2u * lid] * inverseSqrt(tot[2u * lid + 1u] / f32(p.k) + p.eps);
  }
  // This workgroup's slice of the normed rows, as rmsnorm_fwd: (h·rstd)·w.
  let chunk = (kw + width - 1u) / width;
  let end = min(kw, (e + 1u) * chunk);
  for (var t = 0u; t < MAX_ROWS; t++) {
    if (t < p.rows) {
      let rstd = inverseSqrt(tot[2u * t + 1u] / f32(p.k) + p.eps);
      for (var kk = e * chunk + lid; kk < end; kk += WG) {
        xn[t * kw + kk] = (x[t * kw + kk] * rstd) * norm_w[kk];
      }
    }
  }
#else
  if (lid < p.rows) {
    u[lid * width + e] = tot[lid];
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
// As shaders/activations.wgsl (exp of non-positive arguments only), so act matches swiglu_fwd.
fn sigmoid(z: f32) -> f32 {
  let e = exp(-abs(z));
  let s = 1.0 / (1.0 + e);
  return select(e * s, s, z >= 0.0);
}
#endif

@compute @workgroup_size(UP_WG)
fn lora_up(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = (wid.x + wid.y * nwg.x) * UP_WG + lid;
  let width = ADAPTERS * p.r;
#if SWIGLU
  if (e >= p.rows * p.n0) {
    return;
  }
  let t = e / p.n0;
  let col = e % p.n0;
  let gate = y0[e] + p.s0 * up_dot(0u, t, col, width);
  let up = y1[e] + p.s1 * up_dot(1u, t, col, width);
  act[e] = gate * sigmoid(gate) * up;
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
}

@compute @workgroup_size(WG)
fn lora_row(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let t0 = wid.y * RR;
  let kw = p.k / W;
  let rb = ACC / RR; // ranks per pass; accumulator t·rb + i is row t0 + t, rank jb + i
  // u of the rows, rb ranks at a time: every A element loaded once for the RR rows.
  for (var jb = 0u; jb < p.r; jb += rb) {
    var acc = array<f32, ACC>(); // an explicit zero: a bare declaration in a loop is not re-zeroed everywhere
    for (var kk = lid; kk < kw; kk += WG) {
      var xs = array<{{ELEM}}, MAX_ROWS>();
      for (var t = 0u; t < RR; t++) {
        if (t0 + t < p.rows) {
          xs[t] = x[(t0 + t) * kw + kk];
        }
      }
      for (var i = 0u; i < rb; i++) {
        if (jb + i < p.r) {
          let av = a0[(jb + i) * kw + kk];
          for (var t = 0u; t < RR; t++) {
            acc[t * rb + i] += dot_e(xs[t], av);
          }
        }
      }
    }
    for (var b = 0u; b < ACC; b += NV) {
      for (var i = 0u; i < NV; i++) {
        red[i * WG + lid] = acc[b + i];
      }
      let total = reduce_nv(lid);
      let a = b + lid;
      if (lid < NV && jb + a % rb < p.r) {
        u_sh[(a / rb) * p.r + jb + a % rb] = total;
      }
    }
  }
  workgroupBarrier();
  // y[t, c] += s·Σ_j u_j·B[c, j] over the workgroup's columns.
  let rw = p.r / W;
  let end = min(p.n0, (wid.x + 1u) * p.cols);
  for (var c = wid.x * p.cols + lid; c < end; c += WG) {
    var s = array<f32, MAX_ROWS>();
    for (var j = 0u; j < rw; j++) {
      let bv = b0[c * rw + j];
      for (var t = 0u; t < RR; t++) {
#if VEC4
        let ub = t * p.r + 4u * j;
        let uv = vec4f(u_sh[ub], u_sh[ub + 1u], u_sh[ub + 2u], u_sh[ub + 3u]);
#else
        let uv = u_sh[t * p.r + j];
#endif
        s[t] += dot_e(uv, bv);
      }
    }
    for (var t = 0u; t < RR; t++) {
      if (t0 + t < p.rows) {
        y0[(t0 + t) * p.n0 + c] += p.s0 * s[t];
      }
    }
  }
}
