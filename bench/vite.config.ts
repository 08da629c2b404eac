import { defineConfig } from 'vite';

// Bundles the benchmarks into single Node ES modules under .bench/ that import only `webgpu`, so they
// run on the GPU machine with the Node and Dawn that ../shared/device/prepare.sh packs into .device/.
export default defineConfig({
  // The app's public/ (the demo model) has no place in the bundle that travels to the GPU machine.
  publicDir: false,
  build: {
    ssr: true,
    outDir: '.bench',
    emptyOutDir: true,
    target: 'node20',
    minify: false,
    rollupOptions: {
      input: { kernels: 'bench/kernels.ts', hostCost: 'tools/device/hostCost.ts', dispatchCost: 'tools/device/dispatchCost.ts', loraEpilogue: 'tools/device/loraEpilogue.ts', model: 'bench/model.ts', mmaCheck: 'tools/device/mmaCheck.ts', gemmSpeed: 'tools/device/gemmSpeed.ts', loraSpeed: 'tools/device/loraSpeed.ts', attnSpeed: 'tools/device/attnSpeed.ts', gemvOneRow: 'tools/device/gemvOneRow.ts', gemvRows: 'tools/device/gemvRows.ts', f16Prep: 'tools/device/f16Prep.ts', loadMemory: 'tools/device/loadMemory.ts', f16Gemm: 'tools/device/f16Gemm.ts', attnF16: 'tools/device/attnF16.ts', aluRate: 'tools/device/aluRate.ts' },
      external: ['webgpu'],
      output: { format: 'es', entryFileNames: '[name].mjs' },
    },
  },
  ssr: { noExternal: true, external: ['webgpu'] },
});
