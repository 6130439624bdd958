#!/usr/bin/env python3
"""Independent NumPy reference for sinklab's attention-head scores (docs/reference.md §11).

Regenerate the fixture the Rust tests compare against:

    ~/.cache/sinklab-venv/bin/python scripts/reference_heads.py
        # writes tests/fixtures/heads_golden.json (deterministic: same bytes every run)

Nothing here imports sinklab or reads its Rust: every score is written from its definition
in docs/reference.md §11 with plain loops in float64, and TransformerLens's `detect_head`
measures are written the way its head_detector.py computes them (detection patterns built as
its get_*_detection_pattern functions build them; Python's round()).

Inputs per case (float32 values; each JSON number the shortest decimal of its float32):
  tokens [B, T] ints; attn [B, H, T, T] the real queries' weights on the real keys, causal,
  each row's entries plus slot[b, h, q] summing to 1 (slot = 0 in cases without a slot);
  values, z [B, H, T, dh]. 0-based positions.

Definitions (per head h; pairs (b, q) over every sequence b and query q):
  targets(q): previous {q-1} (q >= 1); duplicate {j < q : tok[j] == tok[q]};
              induction {j + 1 : j < q, tok[j] == tok[q]}
  primary[p][h]  = mean over pairs with targets(q) non-empty of sum_{j in targets} A[b,h,q,j]
  TL detection pattern D[q, j] (TransformerLens): previous = ones on the first subdiagonal;
      duplicate = (tok[q] == tok[j]) with the diagonal zeroed, lower triangle;
      induction = duplicate rolled one column right, column 0 zeroed, lower triangle.
  tl_mul[p][ex][h] = mean_b sum(A'*D)/sum(A')          A' = A with column 0 zeroed if ex
  tl_abs[p][ex][h] = mean_b 1 - round(sum|A-D|' / T, 3)  |A-D|' with column 0 zeroed if ex
  alpha1[h]    = mean_{b} mean_{q} A[b,h,q,0]          (alpha_k for k = 0: every query sees it)
  slot_mass[h] = mean_{b,q} slot[b,h,q]
  entropy[h]   = mean_{b,q} ( -sum_j A log A - m log m ),  m = slot[b,h,q], 0 log 0 = 0
  value_drain[h] = mean_b ||v[b,h,0]|| / mean_{b,t>=1} ||v[b,h,t]||
  ahon[h]      = mean_{b,t} ||z[b,h,t]||;   ahon_ln[h] = ahon[h] / mean_h' ahon[h']
Copying: for each matrix M (n x n) the eigenvalues from numpy.linalg.eigvals and
  copy = sum Re(lambda) / sum |lambda|.
Per-trigger copy score (Bigram-Backcopy, docs/reference.md §10): tokens [B, T] with BOS (id 0)
  at position 0, trigger i the token id 2 + i, offsets[i] its copy offset g_i; the queries of
  trigger i are the (b, q) with tok[b, q] = 2 + i and q - g_i >= 1 (a task token to copy):
  trigger_copy[i][h] = mean over them of A[b, h, q, q - g_i]  (NaN, written null, if none);
  queries[i] their number. groups[b, q] = 1 + i on trigger i, else 0 (the input Rust reads).
"""
import argparse
import json
from pathlib import Path

import numpy as np

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests/fixtures/heads_golden.json"


def as_f32(x):
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)


def f32_json(a):
    a32 = np.asarray(a).astype(np.float32)
    data = []
    for v in a32.ravel():
        d = float(str(v))
        assert np.float32(d) == v
        data.append(d)
    return {"shape": list(a32.shape), "data": data}


def f64_json(a):
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "data": [float(x) for x in a.ravel()]}


# ---------------------------------------------------------------------------------------
# Scores from the definitions.

def targets(kind, tok, q):
    if kind == "previous":
        return [q - 1] if q >= 1 else []
    dups = [j for j in range(q) if tok[j] == tok[q]]
    if kind == "duplicate":
        return dups
    return [j + 1 for j in dups]


def primary(attn, tokens, kind):
    B, H, T, _ = attn.shape
    out = []
    for h in range(H):
        total, count = 0.0, 0
        for b in range(B):
            for q in range(T):
                js = targets(kind, tokens[b], q)
                if not js:
                    continue
                count += 1
                total += sum(attn[b, h, q, j] for j in js)
        out.append(total / count)
    return out


def tl_pattern(kind, tok):
    """TransformerLens's get_*_detection_pattern, in NumPy."""
    T = len(tok)
    if kind == "previous":
        d = np.zeros((T, T))
        d[1:, :-1] = np.eye(T - 1)
        return np.tril(d)
    tp = np.tile(np.asarray(tok), (T, 1))
    eq = np.equal(tp, tp.T).astype(int)
    np.fill_diagonal(eq, 0)
    dup = np.tril(eq.astype(float))
    if kind == "duplicate":
        return dup
    shifted = np.roll(dup, 1, axis=1)
    return np.tril(np.concatenate([np.zeros((T, 1)), shifted[:, 1:]], axis=1))


