#!/usr/bin/env python3
"""Independent NumPy reference for sinklab's baseline LM and its AdamW update.

Regenerate the fixture the Rust tests compare against:

    python3 scripts/reference_model.py            # writes tests/fixtures/model_golden.json

Nothing here imports sinklab: the model is written from docs/reference.md §2 and docs/zoo.md's
description (pre-norm RMSNorm blocks, RoPE with the NeoX/HF "rotate halves" pairing,
causal softmax attention, SwiGLU, final RMSNorm, untied head; linear weights stored
[d_in, d_out] so y = x @ W), in float64.

Case 2 is AdamW (PyTorch semantics, decoupled decay) with global-norm clipping on the
quadratic loss L = 0.5 * sum(p^2) over two parameters (a matrix that is decayed and a vector
that is not, as under decay = "matrices_only"), whose gradient is p itself.
"""
import argparse
import json
import math
from pathlib import Path

import numpy as np


def rmsnorm(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def rope(x, base):
    """x: (B, T, H, dh); pairs (i, i + dh/2)."""
    b, t, h, dh = x.shape
    half = dh // 2
    inv = base ** (-(2.0 * np.arange(half)) / dh)
    ang = np.arange(t)[:, None] * inv[None, :]  # (T, half)
    cos = np.cos(ang)[None, :, None, :]
    sin = np.sin(ang)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


def forward(w, tokens, cfg):
    d, h, L = cfg["d_model"], cfg["n_heads"], cfg["n_layers"]
    dh = d // h
    x = w["embed"][tokens]  # (B, T, d)
    b, t, _ = x.shape
    causal = np.triu(np.ones((t, t), dtype=bool), k=1)
    attn_out = []
    for l in range(L):
        p = f"blocks.{l}."
        n1 = rmsnorm(x, w[p + "norm1.gain"], cfg["eps"])
        q = rope((n1 @ w[p + "attn.wq.weight"]).reshape(b, t, h, dh), cfg["rope_base"])
        k = rope((n1 @ w[p + "attn.wk.weight"]).reshape(b, t, h, dh), cfg["rope_base"])
        v = (n1 @ w[p + "attn.wv.weight"]).reshape(b, t, h, dh)
        q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, k, v))  # (B, H, T, dh)
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh)
        s = np.where(causal, -np.inf, s)
        s = s - s.max(axis=-1, keepdims=True)
        a = np.exp(s)
        a = a / a.sum(axis=-1, keepdims=True)
        attn_out.append(a)
        o = (a @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        x = x + o @ w[p + "attn.wo.weight"]
        n2 = rmsnorm(x, w[p + "norm2.gain"], cfg["eps"])
        x = x + (silu(n2 @ w[p + "mlp.w_gate.weight"]) * (n2 @ w[p + "mlp.w_up.weight"])) @ w[p + "mlp.w_down.weight"]
    logits = rmsnorm(x, w["norm_f.gain"], cfg["eps"]) @ w["head.weight"]
    return logits, attn_out


def masked_nll(logits, targets, mask):
    m = logits.max(axis=-1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return float(-(picked * mask).sum() / mask.sum())


def adamw_quadratic(p0, steps, lr, betas, eps, wd, clip, decayed):
    """AdamW on L = 0.5 Σ p², grad = p, with global-norm clipping over all parameters."""
    params = {k: v.copy() for k, v in p0.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    b1, b2 = betas
    for t in range(1, steps + 1):
        grads = {k: p.copy() for k, p in params.items()}
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        scale = clip / (norm + 1e-6) if norm > clip else 1.0
        for k in params:
            g = grads[k] * scale
            m[k] = b1 * m[k] + (1 - b1) * g
            v2[k] = b2 * v2[k] + (1 - b2) * g * g
            mh = m[k] / (1 - b1**t)
            vh = v2[k] / (1 - b2**t)
            p = params[k] * (1 - lr * (wd if k in decayed else 0.0))
            params[k] = p - lr * mh / (np.sqrt(vh) + eps)
    return params


def sgd_quadratic(p0, steps, lr, momentum, wd, clip, decayed):
    """SGD with momentum (PyTorch's rule: L2 weight decay added to the gradient, buffer = the
    gradient at the first step) on L = 0.5 Σ p², with global-norm clipping of the loss gradient."""
    params = {k: v.copy() for k, v in p0.items()}
    buf = {}
    for _ in range(steps):
        grads = {k: p.copy() for k, p in params.items()}
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        scale = clip / (norm + 1e-6) if norm > clip else 1.0
        for k in params:
            g = grads[k] * scale + (wd if k in decayed else 0.0) * params[k]
            buf[k] = momentum * buf[k] + g if k in buf else g
            params[k] = params[k] - lr * buf[k]
    return params


def flat(a):
    return {"shape": list(a.shape), "data": [float(x) for x in np.asarray(a, dtype=np.float64).ravel()]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/model_golden.json"))
    args = ap.parse_args()
    rng = np.random.default_rng(20261122)
    cfg = dict(vocab=23, d_model=16, n_layers=2, n_heads=2, d_ff=24, ctx=7, eps=1e-5, rope_base=10000.0)
    d, f, V = cfg["d_model"], cfg["d_ff"], cfg["vocab"]
    # Weights are stored rounded to float32, since that is what the Rust model holds.
    r = lambda *s: rng.normal(0.0, 0.3, size=s).astype(np.float32).astype(np.float64)
    w = {"embed": r(V, d), "head.weight": r(d, V), "norm_f.gain": 1.0 + r(d)}
    for l in range(cfg["n_layers"]):
        p = f"blocks.{l}."
        w[p + "norm1.gain"] = 1.0 + r(d)
        w[p + "norm2.gain"] = 1.0 + r(d)
        for n in ("wq", "wk", "wv", "wo"):
            w[p + "attn." + n + ".weight"] = r(d, d)
        w[p + "mlp.w_gate.weight"] = r(d, f)
        w[p + "mlp.w_up.weight"] = r(d, f)
        w[p + "mlp.w_down.weight"] = r(f, d)
    w = {k: v.astype(np.float32).astype(np.float64) for k, v in w.items()}
    tokens = rng.integers(0, V, size=(2, cfg["ctx"]))
    targets = rng.integers(0, V, size=(2, cfg["ctx"]))
    mask = (rng.random((2, cfg["ctx"])) > 0.2).astype(np.float64)
    logits, attn = forward(w, tokens, cfg)
    loss = masked_nll(logits, targets, mask)

    p0 = {"mat": r(3, 4), "vec": r(5)}
    opt = dict(lr=0.05, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.1, grad_clip=1.0, steps=3)
    after = adamw_quadratic(p0, opt["steps"], opt["lr"], opt["betas"], opt["eps"], opt["weight_decay"],
                            opt["grad_clip"], decayed={"mat"})
    sgd = dict(lr=0.05, momentum=0.9, weight_decay=0.1, grad_clip=1.0, steps=3)
    after_sgd = sgd_quadratic(p0, sgd["steps"], sgd["lr"], sgd["momentum"], sgd["weight_decay"],
                              sgd["grad_clip"], decayed={"mat"})
    out = {
        "generated_by": "python3 scripts/reference_model.py",
        "numpy_version": np.__version__,
        "config": cfg,
        "weights": {k: flat(v) for k, v in sorted(w.items())},
        "tokens": tokens.tolist(),
        "targets": targets.tolist(),
        "mask": mask.tolist(),
        "logits": flat(logits),
        "attn_layer1": flat(attn[1]),
        "loss": loss,
        "adamw": {"config": opt, "initial": {k: flat(v) for k, v in p0.items()},
                  "after": {k: flat(v) for k, v in after.items()}},
        "sgd": {"config": sgd, "initial": {k: flat(v) for k, v in p0.items()},
                "after": {k: flat(v) for k, v in after_sgd.items()}},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=None, sort_keys=True) + "\n")
    print(f"wrote {args.out}: loss {loss:.6f}")


if __name__ == "__main__":
    main()
