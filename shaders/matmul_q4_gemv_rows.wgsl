// GEMV for 2 to 8 rows of x: y[m, n] (+)= Σ_k x[m, k] W[n, k] (decode of a few sequences),
// in f32 (gemv_rows) or with x as int8 groups (gemv_rows_i8). The thread layout and code unpacking
// are q4_gemv_common.wgsl's; y may be a joined weight's parts stored apart (q4_joined_parts.wgsl).

struct Params {
  m: u32,          // rows of x (M, also a pipeline constant)
  n: u32,          // rows of W (out features)
  k: u32,          // columns of W (in features), a multiple of 32
  accumulate: u32, // 1: add into y instead of overwriting it
  split1: u32,     // the output's parts (q4_joined_parts.wgsl; n, n: one [m, n] output)
  split2: u32,
  lora_r: u32,     // LORA: the adapter's rank,
  lora_np: u32,    // partials of u per row of x,
  lora_s: f32,     // and its scale alpha / r
  res_add: u32,    // LORA: 1 adds residual[m, n] to each output stored
  res_wg0: u32,    // LORA: > 0: workgroups from this one on write residual (residual_up)
  res_r: u32,      // the residual's adapter: rank,
  res_np: u32,     // partials of u per row of x,
  res_s: f32,      // and scale
}

@group(0) @binding(0) var<uniform> params: Params;

#include q4_format
#include q4_gemv_common
#include q4_joined_parts
#include int8_groups

#if LORA
// A residual update owed to h between two kernels of a decode step (src/ops/projection.ts,
// NormProjected): down_proj's adapter update s·u·Bᵀ does not depend on down_proj's GEMV, so workgroups
// past the GEMV's (res_wg0 on) write it to `residual` [M, n] from lora_parts and lora_b (the GEMV
// itself runs at rank 0) instead of a dispatch of its own after the GEMV; the next layer's norm
// reads h + residual and its o_proj GEMV adds residual into h as it stores (res_add).
@group(0) @binding(8) var<storage, read_write> residual: array<f32>;

// Workgroup i of the residual's: row i / per_row of x, its columns (i % per_row)·WG + lid.
fn residual_up(i: u32, lid: u32) {
  let wg = TPR * TG;
  let per_row = (params.n + wg - 1u) / wg;
  let t = i / per_row;
  if (t >= M) {
    return; // the grid's padding
  }
  lora_gather(lid, wg, t, 1u, LoraTerm(params.res_r, params.res_np, params.res_s));
  let c = (i % per_row) * wg + lid;
  if (c < params.n) {
    residual[t * params.n + c] = lora_out(0u, c, params.res_r);
  }
}
#endif

