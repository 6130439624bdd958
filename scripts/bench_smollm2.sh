#!/usr/bin/env bash
# Wall time and peak memory of sinklab on a real pretrained model: SmolLM2-135M-Instruct
# (Q4_1 GGUF, fetched from PyPI by scripts/fetch_smollm2.sh), on this machine's CPU.
#   bash scripts/bench_smollm2.sh [OUT_DIR]      # default /tmp/sinklab-bench-smollm2
# Measures: import (GGUF → run directory), eval --text on 512 tokens, analyze --text on one
# 512-token window and on 100 windows of 64, export, generate 32 tokens; prints a Markdown table (seconds, peak RSS) and the
# model's f32 size for comparison. The text is the first 512 tokens of the GPL-3 licence
# shipped by Debian (/usr/share/common-licenses/GPL-3), or $SINKLAB_BENCH_TEXT.
set -euo pipefail
cd "$(dirname "$0")/.."
exe="${SINKLAB:-${CARGO_TARGET_DIR:-target}/release/sinklab}"
[ -x "$exe" ] || { echo "build first: cargo build --release (or set SINKLAB=path/to/sinklab)" >&2; exit 1; }
out="${1:-/tmp/sinklab-bench-smollm2}"
text="${SINKLAB_BENCH_TEXT:-/usr/share/common-licenses/GPL-3}"
model="$(bash scripts/fetch_smollm2.sh)"
rm -rf "$out"
mkdir -p "$out"
# One window of 512 tokens (the licence is ~8k tokens; analyze takes its first full window).
head -c 2600 "$text" > "$out/text512.txt"

row() { # log name, label, command...
  local log="$1" label="$2"; shift 2
  /usr/bin/time -f "%e %M" -o "$out/time.txt" "$@" > "$out/$log.log" 2>&1
  read -r secs kb < "$out/time.txt"
  printf '| %s | %s | %s |\n' "$label" "$secs" "$((kb / 1024))"
}

echo "sinklab on SmolLM2-135M ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
echo
echo "| command | wall s | peak RSS MiB |"
echo "|---|---|---|"
row import "import (GGUF → run directory)" "$exe" import "$model" --out "$out/smollm2"
# the first command on a run tokenises the embedded corpus once (cached); not part of the figures
"$exe" eval "$out/smollm2" --text "$out/text512.txt" > /dev/null 2>&1
row eval "eval --text (512 tokens)" "$exe" eval "$out/smollm2" --text "$out/text512.txt" --len 512
row analyze "analyze --text (1 × 512)" "$exe" analyze "$out/smollm2" --text "$out/text512.txt" --len 512 \
  --sequences 1 --out "$out/analysis"
row analyze100 "analyze --text (100 × 64, 3 probe kinds)" "$exe" analyze "$out/smollm2" --text "$text" \
  --len 64 --sequences 100 --out "$out/analysis100"
row export "export (→ Hugging Face directory)" "$exe" export "$out/smollm2" --out "$out/hf"
row generate "generate (32 tokens)" "$exe" generate "$out/smollm2" --prompt "The capital of France is" \
  --tokens 32 --temperature 0
params=$(grep -o '[0-9]* parameters' "$out/import.log" | head -1 | cut -d' ' -f1)
echo
echo "model: $params parameters = $((params * 4 / 1048576)) MiB in f32; logs in $out"
grep -h "perplexity" "$out/eval.log" || true
