// The GSPO/GRPO loop on a Policy (src/rl/policy.ts). One optimizer step:
//   for each of gradient_accumulation_steps micro-batches:
//     at a generation boundary: for each prompt, Policy.generate G completions (seeded), score
//       them (src/rewards), group advantages over the whole generation batch on the GPU, and,
//       when the config needs them, old log-probs (LoRA on, no grad) and reference log-probs
//       (LoRA off, beta > 0) kept on the CPU until the batch is used up
//     for each group of the micro-batch: training forward → loss and dLoss/dlogp (src/ops/rlLoss)
//       → Policy.backward into the LoRA gradients; a group over the token budget goes through
//       the policy in chunks of whole sequences (src/rl/microBatch.ts), with the same loss
//   grad-norm clip + AdamW over every A and B, at the schedule's learning rate.
// The loss of each group is normalised so that the groups add up to TRL's micro-batch loss
// (see `groupLossConfig`). Parameters change only at the end of a step, so a pause inside a step
// abandons it (gradients cleared, CPU state rolled back) and the step is redone on resume: the
// result is the same as without the pause, and a checkpoint always sits on a step boundary.
import type { Gpu, Tensor } from '../gpu';
import { limitRowImages, rowImageCount } from '../data/prompt';
import type { DatasetRow } from '../data/types';
import type { ThinkingMode } from '../model/processor/chat';
import { AdamW } from '../ops/adamw';
import { Lora } from '../ops/lora';
import { RlLoss } from '../ops/rlLoss';
import { scoreSamples } from '../rewards/registry';
import type { CustomRewardEvaluator } from '../rewards/sandbox';
import { EntropyControl } from './entropyControl';
import { batchAdvantages } from './groupLoss';
import { CheckpointError, checkDataCursor, CHECKPOINT_FORMAT, CHECKPOINT_VERSION, tensorNames, type Checkpoint, type DataCursor, type PendingGeneration } from './checkpoint';
import { batchPlan, type BatchPlan, type TrainConfig } from './config';
import { assertFiniteTensor, DivergenceError, explodingWeightsWarning, firstNonFinite, uniformPolicyWarning } from './divergence';
import { defaultEngineConfig, type EngineConfig } from './engineConfig';
import { groupStep, scoreLogps } from './microBatch';
import type { ResolvedLossConfig } from './lossConfig';
import { LossMetrics, rolloutMetrics, rolloutSample, type GroupRollout, type RolloutSample, type StepMetrics } from './metrics';
import type { Policy, PreparedPrompt } from './policy';
import { TrainerRng } from './rng';
import { learningRate, scheduleOf } from './schedule';

/** Rows and how to turn one into model inputs (chat template, images); src/model provides it for Qwen3-VL. */
/** How a row becomes a prompt beyond its system prompt: the chat template's thinking switch (TrainConfig thinking_mode). */
export interface PromptOptions {
  thinkingMode?: ThinkingMode;
}

export interface PromptSource {
  rows: readonly DatasetRow[];
  /** `prompt.thinking` says whether the rendered prompt opened a <think> block. */
  prepare(row: DatasetRow, systemPrompt: string | null, options?: PromptOptions): Promise<{ prompt: PreparedPrompt; text: string }>;
}

export type TrainerState = 'idle' | 'running' | 'paused' | 'stopped' | 'finished' | 'failed';
export type CheckpointReason = 'save_steps' | 'pause' | 'stop' | 'end';

export type TrainerEvent =
  | { type: 'state'; state: TrainerState; step: number }
  | { type: 'step'; metrics: StepMetrics; samples: RolloutSample[] }
  | { type: 'checkpoint'; step: number; reason: CheckpointReason }
  /** Something the user should see that does not stop the run (a custom reward that failed, a prompt skipped). */
  | { type: 'warning'; message: string }
  | { type: 'error'; message: string; name: string };

