// The GPU time of one compute pass, between the pass's two timestamps, for the device tools that
// time raw WebGPU work of their own (dispatchCost.ts, aluRate.ts): the median of `reps` passes after
// two that warm the GPU's clocks.
export interface PassTimer {
  /** Nanoseconds of GPU time: the median over passes that `record` fills. */
  median(reps: number, record: (pass: GPUComputePassEncoder) => void): Promise<{ median: number; min: number; max: number }>;
}

export function passTimer(device: GPUDevice): PassTimer {
  const query = device.createQuerySet({ type: 'timestamp', count: 2 });
  const resolved = device.createBuffer({ size: 16, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
  const readback = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const once = async (record: (pass: GPUComputePassEncoder) => void): Promise<number> => {
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass({ timestampWrites: { querySet: query, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 } });
    record(pass);
    pass.end();
    encoder.resolveQuerySet(query, 0, 2, resolved, 0);
    encoder.copyBufferToBuffer(resolved, 0, readback, 0, 16);
    device.queue.submit([encoder.finish()]);
    await readback.mapAsync(GPUMapMode.READ);
    const [t0, t1] = new BigUint64Array(readback.getMappedRange().slice(0));
    readback.unmap();
    return Number(t1 - t0);
  };
  return {
    async median(reps, record) {
      const times: number[] = [];
      for (let rep = 0; rep < reps; rep++) {
        const t = await once(record);
        if (rep >= 2) times.push(t);
      }
      times.sort((a, b) => a - b);
      return { median: times[Math.floor(times.length / 2)], min: times[0], max: times[times.length - 1] };
    },
  };
}
