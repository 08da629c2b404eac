// Products with 4-bit weights, dequantized on the fly: GEMV for decode (1 to 8 rows), tiled GEMM
// for prefill and training, dX = dY·W for backward through the frozen base, and row gather for a
// 4-bit embedding table. shaders/quantize_q4.wgsl writes the format; src/ops/matmulQ4.ts binds it.
//
// The Q4 format of a weight W [N, K] (nn.Linear [out, in]; K a multiple of 32, N anything):
//   groups:  32 consecutive weights along K share one scale; G = K / 32 groups per row, and group
//            (n, g) has the flat index s = n*G + g.
//   codes:   u32 [N, K/8]. Weight (n, k) is the 4-bit code c in bits 4*(k%8) .. 4*(k%8)+3 of word
//            n*K/8 + k/8, so the four words of group s are the vec4<u32> number s.
//   scales:  u32 [ceil(N*G/2)]. Scale d of group s is the f16 in half (s & 1) of word s >> 1 (the
//            low half first, as pack2x16float writes it).
//   value:   w = d * (c - 8).
// The scale is symmetric absmax with the sign kept: d = m / -8, where m is the group's weight of
// largest magnitude, so m itself is code 0 (exactly -8·d) and the other weights use codes 0..15.
// On Gaussian weights its relative RMS error is 0.085, below a scale+offset form at the same
// 4.5 bits per weight (offset and scale f16, groups of 64: 0.089).

struct Params {
  m: u32,          // rows of x / dY, or tokens to gather
  n: u32,          // rows of W (out features)
  k: u32,          // columns of W (in features), a multiple of 32
  accumulate: u32, // 1: add into the output instead of overwriting it
  split1: u32,     // gemv_rows: the output columns [0, split1), [split1, split2), [split2, n) are
  split2: u32,     // parts stored one after another, each [m, width] (n, n: one [m, n] output)
  lora_r: u32,     // LORA: the adapter's rank,
  lora_np: u32,    // partials of u per row of x,
  lora_s: f32,     // and its scale alpha / r
  k_chunk: u32,    // gemm: K per chunk of a split along K (k: unsplit); split_sum: the same
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> codes: array<u32>;
@group(0) @binding(2) var<storage, read> codes4: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;
@group(0) @binding(6) var<storage, read> dy: array<f32>;
@group(0) @binding(7) var<storage, read_write> dx: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read> ids: array<u32>;
@group(0) @binding(9) var<storage, read_write> rows: array<vec4<f32>>;
@group(0) @binding(10) var<storage, read> lora_parts: array<f32>; // LORA: [m, lora_np, lora_r]
@group(0) @binding(11) var<storage, read> lora_b: array<f32>;     // LORA: lora_B.weight [n, lora_r]
@group(0) @binding(12) var<storage, read> xq_in: array<vec4<u32>>;        // PREQ: quantize_x's output
@group(0) @binding(13) var<storage, read_write> xq_out: array<vec4<u32>>; // quantize_x: [m, k / 32, 3]
@group(0) @binding(14) var<storage, read> parts: array<f32>; // split_sum: gemm's partials [S, m, n]

fn scale_of(s: u32) -> f32 {
  return unpack2x16float(scales[s >> 1u])[s & 1u];
}

// The eight codes of one word as signed values (c - 8): weights k%8 = 0..3, then 4..7.
fn lo4(w: u32) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(15u)) - 8.0;
}
fn hi4(w: u32) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(w) >> vec4<u32>(16u, 20u, 24u, 28u)) & vec4<u32>(15u)) - 8.0;
}

// ---------------------------------------------------------------------------------------------
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
// ---------------------------------------------------------------------------------------------
#if SUBGROUPS
// requires: subgroups
#endif

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
// (while its first weights are in flight) and adds s·u·Bᵀ to each output it stores, so the update
// takes no dispatch of its own (decode at one sequence is bound by recording dispatches).
#if LORA
const LORA_MAX: u32 = 512u; // rows of x · rank: 8 · 64 at most (the host checks)
var<workgroup> lora_u: array<f32, LORA_MAX>;       // [m, r]: s·u
var<workgroup> lora_fold: array<f32, 2u * LORA_MAX>; // the threads' slices of the partial sums

// lora_u = s·Σ partials for `rows` rows of x, by all wg threads (slices of the partials when
// rows·r is below wg, then a fold).
fn lora_gather(lid: u32, wg: u32, rows: u32) {
  let r = params.lora_r;
  let np = params.lora_np;
  let items = rows * r;
  let slices = clamp(wg / items, 1u, 2u * LORA_MAX / items);
  for (var i = lid; i < items * slices; i += wg) {
    let it = i % items;
    let row = (it / r) * np * r + it % r;
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
    lora_u[it] = params.lora_s * t;
  }
  workgroupBarrier();
}
#endif

// s·u[m]·B[n] (0 without LORA).
fn lora_out(m: u32, n: u32) -> f32 {
#if LORA
  let r = params.lora_r;
  var d = 0.0;
  for (var j = 0u; j < r; j++) {
    d += lora_u[m * r + j] * lora_b[n * r + j];
  }
  return d;
#else
  return 0.0;
#endif
}

// ---- one row of x ----------------------------------------------------------------------------

// Σ over the 8 weights of code word cw of x·(c − 8), x pre-scaled: xl for weights 0..3, xh for 4..7.
fn word_dot(cw: u32, xl: vec4<f32>, xh: vec4<f32>) -> f32 {
  let ql = bitcast<vec4<f32>>((vec4<u32>(cw) & NIBBLES) | vec4<u32>(MAGIC)) - OFFSET;
  let qh = bitcast<vec4<f32>>((vec4<u32>(cw >> 16u) & NIBBLES) | vec4<u32>(MAGIC)) - OFFSET;
  return dot(xl, ql) + dot(xh, qh);
}