export interface TrainerOptions {
  gpu: Gpu;
  policy: Policy;
  data: PromptSource;
  config: TrainConfig;
  loss: ResolvedLossConfig;
  runId: string;
  /** Runs custom reward terms; needed only when the config has some. */
  sandbox?: CustomRewardEvaluator;
  onEvent?: (e: TrainerEvent) => void;
  /** Persists a checkpoint (IndexedDB in the browser, a folder in the CLI). */
  saveCheckpoint?: (c: Checkpoint) => Promise<void>;
  /** Continue from here instead of initialising the adapters. */
  resume?: Checkpoint;
  /** How the engine runs it (src/rl/engineConfig.ts; the trainer reads micro_batch_tokens, gradient_checkpointing and phase_buffers). Default defaultEngineConfig(). */
  engine?: EngineConfig;
  /** The resumed run's data changed (allowed by the user): its cursor over the old rows is dropped for a new pass. */
  newData?: boolean;
}

interface LiveGroup {
  row: number;
  prompt: PreparedPrompt;
  rollout: GroupRollout;
  old: Float32Array | null;
  ref: Float32Array | null;
}

interface LiveGeneration {
  consumed: number;
  groups: LiveGroup[];
}

/** The CPU side of the trainer at a step boundary (what a pause rolls back to). */
interface Snapshot {
  rng: number;
  data: DataCursor;
  microStep: number;
  numTokens: number;
  pending: LiveGeneration | null;
}

class Interrupted extends Error {}

export class Trainer {
  private readonly plan: BatchPlan;
  private readonly rng: TrainerRng;
  private cursor: DataCursor;
  private pending: LiveGeneration | null = null;
  private step = 0;
  private microStep = 0;
  private numTokens = 0;
  private readonly history: StepMetrics[] = [];
  private samples: RolloutSample[] = [];
  private state: TrainerState = 'idle';
  private released = false;
  private request: 'pause' | 'stop' | null = null;
  private wake: (() => void) | null = null;
  /** Adapter and optimizer tensors read back at the end of a step that checkpoints (checked there, saved by `checkpoint`). */
  private readBack: { step: number; tensors: Map<string, Float32Array> } | null = null;
  private readonly entropyControl: EntropyControl;

  private constructor(
    private readonly o: TrainerOptions,
    private readonly rl: RlLoss,
    private readonly adamw: AdamW,
  ) {
    this.plan = batchPlan(o.config);
    this.rng = new TrainerRng(o.config.seed);
    this.cursor = { order: [], position: 0 };
    this.entropyControl = new EntropyControl(o.loss);
  }

  static async create(o: TrainerOptions): Promise<Trainer> {
    const c = o.config;
    if (o.data.rows.length === 0) throw new Error('trainer: no prompts to train on');
    if (o.policy.lora.length === 0) throw new Error('trainer: the policy has no LoRA adapters');
    const params = o.policy.lora.flatMap((p) => [
      { param: p.A, grad: p.dA },
      { param: p.B, grad: p.dB },
    ]);
    const [rl, adamw, lora] = await Promise.all([
      RlLoss.create(o.gpu),
      AdamW.create(o.gpu, params, { beta1: c.adam_beta1, beta2: c.adam_beta2, eps: c.adam_epsilon, weightDecay: c.weight_decay, maxGradNorm: c.max_grad_norm }),
      Lora.create(o.gpu),
    ]);
    const t = new Trainer(o, rl, adamw);
    const rec = o.gpu.recorder('trainer.init');
    if (o.resume) await t.restore(o.resume);
    else o.policy.lora.forEach((p) => lora.init(rec, p, t.rng.seed()));
    adamw.zeroGrad(rec);
    await rec.submit();
    return t;
  }

  get currentStep(): number {
    return this.step;
  }

  get metricsHistory(): readonly StepMetrics[] {
    return this.history;
  }

  get latestSamples(): readonly RolloutSample[] {
    return this.samples;
  }

  get status(): TrainerState {
    return this.state;
  }

