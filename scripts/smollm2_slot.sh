#!/usr/bin/env bash
# The measurements behind experiments/results/smollm2_slot/README.md: for the imported
# SmolLM2-135M and each model trained from it by experiments/smollm2/*.toml, on a text none of
# them trained on (the GPL-3 licence) and on the embedded corpus's validation split:
# perplexity, α₁ and slot mass per head (analyze), massive activations, and StreamingLLM with
# the window only (0 + 128), one kept token (1 + 127) and four (4 + 124), dense beside them.
# Writes experiments/results/smollm2_slot/RUN/ and the summary README.md there.
#   bash scripts/smollm2_slot.sh [RUN ...]     (default: smollm2 smollm2_sink_logit_init smollm2_sink_logit smollm2_sink_logit_qk smollm2_sink_logit_window;
#   smollm2_sink_logit_init is sink_logit.toml after one step at lr 1e-9, that README.md says how)
set -euo pipefail
cd "$(dirname "$0")/.."
sinklab=${SINKLAB:-target/release/sinklab}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
out=${OUT:-experiments/results/smollm2_slot}   # OUT: write elsewhere (scripts/reproduce.py)
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(smollm2 smollm2_sink_logit_init smollm2_sink_logit smollm2_sink_logit_qk smollm2_sink_logit_window)
for run in "${runs[@]}"; do
  d=$out/$run
  mkdir -p "$d"
  echo "== $run"
  t0=$(date +%s)
  "$sinklab" eval "runs/$run" --text "$text" --len 256 --json > "$d/eval_text.json"
  "$sinklab" eval "runs/$run" --len 256 --sequences 64 --json > "$d/eval_val.json"
  rm -f "$d"/attention_l*.png
  "$sinklab" analyze "runs/$run" --text "$text" --len 64 --sequences 100 --map 15:6 --out "$d" > "$d/analyze.log" 2>&1
  "$sinklab" stream-eval "runs/$run" --text "$text" --tokens 2048 --sinks 4 --window 124 \
    --kept 0,1,4 --no-recompute --out "$d" > "$d/stream.log" 2>&1
  echo "$run: $(( $(date +%s) - t0 )) s"
done
# layers.png needs matplotlib (pip install matplotlib) in ${PYTHON:-python3}
"${PYTHON:-python3}" scripts/smollm2_slot_table.py "$out" > "$out/README.md"
