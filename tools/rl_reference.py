"""Independent numpy mirror of TRL's GRPO loss family and of transformers' MinP / repetition-penalty
logits processors; writes the committed fixtures the unit tests compare the WGSL kernels against.

    python3 tools/rl_reference.py            # rewrites test/fixtures/loss/trl-loss-vectors.json
                                             #      and test/fixtures/sampling/processors.json

Formulas read from huggingface/trl f2cd57710ae3 (trl/trainer/grpo_trainer.py: `_compute_loss`,
`get_gamma_weights`, `get_off_policy_mask`, `get_high_entropy_mask`, the vLLM importance-sampling
ratio of `_generate_and_score_completions`) and transformers' generation/logits_process.py
(`MinPLogitsWarper`, `RepetitionPenaltyLogitsProcessor`). Written from their definitions, not copied.

Gradients: TRL detaches some factors (cispo's clamped ratio, vespo's phi, old log-probs on-policy,
the masks). The loss is written as f(logp, logp_detached); dLoss/dlogp is the central finite
difference of f in its first argument at logp_detached = logp, which is what autograd computes.
dLoss/dentropy (the entropy bonus) is the finite difference in the entropies fed to the bonus, the
high-entropy mask being a no-grad function of the detached entropies.
"""
import json
import math
import os

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# spec A7's batch: 2 groups x 2 completions x 3 tokens, row 3 has 2 tokens.
OLD = np.array([[-1.0, -0.5, -2.0], [-0.7, -1.2, -0.3], [-1.5, -0.4, -0.9], [-0.2, -2.5, 0.0]])
NEW = OLD + np.array([[0.30, -0.10, 0.05], [-0.40, 0.10, 0.00], [0.10, 0.25, -0.30], [0.05, -0.05, 0.0]])
REF = OLD + np.array([[-0.10, 0.20, 0.00], [0.30, -0.10, 0.05], [0.00, -0.20, 0.10], [0.10, 0.00, 0.0]])
SAMP = OLD - np.array([[0.05, -0.20, 0.10], [0.00, 0.90, -0.05], [0.20, 0.00, 0.00], [-0.10, 0.05, 0.0]])
MASK = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0]], dtype=np.float64)
REWARDS = np.array([1.0, 0.0, 0.0, 0.5])
# Per-token entropies (nats) for top_entropy_quantile and the entropy bonus; distinct values.
ENTROPY = np.array([[0.9, 0.15, 1.7], [0.4, 2.3, 0.05], [1.1, 0.65, 0.3], [1.45, 0.8, 0.0]])

DEFAULTS = dict(
    loss_type="dapo", importance_sampling_level="token", epsilon=0.2, epsilon_high=None, delta=None, beta=0.0,
    sapo_temperature_pos=1.0, sapo_temperature_neg=1.05,
    vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0, vespo_lambda_neg=2.0,
    off_policy_mask_threshold=None, top_entropy_quantile=1.0, entropy_coef=0.0,
    is_mode=None, is_clip_max=3.0, is_clip_min=None, max_completion_length=3, ga=1,
)


def nanstd(x):
    x = x[~np.isnan(x)]
    return np.std(x, ddof=1) if len(x) > 1 else np.nan


def advantages(rewards, G):
    """scale_rewards='group', sum_then_normalize."""
    g = rewards.reshape(-1, G)
    mean = np.repeat(np.nanmean(g, axis=1), G)
    std = np.repeat(np.array([nanstd(r) for r in g]), G)
    return np.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0)


def is_ratio(old, samp, mask, c):
    """TRL's vLLM importance-sampling ratio: (B,T) for token_*, (B,1) for sequence_*."""
    d = (old - samp) * mask
    seq = c["is_mode"].startswith("sequence")
    r = np.exp(d.sum(-1, keepdims=True) if seq else d)
    lo = -math.inf if c["is_clip_min"] is None else c["is_clip_min"]
    hi = math.inf if c["is_clip_max"] is None else c["is_clip_max"]
    if c["is_mode"].endswith("truncate"):
        return np.clip(r, lo, hi)
    return np.where((r < lo) | (r > hi), 0.0, r)


