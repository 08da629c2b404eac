"""PyTorch + PEFT on the same GPU, doing the work of bench/model.ts: the side-by-side reference for
the model-level figures (bench/report.ts merges the two JSONs into BENCHMARKS.md's Model section).

transformers' Qwen3VLForConditionalGeneration built from a Qwen3VLConfig with the 2B's values
(spec B1) and random weights (no download), bf16, sdpa attention; PEFT LoRA r=16 (alpha 32) on
q/k/v/o/gate/up/down of the language model, unmerged, as during training.
  prefill  generate() with one new token on a 512-token prompt holding one 448x448 image; the
           vision tower alone (model.visual) timed too.
  decode   generate() for 1 and 8 sequences (num_return_sequences), 128 new tokens, temperature 1,
           min_new_tokens so none stops early; decode = generate(128) - generate(1), 127 steps.
  gspo     8 prompts (one 224x224 image, 96 tokens) x 8 completions of 256 random tokens: per prompt
           (one micro-batch of 8 sequences, TRL's per_device_train_batch_size 8) a forward with
           grad (logits_to_keep = completion + 1, as TRL), the GSPO loss of spec rl-loss.md A2
           (sequence ratio, loss_type 'grpo', eps 3e-4/4e-4, on-policy), backward; then clip 1.0
           and AdamW on the LoRA parameters. No gradient checkpointing (TRL's default).
  memory   torch.cuda.max_memory_allocated (and reserved) over the GSPO step, and over the
           default trainer config's generation + step (one group of 8, 512-token prompt with a
           224x224 image, 256 completion tokens, LoRA r=8).
Times: wall clock with torch.cuda.synchronize around the call, median over repetitions after
warm-up runs of at least 0.3 s, as bench/model.ts times ours.

    python3 bench/torch_model.py [--quick] [--json FILE]
"""

import argparse
import datetime
import json
import os
import statistics
import time
import traceback

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true", help="the shrunk model and work of bench/model.ts --quick")
ap.add_argument("--json", help="write the results here")
ap.add_argument("--only", help="comma-separated sections: prefill,decode,gspo,defaultConfig,drift")
ap.add_argument("--gradient-checkpointing", action="store_true",
                help="the default config's training step with gradient checkpointing (TRL's gradient_checkpointing=True), as ours runs it")
ap.add_argument("--size", default="2b", choices=["2b", "4b", "8b"], help="the published Qwen3-VL-{2B,4B,8B}-Instruct shapes")
ap.add_argument("--default-rank", type=int, default=8, help="the default trainer config's LoRA rank (bench/model.ts --default-rank)")
args = ap.parse_args()

DEV = torch.device("cuda")
GIB = 2**30

# The model and the work: the same numbers as bench/model.ts (keep them in step).
if args.quick:
    TEXT = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                intermediate_size=256, vocab_size=4096, mrope_section=[6, 5, 5])
    VISION = dict(depth=2, hidden_size=64, num_heads=2, intermediate_size=128, out_hidden_size=128,
                  num_position_embeddings=64, deepstack_visual_indexes=[0])
    TOK = dict(image=4000, video=4001, start=3998, end=3999, bos=4002, eos=4003)
    TIED = True
    W = dict(promptLen=48, promptImage=64, newTokens=8, samples=[1, 8], reps=2, prompts=2, G=4, completion=16,
             trainPrompt=24, trainImage=64, rank=16, defaults=dict(prompt=48, image=64, G=4, completion=16, rank=8))
else:
    # The shapes of Qwen3-VL-{2B,4B,8B}-Instruct's published config.json files (one table for every bench).
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "model-sizes.json")) as f:
        _spec = json.load(f)[args.size]
    TEXT, VISION, TIED = _spec["text"], _spec["vision"], _spec["tied"]
    TOK = dict(image=151655, video=151656, start=151652, end=151653, bos=151643, eos=151645)
    W = dict(promptLen=512, promptImage=448, newTokens=128, samples=[1, 8], reps=2, prompts=8, G=8, completion=256,
             trainPrompt=96, trainImage=224, rank=16, defaults=dict(prompt=512, image=224, G=8, completion=256, rank=8))
W["defaults"]["rank"] = args.default_rank

LORA_TARGETS = r"model\.language_model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
RESULT = {"tool": "pytorch", "command": "python3 bench/torch_model.py " + " ".join(
    a for a in ["--quick" if args.quick else "", f"--size {args.size}",
              "--gradient-checkpointing" if args.gradient_checkpointing else "", f"--json {args.json}" if args.json else "",
              f"--default-rank {args.default_rank}" if args.default_rank != 8 else ""] if a),
    "quick": args.quick, "size": args.size, "work": W, "errors": []}


