#!/usr/bin/env python3
"""Summarise experiments/results/smollm2_slot/ (written by scripts/smollm2_slot.sh): one row per
model (perplexity, where the first token's attention went, the slot's share, massive
activations, StreamingLLM), per-layer tables, and, when matplotlib is installed, the per-layer
picture `layers.png` (first-token mass and slot mass by layer, every model).

    python3 scripts/smollm2_slot_table.py experiments/results/smollm2_slot > .../README.md
"""
import json
import sys
from pathlib import Path

LABELS = {
    "smollm2": "SmolLM2-135M as imported",
    "smollm2_sink_logit_init": "+ sink logit at its init z = 0, untrained",
    "smollm2_sink_logit": "+ sink logit (270 parameters trained)",
    "smollm2_sink_logit_qk": "+ sink logit, W_Q and W_K trained",
    "smollm2_sink_logit_window": "+ sink logit trained under a 128-key window",
}


def load(d: Path):
    j = lambda f: json.loads((d / f).read_text())
    a = j("analysis.json")
    nat = a["kinds"]["natural"]
    layers = len(nat["first_token_mass"])
    slot = [m if m is not None else 0.0 for m in nat["slot_mass"]]
    slot = [sum(m) / len(m) if isinstance(m, list) else m for m in slot]
    acts = a["activations"]
    mid = [x for x in acts if 11 <= x["layer"] <= 27]
    stream = {r["name"]: r for r in j("stream.json")["rows"]}
    return {
        "text": j("eval_text.json"),
        "val": j("eval_val.json"),
        "first": nat["first_token_mass"],
        "slot": slot,
        "alpha1": nat["importance_first"],
        "sink1": nat["sink_rate"]["0.3"][0],
        "slot_rate": (nat.get("slot_rate") or {}).get("0.3"),
        "top": [x["top3"][0] for x in acts],
        "ratio": [x["norm_ratio"] for x in acts],
        "mid_top": (min(x["top3"][0] for x in mid), max(x["top3"][0] for x in mid)),
        "stream": stream,
        "layers": layers,
    }


def row_ppl(stream, prefix):
    for name, r in stream.items():
        if name.startswith(prefix):
            return r
    return None


def main():
    root = Path(sys.argv[1])
    runs = [r for r in LABELS if (root / r / "stream.json").exists()]
    data = {r: load(root / r) for r in runs}
    out = []
    p = out.append
    p("# SmolLM2-135M given a sink slot: before and after\n")
    p("Written by `bash scripts/smollm2_slot.sh` (then `python3 scripts/smollm2_slot_table.py`); "
      "every number below is read from the JSON files in the model's directory. Text: the GPL-3 "
      "licence (no model trained on it), 100 windows of 64 tokens for `analyze`, windows of 256 "
      "for perplexity, 2048 tokens for `stream-eval` with a cache budget L = 128.\n")
    p("| model | ppl GPL-3 | val loss (embedded) | Sink₁ ε 0.3 (%) | slot Sink₁* ε 0.3 (%) | "
      "first-token mass, mean over layers | slot mass, mean over layers | top \\|h\\| layers 11–27 | "
      "stream ppl past L: dense / window only (0+128) / 1+127 / 4+124 |")
    p("|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        d = data[r]
        s = d["stream"]
        cells = [row_ppl(s, k) for k in ["dense", "window only", "window + 1 sink", "window + 4 sinks"]]
        st = " / ".join(f"{c['ppl_past_budget']:.2f}" if c else "–" for c in cells)
        slot_rate = "–" if d["slot_rate"] is None else f"{d['slot_rate']:.1f}"
        p(f"| {LABELS[r]} | {d['text']['ppl']:.3f} | {d['val']['val_loss']:.4f} | {d['sink1']:.1f} | {slot_rate} | "
          f"{sum(d['first']) / d['layers']:.3f} | {sum(d['slot']) / d['layers']:.3f} | "
          f"{d['mid_top'][0]:,.0f}–{d['mid_top'][1]:,.0f} | {st} |")
    p("\n## By layer\n")
    p("First-token mass (mean attention of the real queries on token 1) / slot mass, per layer:\n")
    p("| layer | " + " | ".join(LABELS[r] for r in runs) + " |")
    p("|---|" + "---|" * len(runs))
    n = max(d["layers"] for d in data.values())
    for l in range(n):
        p(f"| {l} | " + " | ".join(f"{data[r]['first'][l]:.3f} / {data[r]['slot'][l]:.3f}" for r in runs) + " |")
    p("\nLargest |h| in the residual stream (the largest |h| over a probe sequence's tokens and channels, mean over the 100 sequences: `activations[l].top3[0]` of analysis.json) and the norm ratio ‖h₁‖/mean‖h_t‖:\n")
    p("| layer | " + " | ".join(LABELS[r] for r in runs) + " |")
    p("|---|" + "---|" * len(runs))
    for l in range(n):
        p(f"| {l} | " + " | ".join(f"{data[r]['top'][l]:,.0f} ({data[r]['ratio'][l]:.1f})" for r in runs) + " |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        p("\n(`layers.png` not drawn: matplotlib is not installed.)")
    else:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for r, c in zip(runs, ["k", "tab:gray", "tab:blue", "tab:red", "tab:green"]):
            ax.plot(data[r]["first"], color=c, label=f"{LABELS[r]}: token 1")
            if any(data[r]["slot"]):
                ax.plot(data[r]["slot"], color=c, ls="--", label=f"{LABELS[r]}: slot")
        ax.set_xlabel("layer")
        ax.set_ylabel("attention mass (mean over heads and queries)")
        ax.set_title("SmolLM2-135M on GPL-3: where the sink's attention goes")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(root / "layers.png", dpi=110)
        p("\n![first-token and slot mass by layer](layers.png)")
    print("\n".join(out))


if __name__ == "__main__":
    main()