// ---- 2 to 8 rows of x ------------------------------------------------------------------------
// What grows with M is the per-row work, so each code word is unpacked and scaled once, as q[j] =
// weight j of the word in the 4 rows of W, and a row of x adds x_j·q[j] with one vec4 fma per
// weight: one multiply-add per weight and row of x, and nothing else per row. Staged x is
// pre-scaled by 16^-p; x read from memory is not, and 16^-p goes into the scales instead. The
// lanes' partial sums meet once, in workgroup memory (the staging buffer, reused): every lane
// writes its M vec4s, one barrier, then one thread per output adds its TPR lanes' (a tree of
// barriers per row of x cost more than the products on small weights).
// Per code word a thread holds a 4 (rows of W) x M (rows of x) x 8 (k) tile: 32 unpack instructions
// (and, or, subtract, scale on 8 vec4s), 8·M vec4 fmas (32·M scalar) and 2·M vec4 loads of x, so
// 16 fmas per vec4 load (4 per x value); the TPR·TG lanes of a workgroup read x at TPR addresses
// (row blocks share them). At M = 8 that is 8 fmas + 4 unpack instructions a weight: issue-bound.

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
// Where output (m, n) lives: in its part (params.split1/2).
fn out_at(m: u32, n: u32) -> u32 {
  return joined_at(m, n, params.m, params.n, params.split1, params.split2);
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
  if (params.res_wg0 != 0u && rb.x >= params.res_wg0) {
    residual_up(rb.x - params.res_wg0, lid);
    return;
  }
  lora_gather(lid, TPR * TG, 0u, M, LoraTerm(params.lora_r, params.lora_np, params.lora_s));
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
  // A thread an output (row m of x, row n of W): the LoRA epilogue's r multiply-adds spread over
  // the workgroup, not 4·r of them chained in a thread per (row block, row of x).
  for (var it = lid; it < TG * M * 4u; it += TPR * TG) {
    let j = it / 4u;
    let r = it % 4u;
    var sum = 0.0;
    for (var l = 0u; l < TPR; l++) {
      sum += bitcast<f32>(rows_mem[partial_at(j, l)][r]);
    }
    let m = j % M;
    let n = (blk * TG + j / M) * 4u + r;
    if (n < params.n) {
      var v = sum + lora_out(m, n, params.lora_r);
#if LORA
      if (params.res_add != 0u) {
        v += residual[m * params.n + n];
      }
#endif
      let o = out_at(m, n);
      if (params.accumulate != 0u) {
        v += y[o];
      }
      y[o] = v;
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

// PREQ (a define: xq_in is bound only then): x quantized by quantize_x and read from memory, no
// staging and no barriers.
#if PREQ
const PREQ = true;
#else
const PREQ = false;
#endif

#if ABLATE
// Measurement only (tools/device/gemvRows.ts --ablate), each a build of its own: ABLATE_W makes
// the weights' codes from the step's index instead of loading them, ABLATE_ARITH skips the
// arithmetic (each step's codes still reach the sums, so their loads stay), ABLATE_X makes x's
// values in registers instead of loading them. Each keeps its loads behind a test no call passes,
// so that the bindings stay those of the engine's kernel.
const NEVER = 0xFFFFFFFFu; // an accumulate no call passes
#endif

// Step s of the 4 rows from rr (ABLATE_W: made up).
fn step_i8(rr: vec4<u32>, s: u32) -> Step {
#if ABLATE_W
  if (params.accumulate != NEVER) {
    let c = vec4<u32>(s * 0x11111111u) ^ rr;
    return Step(array<vec4<u32>, 4>(c, c ^ vec4<u32>(1u), c ^ vec4<u32>(2u), c ^ vec4<u32>(3u)), vec4<f32>(f32(s)));
  }
#endif
  return step_at(rr, s);
}

// Vec4 h of row m's group g0 + gl: staged, or (PREQ) quantize_x's.
fn xq_at(m: u32, gl: u32, g0: u32, h: u32) -> vec4<u32> {
#if ABLATE_X
  if (params.accumulate != NEVER) {
    return vec4<u32>(gl * 0x01010101u + h + m, gl ^ m, gl + 7u * h, 0x01000000u * h);
  }
#endif
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
  if (params.res_wg0 != 0u && rb.x >= params.res_wg0) {
    residual_up(rb.x - params.res_wg0, lid);
    return;
  }
  lora_gather(lid, TPR * TG, 0u, M, LoraTerm(params.lora_r, params.lora_np, params.lora_s));
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
      var cur = step_i8(rr, g0 + min(gl, gc - 1u));
      if (!PREQ) {
        workgroupBarrier(); // the previous chunk's reads (or block's partial sums) are done
        stage_rows_i8(lid, k0, gc);
        workgroupBarrier();
      }
      for (; gl < gc; gl += TPR) {
        let next = step_i8(rr, g0 + min(gl + TPR, gc - 1u));
        var lo: array<vec4<u32>, 4>;
        var hi: array<vec4<u32>, 4>;
        for (var r = 0u; r < 4u; r++) {
          lo[r] = cur.c[r] & vec4<u32>(LOW_NIBBLES);
          hi[r] = (cur.c[r] >> vec4<u32>(4u)) & vec4<u32>(LOW_NIBBLES);
        }
#if ABLATE_ARITH
        if (params.accumulate != NEVER) {
          a[0] += bitcast<vec4<f32>>(lo[0] ^ hi[0] ^ lo[1] ^ hi[1] ^ lo[2] ^ hi[2] ^ lo[3] ^ hi[3]) * cur.d;
          cur = next;
          continue;
        }
#endif
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
