#!/usr/bin/env python3
"""The kernels of one training step, from CubeCL's profiling log.

`sinklab bench --profile-log FILE --json` runs one extra training step with CubeCL's profiler
writing every kernel's device time to FILE (configured by a cubecl.toml; scripts/gpu_checks.sh
sets it up) and records the byte range of FILE that step wrote. This script reads that range
and prints where the step's device time went: per kernel (name without CubeCL's hash), the
launches, total and mean time and share, grouped into stages (sinklab's attention, cross-entropy
and AdamW kernels; matrix products; reductions; fused element-wise chains; the rest).

    python3 scripts/kernel_profile.py BENCH.json [--md OUT.md] [--json OUT.json]

The profiler times each kernel on its own, so the sum is the step's device time without
overlap; the bench's own tokens/s comes from unprofiled rounds.
"""
import argparse
import json
import re
import sys
from collections import defaultdict

UNITS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}
LINE = re.compile(r"^\|\s*([0-9.]+)\s*(ns|µs|us|ms|s)\s*\|\s*(.+?)\s*$")
HASH = re.compile(r"_[0-9a-f]{8}\b")

# stage of a kernel by name (first match wins)
STAGES = [
    ("attention (sinklab's tiled kernels)", re.compile(r"^Attention(Forward|BackwardQ|BackwardKv)\b")),
    ("cross-entropy (sinklab's kernels)", re.compile(r"^Xent(Forward|Backward)\b")),
    ("AdamW (sinklab's kernel)", re.compile(r"^AdamwUpdate\b")),
    ("matrix products", re.compile(r"(?i)matmul|gemm|Cmma|Mma|Tile|Stage|Batch")),
    ("reductions (norms, sums, the loss)", re.compile(r"(?i)reduce|sum|mean|argmax|max")),
    ("fused element-wise chains", re.compile(r"(?i)elemwise|fuse")),
    ("casts, copies, fills", re.compile(r"(?i)cast|copy|contiguous|full|into|slice|cat|gather|scatter|select")),
]


def short(name):
    """Burn's matrix-product kernels spell out their whole type: keep the entry point, the
    argument kind and the algorithm family."""
    if len(name) <= 60:
        return name
    words = name.split()
    family = [w for w in words if w.endswith("Family")]
    return " ".join(words[:2] + family[:1])


def stage_of(name):
    for stage, pattern in STAGES:
        if pattern.search(name):
            return stage
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench", help="sinklab bench --json output with a profile range")
    ap.add_argument("--md", help="write the table as Markdown here")
    ap.add_argument("--json", help="write the numbers as JSON here")
    a = ap.parse_args()
    bench = json.load(open(a.bench))
    prof = bench.get("profile")
    if not prof:
        sys.exit(f"{a.bench}: no `profile` (run sinklab bench with --profile-log)")
    with open(prof["log"], "rb") as f:
        f.seek(prof["from"])
        text = f.read(prof["to"] - prof["from"]).decode("utf-8", "replace")
    kernels = defaultdict(lambda: [0, 0.0])
    unparsed = 0
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            unparsed += bool(line.strip())
            continue
        ms = float(m.group(1)) * UNITS[m.group(2)]
        name = short(HASH.sub("", m.group(3)).replace(" | ", " "))
        kernels[name][0] += 1
        kernels[name][1] += ms
    total = sum(v[1] for v in kernels.values())
    if not kernels:
        sys.exit(f"{prof['log']}: no kernel lines in bytes {prof['from']}..{prof['to']}")
    stages = defaultdict(lambda: [0, 0.0])
    for name, (n, ms) in kernels.items():
        s = stages[stage_of(name)]
        s[0] += n
        s[1] += ms
    rows = sorted(kernels.items(), key=lambda kv: -kv[1][1])
    tokens = bench["batch"] * bench["ctx"]
    lines = [
        f"One training step of {bench['params']:,} parameters, {bench['batch']} × {bench['ctx']} tokens, "
        f"on {bench['device']}: {sum(v[0] for v in kernels.values())} kernel launches, "
        f"{total:.2f} ms of device time timed kernel by kernel "
        f"(the unprofiled rounds ran at {bench['median_tokens_per_s']:,.0f} tokens/s = "
        f"{1e3 * tokens / bench['median_tokens_per_s']:.2f} ms per step).",
        "",
        "| stage | launches | ms | share |",
        "|---|---|---|---|",
    ]
    for stage, (n, ms) in sorted(stages.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {stage} | {n} | {ms:.3f} | {100 * ms / total:.1f}% |")
    lines += ["", "| kernel | launches | ms | mean µs | share |", "|---|---|---|---|---|"]
    for name, (n, ms) in rows:
        lines.append(f"| `{name}` | {n} | {ms:.3f} | {1e3 * ms / n:.1f} | {100 * ms / total:.1f}% |")
    if unparsed:
        lines += ["", f"({unparsed} other lines in the range were not kernel timings.)"]
    out = "\n".join(lines) + "\n"
    print(out)
    if a.md:
        open(a.md, "w").write(out)
    if a.json:
        json.dump(
            {
                "total_ms": total,
                "stages": {k: {"launches": v[0], "ms": v[1]} for k, v in stages.items()},
                "kernels": {k: {"launches": v[0], "ms": v[1]} for k, v in kernels.items()},
            },
            open(a.json, "w"),
            indent=1,
        )


if __name__ == "__main__":
    main()
