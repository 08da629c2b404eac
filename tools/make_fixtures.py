"""Reference fixtures for the engine's parity tests, made with transformers + PEFT on the GPU machine.

Run there (see ../shared/device/README.md):  python3 tools/make_fixtures.py --out $OUT/fixtures
It writes, per tiny Qwen3-VL config (two configs that differ in heads, kv heads, head_dim,
mrope_section, DeepStack indexes, vision depth and tied/untied embeddings):
  <name>/                     config.json, sharded bf16 safetensors + model.safetensors.index.json
  <name>/ref/<case>.safetensors   inputs (input_ids, pixel_values, image_grid_thw) and outputs:
      logits [T, vocab] f32, position_ids [3, T], rope_delta, greedy [16] (greedy continuation),
      image_embeds [N, out] and deepstack_<j> [N, out] (vision tower outputs), for the cases
      text (no image), image1 (one image), image2 (two images of different sizes)
  <name>/ref/<case>.q4.safetensors   logits of the same model with the engine's 4-bit format
      applied to the language model's linear layers (see quantize_q4 below), and the KL to f32
  <name>/lora/                PEFT adapter (A random, B random non-zero), the gradients of the sum
      of completion log-probs w.r.t. every LoRA tensor (PEFT names), and the batch used
  <name>/gspo/                a GSPO batch (G completions, rewards, old log-probs), its config, and
      the gradients of the full loss (sequence level, grpo aggregation, beta 0.04) in PEFT names
  tiny-b/lora-dropout/        `--only lora-dropout` (reads the committed tiny-b weights): an adapter
      on a subset of the target modules with lora_dropout, its masks those of the engine
      (dropout_mask below), and the gradients of the sum of two completions' log-probs
  tiny-b/vision-lora/         `--only vision-lora` (reads the committed tiny-b weights): an adapter
      on two language-model projections and on the vision mergers (model.visual.merger.* and every
      model.visual.deepstack_merger_list.<j>.*), A and B random non-zero, the image features with
      it, and the gradients of the sum of two completions' log-probs w.r.t. every LoRA tensor
  tiny-b/vision-lora-blocks/  `--only vision-lora-blocks`: the same with every vision block's
      attn.qkv, attn.proj, mlp.linear_fc1 and mlp.linear_fc2 adapted too
  processor/                  three RGB images of different sizes (raw bytes) and what
      Qwen2VLImageProcessorFast makes of them with Qwen3-VL's settings
The weights are random (no download); computation is in float32 on weights rounded to bf16, with
eager attention, so the engine's f32 path can be compared at 1e-3.
"""

import argparse
import inspect
import json
import math
import os

import numpy as np
import torch
from safetensors.torch import save_file

# Token ids of the tiny models (small vocabulary so the fixtures stay small).
VOCAB = 1024
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 998, 999, 1000, 1001
IM_START, IM_END, NEWLINE = 1010, 1011, 1012

CONFIGS = {
    "tiny-a": dict(
        text=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, mrope_section=[3, 3, 2]),
        vision=dict(depth=3, hidden_size=32, num_heads=2, intermediate_size=64, num_position_embeddings=64,
                    deepstack_visual_indexes=[0, 1]),
        tie=True,
    ),
    "tiny-b": dict(
        text=dict(hidden_size=96, intermediate_size=160, num_hidden_layers=4, num_attention_heads=6,
                  num_key_value_heads=2, head_dim=32, mrope_section=[6, 5, 5]),
        vision=dict(depth=4, hidden_size=64, num_heads=4, intermediate_size=128, num_position_embeddings=144,
                    deepstack_visual_indexes=[1, 2, 3]),
        tie=False,
    ),
}

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def build_config(spec):
    from transformers import Qwen3VLConfig

    t = spec["text"]
    text = dict(
        vocab_size=VOCAB, hidden_size=t["hidden_size"], intermediate_size=t["intermediate_size"],
        num_hidden_layers=t["num_hidden_layers"], num_attention_heads=t["num_attention_heads"],
        num_key_value_heads=t["num_key_value_heads"], head_dim=t["head_dim"], hidden_act="silu",
        max_position_embeddings=4096, rms_norm_eps=1e-6, initializer_range=0.1,
        tie_word_embeddings=spec["tie"], attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": t["mrope_section"],
                         "mrope_interleaved": True},
        bos_token_id=IM_START, eos_token_id=IM_END, pad_token_id=IM_END,
    )
    v = spec["vision"]
    vision = dict(
        depth=v["depth"], hidden_size=v["hidden_size"], num_heads=v["num_heads"],
        intermediate_size=v["intermediate_size"], hidden_act="gelu_pytorch_tanh", in_channels=3, patch_size=16,
        spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=t["hidden_size"],
        num_position_embeddings=v["num_position_embeddings"], deepstack_visual_indexes=v["deepstack_visual_indexes"],
        initializer_range=0.1,
    )
    return Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE_PAD, video_token_id=VIDEO_PAD,
                         vision_start_token_id=VISION_START, vision_end_token_id=VISION_END,
                         tie_word_embeddings=spec["tie"])


