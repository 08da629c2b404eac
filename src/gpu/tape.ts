// A recorded stretch of commands that a Recorder can record again without the code that made it.
//
// A decode step binds the same buffers with the same uniforms every step (generate.ts), so after
// the first step everything the model's JS does to record one (views, shape checks, bind-group
// and uniform lookups, ~300 dispatches) gives the same commands again. Recorder.capture keeps
// those commands on a Tape; Recorder.replay records them again for the price of the WebGPU calls
// alone. A replay repeats GPU commands and the host bookkeeping registered with
// Recorder.hostEffect (a KV cache's CPU mirror of its lengths); nothing else of the captured code
// runs again, so it must not write host data to the GPU while capturing (Gpu.write refuses).
// The buffers a tape binds stay held in the pool until the tape is released: released earlier,
// another tensor could take them and the replay would bind its bytes.
import type { Kernel } from './kernel';
import type { BufferPool } from './tensor';

export type TapeEntry =
  | { op: 'dispatch'; kernel: Kernel; group: GPUBindGroup; x: number; y: number; z: number }
  | { op: 'copy'; src: GPUBuffer; srcOffset: number; dst: GPUBuffer; dstOffset: number; bytes: number }
  | { op: 'clear'; buffer: GPUBuffer; offset: number; bytes: number };

export class Tape {
  readonly entries: TapeEntry[] = [];
  /** Host bookkeeping to repeat on every replay, in the order it was registered. */
  readonly effects: (() => void)[] = [];
  /** Names of the kernels dispatched (to attribute a submit's errors). */
  readonly kernels = new Set<string>();
  private readonly buffers = new Set<GPUBuffer>();
  private live = true;

  constructor(private readonly pool: BufferPool) {}

  get released(): boolean {
    return !this.live;
  }

  /** Hold `buffer` in the pool for as long as this tape lives. */
  bind(buffer: GPUBuffer): void {
    if (this.buffers.has(buffer)) return;
    this.buffers.add(buffer);
    this.pool.hold(buffer);
  }

  /** Let the pool take back the buffers this tape binds; a released tape replays no more. */
  release(): void {
    if (!this.live) return;
    this.live = false;
    for (const b of this.buffers) this.pool.unhold(b);
    this.buffers.clear();
  }
}
