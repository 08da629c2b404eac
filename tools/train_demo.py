"""The bundled demo model (issue 7): a tiny Qwen3-VL trained, supervised, on our synthetic tasks.

Run on the GPU machine, on data exported here by `npm run cli -- export-data --out .demo-data`
(src/node/commands/export-data.ts; the row sets, system prompt, chat template and answer styles
are those of src/data/demo.ts):

    python3 tools/train_demo.py --data .demo-data --out OUT_DIR [--train-seconds 300]
    python3 tools/train_demo.py --data .demo-data --out OUT_DIR --smoke     # a few steps, end to end

What it does:
  * a tiny Qwen3VLConfig with Qwen's real vocabulary (151,936, tied embeddings: the table is most
    of the size), a 4-layer decoder of hidden 64 and a 4-block vision tower with DeepStack;
  * prompts exactly as the app builds them: system prompt, the chat template with the image
    first, then the question; image pads expanded to 16 (128x128 images, 8x8 patches, 2x2 merge);
  * targets in one of the styles of the manifest, drawn per sample with the per-task mix, so the
    model is often but not always in the <REASONING>/<SOLUTION> format;
  * AdamW; greedy evaluation on the validation rows every --eval-every steps; training stops at the
    first evaluation whose accuracy reaches --stop-accuracy (partial competence, room for RL),
    else the best evaluated checkpoint is kept when --train-seconds run out;
  * saves bf16 weights, reloads them in float32 with eager attention, and measures the held-out
    accuracy and format compliance (greedy) of exactly the shipped weights; writes greedy
    references for the first held-out rows (reference.json) for test/unit/demo-model.test.ts.

Accuracy is the correctness reward's view (src/rewards/correctness.ts): exactly one
<SOLUTION>...</SOLUTION> block whose value equals the gold number. Format compliance is the
format reward's maximum: exactly one REASONING and one SOLUTION block.
"""

import argparse
import gzip
import inspect
import json
import os
import random
import re
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

TOKENS = {
    "endoftext": "<|endoftext|>", "im_start": "<|im_start|>", "im_end": "<|im_end|>",
    "vision_start": "<|vision_start|>", "vision_end": "<|vision_end|>", "image_pad": "<|image_pad|>",
    "video_pad": "<|video_pad|>",
}
VOCAB = 151936  # Qwen3-VL's embedding rows (the tokenizer uses 151,669 of them)
PATCH, MERGE, TEMPORAL = 16, 2, 2
MIN_GAP = 2e-3  # smallest top-2 logit gap allowed along a reference completion


def log(*args):
    print(*args, flush=True)


