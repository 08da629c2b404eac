// A small learnable Policy for the trainer's tests: a categorical distribution per completion
// position over a few word tokens, whose logits are base + (α/r)·onehot(position)·Aᵀ·Bᵀ, i.e. a
// real LoRA (src/ops/lora.ts) on the GPU, trained by the real AdamW. The prompt is ignored.
// Softmax, sampling and the logits' gradient run on the CPU in f64 (the test double's own part);
// everything the trainer touches (LoRA tensors, log-prob/entropy/grad tensors) is on the GPU.
import type { Gpu, Tensor } from '../../src/gpu';
import { Lora } from '../../src/ops/lora';
import { createLoraParamSet, type LoraParams } from '../../src/ops/loraParams';
import type { Completion, ForwardOptions, Policy, PreparedPrompt, SamplingOptions, SequenceBatch, TrainingForward } from '../../src/rl/policy';
import type { PromptSource } from '../../src/rl/trainer';
import type { DatasetRow } from '../../src/data/types';
import type { TrainConfigInput } from '../../src/rl/config';

/** Word tokens; the last ends a completion. The best completion scores 2.6 with the seeds' rewards. */
export const TOY_VOCAB = ['<REASONING>', 'x', '</REASONING>', '<SOLUTION>', '3', '7', '</SOLUTION>', ''] as const;
export const TOY_EOS = TOY_VOCAB.length - 1;

export interface ToyPolicyOptions {
  positions?: number;
  r?: number;
  alpha?: number;
}

export class ToyPolicy implements Policy {
  readonly lora: LoraParams[];
  private readonly V = TOY_VOCAB.length;
  private readonly x: Tensor;
  private readonly base: Tensor;
  private readonly logits: Tensor;
  private readonly u: Tensor;
  private readonly t: Tensor;
  private readonly dy: Tensor;
  private kept: { batch: SequenceBatch; probs: Float64Array[]; temperature: number; maxLen: number } | null = null;
  private outputs: Tensor[] = [];
  forwards = 0;
  /** ForwardOptions.gradientCheckpointing of each training forward. */
  readonly checkpointing: (boolean | undefined)[] = [];

  private constructor(
    private readonly gpu: Gpu,
    private readonly op: Lora,
    readonly positions: number,
    r: number,
    alpha: number,
  ) {
    const L = positions;
    // Allocated as the session allocates adapters (views into flat buffers), so that the trainer's
    // optimizer, checkpoints and resumes run AdamW's multi-tensor path.
    this.lora = createLoraParamSet(gpu, [{ name: 'toy.logits', in: L, out: this.V, r, alpha }]);
    const eye = new Float32Array(L * L);
    for (let i = 0; i < L; i++) eye[i * L + i] = 1;
    this.x = gpu.upload(eye, [L, L], 'f32', 'toy.x');
    this.base = gpu.zeros([L, this.V], 'f32', 'toy.base');
    this.logits = gpu.tensor([L, this.V], 'f32', 'toy.logits');
    this.u = gpu.tensor([L, r], 'f32', 'toy.u');
    this.t = gpu.tensor([L, r], 'f32', 'toy.t');
    this.dy = gpu.tensor([L, this.V], 'f32', 'toy.dy');
  }

  static async create(gpu: Gpu, o: ToyPolicyOptions = {}): Promise<ToyPolicy> {
    return new ToyPolicy(gpu, await Lora.create(gpu), o.positions ?? 7, o.r ?? 4, o.alpha ?? 8);
  }

  /** Softmax at `temperature` of each position's logits, LoRA on or off. */
  private async distributions(temperature: number, lora: boolean): Promise<Float64Array[]> {
    const rec = this.gpu.recorder('toy.forward');
    rec.copy(this.base, this.logits);
    this.op.forward(rec, this.lora[0], { x: this.x, y: this.logits, u: this.u }, { enabled: lora });
    await rec.submit();
    const z = await this.gpu.readF32(this.logits);
    return Array.from({ length: this.positions }, (_, p) => {
      const row = Array.from(z.subarray(p * this.V, (p + 1) * this.V), (v) => v / temperature);
      const m = Math.max(...row);
      const e = row.map((v) => Math.exp(v - m));
      const s = e.reduce((a, b) => a + b, 0);
      return Float64Array.from(e, (v) => v / s);
    });
  }