def gamma_weights(A, log_ratio, mask, rho, c):
    low = math.log(1e-8)
    seq = (np.clip(log_ratio, -20.0, 20.0) * mask).sum(-1, keepdims=True)
    if rho is not None:
        with np.errstate(divide="ignore"):
            seq = seq + np.clip(np.log(rho), low, 20.0).sum(-1, keepdims=True)
    log_w = np.clip(seq, low, 20.0)
    w = np.exp(log_w)
    pos = A >= 0
    k = np.where(pos, c["vespo_k_pos"], c["vespo_k_neg"])
    lam = np.maximum(np.where(pos, c["vespo_lambda_pos"], c["vespo_lambda_neg"]), 1e-4)
    phi = np.exp(lam + k * log_w - lam * w)
    return np.nan_to_num(phi, nan=0.0, posinf=0.0, neginf=0.0)


def loss_fn(logp, logp_sg, ent, ent_sg, c, old=OLD, samp=SAMP, mask=MASK, adv=None):
    """TRL's _compute_loss; returns (loss, metrics). Detached inputs carry the _sg suffix."""
    A = adv[:, None]
    eps_lo = c["epsilon"]
    eps_hi = c["epsilon_high"] if c["epsilon_high"] is not None else c["epsilon"]
    on_policy = old is None
    old_lp = logp_sg if on_policy else old
    B = logp.shape[0]
    metrics = {}
    ent_mask = None
    if c["top_entropy_quantile"] < 1.0:
        active = ent_sg[mask.astype(bool)]
        thr = np.quantile(active, 1 - c["top_entropy_quantile"]) if active.size else None
        ent_mask = ((ent_sg * mask >= thr) & mask.astype(bool)).astype(np.float64)
        metrics["entropy_mask/threshold"] = float(thr)
    sampling = samp if samp is not None else old_lp
    if c["off_policy_mask_threshold"] is not None:
        kl = ((sampling - logp_sg) * mask).sum(1, keepdims=True) / np.maximum(mask.sum(1, keepdims=True), 1)
        opm = ((A >= 0) | (kl <= c["off_policy_mask_threshold"])).astype(np.float64)
        metrics["off_policy_mask/masked_fraction"] = float(1 - opm.mean())
    log_ratio = logp - old_lp
    seq_level = c["importance_sampling_level"] == "sequence"
    if seq_level:
        lw = ((log_ratio * mask).sum(-1) / np.maximum(mask.sum(-1), 1))[:, None]
    else:
        lw = log_ratio
    coef_1 = np.exp(lw)
    coef_1_sg = np.exp(((logp_sg - old_lp) * mask).sum(-1, keepdims=True) / np.maximum(mask.sum(-1, keepdims=True), 1)) if seq_level else np.exp(logp_sg - old_lp)
    rho = is_ratio(old_lp, samp, mask, c) if c["is_mode"] else None
    lt = c["loss_type"]
    if lt == "cispo":
        clamped = np.minimum(coef_1_sg, eps_hi)
        ptl = -clamped * A * logp
    elif lt in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        coef_2 = np.clip(coef_1, 1 - eps_lo, 1 + eps_hi)
        if c["delta"] is not None:
            coef_1 = np.minimum(coef_1, c["delta"])
        ptl = -np.minimum(coef_1 * A, coef_2 * A)
    elif lt == "sapo":
        tau = np.where(A > 0, c["sapo_temperature_pos"], c["sapo_temperature_neg"])
        ptl = -(1 / (1 + np.exp(-tau * (coef_1 - 1)))) * 4 / tau * A
    elif lt == "vespo":
        phi = gamma_weights(A, logp_sg - old_lp, mask, rho, c)
        ptl = -phi * A * logp
    if c["off_policy_mask_threshold"] is not None:
        ptl = ptl * opm
    if ent_mask is not None:
        ptl = ptl * ent_mask
    if rho is not None and lt != "vespo":
        ptl = ptl * rho
    if c["beta"] != 0:
        x = REF - logp
        kl = np.exp(x) - x - 1
        ptl = ptl + c["beta"] * kl
        metrics["kl"] = float((kl * mask).sum() / mask.sum())
    ga = c["ga"]
    n_items = max(mask.sum(), 1)
    if lt in ("grpo", "sapo"):
        loss = ((ptl * mask).sum(-1) / np.maximum(mask.sum(-1), 1)).mean() / ga
    elif lt == "bnpo":
        loss = (ptl * mask).sum() / max(mask.sum(), 1) / ga
    elif lt == "dr_grpo":
        loss = (ptl * mask).sum() / (B * c["max_completion_length"]) / ga
    elif lt in ("cispo", "dapo", "vespo"):
        loss = (ptl * mask).sum() / n_items
    elif lt == "luspo":
        assert ptl.shape[1] == 1, "luspo's (B,T) form averages over padding; not mirrored"
        loss = (ptl * mask.sum(1, keepdims=True)).mean() / ga
    # The loss before the entropy bonus, as aggregated (after the accumulation division; TRL logs
    # it before that division, per micro-batch; the engine logs the step's sum, as it does `loss`).
    metrics["policy_loss"] = float(loss)
    if c["entropy_coef"] != 0:
        eff = mask if ent_mask is None else mask * ent_mask
        if lt in ("cispo", "dapo", "vespo"):
            ent_loss = (ent * eff).sum() / n_items
        else:
            ent_loss = (ent * eff).sum() / max(eff.sum(), 1) / ga
        loss = loss - c["entropy_coef"] * ent_loss
    # TRL's logged metrics for the loss type (global masked means; per sequence at sequence level).
    # The clip metrics read coef_1 after the two-sided clamp, as TRL's do.
    cm = coef_1_sg if c["delta"] is None else np.minimum(coef_1_sg, c["delta"])

    def gmean(x):
        return float(x.sum() / x.shape[0]) if x.shape[1] == 1 else float((x * mask).sum() / max(mask.sum(), 1))

    if lt in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        lo = ((cm < 1 - eps_lo) & (A < 0)).astype(np.float64)
        hi = ((cm > 1 + eps_hi) & (A > 0)).astype(np.float64)
        metrics["clip_ratio/low_mean"] = gmean(lo)
        metrics["clip_ratio/high_mean"] = gmean(hi)
        metrics["clip_ratio/region_mean"] = gmean(np.maximum(lo, hi))
    elif lt == "cispo":
        metrics["cispo_clip_ratio"] = gmean(((coef_1_sg > eps_hi) & (A > 0)).astype(np.float64))
    elif lt == "vespo":
        metrics["vespo/phi_seq_mean"] = gmean(phi)
    return float(loss), metrics


def fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp = x.copy()
        xm = x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        g[idx] = (f(xp) - f(xm)) / (2 * eps)
    return g


def loss_case(name, over, on_policy=False, with_sampling=True):
    c = dict(DEFAULTS, **over)
    adv = advantages(REWARDS, 2)
    old = None if on_policy else OLD
    samp = SAMP if with_sampling else None
    kw = dict(old=old, samp=samp, adv=adv)
    loss, metrics = loss_fn(NEW, NEW, ENTROPY, ENTROPY, c, **kw)
    grad = fd(lambda x: loss_fn(x, NEW, ENTROPY, ENTROPY, c, **kw)[0], NEW) * MASK
    grad_ent = fd(lambda e: loss_fn(NEW, NEW, e, ENTROPY, c, **kw)[0], ENTROPY) * MASK
    config = {k: v for k, v in over.items() if not k.startswith("is_") and k != "ga"}
    if c["is_mode"]:
        config["rollout_correction"] = {"mode": c["is_mode"], "clip_max": c["is_clip_max"], "clip_min": c["is_clip_min"]}
    if c["ga"] != 1:
        config["gradient_accumulation_steps"] = c["ga"]
    return dict(name=name, config=config, on_policy=on_policy, with_sampling=with_sampling,
                loss=loss, grad=grad.tolist(), grad_entropy=grad_ent.tolist(), metrics=metrics)