  /** Give the optimizer's moments and scratch back to the GPU pool once the run is over (not while
   * it runs or is paused): a page that starts run after run would otherwise keep every run's. */
  release(): void {
    if (this.state === 'running' || this.state === 'paused') throw new Error(`a ${this.state} trainer cannot be released; stop it first`);
    if (this.released) return;
    this.released = true;
    this.adamw.release();
  }

  /** Stop at the next prompt boundary, roll back to the last step and checkpoint. */
  pause(): void {
    if (this.state === 'running') this.request = 'pause';
  }

  resume(): void {
    if (this.state !== 'paused') return;
    this.request = null;
    this.wake?.();
  }

  stop(): void {
    this.request = 'stop';
    this.wake?.();
  }

  /** Train until max_steps (or a stop). Errors are reported as an 'error' event and rethrown. */
  async run(): Promise<TrainerState> {
    const c = this.o.config;
    this.setState('running');
    try {
      while (this.step < c.max_steps) {
        const snap = this.snapshot();
        try {
          await this.trainStep();
        } catch (e) {
          if (!(e instanceof Interrupted)) throw e;
          await this.rollback(snap);
          if (!(await this.holdOnPause())) return this.setState('stopped');
          continue;
        }
        if (c.save_steps > 0 && this.step % c.save_steps === 0 && this.step < c.max_steps) await this.checkpoint('save_steps');
      }
      await this.checkpoint('end');
      return this.setState('finished');
    } catch (e) {
      const err = e instanceof Error ? e : new Error(String(e));
      this.emit({ type: 'error', message: err.message, name: err.name });
      this.setState('failed');
      throw err;
    }
  }

  /** Checkpoint, then wait for resume (true) or stop (false). */
  private async holdOnPause(): Promise<boolean> {
    const stopping = this.request === 'stop';
    await this.checkpoint(stopping ? 'stop' : 'pause');
    if (stopping) return false;
    this.setState('paused');
    await new Promise<void>((resolve) => (this.wake = resolve));
    this.wake = null;
    if (this.request === 'stop') return false;
    this.setState('running');
    return true;
  }

