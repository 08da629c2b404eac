// What the 4-bit GEMV kernels share (matmul_q4_gemv.wgsl: one row of x; matmul_q4_gemv_rows.wgsl:
// 2 to 8): how W is spread over threads, how codes become floats, the weight steps and the LoRA
// epilogue, and the bindings. The including file declares `params` (fields n, lora_r, lora_np,
// lora_s).
//
// GEMV: y[m, n] (+)= Σ_k x[m, k] W[n, k] for M ≤ 8 rows of x; `gemv` takes one row, `gemv_rows`
// 2 to 8. Both spread W alike: a thread group of TPR lanes owns a block of 4 rows of W; lane l
// takes groups l, l + TPR, ... of each, so one 16-byte load (a vec4<u32>) holds a whole group and
// the TPR lanes of a row read consecutive 16 bytes. The loads of the next step (4 rows' codes and
// scales) are issued before the arithmetic of the current one, so each thread keeps a step of
// weights in flight while it computes (HBM latency is hidden inside each thread, not only across
// warps). x is staged in workgroup memory per workgroup and chunk of KC columns, already scaled
// for the unpacking below and transposed so that consecutive lanes read consecutive 16 bytes, or
// (XDIRECT) read from memory. With PERSIST a workgroup walks row blocks with a grid stride.
//
// Codes become floats without integer-to-float conversions (a quarter-rate instruction on NVIDIA):
// a code c masked in place at bits 4p..4p+3 (p = 0..3 of a half word) and OR-ed into the mantissa
// of 2^23 is the float 2^23 + c·16^p; subtracting 2^23 + 8·16^p gives (c − 8)·16^p exactly. x (or
// the scale) is multiplied by 16^-p to match (exact: powers of two).

@group(0) @binding(1) var<storage, read> codes4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> scales: array<u32>;
@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> lora_parts: array<f32>; // LORA: [m, lora_np, lora_r]
@group(0) @binding(6) var<storage, read> lora_b: array<f32>;     // LORA: lora_B.weight [n, lora_r]
@group(0) @binding(7) var<storage, read> xq_in: array<vec4<u32>>; // int8 x: quantize_x's (PREQ) or quantize_x2's (I8X2) output

override TPR: u32 = 32u;   // lanes per block of 4 rows of W, a power of two up to 128 (to the subgroup size with subgroups)
override TG: u32 = 8u;     // row blocks per workgroup: TPR·TG threads, 4·TG rows of W
override KC: u32 = 2048u;  // columns of x staged per chunk, a multiple of 32
override PERSIST: bool = false; // grid-stride over row blocks (the grid may be smaller than N needs)
override XDIRECT: bool = false; // read x from memory (L1) instead of staging it: no barrier before the
                                // arithmetic; for small N, where a workgroup's latency is the cost

const MAGIC = 0x4B000000u; // 2^23 as f32 bits: its mantissa holds integers below 2^23 exactly
const NIBBLES = vec4<u32>(0xFu, 0xF0u, 0xF00u, 0xF000u);
const OFFSET = vec4<f32>(8388616.0, 8388736.0, 8390656.0, 8421376.0); // 2^23 + 8·16^p
const X_SCALE = vec4<f32>(1.0, 0.0625, 0.00390625, 0.000244140625); // 16^-p
const NOT_STAGED = 0xFFFFFFFFu;
const LOW_NIBBLES = 0x0F0F0F0Fu; // the even weights of a code word as bytes

// The row blocks of a dispatch: the first this workgroup takes, the stride to its next one, the count.
fn row_blocks(wid: vec3u, nwg: vec3u) -> vec3u {
  let blocks = (params.n + 4u * TG - 1u) / (4u * TG); // workgroup-sized blocks of rows
  return vec3u(wid.x + wid.y * nwg.x, select(blocks, nwg.x * nwg.y, PERSIST), blocks);
}

