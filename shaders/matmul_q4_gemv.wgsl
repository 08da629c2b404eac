// GEMV for one row of x: y[n] (+)= Σ_k x[k] W[n, k] (decode of one sequence; the LM head).
// The thread layout and code unpacking are q4_gemv_common.wgsl's; src/ops/matmulQ4.ts picks the
// layout per weight shape (src/ops/matmulQ4Tuning.ts).
// With NORM, x is a residual row h and the GEMV multiplies RMSNorm's rms(h)·norm_w: every
// workgroup sums h² itself (one row, read from L2) instead of a norm dispatch writing xn first,
// and with DOWN (1 to 3 adapters: DOWN2, DOWN3 add the second and third) workgroups past the
// GEMV's row blocks, one per row e of the adapters' stacked A, write their down products
// u[e] = rms(h)·norm_w·A_eᵀ, which only the dispatch after the GEMV reads (the LoRA GEMV's down
// dispatch saved: decode at one sequence is bound by its dispatches, not by bytes).
#if SUBGROUPS
// requires: subgroups
#endif

struct Params {
  n: u32,          // rows of W (out features)
  k: u32,          // columns of W (in features), a multiple of 32
  accumulate: u32, // 1: add into y instead of overwriting it
  lora_r: u32,     // LORA: the adapter's rank,
  lora_np: u32,    // partials of u per row of x,
  lora_s: f32,     // and its scale alpha / r
  eps: f32,        // NORM: RMSNorm's epsilon
  down_r: u32,     // DOWN: the adapters' rank
  down_rows: u32,  // and their rows of A in all (adapters · rank)
}

@group(0) @binding(0) var<uniform> params: Params;

#include q4_format
#include q4_gemv_common

#if NORM
@group(0) @binding(8) var<storage, read> norm_w: array<vec4<f32>>; // RMSNorm's weight [k]
#endif
#if DOWN
@group(0) @binding(9) var<storage, read> down_a0: array<vec4<f32>>;  // lora_A.weight [down_r, k] of each adapter
#endif
#if DOWN2
@group(0) @binding(10) var<storage, read> down_a1: array<vec4<f32>>;
#endif
#if DOWN3
@group(0) @binding(11) var<storage, read> down_a2: array<vec4<f32>>;
#endif
#if DOWN
@group(0) @binding(12) var<storage, read_write> down_u: array<f32>; // [down_rows]: the adapters' u side by side
#endif

// Vec4 i of the row x multiplies: x itself, or with NORM RMSNorm's (h·rstd)·w, rounded as rmsnorm_fwd.
fn x_in(i: u32, rstd: f32) -> vec4<f32> {
#if NORM
  return (x[i] * rstd) * norm_w[i];
#else
  return x[i];
#endif
}

#if NORM
const NO_ROW: u32 = 0xFFFFFFFFu;
var<workgroup> norm_sh: array<vec2<f32>, TPR * TG>;

#if DOWN
// Vec4 i of row e of the adapters' stacked A (adapter e / down_r).
fn down_a(e: u32, i: u32) -> vec4<f32> {
  let g = e / params.down_r;
  let at = (e % params.down_r) * (params.k / 4u) + i;
#if DOWN3
  if (g == 2u) {
    return down_a2[at];
  }
#endif
#if DOWN2
  if (g == 1u) {
    return down_a1[at];
  }
#endif
  return down_a0[at];
}
#endif

// (Σ h², Σ h·w·A_e) over the row by the workgroup's wg threads; the second is 0 without a row e
// (NO_ROW: the GEMV's workgroups). Call from uniform control flow.
fn norm_sums(lid: u32, wg: u32, e: u32) -> vec2<f32> {
  var s = vec2<f32>(0.0);
  for (var i = lid; i < params.k / 4u; i += wg) {
    let v = x[i];
    s.x += dot(v, v);
#if DOWN
    if (e != NO_ROW) {
      s.y += dot(v, down_a(e, i) * norm_w[i]);
    }
#endif
  }
  norm_sh[lid] = s;
  workgroupBarrier();
  // A tree over the next power of two of wg (TG need not be one).
  for (var h = (1u << (32u - countLeadingZeros(max(wg, 2u) - 1u))) / 2u; h > 0u; h >>= 1u) {
    if (lid < h && lid + h < wg) {
      norm_sh[lid] += norm_sh[lid + h];
    }
    workgroupBarrier();
  }
  return norm_sh[0];
}
#endif