  /** One optimizer step; returns its metrics. */
  async trainStep(): Promise<StepMetrics> {
    const { gpu, config: c } = this.o;
    const t0 = performance.now();
    const lossMetrics = new LossMetrics(c.importance_sampling_level === 'sequence', c.beta > 0, {
      lossType: c.loss_type,
      entropyBonus: this.entropyControl.enabled,
      offPolicyMask: c.off_policy_mask_threshold !== null,
    });
    const generated: GroupRollout[] = [];
    let trainedTokens = 0;
    for (let mb = 0; mb < c.gradient_accumulation_steps; mb++) {
      if (this.microStep % (this.plan.stepsPerGeneration * c.num_iterations) === 0) {
        // The pool keeps what the phases used last time (EngineConfig.phase_buffers: both phases',
        // or only the coming one's, so that a step's peak is the larger phase's, not their sum).
        const keep = (this.o.engine ?? defaultEngineConfig()).phase_buffers === 'keep' ? 'all' : 'own';
        gpu.pool.enterPhase('generation', keep);
        this.pending = await this.generate();
        gpu.pool.enterPhase('training', keep);
        generated.push(...this.pending.groups.map((g) => g.rollout));
        this.samples = this.pending.groups.slice(0, c.num_completions_to_print).map((g) => rolloutSample(this.step + 1, g.rollout));
      }
      const gen = this.pending!;
      const slice = gen.consumed % this.plan.stepsPerGeneration;
      const groups = gen.groups.slice(slice * this.plan.promptsPerMicroBatch, (slice + 1) * this.plan.promptsPerMicroBatch);
      const lossCfg = this.groupLossConfig(groups, gen.groups);
      const entropyDenominator = this.entropyDenominator(groups);
      for (const [k, g] of groups.entries()) {
        this.interruptCheck();
        // lora_dropout masks by (seed, the group's place in the run): the same after a resume.
        const dropout = c.lora.lora_dropout > 0 ? { seed: c.seed, step: this.microStep * this.plan.promptsPerMicroBatch + k } : undefined;
        trainedTokens += await this.trainGroup(g, lossCfg, lossMetrics, entropyDenominator, dropout);
      }
      gen.consumed++;
      this.microStep++;
    }

    const losses = lossMetrics.finish();
    // Checked before the update, so a non-finite loss never reaches the adapters.
    if (losses.loss !== undefined && !Number.isFinite(losses.loss)) throw new DivergenceError(this.step + 1, 'the loss', `is ${losses.loss}`);
    const lr = learningRate(scheduleOf(c), this.step);
    const rec = gpu.recorder('trainer.optimizer');
    this.adamw.step(rec, { lr, step: this.step + 1 });
    await rec.submit();
    const [gradNorm] = await gpu.readF32(this.adamw.gradNorm);
    if (!Number.isFinite(gradNorm)) await this.gradientDiverged(gradNorm);
    const zero = gpu.recorder('trainer.zeroGrad');
    this.adamw.zeroGrad(zero);
    await zero.submit();
    this.step++;
    this.entropyControl.endStep();
    const stepTime = (performance.now() - t0) / 1000;
    const metrics: StepMetrics = {
      step: this.step,
      ...rolloutMetrics(generated, c.scale_rewards),
      ...losses,
      ...(this.entropyControl.enabled ? { entropy_coef: this.entropyControl.value } : {}),
      grad_norm: gradNorm,
      learning_rate: lr,
      num_tokens: this.numTokens,
      step_time: stepTime,
      tokens_per_second: trainedTokens / stepTime,
    };
    const warnings = [uniformPolicyWarning(losses.entropy, this.o.policy.vocabSize), ...(this.o.policy.takeWarnings?.() ?? [])];
    // Parameters are read back only where a checkpoint is due: checked there for finiteness and scale.
    if ((c.save_steps > 0 && this.step % c.save_steps === 0) || this.step === c.max_steps) {
      const tensors = await this.readTensors();
      for (const [name, values] of tensors) assertFiniteTensor(this.step, name, values);
      if (this.o.saveCheckpoint) this.readBack = { step: this.step, tensors };
      warnings.push(explodingWeightsWarning([...tensors].filter(([name]) => !name.includes('.exp_avg'))));
    }
    const said = warnings.filter((w): w is string => w !== null);
    if (said.length > 0) Object.assign(metrics, { warnings: said });
    if (this.step % c.logging_steps === 0 || this.step === c.max_steps) this.history.push(metrics);
    this.emit({ type: 'step', metrics, samples: this.samples });
    return metrics;
  }

  /** Names the first adapter gradient that is not finite (the update has used it: nothing is saved after this). */
  private async gradientDiverged(gradNorm: number): Promise<never> {
    for (const p of this.o.policy.lora) {
      const n = tensorNames(p.name);
      for (const [name, grad] of [[n.A, p.dA], [n.B, p.dB]] as const) {
        const values = await this.o.gpu.readF32(grad);
        const at = firstNonFinite(values);
        if (at >= 0) throw new DivergenceError(this.step + 1, `the gradient of ${name}`, `holds ${values[at]} at element ${at} (grad_norm ${gradNorm})`);
      }
    }
    throw new DivergenceError(this.step + 1, 'grad_norm', `is ${gradNorm}: the squared gradients overflow f32`);
  }

  /**
   * The loss settings of one group so that the groups of a micro-batch add up to TRL's loss over
   * the micro-batch: grpo and dr_grpo divide by the micro-batch's sequences (P groups of G), bnpo
   * by its tokens, dapo by the generation batch's tokens (TRL's num_items_in_batch).
   */
  private groupLossConfig(micro: readonly LiveGroup[], generation: readonly LiveGroup[]): ResolvedLossConfig {
    const base = this.o.loss;
    const ga = this.o.config.gradient_accumulation_steps;
    const tokens = (gs: readonly LiveGroup[]) => gs.reduce((n, g) => n + this.lossMask(g).count, 0);
    switch (base.loss_type) {
      case 'grpo':
      case 'sapo':
      case 'luspo':
      case 'dr_grpo':
        return { ...base, gradient_accumulation_steps: ga * micro.length };
      case 'bnpo':
        return { ...base, loss_type: 'dapo', num_items_in_batch: Math.max(tokens(micro), 1) * ga };
      case 'dapo':
      case 'cispo':
      case 'vespo':
        return { ...base, num_items_in_batch: tokens(generation) };
    }
  }

