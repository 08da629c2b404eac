// The capabilities record in Chromium (WebGPU on SwiftShader, --enable-unsafe-webgpu): the same
// facts as the browser's own adapter (features, subgroup sizes, subgroup-matrix configurations),
// and the default products chosen from them.
// (A string for page.evaluate: vitest would rewrite a function's dynamic import.)
import { describe, expect, it } from 'vitest';
import { servedApp } from '../helpers/browser';
import type { Capabilities } from '../../src/gpu';

interface Seen {
  caps: Capabilities;
  products: string;
  why: string;
  adapterFeatures: string[];
  info: { min: number | null; max: number | null; configs: unknown[] | null };
}

describe('capabilities in Chromium', () => {
  const app = servedApp();

  it("match the browser's adapter, and the default products follow from them", async () => {
    const page = await app.page();
    await page.goto(app.url);
    await page.waitForLoadState('networkidle');
    const script = `(async () => {
      const { Gpu, capabilitiesOf } = await import('/src/gpu/index.ts');
      const { chooseProducts } = await import('/src/model/products.ts');
      const gpu = await Gpu.create(navigator.gpu);
      const caps = capabilitiesOf(gpu);
      const { products, why } = chooseProducts(caps);
      const adapter = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
      const i = adapter.info;
      const configs = i.subgroupMatrixConfigs ? [...i.subgroupMatrixConfigs].map((c) => ({ componentType: c.componentType, resultComponentType: c.resultComponentType, M: Number(c.M), N: Number(c.N), K: Number(c.K) })) : null;
      return { caps, products, why, adapterFeatures: [...adapter.features], info: { min: i.subgroupMinSize ?? null, max: i.subgroupMaxSize ?? null, configs } };
    })()`;
    let seen: Seen | undefined;
    // Vite reloads the page once when its first visit discovers dependencies to pre-bundle.
    for (let attempt = 0; !seen; attempt++) {
      try {
        seen = (await page.evaluate(script)) as Seen;
      } catch (e) {
        if (attempt >= 2 || !/Execution context was destroyed/.test((e as Error).message)) throw e;
        await page.waitForLoadState('networkidle');
      }
    }
    const { caps } = seen;
    expect(caps.shaderF16).toBe(seen.adapterFeatures.includes('shader-f16'));
    expect(caps.subgroups.enabled).toBe(seen.adapterFeatures.includes('subgroups'));
    expect(caps.subgroups.minSize).toBe(seen.info.min);
    expect(caps.subgroups.maxSize).toBe(seen.info.max);
    const matrix = seen.adapterFeatures.includes('chromium-experimental-subgroup-matrix');
    expect(caps.subgroupMatrix.enabled).toBe(matrix);
    expect(caps.subgroupMatrix.configs).toEqual(matrix ? seen.info.configs : []);
    expect(caps.limits.maxStorageBufferBindingSize).toBeGreaterThan(0);
    if (!matrix) {
      expect(seen.products).toBe('f32');
      expect(seen.why).toContain("no 'chromium-experimental-subgroup-matrix' feature");
    }
  });
});
