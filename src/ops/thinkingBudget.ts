// The thinking budget on the GPU (shaders/thinking_budget.wgsl): the decode loop records it after
// each step's draw, so that forced tokens need no CPU round trip and every row of a group is
// forced independently, at its own step.
import { ShapeError, type Gpu, type Kernel, type Recorder, type Tensor } from '../gpu';

const WG = 64;

export interface ThinkingBudgetSettings {
  /** Thinking tokens a row may draw before the end sequence is forced (vLLM `thinking_token_budget`). */
  budget: number;
  /** The prompt opened the block (a thinking model's generation prompt ends in <think>). */
  opened: boolean;
  /** The id that opens a block when the model writes it itself (<think>). */
  startId: number;
  /** The ids of the end sequence (</think>: one token in Qwen's vocabulary). */
  endIds: readonly number[];
}

export class ThinkingBudget {
  private constructor(
    private readonly kernel: Kernel,
    private readonly settings: ThinkingBudgetSettings,
    private readonly state: Tensor,
    private readonly endIds: Tensor,
    private readonly rows: number,
  ) {}

  /** The rows' state (every row before or inside the block, by `opened`) and the end ids, on the GPU. */
  static create(gpu: Gpu, rows: number, s: ThinkingBudgetSettings): ThinkingBudget {
    const op = 'thinking_budget';
    if (!Number.isInteger(s.budget) || s.budget < 0 || s.budget > 0xffffffff) throw new ShapeError(op, `budget must be a non-negative integer, got ${s.budget}`);
    if (s.endIds.length === 0) throw new ShapeError(op, 'the end sequence is empty');
    for (const id of [s.startId, ...s.endIds]) if (!Number.isInteger(id) || id < 0 || id > 0xffffffff) throw new ShapeError(op, `token id ${id} is not a u32`);
    if (!Number.isInteger(rows) || rows < 1 || rows > 65535 * WG) throw new ShapeError(op, `rows must be in [1, ${65535 * WG}], got ${rows}`);
    const kernel = gpu.kernelOnUse({ shader: 'thinking_budget', entry: 'force_end', constants: { WG }, uniforms: { rows: 'u32', budget: 'u32', start_id: 'u32', end_len: 'u32' } });
    const init = new Uint32Array(3 * rows);
    if (s.opened) for (let r = 0; r < rows; r++) init[3 * r] = 1;
    return new ThinkingBudget(kernel, s, gpu.upload(init, [rows, 3], 'u32', 'thinking_budget.state'), gpu.upload(Uint32Array.from(s.endIds), [s.endIds.length], 'u32', 'thinking_budget.end_ids'), rows);
  }

  /** After a step's draw into ids/logp [rows]: count, and force where the budget is spent. */
  record(rec: Recorder, out: { ids: Tensor; logp: Tensor }): void {
    if (out.ids.dtype !== 'u32' || out.ids.numel !== this.rows || out.logp.dtype !== 'f32' || out.logp.numel !== this.rows) {
      throw new ShapeError('thinking_budget', `ids and logp must be u32 and f32 [${this.rows}]`);
    }
    const { budget, startId, endIds } = this.settings;
    rec.dispatch(this.kernel, { ids: out.ids, logp: out.logp, state: this.state, end_ids: this.endIds }, Math.ceil(this.rows / WG), { rows: this.rows, budget, start_id: startId, end_len: endIds.length });
  }

  release(): void {
    this.state.release();
    this.endIds.release();
  }
}