// xstage[v·KC/32 + g] = x[k0 + 32g + 4v .. + 3] · X_SCALE for the chunk at column k0.
var<workgroup> xstage: array<vec4<f32>, KC / 4u>;

// x of weights 8w..8w+3 and 8w+4..8w+7 of group g0 + gl, pre-scaled: staged or from memory.
fn x_pair(w: u32, gl: u32, g0: u32, gc_max: u32) -> array<vec4<f32>, 2> {
  if (XDIRECT) {
    let i = (g0 + gl) * 8u + 2u * w;
    return array<vec4<f32>, 2>(x[i] * X_SCALE, x[i + 1u] * X_SCALE);
  }
  return array<vec4<f32>, 2>(xstage[2u * w * gc_max + gl], xstage[(2u * w + 1u) * gc_max + gl]);
}

#if !SUBGROUPS
var<workgroup> partial: array<vec4<f32>, TPR * TG>;
#endif

// ---- one row of x as two int8 limbs (I8X2) ----------------------------------------------------
// The f32 step above spends ~3.5 instructions a weight (unpack, offset, multiply-add), which on the
// H100 held the LM head at 72% of the read rate. With I8X2, quantize_x2 (a dispatch before) writes
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
  lora_gather(lid, wg, 1u);
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
      if (!XDIRECT && k0 != staged) {
        workgroupBarrier(); // the previous chunk's reads are done
        for (var i = lid; i < gc * 8u; i += wg) {
          xstage[(i % 8u) * gc_max + i / 8u] = x[k0 / 4u + i] * X_SCALE;
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
          let xv = x_pair(w, gl, g0, gc_max);
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
        var v = acc[r] + lora_out(0u, n);
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
        var v = lora_out(0u, row0 + r);
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

// ---- 2 to 8 rows of x ------------------------------------------------------------------------
// What grows with M is the per-row work, so each code word is unpacked and scaled once, as q[j] =
// weight j of the word in the 4 rows of W, and a row of x adds x_j·q[j] with one vec4 fma per
// weight: one multiply-add per weight and row of x, and nothing else per row. Staged x is
// pre-scaled by 16^-p; x read from memory is not, and 16^-p goes into the scales instead. The
// lanes' partial sums meet once, in workgroup memory (the staging buffer, reused): every lane
// writes its M vec4s, one barrier, then one thread per (row block, row of x) adds its TPR lanes'
// (a tree of barriers per row of x cost more than the products on small weights).
// Per code word a thread holds a 4 (rows of W) x M (rows of x) x 8 (k) tile: 32 unpack instructions
// (and, or, subtract, scale on 8 vec4s), 8·M vec4 fmas (32·M scalar) and 2·M vec4 loads of x, so
// 16 fmas per vec4 load (4 per x value); the TPR·TG lanes of a workgroup read x at TPR addresses
// (row blocks share them). At M = 8 that is 8 fmas + 4 unpack instructions a weight: on the H100
// the LM head's 311M weights take ~126 µs of f32 issue at the full rate, the kernel ~232.

override M: u32 = 2u;  // rows of x, 2..8 (a pipeline per value, so the tests on M fold away)
override XS: u32 = 1u; // vec4s of rows_mem, from the host: max(M·KC/4 staged x, TPR·TG·M partial sums)
                       // (gemv_rows_i8: max(3·M·XQ, TPR·TG·M))

// Staged x: rows_mem[m·KC/4 + v·KC/32 + g] = x[m, k0 + 32g + 4v .. + 3] · X_SCALE. Partial sums:
// lane l's sum for output o = tg·M + m (row block tg, row m of x) at rows_mem[partial_at(o, l)].
// Floats are kept as their bits (exact both ways), so that gemv_rows_i8 stages its packed integers
// in the same memory.
var<workgroup> rows_mem: array<vec4<u32>, XS>;

// The lanes of an output are consecutive, XOR-swizzled by the output: the TPR lanes writing one
// output and the threads reading one lane of consecutive outputs both hit distinct bank quads.
fn partial_at(o: u32, l: u32) -> u32 {
  return o * TPR + (l ^ (o & (TPR - 1u)));
}

// Weights j = 0..7 of the code words cw (component r: row r of the block) times ds[j % 4].
fn unpack_rows(cw: vec4<u32>, ds: array<vec4<f32>, 4>) -> array<vec4<f32>, 8> {
  let m = vec4<u32>(MAGIC);
  let hi = cw >> vec4<u32>(16u);
  return array<vec4<f32>, 8>(
    (bitcast<vec4<f32>>((cw & vec4<u32>(NIBBLES.x)) | m) - vec4<f32>(OFFSET.x)) * ds[0],
    (bitcast<vec4<f32>>((cw & vec4<u32>(NIBBLES.y)) | m) - vec4<f32>(OFFSET.y)) * ds[1],
    (bitcast<vec4<f32>>((cw & vec4<u32>(NIBBLES.z)) | m) - vec4<f32>(OFFSET.z)) * ds[2],
    (bitcast<vec4<f32>>((cw & vec4<u32>(NIBBLES.w)) | m) - vec4<f32>(OFFSET.w)) * ds[3],
    (bitcast<vec4<f32>>((hi & vec4<u32>(NIBBLES.x)) | m) - vec4<f32>(OFFSET.x)) * ds[0],
    (bitcast<vec4<f32>>((hi & vec4<u32>(NIBBLES.y)) | m) - vec4<f32>(OFFSET.y)) * ds[1],
    (bitcast<vec4<f32>>((hi & vec4<u32>(NIBBLES.z)) | m) - vec4<f32>(OFFSET.z)) * ds[2],
    (bitcast<vec4<f32>>((hi & vec4<u32>(NIBBLES.w)) | m) - vec4<f32>(OFFSET.w)) * ds[3],
  );
}

// a + Σ_j x_j·q[j] over the 8 weights of a word: x_0..3 in xv[0], x_4..7 in xv[1].
fn fma_word(a: vec4<f32>, xv: array<vec4<f32>, 2>, q: array<vec4<f32>, 8>) -> vec4<f32> {
  var s = fma(vec4<f32>(xv[0].x), q[0], a);
  s = fma(vec4<f32>(xv[0].y), q[1], s);
  s = fma(vec4<f32>(xv[0].z), q[2], s);
  s = fma(vec4<f32>(xv[0].w), q[3], s);
  s = fma(vec4<f32>(xv[1].x), q[4], s);
  s = fma(vec4<f32>(xv[1].y), q[5], s);
  s = fma(vec4<f32>(xv[1].z), q[6], s);
  return fma(vec4<f32>(xv[1].w), q[7], s);
}

// Row m of x at weights 8w..8w+7 of group g0 + gl: staged (pre-scaled) or from memory (not).
fn x_rows(m: u32, w: u32, gl: u32, g0: u32) -> array<vec4<f32>, 2> {
  if (XDIRECT) {
    let i = m * (params.k / 4u) + (g0 + gl) * 8u + 2u * w;
    return array<vec4<f32>, 2>(x[i], x[i + 1u]);
  }
  let i = m * (KC / 4u) + 2u * w * (KC / 32u) + gl;
  return array<vec4<f32>, 2>(bitcast<vec4<f32>>(rows_mem[i]), bitcast<vec4<f32>>(rows_mem[i + KC / 32u]));
}

override UNROLLED: bool = false; // the 4 words of a step as 4 calls with constant word indices

// Word w (a constant after inlining) of a step: its weights in the 4 rows of W unpacked once and
// multiplied into each row of x's accumulator.
fn word_rows(acc: array<vec4<f32>, 8>, cw: vec4<u32>, ds: array<vec4<f32>, 4>, w: u32, gl: u32, g0: u32) -> array<vec4<f32>, 8> {
  let q = unpack_rows(cw, ds);
  var a = acc;
  a[0] = fma_word(a[0], x_rows(0u, w, gl, g0), q);
  a[1] = fma_word(a[1], x_rows(1u, w, gl, g0), q);
  if (M > 2u) { a[2] = fma_word(a[2], x_rows(2u, w, gl, g0), q); }
  if (M > 3u) { a[3] = fma_word(a[3], x_rows(3u, w, gl, g0), q); }
  if (M > 4u) { a[4] = fma_word(a[4], x_rows(4u, w, gl, g0), q); }
  if (M > 5u) { a[5] = fma_word(a[5], x_rows(5u, w, gl, g0), q); }
  if (M > 6u) { a[6] = fma_word(a[6], x_rows(6u, w, gl, g0), q); }
  if (M > 7u) { a[7] = fma_word(a[7], x_rows(7u, w, gl, g0), q); }
  return a;
}

// Stages the gc groups of x's M rows at column k0, four loads in flight per thread before the
// stores (one load per round trip made staging a row of L2 latencies).
fn stage_rows(lid: u32, k0: u32, gc: u32) {
  let wg = TPR * TG;
  let per = KC / 4u;
  for (var i0 = lid; i0 < M * per; i0 += 4u * wg) {
    var v: array<vec4<f32>, 4>;
    for (var b = 0u; b < 4u; b++) {
      let i = i0 + b * wg;
      if (i < M * per && i % per < gc * 8u) {
        v[b] = x[(i / per) * (params.k / 4u) + k0 / 4u + i % per];
      }
    }
    for (var b = 0u; b < 4u; b++) {
      let i = i0 + b * wg;
      let c = i % per;
      if (i < M * per && c < gc * 8u) {
        rows_mem[(i / per) * per + (c % 8u) * (KC / 32u) + c / 8u] = bitcast<vec4<u32>>(v[b] * X_SCALE);
      }
    }
  }
}

// Where output (m, n) of gemv_rows lives: in its part (params.split1/2), row-major [rows, width].
// A joined weight (q/k/v, gate/up) thus writes each projection's rows apart, as separate GEMVs would.
fn out_at(m: u32, n: u32) -> u32 {
  if (n < params.split1) {
    return m * params.split1 + n;
  }
  if (n < params.split2) {
    return params.m * params.split1 + m * (params.split2 - params.split1) + (n - params.split1);
  }
  return params.m * params.split2 + m * (params.n - params.split2) + (n - params.split2);
}

@compute @workgroup_size(TPR * TG)
fn gemv_rows(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
  @builtin(local_invocation_index) lid: u32,
) {
  let tg = lid / TPR;
  let lane = lid % TPR;
  let groups = params.k / 32u;
  let chunk = select(KC, params.k, XDIRECT);
  let gc_max = chunk / 32u;
  let rb = row_blocks(wid, nwg);
#if LORA
  lora_gather(lid, TPR * TG, M);
#endif
  for (var blk = rb.x; blk < rb.z; blk += rb.y) {
    let row0 = (blk * TG + tg) * 4u;
    let rr = block_rows(row0, groups);
    // a0..a7: row m of x (component r: row row0 + r of W), one named accumulator per row behind a
    // constant test on M (an array indexed in a loop may live in local memory).
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    var a4 = vec4<f32>(0.0);
    var a5 = vec4<f32>(0.0);
    var a6 = vec4<f32>(0.0);
    var a7 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < params.k; k0 += chunk) {
      let gc = min(gc_max, groups - k0 / 32u);
      let g0 = k0 / 32u;
      var gl = lane;
      var cur = step_at(rr, g0 + min(gl, gc - 1u));
      if (!XDIRECT) {
        workgroupBarrier(); // the previous chunk's reads (or block's partial sums) are done
        stage_rows(lid, k0, gc);
        workgroupBarrier();
      }
      for (; gl < gc; gl += TPR) {
        let next = step_at(rr, g0 + min(gl + TPR, gc - 1u));
        let d = cur.d;
        let c0 = cur.c[0];
        let c1 = cur.c[1];
        let c2 = cur.c[2];
        let c3 = cur.c[3];
        var ds = array<vec4<f32>, 4>(d, d, d, d);
        if (XDIRECT) {
          ds = array<vec4<f32>, 4>(d * X_SCALE.x, d * X_SCALE.y, d * X_SCALE.z, d * X_SCALE.w);
        }
        if (UNROLLED) {
          var a = array<vec4<f32>, 8>(a0, a1, a2, a3, a4, a5, a6, a7);
          a = word_rows(a, vec4<u32>(c0.x, c1.x, c2.x, c3.x), ds, 0u, gl, g0);
          a = word_rows(a, vec4<u32>(c0.y, c1.y, c2.y, c3.y), ds, 1u, gl, g0);
          a = word_rows(a, vec4<u32>(c0.z, c1.z, c2.z, c3.z), ds, 2u, gl, g0);
          a = word_rows(a, vec4<u32>(c0.w, c1.w, c2.w, c3.w), ds, 3u, gl, g0);
          a0 = a[0]; a1 = a[1]; a2 = a[2]; a3 = a[3]; a4 = a[4]; a5 = a[5]; a6 = a[6]; a7 = a[7];
        } else {
        for (var w = 0u; w < 4u; w++) {
          let q = unpack_rows(vec4<u32>(c0[w], c1[w], c2[w], c3[w]), ds);
          a0 = fma_word(a0, x_rows(0u, w, gl, g0), q);
          a1 = fma_word(a1, x_rows(1u, w, gl, g0), q);
          if (M > 2u) { a2 = fma_word(a2, x_rows(2u, w, gl, g0), q); }
          if (M > 3u) { a3 = fma_word(a3, x_rows(3u, w, gl, g0), q); }
          if (M > 4u) { a4 = fma_word(a4, x_rows(4u, w, gl, g0), q); }
          if (M > 5u) { a5 = fma_word(a5, x_rows(5u, w, gl, g0), q); }
          if (M > 6u) { a6 = fma_word(a6, x_rows(6u, w, gl, g0), q); }
          if (M > 7u) { a7 = fma_word(a7, x_rows(7u, w, gl, g0), q); }
        }
        }
        cur = next;
      }
    }
    store_rows(blk, tg, lane, lid, array<vec4<f32>, 8>(a0, a1, a2, a3, a4, a5, a6, a7));
  }
}

// The end of a row block in gemv_rows and gemv_rows_i8: the lanes' sums a[m] (row m of x,
// component r: row r of the thread group's 4 rows of W) meet in rows_mem and are stored to y.
fn store_rows(blk: u32, tg: u32, lane: u32, lid: u32, a: array<vec4<f32>, 8>) {
  workgroupBarrier(); // staged x is read (the partial sums may overwrite it), or the last block's sums are
  let o = tg * M;
  rows_mem[partial_at(o, lane)] = bitcast<vec4<u32>>(a[0]);
  rows_mem[partial_at(o + 1u, lane)] = bitcast<vec4<u32>>(a[1]);
  if (M > 2u) { rows_mem[partial_at(o + 2u, lane)] = bitcast<vec4<u32>>(a[2]); }
  if (M > 3u) { rows_mem[partial_at(o + 3u, lane)] = bitcast<vec4<u32>>(a[3]); }
  if (M > 4u) { rows_mem[partial_at(o + 4u, lane)] = bitcast<vec4<u32>>(a[4]); }
  if (M > 5u) { rows_mem[partial_at(o + 5u, lane)] = bitcast<vec4<u32>>(a[5]); }
  if (M > 6u) { rows_mem[partial_at(o + 6u, lane)] = bitcast<vec4<u32>>(a[6]); }
  if (M > 7u) { rows_mem[partial_at(o + 7u, lane)] = bitcast<vec4<u32>>(a[7]); }
  workgroupBarrier();
  for (var j = lid; j < TG * M; j += TPR * TG) {
    var sum = vec4<f32>(0.0);
    for (var l = 0u; l < TPR; l++) {
      sum += bitcast<vec4<f32>>(rows_mem[partial_at(j, l)]);
    }
    let m = j % M;
    let n0 = (blk * TG + j / M) * 4u;
    for (var r = 0u; r < 4u; r++) {
      let n = n0 + r;
      if (n < params.n) {
        var v = sum[r] + lora_out(m, n);
        let o = out_at(m, n);
        if (params.accumulate != 0u) {
          v += y[o];
        }
        y[o] = v;
      }
    }
  }
}

// ---- 2 to 8 rows of x, as int8 -----------------------------------------------------------------
// gemv_rows spends 8 f32 FMAs and 4 unpack instructions per weight at M = 8, which bounds it by
// instruction issue, not bytes. Here x is quantized while it is staged, per row and group of 32
// (the weights' groups): q = round(x·127/a) with a the group's largest |x|, x ≈ s·q with s = a/127
// (|error| ≤ s/2, about 0.5% of a group's RMS on Gaussian x; the 4-bit weights err by 8.5%). A code
// word then yields two words of 4 bytes with a mask and a shift (weights 0,2,4,6 and 1,3,5,7), and
// one packed dot product (dot4I8Packed: 4 multiply-adds, a single instruction where the GPU has
// them) takes 4 weights against 4 values of x, with x staged in the same even/odd byte order.
// Per group, row of W and row of x: 8 dot products into an integer that starts at
// BIAS − 8·Σq (the −8 of the codes, from the group's sum of q; BIAS puts the sum in the mantissa
// of a float, so that converting it is one subtraction: |Σ(c − 8)·q| ≤ 32·15·127 < 2^22), then one
// multiply-add by d·s into the f32 sum. With PREQ, quantize_x (a dispatch before) quantizes x once
// for the whole call and every workgroup reads it from memory: each workgroup quantizing all of x
// cost the large weights more than the extra dispatch (K = 6144: 8 x 192 groups a workgroup).

const I8_BIAS_F = 12582912.0; // 1.5·2^23
const LOW_NIBBLES = 0x0F0F0F0Fu;

override XQ: u32 = 1u; // groups of x staged per chunk and row: KC / 32 (from the host)

// Row m of x, group g of the chunk, in rows_mem: [(3m + h)·XQ + g] for h = 0, 1 its packed q in
// the byte order of code words 2h and 2h + 1 (even weights, odd weights, even, odd); h = 2 its
// scale s and the integer's start BIAS − 8·Σq (as bits).

// Quantizes the gc groups of x's M rows at column k0: one thread per (row, group) of 32 values,
// two groups a round with all 16 loads in flight (a round per group made staging a chain of L2
// latencies: K = 6144 stages 8 x 192 groups per workgroup).
fn stage_rows_i8(lid: u32, k0: u32, gc: u32) {
  let wg = TPR * TG;
  let items = M * gc;
  for (var i = lid; i < items; i += 2u * wg) {
    let i2 = min(i + wg, items - 1u); // past the last: a cached reload, not stored
    let at1 = (i / gc) * (params.k / 4u) + k0 / 4u + 8u * (i % gc);
    let at2 = (i2 / gc) * (params.k / 4u) + k0 / 4u + 8u * (i2 % gc);
    var v1: array<vec4<f32>, 8>;
    var v2: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
      v1[j] = x[at1 + j];
      v2[j] = x[at2 + j];
    }
    store_group(quantize_group(v1), i / gc, i % gc);
    if (i + wg < items) {
      store_group(quantize_group(v2), i2 / gc, i2 % gc);
    }
  }
}