LOSS_CASES = [
    ("cispo, TRL defaults (epsilon_high = epsilon = 0.2 caps every ratio)", dict(loss_type="cispo")),
    ("cispo, epsilon_high 1.2", dict(loss_type="cispo", epsilon_high=1.2)),
    ("cispo sequence level, epsilon_high 1.05, token_truncate 2", dict(loss_type="cispo", importance_sampling_level="sequence", epsilon_high=1.05, is_mode="token_truncate", is_clip_max=2.0)),
    ("sapo token, TRL temperatures", dict(loss_type="sapo")),
    ("sapo sequence, temperatures 0.5 / 2", dict(loss_type="sapo", importance_sampling_level="sequence", sapo_temperature_pos=0.5, sapo_temperature_neg=2.0)),
    ("sapo token, beta 0.04, token_truncate 2, ga 2", dict(loss_type="sapo", beta=0.04, is_mode="token_truncate", is_clip_max=2.0, ga=2)),
    ("luspo sequence, epsilon 0.05", dict(loss_type="luspo", importance_sampling_level="sequence", epsilon=0.05)),
    ("luspo sequence, sequence_mask 2, ga 3", dict(loss_type="luspo", importance_sampling_level="sequence", is_mode="sequence_mask", is_clip_max=2.0, ga=3)),
    ("vespo, TRL k/lambda", dict(loss_type="vespo")),
    ("vespo, token_mask [0.9, 2] folded into phi", dict(loss_type="vespo", is_mode="token_mask", is_clip_max=2.0, is_clip_min=0.9)),
    ("vespo, sequence_truncate 2, k/lambda 1.5 4 / 0.5 1", dict(loss_type="vespo", is_mode="sequence_truncate", is_clip_max=2.0, vespo_k_pos=1.5, vespo_lambda_pos=4.0, vespo_k_neg=0.5, vespo_lambda_neg=1.0)),
    ("grpo token, delta 1.25", dict(loss_type="grpo", delta=1.25)),
    ("dapo sequence, delta 1.05, epsilon 0.01", dict(loss_type="dapo", importance_sampling_level="sequence", delta=1.05, epsilon=0.01)),
    ("dapo, off_policy_mask_threshold -0.1 on sampling log-probs (drops row 2)", dict(loss_type="dapo", off_policy_mask_threshold=-0.1)),
    ("grpo, off_policy_mask_threshold -0.2 (drops rows 1, 2), token_truncate 2", dict(loss_type="grpo", off_policy_mask_threshold=-0.2, is_mode="token_truncate", is_clip_max=2.0)),
    ("grpo, top_entropy_quantile 0.5", dict(loss_type="grpo", top_entropy_quantile=0.5)),
    ("bnpo sequence, top_entropy_quantile 0.3", dict(loss_type="bnpo", importance_sampling_level="sequence", top_entropy_quantile=0.3)),
    ("dapo, entropy_coef 0.05", dict(loss_type="dapo", entropy_coef=0.05)),
    ("grpo, entropy_coef 0.1, top_entropy_quantile 0.6, ga 2", dict(loss_type="grpo", entropy_coef=0.1, top_entropy_quantile=0.6, ga=2)),
    ("cispo, epsilon_high 1.1, entropy_coef 0.02, top_entropy_quantile 0.0, off_policy_mask_threshold -0.15", dict(loss_type="cispo", epsilon_high=1.1, entropy_coef=0.02, top_entropy_quantile=0.0, off_policy_mask_threshold=-0.15)),
    ("vespo, beta 0.04, off_policy_mask_threshold -0.1, top_entropy_quantile 0.5", dict(loss_type="vespo", beta=0.04, off_policy_mask_threshold=-0.1, top_entropy_quantile=0.5)),
]
ON_POLICY_CASES = [
    ("on-policy cispo (old = logp, detached), epsilon_high 5", dict(loss_type="cispo", epsilon_high=5.0)),
    ("on-policy vespo: phi(1) = 1", dict(loss_type="vespo")),
    ("on-policy sapo sequence", dict(loss_type="sapo", importance_sampling_level="sequence")),
]


