// Next-token sampling on the GPU, one row per parallel sequence: repetition penalty, temperature,
// top-k, top-p, min-p, greedy, seeded with a counter-based RNG so that (seed, row, step) fixes the
// draw on every driver.
// Semantics and the reported log-prob are documented in shaders/sampling.wgsl. Greedy and plain
// sampling take two wide dispatches (chunks, then one workgroup per row); top-k / top-p take the
// one-workgroup-per-row kernel.
import { grid1d, ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

export interface SamplingConfig {
  /** Below 1e-5 means greedy (vLLM's threshold). */
  temperature: number;
  /** Keep the k most likely tokens (ties at the cut-off kept); 0 or undefined: off. */
  topK?: number;
  /** Keep the smallest top set whose mass reaches p, in (0, 1]; 1 or undefined: off. */
  topP?: number;
  /**
   * transformers' MinPLogitsWarper (TRL `min_p`, default None): after top-k and top-p, drop tokens
   * whose probability is below minP times the most likely one's; in [0, 1]; 0 or undefined: off.
   */
  minP?: number;
  /**
   * transformers' RepetitionPenaltyLogitsProcessor (TRL `repetition_penalty`, default 1.0): every
   * token already in the row's sequence (prompt and sampled so far, the `seen` bitmap) has its raw
   * logit multiplied by the penalty when negative and divided by it otherwise; > 0; 1 or undefined: off.
   */
  repetitionPenalty?: number;
  /**
   * 'processed' (default): log-prob under the distribution actually sampled (after temperature,
   * top-k and top-p; vLLM's processed_logprobs, which TRL uses); 'full': under the whole tempered softmax.
   */
  logprobs?: 'processed' | 'full';
}

/** Greedy below this temperature, as vLLM (_SAMPLING_EPS). */
const GREEDY_BELOW = 1e-5;
/** Logits per workgroup of sample_chunks (CHUNK in the shader). */
const SAMPLE_CHUNK = 1024;
const UNIFORMS = {
  vocab: 'u32',
  inv_temp: 'f32',
  greedy: 'u32',
  top_k: 'u32',
  top_p: 'f32',
  seed: 'u32',
  step: 'u32',
  full_logprob: 'u32',
  chunks: 'u32',
  log_min_p: 'f32',
  penalty: 'f32',
  words: 'u32',
  rows: 'u32',
} as const;
const WG = 128;
/** log_min_p when min-p is off: every finite z - zmax passes. */
const NO_MIN_P = -3.0e38;

export class Sampler {
  /** u32 [1] zero: the GPU part of a step given as a number. */
  private readonly zeroStep: Tensor;
  /** Per (row, chunk) stats of the two-pass path, grown to the largest [rows, chunks] seen (lives with the sampler: ~16 B per 1024 logits of a row). */
  private part: Tensor | null = null;

  private constructor(
    private readonly gpu: Gpu,
    private readonly kernel: Kernel,
    private readonly chunksK: Kernel,
    private readonly finishK: Kernel,
    private readonly penalizeK: Kernel,
    private readonly markK: Kernel,
  ) {
    this.zeroStep = gpu.zeros([1], 'u32', 'sampling.zero_step');
  }

  static async create(gpu: Gpu): Promise<Sampler> {
    const [kernel, chunksK, finishK, penalizeK, markK] = ['sample', 'sample_chunks', 'sample_finish', 'penalize', 'mark'].map((entry) =>
      gpu.kernelOnUse({ shader: 'sampling', entry, uniforms: UNIFORMS }),
    );
    return new Sampler(gpu, kernel, chunksK, finishK, penalizeK, markK);
  }

  /**
   * The repetition penalty's bitmap for `rows` sequences over `vocab`: u32 [rows, ceil(vocab/32)]
   * with the bits of `promptIds` set in every row (the rows share their prompt). `sample` adds
   * each step's tokens.
   */
  static seenBitmap(gpu: Gpu, rows: number, vocab: number, promptIds: readonly number[]): Tensor {
    const words = Math.ceil(vocab / 32);
    const bits = new Uint32Array(rows * words);
    for (const id of promptIds) {
      if (!Number.isInteger(id) || id < 0 || id >= vocab) throw new ShapeError('sampling', `prompt id ${id} is outside the vocabulary (${vocab})`);
      for (let r = 0; r < rows; r++) bits[r * words + (id >>> 5)] |= 1 << (id & 31);
    }
    return gpu.upload(bits, [rows, words], 'u32', 'sampling.seen');
  }

  /**
   * Sample one token per row of logits [rows, vocab] into ids [rows] (u32) and logp [rows] (f32).
   * `seed` (u32) and `step` (the decode position, u32) select the random stream; rows differ by index.
   * `step` as a u32 [1] tensor is read on the GPU: steps recorded ahead then differ in no uniform
   * and no binding, and reuse one another's bind groups.
   */
  sample(
    rec: Recorder,
    logits: Tensor,
    config: SamplingConfig,
    rng: { seed: number; step: number | Tensor },
    out: { ids: Tensor; logp: Tensor },
    /** The repetition penalty's bitmap (Sampler.seenBitmap); required when the penalty is not 1. The logits are penalised in place. */
    seen?: Tensor,
    /**
     * Recorded after the draw and before the penalty marks the drawn ids as seen: a step that
     * rewrites ids (the thinking budget, src/ops/thinkingBudget.ts) has the tokens it wrote marked.
     */
    rewrite?: (rec: Recorder) => void,
  ): void {
    const name = 'sampling';
    if (logits.dtype !== 'f32' || logits.shape.length !== 2) {
      throw new ShapeError(name, `logits must be f32 [rows, vocab], got ${logits.dtype} [${logits.shape.join(', ')}]`);
    }
    const [rows, vocab] = logits.shape;
    if (rows < 1 || vocab < 1) throw new ShapeError(name, `empty logits [${rows}, ${vocab}]`);
    if (out.ids.dtype !== 'u32' || out.ids.numel !== rows) throw new ShapeError(name, `ids must be u32 [${rows}], got ${out.ids.dtype} [${out.ids.shape.join(', ')}]`);
    if (out.logp.dtype !== 'f32' || out.logp.numel !== rows) throw new ShapeError(name, `logp must be f32 [${rows}], got ${out.logp.dtype} [${out.logp.shape.join(', ')}]`);
    const { temperature, topK = 0, topP = 1, minP = 0, repetitionPenalty = 1, logprobs = 'processed' } = config;
    if (!(minP >= 0 && minP <= 1)) throw new ShapeError(name, `minP must be in [0, 1], got ${minP}`);
    if (!(repetitionPenalty > 0 && Number.isFinite(repetitionPenalty))) throw new ShapeError(name, `repetitionPenalty must be > 0, got ${repetitionPenalty}`);
    const words = Math.ceil(vocab / 32);
    const penalise = repetitionPenalty !== 1;
    if (penalise && (!seen || seen.dtype !== 'u32' || seen.numel !== rows * words)) {
      throw new ShapeError(name, `repetitionPenalty ${repetitionPenalty} needs a u32 [${rows}, ${words}] seen bitmap (Sampler.seenBitmap)${seen ? `, got ${seen.dtype} [${seen.shape.join(', ')}]` : ''}`);
    }
    if (!(temperature >= 0)) throw new ShapeError(name, `temperature must be ≥ 0, got ${temperature}`);
    if (!Number.isInteger(topK) || topK < 0) throw new ShapeError(name, `topK must be a non-negative integer, got ${topK}`);
    if (!(topP > 0 && topP <= 1)) throw new ShapeError(name, `topP must be in (0, 1], got ${topP}`);
    const stepIn = typeof rng.step === 'number' ? this.zeroStep : rng.step;
    const step = typeof rng.step === 'number' ? rng.step : 0;
    if (stepIn.dtype !== 'u32' || stepIn.numel !== 1) throw new ShapeError(name, `a step tensor must be u32 [1], got ${stepIn.dtype} [${stepIn.shape.join(', ')}]`);
    for (const [k, v] of [['seed', rng.seed], ['step', step]] as const) {
      if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) throw new ShapeError(name, `${k} must be a u32, got ${v}`);
    }
    const greedy = temperature < GREEDY_BELOW;
    const k = topK >= vocab ? 0 : topK;
    const chunks = Math.ceil(vocab / SAMPLE_CHUNK);
    const uniforms = {
      vocab,
      inv_temp: greedy ? 1 : 1 / temperature,
      greedy: greedy ? 1 : 0,
      top_k: k,
      top_p: topP,
      seed: rng.seed,
      step,
      full_logprob: logprobs === 'full' ? 1 : 0,
      chunks,
      log_min_p: minP > 0 ? Math.log(minP) : NO_MIN_P,
      penalty: repetitionPenalty,
      words,
      rows,
    };
    if (penalise) rec.dispatch(this.penalizeK, { logits_rw: logits, seen: seen! }, grid1d(rows * vocab, WG), uniforms);
    if (!greedy && (k > 0 || topP < 1 || minP > 0)) {
      rec.dispatch(this.kernel, { logits, ids: out.ids, logp: out.logp, step_in: stepIn }, rows, uniforms);
    } else {
      const part = this.scratch(rows * chunks);
      rec.dispatch(this.chunksK, { logits, part }, [chunks, rows], uniforms);
      rec.dispatch(this.finishK, { logits, part_in: part, ids: out.ids, logp: out.logp, step_in: stepIn }, rows, uniforms);
    }
    rewrite?.(rec);
    if (penalise) rec.dispatch(this.markK, { seen: seen!, ids_in: out.ids }, Math.ceil(rows / WG), uniforms);
  }

  /** The stats scratch, at least `n` vec4s (reallocated only when a call needs more). */
  private scratch(n: number): Tensor {
    if (!this.part || this.part.numel < 4 * n) {
      this.part?.release();
      this.part = this.gpu.tensor([4 * n], 'f32', 'sampling.chunks');
    }
    return this.part;
  }

}
