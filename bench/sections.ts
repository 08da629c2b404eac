// Markers of BENCHMARKS.md's model section: bench/modelReport.ts writes between them, and
// bench/report.ts (the kernel part, before them) keeps them and all that follows.
export const MODEL_BEGIN = '<!-- model-benchmarks -->';
export const MODEL_END = '<!-- /model-benchmarks -->';