fn store_group(q: array<vec4<u32>, 3>, m: u32, g: u32) {
  rows_mem[3u * m * XQ + g] = q[0];
  rows_mem[(3u * m + 1u) * XQ + g] = q[1];
  rows_mem[(3u * m + 2u) * XQ + g] = q[2];
}

// x quantized once for every workgroup of the GEMV after it (PREQ): one thread per (row, group),
// xq_out[(m·k/32 + g)·3 + h] as staged (h = 0, 1 packed q; 2 scale and start).
@compute @workgroup_size(64)
fn quantize_x(@builtin(global_invocation_id) gid: vec3u) {
  let i = gid.x;
  if (i >= params.m * (params.k / 32u)) {
    return;
  }
  let q = quantize_group(x_group(i));
  xq_out[3u * i] = q[0];
  xq_out[3u * i + 1u] = q[1];
  xq_out[3u * i + 2u] = q[2];
}

// Group i (row-major (row, group) index) of x's 32 values.
fn x_group(i: u32) -> array<vec4<f32>, 8> {
  var v: array<vec4<f32>, 8>;
  for (var j = 0u; j < 8u; j++) {
    v[j] = x[8u * i + j];
  }
  return v;
}

#include int8_groups

// One row of x as two limbs for gemv's I8X2 (x ≈ s·(hi + lo/254), s = a/127), one thread per
// group: xq_out[5g ..] = hi (2 vec4s), lo (2), then (s/254, −8·Σhi, −8·Σlo) as bits (the −8 of
// the codes, as in quantize_group). |t − hi| ≤ 1/2 for t = x/s, so lo = round(254·(t − hi)) fits
// in [−127, 127].
@compute @workgroup_size(64)
fn quantize_x2(@builtin(global_invocation_id) gid: vec3u) {
  let i = gid.x;
  if (i >= params.m * (params.k / 32u)) {
    return;
  }
  let v = x_group(i);
  let a = group_absmax(v);
  let inv = select(127.0 / a, 0.0, a == 0.0);
  var qh: array<vec4<i32>, 8>;
  var ql: array<vec4<i32>, 8>;
  for (var j = 0u; j < 8u; j++) {
    let t = v[j] * inv;
    let h = round(t);
    qh[j] = vec4<i32>(h);
    ql[j] = vec4<i32>(round(254.0 * (t - h)));
  }
  let hi = pack_limb(qh);
  let lo = pack_limb(ql);
  xq_out[5u * i] = hi.p[0];
  xq_out[5u * i + 1u] = hi.p[1];
  xq_out[5u * i + 2u] = lo.p[0];
  xq_out[5u * i + 3u] = lo.p[1];
  xq_out[5u * i + 4u] = vec4<u32>(bitcast<u32>(a / (127.0 * 254.0)), bitcast<u32>(-8i * hi.sum), bitcast<u32>(-8i * lo.sum), 0u);
}

