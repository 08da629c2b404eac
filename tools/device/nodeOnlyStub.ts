// Stands in for transformers.js's native Node dependencies (onnxruntime-node, sharp) in the CLI
// bundle that travels to the GPU machine: the CLI uses transformers.js for the tokenizer only,
// which needs neither. transformers.js reads some of their exports when it loads, so every property
// is another stand-in; calling or constructing one fails loudly.
function standIn(path: string): unknown {
  const fail = (): never => {
    throw new Error(`${path} is not in the device bundle (tools/device/vite.config.ts stubs onnxruntime-node and sharp)`);
  };
  return new Proxy(function () {}, {
    get: (_, key) => (key === 'then' || typeof key === 'symbol' ? undefined : standIn(`${path}.${key}`)),
    set: () => true,
    apply: fail,
    construct: fail,
  });
}
export default standIn('onnxruntime-node/sharp');
