// LoRA's update for a few rows (decode, rows ≤ 8): y_g += s_g·(x·A_gᵀ)·B_gᵀ for up to three
// adapters g that share the input x [rows, k] (q/k/v of one normed row, gate/up of another),
// each with A_g [r, k], B_g [n_g, r], y_g [rows, n_g], as two wide dispatches for all of them
// (src/ops/lora.ts's tiled GEMMs run one workgroup each at these shapes):
//   lora_down  u [rows, G·r] = x·[A_0; A_1; A_2]ᵀ: one workgroup per row of the stacked A, which
//              it reads once for every row of x (WG threads along k, tree sum per row)
//   lora_up    y_g += s_g·u_g·B_gᵀ: one thread per output element over the concatenated columns
//              of every y_g, r products each
// SECOND / THIRD add the adapters g = 1, 2. With SWIGLU (gate g = 0, up g = 1, n_0 = n_1),
// lora_up writes act = silu(gate)·up from the base projections in y_0, y_1 plus their updates,
// which takes swiglu_fwd's dispatch (y_0, y_1 themselves are left as the base projections).
//   lora_row   one adapter, down and up in one dispatch: one workgroup per row of x computes that
//              row's u (r ≤ MAX_R) into workgroup memory, then adds s·u·Bᵀ to every column of
//              its row of y (o_proj and down_proj, whose updates go into the residual stream)
// With NORM, lora_down takes the residual rows h as x and applies the RMSNorm first:
// xn = h·rsqrt(mean(h²) + eps)·w (as norms.wgsl's rmsnorm_fwd_vec4: the same sums in the same
// order with VEC4), u = xn·Aᵀ, and workgroup 0 also writes xn for the base projections: the
// norm's own dispatch is saved.
// With VEC4 (k and r multiples of 4) x, A, u and B are read as vec4s: the loops are latency-bound
// (one load in flight per iteration), so a quarter of the iterations is most of the gain.
// Grids are 2-D (src/gpu/grid.ts): flat group id = wid.x + wid.y * nwg.x.

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
const ADAPTERS: u32 = {{ADAPTERS}}u;
/** Scalars per element of x, A, u_in, B: 1, or 4 with VEC4. */
const W: u32 = {{W}}u;
/** Rows per call (src/ops/loraGemv.ts LORA_GEMV_MAX_ROWS): a constant trip count keeps acc in registers. */
const MAX_ROWS: u32 = 8u;

/** Largest rank lora_row takes (src/ops/loraGemv.ts LORA_ROW_MAX_RANK). */
const MAX_R: u32 = 256u;

var<workgroup> red: array<f32, 2048>; // MAX_ROWS · WG
var<workgroup> u_sh: array<f32, MAX_R>;

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
  var ss: array<f32, MAX_ROWS>;
  for (var kk = lid; kk < kw; kk += WG) {
    for (var t = 0u; t < MAX_ROWS; t++) {
      if (t < p.rows) {
        let v = x[t * kw + kk];
        ss[t] += dot_e(v, v);
      }
    }
  }
  reduce_rows(lid, ss, p.rows);
  var rstd: array<f32, MAX_ROWS>;
  for (var t = 0u; t < MAX_ROWS; t++) {
    rstd[t] = inverseSqrt(red[t * WG] / f32(p.k) + p.eps);
  }
  workgroupBarrier(); // red is reused below
#endif
  var acc: array<f32, MAX_ROWS>;
  for (var kk = lid; kk < kw; kk += WG) {
    let av = a_at(g, ar + kk);
    for (var t = 0u; t < MAX_ROWS; t++) {
      if (t < p.rows) {
#if NORM
        let xv = (x[t * kw + kk] * rstd[t]) * norm_w[kk];
        if (e == 0u) {
          xn[t * kw + kk] = xv;
        }
#else
        let xv = x[t * kw + kk];
#endif
        acc[t] += dot_e(xv, av);
      }
    }
  }
  reduce_rows(lid, acc, p.rows);
  if (lid < p.rows) {
    u[lid * width + e] = red[lid * WG];
  }
}

// Tree sum over the workgroup of each of the first `count` values: the total of value t lands in red[t·WG].
fn reduce_rows(lid: u32, v: array<f32, MAX_ROWS>, count: u32) {
  for (var t = 0u; t < MAX_ROWS; t++) {
    red[t * WG + lid] = v[t];
  }
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) {
      for (var t = 0u; t < MAX_ROWS; t++) {
        if (t < count) {
          red[t * WG + lid] += red[t * WG + lid + s];
        }
      }
    }
    workgroupBarrier();
  }
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

@compute @workgroup_size(WG)
fn lora_up(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = (wid.x + wid.y * nwg.x) * WG + lid;
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
  let t = wid.x;
  let kw = p.k / W;
  // u of row t, MAX_ROWS rows of A at a time.
  for (var jb = 0u; jb < p.r; jb += MAX_ROWS) {
    var acc = array<f32, MAX_ROWS>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0); // zeroed every block
    for (var kk = lid; kk < kw; kk += WG) {
      let xv = x[t * kw + kk];
      for (var i = 0u; i < MAX_ROWS; i++) {
        if (jb + i < p.r) {
          acc[i] += dot_e(xv, a0[(jb + i) * kw + kk]);
        }
      }
    }
    reduce_rows(lid, acc, min(MAX_ROWS, p.r - jb));
    if (lid < MAX_ROWS && jb + lid < p.r) {
      u_sh[jb + lid] = red[lid * WG];
    }
    workgroupBarrier();
  }
  // y[t, c] += s·Σ_j u_j·B[c, j] over the row's columns.
  let rw = p.r / W;
  for (var c = lid; c < p.n0; c += WG) {
    var s = 0.0;
    for (var j = 0u; j < rw; j++) {
#if VEC4
      let uv = vec4f(u_sh[4u * j], u_sh[4u * j + 1u], u_sh[4u * j + 2u], u_sh[4u * j + 3u]);
#else
      let uv = u_sh[j];
#endif
      s += dot_e(uv, b0[c * rw + j]);
    }
    y0[t * p.n0 + c] += p.s0 * s;
  }
}
