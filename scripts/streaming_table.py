#!/usr/bin/env python3
"""Summarise experiments/results/streaming/ (written by scripts/streaming_repro.sh) in the layout
of StreamingLLM's Table 3 (Xiao et al. 2024, §3.3): one row per pretrained model (vanilla,
"zero sink" = softmax-off-by-one, one learnable sink token), one column per cache that keeps k
initial tokens and the L − k most recent ones (k = 0, 1, 2, 4; L = 128), the perplexity of the
tokens past L (where eviction has started). Beside it: validation loss, Sink₁ and where the
first token's attention went, and, when matplotlib is installed, `streams.png` (per-position
perplexity of every cache, one panel per model).

    python3 scripts/streaming_table.py experiments/results/streaming runs/sweeps/cpu_streaming > .../README.md
"""
import json
import math
import sys
from pathlib import Path

RUNS = [
    ("base-vanilla_seed0", "vanilla"),
    ("base-softmax1_seed0", "zero sink (softmax-off-by-one)"),
    ("base-sink_token_seed0", "learnable sink token"),
]
PAPER = {  # StreamingLLM Table 3 (160M models, cache 0/1/2/4 + 1020..1024)
    "vanilla": [27.87, 18.49, 18.05, 18.05],
    "zero sink (softmax-off-by-one)": [29214, 19.90, 18.27, 18.01],
    "learnable sink token": [1235, 18.01, 18.01, 18.02],
}
KEPT = [0, 1, 2, 4]


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def load(d: Path):
    stream = json.loads((d / "stream.json").read_text())
    ev = json.loads((d / "eval.json").read_text())
    s = ev["scalars"]
    by_k = {r["sinks"]: r for r in stream["rows"] if r["sinks"] is not None}
    dense = next(r for r in stream["rows"] if r["sinks"] is None and r["name"].startswith("dense"))
    return {
        "stream": stream,
        "by_k": by_k,
        "dense": dense,
        "val_loss": ev["val_loss"],
        "step": ev["step"],
        "sink1": s.get("sink/rate_eps0.3/pos01"),
        "first": mean(v for k, v in s.items() if k.startswith("attn/first_token_mass/")),
        "slot": mean(v for k, v in s.items() if "slot_mass" in k and "/layer" in k),
    }


def ppl_curve(nll, width=64):
    """Perplexity over consecutive blocks of `width` scored tokens: (block centre, ppl)."""
    out = []
    for a in range(0, len(nll) - width + 1, width):
        out.append((a + width / 2 + 1, math.exp(mean(nll[a:a + width]))))
    return out


def main():
    root = Path(sys.argv[1])
    sweep = sys.argv[2] if len(sys.argv) > 2 else "runs/sweeps/cpu_streaming"
    models = [(label, load(root / run)) for run, label in RUNS if (root / run / "stream.json").exists()]
    if not models:
        sys.exit(f"{root}: no stream.json under any of {[r for r, _ in RUNS]}")
    m0 = models[0][1]["stream"]
    L, ctx, n = m0["budget"], m0["ctx"], m0["tokens"]
    p = print
    p("# StreamingLLM §3.3 at CPU scale: a learnable sink token, softmax-off-by-one, vanilla\n")
    p(f"Written by `scripts/streaming_repro.sh` from the sweep `{sweep}` "
      "(`experiments/sweeps/repro/streaming.toml`); every number below is in the files beside "
      "this one (`RUN/stream.json`, `RUN/eval.json`).\n")
    p(f"Perplexity of the tokens past L = {L} of {n} validation tokens (the training context is "
      f"{ctx}), a cache of k initial tokens + the {L} − k most recent:\n")
    p("| model | " + " | ".join(f"{k} + {L - k}" for k in KEPT) + f" | dense (past {ctx}) | "
      "val loss | Sink₁ ε 0.3 | first-token mass | slot mass |")
    p("|---|" + "---|" * (len(KEPT) + 5))
    for label, m in models:
        cells = [f"{m['by_k'][k]['ppl_past_budget']:.2f}" if k in m["by_k"] else "–" for k in KEPT]
        dense = m["dense"]
        dp = dense["ppl_past_ctx"] if dense["ppl_past_ctx"] is not None else dense["ppl_past_budget"]
        slot = "–" if math.isnan(m["slot"]) else f"{m['slot']:.3f}"
        sink1 = "–" if m["sink1"] is None else f"{m['sink1']:.1f}%"
        p(f"| {label} | " + " | ".join(cells) + f" | {dp:.2f} | {m['val_loss']:.3f} | {sink1} | "
          f"{m['first']:.3f} | {slot} |")
    p("\nThe paper's Table 3 (160M-parameter models pretrained on the Pile, cache 0/1/2/4 + "
      "1020–1024):\n")
    p("| model | " + " | ".join(f"{k} + {1024 - k}" for k in KEPT) + " |")
    p("|---|" + "---|" * len(KEPT))
    for label, row in PAPER.items():
        p(f"| {label} | " + " | ".join(f"{x:g}" for x in row) + " |")
    p("\nPerplexity of the tokens after position L only; the first L tokens are scored from "
      "the same (not yet evicting) cache by every policy. Sink₁, first-token mass (mean over "
      "layers) and the slot mass (mean over layers: the sink token, or softmax-off-by-one's implicit zero key) come from `sinklab eval` on the "
      "validation probe.")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        p("\n(`streams.png` not drawn: matplotlib is not installed.)")
        return
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), sharey=True)
    axes = axes if len(models) > 1 else [axes]
    for ax, (label, m) in zip(axes, models):
        for r in m["stream"]["rows"]:
            xs, ys = zip(*ppl_curve(r["nll"]))
            ax.plot(xs, ys, label=r["name"])
        ax.axvline(L, color="grey", ls=":", lw=1)
        ax.axvline(ctx, color="grey", ls="--", lw=1)
        ax.set_yscale("log")
        ax.set_title(label)
        ax.set_xlabel("position (blocks of 64 tokens)")
    axes[0].set_ylabel("perplexity")
    axes[-1].legend(fontsize=7)
    fig.suptitle(f"Streaming perplexity by position (L = {L} dotted, training context {ctx} dashed)")
    fig.tight_layout()
    fig.savefig(root / "streams.png", dpi=110)
    p("\n![per-position perplexity](streams.png)")


if __name__ == "__main__":
    main()