def tl_scores(attn, tokens, kind, measure, exclude_first):
    B, H, T, _ = attn.shape
    out = []
    for h in range(H):
        per = []
        for b in range(B):
            a = attn[b, h].copy()
            d = tl_pattern(kind, tokens[b])
            if measure == "mul":
                if exclude_first:
                    a[:, 0] = 0
                per.append(float((a * d).sum() / a.sum()))
            else:
                diff = np.abs(a - d)
                if exclude_first:
                    diff[:, 0] = 0
                per.append(1 - round(float(diff.mean() * T), 3))
        out.append(sum(per) / len(per))
    return out


def alpha1(attn):
    B, H, T, _ = attn.shape
    return [sum(attn[b, h, :, 0].sum() / T for b in range(B)) / B for h in range(H)]


def slot_mass(slot):
    B, H, T = slot.shape
    return [slot[:, h, :].sum() / (B * T) for h in range(H)]


def entropy(attn, slot):
    B, H, T, _ = attn.shape

    def plogp(p):
        return -p * np.log(p) if p > 0 else 0.0

    out = []
    for h in range(H):
        tot = 0.0
        for b in range(B):
            for q in range(T):
                tot += sum(plogp(x) for x in attn[b, h, q]) + plogp(slot[b, h, q])
        out.append(tot / (B * T))
    return out


def value_drain(v):
    B, H, T, _ = v.shape
    out = []
    for h in range(H):
        first = sum(np.linalg.norm(v[b, h, 0]) for b in range(B)) / B
        rest = sum(np.linalg.norm(v[b, h, t]) for b in range(B) for t in range(1, T)) / (B * (T - 1))
        out.append(first / rest)
    return out


def ahon(z):
    B, H, T, _ = z.shape
    return [sum(np.linalg.norm(z[b, h, t]) for b in range(B) for t in range(T)) / (B * T) for h in range(H)]


# ---------------------------------------------------------------------------------------
# Inputs.

def causal_rows(rng, B, H, T, sharp, slot_share):
    """Softmax rows over the visible keys (plus one slot column when slot_share), float32."""
    attn = np.zeros((B, H, T, T))
    slot = np.zeros((B, H, T))
    for b in range(B):
        for h in range(H):
            for q in range(T):
                logits = rng.normal(0, sharp, q + 1 + (1 if slot_share else 0))
                if slot_share:
                    logits[0] += slot_share * (h + 1)
                e = np.exp(logits - logits.max())
                p = e / e.sum()
                if slot_share:
                    slot[b, h, q] = p[0]
                    attn[b, h, q, :q + 1] = p[1:]
                else:
                    attn[b, h, q, :q + 1] = p
    return as_f32(attn), as_f32(slot)


def plant(attn, slot, tokens, h, kind, share):
    """Head h puts `share` of each row on its targets' first entry (rescaling the rest)."""
    B, _, T, _ = attn.shape
    for b in range(B):
        for q in range(T):
            js = targets(kind, tokens[b], q)
            if not js:
                continue
            row = attn[b, h, q].copy() * (1 - share)
            row[js[0]] += share
            attn[b, h, q] = row
            slot[b, h, q] *= (1 - share)
    return as_f32(attn), as_f32(slot)


def repeat_tokens(rng, B, n, reps, vocab):
    out = []
    for _ in range(B):
        r = list(rng.choice(np.arange(2, vocab), size=n, replace=False))
        out.append([0] + r * reps)
    return np.array(out)


def case(name, rng, tokens, H, dh, sharp, slot_share, plants):
    B, T = tokens.shape
    attn, slot = causal_rows(rng, B, H, T, sharp, slot_share)
    for h, kind, share in plants:
        attn, slot = plant(attn, slot, tokens, h, kind, share)
    values = as_f32(np.round(rng.normal(0, 1, (B, H, T, dh)), 4))
    z = as_f32(np.round(rng.normal(0, 1, (B, H, T, dh)) * (1 + np.arange(H))[None, :, None, None], 4))
    exp = {}
    for kind in ("previous", "duplicate", "induction"):
        exp[f"primary_{kind}"] = primary(attn, tokens, kind)
        for measure in ("mul", "abs"):
            for ex in (False, True):
                exp[f"tl_{measure}_{kind}_{'first' if ex else 'none'}"] = tl_scores(attn, tokens, kind, measure, ex)
    exp["alpha1"] = alpha1(attn)
    exp["slot_mass"] = slot_mass(slot)
    exp["entropy"] = entropy(attn, slot)
    exp["value_drain"] = value_drain(values)
    a = ahon(z)
    exp["ahon"] = a
    exp["ahon_ln"] = [x / (sum(a) / len(a)) for x in a]
    return {
        "name": name,
        "tokens": tokens.tolist(),
        "attn": f32_json(attn),
        "slot": f32_json(slot) if slot_share else None,
        "values": f32_json(values),
        "z": f32_json(z),
        "expected": exp,
    }


