#!/usr/bin/env python3
"""Independent NumPy reference for sinklab's interventions (docs/reference.md §11).

    ~/.cache/sinklab-venv/bin/python scripts/reference_interventions.py
        # writes tests/fixtures/interventions_golden.json (deterministic)
    ~/.cache/sinklab-venv/bin/python scripts/reference_interventions.py --run RUN_DIR \\
        --tokens '[[...], [...]]' --heads 3:1,10:5 --groups 4:2
        # prints the same interventions on an imported model (SmolLM2) as JSON

The forward pass is scripts/reference.py's independent float64 model of every `[model]`
variant (written from the model-zoo specification, not from the Rust), run with its attention
hook, which sees q, k and v (k, v one slice per key/value group), the pattern (the
normaliser's output, slot columns first) and z (each head's output before W_O). The
interventions are written from their definitions:

  zero           z[:, h] = 0 at every position
  mean           z[:, h] = the position-wise mean over the batch's sequences of z[:, h]
  resample       z[b, h] = z[perm[b], h], perm the derangement sinklab draws (for B = 2: swap)
  move-to-first  the pattern rows of head h's real queries (rows N.., N sink tokens) become 1 on
                 the first real token's column (slot columns + N) and 0 elsewhere
  kv zero / mean / resample   the same on k[:, g] and v[:, g] of key/value group g

Fixture cases: every zoo case of reference.build_cases() with its weights and tokens from
reference.case_data (the same as tests/fixtures/zoo_golden.json); head 1 of layer 1, and key/value
group 0 of layer 1 (for a model without grouped-query attention, head 0's own k and v). The
fixture holds the logits (B, T, V) of each intervention, and `logit_diff`: answers
(answer_b, wrong_b) = ((7b + 3) mod V, (11b + 5) mod V), the clean logit difference
mean_b logit(answer_b) - logit(wrong_b) at the last position, and the same with z of each
head of each layer zero-ablated on its own (`zero_scan[layer][head]`, as `sinklab ablate
--metric logit-diff` scans).
"""
import argparse
import glob
import json
import os
import sys
import tomllib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference as ref  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests/fixtures/interventions_golden.json"


def slot_cols(m):
    sl = m["attention"]["slot"]
    k = sl["kind"]
    if k in ("sink_logit", "kv_bias", "k_bias"):
        return 1
    if k == "memory_kv":
        return sl["n"]
    return 0


def run(m, w, tokens, layer, site, index, kind, perm):
    """Logits with one intervention: site 'z' (head `index`), 'pattern' (move-to-first of head
    `index`) or 'kv' (k and v of group `index`); kind zero / mean / resample / move-to-first."""
    N = m["sink_tokens"]
    first = slot_cols(m) + N

    def edit(x):
        x = x.copy()
        if kind == "zero":
            x[:, index] = 0.0
        elif kind == "mean":
            x[:, index] = x[:, index].mean(axis=0, keepdims=True)
        elif kind == "resample":
            x[:, index] = x[perm, index]
        elif kind == "move-to-first":
            x[:, index, N:, :] = 0.0
            x[:, index, N:, first] = 1.0
        else:
            raise ValueError(kind)
        return x

    def hook(l, s, x):
        if l != layer:
            return x
        if site == "kv" and s in ("k", "v"):
            return edit(x)
        if site == s:
            return edit(x)
        return x

    return ref.forward(m, w, tokens, hook=hook)[0]


INTERVENTIONS = [
    ("z", "zero"), ("z", "mean"), ("z", "resample"), ("pattern", "move-to-first"),
    ("kv", "zero"), ("kv", "mean"), ("kv", "resample"),
]


def fixture(out):
    cases = []
    for c in ref.build_cases():
        m = c["model"]
        _, w, tokens, _, _ = ref.case_data(c)
        layer = 1
        head = 1 % m["n_heads"]
        perm = [1, 0]
        base = ref.forward(m, w, tokens)[0]
        res = {"name": c["name"], "layer": layer, "head": head, "group": 0,
               "baseline": ref.f64_json(base)}
        for site, kind in INTERVENTIONS:
            index = 0 if site == "kv" else head
            logits = run(m, w, tokens, layer, site, index, kind, perm)
            res[f"{site}_{kind}"] = ref.f64_json(logits)
        # The logit difference under zero-ablation of z, every head of every layer on its own:
        # per sequence b, logit(answer_b) - logit(wrong_b) at the last position, mean over b.
        V = base.shape[-1]
        answers = [[(7 * b + 3) % V, (11 * b + 5) % V] for b in range(tokens.shape[0])]
        assert all(a != x for a, x in answers)

        def logit_diff(lg):
            return float(np.mean([lg[b, -1, a] - lg[b, -1, x] for b, (a, x) in enumerate(answers)]))

        res["logit_diff"] = {
            "answers": answers,
            "baseline": logit_diff(base),
            "zero_scan": [[logit_diff(run(m, w, tokens, l, "z", h, "zero", perm))
                           for h in range(m["n_heads"])] for l in range(m["n_layers"])],
        }
        # every intervention changes something (a check that the hook is applied)
        for site, kind in INTERVENTIONS:
            assert np.abs(np.array(res[f"{site}_{kind}"]["data"]) - base.ravel()).max() > 0 or \
                kind == "move-to-first", (c["name"], site, kind)
        cases.append(res)
        print(f"{c['name']:42s} ok", flush=True)
    doc = {"generated_by": "python3 scripts/reference_interventions.py",
           "numpy_version": np.__version__, "cases": cases}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"
    Path(out).write_text(text)
    print(f"wrote {out}: {len(cases)} cases, {len(text)} bytes")


def imported(run_dir, tokens, heads, groups):
    """The same interventions on an imported run (resolved.toml + the newest checkpoint)."""
    from safetensors.numpy import load_file
    cfg = tomllib.loads(Path(run_dir, "resolved.toml").read_text())
    m = cfg["model"]
    ckpt = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "step_*")))[-1]
    w = {k: v.astype(np.float64) for k, v in load_file(os.path.join(ckpt, "model.safetensors")).items()}
    tokens = np.array(tokens)
    perm = [1, 0] if tokens.shape[0] == 2 else None
    out = {"baseline": ref.forward(m, w, tokens)[0][:, -1].tolist(), "runs": []}
    for layer, head in heads:
        for site, kind in INTERVENTIONS[:4]:
            logits = run(m, w, tokens, layer, site, head, kind, perm)
            out["runs"].append({"layer": layer, "index": head, "site": site, "kind": kind,
                                "last": logits[:, -1].tolist()})
    for layer, group in groups:
        for site, kind in INTERVENTIONS[4:]:
            logits = run(m, w, tokens, layer, site, group, kind, perm)
            out["runs"].append({"layer": layer, "index": group, "site": site, "kind": kind,
                                "last": logits[:, -1].tolist()})
    json.dump(out, sys.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--run", help="an imported run directory (prints JSON instead of the fixture)")
    ap.add_argument("--tokens", help="JSON list of 2 token lists")
    ap.add_argument("--heads", default="", help="L:H,... heads for z / pattern interventions")
    ap.add_argument("--groups", default="", help="L:G,... key/value groups")
    a = ap.parse_args()
    pairs = lambda s: [tuple(int(x) for x in p.split(":")) for p in s.split(",") if p]
    if a.run:
        imported(a.run, json.loads(a.tokens), pairs(a.heads), pairs(a.groups))
    else:
        fixture(a.out)


if __name__ == "__main__":
    main()