def synthetic_image(h, w, seed):
    """A deterministic RGB image with gradients, a disc and stripes (uint8 [h, w, 3])."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([255 * x / max(w - 1, 1), 255 * y / max(h - 1, 1), 128 + 100 * np.sin(x / 5 + y / 7)], -1)
    cy, cx, r = rng.uniform(0.3, 0.7) * h, rng.uniform(0.3, 0.7) * w, 0.25 * min(h, w)
    img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.integers(0, 255, 3)
    img[:, ::9] = 255 - img[:, ::9]
    return np.clip(img + rng.normal(0, 6, img.shape), 0, 255).astype(np.uint8)


def image_processor(min_pixels, max_pixels):
    from transformers import Qwen2VLImageProcessorFast

    return Qwen2VLImageProcessorFast(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels}, patch_size=16, temporal_patch_size=2,
        merge_size=2, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], do_rescale=True,
        rescale_factor=1 / 255, do_normalize=True, do_convert_rgb=True, resample=3)


def chat_ids(rng, grids, n_text=6):
    """input_ids of a one-turn chat with one <|image_pad|> run per image, as the processor expands it."""
    ids = [IM_START, 11, NEWLINE]
    for g in grids:
        ids += [VISION_START] + [IMAGE_PAD] * (int(g[0]) * int(g[1]) * int(g[2]) // 4) + [VISION_END]
    ids += [int(t) for t in rng.integers(20, 990, n_text)]
    ids += [IM_END, NEWLINE, IM_START, 12, NEWLINE]
    return ids


class Capture:
    """Hooks that record the language model's position_ids and the vision tower's outputs."""

    def __init__(self, model):
        self.position_ids = None
        self.visual = None
        inner = model.model
        inner.language_model.register_forward_pre_hook(self._lm, with_kwargs=True)
        inner.visual.register_forward_hook(self._vis)

    def _lm(self, _module, args, kwargs):
        self.position_ids = kwargs.get("position_ids")

    def _vis(self, _module, _inp, out):
        self.visual = out


def vision_outputs(out):
    """(image_embeds, [deepstack...]) from the vision tower's output, whatever its container."""
    def flat(x):  # some versions split the merged tokens per image
        return torch.cat([flat(e) for e in x]) if isinstance(x, (tuple, list)) else x

    if isinstance(out, tuple):
        return flat(out[0]), [flat(d) for d in out[1]]
    x = getattr(out, "pooler_output", None)
    ds = getattr(out, "deepstack_features", None)
    if x is not None and ds is not None:
        return flat(x), [flat(d) for d in ds]
    raise RuntimeError(f"unknown vision output {type(out)}: {list(vars(out))}")


def forward_kwargs(_model, input_ids, pixel_values, grid):
    from transformers import Qwen3VLForConditionalGeneration

    kw = dict(input_ids=input_ids)
    if pixel_values is not None:
        kw.update(pixel_values=pixel_values, image_grid_thw=grid)
    # transformers 5.x wants the modality of each token beside image_grid_thw; 4.57 has no such argument.
    if "mm_token_type_ids" in inspect.signature(Qwen3VLForConditionalGeneration.forward).parameters:
        kw["mm_token_type_ids"] = (input_ids == IMAGE_PAD).long()
    return kw


def greedy(model, input_ids, pixel_values, grid, steps=16):
    """Greedy continuation by full recomputation (no cache), and the smallest top-2 logit gap seen."""
    ids = input_ids
    out, gaps = [], []
    for _ in range(steps):
        logits = model(**forward_kwargs(model, ids, pixel_values, grid)).logits[0, -1]
        top = torch.topk(logits, 2).values
        gaps.append(float(top[0] - top[1]))
        nxt = int(torch.argmax(logits))
        out.append(nxt)
        ids = torch.cat([ids, torch.tensor([[nxt]], device=ids.device)], 1)
    return out, min(gaps)


