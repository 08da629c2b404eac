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

#include attention_key_walk

var<workgroup> own_a: array<vec4f, BO * DSV>;  // q (forward, dq); k (dk/dv)
var<workgroup> own_b: array<vec4f, BO * DSV>;  // dO (dq); v (dk/dv)
var<workgroup> in_a: array<vec4f, BI * DSV>;   // k (forward, dq); q (dk/dv)
var<workgroup> in_b: array<vec4f, BI * DSV>;   // v (forward, dq); dO (dk/dv)
var<workgroup> pt: array<f32, BI * BO>;        // [inner][owned]: P (forward, dk/dv), dS (dq)
var<workgroup> pt2: array<f32, BI * BO>;       // dS (dk/dv)
var<workgroup> red: array<f32, WG>;            // per-lane partial row maxima / sums
var<workgroup> row_f: array<f32, BO>;          // per owned row: rescale factor, then 1 / l
var<workgroup> in_stats: array<vec2f, BI>;     // dk/dv: (lse, delta) of the tile's query rows