  /** [G·T] loss mask: completion tokens, without truncated completions when so configured. */
  private lossMask(g: LiveGroup, T = Math.max(1, ...g.rollout.completions.map((x) => x.tokens.length))): { mask: Float32Array; count: number } {
    const mask = new Float32Array(g.rollout.completions.length * T);
    let count = 0;
    g.rollout.completions.forEach((x, i) => {
      if (this.o.config.mask_truncated_completions && !x.terminated) return;
      for (let t = 0; t < x.tokens.length; t++) mask[i * T + t] = 1;
      count += x.tokens.length;
    });
    return { mask, count };
  }

  /**
   * Row `index` as the config's image options make it: image_only_mode, and at most
   * max_images_per_message images, and at most `budget` (what max_images_per_step leaves in this
   * generation batch). Each drop is a warning unless `quiet` (a resumed generation re-preparing its rows).
   */
  private imageLimited(index: number, budget: number, quiet = false): DatasetRow {
    const c = this.o.config;
    const row = this.o.data.rows[index];
    const perMessage = c.max_images_per_message ?? Infinity;
    const maxImages = Math.min(perMessage, budget);
    const { row: limited, dropped } = limitRowImages(row, { maxImages: Number.isFinite(maxImages) ? maxImages : null, imageOnly: c.image_only_mode });
    if (dropped > 0 && !quiet) {
      const count = rowImageCount(row);
      const why = [
        ...(count > perMessage ? [`max_images_per_message = ${c.max_images_per_message}`] : []),
        ...(budget < Math.min(count, perMessage) ? [`max_images_per_step = ${c.max_images_per_step} (${budget} left in this generation batch)`] : []),
      ];
      this.emit({ type: 'warning', message: `prompt ${row.id} (row ${index}): ${dropped} of its ${count} images dropped, the first ${count - dropped} kept: ${why.join(' and ')}` });
    }
    return limited;
  }

  private async nextRow(imageBudget: number): Promise<{ row: number; prompt: PreparedPrompt; text: string }> {
    const { data, config: c } = this.o;
    for (let tries = 0; tries < data.rows.length; tries++) {
      if (this.cursor.position >= this.cursor.order.length) this.cursor = { order: this.rng.permutation(data.rows.length), position: 0 };
      const row = this.cursor.order[this.cursor.position++];
      let prepared: Awaited<ReturnType<PromptSource['prepare']>>;
      try {
        prepared = await data.prepare(this.imageLimited(row, imageBudget), c.system_prompt, { thinkingMode: c.thinking_mode });
      } catch (e) {
        // A row that loading accepted but that cannot become a prompt (an image that does not
        // decode) costs that row, never the run.
        this.emit({ type: 'warning', message: `prompt ${data.rows[row].id} (row ${row}) skipped: ${(e as Error).message}` });
        continue;
      }
      const { prompt, text } = prepared;
      if (c.max_prompt_length === null || prompt.inputIds.length <= c.max_prompt_length) return { row, prompt, text };
      this.emit({ type: 'warning', message: `prompt ${data.rows[row].id} has ${prompt.inputIds.length} tokens, over max_prompt_length = ${c.max_prompt_length}; skipped` });
    }
    throw new Error(`trainer: no prompt could be used: each was skipped (longer than max_prompt_length = ${c.max_prompt_length}, or failing to prepare; see the warnings)`);
  }

