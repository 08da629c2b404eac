// Elementwise activations over flat f32 arrays.
//   swiglu_fwd      h = silu(gate)·up                      (decoder MLP, hidden_act silu)
//   swiglu_bwd      dgate = dh·up·σ(g)(1 + g(1 − σ(g))),  dup = dh·silu(g)
//   gelu_tanh_fwd   gelu_pytorch_tanh (vision blocks' MLP)
//   gelu_tanh_bwd   y = dh·gelu_tanh'(x): the blocks' backward, for LoRA on them
//   gelu_erf_fwd    exact GELU, nn.GELU() (the vision PatchMergers)
//   gelu_erf_bwd    y = dh·(Φ(x) + x·φ(x)): the mergers' backward, for LoRA on them
// WGSL does not promise sane exp/tanh results on overflow, so every formula below only takes
// exp of non-positive arguments. Grids are 2-D (src/gpu/grid.ts): flat group id = wid.x + wid.y * nwg.x.

struct Params {
  n: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> h: array<f32>;
@group(0) @binding(4) var<storage, read> dh: array<f32>;
@group(0) @binding(5) var<storage, read_write> dgate: array<f32>;
@group(0) @binding(6) var<storage, read_write> dup: array<f32>;
@group(0) @binding(7) var<storage, read> x: array<f32>;
@group(0) @binding(8) var<storage, read_write> y: array<f32>;

override WG: u32 = 256;

fn flat_index(wid: vec3u, nwg: vec3u, lid: u32) -> u32 {
  return (wid.x + wid.y * nwg.x) * WG + lid;
}

#include sigmoid

// Φ(x), the standard normal CDF, through erfc(|x|/√2) (Chebyshev fit, relative error < 1.2e-7),
// so the left tail keeps its relative precision instead of cancelling in 1 + erf.
fn normal_cdf(v: f32) -> f32 {
  let z = abs(v) * 0.7071067811865476;
  let t = 1.0 / (1.0 + 0.5 * z);
  let poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
  let half_erfc = 0.5 * t * exp(-z * z + poly);
  return select(half_erfc, 1.0 - half_erfc, v >= 0.0);
}

@compute @workgroup_size(WG)
fn swiglu_fwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i < p.n) {
    let g = gate[i];
    h[i] = g * sigmoid(g) * up[i];
  }
}

@compute @workgroup_size(WG)
fn swiglu_bwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i < p.n) {
    let g = gate[i];
    let s = sigmoid(g);
    let d = dh[i];
    dgate[i] = d * up[i] * s * (1.0 + g * (1.0 - s));
    dup[i] = d * g * s;
  }
}

// 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) = x·σ(2·√(2/π)(x + 0.044715x³)).
@compute @workgroup_size(WG)
fn gelu_tanh_fwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i < p.n) {
    let v = x[i];
    y[i] = v * sigmoid(1.5957691216057308 * (v + 0.044715 * v * v * v));
  }
}

@compute @workgroup_size(WG)
fn gelu_erf_fwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i < p.n) {
    let v = x[i];
    y[i] = v * normal_cdf(v);
  }
}

// d/dx x·Φ(x) = Φ(x) + x·φ(x), φ(x) = exp(−x²/2)/√(2π); x is the forward's input, dh the output's gradient.
@compute @workgroup_size(WG)
fn gelu_erf_bwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i < p.n) {
    let v = x[i];
    y[i] = dh[i] * (normal_cdf(v) + v * 0.3989422804014327 * exp(-0.5 * v * v));
  }
}

// With z = 2c(x + 0.044715x³), c = √(2/π): gelu = x·σ(z), gelu' = σ(z) + x·σ(z)(1 − σ(z))·2c(1 + 3·0.044715x²).
@compute @workgroup_size(WG)
fn gelu_tanh_bwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i < p.n) {
    let v = x[i];
    let s = sigmoid(1.5957691216057308 * (v + 0.044715 * v * v * v));
    y[i] = dh[i] * (s + v * s * (1.0 - s) * 1.5957691216057308 * (1.0 + 0.134145 * v * v));
  }
}
