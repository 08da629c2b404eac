// LoRA helpers around the GEMMs of shaders/matmul.wgsl (src/ops/lora.ts composes them):
// the initialisation of A, lora_dropout forward and backward, and the up products of many rows.
//
// Randomness is a counter-based hash of (seed, element index), so a mask is never stored: the
// backward pass regenerates exactly the forward's mask from the same seed.
// Grids are 2-D (src/gpu/grid.ts): flat group id = wid.x + wid.y * nwg.x.

struct Params {
  n: u32,
  seed: u32,
  // init_uniform: half-width of the interval. dropout: 1 / (1 - p), applied to kept elements.
  scale: f32,
  // dropout: an element is kept when its hash is at least this (p · 2^32).
  threshold: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

override WG: u32 = 256;

// PCG-style permutation of a 32-bit word (Jarzynski & Olano, "Hash Functions for GPU Rendering").
fn pcg(v: u32) -> u32 {
  let state = v * 747796405u + 2891336453u;
  let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
  return (word >> 22u) ^ word;
}

fn random_u32(i: u32) -> u32 {
  return pcg(pcg(params.seed) + i);
}

fn flat_index(wid: vec3u, nwg: vec3u, lid: u32) -> u32 {
  return (wid.x + wid.y * nwg.x) * WG + lid;
}

// y = uniform(-scale, scale), as PEFT's kaiming_uniform_(a = sqrt(5)) gives lora_A with
// scale = 1 / sqrt(in_features).
@compute @workgroup_size(WG)
fn init_uniform(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i < params.n) {
    // 24 high bits give an exactly representable f32 in [0, 1).
    let u = f32(random_u32(i) >> 8u) * (1.0 / 16777216.0);
    y[i] = params.scale * (2.0 * u - 1.0);
  }
}

// Forward: y = x · keep / (1 - p), inverted dropout as torch.nn.Dropout does in training.
@compute @workgroup_size(WG)
fn dropout_forward(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i < params.n) {
    y[i] = select(0.0, params.scale * x[i], random_u32(i) >= params.threshold);
  }
}

// Backward, accumulating: y += x · keep / (1 - p), with x the gradient after dropout and y the
// input's gradient (the base layer's contribution is already there).
@compute @workgroup_size(WG)
fn dropout_backward_acc(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i < params.n) {
    y[i] += select(0.0, params.scale * x[i], random_u32(i) >= params.threshold);
  }
}

// ---- LoRA's up products for many rows ---------------------------------------------------------
// up_add: y[T, N] += scale · u[T, r] · W, W (n, j) the up factor: lora_B [N, r] (forward, y the
// layer output, u = x·Aᵀ) or, with TRANS, lora_A [r, N] (backward, y = dX, u = t = s·dY·B). A
// workgroup owns 32 rows x 128 columns of y; 16 ranks at a time, it stages W's columns and u's
// rows in workgroup memory (10 KB), and each of its 8 row lanes accumulates 4 rows as vec4s; y is
// read and written once at the end. N % 4 == 0 (src/ops/lora.ts checks; else the GEMM).
// SECOND / THIRD add adapters g = 1, 2 (u_g, W_g, scale_g) to the same dispatch, for the adapters
// of one input (q/k/v, gate/up): without SUM each has its own y_g [T, N_g] (the forward's outputs;
// grid z = g); with SUM (TRANS: dX of their shared input, N_g = N) y = Σ_g scale_g·u_g·W_g, one
// walk over their stacked ranks, so dX is read and written once, not once per adapter.
struct UpParams {
  rows: u32,
  r: u32,
  n0: u32,
  n1: u32,
  n2: u32,
  s0: f32,
  s1: f32,
  s2: f32,
}

@group(0) @binding(0) var<uniform> upp: UpParams;
@group(0) @binding(3) var<storage, read> up_u: array<f32>;
@group(0) @binding(4) var<storage, read> up_w: array<f32>;
@group(0) @binding(5) var<storage, read_write> up_y: array<vec4<f32>>;
#if SECOND
@group(0) @binding(6) var<storage, read> up_u1: array<f32>;
@group(0) @binding(7) var<storage, read> up_w1: array<f32>;
#if !SUM
@group(0) @binding(8) var<storage, read_write> up_y1: array<vec4<f32>>;
#endif
#endif
#if THIRD
@group(0) @binding(9) var<storage, read> up_u2: array<f32>;
@group(0) @binding(10) var<storage, read> up_w2: array<f32>;
#if !SUM
@group(0) @binding(11) var<storage, read_write> up_y2: array<vec4<f32>>;
#endif
#endif

const UP_RC = 16u;    // ranks a pass
const UP_C4 = 32u;    // vec4 columns a workgroup (128 columns)
const UP_ROWS = 32u;  // rows a workgroup: 8 lanes of UP_C4 threads, 4 rows each
const UP_WS = UP_C4 + 1u; // vec4s between ranks in up_wt: +1 spreads the rank-major staging writes over banks
var<workgroup> up_wt: array<vec4<f32>, UP_RC * UP_WS>; // [j][c4]: scale·W at rank j, 4 columns
var<workgroup> up_us: array<f32, UP_ROWS * UP_RC>;     // [row][j]: the workgroup's rows of u