# ---- the engine's 4-bit format, applied in PyTorch ------------------------------------------
# Must mirror src/ops/matmulQ4.ts exactly; filled in from that file's documented format.
def quantize_q4(w):
    """The format of shaders/quantize_q4.wgsl: groups of 32 along K; d = m / -8 rounded to f16, with m
    the group's weight of largest magnitude (the first one on ties); codes round(w / d) + 8 clamped
    to 0..15 (round half to even); dequantized (c - 8) * d."""
    n, k = w.shape
    g = w.float().reshape(n, k // 32, 32)
    m = torch.gather(g, -1, g.abs().argmax(-1, keepdim=True))
    d = (m / -8.0).half().float()
    safe = torch.where(d == 0, torch.ones_like(d), d)
    c = torch.where(d == 0, torch.full_like(g, 8.0), torch.clamp(torch.round(g / safe) + 8, 0, 15))
    return ((c - 8) * d).reshape(n, k)


def lm_linear_modules(model):
    for name, mod in model.model.language_model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            yield name, mod


def completion_logps(model, ids, prompt_len, temperature, pixel_values, grid):
    logits = model(**forward_kwargs(model, ids, pixel_values, grid)).logits[0].float() / temperature
    logp = torch.log_softmax(logits[prompt_len - 1:-1], -1)
    return logp.gather(-1, ids[0, prompt_len:, None])[:, 0]


def peft_grads(model):
    grads = {}
    for name, p in model.named_parameters():
        if "lora_" in name and p.grad is not None:
            grads[name.replace(".default", "")] = p.grad.detach().float().cpu().contiguous()
    return grads


def gspo_loss(logps, old, ref, mask, adv, eps_low, eps_high, beta):
    """TRL _compute_loss: importance_sampling_level='sequence', loss_type='grpo' (spec A2-A4)."""
    log_ratio = logps - old
    seq = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)).unsqueeze(-1)
    coef_1 = torch.exp(seq)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token = -torch.min(coef_1 * adv[:, None], coef_2 * adv[:, None])
    kl = torch.exp(ref - logps) - (ref - logps) - 1
    per_token = per_token + beta * kl
    loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    return loss, coef_1[:, 0]


# ---- the engine's lora_dropout mask, applied in PyTorch ----------------------------------------
# Must mirror shaders/lora.wgsl (random_u32, dropout_forward) and src/ops/lora.ts (dropoutSeed):
# element (row, col) of an adapter's input [rows, in] is kept when
#   pcg(pcg(dropoutSeed(seed, step, layer, module)) + row·in + col) ≥ round(p·2³²)   (u32 arithmetic)
# and kept elements are scaled by 1 / (1 - p). `row` is the row of the engine's packed batch (the
# prompt once, then each completion), `module` the index in LORA_TARGETS.
U32 = 0xFFFFFFFF


def pcg(v):
    """PCG hash of u32 values (python ints or int64 tensors holding u32)."""
    state = (v * 747796405 + 2891336453) & U32
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & U32
    return ((word >> 22) ^ word) & U32


def dropout_seed(seed, step, layer, module):
    h = pcg(seed & U32)
    for v in (step, layer, module):
        h = pcg(h ^ (v & U32))
    return h


class HashDropout(torch.nn.Module):
    """PEFT's lora_dropout replaced by the engine's mask; `rows` [T] maps positions to packed rows."""
    rows = None

    def __init__(self, p, seed):
        super().__init__()
        self.p, self.seed = p, seed
        self.threshold = min(U32, round(p * 2 ** 32))

    def forward(self, x):
        n = x.shape[-1]
        rows = HashDropout.rows.to(x.device)
        idx = (rows[:, None] * n + torch.arange(n, device=x.device)[None, :]) & U32
        keep = pcg((pcg(self.seed) + idx) & U32) >= self.threshold
        return x * keep.to(x.dtype) * torch.tensor(1 / (1 - self.p), dtype=torch.float32, device=x.device)


# LM projections and vision modules of the vision-lora fixture. PEFT matches a list entry against a
# module name by equality or as a "."-separated suffix: "merger.linear_fc1" is the final merger's
# alone (a DeepStack merger's name ends in "deepstack_merger_list.<j>.linear_fc1").
VISION_LORA_LM = ["q_proj", "down_proj"]
VISION_LORA_FC = ["linear_fc1", "linear_fc2"]


