// Groups of 32 f32 values as int8 (int8_groups.wgsl's layout) by 8 lanes a group, a vec4 each,
// meeting in workgroup memory: a few instructions a lane where quantize_group runs about 250 in one
// thread. Decode's kernels run a handful of times a step and fetch their code cold each time, so
// their length costs more than their arithmetic (BENCHMARKS.md). The including shader defines
// QL_WG, its workgroup size (a multiple of 8), and includes int8_groups (I8_BIAS).

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
  let inv = select(127.0 / a, 0.0, a == 0.0);
  ql_q[lid] = vec4<i32>(round(v * inv));
  workgroupBarrier();
  // Word `lane` of pack_limb: vec4s 2w and 2w + 1 (w = lane / 2), their even or odd components.
  let lo = ql_q[first + (lane & ~1u)];
  let hi = ql_q[first + (lane | 1u)];
  let even = pack4xI8Clamp(vec4<i32>(lo.x, lo.z, hi.x, hi.z));
  let odd = pack4xI8Clamp(vec4<i32>(lo.y, lo.w, hi.y, hi.w));
  if (live) {
    xq[at + lane / 4u][lane % 4u] = select(even, odd, (lane & 1u) == 1u);
    if (lane == 0u) {
      var sum = vec4<i32>(0);
      for (var j = 0u; j < 8u; j++) {
        sum += ql_q[first + j];
      }
      xq[at + 2u] = vec4<u32>(bitcast<u32>(a / 127.0), bitcast<u32>(I8_BIAS - 8i * (sum.x + sum.y + sum.z + sum.w)), 0u, 0u);
    }
  }
  workgroupBarrier(); // a next call may overwrite ql_max and ql_q
}