// PREQ (a define: xq_in is bound only then): x quantized by quantize_x and read from memory, no
// staging and no barriers.
#if PREQ
const PREQ = true;
#else
const PREQ = false;
#endif

// Vec4 h of row m's group g0 + gl: staged, or (PREQ) quantize_x's.
fn xq_at(m: u32, gl: u32, g0: u32, h: u32) -> vec4<u32> {
#if PREQ
  return xq_in[(m * (params.k / 32u) + g0 + gl) * 3u + h];
#else
  return rows_mem[(3u * m + h) * XQ + gl];
#endif
}

// a + d·s·Σ_group (c − 8)·q for row m of x against the 4 rows of W of a step (lo, hi: their code
// words' even and odd weights as bytes, component r: row r; d: their scales).
fn rows_i8(a: vec4<f32>, m: u32, gl: u32, g0: u32, lo: array<vec4<u32>, 4>, hi: array<vec4<u32>, 4>, d: vec4<f32>) -> vec4<f32> {
  let xa = xq_at(m, gl, g0, 0u);
  let xb = xq_at(m, gl, g0, 1u);
  let sb = xq_at(m, gl, g0, 2u);
  var n = vec4<i32>(bitcast<i32>(sb.y));
  for (var r = 0u; r < 4u; r++) {
    n[r] += dot4I8Packed(lo[r].x, xa.x) + dot4I8Packed(hi[r].x, xa.y) + dot4I8Packed(lo[r].y, xa.z) + dot4I8Packed(hi[r].y, xa.w)
          + dot4I8Packed(lo[r].z, xb.x) + dot4I8Packed(hi[r].z, xb.y) + dot4I8Packed(lo[r].w, xb.z) + dot4I8Packed(hi[r].w, xb.w);
  }
  return fma(d * bitcast<f32>(sb.x), bitcast<vec4<f32>>(n) - I8_BIAS_F, a);
}

