#!/bin/bash
# Copy the reports of finished sweeps into experiments/results/ (committed):
#   bash scripts/collect_results.sh cpu_lr cpu_weight_decay cpu_data_fixed_token
# For each sweep runs/sweeps/NAME: `sinklab report` at ε = 0.2 (copied to NAME/eps0.2/) and
# at the default ε = 0.3 (copied to NAME/, and left in the sweep directory), with the plots.
set -euo pipefail
exe=${SINKLAB:-${CARGO_TARGET_DIR:-target}/release/sinklab}
for name in "$@"; do
  src=runs/sweeps/$name
  dst=experiments/results/$name
  rm -rf "$dst"
  mkdir -p "$dst/eps0.2"
  "$exe" report "$src" --eps 0.2 > /dev/null
  cp "$src"/report.md "$src"/report.csv "$src"/report.json "$src"/*.png "$dst/eps0.2/"
  "$exe" report "$src" > /dev/null
  cp "$src"/report.md "$src"/report.csv "$src"/report.json "$src"/*.png "$dst/"
  cp "$src"/sweep.json "$dst/"
  echo "$dst: $(ls "$dst" | tr '\n' ' ')"
done