def gdpo_advantages(rewards_per_func, weights, G):
    """multi_objective_aggregation='normalize_then_sum': each function normalised per group, the
    weighted sum normalised over the batch."""
    grouped = rewards_per_func.reshape(-1, G, rewards_per_func.shape[1])
    mean_k = np.nanmean(grouped, axis=1, keepdims=True)
    std_k = np.array([[nanstd(grouped[g, :, k]) for k in range(grouped.shape[2])] for g in range(grouped.shape[0])])[:, None, :]
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).reshape(-1, rewards_per_func.shape[1])
    rewards = np.nansum(reward_k * np.array(weights)[None, :], axis=1)
    return np.nan_to_num((rewards - np.nanmean(rewards)) / (nanstd(rewards) + 1e-4), nan=0.0)


def gdpo_fixture():
    # 3 groups of 4, two reward functions (format-like and correctness-like); group 2's first
    # function is constant (std 0).
    per_func = np.array([[1, 2], [0, 0], [1, 1.5], [0.5, 0], [1, 2], [1, 0], [1, 0], [1, 2], [0, 0], [0.3, 1.5], [1, 0], [0.7, 2]], dtype=np.float64)
    weights = [0.3, 1.0]
    return {"rewards_per_func": per_func.tolist(), "weights": weights, "num_generations": 4,
            "advantages": gdpo_advantages(per_func, weights, 4).tolist(),
            "sum_then_normalize": advantages(per_func @ np.array(weights), 4).tolist()}


def loss_fixture():
    cases = [loss_case(n, o) for n, o in LOSS_CASES]
    cases += [loss_case(n, o, on_policy=True, with_sampling=False) for n, o in ON_POLICY_CASES]
    cases.append(loss_case("dapo, off_policy_mask_threshold 0.05 without sampling log-probs (old used)",
                           dict(loss_type="dapo", off_policy_mask_threshold=0.05), with_sampling=False))
    return {
        "description": "TRL GRPO loss family on spec A7's batch (docs/spec/rl-loss-vectors.md); made by tools/rl_reference.py",
        "logps": NEW.tolist(), "old_logps": OLD.tolist(), "ref_logps": REF.tolist(), "sampling_logps": SAMP.tolist(),
        "mask": MASK.tolist(), "entropy": ENTROPY.tolist(), "rewards": REWARDS.tolist(), "num_generations": 2,
        "advantages": advantages(REWARDS, 2).tolist(), "max_completion_length": 3,
        "cases": cases,
        "multi_objective_aggregation": gdpo_fixture(),
    }


# ---------------------------------------------------------------------------------------------
# transformers' processors, from their definitions:
#   RepetitionPenaltyLogitsProcessor(penalty): for every token id present in the sequence so far
#   (prompt and generated), score <- score * penalty if score < 0 else score / penalty.
#   MinPLogitsWarper(min_p, min_tokens_to_keep=1): p = softmax(scores); tokens with
#   p < min_p * max(p) are set to -inf, except the min_tokens_to_keep most probable.
# Sampling order as generate() builds it: repetition penalty (a processor), then the warpers
# temperature, top-k, top-p, min-p.

def repetition_penalty(scores, ids, penalty):
    s = scores.copy()
    for t in set(ids):
        s[t] = s[t] * penalty if s[t] < 0 else s[t] / penalty
    return s


def softmax(x):
    e = np.exp(x - np.max(x))
    return e / e.sum()


def min_p_filter(scores, min_p, keep=1):
    p = softmax(scores)
    remove = p < min_p * p.max()
    order = np.argsort(-scores, kind="stable")
    remove[order[:keep]] = False
    return np.where(remove, -np.inf, scores)


def top_k_filter(scores, k):
    if k <= 0 or k >= len(scores):
        return scores
    kth = np.sort(scores)[::-1][k - 1]
    return np.where(scores < kth, -np.inf, scores)