// Adapter g's fields; g is uniform across a workgroup where it selects y (grid z), and within a
// pass of 16 stacked ranks it changes at most where the ranks of two adapters meet.
fn up_n(g: u32) -> u32 {
  return select(select(upp.n0, upp.n1, g == 1u), upp.n2, g == 2u);
}

fn up_scale(g: u32) -> f32 {
  return select(select(upp.s0, upp.s1, g == 1u), upp.s2, g == 2u);
}

fn up_w_raw(g: u32, i: u32) -> f32 {
#if THIRD
  if (g == 2u) {
    return up_w2[i];
  }
#endif
#if SECOND
  if (g == 1u) {
    return up_w1[i];
  }
#endif
  return up_w[i];
}

fn up_u_at(g: u32, i: u32) -> f32 {
#if THIRD
  if (g == 2u) {
    return up_u2[i];
  }
#endif
#if SECOND
  if (g == 1u) {
    return up_u1[i];
  }
#endif
  return up_u[i];
}

fn up_w_at(g: u32, n: u32, j: u32) -> f32 {
#if TRANS
  return up_w_raw(g, j * up_n(g) + n);
#else
  return up_w_raw(g, n * upp.r + j);
#endif
}

fn up_y_add(g: u32, o: u32, v: vec4<f32>) {
#if !SUM
#if THIRD
  if (g == 2u) {
    up_y2[o] = up_y2[o] + v;
    return;
  }
#endif
#if SECOND
  if (g == 1u) {
    up_y1[o] = up_y1[o] + v;
    return;
  }
#endif
#endif
  up_y[o] = up_y[o] + v;
}

// Adapter and rank of the pass's rank J: with SUM, J counts the adapters' ranks stacked.
fn up_rank(yg: u32, J: u32) -> vec2u {
#if SUM
  return vec2u(J / upp.r, J % upp.r);
#else
  return vec2u(yg, J);
#endif
}

@compute @workgroup_size(32, 8)
fn up_add(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u, @builtin(local_invocation_index) li: u32) {
  let r = upp.r;
#if SUM
  // Every adapter's ranks in turn (the stacked ranks J = g·r + j), into one y.
  let yg = 0u;
  let ranks = r * {{ADAPTERS}}u;
#else
  let yg = wid.z;
  let ranks = r;
#endif
  let cols = up_n(yg);
  // A narrower adapter's blocks past its columns (the grid spans the widest): nothing to do.
  if (4u * wid.x * UP_C4 >= cols) {
    return;
  }
  let c4 = wid.x * UP_C4 + lid.x; // this thread's vec4 column
  let live = 4u * c4 < cols;
  let m0 = wid.y * UP_ROWS;
  var acc: array<vec4<f32>, 4>;   // rows lid.y + 8i
  for (var j0 = 0u; j0 < ranks; j0 += UP_RC) {
#if TRANS
    // A_g's rows run along the columns: a thread stages the 4 columns it sums.
    for (var jj = lid.y; jj < UP_RC; jj += 8u) {
      let J = j0 + jj;
      let gj = up_rank(yg, J);
      var w = vec4<f32>(0.0);
      if (live && J < ranks) {
        let n = 4u * c4;
        let g = gj.x;
        let j = gj.y;
        w = up_scale(g) * vec4<f32>(up_w_at(g, n, j), up_w_at(g, n + 1u, j), up_w_at(g, n + 2u, j), up_w_at(g, n + 3u, j));
      }
      up_wt[jj * UP_WS + lid.x] = w;
    }
#else
    // B's rows are r floats apart (a thread's own 4 columns would be 4 rows, and a warp's loads
    // 32 lines each): the block's 128 rows x 16 ranks are staged with the threads along ranks.
    for (var e = li; e < 4u * UP_C4 * UP_RC; e += 256u) {
      let nl = e / UP_RC;
      let jj = e % UP_RC;
      let J = j0 + jj;
      let n = 4u * wid.x * UP_C4 + nl;
      var w = 0.0;
      if (n < cols && J < ranks) {
        let gj = up_rank(yg, J);
        w = up_scale(gj.x) * up_w_at(gj.x, n, gj.y);
      }
      up_wt[jj * UP_WS + nl / 4u][nl % 4u] = w;
    }
#endif
    for (var i = li; i < UP_ROWS * UP_RC; i += 256u) {
      let m = m0 + i / UP_RC;
      let J = j0 + i % UP_RC;
      var v = 0.0;
      if (m < upp.rows && J < ranks) {
        let gj = up_rank(yg, J);
        v = up_u_at(gj.x, m * r + gj.y);
      }
      up_us[i] = v;
    }
    workgroupBarrier();
    for (var i = 0u; i < 4u; i++) {
      let row = lid.y + 8u * i;
      for (var jj = 0u; jj < UP_RC; jj++) {
        acc[i] = fma(vec4<f32>(up_us[row * UP_RC + jj]), up_wt[jj * UP_WS + lid.x], acc[i]);
      }
    }
    workgroupBarrier();
  }
  if (!live) {
    return;
  }
  for (var i = 0u; i < 4u; i++) {
    let m = m0 + lid.y + 8u * i;
    if (m < upp.rows) {
      up_y_add(yg, m * (cols / 4u) + c4, acc[i]);
    }
  }
}
