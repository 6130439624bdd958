#!/usr/bin/env bash
# Wall time and peak memory of the whole-model head scans on SmolLM2-135M-Instruct (30 layers ×
# 9 heads = 270 heads; issue 31 item 5), on this machine's CPU:
#
#   bash scripts/bench_heads.sh [RESULTS_DIR]     # default experiments/results/bench
#
# Imports $SINKLAB_SMOLLM2 (the Q4_1 GGUF; default: scripts/fetch_smollm2.sh fetches it) into a
# temporary run with `sinklab import FILE --out DIR --ctx 128`, then runs under `/usr/bin/time -v`:
#
#   sinklab heads  RUN --sequences 4                  head scores of all 270 heads
#   sinklab ablate RUN --sequences 4                  all 270 heads zero-ablated, repeat task n 50
#   sinklab patch  RUN --n 20 --sequences 8 --site z  270 heads patched (denoising)
#   sinklab bench  RUN --heads --sequences 4          the naive cost (below)
#
# The scans walk each batch once recording `resid_pre` of every layer, restart every layer-l
# intervention at layer l, run the heads of a layer together as copies of the batch, and keep
# only per-row reductions of the logits (src/intervene/). For comparison, `sinklab bench --heads`
# times one layer's 9 heads (layer 15, the same repeat batch as ablate) four ways: one full
# forward per head (naive), the 9 batched as copies from layer 0, one head per walk restarted
# at the layer, and batched and restarted (the scan); it checks the four give the same losses. The naive whole-model figure is EXTRAPOLATED from it:
# record + 270 × (naive time of the 9 heads / 9); the other rows are measured.
#
# Writes RESULTS_DIR/heads_scan.md (a Markdown table: command, wall s, peak RSS, heads/s, commit,
# date, the 1-minute load average before and after each command) and the raw outputs in
# RESULTS_DIR/heads_scan/ (NAME.time: `/usr/bin/time -v`; NAME.log: the command's output).
# Timings are upper bounds whenever the load column shows other work on the cores.
#
# Needs: a release build (cargo build --release; or SINKLAB=path/to/sinklab) and GNU time
# (/usr/bin/time, Debian package `time`: apt-get install time).
set -euo pipefail
cd "$(dirname "$0")/.."
exe="${SINKLAB:-${CARGO_TARGET_DIR:-target}/release/sinklab}"
[ -x "$exe" ] || { echo "build first: cargo build --release (or set SINKLAB=path/to/sinklab)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install time" >&2; exit 1; }
results="${1:-experiments/results/bench}"
model="${SINKLAB_SMOLLM2:-$(bash scripts/fetch_smollm2.sh)}"
[ -f "$model" ] || { echo "no GGUF at $model (set SINKLAB_SMOLLM2)" >&2; exit 1; }
tmp="$(mktemp -d /tmp/sinklab-bench-heads.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
raw="$results/heads_scan"
mkdir -p "$raw"
run="$tmp/smollm2"
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock || echo -dirty)"
heads=270

"$exe" import "$model" --out "$run" --ctx 128 > "$raw/import.log" 2>&1
# The first command on a run tokenises the embedded corpus once (cached); untimed.
"$exe" bench "$run" --heads --n 5 --sequences 1 > /dev/null 2>&1

load() { cut -d' ' -f1 /proc/loadavg; }
seconds() { # "Elapsed (wall clock) time (h:mm:ss or m:ss): 1:02.03" → 62.03
  grep 'Elapsed (wall clock)' "$1" | awk '{print $NF}' |
    awk -F: '{s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.1f", s}'
}
rss_mib() { grep 'Maximum resident set size' "$1" | awk '{printf "%.0f", $NF / 1024}'; }
rows=()
timed() { # name, label, heads covered (or -), command...
  local name="$1" label="$2" n="$3"; shift 3
  local when before after secs rate
  when="$(date -u +%Y-%m-%dT%H:%MZ)"
  before="$(load)"
  /usr/bin/time -v -o "$raw/$name.time" "$@" > "$raw/$name.log" 2>&1
  after="$(load)"
  secs="$(seconds "$raw/$name.time")"
  rate="–"
  [ "$n" = "-" ] || rate="$(awk -v n="$n" -v s="$secs" 'BEGIN {printf "%.2f", n / s}')"
  rows+=("| $label | $secs | $(rss_mib "$raw/$name.time") | $rate | $commit | $when | $before → $after |")
  echo "${rows[-1]}" >&2
}

timed heads '`heads --sequences 4` (scores of 270 heads)' "$heads" \
  "$exe" heads "$run" --sequences 4 --out "$tmp/heads"
timed ablate '`ablate --sequences 4` (270 heads zero-ablated, repeat n 50)' "$heads" \
  "$exe" ablate "$run" --sequences 4 --out "$tmp/ablate"
timed patch '`patch --n 20 --sequences 8 --site z` (270 heads)' "$heads" \
  "$exe" patch "$run" --n 20 --sequences 8 --site z --out "$tmp/patch"
timed bench_heads '`bench --heads --sequences 4` (layer 15 four ways, see below)' - \
  "$exe" bench "$run" --heads --sequences 4 --json
json="$(tail -n 1 "$raw/bench_heads.log")"
field() { python3 -c "import json, sys; print(round(json.loads(sys.argv[1])['$1'], 2))" "$json"; }
naive="$(field naive_scan_estimate_s)"
rows+=("| naive ablate scan: 270 full forwards, one per head (**extrapolated**: record + 270 × $(field naive_per_head_s) s) | $naive | – | $(awk -v s="$naive" 'BEGIN {printf "%.2f", 270 / s}') | $commit | – | – |")

{
  echo "# Whole-model head scans on SmolLM2-135M-Instruct (270 heads)"
  echo
  echo "\`bash scripts/bench_heads.sh\` on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs));"
  echo "model imported with \`--ctx 128\`. Load: the 1-minute load average before → after each"
  echo "command; above ~1 other work shared the cores and the times are upper bounds. Raw"
  echo "\`/usr/bin/time -v\` outputs and logs in \`heads_scan/\`."
  echo
  echo "| command | wall s | peak RSS MiB | heads/s | commit | date (UTC) | load |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "\`bench --heads\`: zero ablation of layer 15's 9 heads on the ablate batch (4 × 101 tokens),"
  echo "loss at the second half (s; measured):"
  echo
  echo "| record (one walk, resid_pre of every layer) | naive (9 full forwards) | batched (9 copies from layer 0) | one head per walk, restarted at layer 15 | batched, restarted at layer 15 (the scan) | largest loss difference |"
  echo "|---|---|---|---|---|---|"
  echo "| $(field record_s) | $(field naive_s) | $(field batched_s) | $(field restarted_one_s) | $(field restarted_s) | $(python3 -c "import json, sys; print(json.loads(sys.argv[1])['max_abs_diff'])" "$json") |"
} > "$results/heads_scan.md"
cat "$results/heads_scan.md"
