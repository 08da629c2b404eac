// Head rows of q, k, v: their bindings, where an element lives, and columns loaded as vec4s. The
// including file declares `params` (fields rows, hq, hkv) and binds nothing else at 1-3, 16-18.

@group(0) @binding(1) var<storage, read> q: array<f32>;
// k and v are f16 with KV_F16 (an f16 KV cache: kv_elem.wgsl), read as f32.
@group(0) @binding(2) var<storage, read> k: array<kv_t>;
@group(0) @binding(3) var<storage, read> v: array<kv_t>;
// ALIGNED (D % 4 == 0): the same buffers read as vec4s (a quarter of the load instructions when
// staging tiles); a kernel binds these or the f32 views.
@group(0) @binding(16) var<storage, read> q4: array<vec4f>;
@group(0) @binding(17) var<storage, read> k4: array<kv4_t>;
@group(0) @binding(18) var<storage, read> v4: array<kv4_t>;

#include kv_elem

// Element d of row rho (token rho / G, query head hk·G + rho % G) of sequence b in a
// [count·rows, Hq·D] tensor (b = 0 for packed sequences).
fn q_index(b: u32, rho: u32, hk: u32, d: u32) -> u32 {
  let G = params.hq / params.hkv;
  return (b * params.rows + rho / G) * params.hq * D + (hk * G + rho % G) * D + d;
}

// Columns 4c .. 4c+3 of the head row starting at `base`, zero past D (one function per binding:
// storage pointers cannot be passed to functions).
#if ALIGNED
fn ld_q(base: u32, c: u32) -> vec4f { return q4[base / 4u + c]; }
fn ld_k(base: u32, c: u32) -> vec4f { return vec4f(k4[base / 4u + c]); }
fn ld_v(base: u32, c: u32) -> vec4f { return vec4f(v4[base / 4u + c]); }
#else
fn cols(c: u32) -> vec4<bool> {
  return vec4<bool>(4u * c < D, 4u * c + 1u < D, 4u * c + 2u < D, 4u * c + 3u < D);
}
fn at(base: u32, c: u32, i: u32) -> u32 { return base + min(4u * c + i, D - 1u); }
fn ld_q(base: u32, c: u32) -> vec4f { return select(vec4f(0.0), vec4f(q[at(base, c, 0u)], q[at(base, c, 1u)], q[at(base, c, 2u)], q[at(base, c, 3u)]), cols(c)); }
fn ld_k(base: u32, c: u32) -> vec4f { return select(vec4f(0.0), vec4f(f32(k[at(base, c, 0u)]), f32(k[at(base, c, 1u)]), f32(k[at(base, c, 2u)]), f32(k[at(base, c, 3u)])), cols(c)); }
fn ld_v(base: u32, c: u32) -> vec4f { return select(vec4f(0.0), vec4f(f32(v[at(base, c, 0u)]), f32(v[at(base, c, 1u)]), f32(v[at(base, c, 2u)]), f32(v[at(base, c, 3u)])), cols(c)); }
#endif
