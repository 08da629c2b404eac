import { defineConfig } from 'vite';

// tools/device/mmaCheck.ts as one Node ES module importing only `webgpu`, for the GPU machine.
export default defineConfig({
  publicDir: false,
  build: {
    ssr: true,
    emptyOutDir: false,
    target: 'node20',
    minify: false,
    rollupOptions: {
      input: { mmaCheck: 'tools/device/mmaCheck.ts' },
      external: ['webgpu'],
      output: { format: 'es', entryFileNames: '[name].mjs' },
    },
  },
  ssr: { noExternal: true, external: ['webgpu'] },
});
