// AdamW after global grad-norm clipping, as torch.nn.utils.clip_grad_norm_ then torch.optim.AdamW,
// over many tensors a dispatch (multi-tensor apply): the tensors of one dispatch are views into one
// parameter buffer and one gradient buffer, listed in a segment table (src/ops/adamw.ts); the
// moments mirror the parameters' layout in their own buffers. Each segment is cut into chunks of
// WG·PER elements, one workgroup a chunk; a workgroup finds its segment by binary search over
// the segments' first chunks. The chunks are those of one dispatch per tensor, so the sums are too.
//
// 1. sumsq_partial: each workgroup writes Σ g² of its chunk to partials[offset + chunk] (no
//    atomics: the sum is deterministic).
// 2. clip_coef, one workgroup: norm = sqrt(Σ partials); coef = min(1, max_norm / (norm + 1e-6)).
//    stats = (norm, coef) stays on the GPU; the update reads coef, the CPU may read norm later.
// 3. adamw_step, with g = coef·grad:
//    θ ← θ·(1 - lr·wd);  m ← m + (1-β1)(g - m);  v ← β2·v + (1-β2)·g²
//    θ ← θ - (lr / (1-β1^t)) · m / (sqrt(v) / sqrt(1-β2^t) + eps)
// 4. zero_grads: g ← 0 over the same segments (zeroGrad).
// Grids are 2-D (src/gpu/grid.ts): flat group id = wid.x + wid.y * nwg.x.

const WG: u32 = 256u;
// Elements per thread, so that a chunk (and its partial sum) covers WG·PER elements.
const PER: u32 = 4u;

// One tensor: element offsets into the bound parameter (and moment) and gradient ranges, its
// length, and its first chunk's index among the dispatch's chunks.
struct Seg {
  param: u32,
  grad: u32,
  n: u32,
  first: u32,
}

@group(0) @binding(1) var<storage, read> segs: array<Seg>;

// The segment holding chunk `chunk`: the last one whose first chunk is ≤ chunk.
fn find_seg(chunk: u32, count: u32) -> Seg {
  var lo = 0u;
  var hi = count - 1u;
  while (lo < hi) {
    let mid = (lo + hi + 1u) / 2u;
    if (segs[mid].first <= chunk) {
      lo = mid;
    } else {
      hi = mid - 1u;
    }
  }
  return segs[lo];
}

struct SumParams {
  segments: u32,
  chunks: u32,     // chunks in this dispatch (the grid may hold more workgroups)
  offset: u32,     // this dispatch's first partial
}

@group(0) @binding(0) var<uniform> sp: SumParams;
@group(0) @binding(2) var<storage, read> grad: array<f32>;
@group(0) @binding(3) var<storage, read_write> partials: array<f32>;

var<workgroup> red: array<f32, WG>;

fn reduce_sum(lid: u32, v: f32) -> f32 {
  red[lid] = v;
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
    if (lid < stride) {
      red[lid] += red[lid + stride];
    }
    workgroupBarrier();
  }
  return red[0];
}

@compute @workgroup_size(WG)
fn sumsq_partial(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let chunk = wid.x + wid.y * nwg.x;
  if (chunk >= sp.chunks) {
    return;
  }
  let s = find_seg(chunk, sp.segments);
  let start = (chunk - s.first) * WG * PER;
  var acc = 0.0;
  for (var k = 0u; k < PER; k++) {
    let i = start + k * WG + lid;
    if (i < s.n) {
      let g = grad[s.grad + i];
      acc += g * g;
    }
  }
  let total = reduce_sum(lid, acc);
  if (lid == 0u) {
    partials[sp.offset + chunk] = total;
  }
}

struct ClipParams {
  count: u32,     // number of partial sums
  max_norm: f32,
  clip: u32,      // 0: report the norm but leave the gradients unscaled
}

@group(0) @binding(0) var<uniform> cp: ClipParams;
@group(0) @binding(1) var<storage, read> sums: array<f32>;
@group(0) @binding(2) var<storage, read_write> stats: array<f32>;   // (norm, coef)

@compute @workgroup_size(WG)
fn clip_coef(@builtin(local_invocation_index) lid: u32) {
  var acc = 0.0;
  for (var i = lid; i < cp.count; i += WG) {
    acc += sums[i];
  }
  let norm = sqrt(reduce_sum(lid, acc));
  if (lid == 0u) {
    stats[0] = norm;
    // torch clamps the coefficient at 1 rather than branching on norm > max_norm (same result).
    stats[1] = select(1.0, min(1.0, cp.max_norm / (norm + 1e-6)), cp.clip != 0u);
  }
}

struct StepParams {
  segments: u32,
  chunks: u32,
  lr: f32,
  beta1: f32,
  beta2: f32,
  eps: f32,
  weight_decay: f32,
  step_size: f32,     // lr / (1 - β1^t), from the step t in f64 on the CPU
  bc2_sqrt: f32,      // sqrt(1 - β2^t)
}

@group(0) @binding(0) var<uniform> up: StepParams;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
@group(0) @binding(3) var<storage, read> g_in: array<f32>;
@group(0) @binding(4) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(5) var<storage, read_write> exp_avg_sq: array<f32>;
@group(0) @binding(6) var<storage, read> clip: array<f32>;   // (norm, coef)

@compute @workgroup_size(WG)
fn adamw_step(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let chunk = wid.x + wid.y * nwg.x;
  if (chunk >= up.chunks) {
    return;
  }
  let s = find_seg(chunk, up.segments);
  let start = (chunk - s.first) * WG * PER;
  let coef = clip[1];
  for (var k = 0u; k < PER; k++) {
    let e = start + k * WG + lid;
    if (e < s.n) {
      let i = s.param + e;
      let g = g_in[s.grad + e] * coef;
      let p = param[i] * (1.0 - up.lr * up.weight_decay);
      let m = exp_avg[i] + (1.0 - up.beta1) * (g - exp_avg[i]);
      let v = up.beta2 * exp_avg_sq[i] + (1.0 - up.beta2) * g * g;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      param[i] = p - up.step_size * m / (sqrt(v) / up.bc2_sqrt + up.eps);
    }
  }
}

struct ZeroParams {
  segments: u32,
  chunks: u32,
}

@group(0) @binding(0) var<uniform> zp: ZeroParams;
@group(0) @binding(2) var<storage, read_write> grad_out: array<f32>;

@compute @workgroup_size(WG)
fn zero_grads(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let chunk = wid.x + wid.y * nwg.x;
  if (chunk >= zp.chunks) {
    return;
  }
  let s = find_seg(chunk, zp.segments);
  let start = (chunk - s.first) * WG * PER;
  for (var k = 0u; k < PER; k++) {
    let e = start + k * WG + lid;
    if (e < s.n) {
      grad_out[s.grad + e] = 0.0;
    }
  }
}
