// Per-token log-probability of the target token and entropy over the vocabulary, at a temperature
// (TRL divides the logits by the sampling temperature; entropy in nats, spec/rl-loss.md A6), and
// the backward into the hidden states.
//
// The LM head (tied to the embedding table, 151,936 rows, stored 4-bit) is abstracted as `LmHead`;
// the vocabulary is walked in chunks so that only a [T, chunk] buffer of logits ever exists.
import { ShapeError, Tensor, type Bindings, type Gpu, type Kernel, type Recorder } from '../gpu';

/** The output projection hidden -> vocabulary, evaluated one vocabulary range at a time. */
export interface LmHead {
  readonly vocab: number;
  readonly hidden: number;
  /** out[t, j] = logit of token v0 + j for row t of h ([T, hidden]); out is [T, v1 - v0]. */
  logits(rec: Recorder, h: Tensor, v0: number, v1: number, out: Tensor): void;
  /** dh[t, :] += Σ_j dlogits[t, j] · W[v0 + j, :]  (accumulates into dh). */
  backward(rec: Recorder, dlogits: Tensor, v0: number, v1: number, dh: Tensor): void;
}

export interface LogProbOptions {
  /** Most tokens (rows) per call; the chunk workspace is sized for it once. */
  maxTokens: number;
  /** Vocabulary columns per chunk (default 8192). */
  chunk?: number;
}

/** Outputs of the forward, each [T] f32; `saved` [T, 2] f32 (lse, E[z]) is what the backward needs. */
export interface LogProbOutputs {
  logp: Tensor;
  entropy: Tensor;
  saved: Tensor;
}

const WG = 256;
const STATS_UNIFORMS = { tokens: 'u32', width: 'u32', v0: 'u32', inv_temp: 'f32', first: 'u32', last: 'u32' } as const;
const GRAD_UNIFORMS = { tokens: 'u32', width: 'u32', v0: 'u32', inv_temp: 'f32' } as const;

export class LogProb {
  private constructor(
    private readonly statsK: Kernel,
    private readonly gradK: Kernel,
    private readonly gradEntropyK: Kernel,
    /** [maxTokens * chunk] f32: one chunk of logits, then of their gradient. */
    private readonly work: Tensor,
    /** [maxTokens, 4] f32: the running (max, Σe, Σe·(z-max), z_target) per row. */
    private readonly state: Tensor,
    readonly maxTokens: number,
    readonly chunk: number,
  ) {}

  static async create(gpu: Gpu, { maxTokens, chunk = 8192 }: LogProbOptions): Promise<LogProb> {
    if (!(maxTokens > 0 && chunk > 0)) throw new ShapeError('logprob', `maxTokens ${maxTokens} and chunk ${chunk} must be positive`);
    if (maxTokens > gpu.limits.maxComputeWorkgroupsPerDimension) {
      throw new ShapeError('logprob', `maxTokens ${maxTokens} exceeds the grid limit ${gpu.limits.maxComputeWorkgroupsPerDimension}`);
    }
    const statsK = gpu.kernelOnUse({ shader: 'logprob', entry: 'chunk_stats', uniforms: STATS_UNIFORMS });
    const gradK = gpu.kernelOnUse({ shader: 'logprob', entry: 'chunk_grad', uniforms: GRAD_UNIFORMS });
    const gradEntropyK = gpu.kernelOnUse({ name: 'logprob.chunk_grad_entropy', shader: 'logprob', entry: 'chunk_grad', defines: { ENTROPY: true }, uniforms: GRAD_UNIFORMS });
    // Acquired once: the per-call paths create no buffers.
    const work = gpu.tensor([maxTokens * chunk], 'f32', 'logprob.chunk');
    const state = gpu.tensor([maxTokens, 4], 'f32', 'logprob.state');
    return new LogProb(statsK, gradK, gradEntropyK, work, state, maxTokens, chunk);
  }

  /** A [T, width] view of the chunk workspace. */
  private chunkView(tokens: number, width: number): Tensor {
    return new Tensor(this.work.buffer, [tokens, width], 'f32', 'logprob.chunk', this.work.byteOffset);
  }