  async generate(_prompt: PreparedPrompt, numSamples: number, o: SamplingOptions): Promise<Completion[]> {
    const probs = await this.distributions(o.temperature, true);
    let state = o.seed >>> 0;
    const uniform = () => {
      state = (state + 0x6d2b79f5) >>> 0;
      let t = state;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    const limit = Math.min(o.maxNewTokens, this.positions);
    return Array.from({ length: numSamples }, () => {
      const tokens: number[] = [];
      const samplingLogps: number[] = [];
      let terminated = false;
      while (tokens.length < limit) {
        const p = probs[tokens.length];
        let v = 0;
        for (let acc = p[0], r = uniform(); acc <= r && v < this.V - 1; acc += p[++v]);
        tokens.push(v);
        samplingLogps.push(Math.log(p[v]));
        if (v === TOY_EOS) {
          terminated = true;
          break;
        }
      }
      return { tokens, text: tokens.map((v) => TOY_VOCAB[v]).join(''), samplingLogps, terminated };
    });
  }

  async forward(batch: SequenceBatch, o: ForwardOptions): Promise<TrainingForward> {
    this.forwards++;
    if (o.train) this.checkpointing.push(o.gradientCheckpointing);
    const probs = await this.distributions(o.temperature, o.lora);
    const G = batch.completions.length;
    const maxLen = Math.max(1, ...batch.completions.map((c) => c.length));
    const logps = new Float32Array(G * maxLen);
    const entropy = new Float32Array(G * maxLen);
    const mask = new Float32Array(G * maxLen);
    batch.completions.forEach((c, i) =>
      c.forEach((v, t) => {
        logps[i * maxLen + t] = Math.log(probs[t][v]);
        entropy[i * maxLen + t] = -probs[t].reduce((a, p) => a + (p > 0 ? p * Math.log(p) : 0), 0);
        mask[i * maxLen + t] = 1;
      }),
    );
    for (const t of this.outputs) t.release();
    const shape = [G, maxLen];
    this.outputs = [
      this.gpu.upload(logps, shape, 'f32', 'toy.logps'),
      this.gpu.upload(entropy, shape, 'f32', 'toy.entropy'),
      this.gpu.upload(mask, shape, 'f32', 'toy.mask'),
    ];
    this.kept = o.train ? { batch, probs, temperature: o.temperature, maxLen } : null;
    return { logps: this.outputs[0], entropy: this.outputs[1], mask: this.outputs[2], maxLen };
  }

  /**
   * d/dz_v of log softmax(z/T)[tok] = (onehot − p)_v / T, summed over the completions; with
   * gradEntropy, d/dz_v of the entropy H = −p_v (log p_v + H) / T too.
   */
  async backward(gradLogps: Tensor, gradEntropy?: Tensor): Promise<void> {
    if (!this.kept) throw new Error('toy policy: backward without a training forward');
    const { batch, probs, temperature, maxLen } = this.kept;
    this.kept = null;
    const g = await this.gpu.readF32(gradLogps);
    const ge = gradEntropy ? await this.gpu.readF32(gradEntropy) : null;
    const dz = new Float32Array(this.positions * this.V);
    batch.completions.forEach((c, i) =>
      c.forEach((tok, t) => {
        const w = g[i * maxLen + t] / temperature;
        const p = probs[t];
        const H = -p.reduce((a, q) => a + (q > 0 ? q * Math.log(q) : 0), 0);
        const we = ge ? ge[i * maxLen + t] / temperature : 0;
        for (let v = 0; v < this.V; v++) dz[t * this.V + v] += w * ((v === tok ? 1 : 0) - p[v]) - we * (p[v] > 0 ? p[v] * (Math.log(p[v]) + H) : 0);
      }),
    );
    this.gpu.write(this.dy, dz);
    const rec = this.gpu.recorder('toy.backward');
    this.op.backward(rec, this.lora[0], { x: this.x, dy: this.dy, u: this.u, t: this.t });
    await rec.submit();
  }

  /** The most likely completion under the current adapter (greedy), as text. */
  async greedyText(): Promise<string> {
    const probs = await this.distributions(1, true);
    let text = '';
    for (const p of probs) {
      const v = p.indexOf(Math.max(...p));
      if (v === TOY_EOS) break;
      text += TOY_VOCAB[v];
    }
    return text;
  }
}

/** Rows whose gold answer is 3, prepared without a tokenizer (the toy policy ignores the prompt). */
export function toyPrompts(count = 4): PromptSource {
  const rows: DatasetRow[] = Array.from({ length: count }, (_, i) => ({
    id: `toy-${i}`,
    images: [],
    question: `How many? (${i})`,
    answer: '3',
    meta: {},
  }));
  return {
    rows,
    prepare: async (row, system) => ({
      prompt: { id: row.id, inputIds: Int32Array.from({ length: 5 + row.id.length }, (_, k) => k), images: [] },
      text: `${system ?? ''}${row.question}`,
    }),
  };
}

/** The trainer tests' run on the toy policy: groups of 8 at temperature 1, a rate high enough to learn in a few steps. */
export const TOY_TRAINER_CONFIG: TrainConfigInput = {
  num_generations: 8,
  per_device_train_batch_size: 8,
  max_completion_length: 7,
  temperature: 1,
  learning_rate: 0.1,
  lr_scheduler_type: 'constant',
  max_grad_norm: 1,
  seed: 7,
  save_steps: 0,
  lora: { r: 4, lora_alpha: 8, target_modules: ['q_proj'] },
};

/** The checkpointing tests' `trainRun` on the toy policy: groups of 4, GRPO, a constant rate. */
export function toyRunConfig(steps: { max_steps: number; save_steps: number }): TrainConfigInput {
  return {
    num_generations: 4,
    per_device_train_batch_size: 4,
    max_completion_length: 7,
    learning_rate: 0.05,
    lr_scheduler_type: 'constant',
    ...steps,
    loss_type: 'grpo',
    lora: { r: 2, lora_alpha: 4, target_modules: ['q_proj'] },
  };
}
