// The tiled kernels' tile (attention_fwd, attention_bwd_dq, attention_bwd_dkv): constants,
// workgroup memory and the walk over key tiles. The including file declares `params` (field
// prefix_len).
//
// The tiled kernels (forward, dq, dk/dv): a workgroup owns BO rows (query rows; keys for
// dk/dv) and walks tiles of BI inner rows (keys; query rows for dk/dv). Each tile has two phases:
//   scores: LPR = WG / BO lanes per owned row, each dotting it with KPT = BI / LPR inner rows
//           (inner rows LPR apart, so that the lanes of a row read adjacent rows: no conflicts);
//   output: CLN lanes across the vec4 columns, each accumulating RPT owned rows x CPT columns
//           from the tile's probabilities, kept transposed in workgroup memory [inner][owned].
// Both phases are register tiles: one workgroup-memory load feeds several multiply-adds.

const BO: u32 = {{BO}}u;   // owned rows per workgroup
const BI: u32 = {{BI}}u;   // inner rows per tile
const WG: u32 = {{WG}}u;   // threads
const LPR: u32 = WG / BO;  // score phase: lanes per owned row
const KPT: u32 = BI / LPR; // score phase: inner rows per lane
const CLN: u32 = {{CLN}}u; // output phase: lanes across the vec4 columns
const CPT: u32 = (NV + CLN - 1u) / CLN; // output phase: vec4 columns per lane
const RPT: u32 = BO * CLN / WG;         // output phase: owned rows per lane
// Tile staging: every load of a tile is issued into registers before any is stored, so that a
// lane has SPT loads in flight rather than one at a time.
const SPT: u32 = (BI * NV + WG - 1u) / WG;

// The key tiles of a query tile whose own keys are [lo, hi): those, after the shared prefix's
// [0, prefix_len) when the tile's rows see it apart from their own keys (lo is 0 when the tile
// holds rows of the prompt, whose own range then covers the prefix). Walk with
//   var kw = key_walk(lo, hi); loop { if (kw.j0 >= hi) { break; } ...; kw = key_next(kw, lo, hi); }
// and take keys below kw.end only, so that no key counts twice.
struct KeyWalk {
  j0: u32,     // first key of the tile
  end: u32,    // the end of the current range (prefix_len in the prefix, else hi)
  in_pre: bool,
}

fn key_walk(lo: u32, hi: u32) -> KeyWalk {
  let pre = params.prefix_len > 0u && lo >= params.prefix_len;
  return KeyWalk(select(lo, 0u, pre), select(hi, params.prefix_len, pre), pre);
}

fn key_next(kw: KeyWalk, lo: u32, hi: u32) -> KeyWalk {
  let j = kw.j0 + BI;
  if (kw.in_pre && j >= params.prefix_len) {
    return KeyWalk(lo, hi, false);
  }
  return KeyWalk(j, kw.end, kw.in_pre);
}

var<workgroup> own_a: array<vec4f, BO * DSV>;  // q (forward, dq); k (dk/dv)
var<workgroup> own_b: array<vec4f, BO * DSV>;  // dO (dq); v (dk/dv)
var<workgroup> in_a: array<vec4f, BI * DSV>;   // k (forward, dq); q (dk/dv)
var<workgroup> in_b: array<vec4f, BI * DSV>;   // v (forward, dq); dO (dk/dv)
var<workgroup> pt: array<f32, BI * BO>;        // [inner][owned]: P (forward, dk/dv), dS (dq)
var<workgroup> pt2: array<f32, BI * BO>;       // dS (dk/dv)
var<workgroup> red: array<f32, WG>;            // per-lane partial row maxima / sums
var<workgroup> row_f: array<f32, BO>;          // per owned row: rescale factor, then 1 / l
var<workgroup> in_stats: array<vec2f, BI>;     // dk/dv: (lse, delta) of the tile's query rows
