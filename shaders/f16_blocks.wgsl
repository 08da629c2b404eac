// The f16 operands of the tensor-core GEMM (matmul_q4_f16.wgsl), x and W [R][K], are laid out in
// blocks of 32 rows x 32 columns, each block's rows one after the other and the blocks of a row band
// along K next: a K step of a tile is then a few runs of 2 KiB, which its loads read whole. Written
// by f16_row_scale.wgsl and f16_convert.wgsl; a buffer of R rows holds ceil(R / 32)·32·K halves.

// The half number of element (r, c) of a blocked [R][K] operand.
fn blocked(r: u32, c: u32, k: u32) -> u32 {
  return ((r / 32u) * (k / 32u) + c / 32u) * 1024u + (r % 32u) * 32u + c % 32u;
}