  private async generate(): Promise<LiveGeneration> {
    const { policy, data, config: c } = this.o;
    const G = c.num_generations;
    const groups: LiveGroup[] = [];
    let imageBudget = c.max_images_per_step ?? Infinity;
    for (let p = 0; p < this.plan.promptsPerGeneration; p++) {
      this.interruptCheck();
      const { row, prompt, text } = await this.nextRow(imageBudget);
      imageBudget -= prompt.images.length;
      const completions = await policy.generate(prompt, G, {
        temperature: c.temperature,
        topP: c.top_p,
        topK: c.top_k,
        minP: c.min_p ?? 0,
        repetitionPenalty: c.repetition_penalty,
        maxNewTokens: c.max_completion_length,
        seed: this.rng.seed(),
        thinkingBudget: c.thinking_budget,
      });
      if (completions.length !== G) throw new Error(`trainer: the policy returned ${completions.length} completions, expected ${G}`);
      const answer = data.rows[row].answer;
      const scores = await scoreSamples(
        c.rewards,
        completions.map((x, index) => ({ completion: x.text, answer, prompt: text, index, thinking: prompt.thinking })),
        this.o.sandbox,
      );
      for (const s of scores) for (const t of s.terms) if (t.error) this.emit({ type: 'warning', message: `reward '${t.name}' on prompt ${data.rows[row].id}: ${t.error} (scored 0)` });
      this.numTokens += G * prompt.inputIds.length + completions.reduce((n, x) => n + x.tokens.length, 0);
      groups.push({
        row,
        prompt,
        old: null,
        ref: null,
        rollout: {
          promptId: data.rows[row].id,
          promptText: text,
          imageKeys: prompt.images.map((im) => im.key),
          answer,
          completions: completions.map((x) => ({ text: x.text, tokens: x.tokens, terminated: x.terminated, samplingLogps: x.samplingLogps })),
          scores,
          advantages: [],
        },
      });
    }
    await this.advantages(groups);
    for (const g of groups) {
      this.interruptCheck();
      const batch = { prompt: g.prompt, completions: g.rollout.completions.map((x) => x.tokens) };
      if (this.plan.recomputeOld) g.old = await scoreLogps(this.o.gpu, policy, batch, { temperature: c.temperature, lora: true });
      if (c.beta > 0) g.ref = await scoreLogps(this.o.gpu, policy, batch, { temperature: c.temperature, lora: false });
    }
    return { consumed: 0, groups };
  }

  /** TRL's group advantages over the whole generation batch, on the GPU (df64), back on the CPU. */
  private async advantages(groups: LiveGroup[]): Promise<void> {
    const { gpu, config: c } = this.o;
    const scores = groups.flatMap((g) => g.rollout.scores);
    const values = scores.map((s) => s.terms.map((t) => t.value));
    const weights = scores[0]?.terms.map((t) => t.weight) ?? [];
    const adv = await batchAdvantages(gpu, this.rl, values, weights, this.o.loss);
    groups.forEach((g, k) => {
      g.rollout.advantages = g.rollout.completions.map((_, i) => adv[k * c.num_generations + i]);
    });
  }

  /** Training forward, loss, backward for one group; returns the tokens it processed. */
  /**
   * TRL's entropy bonus for grpo/bnpo/dr_grpo/sapo/luspo is a mean over the micro-batch's tokens
   * (/ ga): with several groups a micro-batch, their shared normaliser. Not available with
   * top_entropy_quantile < 1, whose tokens (and quantile) are then each group's own.
   */
  private entropyDenominator(micro: readonly LiveGroup[]): number | undefined {
    const base = this.o.loss;
    if (micro.length < 2 || base.top_entropy_quantile < 1 || ['dapo', 'cispo', 'vespo'].includes(base.loss_type)) return undefined;
    return Math.max(micro.reduce((n, g) => n + this.lossMask(g).count, 0), 1) * this.o.config.gradient_accumulation_steps;
  }

