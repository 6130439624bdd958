#!/usr/bin/env bash
# The measurements behind experiments/results/streaming/README.md: for each model of
# the sweep experiments/sweeps/repro/streaming.toml (vanilla, one learnable sink token,
# softmax-off-by-one; trained without BOS), the validation loss and sink metrics (eval), and
# StreamingLLM on 2048 validation tokens (8 × the training context of 256) with a cache of
# L = 128 that keeps 0, 1, 2 or 4 initial tokens (k + (128 − k)), dense attention beside them.
# Writes experiments/results/streaming/RUN/ and the summary README.md (Table 3's layout).
#   sinklab sweep experiments/sweeps/repro/streaming.toml && bash scripts/streaming_repro.sh
set -euo pipefail
cd "$(dirname "$0")/.."
sinklab=${SINKLAB:-target/release/sinklab}
sweep=${SWEEP:-runs/sweeps/cpu_streaming}
out=${OUT:-experiments/results/streaming}   # OUT: write elsewhere (scripts/reproduce.py)
for run in base-vanilla_seed0 base-sink_token_seed0 base-softmax1_seed0; do
  d=$out/$run
  mkdir -p "$d"
  echo "== $run"
  t0=$(date +%s)
  "$sinklab" eval "$sweep/$run" --json > "$d/eval.json"
  "$sinklab" stream-eval "$sweep/$run" --tokens 2048 --sinks 4 --window 124 --kept 0,1,2,4 \
    --no-recompute --out "$d" > "$d/stream.log" 2>&1
  echo "$run: $(( $(date +%s) - t0 )) s"
done
# streams.png needs matplotlib (pip install matplotlib) in ${PYTHON:-python3}
"${PYTHON:-python3}" scripts/streaming_table.py "$out" "$sweep" > "$out/README.md"
