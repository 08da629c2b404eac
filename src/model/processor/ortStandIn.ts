// What the app's bundle holds in place of onnxruntime-web (vite.config.ts aliases the bare
// `onnxruntime-web` to this module). The app uses @huggingface/transformers for its tokenizer and
// chat template only, but the package's browser build imports onnxruntime-web for inference, which
// would ship the runtime and its ~20 MB wasm. When it loads, transformers.js reads `InferenceSession`
// and `env` (its `wasm`/`webgpu` settings, absent here) and later tests values against `Tensor`;
// creating a session is the one thing that needs the runtime, and it fails with a named error.

export class OnnxRuntimeNotBundledError extends Error {
  override name = 'OnnxRuntimeNotBundledError';
  constructor(what: string) {
    super(`${what}: onnxruntime-web is not in the app's bundle (vite.config.ts aliases it to src/model/processor/ortStandIn.ts); the app uses transformers.js for tokenizers only`);
  }
}

export const InferenceSession = {
  create(): never {
    throw new OnnxRuntimeNotBundledError('InferenceSession.create');
  },
};

/** No value is one: there is no session to produce it. */
export class Tensor {
  constructor() {
    throw new OnnxRuntimeNotBundledError('new Tensor');
  }
}

/** The runtime's settings object; empty, so transformers.js configures no wasm or WebGPU backend. */
export const env = {};
