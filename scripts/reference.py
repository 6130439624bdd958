#!/usr/bin/env python3
"""Independent NumPy reference for sinklab's model zoo (every `[model]` variant) and its golden fixture.

Regenerate the fixture the Rust tests compare against (byte-identical on every run):

    ~/.cache/sinklab-venv/bin/python scripts/reference.py     # writes tests/fixtures/zoo_golden.json

Nothing here imports or reads sinklab: the forward pass is written from the model-zoo
specification (parameter names and shapes, forward, attention steps 1-13, the `[model]` TOML
schema and the probe definition), in float64, numpy only.

For each of 82 tiny cases (d_model 8, 2 layers, 2 heads, d_ff 12, ctx 6, vocab 11, batch 2,
with a few cases at other sizes) the script draws weights (rounded to float32, since that is what
the Rust model holds), tokens, targets and a loss mask from a generator seeded by the case name,
and records the logits, the masked mean NLL, the probe attention weights of layer 1 and the
gradient of the loss with respect to every trainable parameter by central finite differences:

    g_i = (L(w + h e_i) - L(w - h e_i)) / (2 h),   h = FD_STEP = 1e-6 (fixed, absolute),

evaluated in float64 on the float32-rounded weights (the perturbed weights are NOT rounded).
For every case the script recomputes each gradient independently by Richardson extrapolation,
(4 D(1e-5) - D(2e-5)) / 3 with D(h) the central difference above (O(h^4) truncation), and
asserts that the two agree to 1e-7 relative to max|g| (observed: about 1e-9, far below any
float32 test tolerance). It also asserts identities between variants that catch misreadings of
the specification (softmax_n n=0 == softmax; softmax_n n=1 == sink_logit 0 == fixed zero k_bias;
prefix p=1 == causal; wide windows == causal; a zero gate == W_O halved; ...), hand-computed
ALiBi slopes and T5 buckets, that the TOML text parses back to the config, and that no argument
of a kink (relu, |.|, max(., 1)) lies within 1e-4 of it, so the central differences are valid.
"""
import argparse
import copy
import hashlib
import json
import math
import time
import tomllib
import zlib
from pathlib import Path

import numpy as np

FD_STEP = 1e-6
FD_CHECK_STEP = 1e-5  # the check: Richardson extrapolation of central differences at 2h and h
FD_CHECK_TOL = 1e-7
KINK_MARGIN = 1e-4

# --------------------------------------------------------------------------------------------
# Configuration (a Python mirror of the `[model]` TOML schema)

BASE_MODEL = {
    "d_model": 8,
    "n_layers": 2,
    "n_heads": 2,
    "d_ff": 12,
    "ctx": 6,
    "norm": {"kind": "rms_norm", "eps": 1e-5},
    "ffn": {"kind": "swiglu"},
    "positions": {"kind": "rope", "base": 10000.0, "fraction": 1.0},
    "block": {"kind": "pre_norm"},
    "head": "untied",
    "bias": False,
    "sink_tokens": 0,
    "attention": {
        "normaliser": {"kind": "softmax"},
        "row_scale": 1.0,
        "slot": {"kind": "none"},
        "gate": {"kind": "none"},
        "mask": {"kind": "causal"},
    },
}

GAIN_KEYS = {
    "pre_norm": [("alpha_sa", "alpha_sa"), ("beta_sa", "beta_sa"), ("alpha_ff", "alpha_ff"), ("beta_ff", "beta_ff")],
    # config key -> parameter name (the parallel block's alpha is stored as `alpha_sa`)
    "parallel": [("alpha", "alpha_sa"), ("beta_sa", "beta_sa"), ("beta_ff", "beta_ff")],
    "post_norm": [],
}
GATED = {"swiglu": "silu", "geglu": "gelu", "reglu": "relu"}
GAIN_KEYS["sas"] = [("beta_ff", "beta_ff")]
GAIN_KEYS["sas_p"] = [("beta_sa", "beta_sa"), ("beta_ff", "beta_ff")]
# Skipless keys (docs/reference.md §3), absent from the base config and from the cases that predate them.
SKIPLESS_MODEL_KEYS = {"input_norm"}
# Keys pretrained checkpoints need (grouped-query attention, q/k/v-only biases), likewise absent
# from the earlier cases.
IMPORT_MODEL_KEYS = {"n_kv_heads", "qkv_bias"}
SKIPLESS_ATTENTION_KEYS = {"query_init", "shaping", "value_output", "spa"}


def make_model(**over):
    """BASE_MODEL with top-level keys replaced by `over`; `attention=` replaces attention keys."""
    m = copy.deepcopy(BASE_MODEL)
    att = over.pop("attention", {})
    assert set(over) <= set(m) | SKIPLESS_MODEL_KEYS | IMPORT_MODEL_KEYS, over
    assert set(att) <= set(m["attention"]) | SKIPLESS_ATTENTION_KEYS, att
    m.update(copy.deepcopy(over))
    m["attention"].update(copy.deepcopy(att))
    return m


def f32(x):
    """Round to float32 and return the float64 value of that float32 (exact)."""
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)


# --------------------------------------------------------------------------------------------
# TOML text of a case's config (inline tables, keys in the schema's order)

