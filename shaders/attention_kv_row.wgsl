// The KV cache's row of a position. The including file declares `params` (fields cap,
// prefix_len, prefix_slot).

// Cache row of position j of slot `slot`: a shared prefix is stored once, in prefix_slot.
fn kv_row(slot: u32, j: u32) -> u32 {
  return select(slot, params.prefix_slot, j < params.prefix_len) * params.cap + j;
}
