// `npm run cli -- gpu`: its earlier keys kept, the capabilities record, the path families and the
// default products with their reason added (lavapipe: shader-f16, subgroups, no subgroup matrices).
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli';

describe('gpu command', () => {
  it('prints the adapter, the capabilities and the default products as one JSON line', async () => {
    const r = await runCli(['gpu', '--unsafe-apis', '--f16']);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const out = JSON.parse(lines[0]) as Record<string, unknown> & {
      dawnFlags: string[];
      enabled: string[];
      capabilities: { shaderF16: boolean; subgroups: { enabled: boolean }; subgroupMatrix: { enabled: boolean; configs: unknown[] } };
      paths: { path: string; available: boolean; why: string }[];
      defaultProducts: { products: string; why: string };
      defaultVisionProducts: { vision: string; why: string };
    };
    for (const k of ['name', 'vendor', 'architecture', 'description', 'features', 'wgslFeatures', 'limits', 'subgroupMatrixConfigs', 'enabled']) expect(out).toHaveProperty(k);
    expect(out.dawnFlags).toEqual(['enable-dawn-features=allow_unsafe_apis,vulkan_enable_f16_on_nvidia']);
    expect(out.capabilities.shaderF16).toBe(out.enabled.includes('shader-f16'));
    expect(out.capabilities.subgroups.enabled).toBe(out.enabled.includes('subgroups'));
    expect(out.capabilities.subgroupMatrix.configs).toEqual(out.subgroupMatrixConfigs);
    expect(out.paths.map((p) => p.path)).toEqual(['f16', 'int8', 'f32']);
    const [f16, int8] = out.paths;
    expect(out.defaultProducts.products).toBe(f16.available ? 'f16' : int8.available ? 'int8' : 'f32');
    expect(out.defaultProducts.why).toContain(f16.why);
    expect(r.stderr).toContain(`default products: ${out.defaultProducts.products}`);
    // The vision tower's 'auto' follows them: f16 beside f16, else f32.
    expect(out.defaultVisionProducts.vision).toBe(out.defaultProducts.products === 'f16' ? 'f16' : 'f32');
    expect(r.stderr).toContain(`default vision products: ${out.defaultVisionProducts.vision} — ${out.defaultVisionProducts.why}`);
    if (/llvmpipe/i.test(String(out.name))) {
      expect(out.capabilities.shaderF16).toBe(true);
      expect(f16.available).toBe(false);
      expect(f16.why).toMatch(/no 'chromium-experimental-subgroup-matrix' feature/);
      expect(out.defaultProducts.products).toBe('f32');
    }
  });
});
