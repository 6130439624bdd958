#!/bin/bash
# Kill a sweep with kill -9 while it runs, resume it, and check that every run ends with the
# same logged values as the same sweep run without interruption.
#
#   bash scripts/sweep_kill_resume.sh SWEEP.toml [KILL_AFTER_SECONDS=100] [JOBS=2]
#
# The uninterrupted sweep is runs/sweeps/NAME (run first if not finished; finished runs are
# skipped); the interrupted copy goes to runs/sweeps_killed/NAME (deleted first). Prints the kill,
# which children were left (none: they die with the sweep), and per run whether every value
# logged in metrics.jsonl at every step (all but tokens/s) is identical. Exit 0 when all are.
set -euo pipefail
file=${1:?usage: sweep_kill_resume.sh SWEEP.toml [KILL_AFTER_SECONDS] [JOBS]}
after=${2:-100}
jobs=${3:-2}
exe=${SINKLAB:-${CARGO_TARGET_DIR:-target}/release/sinklab}
name=$("$exe" sweep "$file" --dry-run | sed -n 's/^sweep \([^ ]*\) → .*/\1/p')
echo "== uninterrupted: runs/sweeps/$name"
"$exe" sweep "$file" --jobs "$jobs" --out-dir runs/sweeps | tail -n 2
rm -rf "runs/sweeps_killed/$name"
echo "== interrupted copy: runs/sweeps_killed/$name, kill -9 after ${after}s"
"$exe" sweep "$file" --jobs "$jobs" --out-dir runs/sweeps_killed > /tmp/sweep_kill_resume.$$.log 2>&1 &
pid=$!
sleep "$after"
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
echo "killed sweep process $pid at $(date -u +%FT%TZ)"
sleep 2
left=$(pgrep -f "runs/sweeps_killed/$name/plans" || true)
echo "train processes left after the kill: ${left:-none}"
for s in "runs/sweeps_killed/$name"/status/*.json; do
  run=$(basename "$s" .json)
  ck=$(ls "runs/sweeps_killed/$name/$run/checkpoints" 2>/dev/null | tail -n 1)
  echo "  $run: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["state"])' "$s"), newest checkpoint ${ck:-none}"
done
echo "== resume"
"$exe" sweep "$file" --jobs "$jobs" --out-dir runs/sweeps_killed | tail -n 2
python3 - "runs/sweeps/$name" "runs/sweeps_killed/$name" <<'PY'
import json, os, sys
a, b = sys.argv[1:]

def series(d, r):
    """(step, tag) -> value, the last record winning; wall-clock throughput left out."""
    out = {}
    for line in open(os.path.join(d, r, "metrics.jsonl")):
        rec = json.loads(line)
        for k, v in rec["scalars"].items():
            if k != "train/tokens_per_s":
                out[(rec["step"], k)] = v
    return out

runs = sorted(f[:-5] for f in os.listdir(os.path.join(a, "plans")))
bad = 0
for r in runs:
    xa, xb = series(a, r), series(b, r)
    last = max(s for s, _ in xa)
    diff = sorted(k for k in set(xa) | set(xb) if xa.get(k) != xb.get(k))
    print(f"{r}: final step {last}: val loss {xa.get((last, 'val/loss'))} vs "
          f"{xb.get((last, 'val/loss'))}; {len(xa)} logged values: "
          + ("all identical" if not diff else f"{len(diff)} DIFFER, e.g. {diff[:3]}"))
    bad += bool(diff)
print(f"{len(runs) - bad}/{len(runs)} runs log identical values at every step")
sys.exit(1 if bad else 0)
PY
