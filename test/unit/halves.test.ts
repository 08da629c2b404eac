import { describe, expect, it } from 'vitest';
import { testGpu } from '../helpers/gpu';
import { randUniform } from '../helpers/reference';
import { Halves } from '../../src/ops/halves';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits } from '../../src/model/dtype';
import { ShapeError } from '../../src/gpu';

describe('halves: dense weights in 16-bit halves', () => {
  it('widens bf16 and f16 exactly (subnormals, infinities, signed zeros) and rounds f32 to bf16 to nearest even, as the CPU does, odd counts too', async () => {
    const gpu = await testGpu();
    const halves = new Halves(gpu);
    // Every f16 bit pattern but NaNs; bf16 patterns with every exponent, both signs.
    const f16Bits = Uint16Array.from({ length: 0x10000 }, (_, i) => i).filter((h) => (h & 0x7c00) !== 0x7c00 || (h & 0x3ff) === 0);
    const bf16Bits = Uint16Array.from({ length: 0x10000 }, (_, i) => i).filter((h) => (h & 0x7f80) !== 0x7f80 && h % 7 === 0);
    // Ties (exactly half a bf16 step: rounding to even both ways), near-ties and plain values.
    const ties = [1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1 + 2 ** -8 + 2 ** -23, 1 + 2 ** -8 - 2 ** -23, 3.4e38, -1e-38, 0];
    const x = Float32Array.from([...ties, ...randUniform(998, 5)]);
    const rec = gpu.recorder();
    const t16 = gpu.upload(f16Bits, [f16Bits.length], 'f16', 'f16 bits');
    const tb16 = gpu.upload(bf16Bits, [bf16Bits.length], 'bf16', 'bf16 bits');
    const tx = gpu.upload(x, [x.length], 'f32', 'x');
    const wide16 = halves.widen(rec, t16);
    const wideB16 = halves.widen(rec, tb16);
    const narrowed = halves.toBf16(rec, tx);
    await rec.submit();
    expect(await gpu.readF32(wide16)).toEqual(Float32Array.from(f16Bits, f16BitsToF32));
    expect(await gpu.readF32(wideB16)).toEqual(Float32Array.from(bf16Bits, bf16BitsToF32));
    expect(narrowed.dtype).toBe('bf16');
    expect(await gpu.read(narrowed)).toEqual(Uint16Array.from(x, f32ToBf16Bits));
    expect(() => halves.widen(rec, tx)).toThrow(ShapeError);
    expect(() => halves.toBf16(rec, t16)).toThrow(/must be f32, got f16/);
    // An odd count: the last word's high half is neither read as an element nor written.
    const odd = gpu.upload(Uint16Array.of(0x3f80, 0xc000, 0x4040), [3], 'bf16', 'odd');
    const oddX = gpu.upload(Float32Array.of(1.5, -2.25, 3.125), [3], 'f32', 'odd x');
    const r2 = gpu.recorder();
    const oddWide = halves.widen(r2, odd);
    const oddNarrow = halves.toBf16(r2, oddX);
    await r2.submit();
    expect([...(await gpu.readF32(oddWide)).slice(0, 3)]).toEqual([1, -2, 3]);
    expect([...(await gpu.read(oddNarrow)).slice(0, 3)]).toEqual([0x3fc0, 0xc010, 0x4048]);
    for (const t of [t16, tb16, tx, wide16, wideB16, narrowed, odd, oddX, oddWide, oddNarrow]) t.release();
  });
});
