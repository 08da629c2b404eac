// Groups of 32 f32 values as int8 (int8_groups.wgsl's layout) by 8 lanes a group, a vec4 each,
// meeting in workgroup memory: a few instructions a lane where quantize_group runs about 250 in one
// thread. Decode's kernels run a handful of times a step and fetch their code cold each time, so
// their length costs more than their arithmetic (BENCHMARKS.md). The including shader defines
// QL_WG, its workgroup size (a multiple of 8), and includes int8_groups (the group's rounding,
// packing and header).

var<workgroup> ql_max: array<f32, QL_WG>;
var<workgroup> ql_q: array<vec4<i32>, QL_WG>;

// Lane lid % 8 of slot lid / 8 holds vec4 lid % 8 of the slot's group (v); where `live`, the
// group is written to xq[at], xq[at + 1], xq[at + 2] (every lane of a live slot must be live).
// Every thread of the workgroup calls it, in uniform control flow: it has barriers.
fn quantize_lanes(lid: u32, v: vec4<f32>, live: bool, at: u32) {
  let lane = lid % 8u;
  let first = lid - lane;
  let m = abs(v);
  ql_max[lid] = max(max(m.x, m.y), max(m.z, m.w));
  workgroupBarrier();
  var a = 0.0;
  for (var j = 0u; j < 8u; j++) {
    a = max(a, ql_max[first + j]);
  }
  ql_q[lid] = vec4<i32>(round(v * group_inv(a)));
  workgroupBarrier();
  // Word `lane` of pack_limb: vec4s 2w and 2w + 1 (w = lane / 2), their even or odd components.
  let words = pack_pair(ql_q[first + (lane & ~1u)], ql_q[first + (lane | 1u)]);
  if (live) {
    xq[at + lane / 4u][lane % 4u] = select(words.x, words.y, (lane & 1u) == 1u);
    if (lane == 0u) {
      var sum = vec4<i32>(0);
      for (var j = 0u; j < 8u; j++) {
        sum += ql_q[first + j];
      }
      xq[at + 2u] = group_header(a, sum.x + sum.y + sum.z + sum.w);
    }
  }
  workgroupBarrier(); // a next call may overwrite ql_max and ql_q
}
