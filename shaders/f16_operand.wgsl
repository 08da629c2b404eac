// Operands of LoRA's products on f16 tensor cores (src/ops/loraF16.ts), from an f32 tensor:
//   operand (f16): O [N][Kp] = scale·S in the GEMM's blocks of 32 x 32 (f16_blocks.wgsl), two
//                  halves a word, for matmul_q4_f16.wgsl's W16 variant;
//   operand (OUT32): O [N][Kp] = scale·S, f32 row-major, an x for its row scaling (f16_row_scale.wgsl);
// where S (n, k) = src [n][k], or with TRANS src [k][n] (src [K][N]: a transpose), and the columns
// from K to Kp (K rounded up to 32: the GEMM's reduction steps) are zero. A workgroup moves a tile
// of 32 x 32 through workgroup memory, so that both its reads and its writes run along rows.
// requires: f16

#include f16_blocks

struct Params {
  n: u32,     // O's rows
  k: u32,     // S's columns
  kp: u32,    // O's columns: k rounded up to 32
  scale: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
#if OUT32
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
#else
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
#endif

const WG = 256u;
const TT = 32u;
const TP = TT + 1u; // the tile's row stride: a column of it spreads over the banks
var<workgroup> tile: array<f32, TT * TP>; // [row of O][column of O]

// Grid (Kp / 32, ceil(N / 32)).
@compute @workgroup_size(WG)
fn operand(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let k0 = wid.x * TT;
  let n0 = wid.y * TT;
  for (var e = lid; e < TT * TT; e += WG) {
#if TRANS
    let kk = e / TT; // consecutive threads along n: along src's rows
    let nn = e % TT;
    let at = (k0 + kk) * params.n + n0 + nn;
#else
    let nn = e / TT; // consecutive threads along k
    let kk = e % TT;
    let at = (n0 + nn) * params.k + k0 + kk;
#endif
    var v = 0.0;
    if (k0 + kk < params.k && n0 + nn < params.n) {
      v = src[at] * params.scale;
    }
    tile[nn * TP + kk] = v;
  }
  workgroupBarrier();
#if OUT32
  for (var e = lid; e < TT * TT; e += WG) {
    let nn = e / TT;
    let kk = e % TT;
    if (n0 + nn < params.n) {
      out[(n0 + nn) * params.kp + k0 + kk] = tile[nn * TP + kk];
    }
  }
#else
  for (var e = lid; e < TT * TT / 2u; e += WG) {
    let nn = e / (TT / 2u);
    let kk = (e % (TT / 2u)) * 2u;
    if (n0 + nn < params.n) {
      out[blocked(n0 + nn, k0 + kk, params.kp) / 2u] = pack2x16float(vec2<f32>(tile[nn * TP + kk], tile[nn * TP + kk + 1u]));
    }
  }
#endif
}
