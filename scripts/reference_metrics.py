#!/usr/bin/env python3
"""Independent NumPy reference for sinklab's sink metrics (docs/reference.md §4).

Regenerate the fixture the Rust tests compare against (numpy pinned in
scripts/requirements.txt; `bash scripts/setup_python.sh` creates the venv):

    ~/.cache/sinklab-venv/bin/python scripts/reference_metrics.py
        # writes tests/fixtures/metrics_golden.json (deterministic: same bytes every run)

Nothing here imports sinklab or reads src/metrics.rs: every metric is written from its
definition with plain loops, in float64. Positions are 0-based ("token 1" = index 0).

Inputs (deterministic, from numpy.random.default_rng with fixed seeds) are float32 values:
each JSON number is the shortest decimal that round-trips to that float32, so a reader that
parses it as f64 and casts to f32 gets the float32 value bit for bit. Expected values are
computed in float64 *from those float32 values* (float32 -> float64 is exact), so an
implementation that holds f32 and accumulates in f64 should agree to ~1e-12 relative.
Random attention is a causal softmax of generated logits, quantised to multiples of 1e-6
(each row's largest entry takes the rounding residual, so rows sum to 1 exactly in decimal
and within float32 precision as stored; entries below 5e-7 become exact zeros). Random
hidden states, keys and values are rounded to 4 decimals before the float32 rounding.

Definitions, per layer l, sequence b, head h (A = attention probabilities [B, H, T, T],
causal, rows sum to 1; h = hidden states [B, T, D]; k, v = keys/values [B, H, T, d_h]):
  alpha[l,b,h,k]      = 1/(T-k) * sum_{t=k}^{T-1} A[l,b,h,t,k]             k = 0..T-1
  sink_rate[eps][k]   = 100 * mean_{l,b,h} [alpha[l,b,h,k] > eps]  (strict >)
                        eps in 0.2 0.3 0.4 0.5 0.8, k = 0..min(10,T)-1 (reported as pos k+1)
  importance_first[l][h] = mean_b alpha[l,b,h,0]
  entropy[l]          = mean_{b,h,t} -sum_j A log A   (nats, 0 log 0 = 0)
  norm_ratio[l]       = mean_b ||h[b,0]|| / mean_{b,t>=1} ||h[b,t]||   (ratio of means, L2)
  norm_first[l], norm_rest[l] = the numerator and the denominator above
  top3[l]             = mean_b of the 3 largest |h[b,:,:]| (descending)
  median_abs[l]       = mean_b median(|h[b,:,:]|)  (numpy median: mean of the two middle
                        values when the count is even)
  massive_count[l]    = mean_b #{x in h[b]: |x| > 100 and |x| >= 1000 * median(|h[b]|)}
                        (Sun et al. 2024; strict > 100, non-strict >= 1000x)
  key_norm_first[l]   = mean_{b,h} ||k[b,h,0]||,  key_norm_rest[l] = mean_{b,h,t>=1} ||k[b,h,t]||
  value_norm_first/rest likewise for v.
  first_token_mass[l] = mean_{b,h,i} A[l,b,h,i,0]   (F-Attn per layer),  f_attn = mean_l of it
  m_act               = max_l top3[l][0]

Slot-aware cases start from raw weights W [L, B, H, S, C] instead of A: C = slot_cols + S
columns (slot columns: a learned sink logit, a KV/K-bias key, memory keys; then sink_tokens
= N learnable sink-token columns; then the T real tokens), S = N + T query rows (the N
sink-token queries first; only the T real queries are measured). For real query i (row N+i)
let r = W[l,b,h,N+i,:] and front = slot_cols + N; by proxy:
  weights        r' = r,                    implicit = 0
  implicit_slot  r' = r,                    implicit = 1 - sum r        (softmax_n rows)
  non_negative   r' = r / (sum r + 1e-8),   implicit = 0
  signed         r' = |r| / sum|r|  (0 if sum|r| = 0),  implicit = 0
  A[l,b,h,i,:] = r'[front:]   (the split attention, [L, B, H, T, T])
  slot_mass[l,b,h,i] = sum r'[:front] + implicit
Every metric above is then computed on the split A (hidden [L,B,T,D], keys/values
[L,B,H,T,dh] cover the real tokens only), and in addition:
  slot_importance[l,b,h] = mean_i slot_mass[l,b,h,i]
  slot_rate[eps]      = 100 * mean_{l,b,h} [slot_importance > eps]  (strict >, same eps grid)
  slot_mass_layer[l]  = mean_{b,h,i} slot_mass[l,b,h,i]
  gate_mean[l]        = plain mean of every entry of gate[l] ([B, S, G]), when a case has one

Newer metrics (docs/reference.md §4; every case also carries attn_out [L, B, T, D], the attention
output after W_O, drawn from a generator seeded by the case name after its other inputs):
  kurtosis[l]         = mean_b mu4 / (std^4 + 1e-6) of the T*D values of hidden[l, b]: mu4 the mean
                        fourth power of the deviations from their mean, std with ddof = 1 (Bondarenko
                        et al.'s utils.kurtosis on x.view(B, -1)); attn_out_kurtosis[l] likewise
  attn_out_max_abs[l] = mean_b max |attn_out[l, b]|
  secondary[l]        = at eps 0.3, over the (b, h) of layer l and the keys k = 1 .. T - ceil(T/4)
                        (0-based; keys at least a quarter of the queries see): heads = 100 * share of
                        (b, h) with some alpha[l,b,h,k] > 0.3, count = mean number of such k per (b, h),
                        by_position[k] = 100 * share of (b, h) with alpha[l,b,h,k] > 0.3 (0 elsewhere)
  repr_entropy[l]     = mean_b -sum lam log lam over the eigenvalues lam of K / tr K, K = X X^T,
                        X = hidden[l, b] (T x D, not centred; numpy.linalg.eigvalsh, negatives from
                        rounding taken as 0); repr_entropy_norm[l] = that / ln min(T, D)
  sink1_layer[l]      = mean_h of 100 * mean_b [alpha[l,b,h,0] > 0.3]

Cases: "random_L3_T12" (strong token-1 sinks, sinks on token 3 = index 2, uniform-ish and
random heads; injected massive activations that pass and fail each half of the rule),
"thresholds_T4" (hand-built, importances exactly at or 1e-4 / 2^-10 around the thresholds;
massive values exactly at 100 and at 1000 x median), "probe_T64" (the real probe length, a sink head and a random head).
Slot-aware cases (L = B = H = 2): "softmax_sink_logit_T8" (softmax over [sink logit | tokens],
proxy weights, several heads with > 0.3 of their mass on the slot), "kv_bias_sink_tokens_T6"
(softmax over [KV bias | 2 sink tokens | tokens], proxy weights), "softmax_n_T10" (rows sum to
< 1, proxy implicit_slot), "sigmoid_T7" (unnormalised sigmoid weights in (0,1) with a slot
column, proxy non_negative), "signed_memory_gate_T9" (signed linear-kernel scores over
[2 memory keys | tokens], proxy signed, with a gate array). Their raw weights are causal
(real key j > i exactly 0; slot and sink-token columns nonzero) and quantised like the random
attention (softmax: rows sum to 1; softmax_n and sigmoid: multiples of 1e-6; signed: 4 decimals).
In the random and slot-aware cases every importance (and every slot importance) is at least
MARGIN away from every eps and every |x| is well away from both massive thresholds (asserted),
so f32-vs-f64 rounding cannot flip a count.
"""
import argparse
import json
import math
from pathlib import Path

