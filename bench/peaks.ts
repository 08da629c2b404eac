// Datasheet peaks of the cards the GPU machine lends, for the "of peak" columns. Dense figures
// (no 2:4 sparsity) from NVIDIA's H100 and H200 datasheets; bf16 and int8 are tensor-core rates,
// fp32 the CUDA-core rate (the one our WGSL kernels run on, except the int8 subgroup-matrix GEMMs).
export interface CardPeak {
  card: string;
  fp32Tflops: number;
  bf16Tflops: number;
  /** int8 tensor cores, TOPS. */
  int8Tops: number;
  /** HBM bandwidth, GB/s. */
  hbmGBs: number;
}

const CARDS: { match: RegExp; peak: CardPeak }[] = [
  { match: /H200.*NVL/i, peak: { card: 'H200 NVL', fp32Tflops: 60, bf16Tflops: 835, int8Tops: 1671, hbmGBs: 4800 } },
  { match: /H200/i, peak: { card: 'H200 SXM', fp32Tflops: 67, bf16Tflops: 989.4, int8Tops: 1979, hbmGBs: 4800 } },
  { match: /H100.*PCIe/i, peak: { card: 'H100 PCIe', fp32Tflops: 51.2, bf16Tflops: 756.5, int8Tops: 1513, hbmGBs: 2000 } },
  { match: /H100.*NVL/i, peak: { card: 'H100 NVL', fp32Tflops: 60, bf16Tflops: 835, int8Tops: 1671, hbmGBs: 3900 } },
  { match: /H100/i, peak: { card: 'H100 SXM', fp32Tflops: 67, bf16Tflops: 989.4, int8Tops: 1979, hbmGBs: 3350 } },
];

/** The peak figures of the card a device name (Dawn's adapter name or torch's) describes, if known. */
export function cardPeak(deviceName: string): CardPeak | undefined {
  return CARDS.find((c) => c.match.test(deviceName))?.peak;
}