def load_tiny_b(dev):
    from transformers import Qwen3VLForConditionalGeneration

    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures", "tiny", "tiny-b")
    try:
        model = Qwen3VLForConditionalGeneration.from_pretrained(src, dtype=torch.float32, attn_implementation="eager")
    except TypeError:  # transformers 4.x names it torch_dtype
        model = Qwen3VLForConditionalGeneration.from_pretrained(src, torch_dtype=torch.float32, attn_implementation="eager")
    return src, model.to(dev).eval()


def lora_dropout_fixture(out, dev):
    """tiny-b/lora-dropout: target_modules a subset, lora_dropout 0.25 with the engine's masks."""
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    src, model = load_tiny_b(dev)
    targets = ["q_proj", "v_proj", "o_proj", "up_proj", "down_proj"]
    p, seed, step = 0.25, 1234, 5
    torch.manual_seed(77)
    pmodel = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=p, target_modules=targets, bias="none"))
    with torch.no_grad():
        for pname, prm in pmodel.named_parameters():
            if "lora_B" in pname:
                prm.normal_(0, 0.05)
    replaced = 0
    for mname, mod in pmodel.named_modules():
        drop = getattr(mod, "lora_dropout", None)
        if isinstance(drop, torch.nn.ModuleDict) and "default" in drop:
            parts = mname.split(".")
            layer = int(parts[parts.index("layers") + 1])
            drop["default"] = HashDropout(p, dropout_seed(seed, step, layer, LORA_TARGETS.index(parts[-1])))
            replaced += 1
    layers = model.config.text_config.num_hidden_layers
    assert replaced == layers * len(targets), f"replaced {replaced} dropout modules, expected {layers * len(targets)}"
    prompt_t = load_file(os.path.join(src, "lora", "prompt.safetensors"))
    prompt = prompt_t["input_ids"].tolist()
    pv, grid = prompt_t["pixel_values"].float().to(dev), prompt_t["image_grid_thw"].long().to(dev)
    crng = np.random.default_rng(21)
    comps = [[int(t) for t in crng.integers(20, 990, n)] for n in (6, 4)]
    P = len(prompt)
    pmodel.zero_grad()
    logps, off = [], P
    for c in comps:
        HashDropout.rows = torch.tensor(list(range(P)) + [off + t for t in range(len(c))])
        ids = torch.tensor([prompt + c], device=dev)
        lp = completion_logps(pmodel, ids, P, 1.0, pv, grid)
        lp.sum().backward()
        logps.append(lp.detach().cpu().tolist())
        off += len(c)
    d = os.path.join(out, "tiny-b", "lora-dropout")
    pmodel.save_pretrained(d)
    save_file(peft_grads(pmodel), os.path.join(d, "grads.safetensors"))
    with open(os.path.join(d, "batch.json"), "w") as f:
        json.dump({"prompt": "../lora/prompt.safetensors", "completions": comps, "temperature": 1.0,
                   "dropout": {"p": p, "seed": seed, "step": step}, "target_modules": targets,
                   "hash_check": {"dropout_seed_l1_m4": dropout_seed(seed, step, 1, 4), "pcg_of_12345": pcg(12345)},
                   "objective": "sum of completion log-probs", "logps": logps}, f)
    print(json.dumps({"lora-dropout": {"logps": logps}}))