import numpy as np

EPS_GRID = [0.2, 0.3, 0.4, 0.5, 0.8]
K_MAX = 10
MARGIN = 1e-5  # minimum |alpha - eps| in the random cases
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests/fixtures/metrics_golden.json"


# ---------------------------------------------------------------------------------------
# Inputs are float32; the JSON holds each one's shortest round-trip decimal.

def as_f32(x):
    """Round to float32 and return the float64 array of those exact float32 values."""
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)


def f32_json(a):
    """{"shape", "data"}: data row-major, each value the shortest decimal of its float32."""
    a32 = np.asarray(a).astype(np.float32)
    data = []
    for v in a32.ravel():
        d = float(str(v))  # shortest decimal that round-trips to this float32
        assert np.float32(d) == v
        data.append(d)
    return {"shape": list(a32.shape), "data": data}


# ---------------------------------------------------------------------------------------
# The metrics, written from the definitions with plain loops (float64).

def importance(attn):
    """attn [L, B, H, T, T] -> alpha [L, B, H, T]."""
    L, B, H, T, _ = attn.shape
    alpha = np.zeros((L, B, H, T))
    for l in range(L):
        for b in range(B):
            for h in range(H):
                for k in range(T):
                    s = 0.0
                    for t in range(k, T):
                        s += attn[l, b, h, t, k]
                    alpha[l, b, h, k] = s / (T - k)
    return alpha


def sink_rate(alpha, eps, k_max):
    L, B, H, T = alpha.shape
    out = []
    for k in range(min(k_max, T)):
        hits = 0
        total = 0
        for l in range(L):
            for b in range(B):
                for h in range(H):
                    total += 1
                    if alpha[l, b, h, k] > eps:
                        hits += 1
        out.append(100.0 * hits / total)
    return out


def importance_first(alpha):
    L, B, H, _ = alpha.shape
    return [[float(sum(alpha[l, b, h, 0] for b in range(B)) / B) for h in range(H)] for l in range(L)]


def entropy(attn):
    L, B, H, T, _ = attn.shape
    out = []
    for l in range(L):
        total = 0.0
        rows = 0
        for b in range(B):
            for h in range(H):
                for t in range(T):
                    e = 0.0
                    for j in range(T):
                        a = attn[l, b, h, t, j]
                        if a > 0.0:
                            e -= a * math.log(a)
                    total += e
                    rows += 1
        out.append(float(total / rows))
    return out


def l2(vec):
    return math.sqrt(sum(float(x) * float(x) for x in vec))


