// The KV cache's element (src/ops/kvCache.ts): f32, or f16 with KV_F16 (loaded as f32 by the
// readers, which accumulate in f32). Writers store to_kv(x). WGSL leaves the direction of f32 ->
// f16 rounding to the implementation: lavapipe rounds to nearest even (test/unit/kv-cache-f16.test.ts
// checks it bit for bit), as GPUs' conversion instructions do; any other would cost one ulp, not half.
#if KV_F16
// requires: f16
alias kv_t = f16;
alias kv4_t = vec4<f16>;
// Clamped to f16's largest finite value so that a cache never holds inf (K after its norm and RoPE, and V, are far below it).
fn to_kv(x: f32) -> kv_t { return kv_t(clamp(x, -65504.0, 65504.0)); }
#else
alias kv_t = f32;
alias kv4_t = vec4f;
fn to_kv(x: f32) -> kv_t { return x; }
#endif
