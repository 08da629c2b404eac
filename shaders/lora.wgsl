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
struct UpParams {
  rows: u32,
  cols: u32, // N
  r: u32,
  scale: f32,
}

@group(0) @binding(0) var<uniform> upp: UpParams;
@group(0) @binding(3) var<storage, read> up_u: array<f32>;
@group(0) @binding(4) var<storage, read> up_w: array<f32>;
@group(0) @binding(5) var<storage, read_write> up_y: array<vec4<f32>>;

const UP_RC = 16u;    // ranks a pass
const UP_C4 = 32u;    // vec4 columns a workgroup (128 columns)
const UP_ROWS = 32u;  // rows a workgroup: 8 lanes of UP_C4 threads, 4 rows each
var<workgroup> up_wt: array<vec4<f32>, UP_RC * UP_C4>; // [j][c4]: scale·W at rank j, 4 columns
var<workgroup> up_us: array<f32, UP_ROWS * UP_RC>;     // [row][j]: the workgroup's rows of u

fn up_w_at(n: u32, j: u32) -> f32 {
#if TRANS
  return up_w[j * upp.cols + n];
#else
  return up_w[n * upp.r + j];
#endif
}

@compute @workgroup_size(32, 8)
fn up_add(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u, @builtin(local_invocation_index) li: u32) {
  let r = upp.r;
  let c4 = wid.x * UP_C4 + lid.x; // this thread's vec4 column
  let live = 4u * c4 < upp.cols;
  let m0 = wid.y * UP_ROWS;
  var acc: array<vec4<f32>, 4>;   // rows lid.y + 8i
  for (var j0 = 0u; j0 < r; j0 += UP_RC) {
    for (var jj = lid.y; jj < UP_RC; jj += 8u) {
      let j = j0 + jj;
      var w = vec4<f32>(0.0);
      if (live && j < r) {
        let n = 4u * c4;
        w = upp.scale * vec4<f32>(up_w_at(n, j), up_w_at(n + 1u, j), up_w_at(n + 2u, j), up_w_at(n + 3u, j));
      }
      up_wt[jj * UP_C4 + lid.x] = w;
    }
    for (var i = li; i < UP_ROWS * UP_RC; i += 256u) {
      let m = m0 + i / UP_RC;
      let j = j0 + i % UP_RC;
      var v = 0.0;
      if (m < upp.rows && j < r) {
        v = up_u[m * r + j];
      }
      up_us[i] = v;
    }
    workgroupBarrier();
    for (var i = 0u; i < 4u; i++) {
      let row = lid.y + 8u * i;
      for (var jj = 0u; jj < UP_RC; jj++) {
        acc[i] = fma(vec4<f32>(up_us[row * UP_RC + jj]), up_wt[jj * UP_C4 + lid.x], acc[i]);
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
      let o = m * (upp.cols / 4u) + c4;
      up_y[o] = up_y[o] + acc[i];
    }
  }
}
