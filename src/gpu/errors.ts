// Typed errors for everything the WebGPU runtime can report. Each names the thing at fault
// (kernel, buffer, feature or limit) so that a message shown to a user says what to fix.

export class GpuError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** WebGPU is not available at all (no navigator.gpu, or no adapter). */
export class WebGpuUnavailableError extends GpuError {}

/** The adapter lacks a feature the caller marked as required. */
export class MissingFeatureError extends GpuError {
  constructor(readonly feature: string, detail = '') {
    super(`GPU feature '${feature}' is required but this adapter does not offer it${detail ? `: ${detail}` : ''}`);
  }
}

/** The tensor-core GEMM computed a check product outside its rounding bound on this GPU (a
 * driver's cooperative matrices at fault): the products stay on the f32 kernels. */
export class TensorCoreCheckError extends GpuError {
  constructor(detail: string, path = 'int8') {
    super(`the ${path} tensor-core GEMM failed its check on this GPU (${detail}); the products stay on the f32 kernels`);
  }
}

/** The adapter's limit is below what the caller needs. */
export class LimitError extends GpuError {
  constructor(readonly limit: string, readonly needed: number, readonly available: number) {
    super(`GPU limit ${limit} is ${available}, but ${needed} is needed`);
  }
}

/** A WGSL module failed to compile; `kernel` is the shader's name, `messages` the compiler's lines. */
export class ShaderCompileError extends GpuError {
  constructor(readonly kernel: string, readonly messages: string[]) {
    super(`WGSL compile error in kernel '${kernel}':\n${messages.join('\n')}`);
  }
}

/** A buffer could not be created: too large for the device, or out of memory. */
export class BufferAllocationError extends GpuError {
  constructor(readonly buffer: string, readonly bytes: number, reason: string) {
    super(`cannot allocate buffer '${buffer}' of ${bytes} bytes: ${reason}`);
  }
}

/** The GPU ran out of memory while doing `what` (a buffer label or kernel names). */
export class GpuOutOfMemoryError extends GpuError {
  constructor(readonly what: string, detail: string) {
    super(`GPU out of memory in ${what}: ${detail}`);
  }
}

/** A validation error raised by WebGPU, attributed to the kernels or buffer involved. */
export class GpuValidationError extends GpuError {
  constructor(readonly what: string, detail: string) {
    super(`WebGPU validation error in ${what}: ${detail}`);
  }
}

/** A shape, dtype or argument mismatch caught before anything reached the GPU. */
export class ShapeError extends GpuError {
  constructor(readonly kernel: string, detail: string) {
    super(`${kernel}: ${detail}`);
  }
}

/** The device was lost (driver reset, tab in the background too long, destroy()). */
export class DeviceLostError extends GpuError {
  constructor(readonly reason: string, detail: string) {
    super(`GPU device lost (${reason}): ${detail}`);
  }
}
