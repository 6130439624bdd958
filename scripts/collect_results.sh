#!/bin/bash
# Copy the reports of finished sweeps into experiments/results/ (committed):
#   bash scripts/collect_results.sh runs/sweeps/cpu_lr runs/sweeps_wd05/cpu_lr:cpu_lr_wd0.5 ...
# Each argument is a sweep directory, optionally with `:DEST` (default: the directory's name).
# For each: `sinklab report` at ε = 0.2 (copied to DEST/eps0.2/) and at the default ε = 0.3
# (copied to DEST/, and left in the sweep directory), with the plots and the expanded plan.
set -euo pipefail
exe=${SINKLAB:-${CARGO_TARGET_DIR:-target}/release/sinklab}
for arg in "$@"; do
  src=${arg%%:*}
  name=$(basename "$src")
  [[ $arg == *:* ]] && name=${arg#*:}
  dst=experiments/results/$name
  rm -rf "$dst"
  mkdir -p "$dst/eps0.2"
  "$exe" report "$src" --eps 0.2 > /dev/null
  cp "$src"/report.md "$src"/report.csv "$src"/report.json "$src"/*.png "$dst/eps0.2/"
  "$exe" report "$src" > /dev/null
  cp "$src"/report.md "$src"/report.csv "$src"/report.json "$src"/*.png "$src"/sweep.json "$dst/"
  echo "$dst: $(ls "$dst" | tr '\n' ' ')"
done
