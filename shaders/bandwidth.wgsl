// A plain read kernel: the bandwidth ceiling that the other kernels are measured against.
// Each thread sums a strided run of vec4s so that no load can be dropped, and one value per
// workgroup is written.

struct Params {
  n_vec4: u32,
  per_thread: u32,
  base: u32, // first vec4 read (cycling through a large buffer keeps small reads out of L2)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> sink: array<f32>;

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn read_sum(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let group = wid.x + wid.y * nwg.x;
  let base = group * WG * params.per_thread + lid;
  var acc = vec4<f32>(0.0);
  for (var i = 0u; i < params.per_thread; i++) {
    let idx = base + i * WG; // consecutive threads read consecutive vec4s
    if (idx < params.n_vec4) {
      acc += src[params.base + idx];
    }
  }
  let s = acc.x + acc.y + acc.z + acc.w;
  if (s == 1234567.0) { // practically never true; keeps the loads live without a reduction
    sink[group] = s;
  }
}
