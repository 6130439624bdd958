#!/usr/bin/env bash
# Per-step training speed of SAS-P against pre-LN as the width grows (He & Hofmann 2024 report
# SAS-P 1.16× faster than pre-LN at d 768 on GPUs): `sinklab bench` of
# experiments/skipless/{pre_ln,sas_p}.toml at 6 layers, head width 64, d_ff = 4d, 2 micro-batches
# of 8 × 128 tokens per step. Prints one Markdown row per width; run it on an otherwise idle machine.
#   bash scripts/bench_sas_width.sh [WIDTH ...]     (default: 128 256 512 768 1024)
set -euo pipefail
cd "$(dirname "$0")/.."
sinklab=${SINKLAB:-target/release/sinklab}
widths=("$@")
[ ${#widths[@]} -gt 0 ] || widths=(128 256 512 768 1024)
echo "| d_model | heads | pre-LN tokens/s | SAS-P tokens/s | SAS-P / pre-LN | pre-LN params | SAS-P params |"
echo "|---|---|---|---|---|---|---|"
for d in "${widths[@]}"; do
  h=$(( d / 64 ))
  row=()
  for f in pre_ln sas_p; do
    row+=("$("$sinklab" bench "experiments/skipless/$f.toml" --set model.n_layers=6 \
      --set "model.d_model=$d" --set "model.n_heads=$h" --set "model.d_ff=$(( 4 * d ))" \
      --warmup 2 --steps 4 --rounds 3 --json 2>/dev/null)")
  done
  python3 - "$d" "$h" "${row[@]}" <<'PY'
import json, sys
d, h, a, b = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
ta, tb = a["median_tokens_per_s"], b["median_tokens_per_s"]
print(f"| {d} | {h} | {ta:,.0f} | {tb:,.0f} | {tb / ta:.2f}× | {a['params']:,} | {b['params']:,} |")
PY
done