def hidden_metrics(hidden):
    """hidden [L, B, T, D] -> dict of per-layer lists."""
    L, B, T, D = hidden.shape
    res = {k: [] for k in ("norm_first", "norm_rest", "norm_ratio", "top3", "median_abs", "massive_count")}
    for l in range(L):
        first = [l2(hidden[l, b, 0]) for b in range(B)]
        rest = [l2(hidden[l, b, t]) for b in range(B) for t in range(1, T)]
        nf = sum(first) / len(first)
        nr = sum(rest) / len(rest)
        top = [0.0, 0.0, 0.0]
        med_sum = 0.0
        massive = 0
        for b in range(B):
            absvals = sorted(abs(float(x)) for x in hidden[l, b].ravel())
            n = len(absvals)
            desc = absvals[::-1]
            for i in range(3):
                top[i] += desc[i]
            med = absvals[n // 2] if n % 2 == 1 else 0.5 * (absvals[n // 2 - 1] + absvals[n // 2])
            assert med == float(np.median(np.abs(hidden[l, b])))
            med_sum += med
            for x in absvals:
                if x > 100.0 and x >= 1000.0 * med:
                    massive += 1
        res["norm_first"].append(nf)
        res["norm_rest"].append(nr)
        res["norm_ratio"].append(nf / nr)
        res["top3"].append([v / B for v in top])
        res["median_abs"].append(med_sum / B)
        res["massive_count"].append(massive / B)
    return res


def first_rest_norms(x):
    """x [L, B, H, T, dh] -> ([first per layer], [rest per layer])."""
    L, B, H, T, _ = x.shape
    first, rest = [], []
    for l in range(L):
        f = [l2(x[l, b, h, 0]) for b in range(B) for h in range(H)]
        r = [l2(x[l, b, h, t]) for b in range(B) for h in range(H) for t in range(1, T)]
        first.append(sum(f) / len(f))
        rest.append(sum(r) / len(r))
    return first, rest


def first_token_mass(attn):
    """F-Attn per layer: mean_{b,h,i} attn[l,b,h,i,0]."""
    L, B, H, T, _ = attn.shape
    out = []
    for l in range(L):
        s = 0.0
        for b in range(B):
            for h in range(H):
                for i in range(T):
                    s += attn[l, b, h, i, 0]
        out.append(float(s / (B * H * T)))
    return out


def split_attention(raw, slot_cols, sink_tokens, proxy):
    """raw [L, B, H, S, C] (C = slot_cols + S, S = sink_tokens + T) ->
    (attn [L, B, H, T, T], slot_mass [L, B, H, T]) for the T real queries (rows N + i)."""
    L, B, H, S, C = raw.shape
    N = sink_tokens
    T = S - N
    front = slot_cols + N
    assert C == slot_cols + S
    attn = np.zeros((L, B, H, T, T))
    slot_mass = np.zeros((L, B, H, T))
    for l in range(L):
        for b in range(B):
            for h in range(H):
                for i in range(T):
                    r = [float(x) for x in raw[l, b, h, N + i]]
                    implicit = 0.0
                    if proxy == "weights":
                        rp = r
                    elif proxy == "implicit_slot":
                        rp = r
                        total = 0.0
                        for x in r:
                            total += x
                        implicit = 1.0 - total
                    elif proxy == "non_negative":
                        total = 0.0
                        for x in r:
                            total += x
                        rp = [x / (total + 1e-8) for x in r]
                    elif proxy == "signed":
                        total = 0.0
                        for x in r:
                            total += abs(x)
                        rp = [abs(x) / total if total != 0.0 else 0.0 for x in r]
                    else:
                        raise ValueError(proxy)
                    m = 0.0
                    for j in range(front):
                        m += rp[j]
                    slot_mass[l, b, h, i] = m + implicit
                    for j in range(T):
                        attn[l, b, h, i, j] = rp[front + j]
    return attn, slot_mass


def split_attention_vec(raw, slot_cols, sink_tokens, proxy):
    """Vectorised cross-check of split_attention."""
    N = sink_tokens
    front = slot_cols + N
    r = raw[..., N:, :]
    implicit = np.zeros(r.shape[:-1])
    if proxy == "implicit_slot":
        implicit = 1.0 - r.sum(-1)
    elif proxy == "non_negative":
        r = r / (r.sum(-1, keepdims=True) + 1e-8)
    elif proxy == "signed":
        tot = np.abs(r).sum(-1, keepdims=True)
        r = np.divide(np.abs(r), tot, out=np.zeros_like(r), where=tot != 0.0)
    return r[..., front:], r[..., :front].sum(-1) + implicit


def slot_importance(slot_mass):
    """slot_mass [L, B, H, T] -> [L, B, H] (mean over real queries)."""
    L, B, H, T = slot_mass.shape
    out = np.zeros((L, B, H))
    for l in range(L):
        for b in range(B):
            for h in range(H):
                s = 0.0
                for i in range(T):
                    s += slot_mass[l, b, h, i]
                out[l, b, h] = s / T
    return out


def slot_rate(simp, eps):
    hits = 0
    total = 0
    for x in simp.ravel():
        total += 1
        if x > eps:
            hits += 1
    return 100.0 * hits / total


def layer_mean(x):
    """x [L, ...] -> [plain mean of each layer's entries]."""
    out = []
    for l in range(x.shape[0]):
        vals = x[l].ravel()
        s = 0.0
        for v in vals:
            s += float(v)
        out.append(s / len(vals))
    return out


# ---------------------------------------------------------------------------------------
# Sanity checks on the generated inputs.

def check_attn(attn):
    L, B, H, T, _ = attn.shape
    assert np.all(attn >= 0.0)
    for t in range(T):
        assert np.all(attn[..., t, t + 1:] == 0.0), "not causal"
    assert np.allclose(attn.sum(-1), 1.0, atol=1e-6), "rows must sum to 1"


def alpha_margin(alpha):
    return min(abs(a - e) for a in alpha.ravel() for e in EPS_GRID)


def raw_mask(N, T, slot_cols):
    """[S, C] entries a raw attention row may use: every slot column, and sequence column j
    (sink tokens first, then real tokens) for query s iff j <= s (causal)."""
    S = N + T
    m = np.zeros((S, slot_cols + S), dtype=bool)
    m[:, :slot_cols] = True
    for q in range(S):
        m[q, slot_cols:slot_cols + q + 1] = True
    return m


def check_raw(raw, slot_cols, sink_tokens):
    L, B, H, S, C = raw.shape
    mask = raw_mask(sink_tokens, S - sink_tokens, slot_cols)
    assert np.all(raw[..., ~mask] == 0.0), "masked entries must be exactly 0"
    front = slot_cols + sink_tokens
    for q in range(S):
        # every slot column and every visible sink-token column is nonzero
        assert np.all(raw[..., q, :min(front, slot_cols + q + 1)] != 0.0), "zero slot entry"


def massive_margin(hidden):
    """Smallest relative distance of any |x| > 50 to either massive threshold."""
    L, B, _, _ = hidden.shape
    m = math.inf
    for l in range(L):
        for b in range(B):
            a = np.abs(hidden[l, b])
            med = float(np.median(a))
            for x in a.ravel():
                if x > 50.0:
                    m = min(m, abs(x - 100.0) / 100.0, abs(x - 1000.0 * med) / x)
    return m


# ---------------------------------------------------------------------------------------
# Input generators.

def softmax_causal(logits):
    """logits [..., T, T] -> causal softmax (masked entries exactly 0), float64."""
    T = logits.shape[-1]
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    s = np.where(mask, -np.inf, logits)
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def random_attention(rng, L, B, H, T, kinds):
    """kinds[l][h] in {"sink0", "sink2", "uniform", "random"}."""
    logits = np.zeros((L, B, H, T, T))
    for l in range(L):
        for h in range(H):
            kind = kinds[l][h]
            for b in range(B):
                if kind == "uniform":
                    z = rng.normal(0.0, 0.1, size=(T, T))
                elif kind == "random":
                    z = rng.normal(0.0, 1.5, size=(T, T))
                else:
                    z = rng.normal(0.0, 1.0, size=(T, T))
                    strength = rng.uniform(3.0, 7.0)
                    col = 0 if kind == "sink0" else 2
                    z[:, col] += strength
                logits[l, b, h] = z
    return quantised(softmax_causal(logits))


def quantised(a):
    """Causal attention quantised to multiples of 1e-6 (short JSON), each row's largest entry
    given the rounding residual so that every row sums to exactly 1,000,000 micro-units; the
    inputs are the float32 roundings of those decimals (rows sum to 1 within float32 precision)."""
    T = a.shape[-1]
    q = np.round(a * 1e6).astype(np.int64)
    rows = q.reshape(-1, T)
    rows[np.arange(rows.shape[0]), rows.argmax(-1)] += 1_000_000 - rows.sum(-1)
    assert np.all(rows.sum(-1) == 1_000_000) and np.all(rows >= 0)
    a = as_f32(q / 1e6)
    check_attn(a)
    return a


def random_hidden(rng, L, B, T, D, inject):
    """Normal residual stream; inject = [(l, b, t, d, value)] sets single entries;
    entries named in scale = {(l, b): s} multiply the whole sequence first."""
    h = rng.normal(0.0, 1.0, size=(L, B, T, D))
    for item in inject:
        if item[0] == "scale":
            _, l, b, s = item
            h[l, b] *= s
    for item in inject:
        if item[0] == "set":
            _, l, b, t, d, v = item
            h[l, b, t, d] = v
    return as_f32(np.round(h, 4))  # 4 decimals keep the JSON short


def random_kv(rng, L, B, H, T, dh, first_scale):
    x = rng.normal(0.0, 1.0, size=(L, B, H, T, dh))
    for l, s in enumerate(first_scale):
        x[l, :, :, 0, :] *= s
    return as_f32(np.round(x, 4))


def case_random_l3_t12():
    rng = np.random.default_rng(20261122)
    L, B, H, T, D, dh = 3, 4, 4, 12, 16, 4
    kinds = [
        ["sink0", "sink2", "uniform", "random"],
        ["sink0", "sink0", "sink2", "uniform"],
        ["sink0", "random", "sink0", "sink2"],
    ]
    for _ in range(100):  # deterministic: resample until every alpha clears the margin
        attn = random_attention(rng, L, B, H, T, kinds)
        if alpha_margin(importance(attn)) > MARGIN:
            break
    else:
        raise RuntimeError("could not draw attention away from the thresholds")
    inject = [
        # layer 0: token 1 just a bit larger (no massive activation)
        ("set", 0, 0, 0, 1, 6.0),
        # layer 1: 2000 passes, 500 fails 1000 x median (~0.67), -1500 passes (|x|)
        ("set", 1, 0, 0, 3, 2000.0),
        ("set", 1, 1, 0, 3, 500.0),
        ("set", 1, 2, 0, 5, -1500.0),
        # layer 2: two massive in b0; b1 scaled by 0.01 (1000 x median ~ 6.7) so 90 fails
        # "> 100" while 120 passes; b2 a massive value away from token 1; b3 800 fails
        ("set", 2, 0, 0, 3, 2000.0),
        ("set", 2, 0, 0, 7, 1200.0),
        ("scale", 2, 1, 0.01),
        ("set", 2, 1, 0, 3, 90.0),
        ("set", 2, 1, 0, 4, -120.0),
        ("set", 2, 2, 5, 3, 2500.0),
        ("set", 2, 3, 0, 3, 800.0),
    ]
    hidden = random_hidden(rng, L, B, T, D, inject)
    keys = random_kv(rng, L, B, H, T, dh, first_scale=[1.0, 0.3, 3.0])
    values = random_kv(rng, L, B, H, T, dh, first_scale=[1.0, 0.1, 0.05])
    desc = ("random logits: per layer heads with a strong token-1 sink (+3..7 logit on key 0), "
            "a sink on token 3 (key index 2), near-uniform and random heads; hidden states "
            "N(0,1) with injected massive values (pass/fail each half of the rule)")
    return "random_L3_T12", desc, attn, hidden, keys, values, True


def case_thresholds_t4():
    # Attention [L=1, B=2, H=2, T=4], built by hand. alpha_k = column sum from row k / (T-k).
    A = np.zeros((1, 2, 2, 4, 4))
    # b0 h0: alpha = [0.5 exactly (dyadic: fails > 0.5), 0.3001, 0.3999, 0.2999]
    A[0, 0, 0] = [[1, 0, 0, 0],
                  [0.5, 0.5, 0, 0],
                  [0.25, 0.25, 0.5, 0],
                  [0.25, 0.1503, 0.2998, 0.2999]]
    # b0 h1: alpha = [0.5 - 2^-10 (dyadic), 0.26786875, 0.2001, 0.8001]; explicit zero at A[3,1]
    A[0, 0, 1] = [[1, 0, 0, 0],
                  [0.75, 0.25, 0, 0],
                  [0.125, 0.55360625, 0.32139375, 0],
                  [0.12109375, 0.0, 0.07880625, 0.8001]]
    # b1 h0: attend to self: alpha = [1/4, 1/3, 1/2 exactly (fails > 0.5), 1]
    A[0, 1, 0] = np.eye(4)
    # b1 h1: everything on token 1: alpha = [1, 0, 0, 0]
    A[0, 1, 1] = [[1, 0, 0, 0]] * 4
    attn = as_f32(A)
    check_attn(attn)

    # Hidden [L=1, B=2, T=4, D=4], all dyadic so norms and medians are exact.
    # b0: median |h| = (0.0625 + 0.1875)/2 = 0.125 -> 1000 x median = 125:
    #     125 passes (>= is non-strict), 124.5 fails, 10000 passes.
    small0 = [0.015625, 0.03125, 0.046875, 0.0078125, 0.0234375, 0.0390625, 0.0546875,  # 7 below
              0.0625, 0.1875,                                                         # middle two
              0.25, 0.5, 1.0, 2.0]                                                    # 4 above
    # b1: median |h| = (0.03125 + 0.09375)/2 = 0.0625 -> 1000 x median = 62.5:
    #     100 fails the strict > 100, 100.5 passes, -150 passes.
    small1 = [0.00390625, 0.0078125, 0.01171875, 0.015625, 0.01953125, 0.0234375, 0.02734375,
              0.03125, 0.09375,
              0.125, 0.375, 1.5, 3.0]
    rng = np.random.default_rng(7)
    hid = np.zeros((1, 2, 4, 4))
    for b, (small, big) in enumerate([(small0, {(0, 1): 125.0, (0, 2): 10000.0, (2, 0): 124.5}),
                                      (small1, {(0, 1): 100.0, (0, 3): 100.5, (3, 2): -150.0})]):
        slots = [(t, d) for t in range(4) for d in range(4) if (t, d) not in big]
        vals = [v * s for v, s in zip(rng.permutation(small), rng.choice([-1.0, 1.0], size=13))]
        for (t, d), v in zip(slots, vals):
            hid[0, b, t, d] = v
        for (t, d), v in big.items():
            hid[0, b, t, d] = v
    hidden = as_f32(hid)
    # Keys/values [1, 2, 2, 4, 2]: small integers (3-4-5 triangles for exact norms).
    kv = np.array([[3, 4], [1, 0], [0, 2], [-6, 8]], dtype=np.float64)
    keys = as_f32(np.stack([kv, kv * 0.5, -kv, kv[::-1]]).reshape(1, 2, 2, 4, 2))
    values = as_f32(np.stack([kv[::-1], kv * 0.25, kv * 2, -kv]).reshape(1, 2, 2, 4, 2))
    desc = ("hand-built T=4: importances exactly at 0.5 and 0.5-2^-10 (dyadic, exact in any "
            "precision), 0.3001/0.2999/0.3999/0.2001/0.8001 around the other thresholds, "
            "self-attention and all-on-token-1 heads; massive values exactly 125 = 1000 x median "
            "(counts), 124.5 (does not), exactly 100 (does not: strict > 100), 100.5 and -150 (count)")
    return "thresholds_T4", desc, attn, hidden, keys, values, False


def case_probe_t64():
    rng = np.random.default_rng(64)
    L, B, H, T, D, dh = 1, 2, 2, 64, 8, 4
    kinds = [["sink0", "random"]]
    for _ in range(100):
        attn = random_attention(rng, L, B, H, T, kinds)
        if alpha_margin(importance(attn)) > MARGIN:
            break
    else:
        raise RuntimeError("could not draw attention away from the thresholds")
    # 3000 passes 1000 x median (~0.67), 700 does not
    hidden = random_hidden(rng, L, B, T, D, [("set", 0, 0, 0, 2, 3000.0), ("set", 0, 1, 0, 2, 700.0)])
    keys = random_kv(rng, L, B, H, T, dh, first_scale=[0.5])
    values = random_kv(rng, L, B, H, T, dh, first_scale=[0.2])
    desc = ("T=64 as the real probe (k reported 1..10 of 64): a token-1 sink head and a random head; "
            "one massive activation that counts and one (700) that does not")
    return "probe_T64", desc, attn, hidden, keys, values, True


def case_secondary_valley_t16():
    """Planted secondary sinks and a compression valley (L = 3, B = 2, H = 3, T = 16, D = 8)."""
    rng = np.random.default_rng(1616)
    L, B, H, T, D, dh = 3, 2, 3, 16, 8, 4
    logits = rng.normal(0.0, 1.0, size=(L, B, H, T, T))
    # layer 0: head 0 a token-1 sink; head 1 a secondary sink on key 5 (index 4) in sequence 0
    # only; head 2 random. Layer 1: head 0 secondary sinks on keys 4 and 9 (indices 3, 8) in both
    # sequences; head 1 attends to itself (the last keys' alpha is ~1 but too late to count,
    # earlier ones count only where alpha > 0.3); head 2 a token-1 sink. Layer 2: random heads
    # but a sink on index 13 (seen by 3 < ceil(16/4) = 4 queries: never counted).
    logits[0, :, 0, :, 0] += 6.0
    logits[0, 0, 1, :, 4] += 4.0
    logits[1, :, 0, :, 3] += 3.5
    logits[1, :, 0, :, 8] += 3.5
    logits[1, :, 1] += 6.0 * np.eye(T)
    logits[1, :, 2, :, 0] += 6.0
    logits[2, :, :, :, 13] += 5.0
    for _ in range(100):
        attn = quantised(softmax_causal(logits))
        if alpha_margin(importance(attn)) > MARGIN:
            break
        logits += rng.normal(0.0, 0.01, size=logits.shape)
    else:
        raise RuntimeError("could not draw attention away from the thresholds")
    # hidden: layer 0 isotropic; layer 1 token 1 massive (x 60 along one direction): a valley;
    # layer 2 the tokens spread over two directions only (low rank)
    h = rng.normal(0.0, 1.0, size=(L, B, T, D))
    h[1, :, 0, :] = 0.0
    h[1, :, 0, 2] = 60.0
    h[2] = rng.normal(0.0, 1.0, size=(B, T, 2)) @ rng.normal(0.0, 1.0, size=(2, D))
    hidden = as_f32(np.round(h, 4))
    keys = random_kv(rng, L, B, H, T, dh, first_scale=[1.0, 1.0, 1.0])
    values = random_kv(rng, L, B, H, T, dh, first_scale=[1.0, 1.0, 1.0])
    desc = ("planted secondary sinks (keys 5 in one sequence, 4 and 9 in both, a self-attending "
            "head, a late sink at 14 that is never counted) and a compression valley (layer 1: "
            "token 1 carries |h| = 60 on one channel; layer 2: rank-2 tokens)")
    return "secondary_valley_T16", desc, attn, hidden, keys, values, True


# ---------------------------------------------------------------------------------------
# Slot-aware cases: raw attention rows over [slot columns | sink tokens | real tokens].

def raw_scores(rng, L, B, H, N, T, slot_cols, kinds):
    """kinds[l][h] in {"slot", "sinktok", "sink0", "random", "low", "high"}: N(0,1) scores
    (N(0,1.5) for "random") plus a U(1.5,5) offset on the slot columns ("slot"), on the
    sink-token columns ("sinktok") or on real token 1 ("sink0"), or -2 / +2 on every score
    ("low" / "high")."""
    S = N + T
    C = slot_cols + S
    z = np.zeros((L, B, H, S, C))
    for l in range(L):
        for h in range(H):
            kind = kinds[l][h]
            for b in range(B):
                x = rng.normal(0.0, 1.5 if kind == "random" else 1.0, size=(S, C))
                if kind in ("slot", "sinktok", "sink0"):
                    strength = rng.uniform(1.5, 5.0)
                    if kind == "slot":
                        x[:, :slot_cols] += strength
                    elif kind == "sinktok":
                        x[:, slot_cols:slot_cols + N] += strength
                    else:
                        x[:, slot_cols + N] += strength
                elif kind == "low":
                    x -= 2.0
                elif kind == "high":
                    x += 2.0
                z[l, b, h] = x
    return z


def raw_weights(z, mask, transform):
    """Scores [..., S, C] -> float32 raw weights, masked entries exactly 0.
    softmax: rows sum to 1 (quantised to 1e-6 as random_attention does);
    softmax_n: e^z / (1 + sum e^z), rows sum to < 1 (quantised to 1e-6);
    sigmoid: 1/(1+e^-z) in [1e-6, 1-1e-6] (quantised to 1e-6), unnormalised;
    signed: the scores themselves (4 decimals), negative entries included."""
    C = z.shape[-1]
    if transform == "softmax":
        s = np.where(mask, z, -np.inf)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        q = np.round(e / e.sum(axis=-1, keepdims=True) * 1e6).astype(np.int64)
        rows = q.reshape(-1, C)
        rows[np.arange(rows.shape[0]), rows.argmax(-1)] += 1_000_000 - rows.sum(-1)
        assert np.all(rows.sum(-1) == 1_000_000) and np.all(rows >= 0)
        w = q / 1e6
    elif transform == "softmax_n":
        e = np.where(mask, np.exp(z), 0.0)
        q = np.round(e / (1.0 + e.sum(axis=-1, keepdims=True)) * 1e6).astype(np.int64)
        assert np.all(q.sum(-1) < 1_000_000)
        w = q / 1e6
    elif transform == "sigmoid":
        q = np.clip(np.round(1e6 / (1.0 + np.exp(-z))), 1, 999_999)
        w = np.where(mask, q, 0.0) / 1e6
    elif transform == "signed":
        w = np.where(mask, np.round(z, 4), 0.0)
    else:
        raise ValueError(transform)
    return as_f32(w)


def draw_raw(rng, L, B, H, N, T, slot_cols, kinds, transform, proxy):
    """Resample (deterministically) until every alpha and every slot importance of the split
    attention clears MARGIN."""
    mask = raw_mask(N, T, slot_cols)
    for _ in range(100):
        raw = raw_weights(raw_scores(rng, L, B, H, N, T, slot_cols, kinds), mask, transform)
        attn, mass = split_attention_vec(raw, slot_cols, N, proxy)
        if (alpha_margin(importance(attn)) > MARGIN
                and alpha_margin(mass.mean(-1)) > MARGIN):
            check_raw(raw, slot_cols, N)
            return raw
    raise RuntimeError("could not draw attention away from the thresholds")


def random_gate(rng, L, B, S, G):
    """Sigmoid gates in (0, 1), 4 decimals."""
    return as_f32(np.round(1.0 / (1.0 + np.exp(-rng.normal(0.5, 1.5, size=(L, B, S, G)))), 4))


def case_softmax_slot_t8():
    rng = np.random.default_rng(101)
    L, B, H, N, T, D, dh, slot = 2, 2, 2, 0, 8, 8, 4, 1
    kinds = [["slot", "sink0"], ["slot", "random"]]
    raw = draw_raw(rng, L, B, H, N, T, slot, kinds, "softmax", "weights")
    assert (raw[..., 0].mean(-1) > 0.3).sum() >= 4  # several heads put > 0.3 on the slot
    hidden = random_hidden(rng, L, B, T, D, [("set", 1, 0, 0, 2, 1500.0)])
    keys = random_kv(rng, L, B, H, T, dh, first_scale=[1.0, 0.3])
    values = random_kv(rng, L, B, H, T, dh, first_scale=[1.0, 0.1])
    desc = ("softmax over [sink logit | T=8 tokens] (slot_cols 1, proxy weights): slot heads "
            "(+1.5..5 on the sink-logit column, > 0.3 of the mass on the slot), a token-1 sink "
            "head and a random head; one massive activation (1500, layer 1)")
    return "softmax_sink_logit_T8", desc, "weights", slot, N, raw, hidden, keys, values, None


def case_kv_bias_sink_tokens_t6():
    rng = np.random.default_rng(102)
    L, B, H, N, T, D, dh, slot = 2, 2, 2, 2, 6, 8, 4, 1
    kinds = [["slot", "sinktok"], ["sink0", "random"]]
    raw = draw_raw(rng, L, B, H, N, T, slot, kinds, "softmax", "weights")
    hidden = random_hidden(rng, L, B, T, D, [("set", 0, 1, 0, 5, -2500.0)])
    keys = random_kv(rng, L, B, H, T, dh, first_scale=[2.0, 1.0])
    values = random_kv(rng, L, B, H, T, dh, first_scale=[0.5, 1.0])
    desc = ("softmax over [KV-bias key | 2 sink tokens | T=6 tokens] (slot_cols 1, sink_tokens 2, "
            "proxy weights; S = 8 query rows, the 2 sink-token rows are not measured): a KV-bias "
            "head, a sink-token head, a token-1 sink head and a random head; -2500 massive (layer 0)")
    return "kv_bias_sink_tokens_T6", desc, "weights", slot, N, raw, hidden, keys, values, None


def case_softmax_n_t10():
    rng = np.random.default_rng(103)
    L, B, H, N, T, D, dh, slot = 2, 2, 2, 0, 10, 8, 4, 0
    kinds = [["low", "sink0"], ["high", "random"]]
    raw = draw_raw(rng, L, B, H, N, T, slot, kinds, "softmax_n", "implicit_slot")
    hidden = random_hidden(rng, L, B, T, D, [])
    keys = random_kv(rng, L, B, H, T, dh, first_scale=[1.0, 1.0])
    values = random_kv(rng, L, B, H, T, dh, first_scale=[1.0, 1.0])
    desc = ("softmax_n (e^z / (1 + sum e^z)) over T=10 tokens, rows sum to < 1 (slot_cols 0, proxy "
            "implicit_slot: slot mass = 1 - row sum): a low-score head (most mass implicit), a "
            "token-1 sink head, a high-score head and a random head")
    return "softmax_n_T10", desc, "implicit_slot", slot, N, raw, hidden, keys, values, None


def case_sigmoid_t7():
    rng = np.random.default_rng(104)
    L, B, H, N, T, D, dh, slot = 2, 2, 2, 0, 7, 8, 4, 1
    kinds = [["slot", "low"], ["sink0", "random"]]
    raw = draw_raw(rng, L, B, H, N, T, slot, kinds, "sigmoid", "non_negative")
    hidden = random_hidden(rng, L, B, T, D, [("set", 0, 0, 0, 1, 3000.0), ("set", 1, 1, 0, 1, 1200.0)])
    keys = random_kv(rng, L, B, H, T, dh, first_scale=[1.0, 3.0])
    values = random_kv(rng, L, B, H, T, dh, first_scale=[0.2, 1.0])
    desc = ("unnormalised sigmoid weights in (0,1) over [sink logit | T=7 tokens], masked entries "
            "exactly 0 (slot_cols 1, proxy non_negative: r / (sum r + 1e-8)): a slot head, a "
            "low-score head, a token-1 sink head and a random head; massive 3000 and 1200")
    return "sigmoid_T7", desc, "non_negative", slot, N, raw, hidden, keys, values, None


def case_signed_memory_t9():
    rng = np.random.default_rng(105)
    L, B, H, N, T, D, dh, slot, G = 2, 2, 2, 0, 9, 8, 4, 2, 8
    kinds = [["slot", "random"], ["sink0", "slot"]]
    raw = draw_raw(rng, L, B, H, N, T, slot, kinds, "signed", "signed")
    assert np.any(raw < 0.0)
    hidden = random_hidden(rng, L, B, T, D, [("set", 1, 0, 0, 7, -1800.0)])
    keys = random_kv(rng, L, B, H, T, dh, first_scale=[0.5, 1.0])
    values = random_kv(rng, L, B, H, T, dh, first_scale=[1.0, 0.5])
    gate = random_gate(rng, L, B, N + T, G)
    desc = ("signed linear-kernel weights (scores, negative entries) over [2 memory keys | T=9 "
            "tokens] (slot_cols 2, proxy signed: |r| / sum |r|): memory-key heads, a random head "
            "and a token-1 sink head; sigmoid gate [L,B,S,G=8]; massive -1800 (layer 1)")
    return "signed_memory_gate_T9", desc, "signed", slot, N, raw, hidden, keys, values, gate


# ---------------------------------------------------------------------------------------

def kurtosis(x):
    """Bondarenko et al.'s kurtosis of one sample: mu4 / (std(ddof=1)^4 + 1e-6)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    mu4 = ((x - x.mean()) ** 4).mean()
    return float(mu4 / (x.std(ddof=1) ** 4 + 1e-6))


def outlier_metrics(x):
    """x [L, B, T, D] -> ([mean_b kurtosis per layer], [mean_b max|x| per layer])."""
    kurt = [float(np.mean([kurtosis(x[l, b]) for b in range(x.shape[1])])) for l in range(x.shape[0])]
    mx = [float(np.mean([np.abs(x[l, b]).max() for b in range(x.shape[1])])) for l in range(x.shape[0])]
    return kurt, mx


SECONDARY_EPS = 0.3


def secondary_sinks(alpha):
    """alpha [L, B, H, T] -> per layer {heads, count, by_position} (Wong et al.'s secondary sinks
    through Gu et al.'s importance, keys 1 .. T - ceil(T/4))."""
    L, B, H, T = alpha.shape
    last = T - math.ceil(0.25 * T)  # keys k with T - k >= ceil(T/4), 0-based
    out = []
    for l in range(L):
        by_pos = [0] * T
        with_one, total = 0, 0
        for b in range(B):
            for h in range(H):
                n = 0
                for k in range(1, last + 1):
                    if alpha[l, b, h, k] > SECONDARY_EPS:
                        by_pos[k] += 1
                        n += 1
                total += n
                with_one += n > 0
        pairs = B * H
        out.append({"heads": 100.0 * with_one / pairs, "count": total / pairs,
                    "by_position": [100.0 * c / pairs for c in by_pos]})
    return out


def repr_entropy(hidden):
    """hidden [L, B, T, D] -> ([mean_b S per layer], [that / ln min(T, D)])."""
    L, B, T, D = hidden.shape
    nats = []
    for l in range(L):
        ss = []
        for b in range(B):
            X = hidden[l, b].astype(np.float64)
            K = X @ X.T
            tr = np.trace(K)
            if tr <= 0:
                ss.append(0.0)
                continue
            lam = np.clip(np.linalg.eigvalsh(K / tr), 0.0, None)
            lam = lam[lam > 0]
            ss.append(float(-(lam * np.log(lam)).sum()))
        nats.append(float(np.mean(ss)))
    return nats, [x / math.log(min(T, D)) for x in nats]


def sink1_by_layer(alpha):
    L, B, H, T = alpha.shape
    return [float(np.mean([100.0 * np.mean(alpha[l, :, h, 0] > SECONDARY_EPS) for h in range(H)]))
            for l in range(L)]


def attn_out_of(name, hidden):
    """The attention output [L, B, T, D] of a case: N(0, 0.5) with a planted outlier channel
    (channel 1 of every token x 20) in the first layer, 4 decimals; its own generator."""
    import zlib
    rng = np.random.default_rng(zlib.crc32((name + "/attn_out").encode()))
    x = rng.normal(0.0, 0.5, size=hidden.shape)
    x[0, :, :, 1 % hidden.shape[3]] *= 20.0
    return as_f32(np.round(x, 4))


def add_new_metrics(expected, name, attn, hidden, attn_out):
    alpha = importance(attn)
    kh, _ = outlier_metrics(hidden)
    ka, ma = outlier_metrics(attn_out)
    en, enn = repr_entropy(hidden)
    expected.update(kurtosis=kh, attn_out_kurtosis=ka, attn_out_max_abs=ma,
                    secondary=secondary_sinks(alpha), repr_entropy=en, repr_entropy_norm=enn,
                    sink1_layer=sink1_by_layer(alpha))


def expected_metrics(name, attn, hidden, keys, values, random_case):
    alpha = importance(attn)
    # cross-check the loop version against a vectorised one
    L, B, H, T, _ = attn.shape
    tri = np.tril(np.ones((T, T)))
    alpha_vec = (attn * tri).sum(axis=-2) / (T - np.arange(T))
    assert np.allclose(alpha, alpha_vec, rtol=0, atol=1e-14)
    if random_case:
        assert alpha_margin(alpha) > MARGIN
        assert massive_margin(hidden) > 1e-3, name
    expected = {
        "sink_rate": {str(e): sink_rate(alpha, e, K_MAX) for e in EPS_GRID},
        "importance": {"shape": list(alpha.shape), "data": [float(x) for x in alpha.ravel()]},
        "importance_first": importance_first(alpha),
        "entropy": entropy(attn),
    }
    hm = hidden_metrics(hidden)
    expected.update(hm)
    kf, kr = first_rest_norms(keys)
    vf, vr = first_rest_norms(values)
    expected.update(key_norm_first=kf, key_norm_rest=kr, value_norm_first=vf, value_norm_rest=vr)
    ftm = first_token_mass(attn)
    assert np.allclose(ftm, attn[..., 0].mean(axis=(1, 2, 3)), rtol=0, atol=1e-14)
    expected.update(first_token_mass=ftm, f_attn=sum(ftm) / len(ftm),
                    m_act=max(top[0] for top in hm["top3"]))
    add_synthetic_metrics(expected, attn, values)
    return expected


def value_drain(values):
    """[l][h] mean_b ||v[l,b,h,0]|| / mean_{b,t>=1} ||v[l,b,h,t]|| (Guo et al.'s value-state drain)."""
    norms = np.sqrt((values.astype(np.float64) ** 2).sum(-1))  # (L, B, H, T)
    return (norms[..., 0].mean(axis=1) / norms[..., 1:].mean(axis=(1, 3))).tolist()


N_GROUPS = 4


def query_groups(B, T):
    """A fixed (B, T) pattern of query groups 0..N_GROUPS-1 (a synthetic task's triggers)."""
    b, t = np.meshgrid(np.arange(B), np.arange(T), indexing="ij")
    return (3 * b + 5 * t) % N_GROUPS


def first_by_query(attn, groups):
    """[l][h][g] mean attn[l,b,h,t,0] over t >= 1 with groups[b,t] = g (None if empty)."""
    out = []
    for l in range(attn.shape[0]):
        heads = []
        for h in range(attn.shape[2]):
            col = attn[l, :, h, 1:, 0]  # (B, T-1)
            g = groups[:, 1:]
            heads.append([float(col[g == k].mean()) if (g == k).any() else None
                          for k in range(N_GROUPS)])
        out.append(heads)
    return out


def add_synthetic_metrics(expected, attn, values):
    L, B, H, T, _ = attn.shape
    groups = query_groups(B, T)
    expected["value_drain"] = value_drain(values)
    expected["query_groups"] = {"shape": [B, T], "n_groups": N_GROUPS,
                                "data": [int(x) for x in groups.ravel()]}
    expected["first_by_query"] = first_by_query(attn, groups)


def build_case(name, desc, attn, hidden, keys, values, random_case, attn_out=None):
    attn_out = attn_out_of(name, hidden) if attn_out is None else attn_out
    expected = expected_metrics(name, attn, hidden, keys, values, random_case)
    add_new_metrics(expected, name, attn, hidden, attn_out)
    return {
        "name": name,
        "description": desc,
        "attn": f32_json(attn),
        "hidden": f32_json(hidden),
        "attn_out": f32_json(attn_out),
        "keys": f32_json(keys),
        "values": f32_json(values),
        "expected": expected,
    }


def build_slot_case(name, desc, proxy, slot_cols, sink_tokens, raw, hidden, keys, values, gate):
    check_raw(raw, slot_cols, sink_tokens)
    attn, mass = split_attention(raw, slot_cols, sink_tokens, proxy)
    attn_vec, mass_vec = split_attention_vec(raw, slot_cols, sink_tokens, proxy)
    assert np.allclose(attn, attn_vec, rtol=0, atol=1e-14)
    assert np.allclose(mass, mass_vec, rtol=0, atol=1e-14)
    T = attn.shape[-1]
    assert hidden.shape[2] == T and keys.shape[3] == T and values.shape[3] == T
    for i in range(T):
        assert np.all(attn[..., i, i + 1:] == 0.0), "not causal"
    assert np.all(attn >= 0.0)
    # every proxy splits a row into real-token mass + slot mass that add up to ~1
    assert np.allclose(attn.sum(-1) + mass, 1.0, rtol=0, atol=1e-6), name
    expected = expected_metrics(name, attn, hidden, keys, values, True)
    attn_out = attn_out_of(name, hidden)
    add_new_metrics(expected, name, attn, hidden, attn_out)
    simp = slot_importance(mass)
    assert np.allclose(simp, mass.mean(-1), rtol=0, atol=1e-14)
    assert alpha_margin(simp) > MARGIN, name
    expected.update({
        "split_attn": {"shape": list(attn.shape), "data": [float(x) for x in attn.ravel()]},
        "slot_mass": {"shape": list(mass.shape), "data": [float(x) for x in mass.ravel()]},
        "slot_importance": {"shape": list(simp.shape), "data": [float(x) for x in simp.ravel()]},
        "slot_rate": {str(e): slot_rate(simp, e) for e in EPS_GRID},
        "slot_mass_layer": layer_mean(mass),
    })
    case = {
        "name": name,
        "description": desc,
        "proxy": proxy,
        "slot_cols": slot_cols,
        "sink_tokens": sink_tokens,
        "raw_attn": f32_json(raw),
        "hidden": f32_json(hidden),
        "attn_out": f32_json(attn_out),
        "keys": f32_json(keys),
        "values": f32_json(values),
    }
    if gate is not None:
        assert gate.shape[:3] == (raw.shape[0], raw.shape[1], raw.shape[3])
        case["gate"] = f32_json(gate)
        expected["gate_mean"] = layer_mean(gate)
    case["expected"] = expected
    return case


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="output JSON (default: %(default)s)")
    args = ap.parse_args()
    cases = [build_case(*c()) for c in (case_random_l3_t12, case_thresholds_t4, case_probe_t64,
                                        case_secondary_valley_t16)]
    cases += [build_slot_case(*c()) for c in (case_softmax_slot_t8, case_kv_bias_sink_tokens_t6,
                                              case_softmax_n_t10, case_sigmoid_t7,
                                              case_signed_memory_t9)]
    out = {
        "numpy_version": np.__version__,
        "generated_by": "python3 scripts/reference_metrics.py",
        "eps": EPS_GRID,
        "k_max": K_MAX,
        "conventions": ("value_drain[l][h] = mean_b |v[l,b,h,0]| / mean_{b,t>=1} |v[l,b,h,t]|; "
                        "first_by_query[l][h][g] = mean attn[l,b,h,t,0] over t >= 1 with query_groups[b,t] = g "
                        "(null if none); "
                        "inputs are float32 (shortest round-trip decimals, row-major with shape); "
                        "expected values are float64 computed from those float32 values; "
                        "sink_rate[eps][k] is position k+1, k < min(k_max, T); "
                        "median of an even count is the mean of the two middle values"),
        "proxies": ["weights", "implicit_slot", "non_negative", "signed"],
        "slot_conventions": ("raw_attn [L,B,H,S,C]: C = slot_cols + S columns (slot columns, then "
                             "sink_tokens sink-token columns, then T real tokens), S = sink_tokens + T "
                             "query rows of which only the last T (real queries) are measured; "
                             "front = slot_cols + sink_tokens; per real query row r: weights r'=r; "
                             "implicit_slot r'=r, implicit = 1 - sum r; non_negative "
                             "r' = r/(sum r + 1e-8); signed r' = |r|/sum|r| (0 if sum|r| = 0); "
                             "split_attn = r'[front:], slot_mass = sum r'[:front] + implicit; every "
                             "other metric of the case is computed on split_attn; slot_importance = "
                             "mean over real queries of slot_mass; slot_rate[eps] = 100 mean_{l,b,h} "
                             "[slot_importance > eps] (strict); first_token_mass[l] = "
                             "mean_{b,h,i} attn[l,b,h,i,0]; f_attn = mean_l first_token_mass; "
                             "m_act = max_l top3[l][0]; gate_mean[l] = plain mean of gate[l]"),
        "cases": cases,
    }
    text = json.dumps(out, separators=(",", ":")) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(f"wrote {args.out} ({len(text) / 1024:.1f} KiB)")
    for c in cases:
        e = c["expected"]
        attn_shape = c["attn"]["shape"] if "attn" in c else e["split_attn"]["shape"]
        print(f"  {c['name']}: attn {attn_shape}, hidden {c['hidden']['shape']}, "
              f"keys {c['keys']['shape']}")
        for k, v in e["sink_rate"].items():
            print(f"    sink_rate eps={k}: {[round(x, 2) for x in v]}")
        print(f"    importance_first {[[round(x, 4) for x in r] for r in e['importance_first']]}")
        print(f"    entropy {[round(x, 4) for x in e['entropy']]}  massive {e['massive_count']}  "
              f"norm_ratio {[round(x, 3) for x in e['norm_ratio']]}")
        print(f"    first_token_mass {[round(x, 4) for x in e['first_token_mass']]}  "
              f"m_act {e['m_act']:.2f}")
        if "slot_rate" in e:
            print(f"    proxy {c['proxy']}  raw_attn {c['raw_attn']['shape']}  slot_rate "
                  f"{e['slot_rate']}  slot_mass_layer {[round(x, 4) for x in e['slot_mass_layer']]}")
            print(f"    slot_importance {[round(x, 4) for x in e['slot_importance']['data']]}"
                  + (f"  gate_mean {[round(x, 4) for x in e['gate_mean']]}" if "gate_mean" in e else ""))


if __name__ == "__main__":
    main()