@compute @workgroup_size(TPR * TG)
fn gemv_rows_i8(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
  @builtin(local_invocation_index) lid: u32,
) {
  let tg = lid / TPR;
  let lane = lid % TPR;
  let groups = params.k / 32u;
  let rb = row_blocks(wid, nwg);
#if LORA
  lora_gather(lid, TPR * TG, M);
#endif
  for (var blk = rb.x; blk < rb.z; blk += rb.y) {
    let row0 = (blk * TG + tg) * 4u;
    let rr = block_rows(row0, groups);
    var a = array<vec4<f32>, 8>();
    let chunk = select(XQ, groups, PREQ);
    for (var k0 = 0u; k0 < params.k; k0 += 32u * chunk) {
      let gc = min(chunk, groups - k0 / 32u);
      let g0 = k0 / 32u;
      var gl = lane;
      var cur = step_at(rr, g0 + min(gl, gc - 1u));
      if (!PREQ) {
        workgroupBarrier(); // the previous chunk's reads (or block's partial sums) are done
        stage_rows_i8(lid, k0, gc);
        workgroupBarrier();
      }
      for (; gl < gc; gl += TPR) {
        let next = step_at(rr, g0 + min(gl + TPR, gc - 1u));
        var lo: array<vec4<u32>, 4>;
        var hi: array<vec4<u32>, 4>;
        for (var r = 0u; r < 4u; r++) {
          lo[r] = cur.c[r] & vec4<u32>(LOW_NIBBLES);
          hi[r] = (cur.c[r] >> vec4<u32>(4u)) & vec4<u32>(LOW_NIBBLES);
        }
        a[0] = rows_i8(a[0], 0u, gl, g0, lo, hi, cur.d);
        a[1] = rows_i8(a[1], 1u, gl, g0, lo, hi, cur.d);
        if (M > 2u) { a[2] = rows_i8(a[2], 2u, gl, g0, lo, hi, cur.d); }
        if (M > 3u) { a[3] = rows_i8(a[3], 3u, gl, g0, lo, hi, cur.d); }
        if (M > 4u) { a[4] = rows_i8(a[4], 4u, gl, g0, lo, hi, cur.d); }
        if (M > 5u) { a[5] = rows_i8(a[5], 5u, gl, g0, lo, hi, cur.d); }
        if (M > 6u) { a[6] = rows_i8(a[6], 6u, gl, g0, lo, hi, cur.d); }
        if (M > 7u) { a[7] = rows_i8(a[7], 7u, gl, g0, lo, hi, cur.d); }
        cur = next;
      }
    }
    store_rows(blk, tg, lane, lid, a);
  }
}