def vision_lora_fixture(out, dev, blocks=False):
    """tiny-b/vision-lora: LoRA on q_proj, down_proj and the vision mergers (final and DeepStack);
    with `blocks` (tiny-b/vision-lora-blocks) also on every vision block's attn.qkv, attn.proj,
    mlp.linear_fc1 and mlp.linear_fc2."""
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    src, model = load_tiny_b(dev)
    n_ds = len(model.config.vision_config.deepstack_visual_indexes)
    vision = [f"merger.{fc}" for fc in VISION_LORA_FC]
    vision += [f"deepstack_merger_list.{j}.{fc}" for j in range(n_ds) for fc in VISION_LORA_FC]
    block_targets = ["attn.qkv", "attn.proj", "mlp.linear_fc1", "mlp.linear_fc2"] if blocks else []
    targets = VISION_LORA_LM + vision + block_targets
    torch.manual_seed(123)
    pmodel = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets, bias="none"))
    with torch.no_grad():
        for pname, prm in pmodel.named_parameters():
            if "lora_B" in pname:
                prm.normal_(0, 0.05)  # non-zero B so that A's gradient is non-zero too
    adapted = sorted({n.split(".lora_")[0] for n, _ in pmodel.named_parameters() if "lora_A" in n})
    want = [f"model.visual.{v}" for v in vision]
    want += [f"model.visual.blocks.{i}.{b}" for i in range(model.config.vision_config.depth) for b in block_targets]
    got_vision = [a for a in adapted if ".visual." in a]
    assert sorted(a.split("base_model.model.")[-1] for a in got_vision) == sorted(want), got_vision
    layers = model.config.text_config.num_hidden_layers
    assert len(adapted) == layers * len(VISION_LORA_LM) + len(want), adapted

    prompt_t = load_file(os.path.join(src, "lora", "prompt.safetensors"))
    prompt = prompt_t["input_ids"].tolist()
    pv, grid = prompt_t["pixel_values"].float().to(dev), prompt_t["image_grid_thw"].long().to(dev)
    crng = np.random.default_rng(31)
    comps = [[int(t) for t in crng.integers(20, 990, n)] for n in (5, 7)]
    P = len(prompt)
    cap = Capture(pmodel.base_model.model)
    pmodel.zero_grad()
    logps = []
    for c in comps:
        ids = torch.tensor([prompt + c], device=dev)
        lp = completion_logps(pmodel, ids, P, 1.0, pv, grid)
        lp.sum().backward()
        logps.append(lp.detach().cpu().tolist())
    emb, ds = vision_outputs(cap.visual)
    feats = {"image_embeds": emb.detach().float().cpu().contiguous()}
    for j, d in enumerate(ds):
        feats[f"deepstack_{j}"] = d.detach().float().cpu().contiguous()
    d = os.path.join(out, "tiny-b", "vision-lora-blocks" if blocks else "vision-lora")
    pmodel.save_pretrained(d)
    grads = peft_grads(pmodel)
    missing = [a for a in adapted if f"{a.replace('.default', '')}.lora_A.weight" not in grads]
    assert not missing, f"no gradient for {missing}"
    save_file(grads, os.path.join(d, "grads.safetensors"))
    save_file(feats, os.path.join(d, "features.safetensors"))
    with open(os.path.join(d, "batch.json"), "w") as f:
        json.dump({"prompt": "../lora/prompt.safetensors", "completions": comps, "temperature": 1.0,
                   "target_modules": targets, "objective": "sum of completion log-probs", "logps": logps}, f)
    print(json.dumps({os.path.basename(d): {"logps": logps, "grads": len(grads)}}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", choices=["all", "lora-dropout", "vision-lora", "vision-lora-blocks"], default="all")
    args = ap.parse_args()
    if args.only == "lora-dropout":
        lora_dropout_fixture(args.out, "cuda" if torch.cuda.is_available() else "cpu")
        return
    if args.only in ("vision-lora", "vision-lora-blocks"):
        vision_lora_fixture(args.out, "cuda" if torch.cuda.is_available() else "cpu", blocks=args.only == "vision-lora-blocks")
        return
    import transformers
    import peft
    from transformers import Qwen3VLForConditionalGeneration

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    report = {"transformers": transformers.__version__, "peft": peft.__version__, "torch": torch.__version__}
    small = image_processor(32 * 32, 128 * 128)

    for name, spec in CONFIGS.items():
        torch.manual_seed(1234)
        cfg = build_config(spec)
        cfg._attn_implementation = "eager"
        model = Qwen3VLForConditionalGeneration(cfg).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
        root = os.path.join(args.out, name)
        # Save bf16 copies; casting the model itself would also round its rotary inv_freq buffers.
        state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
        if spec["tie"]:
            state.pop("lm_head.weight", None)
        model.save_pretrained(root, max_shard_size="300KB", state_dict=state)
        model.to(dev)
        os.makedirs(os.path.join(root, "ref"), exist_ok=True)
        cap = Capture(model)
        rng = np.random.default_rng(7)
        cases = {
            "text": [],
            "image1": [synthetic_image(64, 96, 1)],
            "image2": [synthetic_image(96, 64, 2), synthetic_image(48, 80, 3)],
        }
        rep = report.setdefault(name, {})
        for case, images in cases.items():
            if images:
                proc = small(images=[torch.from_numpy(i).permute(2, 0, 1) for i in images], return_tensors="pt")
                pv, grid = proc["pixel_values"].float().to(dev), proc["image_grid_thw"].to(dev)
            else:
                pv, grid = None, None
            ids = torch.tensor([chat_ids(rng, [] if grid is None else grid.tolist())], device=dev)
            with torch.no_grad():
                out = model(**forward_kwargs(model, ids, pv, grid))
                logits = out.logits[0].float()
                pos = cap.position_ids
                if pos is None:  # text only: the language model makes plain positions itself
                    pos = torch.arange(ids.shape[1], device=dev).expand(3, -1)
                # some versions prepend a 1-D text position row ([4, B, T]); keep the 3 M-RoPE axes
                pos = pos.reshape(-1, ids.shape[1])[-3:]
                vis = cap.visual if pv is not None else None
                cont, gap = greedy(model, ids, pv, grid)
            t = {
                "input_ids": ids[0].int().cpu(),
                "logits": logits.cpu().contiguous(),
                "position_ids": pos.reshape(3, -1).int().cpu().contiguous(),
                "rope_delta": (pos.max() + 1 - ids.shape[1]).reshape(1).int().cpu(),
                "greedy": torch.tensor(cont, dtype=torch.int32),
            }
            if pv is not None:
                emb, ds = vision_outputs(vis)
                t.update(pixel_values=pv.cpu().contiguous(), image_grid_thw=grid.int().cpu().contiguous(),
                         image_embeds=emb.float().cpu().contiguous())
                for j, d in enumerate(ds):
                    t[f"deepstack_{j}"] = d.float().cpu().contiguous()
                for j, img in enumerate(images):
                    t[f"image_{j}"] = torch.from_numpy(img.copy())
            save_file(t, os.path.join(root, "ref", f"{case}.safetensors"))
            rep[case] = {"tokens": ids.shape[1], "min_top2_gap": gap}

            # The same forward with the engine's 4-bit format on the LM's linear layers.
            # The embedding table and the LM head (tied or not) are 4-bit too; the vision tower is not.
            params = [mod.weight for _, mod in lm_linear_modules(model)]
            params += [model.model.language_model.embed_tokens.weight, model.lm_head.weight]
            unique = list({id(p): p for p in params}.values())
            with torch.no_grad():
                saved = [p.data.clone() for p in unique]
                for p in unique:
                    p.data = quantize_q4(p.data)
                q4 = model(**forward_kwargs(model, ids, pv, grid)).logits[0].float()
                for p, d in zip(unique, saved):
                    p.data = d
            kl = torch.sum(torch.softmax(logits, -1) * (torch.log_softmax(logits, -1) - torch.log_softmax(q4, -1)), -1)
            save_file({"logits": q4.cpu().contiguous()}, os.path.join(root, "ref", f"{case}.q4.safetensors"))
            rep[case]["q4_kl_mean"] = float(kl.mean())
            rep[case]["q4_max_abs_logit_diff"] = float((q4 - logits).abs().max())

        # ---- LoRA gradients of a sum of completion log-probs (PEFT autograd) ---------------
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(99)
        lcfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=LORA_TARGETS, bias="none")
        pmodel = get_peft_model(model, lcfg)
        with torch.no_grad():
            for pname, p in pmodel.named_parameters():
                if "lora_B" in pname:
                    p.normal_(0, 0.05)  # non-zero B so that A's gradient is non-zero too
        images = [synthetic_image(64, 96, 1)]
        proc = small(images=[torch.from_numpy(i).permute(2, 0, 1) for i in images], return_tensors="pt")
        pv, grid = proc["pixel_values"].float().to(dev), proc["image_grid_thw"].to(dev)
        prompt = chat_ids(np.random.default_rng(11), grid.tolist())
        completion = [int(t) for t in np.random.default_rng(12).integers(20, 990, 8)]
        ids = torch.tensor([prompt + completion], device=dev)
        pmodel.zero_grad()
        lp = completion_logps(pmodel, ids, len(prompt), 1.0, pv, grid)
        lp.sum().backward()
        ldir = os.path.join(root, "lora")
        pmodel.save_pretrained(ldir)
        save_file(peft_grads(pmodel), os.path.join(ldir, "grads.safetensors"))
        save_file({"input_ids": torch.tensor(prompt, dtype=torch.int32), "pixel_values": pv.cpu().contiguous(),
                   "image_grid_thw": grid.int().cpu().contiguous()}, os.path.join(ldir, "prompt.safetensors"))
        with open(os.path.join(ldir, "batch.json"), "w") as f:
            json.dump({"prompt": "prompt.safetensors", "completions": [completion], "temperature": 1.0,
                       "objective": "sum of completion log-probs", "logps": lp.detach().cpu().tolist()}, f)

        # ---- GSPO gradients (sequence level, grpo aggregation, beta 0.04, off-policy) ------
        G, L = 4, 8
        lens = [5, 8, 3, 6]
        crng = np.random.default_rng(13)
        comps = [[int(t) for t in crng.integers(20, 990, n)] for n in lens]
        rewards = torch.tensor([1.0, 0.0, 0.5, 0.0], device=dev)
        temperature, beta, eps_low, eps_high = 0.8, 0.04, 0.02, 0.03
        mask = torch.zeros(G, L, device=dev)
        for i, n in enumerate(lens):
            mask[i, :n] = 1
        pmodel.zero_grad()
        logps = torch.zeros(G, L, device=dev)
        refs = torch.zeros(G, L, device=dev)
        rows = []
        for i, c in enumerate(comps):
            ids = torch.tensor([prompt + c], device=dev)
            rows.append(completion_logps(pmodel, ids, len(prompt), temperature, pv, grid))
            with torch.no_grad(), pmodel.disable_adapter():
                refs[i, : len(c)] = completion_logps(pmodel, ids, len(prompt), temperature, pv, grid)
        logps = torch.stack([torch.nn.functional.pad(r, (0, L - r.shape[0])) for r in rows])
        noise = torch.from_numpy(np.random.default_rng(14).normal(0, 0.03, (G, L))).float().to(dev)
        old = (logps.detach() + noise) * mask
        mean = rewards.mean()
        std = rewards.std()  # unbiased, as TRL's nanstd
        adv = (rewards - mean) / (std + 1e-4)
        loss, seq_ratio = gspo_loss(logps, old, refs, mask, adv, eps_low, eps_high, beta)
        loss.backward()
        gdir = os.path.join(root, "gspo")
        os.makedirs(gdir, exist_ok=True)
        save_file(peft_grads(pmodel), os.path.join(gdir, "grads.safetensors"))
        config = {"num_generations": G, "temperature": temperature, "importance_sampling_level": "sequence",
                  "loss_type": "grpo", "epsilon": eps_low, "epsilon_high": eps_high, "beta": beta,
                  "scale_rewards": "group", "max_completion_length": L,
                  "lora": {"r": 4, "lora_alpha": 8, "target_modules": LORA_TARGETS}}
        with open(os.path.join(gdir, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        with open(os.path.join(gdir, "batch.json"), "w") as f:
            json.dump({"prompt": "../lora/prompt.safetensors", "completions": comps, "rewards": rewards.tolist(),
                       "old_logps": [old[i, :n].tolist() for i, n in enumerate(lens)],
                       "expected": {"loss": float(loss), "advantages": adv.tolist(),
                                    "sequence_ratios": seq_ratio.tolist(),
                                    "logps": [logps[i, :n].tolist() for i, n in enumerate(lens)],
                                    "ref_logps": [refs[i, :n].tolist() for i, n in enumerate(lens)]}}, f)
        rep["gspo"] = {"loss": float(loss), "sequence_ratios": seq_ratio.tolist()}
        model = pmodel.unload()

    # ---- processor parity: Qwen3-VL's image settings on three images of different sizes ------
    pdir = os.path.join(args.out, "processor")
    os.makedirs(pdir, exist_ok=True)
    proc = image_processor(65536, 16777216)
    t = {}
    for j, (h, w) in enumerate([(256, 256), (200, 333), (100, 420)]):
        img = synthetic_image(h, w, 20 + j)
        o = proc(images=[torch.from_numpy(img).permute(2, 0, 1)], return_tensors="pt")
        t[f"image_{j}"] = torch.from_numpy(img.copy())
        t[f"pixel_values_{j}"] = o["pixel_values"].half().contiguous()  # values in [-1, 1]; f16 keeps 5e-4
        t[f"image_grid_thw_{j}"] = o["image_grid_thw"].int().contiguous()
    save_file(t, os.path.join(pdir, "images.safetensors"))
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
