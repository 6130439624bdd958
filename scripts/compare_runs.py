#!/usr/bin/env python3
"""Compare two training runs of one experiment on two backends, scalar by scalar.

    python3 scripts/compare_runs.py REF/metrics.jsonl OTHER/metrics.jsonl \
        [--rtol 1e-3] [--tags train/loss val/loss ...] [--names flex wgpu] [--label "wgpu smoke"]

Used by scripts/wgpu_smoke.sh (flex against wgpu on Mesa's software Vulkan) and
scripts/gpu_checks.sh (flex against cuda and wgpu on a GPU). A tag passes when both runs logged
it at the same steps and every pair of values agrees: |a - b| <= rtol * max(1, |a|). Prints one
line per tag (values, largest relative difference), each run's wall time of the first logged
window and the median of the others (from train/tokens_per_s and train/tokens_seen; per step
with train.log_every = 1; --json has every window), and
'LABEL: N passed, M failed'; exits 1 when a tag fails. Standard library only: it runs on the GPU
machine's bare Python.
"""
import argparse
import json
import sys

DEFAULT_TAGS = ["train/loss", "val/loss", "act/norm_ratio/layer01"]


def series(path, tag):
    out = []
    for line in open(path):
        rec = json.loads(line)
        if tag in rec["scalars"]:
            out.append((rec["step"], rec["scalars"][tag]))
    return out


def step_seconds(path):
    """Seconds per logged window, keyed by step: tokens in the window / tokens per second."""
    tps = dict(series(path, "train/tokens_per_s"))
    seen = series(path, "train/tokens_seen")
    out, prev = [], 0.0
    for step, tokens in seen:
        if tps.get(step):
            out.append((step, (tokens - prev) / tps[step]))
        prev = tokens
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ref")
    ap.add_argument("other")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--tags", nargs="+", default=DEFAULT_TAGS)
    ap.add_argument("--names", nargs=2, default=["ref", "other"])
    ap.add_argument("--label", default="compare")
    ap.add_argument("--json", help="also write the comparison to this file")
    args = ap.parse_args()
    na, nb = args.names
    failed, rows = 0, []
    for tag in args.tags:
        a, b = series(args.ref, tag), series(args.other, tag)
        same_steps = len(a) == len(b) > 0 and all(sa == sb for (sa, _), (sb, _) in zip(a, b))
        rel = [abs(va - vb) / max(1.0, abs(va)) for (_, va), (_, vb) in zip(a, b)]
        worst = max(rel) if rel else float("nan")
        ok = same_steps and all(r <= args.rtol for r in rel)
        print(f"  {tag}: {na} {[round(v, 6) for _, v in a]} {nb} {[round(v, 6) for _, v in b]} "
              f"-> largest relative difference {worst:.2e} (tolerance {args.rtol:g}): "
              f"{'ok' if ok else 'MISMATCH'}")
        failed += not ok
        rows.append({"tag": tag, "steps": [s for s, _ in a], na: [v for _, v in a],
                     nb: [v for _, v in b], "max_rel_diff": worst, "ok": ok})
    times = {}
    for name, path in ((na, args.ref), (nb, args.other)):
        t = step_seconds(path)
        times[name] = t
        if t:
            rest = sorted(v for _, v in t[1:])
            then = f", then median {rest[len(rest) // 2]:.2f} s over steps {t[1][0]}..{t[-1][0]}" if rest else ""
            print(f"  {name}: wall time per logged window: first (step {t[0][0]}) {t[0][1]:.2f} s{then}")
    print(f"{args.label}: {len(args.tags) - failed} passed, {failed} failed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"label": args.label, "rtol": args.rtol, "tags": rows, "step_seconds": times}, f, indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