// ---------------------------------------------------------------------------------------------
// GEMM: y[m, n] (+)= Σ_k x[m, k] W[n, k] for any M. A workgroup of 16x16 threads computes a
// (16·GTM)x(16·GTN) tile of y, GTM rows by GTN columns per thread, stepping K by GBK (32: one
// group, or 16: half of one, to halve workgroup memory for large tiles). Each step stages the x
// tile and the dequantized W tile in workgroup memory, k-major, so that per k a thread reads
// GTM/4 + GTN/4 vec4s and does GTM·GTN multiply-adds. (Loading the next step into registers
// before the current step's arithmetic, as dinput does, made it 6% slower on the H100.)
// y may be a joined weight's parts stored apart (split1, split2: out_at, as gemv_rows stores them).
// Split along K (a y of few tiles over a long K, where the tiles alone leave SMs idle): grid z is
// the chunk, K [z·k_chunk, (z+1)·k_chunk), and chunk z writes its own partial [m, n] at z·m·n of
// y (accumulate 0); split_sum then adds the partials in chunk order (deterministic, no atomics)
// into y, parts apart.
// ---------------------------------------------------------------------------------------------
const MAX_GT = 8u;
override GTM: u32 = 4u;  // rows of y per thread: 4 or 8
override GTN: u32 = 4u;  // columns of y per thread: 4 or 8
override GBK: u32 = 32u; // K per step: 32 or 16
var<workgroup> xs: array<vec4<f32>, GBK * 4u * GTM>; // xs[k * 4GTM + i][j] = x[m0 + 4i + j, k0 + k]
var<workgroup> ws: array<vec4<f32>, GBK * 4u * GTN>; // ws[k * 4GTN + i][j] = W[n0 + 4i + j, k0 + k]

