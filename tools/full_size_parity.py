"""The engine against transformers + PEFT at the published Qwen3-VL sizes (2B, 4B, 8B), random weights.

Run on the GPU machine by tools/full_size_parity.sh, which calls, for one size:
  python3 tools/full_size_parity.py make --size 4b --dir /tmp/m4b
      a random-weight checkpoint as the hub publishes one (bf16, sharded, config.json), a prompt with
      one image (input_ids, pixel_values, image_grid_thw), and the references: transformers' logits
      (float32 arithmetic on the bf16 weights, TF32 off), its greedy continuation, the logits with the
      engine's 4-bit format on the language model (tools/make_fixtures.py quantize_q4), and the
      gradients of one GSPO batch's loss with respect to a PEFT adapter (autograd)
  the engine's CLI on the same files (logits --quant none|q4, generate --temperature 0, grads)
  python3 tools/full_size_parity.py compare --dir /tmp/m4b --out $OUT/parity-4b.json
      the figures BENCHMARKS.md reports, and a verdict against the thresholds below.

Thresholds, and why they fit random weights: both sides compute in f32 on the same bf16-rounded
weights, so they differ only by summation order; f32 rounding through 28-36 layers stays near 1e-5
relative, so 1e-3 relative RMS over all logits leaves a wide margin and still catches any wrong
term (a wrong rotary section, DeepStack row or norm moves logits by 1e-2 or more). With random
weights many positions' top two logits are close: argmax agreement is required only where the
reference's top-2 gap exceeds 1e-3 of the logits' RMS, and greedy tokens are compared up to the
first step whose reference gap is below that. LoRA gradients: 1e-3 relative error per tensor (the
tiny fixtures' bound). The 4-bit logits are compared with the reference computed on the same
4-bit weights (1e-3, as above), and their drift from the unquantized logits is reported, not judged.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import gspo_loss, image_processor, lm_linear_modules, peft_grads, quantize_q4, synthetic_image  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGE_PAD, VISION_START, VISION_END = 151655, 151652, 151653
IM_START, IM_END, NEWLINE = 151644, 151645, 198
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GREEDY_STEPS = 8


def build_config(size):
    from transformers import Qwen3VLConfig

    with open(os.path.join(HERE, "..", "bench", "model-sizes.json")) as f:
        spec = json.load(f)[size]
    t = dict(spec["text"])
    section = t.pop("mrope_section")
    text = dict(**t, hidden_act="silu", max_position_embeddings=262144, rms_norm_eps=1e-6,
                tie_word_embeddings=spec["tied"], attention_bias=False, bos_token_id=151643, eos_token_id=151645,
                pad_token_id=151643, rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                                      "mrope_section": section, "mrope_interleaved": True})
    vision = dict(**spec["vision"], hidden_act="gelu_pytorch_tanh", in_channels=3, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2)
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE_PAD, video_token_id=151656,
                        vision_start_token_id=VISION_START, vision_end_token_id=VISION_END,
                        tie_word_embeddings=spec["tied"])
    cfg._attn_implementation = "eager"
    return cfg, spec["tied"]


def fwd(model, ids, pv, grid):
    return model(input_ids=ids, pixel_values=pv, image_grid_thw=grid, mm_token_type_ids=(ids == IMAGE_PAD).long())


def completion_logps(model, ids, prompt_len, pv, grid):
    logits = fwd(model, ids, pv, grid).logits[0].float()
    return torch.log_softmax(logits[prompt_len - 1:-1], -1).gather(-1, ids[0, prompt_len:, None])[:, 0]


def make(size, root):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3VLForConditionalGeneration

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cfg, tied = build_config(size)
    torch.manual_seed(1234)
    with torch.device("cuda"):
        model = Qwen3VLForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    # The hub's layout: bf16 shards of a few GB and model.safetensors.index.json.
    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    if tied:
        state.pop("lm_head.weight", None)
    model.save_pretrained(root, max_shard_size="4GB", state_dict=state)
    del state
    par = os.path.join(root, "parity")
    os.makedirs(os.path.join(par, "lora"), exist_ok=True)

    proc = image_processor(65536, 16777216)
    img = synthetic_image(256, 320, 5)
    o = proc(images=[torch.from_numpy(img).permute(2, 0, 1)], return_tensors="pt")
    pv, grid = o["pixel_values"].float().cuda(), o["image_grid_thw"].cuda()
    rng = np.random.default_rng(7)
    n_img = int(grid[0].prod()) // 4
    prompt = [IM_START, 872, NEWLINE, VISION_START] + [IMAGE_PAD] * n_img + [VISION_END]
    prompt += [int(t) for t in rng.integers(100, 150000, 24)] + [IM_END, NEWLINE, IM_START, 77091, NEWLINE]
    ids = torch.tensor([prompt], device="cuda")
    save_file({"input_ids": ids[0].int().cpu(), "pixel_values": pv.cpu().contiguous(),
               "image_grid_thw": grid.int().cpu().contiguous()}, os.path.join(par, "prompt.safetensors"))

    ref = {}
    with torch.no_grad():
        ref["logits"] = fwd(model, ids, pv, grid).logits[0].float().cpu().contiguous()
        greedy, gaps, cur = [], [], ids
        for _ in range(GREEDY_STEPS):
            last = fwd(model, cur, pv, grid).logits[0, -1].float()
            top = torch.topk(last, 2).values
            gaps.append(float(top[0] - top[1]))
            greedy.append(int(torch.argmax(last)))
            cur = torch.cat([cur, torch.tensor([[greedy[-1]]], device="cuda")], 1)
    ref["greedy"] = torch.tensor(greedy, dtype=torch.int32)
    ref["greedy_gaps"] = torch.tensor(gaps, dtype=torch.float32)

    # One GSPO batch (sequence level, grpo aggregation, beta 0.04, off-policy) through PEFT autograd.
    torch.manual_seed(99)
    pmodel = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=LORA_TARGETS, bias="none"))
    with torch.no_grad():
        for name, p in pmodel.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    pmodel.save_pretrained(os.path.join(par, "lora"))
    lens = [12, 7]
    crng = np.random.default_rng(13)
    comps = [[int(t) for t in crng.integers(100, 150000, n)] for n in lens]
    G, L = len(comps), max(lens)
    rewards = torch.tensor([1.0, 0.0], device="cuda")
    beta, eps_low, eps_high = 0.04, 3e-4, 4e-4
    mask = torch.zeros(G, L, device="cuda")
    refs = torch.zeros(G, L, device="cuda")
    rows = []
    pmodel.zero_grad()
    for i, c in enumerate(comps):
        mask[i, :len(c)] = 1
        cids = torch.tensor([prompt + c], device="cuda")
        rows.append(completion_logps(pmodel, cids, len(prompt), pv, grid))
        with torch.no_grad(), pmodel.disable_adapter():
            refs[i, :len(c)] = completion_logps(pmodel, cids, len(prompt), pv, grid)
    logps = torch.stack([torch.nn.functional.pad(r, (0, L - r.shape[0])) for r in rows])
    noise = torch.from_numpy(np.random.default_rng(14).normal(0, 1e-4, (G, L))).float().cuda()
    old = (logps.detach() + noise) * mask
    adv = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    loss, _ = gspo_loss(logps, old, refs, mask, adv, eps_low, eps_high, beta)
    loss.backward()
    save_file(peft_grads(pmodel), os.path.join(par, "ref_grads.safetensors"))
    with open(os.path.join(par, "config.json"), "w") as f:
        json.dump({"num_generations": G, "temperature": 1.0, "importance_sampling_level": "sequence",
                   "loss_type": "grpo", "epsilon": eps_low, "epsilon_high": eps_high, "beta": beta,
                   "scale_rewards": "group", "max_completion_length": L}, f, indent=1)
    with open(os.path.join(par, "batch.json"), "w") as f:
        json.dump({"prompt": "prompt.safetensors", "completions": comps, "rewards": rewards.tolist(),
                   "old_logps": [old[i, :n].tolist() for i, n in enumerate(lens)], "expected_loss": float(loss)}, f)
    model = pmodel.unload()
    pmodel = None
    torch.cuda.empty_cache()

    # The engine's 4-bit format on the language model's linear layers, embedding and LM head, in place.
    with torch.no_grad():
        params = [m.weight for _, m in lm_linear_modules(model)]
        params += [model.model.language_model.embed_tokens.weight, model.lm_head.weight]
        for p in {id(p): p for p in params}.values():
            p.data = quantize_q4(p.data)
        ref["logits_q4"] = fwd(model, ids, pv, grid).logits[0].float().cpu().contiguous()
    save_file(ref, os.path.join(par, "ref.safetensors"))
    print(json.dumps({"size": size, "tokens": len(prompt), "image_tokens": n_img, "loss": float(loss)}))


def rel_rms(a, b):
    return float(torch.sqrt(torch.mean((a - b) ** 2)) / torch.sqrt(torch.mean(b ** 2)))


def logits_report(got, want):
    """Relative RMS over all positions; argmax agreement where the reference's top-2 gap is clear."""
    scale = float(torch.sqrt(torch.mean(want ** 2)))
    top = torch.topk(want, 2, -1).values
    clear = (top[:, 0] - top[:, 1]) > 1e-3 * scale
    agree = got.argmax(-1) == want.argmax(-1)
    return {"rel_rms": rel_rms(got, want), "max_abs": float((got - want).abs().max()), "positions": int(want.shape[0]),
            "clear_positions": int(clear.sum()), "argmax_agree_clear": int((agree & clear).sum()),
            "argmax_agree_all": int(agree.sum())}