// The first group of each of the 4 rows of W from row0 (rows past N repeat the last: a cached
// read whose sums are dropped).
fn block_rows(row0: u32, groups: u32) -> vec4<u32> {
  return min(vec4<u32>(row0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(params.n - 1u)) * groups;
}

// One step of a thread: group s of the 4 rows (first groups rr), codes c[r] and scales d[r].
struct Step {
  c: array<vec4<u32>, 4>,
  d: vec4<f32>,
}

fn step_at(rr: vec4<u32>, s: u32) -> Step {
  let g = rr + vec4<u32>(s);
  return Step(
    array<vec4<u32>, 4>(codes4[g.x], codes4[g.y], codes4[g.z], codes4[g.w]),
    vec4<f32>(scale_of(g.x), scale_of(g.y), scale_of(g.z), scale_of(g.w)),
  );
}

// ---- LoRA's up product as the GEMV's epilogue ---------------------------------------------------
// Decode's o_proj and down_proj adapters: the kernel before the GEMV (the attention combine, the
// SwiGLU) leaves u = x·Aᵀ as lora_np partial sums a row; with LORA, the GEMV sums them at its start
// and adds s·u·Bᵀ to each output it stores, so the update takes no dispatch of its own (decode at
// one sequence is bound by recording dispatches). At 2 to 8 rows it pays only where the step's other
// GEMVs run this kernel too, at rank 0 (Q4_TUNING.loraMaxRows, BENCHMARKS.md).
#if LORA
const LORA_MAX: u32 = 512u; // rows of x · rank: 8 · 64 at most (the host checks)
var<workgroup> lora_u: array<f32, LORA_MAX>;       // [m, r]: s·u
var<workgroup> lora_fold: array<f32, 2u * LORA_MAX>; // the threads' slices of the partial sums

// The adapter whose partials lora_gather sums: its rank r, partials a row np and scale s.
struct LoraTerm {
  r: u32,
  np: u32,
  s: f32,
}

// lora_u[(row − row0)·r + j] = s·Σ partials of rows row0 .. row0 + rows of x, by all wg threads
// (slices of the partials when rows·r is below wg, then a fold). Rank 0 (a weight without an
// adapter on this kernel, which the host gives every decoder GEMV of a few rows) skips it,
// barriers included.
fn lora_gather(lid: u32, wg: u32, row0: u32, rows: u32, a: LoraTerm) {
  let r = a.r;
  if (r == 0u) {
    return;
  }
  let np = a.np;
  let items = rows * r;
  let slices = clamp(wg / items, 1u, 2u * LORA_MAX / items);
  for (var i = lid; i < items * slices; i += wg) {
    let it = i % items;
    let row = (row0 + it / r) * np * r + it % r;
    // Four loads in flight per round (one per round trip made this a chain of L2 latencies).
    var sum = vec4<f32>(0.0);
    var q = i / items;
    for (; q + 3u * slices < np; q += 4u * slices) {
      sum += vec4<f32>(lora_parts[row + q * r], lora_parts[row + (q + slices) * r], lora_parts[row + (q + 2u * slices) * r], lora_parts[row + (q + 3u * slices) * r]);
    }
    for (; q < np; q += slices) {
      sum.x += lora_parts[row + q * r];
    }
    lora_fold[i] = sum.x + sum.y + sum.z + sum.w;
  }
  workgroupBarrier();
  for (var it = lid; it < items; it += wg) {
    var t = 0.0;
    for (var sl = 0u; sl < slices; sl++) {
      t += lora_fold[sl * items + it];
    }
    lora_u[it] = a.s * t;
  }
  workgroupBarrier();
}
#endif

// s·u[m]·B[n] for the rank-r adapter lora_gather summed (0 without LORA).
fn lora_out(m: u32, n: u32, r: u32) -> f32 {
#if LORA
  let u0 = m * r;
  let b0 = n * r;
  // Four loads of B in flight a round, not a chain of one.
  var d = vec4<f32>(0.0);
  var j = 0u;
  for (; j + 4u <= r; j += 4u) {
    d += vec4<f32>(lora_u[u0 + j], lora_u[u0 + j + 1u], lora_u[u0 + j + 2u], lora_u[u0 + j + 3u]) *
      vec4<f32>(lora_b[b0 + j], lora_b[b0 + j + 1u], lora_b[b0 + j + 2u], lora_b[b0 + j + 3u]);
  }
  for (; j < r; j++) {
    d.x += lora_u[u0 + j] * lora_b[b0 + j];
  }
  return d.x + d.y + d.z + d.w;
#else
  return 0.0;
#endif
}