@compute @workgroup_size(256)
fn gemm(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let tx = lid % 16u; // columns n0 + GTN·tx ..
  let ty = lid / 16u; // rows m0 + GTM·ty ..
  let xv = 4u * GTM;  // vec4s across the x tile (16·GTM rows)
  let wv = 4u * GTN;  // vec4s across the W tile (16·GTN rows)
  let m0 = wid.y * 16u * GTM;
  let n0 = wid.x * 16u * GTN;
  let groups = params.k / 32u;
  let xrow = params.k / 4u;
  let kb = wid.z * params.k_chunk;
  let ke = min(params.k, kb + params.k_chunk);
  var acc: array<array<vec4<f32>, MAX_GT / 4u>, MAX_GT>;
  for (var k0 = kb; k0 < ke; k0 += GBK) {
    // x tile: 16·GTM rows x GBK/4 vec4s, stored transposed.
    for (var r = 0u; r < GTM * GBK / 64u; r++) {
      let i = lid + r * 256u;
      let mi = i / (GBK / 4u);
      let kv = i % (GBK / 4u);
      var v = vec4<f32>(0.0);
      if (m0 + mi < params.m) {
        v = x[(m0 + mi) * xrow + k0 / 4u + kv];
      }
      for (var j = 0u; j < 4u; j++) {
        xs[(kv * 4u + j) * xv + mi / 4u][mi % 4u] = v[j];
      }
    }
    // W tile: 16·GTN rows x GBK/8 words (8 weights each), dequantized.
    for (var r = 0u; r < (GTN * GBK + 127u) / 128u; r++) { // a 4-column, 16-deep tile has 128 words
      let i = lid + r * 256u;
      let ni = i / (GBK / 8u);
      let wi = i % (GBK / 8u);
      var lo = vec4<f32>(0.0);
      var hi = vec4<f32>(0.0);
      if (ni >= 16u * GTN) {
        continue;
      }
      if (n0 + ni < params.n) {
        let c = codes[(n0 + ni) * (params.k / 8u) + k0 / 8u + wi];
        let d = scale_of((n0 + ni) * groups + (k0 + wi * 8u) / 32u);
        lo = d * lo4(c);
        hi = d * hi4(c);
      }
      for (var j = 0u; j < 4u; j++) {
        ws[(wi * 8u + j) * wv + ni / 4u][ni % 4u] = lo[j];
        ws[(wi * 8u + 4u + j) * wv + ni / 4u][ni % 4u] = hi[j];
      }
    }
    workgroupBarrier();
    for (var k = 0u; k < GBK; k++) {
      var a: array<vec4<f32>, MAX_GT / 4u>;
      var b: array<vec4<f32>, MAX_GT / 4u>;
      for (var t = 0u; t < GTM / 4u; t++) {
        a[t] = xs[k * xv + ty * (GTM / 4u) + t];
      }
      for (var t = 0u; t < GTN / 4u; t++) {
        b[t] = ws[k * wv + tx * (GTN / 4u) + t];
      }
      for (var i = 0u; i < GTM; i++) {
        let ai = a[i / 4u][i % 4u];
        for (var t = 0u; t < GTN / 4u; t++) {
          acc[i][t] += ai * b[t];
        }
      }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < GTM; i++) {
    let m = m0 + ty * GTM + i;
    for (var j = 0u; j < GTN; j++) {
      let n = n0 + tx * GTN + j;
      if (m < params.m && n < params.n) {
        var o = (wid.z * params.m + m) * params.n + n;
        if (params.k_chunk >= params.k) {
          o = out_at(m, n);
        }
        var v = acc[i][j / 4u][j % 4u];
        if (params.accumulate != 0u) {
          v += y[o];
        }
        y[o] = v;
      }
    }
  }
}

// The sum of a split GEMM's partials: y at element i = (row, column) of [m, n] (its part's place,
// out_at) (+)= Σ_z parts[z·m·n + i], z over ceil(k / k_chunk) chunks in order. Grid: flat group
// id = wid.x + wid.y * nwg.x, 256 elements per group.
@compute @workgroup_size(256)
fn split_sum(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  let total = params.m * params.n;
  if (i >= total) {
    return;
  }
  let chunks = (params.k + params.k_chunk - 1u) / params.k_chunk;
  var v = parts[i];
  for (var z = 1u; z < chunks; z++) {
    v += parts[z * total + i];
  }
  let o = out_at(i / params.n, i % params.n);
  if (params.accumulate != 0u) {
    v += y[o];
  }
  y[o] = v;
}

// ---------------------------------------------------------------------------------------------
// Backward through the frozen weight: dx[m, k] (+)= Σ_n dy[m, n] W[n, k]. A workgroup of 16x16
// threads computes a 128x64 tile of dx (8 rows m x 4 columns k per thread), stepping N 16 rows at
// a time; the dy tile and the dequantized W tile [16 n, 64 k] are staged n-major (12.3 KiB, within
// WebGPU's default 16). The next step's dy values and code word are loaded into registers before
// the current step's arithmetic, so their latency hides behind it.
// ---------------------------------------------------------------------------------------------
const DX_TM = 128u; // rows of dy per tile
const DX_TK = 64u;  // columns of dx per tile
const BN = 16u;     // rows of W per step
// dys's row stride in vec4s, one past DX_TM / 4: with 32, the 16 lanes staging one row m of dy
// (n = 0..15) all stored to one bank; padded, the H100 runs dX 1.43x faster (M8192 N6144 K2048:
// 8.44 -> 5.89 ms, 24.4 -> 35.0 TFLOP/s; tools/device/gemmSpeed.ts --f32).
const DYS = DX_TM / 4u + 1u;
var<workgroup> dys: array<vec4<f32>, BN * DYS>; // dys[n * DYS + i][j] = dy[m0 + 4i + j, n0 + n]
var<workgroup> wt: array<vec4<f32>, BN * DX_TK / 4u>;  // wt[n * 16 + i][j] = W[n0 + n, k0 + 4i + j]

// Thread lid's share of the step at n0: 8 values of the dy tile (128 rows x 16 columns) and, for
// the first 128 threads, one code word of the W tile (16 rows x 8 words) with its scale.
struct DxStep {
  dy: array<f32, 8>,
  code: u32,
  scale: f32,
}

fn dx_load(lid: u32, m0: u32, k0: u32, n0: u32) -> DxStep {
  var st: DxStep;
  for (var r = 0u; r < 8u; r++) {
    let i = lid + r * 256u;
    let mi = i / BN;
    let ni = i % BN;
    st.dy[r] = 0.0;
    if (m0 + mi < params.m && n0 + ni < params.n) {
      st.dy[r] = dy[(m0 + mi) * params.n + n0 + ni];
    }
  }
  st.code = 0x88888888u; // code 8 is weight 0
  st.scale = 0.0;
  let ni = lid / 8u;
  let k = k0 + (lid % 8u) * 8u;
  if (lid < BN * 8u && n0 + ni < params.n && k < params.k) {
    st.code = codes[(n0 + ni) * (params.k / 8u) + k / 8u];
    st.scale = scale_of((n0 + ni) * (params.k / 32u) + k / 32u);
  }
  return st;
}

fn dx_store(lid: u32, st: DxStep) {
  for (var r = 0u; r < 8u; r++) {
    let i = lid + r * 256u;
    let mi = i / BN;
    let ni = i % BN;
    dys[ni * DYS + mi / 4u][mi % 4u] = st.dy[r];
  }
  if (lid < BN * 8u) {
    let ni = lid / 8u;
    let wi = lid % 8u;
    wt[ni * (DX_TK / 4u) + wi * 2u] = st.scale * lo4(st.code);
    wt[ni * (DX_TK / 4u) + wi * 2u + 1u] = st.scale * hi4(st.code);
  }
}

@compute @workgroup_size(256)
fn dinput(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let tx = lid % 16u; // 4 columns k
  let ty = lid / 16u; // 8 rows m
  let m0 = wid.y * DX_TM;
  let k0 = wid.x * DX_TK;
  var acc = array<vec4<f32>, 8>();
  var st = dx_load(lid, m0, k0, 0u);
  for (var n0 = 0u; n0 < params.n; n0 += BN) {
    dx_store(lid, st);
    workgroupBarrier();
    if (n0 + BN < params.n) {
      st = dx_load(lid, m0, k0, n0 + BN);
    }
    for (var n = 0u; n < BN; n++) {
      let a0 = dys[n * DYS + 2u * ty];
      let a1 = dys[n * DYS + 2u * ty + 1u];
      let b = wt[n * (DX_TK / 4u) + tx];
      acc[0] += a0.x * b;
      acc[1] += a0.y * b;
      acc[2] += a0.z * b;
      acc[3] += a0.w * b;
      acc[4] += a1.x * b;
      acc[5] += a1.y * b;
      acc[6] += a1.z * b;
      acc[7] += a1.w * b;
    }
    workgroupBarrier();
  }
  let k = k0 + tx * 4u;
  for (var i = 0u; i < 8u; i++) {
    let m = m0 + ty * 8u + i;
    if (m < params.m && k < params.k) {
      let o = (m * params.k + k) / 4u;
      var v = acc[i];
      if (params.accumulate != 0u) {
        v += dx[o];
      }
      dx[o] = v;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Gather: rows[t, :] = W[ids[t], :] dequantized (embedding lookup from a 4-bit table). One
// thread per code word writes 8 weights; an id outside [0, N) gives a row of zeros.
// Grid: flat group id = wid.x + wid.y * nwg.x, 256 words per group.
// ---------------------------------------------------------------------------------------------
@compute @workgroup_size(256)
fn gather(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  let words = params.k / 8u;
  if (i >= params.m * words) {
    return;
  }
  let t = i / words;
  let wi = i % words;
  let id = ids[t];
  var lo = vec4<f32>(0.0);
  var hi = vec4<f32>(0.0);
  if (id < params.n) {
    let c = codes[id * words + wi];
    let d = scale_of(id * (params.k / 32u) + wi / 4u);
    lo = d * lo4(c);
    hi = d * hi4(c);
  }
  rows[i * 2u] = lo;
  rows[i * 2u + 1u] = hi;
}
