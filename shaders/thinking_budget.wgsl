// The thinking budget (vLLM's `thinking_token_budget`): after the sampler has drawn a step's token
// for each row, rows whose thinking block has used up its budget get the block's end sequence
// instead, one token a step, each with log-prob 0 (the forced token is the whole distribution it
// was drawn from, as vLLM's processed log-probs report it). Each row keeps its own state:
//   state[3·row]     phase: 0 before <think> (waiting for start_id), 1 inside the block, 2 closed
//   state[3·row + 1] thinking tokens drawn so far (the model's own)
//   state[3·row + 2] end tokens at the tail so far (the model's own or forced), so that an end
//                    sequence the model began is continued, never restarted
// A row that closes the block on its own is never touched.

struct Params {
  rows: u32,
  budget: u32,
  start_id: u32,
  end_len: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;   // [rows], rewritten where forced
@group(0) @binding(2) var<storage, read_write> logp: array<f32>;  // [rows]
@group(0) @binding(3) var<storage, read_write> state: array<u32>; // [rows, 3]
@group(0) @binding(4) var<storage, read> end_ids: array<u32>;     // [end_len]

override WG: u32 = 64u;

@compute @workgroup_size(WG)
fn force_end(@builtin(global_invocation_id) gid: vec3u) {
  let row = gid.x;
  if (row >= p.rows) {
    return;
  }
  let s = 3u * row;
  let phase = state[s];
  if (phase == 2u) {
    return;
  }
  var id = ids[row];
  if (phase == 0u) {
    if (id == p.start_id) {
      state[s] = 1u;
    }
    return;
  }
  var matched = state[s + 2u];
  if (state[s + 1u] >= p.budget) {
    id = end_ids[matched];
    ids[row] = id;
    logp[row] = 0.0;
    matched += 1u;
  } else {
    state[s + 1u] += 1u;
    if (id == end_ids[matched]) {
      matched += 1u;
    } else if (id == end_ids[0]) {
      matched = 1u;
    } else {
      matched = 0u;
    }
  }
  state[s + 2u] = matched;
  if (matched == p.end_len) {
    state[s] = 2u;
  }
}