# ---- data -----------------------------------------------------------------------------------
def load_set(data, name, size):
    with open(os.path.join(data, f"{name}.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    with gzip.open(os.path.join(data, f"{name}.rgb.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8).reshape(len(rows), size, size, 3)
    return rows, images


def patchify(images):
    """pixel_values [n, patches, 1536] of Qwen2VLImageProcessorFast for uint8 images [n, H, W, 3] (a
    torch tensor) that smart_resize keeps as they are: (x - 127.5) / 127.5 in f32, the frame repeated
    TEMPORAL times, patches in 2x2 merge-block order. Checked against the processor (check_patchify)."""
    x = (images.permute(0, 3, 1, 2).float() - 127.5) / 127.5
    n, c, h, w = x.shape
    gh, gw = h // PATCH, w // PATCH
    x = x[:, None].expand(n, TEMPORAL, c, h, w)
    x = x.reshape(n, TEMPORAL, c, gh // MERGE, MERGE, PATCH, gw // MERGE, MERGE, PATCH)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(n, gh * gw, c * TEMPORAL * PATCH * PATCH).contiguous()


def image_processor(pixels):
    from transformers import Qwen2VLImageProcessorFast

    return Qwen2VLImageProcessorFast(
        size={"shortest_edge": pixels, "longest_edge": pixels}, patch_size=PATCH, temporal_patch_size=TEMPORAL,
        merge_size=MERGE, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], do_rescale=True,
        rescale_factor=1 / 255, do_normalize=True, do_convert_rgb=True, resample=3)


def check_patchify(proc, images):
    out = proc(images=[torch.from_numpy(np.ascontiguousarray(i)).permute(2, 0, 1) for i in images], return_tensors="pt")
    ours = patchify(torch.from_numpy(np.ascontiguousarray(images))).reshape(-1, out["pixel_values"].shape[-1])
    err = float((ours - out["pixel_values"].float()).abs().max())
    grids = out["image_grid_thw"].tolist()
    assert all(g == [1, images.shape[1] // PATCH, images.shape[2] // PATCH] for g in grids), grids
    assert err < 1e-6, f"patchify differs from Qwen2VLImageProcessorFast by {err}"
    return err


class Prompter:
    """Prompts as the app builds them (src/data/prompt.ts buildPrompt + src/model/processor)."""

    def __init__(self, tok, manifest):
        self.tok = tok
        self.template = manifest["chat_template"]
        self.system = manifest["system_prompt"]
        side = manifest["image_size"] // PATCH
        self.grid = (side // MERGE, side // MERGE)
        self.ids = {k: tok.convert_tokens_to_ids(v) for k, v in TOKENS.items()}
        self.rendered = {}

    def text(self, question):
        # Questions repeat (a few phrasings per task): render each once.
        if question not in self.rendered:
            self.rendered[question] = self.render(question)
        return self.rendered[question]

    def render(self, question):
        messages = [{"role": "system", "content": [{"type": "text", "text": self.system}]},
                    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        rendered = self.tok.apply_chat_template(messages, chat_template=self.template, add_generation_prompt=True,
                                                tokenize=False)
        pad = TOKENS["image_pad"]
        return rendered.replace(pad, pad * (self.grid[0] * self.grid[1]))

    def encode(self, texts):
        return self.tok(texts, add_special_tokens=False)["input_ids"]

    def positions(self, ids):
        """M-RoPE positions [3, T] of a sequence with one image (spec B4; checked against the engine's
        getRopeIndex through reference_inputs.json)."""
        gh, gw = self.grid
        pad = self.ids["image_pad"]
        t = len(ids)
        s = ids.index(pad)
        n = gh * gw
        assert all(i == pad for i in ids[s:s + n]) and pad not in ids[s + n:], "one image run expected"
        pos = np.empty((3, t), np.int64)
        pos[:, :s] = np.arange(s)
        k = np.arange(n)
        pos[0, s:s + n] = s
        pos[1, s:s + n] = s + k // gw
        pos[2, s:s + n] = s + k % gw
        pos[:, s + n:] = s + max(gh, gw) + np.arange(t - s - n)
        return pos


# ---- model ----------------------------------------------------------------------------------
def build_config(ids):
    from transformers import Qwen3VLConfig

    text = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, hidden_act="silu", max_position_embeddings=8192, rms_norm_eps=1e-6,
        initializer_range=0.02, tie_word_embeddings=True, attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [6, 5, 5],
                         "mrope_interleaved": True},
        bos_token_id=ids["endoftext"], eos_token_id=ids["im_end"], pad_token_id=ids["endoftext"],
    )
    vision = dict(
        depth=4, hidden_size=128, num_heads=4, intermediate_size=256, hidden_act="gelu_pytorch_tanh", in_channels=3,
        patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL, out_hidden_size=64,
        num_position_embeddings=64, deepstack_visual_indexes=[1, 2], initializer_range=0.02,
    )
    return Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=ids["image_pad"],
                         video_token_id=ids["video_pad"], vision_start_token_id=ids["vision_start"],
                         vision_end_token_id=ids["vision_end"], tie_word_embeddings=True)


def mm_kwargs(model, ids, image_pad):
    """transformers 5.x wants each token's modality beside image_grid_thw; 4.57 has no such argument."""
    if "mm_token_type_ids" in inspect.signature(type(model.model).forward).parameters:
        return {"mm_token_type_ids": (ids == image_pad).long()}
    return {}


def hidden_states(model, ids, pos, pixels, image_pad, past=None):
    """The decoder's last hidden states (and the cache); images only on the first call."""
    kw = dict(input_ids=ids, position_ids=pos, use_cache=past is not None or not model.training)
    if past is not None:
        kw["past_key_values"] = past
    else:
        side = int(round(pixels.shape[1] ** 0.5))
        grid = torch.tensor([[1, side, side]] * ids.shape[0], device=ids.device)
        kw.update(pixel_values=pixels.reshape(-1, pixels.shape[-1]), image_grid_thw=grid, **mm_kwargs(model, ids, image_pad))
    out = model.model(**kw)
    return out.last_hidden_state, out.past_key_values


def batched_vision_attention():
    """(class, stock forward, batched forward) for transformers' Qwen3-VL vision attention. Its sdpa path
    loops over the images of a batch; the demo's images are all 128x128 (equal lengths), so one batched
    call does the same arithmetic much faster. Installed only after it reproduces the stock outputs."""
    from transformers.models.qwen3_vl import modeling_qwen3_vl as m

    def forward(self, hidden_states, cu_seqlens, rotary_pos_emb=None, position_embeddings=None, **kwargs):
        seq = hidden_states.shape[0]
        n = cu_seqlens.numel() - 1
        q, k, v = self.qkv(hidden_states).reshape(seq, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
        cos, sin = position_embeddings
        q, k = m.apply_rotary_pos_emb_vision(q, k, cos, sin)
        q, k, v = (t.reshape(n, seq // n, self.num_heads, -1).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, scale=self.scaling)
        return self.proj(out.transpose(1, 2).reshape(seq, -1))

    return m.Qwen3VLVisionAttention, m.Qwen3VLVisionAttention.forward, forward


def install_batched_vision_attention(model, prompter, prompts, images):
    cls, stock, batched = batched_vision_attention()
    ids = torch.tensor(prompts, device=images.device)
    pos = torch.from_numpy(np.stack([prompter.positions(p) for p in prompts], 1)).to(images.device)
    pixels = patchify(images)
    model.eval()
    with torch.no_grad():
        want, _ = hidden_states(model, ids, pos, pixels, prompter.ids["image_pad"])
        cls.forward = batched
        try:
            got, _ = hidden_states(model, ids, pos, pixels, prompter.ids["image_pad"])
            err = float((got - want).abs().max())
        except Exception as e:  # an API this does not know: keep transformers' own loop
            err = f"{type(e).__name__}: {e}"
    model.train()
    if not isinstance(err, float) or err > 1e-4:
        cls.forward = stock
        log(f"batched vision attention not used ({err})")
    else:
        log(f"batched vision attention installed (max abs diff {err:.2e})")
    return cls, stock


# ---- evaluation -----------------------------------------------------------------------------
def solution_blocks(text, tag):
    return re.findall(f"<{tag}>(.*?)</{tag}>", text, flags=re.S)


def score(text, gold):
    """(in format, correct, any-number correct) as src/rewards reads them for integer answers."""
    reasoning, solution = solution_blocks(text, "REASONING"), solution_blocks(text, "SOLUTION")
    fmt = len(reasoning) == 1 and len(solution) == 1
    correct = False
    if len(solution) == 1:
        value = solution[0].replace("\n", "").strip()
        try:
            correct = value == gold or float(value) == float(gold)
        except ValueError:
            correct = False
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
    loose = bool(numbers) and float(numbers[-1]) == float(gold)
    return fmt, correct, loose


@torch.no_grad()
def greedy_batch(model, prompter, prompts, pixels, max_new):
    """Greedy completions of prompts of equal length, with the KV cache; explicit M-RoPE positions."""
    dev = pixels.device
    im_end = prompter.ids["im_end"]
    ids = torch.tensor(prompts, device=dev)
    pos = torch.from_numpy(np.stack([prompter.positions(p) for p in prompts], 1)).to(dev)
    h, past = hidden_states(model, ids, pos, pixels, prompter.ids["image_pad"])
    nxt = model.lm_head(h[:, -1]).argmax(-1)
    out = [nxt]
    last = pos[:, :, -1:]
    done = nxt == im_end
    for _ in range(max_new - 1):
        if bool(done.all()):
            break
        last = last + 1
        h, past = hidden_states(model, nxt[:, None], last, pixels, prompter.ids["image_pad"], past)
        nxt = model.lm_head(h[:, -1]).argmax(-1)
        out.append(nxt)
        done |= nxt == im_end
    tokens = torch.stack(out, 1).tolist()
    return [t[: t.index(im_end) + 1] if im_end in t else t for t in tokens]


def evaluate(model, prompter, rows, prompt_ids, pixels, max_new=80, batch=64):
    was_training = model.training
    model.eval()
    by_len = {}
    for i, p in enumerate(prompt_ids):
        by_len.setdefault(len(p), []).append(i)
    completions = [None] * len(rows)
    for idx in by_len.values():
        for b in range(0, len(idx), batch):
            part = idx[b:b + batch]
            toks = greedy_batch(model, prompter, [prompt_ids[i] for i in part], pixels[part], max_new)
            for i, t in zip(part, toks):
                completions[i] = t
    model.train(was_training)
    texts = [prompter.tok.decode(t, skip_special_tokens=True) for t in completions]
    per_task = {}
    for row, text in zip(rows, texts):
        fmt, correct, loose = score(text, row["answer"])
        s = per_task.setdefault(row["task"], [0, 0, 0, 0])
        s[0] += 1
        s[1] += fmt
        s[2] += correct
        s[3] += loose

    def summary(s):
        return {"rows": s[0], "format": s[1] / s[0], "accuracy": s[2] / s[0], "answer_accuracy": s[3] / s[0]}

    total = [sum(v[k] for v in per_task.values()) for k in range(4)]
    return {"all": summary(total), **{k: summary(v) for k, v in per_task.items()}}, texts


# ---- training -------------------------------------------------------------------------------
def make_batch(prompter, prompt_ids, targets, images, idx, rng, mix, tasks, dev):
    pad = prompter.ids["endoftext"]
    seqs, starts = [], []
    for i in idx:
        styles = list(mix[tasks[i]].keys())
        style = rng.choices(styles, weights=[mix[tasks[i]][s] for s in styles])[0]
        seqs.append(prompt_ids[i] + targets[style][i] + [prompter.ids["im_end"]])
        starts.append(len(prompt_ids[i]))
    t = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), t), pad, dtype=torch.long)
    labels = torch.full((len(seqs), t), -100, dtype=torch.long)
    pos = np.empty((3, len(seqs), t), np.int64)
    for b, (s, st) in enumerate(zip(seqs, starts)):
        ids[b, : len(s)] = torch.tensor(s)
        labels[b, st: len(s)] = torch.tensor(s[st:])
        # Right padding: pads come after every real token, so causal attention never sees them.
        pos[:, b] = prompter.positions(s + [pad] * (t - len(s)))
    return ids.to(dev), labels.to(dev), torch.from_numpy(pos).to(dev), patchify(images[idx])


def loss_of(model, prompter, ids, labels, pos, pixels):
    h, _ = hidden_states(model, ids, pos, pixels, prompter.ids["image_pad"])
    target = labels[:, 1:]
    keep = target != -100
    logits = model.lm_head(h[:, :-1][keep]).float()
    return F.cross_entropy(logits, target[keep])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", action="store_true", help="a few steps on the validation rows, end to end")
    ap.add_argument("--train-seconds", type=float, default=300)
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--eval-every", type=int, default=400)
    ap.add_argument("--stop-accuracy", type=float, default=0.45)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", help="a model folder to continue training from (default: random weights)")
    ap.add_argument("--anneal", action="store_true",
                    help="decay the learning rate linearly to 2%% of --lr over --train-seconds (after warmup)")
    args = ap.parse_args()
    import transformers
    from transformers import PreTrainedTokenizerFast, Qwen3VLForConditionalGeneration

    t0 = time.time()
    dev = "cuda"
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    with open(os.path.join(args.data, "manifest.json")) as f:
        manifest = json.load(f)
    size = manifest["image_size"]
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(args.data, "tokenizer", "tokenizer.json"))
    prompter = Prompter(tok, manifest)
    log("token ids", prompter.ids)
    assert prompter.ids["im_end"] == 151645 and prompter.ids["image_pad"] == 151655, prompter.ids

    # Our prompts must be the engine's, token for token and position for position.
    with open(os.path.join(args.data, "reference_inputs.json")) as f:
        ref_inputs = json.load(f)
    held_rows, held_images = load_set(args.data, "heldOut", size)
    for ref, row in zip(ref_inputs, held_rows):
        assert ref["id"] == row["id"]
        ids = prompter.encode([prompter.text(row["question"])])[0]
        assert ids == ref["input_ids"], f"{row['id']}: input_ids differ from the engine's\n{ids}\n{ref['input_ids']}"
        pos = prompter.positions(ids)
        assert pos.reshape(-1).tolist() == ref["positions"], f"{row['id']}: positions differ"
    proc = image_processor(manifest["min_pixels"])
    log("patchify vs processor max abs diff", check_patchify(proc, held_images))
    pv0 = float(patchify(torch.from_numpy(held_images[:1].copy())).double().sum())
    assert abs(pv0 - ref_inputs[0]["pixel_sum"]) < 1e-3, (pv0, ref_inputs[0]["pixel_sum"])

    sets = {"validation": load_set(args.data, "validation", size), "heldOut": (held_rows, held_images)}
    train_rows, train_images = sets["validation"] if args.smoke else load_set(args.data, "sft", size)
    styles = manifest["answer_styles"]

    def prepare(rows, images):
        prompts = prompter.encode([prompter.text(r["question"]) for r in rows])
        return prompts, patchify(torch.from_numpy(images.copy()).to(dev))

    train_prompts = prompter.encode([prompter.text(r["question"]) for r in train_rows])
    train_images = torch.from_numpy(train_images.copy()).to(dev)  # uint8; patchified per batch
    targets = {s: prompter.encode([manifest["style_templates"][s].format(reasoning=r["reasoning"], answer=r["answer"])
                                   for r in train_rows]) for s in styles}
    tasks = [r["task"] for r in train_rows]
    eval_sets = {k: (rows, *prepare(rows, images)) for k, (rows, images) in sets.items()}
    if args.smoke:
        eval_sets = {k: (rows[:12], p[:12], px[:12]) for k, (rows, p, px) in eval_sets.items()}
    log(f"data ready: {len(train_rows)} training rows, {time.time() - t0:.1f}s")

    if args.init:
        # Continue from an earlier run's weights (e.g. public/demo): more training time in pieces.
        model = Qwen3VLForConditionalGeneration.from_pretrained(args.init, dtype=torch.float32, attn_implementation="sdpa").to(dev)
        log(f"weights from {args.init}")
    else:
        cfg = build_config(prompter.ids)
        cfg._attn_implementation = "sdpa"
        model = Qwen3VLForConditionalGeneration(cfg).to(dev)
    assert model.lm_head.weight.data_ptr() == model.model.language_model.embed_tokens.weight.data_ptr(), "untied"
    n_params = sum(p.numel() for p in model.parameters())
    log(f"parameters: {n_params:,} (embedding {model.lm_head.weight.numel():,})")
    same = [i for i, p in enumerate(train_prompts[:64]) if len(p) == len(train_prompts[0])][:8]
    vision_cls, stock_forward = install_batched_vision_attention(
        model, prompter, [train_prompts[i] for i in same], train_images[same])
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    clock = {"start": time.time()}

    def lr_factor(s):
        # Time-based, since the budget is time: annealing to a small rate at the end of the budget
        # settles the weights the run keeps.
        left = 1.0 - (time.time() - clock["start"]) / args.train_seconds
        return min(1.0, (s + 1) / args.warmup) * (max(0.02, left) if args.anneal else 1.0)

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)

    max_steps = 8 if args.smoke else args.max_steps
    eval_every = 4 if args.smoke else args.eval_every
    history, best = [], None
    order, at = [], 0
    model.train()
    t_train = time.time()
    clock["start"] = t_train
    step = 0
    stop_reason = "max steps"
    while step < max_steps:
        if at + args.batch > len(order):
            order, at = rng.sample(range(len(train_rows)), len(train_rows)), 0
        idx = order[at: at + args.batch]
        at += args.batch
        ids, labels, pos, pixels = make_batch(prompter, train_prompts, targets, train_images, idx, rng,
                                              manifest["style_mix"], tasks, dev)
        loss = loss_of(model, prompter, ids, labels, pos, pixels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        if step % 50 == 0 or args.smoke:
            log(f"step {step} loss {loss.item():.4f} ({(time.time() - t_train) / step:.3f}s/step)")
        out_of_time = time.time() - t_train > args.train_seconds
        if step % eval_every == 0 or out_of_time:
            rows, prompts, pixels_v = eval_sets["validation"]
            metrics, _ = evaluate(model, prompter, rows, prompts, pixels_v)
            history.append({"step": step, "loss": loss.item(), "seconds": round(time.time() - t_train, 1), **metrics["all"]})
            log(f"eval step {step}: {json.dumps(metrics)}")
            acc = metrics["all"]["accuracy"]
            if best is None or acc > best[0]:
                best = (acc, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
            if not args.smoke and acc >= args.stop_accuracy:
                stop_reason = f"validation accuracy {acc:.3f} >= {args.stop_accuracy}"
                break
            if out_of_time:
                stop_reason = f"time budget of {args.train_seconds}s"
                break
    train_seconds = time.time() - t_train
    log(f"stopped at step {step}: {stop_reason}; keeping step {best[1]} (validation accuracy {best[0]:.3f})")
    model.load_state_dict(best[2])

    # Ship bf16; measure the shipped weights (float32 compute, eager attention) and not the live model.
    os.makedirs(args.out, exist_ok=True)
    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items() if k != "lm_head.weight"}
    model.save_pretrained(args.out, state_dict=state, max_shard_size="1GB")
    with open(os.path.join(args.out, "config.json")) as f:
        config_json = json.load(f)
    config_json["dtype"] = "bfloat16"
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config_json, f, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": prompter.ids["endoftext"], "eos_token_id": [prompter.ids["im_end"], prompter.ids["endoftext"]],
                   "pad_token_id": prompter.ids["endoftext"], "transformers_version": transformers.__version__}, f, indent=2)
    proc.save_pretrained(args.out)
    with open(os.path.join(args.out, "chat_template.json"), "w") as f:
        json.dump({"chat_template": manifest["chat_template"]}, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.data, "tokenizer", name), os.path.join(args.out, name))
    del model, opt

    torch.backends.cuda.matmul.allow_tf32 = False  # the references are compared with the engine's f32
    vision_cls.forward = stock_forward  # the shipped model is measured with transformers' own code
    shipped = Qwen3VLForConditionalGeneration.from_pretrained(args.out, dtype=torch.float32,
                                                              attn_implementation="eager").to(dev).eval()
    rows, prompts, pixels_h = eval_sets["heldOut"]
    held, texts = evaluate(shipped, prompter, rows, prompts, pixels_h)
    log(f"held-out (shipped bf16 weights): {json.dumps(held)}")

    # References for the engine: full recomputation at every step, no cache, float32 eager; per task the
    # first row whose completion has no near-tie (top-2 logit gap >= MIN_GAP), so f32 rounding differences
    # between PyTorch and the engine cannot flip a token.
    candidates = []
    for i, ref in enumerate(ref_inputs):
        ids = list(ref["input_ids"])
        gen, gaps = [], []
        with torch.no_grad():
            for _ in range(96):
                pos = torch.from_numpy(prompter.positions(ids)[:, None]).to(dev)
                h, _ = hidden_states(shipped, torch.tensor([ids], device=dev), pos, pixels_h[i:i + 1], prompter.ids["image_pad"])
                logits = shipped.lm_head(h[0, -1])
                top = torch.topk(logits, 2).values
                gaps.append(float(top[0] - top[1]))
                nxt = int(logits.argmax())
                gen.append(nxt)
                ids.append(nxt)
                if nxt == prompter.ids["im_end"]:
                    break
        candidates.append({"id": ref["id"], "task": rows[i]["task"], "input_ids": ref["input_ids"], "greedy": gen,
                           "min_top2_gap": min(gaps), "text": tok.decode(gen, skip_special_tokens=True)})
        log(f"reference candidate {ref['id']}: {candidates[-1]['text']!r} (min top-2 gap {min(gaps):.4f})")
    refs = []
    for task in manifest["tasks"]:
        mine = [c for c in candidates if c["task"] == task]
        clear = [c for c in mine if c["min_top2_gap"] >= MIN_GAP]
        refs.append(clear[0] if clear else max(mine, key=lambda c: c["min_top2_gap"]))
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump({"note": "greedy completions by tools/train_demo.py (float32, eager) of one held-out row per task, the first without a near-tie",
                   "rows": refs}, f, indent=1)

    report = {
        "transformers": transformers.__version__, "torch": torch.__version__, "argv": sys.argv[1:],
        "parameters": n_params, "train_rows": len(train_rows), "steps": step, "kept_step": best[1],
        "stop_reason": stop_reason, "train_seconds": round(train_seconds, 1), "batch": args.batch, "lr": args.lr,
        "validation_history": history, "held_out": held,
        "held_out_samples": [{"id": r["id"], "answer": r["answer"], "completion": t} for r, t in zip(rows[:9], texts[:9])],
    }
    with open(os.path.join(args.out, "training_report.json"), "w") as f:
        json.dump(report, f, indent=1)
    log(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