def top_p_filter(scores, top_p, keep=1):
    if top_p >= 1.0:
        return scores
    order = np.argsort(scores, kind="stable")  # ascending, as transformers
    probs = softmax(scores[order])
    cum = np.cumsum(probs)
    remove_sorted = cum <= 1 - top_p
    remove_sorted[-keep:] = False
    remove = np.zeros_like(remove_sorted)
    remove[order] = remove_sorted
    return np.where(remove, -np.inf, scores)


def sampling_probs(logits, ids, temperature, top_k, top_p, min_p, penalty):
    s = repetition_penalty(logits, ids, penalty) if penalty != 1.0 else logits.copy()
    s = s / temperature
    s = top_k_filter(s, top_k)
    s = top_p_filter(s, top_p)
    if min_p is not None:
        s = min_p_filter(s, min_p)
    return softmax(s)


def sampling_fixture():
    rng = np.random.default_rng(39)
    V = 50
    cases = []
    settings = [
        dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.1, repetition_penalty=1.0),
        dict(temperature=0.7, top_k=0, top_p=1.0, min_p=0.3, repetition_penalty=1.0),
        dict(temperature=1.0, top_k=0, top_p=1.0, min_p=None, repetition_penalty=1.3),
        dict(temperature=0.8, top_k=0, top_p=1.0, min_p=0.05, repetition_penalty=1.2),
        dict(temperature=1.0, top_k=10, top_p=0.9, min_p=0.2, repetition_penalty=0.8),
    ]
    for i, s in enumerate(settings):
        logits = rng.normal(0, 2.0, V).astype(np.float32).astype(np.float64)
        logits[3] = -abs(logits[3]) - 0.5  # a negative logit among the penalised ids
        logits[7] = abs(logits[7]) + 1.0  # a positive one
        ids = [3, 7, 7, 11, int(np.argmax(logits))] + list(rng.integers(0, V, 3))
        probs = sampling_probs(logits, ids, s["temperature"], s["top_k"], s["top_p"], s["min_p"], s["repetition_penalty"])
        cases.append(dict(settings=s, logits=logits.tolist(), ids=[int(x) for x in ids], probs=probs.tolist()))
    return {
        "description": "next-token probabilities after transformers' repetition penalty, temperature, top-k, top-p and min-p (tools/rl_reference.py)",
        "cases": cases,
    }


def write(path, obj):
    full = os.path.join(ROOT, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    print("wrote", path)


def transformers_probs(out_path):
    """The fixture's cases through transformers' own processors (torch, float32, as generate()
    builds them); run where transformers is installed: python3 tools/rl_reference.py --transformers OUT.json"""
    import torch
    import transformers
    from transformers import (LogitsProcessorList, MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                              TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)
    fx = json.load(open(os.path.join(ROOT, "test/fixtures/sampling/processors.json")))
    probs = []
    for c in fx["cases"]:
        s = c["settings"]
        procs = []
        if s["repetition_penalty"] != 1.0:
            procs.append(RepetitionPenaltyLogitsProcessor(penalty=s["repetition_penalty"]))
        procs.append(TemperatureLogitsWarper(s["temperature"]))
        if s["top_k"] > 0:
            procs.append(TopKLogitsWarper(top_k=s["top_k"]))
        if s["top_p"] < 1.0:
            procs.append(TopPLogitsWarper(top_p=s["top_p"]))
        if s["min_p"] is not None:
            procs.append(MinPLogitsWarper(min_p=s["min_p"]))
        ids = torch.tensor([c["ids"]], dtype=torch.long)
        scores = LogitsProcessorList(procs)(ids, torch.tensor([c["logits"]], dtype=torch.float32))
        probs.append(torch.softmax(scores, dim=-1)[0].tolist())
    with open(out_path, "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "probs": probs}, f)
    print("wrote", out_path)


if __name__ == "__main__":
    import sys
    if len(sys.argv) == 3 and sys.argv[1] == "--transformers":
        transformers_probs(sys.argv[2])
        sys.exit(0)
    write("test/fixtures/loss/trl-loss-vectors.json", loss_fixture())
    write("test/fixtures/sampling/processors.json", sampling_fixture())