  private async trainGroup(g: LiveGroup, lossCfg: ResolvedLossConfig, metrics: LossMetrics, entropyDenominator: number | undefined, dropout?: { seed: number; step: number }): Promise<number> {
    const { gpu, policy, config: c } = this.o;
    const G = g.rollout.completions.length;
    const batch = { prompt: g.prompt, completions: g.rollout.completions.map((x) => x.tokens) };
    const T = Math.max(1, ...batch.completions.map((x) => x.length));
    const { mask, count } = this.lossMask(g, T);
    const pad = (rows: readonly (readonly number[])[]) => {
      const out = new Float64Array(G * T);
      rows.forEach((r, i) => r.forEach((v, t) => (out[i * T + t] = v)));
      return out;
    };
    const sampling = pad(g.rollout.completions.map((x) => x.samplingLogps));
    const engine = this.o.engine ?? defaultEngineConfig();
    const { result: res, logps, entropy } = await groupStep(gpu, policy, this.rl, {
      batch,
      temperature: c.temperature,
      loss: { mask, old: g.old, ref: g.ref, sampling, scores: { advantages: g.rollout.advantages }, config: lossCfg, entropyCoef: this.entropyControl.applied(), entropyDenominator },
      tokenBudget: engine.micro_batch_tokens,
      gradientCheckpointing: engine.gradient_checkpointing,
      dropout,
    });
    let entropySum = 0;
    let gapSum = 0;
    let gapMax = 0;
    const trainer = g.old ?? logps; // on-policy without a recompute, the current forward is the old policy
    for (let k = 0; k < G * T; k++) {
      if (!mask[k]) continue;
      entropySum += entropy[k];
      const gap = Math.abs(trainer[k] - sampling[k]);
      gapSum += gap;
      gapMax = Math.max(gapMax, gap);
    }
    metrics.add({ loss: res.loss, metrics: res.metrics, sequences: G, entropySum, gapSum, gapMax });
    const bonusTokens = res.metrics['entropy_bonus/tokens'];
    this.entropyControl.add(res.metrics['entropy_bonus/entropy_mean'] * bonusTokens, bonusTokens);
    return G * g.prompt.inputIds.length + count;
  }

  private interruptCheck(): void {
    if (this.request) throw new Interrupted();
  }

  private snapshot(): Snapshot {
    const pending = this.pending && { consumed: this.pending.consumed, groups: this.pending.groups };
    return { rng: this.rng.save().state, data: { ...this.cursor }, microStep: this.microStep, numTokens: this.numTokens, pending };
  }

  private async rollback(s: Snapshot): Promise<void> {
    this.rng.load({ state: s.rng });
    this.cursor = s.data;
    this.microStep = s.microStep;
    this.numTokens = s.numTokens;
    this.pending = s.pending;
    this.entropyControl.discardStep();
    const rec = this.o.gpu.recorder('trainer.rollback');
    this.adamw.zeroGrad(rec);
    await rec.submit();
  }

  private setState(s: TrainerState): TrainerState {
    this.state = s;
    this.emit({ type: 'state', state: s, step: this.step });
    return s;
  }

  private emit(e: TrainerEvent): void {
    this.o.onEvent?.(e);
  }

  private async checkpoint(reason: CheckpointReason): Promise<void> {
    if (!this.o.saveCheckpoint) return;
    await this.o.saveCheckpoint(await this.snapshotCheckpoint());
    this.emit({ type: 'checkpoint', step: this.step, reason });
  }

  /** Every adapter's A and B and their AdamW moments, read back from the GPU, by checkpoint name. */
  private async readTensors(): Promise<Map<string, Float32Array>> {
    const { gpu, policy } = this.o;
    const tensors = new Map<string, Float32Array>();
    for (const [i, p] of policy.lora.entries()) {
      const n = tensorNames(p.name);
      const mA = this.adamw.moments[2 * i];
      const mB = this.adamw.moments[2 * i + 1];
      const pairs: [string, Tensor][] = [
        [n.A, p.A],
        [n.B, p.B],
        [n.mA, mA.expAvg],
        [n.vA, mA.expAvgSq],
        [n.mB, mB.expAvg],
        [n.vB, mB.expAvgSq],
      ];
      for (const [name, t] of pairs) tensors.set(name, await gpu.readF32(t));
    }
    return tensors;
  }