  private checkCommon(name: string, head: LmHead, h: Tensor, targets: Tensor, temperature: number): number {
    if (h.dtype !== 'f32' || h.shape.length !== 2 || h.shape[1] !== head.hidden) {
      throw new ShapeError(name, `h must be f32 [T, ${head.hidden}], got ${h.dtype} [${h.shape.join(', ')}]`);
    }
    const tokens = h.shape[0];
    if (tokens < 1 || tokens > this.maxTokens) throw new ShapeError(name, `T = ${tokens} outside [1, ${this.maxTokens}]`);
    if ((targets.dtype !== 'u32' && targets.dtype !== 'i32') || targets.numel !== tokens) {
      throw new ShapeError(name, `targets must be u32/i32 [${tokens}], got ${targets.dtype} [${targets.shape.join(', ')}]`);
    }
    if (!(temperature > 0)) throw new ShapeError(name, `temperature must be > 0, got ${temperature}`);
    return tokens;
  }

  private checkRow(name: string, what: string, t: Tensor, tokens: number, cols = 1): void {
    if (t.dtype !== 'f32' || t.numel !== tokens * cols) {
      throw new ShapeError(name, `${what} must be f32 with ${tokens * cols} elements, got ${t.dtype} [${t.shape.join(', ')}]`);
    }
  }

  /** Return the chunk workspace to the pool (the op is unusable afterwards). */
  release(): void {
    this.work.release();
    this.state.release();
  }

  /** log p(target) and entropy H per row of h, at `temperature`; also the statistics for `backward`. */
  forward(rec: Recorder, head: LmHead, h: Tensor, targets: Tensor, temperature: number, out: LogProbOutputs): void {
    const tokens = this.checkCommon('logprob.forward', head, h, targets, temperature);
    this.checkRow('logprob.forward', 'logp', out.logp, tokens);
    this.checkRow('logprob.forward', 'entropy', out.entropy, tokens);
    this.checkRow('logprob.forward', 'saved', out.saved, tokens, 2);
    for (let v0 = 0; v0 < head.vocab; v0 += this.chunk) {
      const v1 = Math.min(head.vocab, v0 + this.chunk);
      const chunk = this.chunkView(tokens, v1 - v0);
      head.logits(rec, h, v0, v1, chunk);
      rec.dispatch(
        this.statsK,
        { logits: chunk, targets, state: this.state, logp: out.logp, entropy: out.entropy, saved: out.saved },
        tokens,
        { tokens, width: v1 - v0, v0, inv_temp: 1 / temperature, first: v0 === 0 ? 1 : 0, last: v1 === head.vocab ? 1 : 0 },
      );
    }
  }

  /**
   * dh += ∂L/∂h for L = Σ_t gradLogp[t]·log p_t (+ Σ_t gradEntropy[t]·H_t when given), recomputing
   * each chunk's logits. `saved` comes from `forward` on the same h, targets and temperature.
   */
  backward(
    rec: Recorder,
    head: LmHead,
    h: Tensor,
    targets: Tensor,
    temperature: number,
    saved: Tensor,
    gradLogp: Tensor,
    gradEntropy: Tensor | null,
    dh: Tensor,
  ): void {
    const name = 'logprob.backward';
    const tokens = this.checkCommon(name, head, h, targets, temperature);
    this.checkRow(name, 'saved', saved, tokens, 2);
    this.checkRow(name, 'gradLogp', gradLogp, tokens);
    if (gradEntropy) this.checkRow(name, 'gradEntropy', gradEntropy, tokens);
    this.checkRow(name, 'dh', dh, tokens, head.hidden);
    for (let v0 = 0; v0 < head.vocab; v0 += this.chunk) {
      const v1 = Math.min(head.vocab, v0 + this.chunk);
      const chunk = this.chunkView(tokens, v1 - v0);
      head.logits(rec, h, v0, v1, chunk);
      const bindings: Bindings = { dlogits: chunk, gtargets: targets, gsaved: saved, grad_logp: gradLogp };
      if (gradEntropy) bindings.grad_entropy = gradEntropy;
      rec.dispatch(gradEntropy ? this.gradEntropyK : this.gradK, bindings, [Math.ceil((v1 - v0) / WG), tokens], {
        tokens,
        width: v1 - v0,
        v0,
        inv_temp: 1 / temperature,
      });
      head.backward(rec, chunk, v0, v1, dh);
    }
  }
}