def save():
    RESULT["seconds"] = time.perf_counter() - T0
    if args.json:
        with open(args.json, "w") as f:
            json.dump(RESULT, f, indent=1)


def build_config():
    from transformers import Qwen3VLConfig

    t = dict(TEXT)
    section = t.pop("mrope_section")
    text = dict(**t, hidden_act="silu", max_position_embeddings=262144, rms_norm_eps=1e-6, tie_word_embeddings=TIED,
                attention_bias=False, bos_token_id=TOK["bos"], eos_token_id=TOK["eos"], pad_token_id=TOK["bos"],
                rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": section,
                                 "mrope_interleaved": True})
    vision = dict(**VISION, hidden_act="gelu_pytorch_tanh", in_channels=3, patch_size=16, spatial_merge_size=2,
                  temporal_patch_size=2)
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=TOK["image"],
                        video_token_id=TOK["video"], vision_start_token_id=TOK["start"],
                        vision_end_token_id=TOK["end"], tie_word_embeddings=TIED)
    cfg._attn_implementation = "sdpa"
    return cfg


def text_ids(n, gen):
    hi = min(TOK["start"], TEXT["vocab_size"] - 8)
    return torch.randint(0, hi, (n,), generator=gen).tolist()


def synthetic_prompt(length, side, gen):
    """4 text tokens, <vision_start>, the image's pads, <vision_end>, text to `length` (as bench/model.ts)."""
    grid = side // 16
    pads = grid * grid // 4
    ids = text_ids(4, gen) + [TOK["start"]] + [TOK["image"]] * pads + [TOK["end"]] + text_ids(length - 6 - pads, gen)
    pixels = torch.rand((grid * grid, 3 * 2 * 16 * 16), generator=gen) * 2 - 1
    return {
        "input_ids": torch.tensor([ids], device=DEV),
        "attention_mask": torch.ones((1, length), dtype=torch.long, device=DEV),
        "pixel_values": pixels.to(DEV, torch.bfloat16),
        "image_grid_thw": torch.tensor([[1, grid, grid]], device=DEV),
    }


def timed(f):
    torch.cuda.synchronize()
    t = time.perf_counter()
    f()
    torch.cuda.synchronize()
    return time.perf_counter() - t


# Warm-up runs take at least this long in all, as bench/model.ts's: the GPU's clocks drop while
# the host works alone, and its first few hundred ms of work then run slower.
WARM_UP_S = 0.3


def seconds(reps, f):
    warm = 0.0
    while warm < WARM_UP_S:
        warm += timed(f)
    return statistics.median(timed(f) for _ in range(reps))


def with_lora(base, r):
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=LORA_TARGETS, bias="none")
    return get_peft_model(base, cfg)


def generate(model, prompt, n, new_tokens):
    with torch.no_grad():
        model.generate(**prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True,
                       temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=n, pad_token_id=TOK["bos"])


def step_batch(n_prompts, G, prompt_len, side, completion, gen):
    """Per prompt: its 8 sequences prompt + random completion, and rewards."""
    batches = []
    for _ in range(n_prompts):
        p = synthetic_prompt(prompt_len, side, gen)
        comp = torch.tensor([text_ids(completion, gen) for _ in range(G)], device=DEV)
        ids = torch.cat([p["input_ids"].expand(G, -1), comp], dim=1)
        batches.append({
            "input_ids": ids,
            # transformers 5 needs the token kinds (1: image) to build M-RoPE positions in a forward.
            "mm_token_type_ids": (ids == TOK["image"]).long(),
            "attention_mask": torch.ones_like(ids),
            "pixel_values": p["pixel_values"].repeat(G, 1),
            "image_grid_thw": p["image_grid_thw"].repeat(G, 1),
            "completion": comp,
            "rewards": torch.rand((G,), generator=gen).to(DEV),
        })
    return batches


