// The walk over key tiles of BI keys (the including file declares BI and `params`, field
// prefix_len): attention_tiled.wgsl's kernels and attention_f16.wgsl.
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