// Σ over the 8 weights of code word cw of x·(c − 8), x pre-scaled: xl for weights 0..3, xh for 4..7.
fn word_dot(cw: u32, xl: vec4<f32>, xh: vec4<f32>) -> f32 {
  let ql = bitcast<vec4<f32>>((vec4<u32>(cw) & NIBBLES) | vec4<u32>(MAGIC)) - OFFSET;
  let qh = bitcast<vec4<f32>>((vec4<u32>(cw >> 16u) & NIBBLES) | vec4<u32>(MAGIC)) - OFFSET;
  return dot(xl, ql) + dot(xh, qh);
}

// xstage[v·KC/32 + g] = x[k0 + 32g + 4v .. + 3] · X_SCALE for the chunk at column k0.
var<workgroup> xstage: array<vec4<f32>, KC / 4u>;

// x of weights 8w..8w+3 and 8w+4..8w+7 of group g0 + gl, pre-scaled: staged or from memory.
fn x_pair(w: u32, gl: u32, g0: u32, gc_max: u32, rstd: f32) -> array<vec4<f32>, 2> {
  if (XDIRECT) {
    let i = (g0 + gl) * 8u + 2u * w;
    return array<vec4<f32>, 2>(x_in(i, rstd) * X_SCALE, x_in(i + 1u, rstd) * X_SCALE);
  }
  return array<vec4<f32>, 2>(xstage[2u * w * gc_max + gl], xstage[(2u * w + 1u) * gc_max + gl]);
}

#if !SUBGROUPS
var<workgroup> partial: array<vec4<f32>, TPR * TG>;
#endif

// ---- one row of x as two int8 limbs (I8X2) ----------------------------------------------------
// The f32 step above spends ~3.5 instructions a weight (unpack, offset, multiply-add), which
// keeps the LM head below the read rate. With I8X2, quantize_x2 (a dispatch before) writes
// x per group of 32 as two int8 limbs, x ≈ s·(hi + lo/254) with s = a/127 (a: the group's largest
// |x|), so |x − x̂| ≤ a/64516: about 1.5e-5 of the group's largest value, 500 times finer than the
// one-limb kernel of 2..8 rows and far below the 4-bit weights' own error. A code word gives its
// even and odd weights as bytes with a mask and a shift, and 16 packed dot products a row of W
// take a group against both limbs: about 1 instruction a weight. Sums stay integers until one
// conversion per group and row (|254·Σ(c − 8)·hi + Σ(c − 8)·lo| < 2^24: exact in f32).
#if I8X2
fn dots_i8x2(c: array<vec4<u32>, 4>, g: u32) -> vec4<f32> {
  let b = 5u * g;
  let h0 = xq_in[b];
  let h1 = xq_in[b + 1u];
  let l0 = xq_in[b + 2u];
  let l1 = xq_in[b + 3u];
  let sb = xq_in[b + 4u];
  var nh = vec4<i32>(bitcast<i32>(sb.y));
  var nl = vec4<i32>(bitcast<i32>(sb.z));
  for (var r = 0u; r < 4u; r++) {
    let e = c[r] & vec4<u32>(LOW_NIBBLES);                  // even weights of the 4 words
    let o = (c[r] >> vec4<u32>(4u)) & vec4<u32>(LOW_NIBBLES); // odd weights
    nh[r] += dot4I8Packed(e.x, h0.x) + dot4I8Packed(o.x, h0.y) + dot4I8Packed(e.y, h0.z) + dot4I8Packed(o.y, h0.w)
           + dot4I8Packed(e.z, h1.x) + dot4I8Packed(o.z, h1.y) + dot4I8Packed(e.w, h1.z) + dot4I8Packed(o.w, h1.w);
    nl[r] += dot4I8Packed(e.x, l0.x) + dot4I8Packed(o.x, l0.y) + dot4I8Packed(e.y, l0.z) + dot4I8Packed(o.y, l0.w)
           + dot4I8Packed(e.z, l1.x) + dot4I8Packed(o.z, l1.y) + dot4I8Packed(e.w, l1.z) + dot4I8Packed(o.w, l1.w);
  }
  return bitcast<f32>(sb.x) * vec4<f32>(254i * nh + nl);
}
#endif