def gspo_step(model, opt, batches, completion, ga):
    for b in batches:
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], pixel_values=b["pixel_values"],
                    mm_token_type_ids=b["mm_token_type_ids"],
                    image_grid_thw=b["image_grid_thw"], logits_to_keep=completion + 1, use_cache=False)
        logits = out.logits[:, :-1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, b["completion"].unsqueeze(-1)).squeeze(-1)
        mask = torch.ones_like(logp)
        r = b["rewards"]
        adv = ((r - r.mean()) / (r.std() + 1e-4)).unsqueeze(-1)
        # GSPO (spec rl-loss.md A2): on-policy, old = current detached; sequence ratio; 'grpo' normalisation.
        log_ratio = logp - logp.detach()
        seq = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)).unsqueeze(-1)
        c1 = torch.exp(seq)
        c2 = torch.clamp(c1, 1 - 3e-4, 1 + 4e-4)
        per_token = -torch.min(c1 * adv, c2 * adv)
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean() / ga
        loss.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def memory(what):
    return {"what": what, "maxAllocatedGiB": torch.cuda.max_memory_allocated() / GIB,
            "maxReservedGiB": torch.cuda.max_memory_reserved() / GIB, "targetGiB": 6}


def section(name, f):
    if args.only and name not in args.only.split(","):
        return
    t = time.perf_counter()
    try:
        f()
    except Exception as e:  # keep the other sections' figures
        RESULT["errors"].append({"case": name, "error": f"{type(e).__name__}: {e}"})
        traceback.print_exc()
    save()
    print(f"{name}: {time.perf_counter() - t:.1f} s", flush=True)


