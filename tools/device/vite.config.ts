import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

// The CLI (src/node/cli.ts) as Node ES modules under .device-cli/, importing only `webgpu`, for the GPU
// machine (../shared/device/README.md): `npm run device:cli`, then carry [".device", ".device-cli"] and
// run `source .device/gpu-env.sh && node .device-cli/cli.mjs <command>`.
const stub = fileURLToPath(new URL('./nodeOnlyStub.ts', import.meta.url));
export default defineConfig({
  publicDir: false,
  resolve: { alias: { 'onnxruntime-node': stub, sharp: stub } },
  build: {
    ssr: true,
    outDir: '.device-cli',
    emptyOutDir: true,
    target: 'node20',
    minify: true,
    rollupOptions: {
      input: { cli: 'src/node/cli.ts' },
      external: ['webgpu'],
      output: { format: 'es', entryFileNames: '[name].mjs' },
    },
  },
  ssr: { noExternal: true, external: ['webgpu'] },
});