  /** Everything a resume needs, read back from the GPU; a tensor that is not finite is a DivergenceError, never saved. */
  async snapshotCheckpoint(): Promise<Checkpoint> {
    const { policy, config } = this.o;
    const tensors = this.readBack?.step === this.step ? this.readBack.tensors : await this.readTensors();
    this.readBack = null;
    for (const [name, values] of tensors) assertFiniteTensor(this.step, name, values);
    const pending: PendingGeneration | null = this.pending && {
      consumed: this.pending.consumed,
      groups: this.pending.groups.map((g) => ({
        ...g.rollout,
        row: g.row,
        old: g.old && Array.from(g.old),
        ref: g.ref && Array.from(g.ref),
      })),
    };
    return {
      meta: {
        format: CHECKPOINT_FORMAT,
        version: CHECKPOINT_VERSION,
        runId: this.o.runId,
        step: this.step,
        microStep: this.microStep,
        numTokens: this.numTokens,
        config,
        rng: this.rng.save(),
        data: { ...this.cursor },
        pending,
        history: [...this.history],
        samples: this.samples,
        adapters: policy.lora.map((p) => ({ name: p.name, r: p.r, in: p.in, out: p.out })),
        entropyControl: this.entropyControl.save(),
        createdAt: Date.now(),
      },
      tensors,
    };
  }

  private async restore(c: Checkpoint): Promise<void> {
    const { gpu, policy, data } = this.o;
    const m = c.meta;
    const want = policy.lora.map((p) => `${p.name} [${p.r}x${p.in} -> ${p.out}]`);
    const have = m.adapters.map((a) => `${a.name} [${a.r}x${a.in} -> ${a.out}]`);
    if (want.join('\n') !== have.join('\n')) throw new CheckpointError(`its adapters do not match the policy's (${have.length} vs ${want.length}; first difference: ${have.find((h, i) => h !== want[i]) ?? 'count'})`);
    checkDataCursor(m, data.rows.length, { order: !this.o.newData });
    for (const [name, values] of c.tensors) {
      const bad = firstNonFinite(values);
      if (bad >= 0) throw new CheckpointError(`tensor ${name} holds ${values[bad]} at element ${bad}`);
    }
    for (const [i, p] of policy.lora.entries()) {
      const n = tensorNames(p.name);
      gpu.write(p.A, c.tensors.get(n.A)!);
      gpu.write(p.B, c.tensors.get(n.B)!);
      gpu.write(this.adamw.moments[2 * i].expAvg, c.tensors.get(n.mA)!);
      gpu.write(this.adamw.moments[2 * i].expAvgSq, c.tensors.get(n.vA)!);
      gpu.write(this.adamw.moments[2 * i + 1].expAvg, c.tensors.get(n.mB)!);
      gpu.write(this.adamw.moments[2 * i + 1].expAvgSq, c.tensors.get(n.vB)!);
    }
    this.step = m.step;
    this.microStep = m.microStep;
    this.numTokens = m.numTokens;
    this.rng.load(m.rng);
    this.cursor = this.o.newData ? { order: [], position: 0 } : { order: [...m.data.order], position: m.data.position };
    this.history.push(...m.history);
    this.samples = m.samples;
    if (m.entropyControl) this.entropyControl.load(m.entropyControl);
    if (m.pending) {
      const groups: LiveGroup[] = [];
      // The same image caps, in the same order, give the prompts the generation was sampled with.
      let imageBudget = this.o.config.max_images_per_step ?? Infinity;
      for (const g of m.pending.groups) {
        const { prompt } = await data.prepare(this.imageLimited(g.row, imageBudget, true), this.o.config.system_prompt, { thinkingMode: this.o.config.thinking_mode });
        imageBudget -= prompt.images.length;
        const { row, old, ref, ...rollout } = g;
        groups.push({ row, prompt, rollout, old: old && Float32Array.from(old), ref: ref && Float32Array.from(ref) });
      }
      this.pending = { consumed: m.pending.consumed, groups };
    }
  }
}
