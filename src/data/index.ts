// Public surface of src/data for the worker, the UI and the CLI. Node-only pieces (the sharp
// decoder, local paths and folders) live in ./node and are imported from there directly.
export type { BrokenReason, BrokenRow, DatasetRow, RgbaImage } from './types';
export { buildPrompt, interleave, DEFAULT_SYSTEM_PROMPT, IMAGE_PLACEHOLDER, type ChatMessage, type ContentPart, type Prompt } from './prompt';
export { syntheticDataset, generateSynthetic, SYNTHETIC_TASK_NAMES, DEFAULT_IMAGE_SIZE, type SyntheticTask } from './synthetic';
export { resizeArea, type ImageDecoder } from './image';
export { browserDecoder } from './decodeBrowser';
export { seededSplit, type Split } from './split';
export { loadFile, loadHubDataset, loadJsonText, loadParquet, type LoadOptions } from './loaders';
export { listHubParquet, hubDatasetFileUrl } from './loaders/hub';
export { detectLayout, GEO3K_MAPPING, MATHVISTA_MAPPING, type ColumnMapping } from './loaders/mapping';
export { brokenCounts, type LoadResult } from './loaders/rows';
export { DataFileError } from './loaders/errors';
export { BrokenImageError, decodeRowImages, decodingPromptSource } from './encodedImages';
export { QWEN3_VL_IMAGE_LIMITS, type ImageLimits } from './image';
export type { ImageFolder } from './loaders/imageCells';