def main():
    import peft
    import transformers
    from transformers import Qwen3VLForConditionalGeneration

    RESULT.update(device=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda,
                  transformers=transformers.__version__, peft=peft.__version__,
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat())
    torch.manual_seed(0)
    with torch.device(DEV):
        base = Qwen3VLForConditionalGeneration(build_config())
    base = base.to(torch.bfloat16).eval()
    RESULT["weightsGiB"] = sum(p.numel() * p.element_size() for p in base.parameters()) / GIB
    visual = base.model.visual
    model = with_lora(base, W["rank"])
    gen = torch.Generator().manual_seed(1)
    prompt = synthetic_prompt(W["promptLen"], W["promptImage"], gen)

    def prefill():
        def vision():
            with torch.no_grad():
                visual(prompt["pixel_values"], grid_thw=prompt["image_grid_thw"])
        vision_s = seconds(W["reps"], vision)
        total = seconds(W["reps"], lambda: generate(model, prompt, 1, 1))
        RESULT["prefill"] = {"tokens": W["promptLen"], "visionS": vision_s, "totalS": total,
                             "tokensPerS": W["promptLen"] / total, "lmTokensPerS": W["promptLen"] / (total - vision_s)}

    def decode():
        rows = []
        for n in W["samples"]:
            first = seconds(W["reps"], lambda: generate(model, prompt, n, 1))
            full = seconds(W["reps"], lambda: generate(model, prompt, n, W["newTokens"]))
            steps = W["newTokens"] - 1
            rows.append({"samples": n, "steps": steps, "decodeS": full - first, "msPerStep": 1000 * (full - first) / steps,
                         "tokensPerS": n * steps / (full - first)})
            RESULT["decode"] = rows

    def gspo():
        model.train()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
        batches = step_batch(W["prompts"], W["G"], W["trainPrompt"], W["trainImage"], W["completion"],
                             torch.Generator().manual_seed(2))
        gspo_step(model, opt, batches[:1], W["completion"], W["prompts"])  # warm-up
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        s = timed(lambda: gspo_step(model, opt, batches, W["completion"], W["prompts"]))
        tokens = W["prompts"] * W["G"] * (W["trainPrompt"] + W["completion"])
        RESULT["gspo"] = {"prompts": W["prompts"], "completionsPerPrompt": W["G"], "promptTokens": W["trainPrompt"],
                          "completionTokens": W["completion"], "seconds": s, "tokensPerS": tokens / s,
                          "completionTokensPerS": W["prompts"] * W["G"] * W["completion"] / s,
                          "memory": memory(f"GSPO step, {W['prompts']} prompts x {W['G']} x {W['completion']}, "
                                           f"LoRA r={W['rank']}, no gradient checkpointing")}
        del opt, batches
        model.eval()

    def default_config():
        nonlocal model
        d = W["defaults"]
        model = with_lora(model.unload(), d["rank"])
        torch.cuda.empty_cache()
        g = torch.Generator().manual_seed(3)
        p = synthetic_prompt(d["prompt"], d["image"], g)
        opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-5)
        batches = step_batch(1, d["G"], d["prompt"], d["image"], d["completion"], g)

        if args.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()

        def rl_step():
            model.eval()
            gen = timed(lambda: generate(model, p, d["G"], d["completion"]))
            model.train()
            return gen, timed(lambda: gspo_step(model, opt, batches, d["completion"], 1))

        # One RL step first, as a run's first (kernels chosen, the allocator grown), then the
        # medians of three more: the steady state of a training run, as bench/model.ts measures ours.
        rl_step()
        torch.cuda.reset_peak_memory_stats()
        runs = [rl_step() for _ in range(3)]
        gen_s = statistics.median(g for g, _ in runs)
        step_s = statistics.median(t for _, t in runs)
        RESULT["defaultConfig"] = {"generateS": gen_s, "stepS": step_s, "stepsS": [t for _, t in runs],
                                   "memory": memory("default trainer config: generation + training step of one group, "
                                                    + ("gradient checkpointing" if args.gradient_checkpointing else "no gradient checkpointing"))}

    def drift():
        """How far bf16 moves one group's completion log-probs and d(sum of log-probs)/d(LoRA) from
        fp32 on the same weights: the yardstick for our tensor-core GEMMs' drift (bench/model.ts).
        Runs last: it leaves the model in fp32."""
        nonlocal model
        model = with_lora(model.unload(), W["rank"])  # the GSPO rows' rank (default_config left r=8)
        g = torch.Generator().manual_seed(4)
        b = step_batch(1, W["G"], W["trainPrompt"], W["trainImage"], W["completion"], g)[0]
        loras = [(n, q) for n, q in model.named_parameters() if q.requires_grad]
        with torch.no_grad():  # B random, as ours: at PEFT's B = 0 the gradients of A vanish
            for n, q in loras:
                if "lora_B" in n:
                    q.copy_((torch.rand(q.shape, generator=g) * 0.04 - 0.02).to(q.device, q.dtype))

        def run(pixels):
            model.zero_grad(set_to_none=True)
            out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], pixel_values=pixels,
                        mm_token_type_ids=b["mm_token_type_ids"], image_grid_thw=b["image_grid_thw"],
                        logits_to_keep=W["completion"] + 1, use_cache=False)
            logp = torch.log_softmax(out.logits[:, :-1].float(), dim=-1).gather(-1, b["completion"].unsqueeze(-1)).squeeze(-1)
            logp.sum().backward()
            return logp.detach().float(), [q.grad.detach().float().clone() for _, q in loras]

        def features():
            # The vision tower's outputs on the prefill's 448x448 image: (merged embeds, deepstack
            # features), as a tuple or as a model output, by transformers' version.
            with torch.no_grad():
                dtype = next(visual.parameters()).dtype
                out = visual(prompt["pixel_values"].to(dtype), grid_thw=prompt["image_grid_thw"])
            if not isinstance(out, tuple):
                out = (getattr(out, "pooler_output", None), getattr(out, "deepstack_features", None))
            main, deep = out[0], out[1]
            return [t.detach().float() for t in [main, *(deep or [])] if t is not None]

        model.train()
        f16 = features()
        lp16, g16 = run(b["pixel_values"])
        model = model.float()
        f32 = features()
        lp32, g32 = run(b["pixel_values"].float())
        RESULT["visionDrift"] = {"what": "vision features, bf16 against fp32: relative RMS (merged embeds, then deepstack)",
                                 "relRms": [((a - r).norm() / r.norm()).item() for a, r in zip(f16, f32)]}
        d = (lp16 - lp32).abs()
        norm = sorted(((a - r).norm() / r.norm()).item() for a, r in zip(g16, g32))
        of_max = sorted(((a - r).abs().max() / r.abs().max()).item() for a, r in zip(g16, g32))
        RESULT["drift"] = {"what": "bf16 against fp32, same weights and batch", "tokens": d.numel(),
                           "logpMaxAbs": d.max().item(), "logpMeanAbs": d.mean().item(), "gradTensors": len(norm),
                           "gradOfMaxMedian": of_max[len(of_max) // 2], "gradOfMaxWorst": of_max[-1],
                           "gradNormMedian": norm[len(norm) // 2], "gradNormWorst": norm[-1]}

    section("prefill", prefill)
    section("decode", decode)
    section("gspo", gspo)
    section("defaultConfig", default_config)
    section("drift", drift)
    print(json.dumps({k: RESULT.get(k) for k in ["prefill", "decode", "gspo", "defaultConfig", "drift", "visionDrift", "errors"]}, indent=1))


T0 = time.perf_counter()
main()
save()
