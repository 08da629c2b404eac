import { defineConfig } from 'vite';
export default defineConfig({ publicDir: false, build: { ssr: true, outDir: '.probe', emptyOutDir: true, target: 'node20', minify: false, rollupOptions: { input: { probe: 'tools/device/probe.ts' }, external: ['webgpu'], output: { format: 'es', entryFileNames: '[name].mjs' } } }, ssr: { noExternal: true, external: ['webgpu'] } });