def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        if "e" in r:
            mant, exp = r.split("e")
            r = f"{mant}e{int(exp)}"
        elif "." not in r:
            r += ".0"
        return r
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def model_toml(m):
    lines = ["[model]"]
    for k, v in m.items():
        if k != "attention":
            lines.append(f"{k} = {toml_value(v)}")
    lines += ["", "[model.attention]"]
    for k, v in m["attention"].items():
        lines.append(f"{k} = {toml_value(v)}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Parameters

def slot_rows(slot, H):
    return 1 if slot.get("shared", False) else H


def kbias_v_star(slot, R, dh):
    val = slot["value"]
    v = np.zeros((R, dh))
    if val["kind"] == "e1":
        v[:, 0] = val["m"]
    elif val["kind"] == "ones":
        v[:, :] = val["m"] / math.sqrt(dh)
    elif val["kind"] != "zero":
        raise ValueError(val)
    return v


def param_specs(m, V):
    """Ordered list of (name, shape, init, trainable). init: ("normal", std) | ("gain1",) |
    ("value", x) | ("const", array)."""
    d, H, L, F, T, N = m["d_model"], m["n_heads"], m["n_layers"], m["d_ff"], m["ctx"], m["sink_tokens"]
    dh = d // H
    a = m["attention"]
    bias = m["bias"]
    layer_norm = m["norm"]["kind"] == "layer_norm"
    has_norm = m["norm"]["kind"] != "none"
    has_mlp = m["ffn"]["kind"] != "none"
    vo = a.get("value_output", {"kind": "dense"})
    shaping = a.get("shaping", {"kind": "none"})
    spa = a.get("spa", {"kind": "none"})
    specs = []

    def add(name, shape, init, trainable=True):
        specs.append((name, tuple(shape), init, trainable))

    def norm(prefix, layer_norm=layer_norm, has_norm=has_norm):
        if not has_norm:
            return
        add(prefix + ".gain", (d,), ("gain1",))
        if layer_norm:
            add(prefix + ".bias", (d,), ("normal", 0.1))

    def reparam(prefix, w_init, trainable_gains):
        """W = alpha W_init + beta dW: dW random here (zero only at sinklab's init)."""
        linear(prefix, d, d)
        add(prefix + ".w_init", (d, d), ("const", w_init), False)
        for g in ("alpha", "beta"):
            if trainable_gains.get(g, False):
                add(prefix + "." + g, (1,), ("value", 1.0 + 0.1 * (1 if g == "alpha" else -2)))

    def linear(prefix, din, dout, with_bias=None):
        add(prefix + ".weight", (din, dout), ("normal", 0.3))
        if bias if with_bias is None else with_bias:
            add(prefix + ".bias", (dout,), ("normal", 0.1))

    KV = m.get("n_kv_heads", H)  # grouped-query attention: K and V have KV heads
    qkv_bias = bias or m.get("qkv_bias", False)

    add("embed", (V, d), ("normal", 0.5))
    pos = m["positions"]
    if pos["kind"] == "learned":
        add("pos_embed", (T, d), ("normal", 0.5))
    if pos["kind"] == "relative":
        add("rel_bias", (pos["buckets"], H), ("normal", 0.3))
    if N > 0:
        add("sink_tokens", (N, d), ("normal", 0.5))
    if m.get("input_norm"):
        norm("input_norm", m["input_norm"]["kind"] == "layer_norm", True)
    bk = m["block"]["kind"]
    spa_tables = spa_layers(spa, L, T) if spa["kind"] != "none" else None
    orth_rng = np.random.default_rng(1234)
    for l in range(L):
        p = f"blocks.{l}."
        norm(p + "norm1")
        two_norms = bk == "parallel" and m["block"].get("separate_norms", False)
        if (bk not in ("parallel", "sas_p") or two_norms) and has_mlp:
            norm(p + "norm2")
        linear(p + "attn.wq", d, d, qkv_bias)
        linear(p + "attn.wk", d, KV * dh, qkv_bias)
        if vo["kind"] == "dense":
            linear(p + "attn.wv", d, KV * dh, qkv_bias)
            linear(p + "attn.wo", d, d)
        elif vo["kind"] == "reparam":
            tr = {g: vo.get(g, {}).get("trainable", True) for g in ("alpha", "beta")}
            for n in ("wv", "wo"):
                if vo["init"] == "identity":
                    w0 = np.eye(d)
                else:
                    w0 = np.linalg.qr(orth_rng.normal(size=(d, d)))[0]
                reparam(p + f"attn.{n}", w0, tr)
        elif vo["kind"] == "identity":
            if l == 0 and vo.get("first_layer_value", True):
                reparam(p + "attn.wv", np.eye(d), {})
        else:
            raise ValueError(vo)
        sk_kind = shaping["kind"]
        if sk_kind != "none":
            names = ["shape_alpha", "shape_beta"] + (["shape_gamma"] if sk_kind == "shaped" else [])
            for n in names:
                if shaping.get("trainable", True):
                    add(p + "attn." + n, (H,), ("gain1",))
                else:
                    add(p + "attn." + n, (H,), ("const", np.full(H, shaping[n.split("_")[1]])), False)
        if spa_tables is not None:
            G, D = spa_tables[l]
            add(p + "attn.spa_bias", (T, T), ("const", G), False)
            add(p + "attn.spa_scale", (T,), ("const", D), False)
        g = a["gate"]["kind"]
        if g == "headwise":
            linear(p + "attn.gate", d, H)
        elif g == "elementwise":
            linear(p + "attn.gate", d, d)
        elif g == "per_token":
            # Bondarenko et al.: one (d_h -> 1) gate per head on its own slice, with a bias
            add(p + "attn.gate.weight", (H, dh), ("normal", 0.3))
            add(p + "attn.gate.bias", (H,), ("normal", 0.3))
        elif g == "sparse":
            # modded-nanogpt: sigma(u[:k] W), W (k, H), no bias
            add(p + "attn.gate.weight", (a["gate"]["dims"], H), ("normal", 0.3))
        nm = a["normaliser"]
        if nm["kind"] == "scalable_softmax":
            n_s = H if nm["per_head"] else 1
            if nm["trainable"]:
                add(p + "attn.ssmax_scale", (n_s,), ("gain1",))
            else:
                add(p + "attn.ssmax_scale", (n_s,), ("const", np.full(n_s, f32(nm["init"]))), False)
        if nm["kind"] == "linear" and nm["feature_map"] == "mlp":
            add(p + "attn.phi.w1", (dh, dh), ("normal", 0.3))
            add(p + "attn.phi.w2", (dh, dh), ("normal", 0.3))
        slot = a["slot"]
        sk = slot["kind"]
        if sk == "sink_logit":
            add(p + "attn.sink_logit", (H,), ("normal", 0.5))
        elif sk == "kv_bias":
            R = slot_rows(slot, H)
            add(p + "attn.k_star", (R, dh), ("normal", 0.5))
            add(p + "attn.v_star", (R, dh), ("normal", 0.5))
        elif sk == "k_bias":
            R = slot_rows(slot, H)
            if slot.get("trainable", True):
                add(p + "attn.k_star", (R, slot.get("learnable_dims", dh)), ("normal", 0.5))
            else:
                add(p + "attn.k_star", (R, dh), ("const", np.zeros((R, dh))), False)
            add(p + "attn.v_star", (R, dh), ("const", kbias_v_star(slot, R, dh)), False)
        elif sk == "v_bias":
            add(p + "attn.v_bias", (slot_rows(slot, H), dh), ("normal", 0.5))
        elif sk == "memory_kv":
            add(p + "attn.mem_k", (H, slot["n"], dh), ("normal", 0.5))
            add(p + "attn.mem_v", (H, slot["n"], dh), ("normal", 0.5))
        elif sk != "none":
            raise ValueError(slot)
        fk = m["ffn"]["kind"]
        if fk in GATED:
            linear(p + "mlp.w_gate", d, F)
        if has_mlp:
            linear(p + "mlp.w_up", d, F)
            linear(p + "mlp.w_down", F, d)
        gains = m["block"].get("gains", {}) if bk not in ("sas", "sas_p") else m["block"]
        for key, pname in GAIN_KEYS[bk]:
            gc = gains.get(key, {})
            if gc.get("trainable", False):
                add(p + pname, (1,), ("value", gc.get("init", 1.0)))
    if bk != "post_norm":
        norm("norm_f")  # nothing with norm = none
    if m["head"] == "untied":
        linear("head", d, V)
    return specs


def init_weights(specs, rng):
    w = {}
    for name, shape, init, _ in specs:
        if init[0] == "normal":
            x = rng.normal(0.0, init[1], size=shape)
        elif init[0] == "gain1":
            x = 1.0 + rng.normal(0.0, 0.1, size=shape)
        elif init[0] == "value":
            x = np.full(shape, float(init[1]))
        elif init[0] == "const":
            x = np.asarray(init[1], dtype=np.float64).reshape(shape)
        else:
            raise ValueError(init)
        w[name] = f32(x)
    return w


# --------------------------------------------------------------------------------------------
# Forward

def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x):
    return x * 0.5 * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def gelu_tanh(x):
    """GPT-2's "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x * sigmoid(x)


class Kinks:
    """Smallest distance of any argument to a point where the network is not differentiable."""

    def __init__(self):
        self.min = math.inf

    def see(self, dist):
        if np.size(dist):
            self.min = min(self.min, float(np.min(np.abs(dist))))


def relu(x, kinks):
    kinks.see(x)
    return np.maximum(x, 0.0)


def elu1(x):
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def spa_layers(spa, L, T):
    """(Gamma_l, D_l) for l = 1..L: A_l = chol(S_l) inv(chol(S_{l-1})) (docs/reference.md §3.3)."""
    def sigma(l):
        if l == 0:
            return np.eye(T)
        f = l / L
        if spa["kind"] == "u_spa":
            rho = 1.0 - (1.0 - spa["rho"]) ** f
            return (1.0 - rho) * np.eye(T) + rho * np.ones((T, T))
        gamma = -0.5 * np.log(1.0 - (1.0 - np.exp(-2.0 * spa["gamma"])) ** f)
        i = np.arange(T)
        return np.exp(-gamma * np.abs(i[:, None] - i[None, :]))
    out = []
    for l in range(1, L + 1):
        A = np.tril(np.linalg.cholesky(sigma(l)) @ np.linalg.inv(np.linalg.cholesky(sigma(l - 1))))
        low = np.tril_indices(T)
        assert (A[low] > 0).all()
        D = A.sum(axis=1)
        G = np.zeros((T, T))
        G[low] = np.log(A[low] / D[low[0]])
        out.append((G, D))
    return out


def apply_norm(x, w, prefix, ncfg):
    if ncfg["kind"] == "none":
        return x
    eps = ncfg["eps"]
    if ncfg["kind"] == "rms_norm":
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w[prefix + ".gain"]
    if ncfg["kind"] == "layer_norm":
        mu = np.mean(x, axis=-1, keepdims=True)
        var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[prefix + ".gain"] + w[prefix + ".bias"]
    raise ValueError(ncfg)


def lin(x, w, prefix, bias):
    y = x @ w[prefix + ".weight"]
    if bias:
        y = y + w[prefix + ".bias"]
    return y


def alibi_slopes(H):
    def pow2(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    n = 1
    while n * 2 <= H:
        n *= 2
    if n == H:
        return np.array(pow2(H))
    return np.array(pow2(n) + pow2(2 * n)[0::2][: H - n])


def t5_bucket(rel, buckets, max_distance):
    nb = buckets // 2
    ret = nb if rel > 0 else 0
    n = abs(rel)
    max_exact = nb // 2
    if n < max_exact:
        return ret + n
    large = max_exact + math.log(n / max_exact) / math.log(max_distance / max_exact) * (nb - max_exact)
    return ret + min(nb - 1, math.floor(large))


def visibility(mk, N, T):
    """(S, S) boolean, True = visible; rows = queries, columns = keys, full-sequence order."""
    S = N + T
    vis = np.zeros((S, S), dtype=bool)
    kind = mk["kind"]
    for i in range(S):
        for j in range(S):
            if i < N:
                vis[i, j] = j < N and j <= i
            elif j < N:
                vis[i, j] = True
            else:
                a, b = i - N, j - N
                if kind == "causal":
                    ok = b <= a
                elif kind == "prefix":
                    ok = b <= a or b < mk["p"]
                elif kind == "sliding_window":
                    ok = b <= a and a - b < mk["w"]
                elif kind == "sinks_window":
                    ok = b <= a and (a - b < mk["w"] or b < mk["sinks"])
                else:
                    raise ValueError(mk)
                vis[i, j] = ok
    return vis


def sinusoid(T, d):
    pe = np.zeros((T, d))
    for p in range(T):
        for i in range(0, d, 2):
            ang = p / 10000.0 ** (i / d)
            pe[p, i] = math.sin(ang)
            if i + 1 < d:
                pe[p, i + 1] = math.cos(ang)
    return pe


def rope_tables(pos, dh, S):
    r = int(math.floor(pos["fraction"] * dh))
    r -= r % 2
    inv = pos["base"] ** (-(2.0 * np.arange(r // 2)) / r) if r > 0 else np.zeros(0)
    ang = np.arange(S)[:, None] * inv[None, :]
    return r, np.cos(ang), np.sin(ang), pos.get("pairing", "halves")


def apply_rope(x, tables):
    """x: (B, H, S, dh). Pair i (i < r/2) with angle pos * base^(-2i/r) is the dims (i, i + r/2)
    ("halves", NeoX/HF) or (2i, 2i + 1) ("adjacent", GPT-J / GGUF); x[..., r:] is left alone."""
    r, cos, sin, pairing = tables
    if r == 0:
        return x
    y = x.copy()
    if pairing == "halves":
        a, b = np.arange(r // 2), np.arange(r // 2) + r // 2
    else:
        a, b = 2 * np.arange(r // 2), 2 * np.arange(r // 2) + 1
    x1, x2 = x[..., a], x[..., b]
    y[..., a] = x1 * cos - x2 * sin
    y[..., b] = x1 * sin + x2 * cos
    return y


def build_context(m, N, T):
    H, dh = m["n_heads"], m["d_model"] // m["n_heads"]
    S = N + T
    pos = m["positions"]
    ctx = {"vis": visibility(m["attention"]["mask"], N, T), "rope": None, "bias_fn": None}
    if pos["kind"] == "rope":
        ctx["rope"] = rope_tables(pos, dh, S)
    elif pos["kind"] == "alibi":
        slopes = alibi_slopes(H)
        dist = np.abs(np.arange(S)[:, None] - np.arange(S)[None, :]).astype(np.float64)
        pb = -slopes[:, None, None] * dist[None]
        ctx["bias_fn"] = lambda w, p: pb
    elif pos["kind"] == "relative":
        bucket = np.array([[t5_bucket(j - i, pos["buckets"], pos["max_distance"]) for j in range(S)]
                           for i in range(S)])
        ctx["bucket"] = bucket
        ctx["bias_fn"] = lambda w, p: w["rel_bias"][bucket].transpose(2, 0, 1)  # (H, S, S)
    return ctx


def normalise(s, vis, nm, m, kinks):
    """s: (B, H, S, C); vis: (S, C). Masked entries are exactly 0."""
    V = np.broadcast_to(vis, s.shape)
    kind = nm["kind"]
    if kind in ("softmax", "softmax_n"):
        mx = np.where(V, s, -np.inf).max(axis=-1, keepdims=True)
        e = np.where(V, np.exp(np.where(V, s - mx, 0.0)), 0.0)
        den = e.sum(axis=-1, keepdims=True)
        if kind == "softmax_n":
            den = den + nm["n"] * np.exp(-mx)
        return e / den
    if kind == "sigmoid":
        b = nm["bias"]
        b = -math.log(m["ctx"]) if b == "-ln(T)" else float(b)
        return np.where(V, sigmoid(s + b), 0.0)
    if kind == "sigmoid_normalised":
        e = np.where(V, sigmoid(s), 0.0)
        return e / e.sum(axis=-1, keepdims=True)
    if kind == "elu1":
        return np.where(V, elu1(s), 0.0)
    if kind == "relu":
        # Guo et al. (2024): ReLU(s_ij) divided by the number of keys the query sees
        seen = np.maximum(V.sum(axis=-1, keepdims=True), 1)
        kinks.see(np.where(V, s, 1.0))
        return np.where(V, np.maximum(s, 0.0), 0.0) / seen
    if kind == "elu1_normalised":
        e = np.where(V, elu1(s), 0.0)
        return e / e.sum(axis=-1, keepdims=True)
    if kind == "softpick":
        # Zuhri et al. (2025), the unshifted formula: ReLU(e^s - 1) / (sum_j |e^s_j - 1| + eps)
        kinks.see(np.where(V, s, 1.0))  # ReLU and |.| bend at s = 0
        x = np.where(V, np.exp(np.where(V, s, 0.0)) - 1.0, 0.0)
        return np.maximum(x, 0.0) / (np.abs(x).sum(axis=-1, keepdims=True) + nm["eps"])
    if kind == "clipped_softmax":
        # Bondarenko et al. (2023): clip((zeta - gamma) softmax + gamma, 0, 1); masked keys 0
        mx = np.where(V, s, -np.inf).max(axis=-1, keepdims=True)
        e = np.where(V, np.exp(np.where(V, s - mx, 0.0)), 0.0)
        x = (nm["zeta"] - nm["gamma"]) * e / e.sum(axis=-1, keepdims=True) + nm["gamma"]
        # a row with one visible key has p = 1 whatever its logit: no kink to stay away from
        live = V & (V.sum(axis=-1, keepdims=True) > 1)
        kinks.see(np.where(live, x, 0.5))
        kinks.see(np.where(live, x - 1.0, 0.5))
        return np.where(V, np.clip(x, 0.0, 1.0), 0.0)
    if kind == "scalable_softmax":
        # the logits arrive already multiplied by sigma ln n (attention())
        mx = np.where(V, s, -np.inf).max(axis=-1, keepdims=True)
        e = np.where(V, np.exp(np.where(V, s - mx, 0.0)), 0.0)
        return e / e.sum(axis=-1, keepdims=True)
    if kind == "linear":
        w = np.where(V, s, 0.0)
        if nm["normaliser"] == "none":
            return w
        if nm["normaliser"] == "max_abs_sum":
            tot = w.sum(axis=-1, keepdims=True)
            kinks.see(tot)
            kinks.see(np.abs(tot) - 1.0)
            return w / np.maximum(np.abs(tot), 1.0)
        if nm["normaliser"] == "sum":
            # Gu et al.'s code: divide by the row sum plus 1e-8 (no absolute value, no floor)
            return w / (w.sum(axis=-1, keepdims=True) + 1e-8)
        raise ValueError(nm)
    raise ValueError(nm)


def feature_map(x, fm, w, p, kinks):
    if fm == "identity":
        return x
    if fm == "elu1":
        return elu1(x)
    if fm == "mlp":
        return relu(x @ w[p + "attn.phi.w1"], kinks) @ w[p + "attn.phi.w2"]
    raise ValueError(fm)


def attention(m, w, p, u, ctx, kinks, hook=None):
    """One attention layer; `hook(site, x)`, if given, sees and may replace q, k, v (k and v
    one slice per key/value group, after RoPE), pattern (the normaliser's output, slot columns
    first) and z (each head's output before W_O), as sinklab's hook points."""
    a = m["attention"]
    B, S, d = u.shape
    H = m["n_heads"]
    dh = d // H
    bias = m["bias"]

    def heads(t):
        return t.reshape(B, S, H, dh).transpose(0, 2, 1, 3)

    vo = a.get("value_output", {"kind": "dense"})

    def vo_lin(x, name):
        """W_V / W_O: dense, alpha W_init + beta dW, or absent (identity)."""
        pre = p + "attn." + name
        if pre + ".weight" not in w:
            return x  # identity
        if pre + ".w_init" not in w:
            return lin(x, w, pre, bias)
        ga = w[pre + ".alpha"][0] if pre + ".alpha" in w else float(f32(vo.get("alpha", {}).get("init", 1.0)))
        gb = w[pre + ".beta"][0] if pre + ".beta" in w else float(f32(vo.get("beta", {}).get("init", 1.0)))
        if vo["kind"] == "identity":
            ga = gb = 1.0
        y = x @ (ga * w[pre + ".w_init"] + gb * w[pre + ".weight"])
        return y + w[pre + ".bias"] if bias else y

    KV = m.get("n_kv_heads", H)
    qkv_bias = bias or m.get("qkv_bias", False)

    def kv_groups(t):
        """(B, S, KV*dh) -> (B, KV, S, dh)."""
        return t.reshape(B, S, KV, dh).transpose(0, 2, 1, 3)

    def repeat_kv(t):
        """(B, KV, S, dh) -> (B, H, S, dh): query head h reads kv head h // (H / KV)."""
        return np.repeat(t, H // KV, axis=1)

    q = heads(lin(u, w, p + "attn.wq", qkv_bias))
    k = kv_groups(lin(u, w, p + "attn.wk", qkv_bias))
    if vo["kind"] == "dense":
        v = kv_groups(lin(u, w, p + "attn.wv", qkv_bias))
    else:
        v = heads(vo_lin(u, "wv"))
    if ctx["rope"] is not None:
        q, k = apply_rope(q, ctx["rope"]), apply_rope(k, ctx["rope"])
    if hook is not None:
        q, k, v = hook("q", q), hook("k", k), hook("v", v)
    k = repeat_kv(k)
    v = repeat_kv(v) if vo["kind"] == "dense" else v
    nm = a["normaliser"]
    if nm["kind"] == "linear":
        q = feature_map(q, nm["feature_map"], w, p, kinks)
        k = feature_map(k, nm["feature_map"], w, p, kinks)
    slot = a["slot"]
    sk = slot["kind"]
    ks = vs = None  # (H, M, dh)
    if sk == "kv_bias":
        ks = np.broadcast_to(w[p + "attn.k_star"], (H, dh))[:, None, :]
        vs = np.broadcast_to(w[p + "attn.v_star"], (H, dh))[:, None, :]
    elif sk == "k_bias":
        kst = w[p + "attn.k_star"]
        kst = np.concatenate([kst, np.zeros((kst.shape[0], dh - kst.shape[1]))], axis=1)
        ks = np.broadcast_to(kst, (H, dh))[:, None, :]
        vs = np.broadcast_to(w[p + "attn.v_star"], (H, dh))[:, None, :]
    elif sk == "memory_kv":
        ks, vs = w[p + "attn.mem_k"], w[p + "attn.mem_v"]
    M = 0 if ks is None else ks.shape[1]
    if M:
        k_all = np.concatenate([np.broadcast_to(ks, (B, H, M, dh)), k], axis=2)
        v_all = np.concatenate([np.broadcast_to(vs, (B, H, M, dh)), v], axis=2)
    else:
        k_all, v_all = k, v
    s = (q / math.sqrt(dh)) @ k_all.transpose(0, 1, 3, 2)  # (B, H, S, M + S)
    n_sl = 1 if sk == "sink_logit" else 0
    if n_sl:
        col = np.broadcast_to(w[p + "attn.sink_logit"][None, :, None, None], (B, H, S, 1))
        s = np.concatenate([col, s], axis=-1)
    c0 = n_sl + M
    vis = np.concatenate([np.ones((S, c0), dtype=bool), ctx["vis"]], axis=1)
    if nm["kind"] == "scalable_softmax":
        # Nakanishi (2025): softmax((sigma ln n_i) z_ij), n_i = the columns row i may see
        n_i = vis.sum(axis=1).astype(np.float64)  # (S,)
        sig = np.broadcast_to(w[p + "attn.ssmax_scale"], (H,))
        s = s * (sig[None, :, None, None] * np.log(n_i)[None, None, :, None])
    if ctx["bias_fn"] is not None:
        pb = ctx["bias_fn"](w, p)  # (H, S, S)
        s = s + np.concatenate([np.zeros((H, S, c0)), pb], axis=-1)[None]
    if p + "attn.spa_bias" in w:
        s = s + w[p + "attn.spa_bias"][:S, :S]
    wts = normalise(s, vis, nm, m, kinks)
    if hook is not None:
        wts = hook("pattern", wts)
    probe = wts
    if n_sl:
        wts = wts[..., 1:]
    if p + "attn.spa_scale" in w:
        wts = wts * w[p + "attn.spa_scale"][:S][:, None]
    if p + "attn.shape_alpha" in w:
        per = lambda n: w[p + "attn." + n][None, :, None, None]
        wts = per("shape_alpha") * np.eye(S) + per("shape_beta") * wts
        if p + "attn.shape_gamma" in w:
            C = ctx["vis"] / ctx["vis"].sum(axis=1, keepdims=True)  # uniform over visible keys
            wts = wts - per("shape_gamma") * C
    wts = a["row_scale"] * wts
    out = wts @ v_all  # (B, H, S, dh)
    if sk == "v_bias":
        out = out + np.broadcast_to(w[p + "attn.v_bias"], (H, dh))[None, :, None, :]
    g = a["gate"]["kind"]
    if g == "headwise":
        gv = sigmoid(lin(u, w, p + "attn.gate", bias))  # (B, S, H)
        out = out * gv.transpose(0, 2, 1)[..., None]
    elif g == "elementwise":
        gv = sigmoid(lin(u, w, p + "attn.gate", bias))  # (B, S, d)
        out = out * heads(gv)
    elif g == "per_token":
        # head h reads its own slice u[..., h dh:(h+1) dh]
        logit = np.einsum("bshx,hx->bsh", u.reshape(B, S, H, dh), w[p + "attn.gate.weight"])
        gv = sigmoid(logit + w[p + "attn.gate.bias"])  # (B, S, H)
        out = out * gv.transpose(0, 2, 1)[..., None]
    elif g == "sparse":
        k = a["gate"]["dims"]
        gv = sigmoid(u[..., :k] @ w[p + "attn.gate.weight"])  # (B, S, H)
        out = out * gv.transpose(0, 2, 1)[..., None]
    elif g != "none":
        raise ValueError(g)
    if hook is not None:
        out = hook("z", out)
    out = out.transpose(0, 2, 1, 3).reshape(B, S, d)
    return vo_lin(out, "wo"), probe


def mlp(m, w, p, x, kinks):
    kind, bias = m["ffn"]["kind"], m["bias"]
    if kind == "none":
        return 0.0 * x
    acts = {"relu": lambda z: relu(z, kinks), "gelu": gelu, "gelu_tanh": gelu_tanh, "silu": silu}
    up = lin(x, w, p + "mlp.w_up", bias)
    if kind in GATED:
        hid = acts[GATED[kind]](lin(x, w, p + "mlp.w_gate", bias)) * up
    else:
        hid = acts[kind](up)
    return lin(hid, w, p + "mlp.w_down", bias)


def gain_values(m, w, p):
    bk = m["block"]["kind"]
    gains = m["block"].get("gains", {}) if bk not in ("sas", "sas_p") else m["block"]
    out = {"alpha_sa": 0.0, "alpha": 0.0, "beta_sa": 1.0, "alpha_ff": 1.0} if bk in ("sas", "sas_p") else {}
    for key, pname in GAIN_KEYS[bk]:
        gc = gains.get(key, {})
        if gc.get("trainable", False):
            out[key] = w[p + pname][0]
        else:
            out[key] = float(f32(gc.get("init", 1.0)))  # fixed gain: its init, as float32
    return out


def forward(m, w, tokens, kinks=None, hook=None):
    """Returns logits (B, T, V) and the probe attention (B, H, S, C) of every layer.
    `hook(layer, site, x)`, if given, is the attention hook of every layer."""
    kinks = kinks if kinks is not None else Kinks()
    B, T = tokens.shape
    d, N = m["d_model"], m["sink_tokens"]
    x = w["embed"][tokens]
    pk = m["positions"]["kind"]
    if pk == "sinusoidal":
        x = x + sinusoid(T, d)[None]
    elif pk == "learned":
        x = x + w["pos_embed"][:T][None]
    if N > 0:
        x = np.concatenate([np.broadcast_to(w["sink_tokens"], (B, N, d)), x], axis=1)
    if m.get("input_norm"):
        x = apply_norm(x, w, "input_norm", m["input_norm"])
    ctx = build_context(m, N, T)
    ncfg = m["norm"]
    bk = m["block"]["kind"]
    probes = []
    for l in range(m["n_layers"]):
        p = f"blocks.{l}."
        g = gain_values(m, w, p)
        hk = None if hook is None else (lambda site, x, l=l: hook(l, site, x))
        if bk in ("pre_norm", "sas"):
            att, pr = attention(m, w, p, apply_norm(x, w, p + "norm1", ncfg), ctx, kinks, hk)
            x = g["alpha_sa"] * x + g["beta_sa"] * att
            if m["ffn"]["kind"] == "none":  # no MLP and no norm2
                x = g["alpha_ff"] * x
            else:
                x = g["alpha_ff"] * x + g["beta_ff"] * mlp(m, w, p, apply_norm(x, w, p + "norm2", ncfg), kinks)
        elif bk == "post_norm":
            att, pr = attention(m, w, p, x, ctx, kinks, hk)
            x = apply_norm(x + att, w, p + "norm1", ncfg)
            x = apply_norm(x + mlp(m, w, p, x, kinks), w, p + "norm2", ncfg)
        elif bk in ("parallel", "sas_p"):
            u = apply_norm(x, w, p + "norm1", ncfg)
            att, pr = attention(m, w, p, u, ctx, kinks, hk)
            if m["block"].get("separate_norms", False):  # GPT-NeoX: each branch its own norm
                u = apply_norm(x, w, p + "norm2", ncfg)
            x = g["alpha"] * x + g["beta_sa"] * att + g["beta_ff"] * mlp(m, w, p, u, kinks)
        else:
            raise ValueError(bk)
        probes.append(pr)
    x = x[:, N:]
    if bk != "post_norm" and ncfg["kind"] != "none":
        x = apply_norm(x, w, "norm_f", ncfg)
    if m["head"] == "tied":
        logits = x @ w["embed"].T
    else:
        logits = lin(x, w, "head", m["bias"])
    return logits, probes


def masked_nll(logits, targets, mask):
    mx = logits.max(axis=-1, keepdims=True)
    logp = logits - mx - np.log(np.exp(logits - mx).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return float(-(picked * mask).sum() / mask.sum())


def loss_of(m, w, tokens, targets, mask, kinks=None):
    return masked_nll(forward(m, w, tokens, kinks)[0], targets, mask)


def fd_grads(m, w, names, tokens, targets, mask, h):
    grads = {}
    for name in names:
        base = w[name]
        g = np.zeros(base.shape)
        flat = g.reshape(-1)
        for i in range(base.size):
            wp = dict(w)
            arr = base.copy().reshape(-1)
            arr[i] = base.reshape(-1)[i] + h
            wp[name] = arr.reshape(base.shape)
            lp = loss_of(m, wp, tokens, targets, mask)
            arr = base.copy().reshape(-1)
            arr[i] = base.reshape(-1)[i] - h
            wp[name] = arr.reshape(base.shape)
            lm = loss_of(m, wp, tokens, targets, mask)
            flat[i] = (lp - lm) / (2.0 * h)
        grads[name] = g
    return grads


# --------------------------------------------------------------------------------------------
# Cases

def gains(**kw):
    return {k: {"init": v[0], "trainable": v[1]} for k, v in kw.items()}


def build_cases():
    C = []

    def case(name, desc, vocab=11, **over):
        C.append({"name": name, "description": desc, "vocab": vocab, "model": make_model(**over)})

    def att(**kw):
        return kw

    case("baseline", "softmax, rope, pre_norm, swiglu, rms_norm, untied, causal")
    case("softmax_n1", "softmax_n with n = 1 (softmax with a +1 in the denominator)",
         attention=att(normaliser={"kind": "softmax_n", "n": 1.0}))
    case("softmax_n0", "softmax_n with n = 0 (equals softmax)",
         attention=att(normaliser={"kind": "softmax_n", "n": 0.0}))
    case("sigmoid_neg_ln_t", "sigmoid attention with bias -ln(ctx)",
         attention=att(normaliser={"kind": "sigmoid", "bias": "-ln(T)"}))
    case("sigmoid_bias_0p5", "sigmoid attention with bias 0.5",
         attention=att(normaliser={"kind": "sigmoid", "bias": 0.5}))
    case("sigmoid_normalised", "sigmoid(s) / sum sigmoid(s)",
         attention=att(normaliser={"kind": "sigmoid_normalised"}))
    case("elu1", "elu(s) + 1, unnormalised", attention=att(normaliser={"kind": "elu1"}))
    case("relu_attention", "ReLU(s) / number of visible keys (Guo et al.)",
         attention=att(normaliser={"kind": "relu"}))
    case("elu1_normalised", "(elu(s) + 1) / sum", attention=att(normaliser={"kind": "elu1_normalised"}))
    case("linear_identity_none", "linear attention, identity feature map, no normaliser",
         attention=att(normaliser={"kind": "linear", "feature_map": "identity", "normaliser": "none"}))
    case("linear_identity_max_abs_sum", "linear attention, identity feature map, max_abs_sum",
         attention=att(normaliser={"kind": "linear", "feature_map": "identity", "normaliser": "max_abs_sum"}))
    case("linear_elu1_max_abs_sum", "linear attention, elu1 feature map, max_abs_sum",
         attention=att(normaliser={"kind": "linear", "feature_map": "elu1", "normaliser": "max_abs_sum"}))
    case("linear_elu1_sum", "linear attention, elu1 feature map, divided by the row sum + 1e-8 (Gu et al.)",
         attention=att(normaliser={"kind": "linear", "feature_map": "elu1", "normaliser": "sum"}))
    case("linear_mlp_max_abs_sum", "linear attention, mlp feature map (phi.w1, phi.w2), max_abs_sum",
         attention=att(normaliser={"kind": "linear", "feature_map": "mlp", "normaliser": "max_abs_sum"}))
    case("row_scale_0p5", "softmax weights scaled by 0.5", attention=att(row_scale=0.5))
    case("slot_sink_logit", "a learnable per-head sink logit column (value 0)",
         attention=att(slot={"kind": "sink_logit"}))
    case("slot_kv_bias", "one learnable key/value slot per head",
         attention=att(slot={"kind": "kv_bias", "shared": False}))
    case("slot_kv_bias_shared", "one learnable key/value slot shared by the heads",
         attention=att(slot={"kind": "kv_bias", "shared": True}))
    case("slot_k_bias_e1", "k_bias: learnable key (first 2 dims), fixed value e1 * 2, per head",
         attention=att(slot={"kind": "k_bias", "shared": False, "value": {"kind": "e1", "m": 2.0},
                             "learnable_dims": 2}))
    case("slot_k_bias_ones_shared", "k_bias: learnable shared key (all dims), fixed value 1/sqrt(d_h)",
         attention=att(slot={"kind": "k_bias", "shared": True, "value": {"kind": "ones", "m": 1.0}}))
    case("slot_k_bias_zero_fixed", "k_bias: zero key and zero value, not trainable (= softmax_n n=1)",
         attention=att(slot={"kind": "k_bias", "shared": False, "value": {"kind": "zero"}, "trainable": False}))
    case("slot_v_bias", "a learnable value bias per head added after the weighted sum",
         attention=att(slot={"kind": "v_bias", "shared": False}))
    case("slot_v_bias_shared", "a learnable value bias shared by the heads",
         attention=att(slot={"kind": "v_bias", "shared": True}))
    case("slot_memory_kv", "two learnable memory key/value pairs per head",
         attention=att(slot={"kind": "memory_kv", "n": 2}))
    case("sink_tokens_2_rope", "two learnable sink tokens prepended; rope over the full sequence",
         sink_tokens=2)
    case("sink_tokens_1_learned", "one learnable sink token; learned positions pos_embed[0:T] go to the real "
                                  "tokens only", sink_tokens=1, positions={"kind": "learned"})
    case("sink_tokens_1_alibi", "one learnable sink token with alibi over the full sequence",
         sink_tokens=1, positions={"kind": "alibi"})
    case("gate_headwise", "sigmoid output gate, one scalar per head", attention=att(gate={"kind": "headwise"}))
    case("gate_elementwise", "sigmoid output gate, one per channel", attention=att(gate={"kind": "elementwise"}))
    case("mask_prefix_3", "prefix-LM mask: the first 3 tokens are visible to every query",
         attention=att(mask={"kind": "prefix", "p": 3}))
    case("mask_sliding_window_3", "causal sliding window of 3", attention=att(mask={"kind": "sliding_window", "w": 3}))
    case("mask_sinks_window", "causal window of 2 plus the first token always visible",
         attention=att(mask={"kind": "sinks_window", "sinks": 1, "w": 2}))
    case("pos_nope", "no position information", positions={"kind": "nope"})
    case("pos_sinusoidal", "sinusoidal absolute positions added to the embeddings", positions={"kind": "sinusoidal"})
    case("pos_learned", "learned absolute positions (pos_embed)", positions={"kind": "learned"})
    case("pos_alibi_h2", "alibi, 2 heads (slopes 2^-4, 2^-8)", positions={"kind": "alibi"})
    case("pos_alibi_h3", "alibi, 3 heads (non-power-of-two slopes 2^-4, 2^-8, 2^-2), d_model 12",
         d_model=12, n_heads=3, positions={"kind": "alibi"})
    case("pos_alibi_h6", "alibi, 6 heads (slopes 2^-2,-4,-6,-8 then 2^-1, 2^-3), d_model 12, d_h 2",
         d_model=12, n_heads=6, positions={"kind": "alibi"})
    case("pos_rope_fraction_0p5", "rope on half of each head (r = 2 of d_h = 4)",
         positions={"kind": "rope", "base": 10000.0, "fraction": 0.5})
    case("pos_rope_fraction_0p5_dh6", "rope fraction 0.5 of d_h = 6 -> r = 2 (largest even <= 3), base 100",
         d_model=12, positions={"kind": "rope", "base": 100.0, "fraction": 0.5})
    case("pos_relative_ctx12", "T5 relative bias, 8 buckets, max_distance 16, ctx 12 (log buckets used)",
         ctx=12, positions={"kind": "relative", "buckets": 8, "max_distance": 16})
    case("pos_relative_prefix", "T5 relative bias with a prefix mask (future buckets used)",
         positions={"kind": "relative", "buckets": 8, "max_distance": 16},
         attention=att(mask={"kind": "prefix", "p": 4}))
    case("block_post_norm", "post-norm blocks, no final norm", block={"kind": "post_norm"})
    case("block_parallel", "parallel attention + FFN from one norm, fixed gains 1", block={"kind": "parallel"})
    case("block_parallel_gains", "parallel block, trainable gains alpha 0.9, beta_sa 1.1, beta_ff 0.8",
         block={"kind": "parallel", "gains": gains(alpha=(0.9, True), beta_sa=(1.1, True), beta_ff=(0.8, True))})
    case("block_pre_norm_gains", "pre-norm block, trainable gains 0.9 / 1.1 / 0.8 / 1.2",
         block={"kind": "pre_norm", "gains": gains(alpha_sa=(0.9, True), beta_sa=(1.1, True),
                                                   alpha_ff=(0.8, True), beta_ff=(1.2, True))})
    case("block_pre_norm_gains_mixed", "pre-norm block, trainable alpha_sa 0.9 and beta_ff 1.1, fixed "
                                       "beta_sa 0.75 and alpha_ff 1.25",
         block={"kind": "pre_norm", "gains": gains(alpha_sa=(0.9, True), beta_sa=(0.75, False),
                                                   alpha_ff=(1.25, False), beta_ff=(1.1, True))})
    case("norm_layer_norm", "layer norm (gain and bias) everywhere", norm={"kind": "layer_norm", "eps": 1e-5})
    case("ffn_relu", "FFN relu", ffn={"kind": "relu"})
    case("ffn_gelu", "FFN gelu (exact erf)", ffn={"kind": "gelu"})
    case("ffn_gelu_tanh", "FFN gelu, tanh approximation (GPT-2's gelu_new)", ffn={"kind": "gelu_tanh"})
    case("gqa_kv1", "grouped-query attention: 4 query heads share 1 key/value head",
         n_heads=4, n_kv_heads=1)
    case("gqa_kv2_qkv_bias", "grouped-query attention (4 heads, 2 kv heads) with q/k/v biases only (Qwen2)",
         n_heads=4, n_kv_heads=2, qkv_bias=True)
    case("rope_adjacent", "RoPE rotating adjacent pairs (2i, 2i+1), as GGUF stores LLaMA",
         positions={"kind": "rope", "base": 10000.0, "fraction": 1.0, "pairing": "adjacent"})
    case("parallel_two_norms", "GPT-NeoX block: parallel, attention and MLP each with their own LayerNorm, partial RoPE",
         block={"kind": "parallel", "separate_norms": True}, norm={"kind": "layer_norm", "eps": 1e-5},
         positions={"kind": "rope", "base": 10000.0, "fraction": 0.5}, ffn={"kind": "gelu"}, bias=True)
    case("ffn_silu", "FFN silu", ffn={"kind": "silu"})
    case("ffn_geglu", "FFN geglu", ffn={"kind": "geglu"})
    case("ffn_reglu", "FFN reglu", ffn={"kind": "reglu"})
    case("bias_true", "biases on every linear layer (attention, FFN, head)", bias=True)
    case("head_tied", "head tied to the embedding", head="tied")
    case("gpt2_style", "layer_norm, learned positions, gelu, biases, tied head (no head bias)",
         norm={"kind": "layer_norm", "eps": 1e-5}, positions={"kind": "learned"},
         ffn={"kind": "gelu"}, bias=True, head="tied")
    case("combo_sink_kvbias_alibi_gate_window",
         "sink_tokens 1 + kv_bias + alibi + headwise gate (with biases) + sliding window 3",
         sink_tokens=1, positions={"kind": "alibi"}, bias=True,
         attention=att(slot={"kind": "kv_bias", "shared": False}, gate={"kind": "headwise"},
                       mask={"kind": "sliding_window", "w": 3}))
    case("combo_sinks_memory_relative_softmax_n",
         "sink_tokens 2 + memory_kv 1 + relative + softmax_n 1 + elementwise gate + sinks_window + "
         "layer_norm + post_norm",
         sink_tokens=2, positions={"kind": "relative", "buckets": 8, "max_distance": 16},
         norm={"kind": "layer_norm", "eps": 1e-5}, block={"kind": "post_norm"},
         attention=att(normaliser={"kind": "softmax_n", "n": 1.0}, slot={"kind": "memory_kv", "n": 1},
                       gate={"kind": "elementwise"}, mask={"kind": "sinks_window", "sinks": 1, "w": 2}))
    # Skipless transformers (docs/reference.md §3). Weights are random here (ΔW, gains, W_Q non-zero),
    # so every gradient is exercised; the init values only matter to sinklab's tests of init.
    orth = {"kind": "reparam", "init": "orthogonal",
            "alpha": {"init": 1.0, "trainable": True}, "beta": {"init": 1.0, "trainable": True}}
    shaped = {"kind": "shaped", "alpha": 1.0, "beta": 1.0, "gamma": 1.0, "trainable": True}
    skip_attn = {"kind": "pre_norm", "gains": gains(alpha_sa=(0.0, False), beta_ff=(0.1, True))}
    sas = {"kind": "sas", "beta_ff": {"init": 0.1, "trainable": True}}
    sas_p = {"kind": "sas_p", "beta_sa": {"init": 1.0, "trainable": True},
             "beta_ff": {"init": 0.1, "trainable": True}}
    case("value_skipinit", "no attention skip, A <- alpha I + beta A per head, W_V/W_O = alpha W0 + beta dW "
         "with orthogonal W0", block=skip_attn,
         attention=att(shaping={"kind": "value_skipinit", "alpha": 1.0, "beta": 0.0, "trainable": True},
                       value_output=orth))
    case("shaped_fixed_identity_reparam", "shaped attention with fixed (constant) alpha beta gamma = 1, "
         "W0 = identity, fixed alpha_W, trainable beta_W",
         block=skip_attn,
         attention=att(query_init="zero",
                       shaping={"kind": "shaped", "alpha": 1.0, "beta": 1.0, "gamma": 1.0, "trainable": False},
                       value_output={"kind": "reparam", "init": "identity",
                                     "alpha": {"init": 1.0, "trainable": False},
                                     "beta": {"init": 0.5, "trainable": True}}))
    case("sas", "SAS block: shaped attention, no W_V/W_O except layer-0 W_V = I + dW, MLP skip with beta_ff",
         block=sas, norm={"kind": "layer_norm", "eps": 1e-5}, ffn={"kind": "gelu"},
         attention=att(query_init="zero", shaping=shaped,
                       value_output={"kind": "identity", "first_layer_value": True}))
    case("sas_p_bias", "SAS-P block with biases in every linear layer", block=sas_p, bias=True,
         attention=att(query_init="zero", shaping=shaped,
                       value_output={"kind": "identity", "first_layer_value": True}))
    case("sas_p_nonorm", "SAS-P without norms except a LayerNorm on the first layer's input",
         block=sas_p, norm={"kind": "none"}, input_norm={"kind": "layer_norm", "eps": 1e-5},
         attention=att(query_init="zero", shaping=shaped,
                       value_output={"kind": "identity", "first_layer_value": False}))
    case("e_spa", "E-SPA logit bias Gamma_l and row rescaling D_l, orthogonal reparameterised V/O",
         block=skip_attn, positions={"kind": "nope"},
         attention=att(query_init="zero", spa={"kind": "e_spa", "gamma": 0.2}, value_output=orth))
    case("u_spa_dense", "U-SPA with dense V/O and the default pre-norm block", n_layers=3,
         attention=att(query_init="zero", spa={"kind": "u_spa", "rho": 0.7}))
    case("shaped_attention_only_window", "attention-only (ffn none) shaped stack, sliding window 3: "
         "C is uniform over the window", ffn={"kind": "none"},
         block={"kind": "pre_norm", "gains": gains(alpha_sa=(0.0, False), alpha_ff=(1.0, False),
                                                  beta_ff=(1.0, False))},
         attention=att(query_init="zero", shaping=shaped, value_output=orth,
                       mask={"kind": "sliding_window", "w": 3}))
    # Newer remedies (docs/reference.md §1.1-1.2): softpick, clipped softmax, Scalable-Softmax, and
    # the per-token and sparse head gates.
    case("softpick", "softpick: ReLU(e^s - 1) / (sum |e^s - 1| + 1e-8) (Zuhri et al. 2025)",
         attention=att(normaliser={"kind": "softpick", "eps": 1e-8}))
    case("softpick_kv_bias_window", "softpick with a per-head key/value slot and a sliding window of 3",
         attention=att(normaliser={"kind": "softpick", "eps": 1e-6}, slot={"kind": "kv_bias", "shared": False},
                       mask={"kind": "sliding_window", "w": 3}))
    case("softpick_sink_tokens_gate", "softpick with one sink token and the sparse head gate",
         sink_tokens=1, attention=att(normaliser={"kind": "softpick", "eps": 1e-8},
                                      gate={"kind": "sparse", "dims": 3}))
    case("clipped_softmax", "clipped softmax with Bondarenko et al.'s gamma = -0.025, zeta = 1",
         attention=att(normaliser={"kind": "clipped_softmax", "gamma": -0.025, "zeta": 1.0}))
    case("clipped_softmax_wide", "clipped softmax, gamma = -0.3, zeta = 1.3: weights below 0.1875 clip to 0, "
         "above 0.8125 to 1 (both clips reached at this size)",
         attention=att(normaliser={"kind": "clipped_softmax", "gamma": -0.3, "zeta": 1.3}))
    case("ssmax_per_head", "Scalable-Softmax: softmax((sigma_h ln n_i) s), sigma per head",
         attention=att(normaliser={"kind": "scalable_softmax", "per_head": True, "init": 0.5, "trainable": True}))
    case("ssmax_per_layer_memory_prefix", "Scalable-Softmax, one sigma per layer, 2 memory key/value pairs "
         "(counted in n) and a prefix of 3",
         attention=att(normaliser={"kind": "scalable_softmax", "per_head": False, "init": 0.5,
                                   "trainable": True},
                       slot={"kind": "memory_kv", "n": 2}, mask={"kind": "prefix", "p": 3}))
    case("ssmax_fixed_sink_tokens", "Scalable-Softmax with a fixed sigma = 0.7 per head and 2 sink tokens "
         "(counted in n)", sink_tokens=2,
         attention=att(normaliser={"kind": "scalable_softmax", "per_head": True, "init": 0.7, "trainable": False}))
    case("gate_per_token", "Bondarenko et al.'s per-token gate: sigma(u_h . w_h + b_h) on head h's own slice",
         attention=att(gate={"kind": "per_token", "init": 0.25}))
    case("gate_sparse", "sparse head gate: sigma(u[:3] W), W (3, H), no bias (modded-nanogpt)",
         attention=att(gate={"kind": "sparse", "dims": 3}))
    case("gate_per_token_gqa_bias", "per-token gate with grouped-query attention and biases everywhere",
         n_heads=4, n_kv_heads=2, bias=True, attention=att(gate={"kind": "per_token", "init": 0.25}))
    names = [c["name"] for c in C]
    assert len(names) == len(set(names))
    return C


def case_data(c):
    """Weights, tokens, targets and mask of a case, from a generator seeded by its name."""
    m, V = c["model"], c["vocab"]
    rng = np.random.default_rng(zlib.crc32(c["name"].encode()))
    specs = param_specs(m, V)
    w = init_weights(specs, rng)
    T = m["ctx"]
    tokens = rng.integers(0, V, size=(2, T))
    targets = rng.integers(0, V, size=(2, T))
    mask = (rng.random((2, T)) > 0.2).astype(np.float64)
    if mask.sum() == 0:
        mask[0, 0] = 1.0
    return specs, w, tokens, targets, mask


# --------------------------------------------------------------------------------------------
# Self-checks: identities between variants and hand-computed tables

def self_checks():
    # ALiBi slopes and T5 buckets by hand.
    assert np.array_equal(alibi_slopes(2), [2.0 ** -4, 2.0 ** -8])
    assert np.array_equal(alibi_slopes(3), [2.0 ** -4, 2.0 ** -8, 2.0 ** -2])
    assert np.array_equal(alibi_slopes(4), [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8])
    assert np.array_equal(alibi_slopes(6), [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3])
    past = [t5_bucket(-n, 8, 16) for n in range(0, 20)]
    assert past == [0, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3], past
    future = [t5_bucket(n, 8, 16) for n in range(1, 8)]
    assert future == [5, 6, 6, 6, 6, 7, 7], future
    # rope fraction: r = largest even integer <= fraction * d_h
    assert rope_tables({"base": 1e4, "fraction": 0.5}, 6, 3)[0] == 2
    assert rope_tables({"base": 1e4, "fraction": 1.0}, 4, 3)[0] == 4

    rng = np.random.default_rng(7)
    V = 11

    def data(m, seed_name):
        c = {"name": seed_name, "model": m, "vocab": V}
        return case_data(c)

    def logits(m, w, tokens):
        return forward(m, w, tokens)[0]

    def close(a, b, tol=1e-12):
        assert a.shape == b.shape, (a.shape, b.shape)
        err = float(np.max(np.abs(a - b)))
        assert err <= tol, err

    base = make_model()
    _, w, tokens, _, _ = data(base, "selfcheck")
    ref = logits(base, w, tokens)
    # softmax_n n = 0 == softmax
    close(logits(make_model(attention={"normaliser": {"kind": "softmax_n", "n": 0.0}}), w, tokens), ref)
    # softmax_n n = 1 == sink_logit fixed at 0 == k_bias zero (trainable = false)
    sm1 = logits(make_model(attention={"normaliser": {"kind": "softmax_n", "n": 1.0}}), w, tokens)
    assert np.max(np.abs(sm1 - ref)) > 1e-3  # the +1 matters
    msl = make_model(attention={"slot": {"kind": "sink_logit"}})
    wsl = dict(w)
    for l in range(2):
        wsl[f"blocks.{l}.attn.sink_logit"] = np.zeros(2)
    close(logits(msl, wsl, tokens), sm1)
    mkb = make_model(attention={"slot": {"kind": "k_bias", "shared": False, "value": {"kind": "zero"},
                                         "trainable": False}})
    wkb = dict(w)
    for name, shape, init, tr in param_specs(mkb, V):
        if name not in wkb:
            assert init[0] == "const" and not tr
            wkb[name] = init[1]
    close(logits(mkb, wkb, tokens), sm1)
    # kv_bias with v* = 0 == k_bias (zero value, all dims learnable) with the same key
    mkv = make_model(attention={"slot": {"kind": "kv_bias", "shared": False}})
    mkb2 = make_model(attention={"slot": {"kind": "k_bias", "shared": False, "value": {"kind": "zero"}}})
    wkv, wkb2 = dict(w), dict(w)
    for l in range(2):
        ks = f32(rng.normal(0, 0.5, size=(2, 4)))
        wkv[f"blocks.{l}.attn.k_star"] = wkb2[f"blocks.{l}.attn.k_star"] = ks
        wkv[f"blocks.{l}.attn.v_star"] = wkb2[f"blocks.{l}.attn.v_star"] = np.zeros((2, 4))
    close(logits(mkv, wkv, tokens), logits(mkb2, wkb2, tokens))
    # memory_kv n = 1 == kv_bias per head with the same key/value
    mmem = make_model(attention={"slot": {"kind": "memory_kv", "n": 1}})
    wmem = dict(w)
    for l in range(2):
        wkv[f"blocks.{l}.attn.v_star"] = f32(rng.normal(0, 0.5, size=(2, 4)))
        wmem[f"blocks.{l}.attn.mem_k"] = wkv[f"blocks.{l}.attn.k_star"][:, None, :]
        wmem[f"blocks.{l}.attn.mem_v"] = wkv[f"blocks.{l}.attn.v_star"][:, None, :]
    close(logits(mmem, wmem, tokens), logits(mkv, wkv, tokens))
    # v_bias zero == baseline
    mvb = make_model(attention={"slot": {"kind": "v_bias", "shared": True}})
    wvb = dict(w)
    for l in range(2):
        wvb[f"blocks.{l}.attn.v_bias"] = np.zeros((1, 4))
    close(logits(mvb, wvb, tokens), ref)
    # prefix p = 1 == causal; sliding_window w >= ctx == causal; sinks_window sinks=0 == sliding_window
    close(logits(make_model(attention={"mask": {"kind": "prefix", "p": 1}}), w, tokens), ref)
    for win in (6, 9):
        close(logits(make_model(attention={"mask": {"kind": "sliding_window", "w": win}}), w, tokens), ref)
        close(logits(make_model(attention={"mask": {"kind": "sinks_window", "sinks": 1, "w": win}}), w, tokens), ref)
    close(logits(make_model(attention={"mask": {"kind": "sinks_window", "sinks": 0, "w": 2}}), w, tokens),
          logits(make_model(attention={"mask": {"kind": "sliding_window", "w": 2}}), w, tokens))
    # rope fraction 0 == nope
    close(logits(make_model(positions={"kind": "rope", "base": 10000.0, "fraction": 0.0}), w, tokens),
          logits(make_model(positions={"kind": "nope"}), w, tokens))
    # relative with rel_bias = 0 == nope
    wrel = dict(w)
    wrel["rel_bias"] = np.zeros((8, 2))
    close(logits(make_model(positions={"kind": "relative", "buckets": 8, "max_distance": 16}), wrel, tokens),
          logits(make_model(positions={"kind": "nope"}), w, tokens))
    # row_scale 1 written explicitly; gains fixed at 1 and trainable at 1 == default block
    wg = dict(w)
    for l in range(2):
        for n in ("alpha_sa", "beta_sa", "alpha_ff", "beta_ff"):
            wg[f"blocks.{l}.{n}"] = np.ones(1)
    mg = make_model(block={"kind": "pre_norm", "gains": gains(alpha_sa=(1.0, True), beta_sa=(1.0, True),
                                                               alpha_ff=(1.0, True), beta_ff=(1.0, True))})
    close(logits(mg, wg, tokens), ref)
    # gate with zero weights (and zero bias) == plain model with W_O halved
    for bias in (False, True):
        mb = make_model(bias=bias)
        _, wb, tok, _, _ = data(mb, "selfcheck_gate")
        half = dict(wb)
        for l in range(2):
            half[f"blocks.{l}.attn.wo.weight"] = wb[f"blocks.{l}.attn.wo.weight"] / 2
        want = logits(mb, half, tok)
        for gk, width in (("headwise", 2), ("elementwise", 8)):
            mgk = make_model(bias=bias, attention={"gate": {"kind": gk}})
            wgk = dict(wb)
            for l in range(2):
                wgk[f"blocks.{l}.attn.gate.weight"] = np.zeros((8, width))
                if bias:
                    wgk[f"blocks.{l}.attn.gate.bias"] = np.zeros(width)
            close(logits(mgk, wgk, tok), want)
    # newer remedies (docs/reference.md §1.1-1.2)
    # clipped softmax with gamma = 0, zeta = 1 == softmax
    close(logits(make_model(attention={"normaliser": {"kind": "clipped_softmax", "gamma": 0.0, "zeta": 1.0}}),
                 w, tokens), ref)
    # Scalable-Softmax with sigma = 1 / ln T under a prefix p = T (every query sees T keys) == softmax
    T = base["ctx"]
    mpre = make_model(attention={"mask": {"kind": "prefix", "p": T}})
    mss = make_model(attention={"mask": {"kind": "prefix", "p": T},
                                "normaliser": {"kind": "scalable_softmax", "per_head": True,
                                               "init": 1.0 / math.log(T), "trainable": True}})
    wss = dict(w)
    for l in range(2):
        wss[f"blocks.{l}.attn.ssmax_scale"] = np.full(2, 1.0 / math.log(T))
    close(logits(mss, wss, tokens), logits(mpre, w, tokens))
    # Scalable-Softmax with sigma = 0 == softmax with W_Q = 0 (uniform attention)
    wq0 = dict(w)
    for l in range(2):
        wss[f"blocks.{l}.attn.ssmax_scale"] = np.zeros(2)
        wq0[f"blocks.{l}.attn.wq.weight"] = np.zeros((8, 8))
    mss0 = make_model(attention={"normaliser": {"kind": "scalable_softmax", "per_head": True, "init": 0.0,
                                                "trainable": True}})
    ref_q0 = logits(base, wq0, tokens)
    assert np.max(np.abs(ref_q0 - ref)) > 1e-3
    close(logits(mss0, wss, tokens), ref_q0)
    # softpick with W_Q = 0: every logit is 0, every weight 0, attention adds nothing == W_O = 0
    wqo0 = dict(wq0)
    for l in range(2):
        wqo0[f"blocks.{l}.attn.wo.weight"] = np.zeros((8, 8))
    close(logits(make_model(attention={"normaliser": {"kind": "softpick", "eps": 1e-8}}), wq0, tokens),
          logits(base, wqo0, tokens))
    # per-token and sparse gates at zero weights (and zero bias) == W_O halved; a sparse gate on all
    # d dimensions == the headwise gate without bias, same weights
    half = dict(w)
    for l in range(2):
        half[f"blocks.{l}.attn.wo.weight"] = w[f"blocks.{l}.attn.wo.weight"] / 2
    want = logits(base, half, tokens)
    wpt, wsp = dict(w), dict(w)
    for l in range(2):
        wpt[f"blocks.{l}.attn.gate.weight"] = np.zeros((2, 4))
        wpt[f"blocks.{l}.attn.gate.bias"] = np.zeros(2)
        wsp[f"blocks.{l}.attn.gate.weight"] = np.zeros((3, 2))
    close(logits(make_model(attention={"gate": {"kind": "per_token", "init": 0.5}}), wpt, tokens), want)
    close(logits(make_model(attention={"gate": {"kind": "sparse", "dims": 3}}), wsp, tokens), want)
    whw = dict(w)
    for l in range(2):
        whw[f"blocks.{l}.attn.gate.weight"] = f32(rng.normal(0, 0.5, size=(8, 2)))
    close(logits(make_model(attention={"gate": {"kind": "sparse", "dims": 8}}), whw, tokens),
          logits(make_model(attention={"gate": {"kind": "headwise"}}), whw, tokens))
    # softpick: rows sum to at most 1 and masked entries are exactly 0
    _, pp = forward(make_model(attention={"normaliser": {"kind": "softpick", "eps": 1e-8}}), w, tokens)
    assert np.all(pp[1].sum(-1) <= 1.0 + 1e-12)
    assert np.all(pp[1][..., np.triu(np.ones((6, 6), dtype=bool), 1)] == 0.0)
    # probe rows: softmax rows sum to 1 and masked entries are exactly 0
    _, probes = forward(base, w, tokens)
    close(probes[1].sum(-1), np.ones((2, 2, 6)))
    assert np.all(probes[1][..., np.triu(np.ones((6, 6), dtype=bool), 1)] == 0.0)
    print("self-checks passed")


# --------------------------------------------------------------------------------------------
# Output

def f32_json(a):
    """{"shape", "data"}: each value the shortest decimal that round-trips its float32."""
    a = np.asarray(a, dtype=np.float64)
    a32 = a.astype(np.float32)
    assert np.array_equal(a32.astype(np.float64), a), "weight not float32-representable"
    data = []
    for v in a32.ravel():
        x = float(str(v))
        assert np.float32(x) == v
        data.append(x)
    return {"shape": list(a.shape), "data": data}


def f64_json(a):
    a = np.asarray(a, dtype=np.float64)
    assert np.all(np.isfinite(a))
    return {"shape": list(a.shape), "data": [float(x) for x in a.ravel()]}


def run_case(c):
    m, V = c["model"], c["vocab"]
    specs, w, tokens, targets, mask = case_data(c)
    assert [s[0] for s in specs] == list(dict.fromkeys(s[0] for s in specs))
    for name, shape, _, _ in specs:
        assert w[name].shape == shape
    kinks = Kinks()
    logits, probes = forward(m, w, tokens, kinks)
    loss = masked_nll(logits, targets, mask)
    assert kinks.min > KINK_MARGIN, (c["name"], kinks.min)
    trainable = [s[0] for s in specs if s[3]]
    grads = fd_grads(m, w, trainable, tokens, targets, mask, FD_STEP)
    gmax = max(float(np.max(np.abs(g))) for g in grads.values())
    d1 = fd_grads(m, w, trainable, tokens, targets, mask, FD_CHECK_STEP)
    d2 = fd_grads(m, w, trainable, tokens, targets, mask, 2 * FD_CHECK_STEP)
    rich = {k: (4.0 * d1[k] - d2[k]) / 3.0 for k in trainable}
    fd_err = max(float(np.max(np.abs(grads[k] - rich[k]))) for k in trainable) / gmax
    assert fd_err < FD_CHECK_TOL, (c["name"], fd_err)
    B, H, S, _ = probes[1].shape
    assert S == m["sink_tokens"] + m["ctx"] and H == m["n_heads"] and B == 2
    toml_text = model_toml(m)
    assert tomllib.loads(toml_text) == {"model": m}, "TOML text does not round-trip the config"
    out = {
        "name": c["name"],
        "description": c["description"],
        "model_toml": toml_text,
        "vocab": V,
        "weights": {k: f32_json(w[k]) for k in sorted(w)},
        "trainable": sorted(trainable),
        "tokens": tokens.tolist(),
        "targets": targets.tolist(),
        "mask": mask.tolist(),
        "logits": f64_json(logits),
        "loss": loss,
        "grads": {k: f64_json(grads[k]) for k in sorted(grads)},
        "probe": {"layer": 1, "attn": f64_json(probes[1])},
    }
    return out, loss, gmax, fd_err, kinks.min


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/zoo_golden.json"))
    ap.add_argument("--only", default=None, help="comma-separated case names (for debugging; does not write)")
    args = ap.parse_args()
    t0 = time.time()
    self_checks()
    cases = build_cases()
    if args.only:
        keep = set(args.only.split(","))
        cases = [c for c in cases if c["name"] in keep]
    results = []
    for c in cases:
        t1 = time.time()
        out, loss, gmax, fd_err, kmin = run_case(c)
        results.append(out)
        print(f"{c['name']:42s} loss {loss:.6f}  max|grad| {gmax:.4f}  fd vs Richardson {fd_err:.1e} rel  "
              f"kink margin {kmin:.1e}  ({time.time() - t1:.1f}s)", flush=True)
    doc = {
        "generated_by": "python3 scripts/reference.py",
        "numpy_version": np.__version__,
        "fd_step": FD_STEP,
        "fd_scheme": "central differences (L(w+h)-L(w-h))/(2h), fixed absolute h = fd_step, float64, "
                     "on the float32-rounded weights; checked against Richardson (4 D(1e-5) - D(2e-5))/3 "
                     "to < 1e-7 relative to max|grad| (observed ~1e-9)",
        "cases": results,
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"
    if args.only:
        print(f"--only: not writing ({len(text)} bytes); {time.time() - t0:.1f}s")
        return
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}: {len(cases)} cases, {len(text)} bytes, sha256 "
          f"{hashlib.sha256(text.encode()).hexdigest()[:16]}, {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