def trigger_copy(attn, tokens, offsets):
    B, H, T, _ = attn.shape
    out, counts = [], []
    for i, g in enumerate(offsets):
        total, count = np.zeros(H), 0
        for b in range(B):
            for q in range(T):
                if tokens[b][q] == 2 + i and q - g >= 1:
                    count += 1
                    total += attn[b, :, q, q - g]
        out.append([float(x / count) if count else None for x in total])
        counts.append(count)
    return out, counts


def trigger_case(name, rng, B, T, H, offsets, n_triggers, vocab, plants):
    """BOS then random ids (triggers frequent); head h puts `share` of trigger i's rows on q - g_i."""
    p = np.ones(vocab - 2)
    p[:n_triggers] = 4.0
    body = rng.choice(np.arange(2, vocab), size=(B, T - 1), p=p / p.sum())
    tokens = np.concatenate([np.zeros((B, 1), dtype=int), body], axis=1)
    attn, _ = causal_rows(rng, B, H, T, 1.0, 0.0)
    for h, i, share in plants:
        g = offsets[i]
        for b in range(B):
            for q in range(T):
                if tokens[b][q] == 2 + i and q - g >= 0:
                    row = attn[b, h, q].copy() * (1 - share)
                    row[q - g] += share
                    attn[b, h, q] = row
    attn = as_f32(attn)
    groups = [[int(t - 1) if 2 <= t < 2 + n_triggers else 0 for t in row] for row in tokens]
    score, counts = trigger_copy(attn, tokens, offsets)
    return {
        "name": name,
        "tokens": tokens.tolist(),
        "groups": groups,
        "offsets": list(offsets),
        "attn": f32_json(attn),
        "expected": {"trigger_copy": score, "queries": counts},
    }


def eig_case(name, m):
    m = as_f32(m)
    ev = np.linalg.eigvals(m)
    return {
        "name": name,
        "matrix": f32_json(m),
        "eig_re": sorted(float(x) for x in ev.real),
        "abs_sum": float(np.abs(ev).sum()),
        "re_sum": float(ev.real.sum()),
        "copy": float(ev.real.sum() / np.abs(ev).sum()),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args()
    rng = np.random.default_rng(31)
    cases = [
        case("repeat_n6_softmax", rng, repeat_tokens(rng, 3, 6, 2, 40), 4, 5, 1.0, 0.0,
             [(0, "previous", 0.9), (1, "induction", 0.8), (2, "duplicate", 0.7)]),
        case("repeat3_n4_slot", rng, repeat_tokens(rng, 2, 4, 3, 30), 3, 4, 1.5, 1.0,
             [(1, "induction", 0.6)]),
        case("natural_many_duplicates", rng, rng.integers(0, 5, size=(3, 12)), 3, 4, 2.0, 0.0,
             [(2, "previous", 0.5)]),
    ]
    n = 12
    a = rng.normal(0, 1, (n, n))
    low = rng.normal(0, 1, (n, 3)) @ rng.normal(0, 1, (3, n))
    rot = rng.normal(0, 1, (n, n))
    rot = (rot - rot.T) + 0.1 * np.eye(n)
    q, _ = np.linalg.qr(rng.normal(0, 1, (n, n)))
    sup = -(q @ np.diag(rng.uniform(0.5, 2.0, n)) @ q.T) + 0.05 * rng.normal(0, 1, (n, n))
    eig = [
        eig_case("gaussian_12", a),
        eig_case("rank3_12", low),
        eig_case("near_antisymmetric_12", rot),
        eig_case("suppressor_12", sup),
        eig_case("gaussian_64", rng.normal(0, 1, (64, 64))),
        eig_case("upper_triangular_5", np.triu(rng.normal(0, 1, (5, 5)))),
    ]
    # the per-trigger copy score (its own stream, so the cases above keep their bytes)
    rng = np.random.default_rng(32)
    trigger = [
        trigger_case("bb_offsets_1_2_3_4", rng, 3, 16, 4, [1, 2, 3, 4], 4, 12,
                     [(0, 0, 0.9), (1, 1, 0.8), (2, 2, 0.7), (2, 3, 0.6)]),
        trigger_case("bb_five_triggers_offsets_1_2", rng, 2, 20, 2, [1, 2, 1, 2, 1], 5, 10,
                     [(1, 0, 0.5), (0, 1, 0.95)]),
    ]
    doc = {
        "generated_by": "python3 scripts/reference_heads.py",
        "numpy_version": np.__version__,
        "cases": cases,
        "eig": eig,
        "trigger_copy": trigger,
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}: {len(cases)} score cases, {len(eig)} eigenvalue cases, "
          f"{len(trigger)} per-trigger copy cases, {len(text)} bytes")


if __name__ == "__main__":
    main()