def compare(root, out):
    par = os.path.join(root, "parity")
    ref = load_file(os.path.join(par, "ref.safetensors"))
    rep = {"size": os.path.basename(root)}
    rep["logits"] = logits_report(load_file(os.path.join(par, "ours.safetensors"))["logits"], ref["logits"])
    rep["logits_q4"] = logits_report(load_file(os.path.join(par, "ours_q4.safetensors"))["logits"], ref["logits_q4"])
    ours_q4 = load_file(os.path.join(par, "ours_q4.safetensors"))["logits"]
    p, q = torch.log_softmax(ref["logits"], -1), torch.log_softmax(ours_q4, -1)
    rep["q4_drift"] = {"rel_rms_vs_unquantized": rel_rms(ours_q4, ref["logits"]),
                       "kl_mean": float((p.exp() * (p - q)).sum(-1).mean()),
                       "argmax_agree": int((ours_q4.argmax(-1) == ref["logits"].argmax(-1)).sum())}
    with open(os.path.join(par, "ours_greedy.json")) as f:
        ours_greedy = json.load(f)["tokens"]
    scale = float(torch.sqrt(torch.mean(ref["logits"] ** 2)))
    want = ref["greedy"].tolist()
    clear = 0
    for gap in ref["greedy_gaps"].tolist():
        if gap <= 1e-3 * scale:
            break
        clear += 1
    rep["greedy"] = {"ours": ours_greedy, "reference": want, "clear_steps": clear,
                     "agree_clear": ours_greedy[:clear] == want[:clear], "min_gap": min(ref["greedy_gaps"].tolist())}
    gw = load_file(os.path.join(par, "ref_grads.safetensors"))
    go = load_file(os.path.join(par, "ours_grads.safetensors"))
    errs = {}
    for name, w in gw.items():
        key = name if name in go else name.replace("base_model.model.", "")
        errs[name] = float(torch.linalg.norm(go[key] - w) / torch.linalg.norm(w))
    vals = sorted(errs.values())
    rep["lora_grads"] = {"tensors": len(vals), "missing": sorted(set(gw) - set(go)), "rel_err_median": vals[len(vals) // 2],
                         "rel_err_max": vals[-1], "worst": max(errs, key=errs.get)}
    rep["pass"] = (rep["logits"]["rel_rms"] < 1e-3 and rep["logits"]["argmax_agree_clear"] == rep["logits"]["clear_positions"]
                   and rep["logits_q4"]["rel_rms"] < 1e-3 and rep["greedy"]["agree_clear"]
                   and rep["lora_grads"]["rel_err_max"] < 1e-3 and not rep["lora_grads"]["missing"])
    with open(out, "w") as f:
        json.dump(rep, f, indent=1)
    print(json.dumps(rep, indent=1))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=["make", "compare"])
    ap.add_argument("--size", choices=["2b", "4b", "8b"])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.step == "make":
        make(a.size, a.dir)
    else:
        compare(a.dir, a.out)