@compute @workgroup_size(TPR * TG)
fn gemv(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
  @builtin(local_invocation_index) lid: u32,
) {
  let wg = TPR * TG;
  let tg = lid / TPR;
  let lane = lid % TPR;
  let groups = params.k / 32u;
  let chunk = select(KC, params.k, XDIRECT);
  let gc_max = chunk / 32u;
  let rb = row_blocks(wid, nwg);
  var staged = NOT_STAGED;
#if LORA
  lora_gather(lid, wg, 0u, 1u, LoraTerm(params.lora_r, params.lora_np, params.lora_s));
#endif
#if NORM
  // rb.x past the row blocks (rb.z): a workgroup of the adapters' down products, row rb.x - rb.z of
  // their stacked A (or past those too: a 2-D grid's padding, which writes nothing).
  if (rb.x >= rb.z) {
    let e = rb.x - rb.z;
    let sums = norm_sums(lid, wg, select(NO_ROW, e, e < params.down_rows));
#if DOWN
    if (lid == 0u && e < params.down_rows) {
      down_u[e] = sums.y * inverseSqrt(sums.x / f32(params.k) + params.eps);
    }
#endif
    return;
  }
  // The GEMV's workgroups take rstd once, after their first weights are requested (below).
  var rstd = 0.0;
  var normed = false;
#else
  let rstd = 1.0;
#endif
  for (var blk = rb.x; blk < rb.z; blk += rb.y) {
    let row0 = (blk * TG + tg) * 4u;
    let rr = block_rows(row0, groups);
    // Component r: row row0 + r of W. Explicitly zeroed per block: lavapipe kept values across
    // iterations with the implicit zeroing.
    var acc = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < params.k; k0 += chunk) {
      let gc = min(gc_max, groups - k0 / 32u);
      let g0 = k0 / 32u;
      var gl = lane;
      // The first step's weights are requested before x is staged, so that their DRAM latency
      // overlaps the staging and its barriers instead of following them.
      // Lanes past the chunk's last group load it again (a cached read) and skip the arithmetic.
      var cur = step_at(rr, g0 + min(gl, gc - 1u));
#if NORM
      if (!normed) {
        rstd = inverseSqrt(norm_sums(lid, wg, NO_ROW).x / f32(params.k) + params.eps);
        normed = true;
      }
#endif
      if (!XDIRECT && k0 != staged) {
        workgroupBarrier(); // the previous chunk's reads are done
        for (var i = lid; i < gc * 8u; i += wg) {
          xstage[(i % 8u) * gc_max + i / 8u] = x_in(k0 / 4u + i, rstd) * X_SCALE;
        }
        workgroupBarrier();
        staged = k0;
      }
      for (; gl < gc; gl += TPR) {
        let next = step_at(rr, g0 + min(gl + TPR, gc - 1u));
#if I8X2
        acc += cur.d * dots_i8x2(cur.c, g0 + gl);
#else
        var dots = vec4<f32>(0.0);
        for (var w = 0u; w < 4u; w++) {
          let xv = x_pair(w, gl, g0, gc_max, rstd);
          let xl = xv[0];
          let xh = xv[1];
          dots += vec4<f32>(word_dot(cur.c[0][w], xl, xh), word_dot(cur.c[1][w], xl, xh), word_dot(cur.c[2][w], xl, xh), word_dot(cur.c[3][w], xl, xh));
        }
        acc += cur.d * dots;
#endif
        cur = next;
      }
    }
    // Sum the TPR lanes' partial sums; lane r (mod TPR) writes row row0 + r of W.
#if SUBGROUPS
    // Butterfly within the thread group: the host takes this path only when every subgroup holds
    // whole thread groups (TPR divides the smallest subgroup size).
    for (var o = TPR / 2u; o > 0u; o >>= 1u) {
      acc += subgroupShuffleXor(acc, o);
    }
    for (var r = lane; r < 4u; r += TPR) {
      let n = row0 + r;
      if (n < params.n) {
        var v = acc[r] + lora_out(0u, n, params.lora_r);
        if (params.accumulate != 0u) {
          v += y[n];
        }
        y[n] = v;
      }
    }
#else
    partial[lid] = acc;
    workgroupBarrier();
    // Halve down to 8 lanes a block (a tree: TPR may be 128), then 4 lanes sum 8 each.
    for (var h = TPR / 2u; h >= 8u; h >>= 1u) {
      if (lane < h) {
        partial[lid] += partial[lid + h];
      }
      workgroupBarrier();
    }
    for (var r = lane; r < 4u; r += TPR) {
      if (row0 + r < params.n) {
        var v = lora_out(0u, row0 + r, params.lora_r);
        for (var p = 0u; p < min(TPR, 8u); p++) {
          v += partial[tg * TPR + p][r];
        }
        if (params.accumulate != 0u) {
          v += y[row0 + r];
        }
        y[row0 + r] = v;
      }
    }
    workgroupBarrier();
#endif
  }
}
