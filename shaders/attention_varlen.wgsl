// Packed sequences (cu_seqlens) and the shared prefix: which keys a query row sees and which
// queries see a key. The including file declares `params` (fields rows, causal, nseq, prefix_len)
// and binds cu_seqlens.

// The sequence holding packed row t: the s with cu[s] <= t < cu[s + 1].
fn seq_of(t: u32) -> u32 {
  var lo = 0u;
  var hi = params.nseq;
  while (hi - lo > 1u) {
    let mid = (lo + hi) / 2u;
    if (cu_seqlens[mid] <= t) { lo = mid; } else { hi = mid; }
  }
  return lo;
}

// Keys [lo, hi) of its own sequence that packed query row t attends to. Monotone in t, so a
// tile's own key range is [keys(first row).x, keys(last row).y).
fn varlen_keys(t: u32) -> vec2u {
  let s = seq_of(t);
  return vec2u(cu_seqlens[s], select(cu_seqlens[s + 1u], t + 1u, params.causal != 0u));
}

// Whether row t attends to key j, given its own key range: j in it, or j in the shared prefix
// (prefix_len > 0) and t after it.
fn sees(t: u32, j: u32, own: vec2u) -> bool {
  return (j >= own.x && j < own.y) || (t >= params.prefix_len && j < params.prefix_len);
}

// Queries [lo, hi) that attend to packed key row j (the transpose of varlen_keys and sees): a
// key of the shared prefix is seen by every row after it too, up to T.
fn varlen_queries(j: u32) -> vec2u {
  let s = seq_of(j);
  let end = select(cu_seqlens[s + 1u], params.rows, j < params.prefix_len);
  return vec2u(select(cu_seqlens[s], j, params.causal != 0u), end);
}
