#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU and no cargo or network (the project's lent
# H100: driver 580 = CUDA 13.0, a CUDA 13 toolkit, PyTorch 2.11+cu130). They run the binary of
# scripts/build_gpu_bundle.sh, which must come along as dist/gpu (with the device tool:
# carry ["dist/gpu"]); run from the repository root:
#
#   bash scripts/gpu_checks.sh                 # every section, in order of value
#   bash scripts/gpu_checks.sh core            # the decisive numbers (first call on a cold machine)
#   bash scripts/gpu_checks.sh more            # everything else (a second call)
#   STEPS=50 bash scripts/gpu_checks.sh train  # settings: the variables below
#   ONLY="cuda-bf16 torch-bf16-sdpa" bash scripts/gpu_checks.sh bench torch
#                                              # only these variants (and the references they need)
#
# Checks run in order of value, each under its own time limit, and every result is written as
# it finishes (checks.tsv, summary.md, the raw files), so a call cut short still returns what it
# measured. `core` (about 9 minutes on a cold machine, less once the caches below are warm):
#   info              GPU, driver, toolkit, libdevice, the binary's shared libraries, PyTorch
#   train-cuda-bf16   experiments/natural_text.toml for $STEPS steps at bf16 on cuda against the
#                     same steps on flex at bf16 (the CPU reference): train loss at every step,
#                     val loss and the norm ratio within 3e-2 (scripts/compare_runs.py)
#   bench-cuda-bf16   `sinklab bench` of gu60m's model (d 768, 10 layers, 8 heads, SwiGLU 1536,
#                     RoPE, ctx 2048, vocab 50,432; one micro-batch of 8 × 2048 tokens) at bf16
#                     with the tiled attention kernel (SINKLAB_ATTENTION=kernel), tokens/s and MFU
#   bench-cuda-bf16-explicit   the same with the explicit attention (tensor-core matmuls for
#                     q·kᵀ and A·v, Burn's fused softmax)
#   torch-bf16-sdpa   scripts/bench_torch.py on the same shape and step: bf16 autocast + SDPA
#   torch-bf16-sdpa-compile    the same under torch.compile
#   profile-cuda-bf16 one step's kernels timed one by one (CubeCL's profiler) and broken down by
#                     kernel and stage (scripts/kernel_profile.py); Nsight Compute's per-kernel
#                     table beside it where `ncu` reads the hardware counters (NCU=1)
# `more`: f32 and f16 training against flex, wgpu, and the f32/f16/wgpu benchmarks.
#
# Every minute counts on a lent GPU: CubeCL keeps its autotune results and compiled kernels on
# disk (the `burn/persistence` feature) under ./target/environment — git-ignored, so the device
# machine keeps it between calls while it stays warm — and every benchmark runs warm-up steps
# (compilation, autotune) before it times anything. info.txt records the cache's size.
#
# Output under $OUT (default ./gpu-checks-out, which the device tool brings back): checks.tsv,
# summary.md, info.txt, train/NAME/, bench/NAME.json and .log, profile/. Exit 0 when every
# check that ran passed. The binary is unpacked into $WORK (default /tmp/sinklab-gpu), not
# $OUT. Without an NVIDIA GPU the script stops after unpacking and `sinklab check`, with a line
# saying so (exit 2).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="${OUT:-$ROOT/gpu-checks-out}"
WORK="${WORK:-${TMPDIR:-/tmp}/sinklab-gpu}"
BUNDLE="${BUNDLE:-$ROOT/dist/gpu}"
STEPS="${STEPS:-30}"                 # training steps per backend
EVAL_EVERY="${EVAL_EVERY:-10}"       # validation loss every this many steps
BENCH_STEPS="${BENCH_STEPS:-10}"     # timed steps per round (3 rounds, median)
BENCH_WARMUP="${BENCH_WARMUP:-3}"    # untimed steps first (autotune and kernel compilation)
TORCH_PY="${TORCH_PY:-python3}"      # a Python with PyTorch (CUDA build)
ONLY="${ONLY:-}"                     # check names to run (space-separated); empty: all
NCU="${NCU:-0}"                      # 1: also profile one step with Nsight Compute (slow)

# ---- The checks, in order of value -----------------------------------------------------------
# "SECTION|NAME|TIME LIMIT (s)|KIND|ARGS": KIND train (ARGS: "FLAGS|RTOL|REFERENCE"), bench
# (ARGS: "ENV|FLAGS|PEAK"), torch (ARGS: "FLAGS|PEAK"), profile (ARGS: "ENV|FLAGS"). Flags are
# split on spaces (no space inside a value). The flex references run first where a train check
# needs them: "flex" (f32), "flex-bf16", "flex-f16" (flex computes bf16 and f16 on the CPU, so a
# variant is compared with the same maths). Tolerances: bf16 (8-bit mantissa) 3e-2 and f16
# 2e-2, since two backends round the same products after summing in different orders; f32
# 2e-2, since CubeCL's autotune may run f32 matrix products as TF32 on tensor cores.
BF16='--set train.precision="bf16"'
F16='--set train.precision="f16"'
MANUAL='--set model.attention.kernel="manual"'
CHECKS=(
  "core|train-cuda-bf16|240|train|--device cuda $BF16|3e-2|flex-bf16"
  "core|bench-cuda-bf16|200|bench|SINKLAB_ATTENTION=kernel|--device cuda $BF16|bf16"
  "core|bench-cuda-bf16-explicit|150|bench||--device cuda $BF16 $MANUAL|bf16"
  "core|torch-bf16-sdpa|120|torch|--attn sdpa --dtype bf16|bf16"
  "core|torch-bf16-sdpa-compile|180|torch|--attn sdpa --dtype bf16 --compile|bf16"
  "core|profile-cuda-bf16|150|profile|SINKLAB_ATTENTION=kernel|--device cuda $BF16"
  "more|train-cuda|200|train|--device cuda|2e-2|flex"
  "more|train-cuda-f16|200|train|--device cuda $F16|2e-2|flex-f16"
  "more|train-cuda-manual|200|train|--device cuda $MANUAL|2e-2|flex"
  "more|train-wgpu|200|train|--device wgpu|2e-2|flex"
  "more|bench-cuda|150|bench|SINKLAB_ATTENTION=kernel|--device cuda|fp32"
  "more|bench-cuda-f16|150|bench|SINKLAB_ATTENTION=kernel|--device cuda $F16|bf16"
  "more|bench-cuda-explicit|150|bench||--device cuda $MANUAL|fp32"
  "more|bench-wgpu|150|bench|SINKLAB_ATTENTION=kernel|--device wgpu|fp32"
  "more|torch-fp32|120|torch|--attn manual|fp32"
  "more|torch-fp32-tf32|120|torch|--attn manual --tf32|tf32"
)
# The flex references: "NAME|FLAGS|TIME LIMIT (s)".
FLEX_REFERENCES=(
  "flex|--device flex|200"
  "flex-bf16|--device flex $BF16|240"
  "flex-f16|--device flex $F16|240"
)
# gu60m's model, one micro-batch of 8 × 2048 tokens per step, for both sinklab and PyTorch.
GU60M_SINKLAB=(experiments/gu60m.toml --set train.batch_tokens=16384)
GU60M_TORCH=(--vocab 50432 --d-model 768 --layers 10 --heads 8 --ffn 1536 --ctx 2048 --batch 8
  --lr 4e-4 --wd 0.1)

sections=("$@")
[ "${#sections[@]}" -gt 0 ] || sections=(core more)
for s in "${sections[@]}"; do
  case "$s" in core | more | info | train | bench | torch | profile) ;; *)
    echo "gpu_checks: unknown section '$s' (sections: core more, or the kinds info train bench torch profile)" >&2
    exit 1
    ;;
  esac
done
mkdir -p "$OUT" "$WORK" "$OUT/bench" "$OUT/train" "$OUT/profile"
CHECKS_TSV="$OUT/checks.tsv"
: >"$CHECKS_TSV"
START=$(date +%s)
why() { # LOG: the first panic with its message, else the last 3 lines, on one line
  if grep -q 'panicked at' "$1"; then grep -m 1 -A 1 'panicked at' "$1"; else tail -n 3 "$1"; fi | tr '\n' ' '
}
summary() { :; } # replaced below, once the peaks are known
record() { # NAME PASS|FAIL|SKIP DETAIL: appended at once, the summary rewritten
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(( $(date +%s) - START ))" >>"$CHECKS_TSV"
  echo "gpu_checks: [$(( $(date +%s) - START )) s] $2 $1: $3"
  summary
}
export RUST_BACKTRACE=1
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$WORK/xdg}"
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"

# ---- The binary -----------------------------------------------------------------------------
if [ ! -f "$BUNDLE/sinklab.xz" ]; then
  echo "gpu_checks: $BUNDLE/sinklab.xz is missing: run scripts/build_gpu_bundle.sh on a machine with cargo and carry dist/gpu along" >&2
  exit 1
fi
BIN="$WORK/sinklab"
if command -v xz >/dev/null 2>&1; then
  xz -dc "$BUNDLE/sinklab.xz" >"$BIN.tmp"
else
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    "$BUNDLE/sinklab.xz" "$BIN.tmp"
fi
chmod +x "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
cp "$BUNDLE/BUILD" "$OUT/BUILD" 2>/dev/null || true
if ! version="$("$BIN" --version 2>&1)"; then
  record binary FAIL "the unpacked binary does not start: $version ($(ldd "$BIN" 2>&1 | grep 'not found' | tr '\n' ' '))"
  exit 1
fi
missing=()
for dev in cuda wgpu; do
  "$BIN" check experiments/natural_text.toml --device "$dev" >/dev/null 2>"$WORK/check.err" || missing+=("$dev: $(head -n 1 "$WORK/check.err")")
done
if [ "${#missing[@]}" -gt 0 ]; then
  record binary FAIL "${missing[*]}"
  exit 1
fi
record binary PASS "$version; cuda and wgpu compiled in ($(sed -n 's/^git_revision: //p' "$BUNDLE/BUILD" 2>/dev/null))"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >"$WORK/gpus.txt" 2>&1 || ! grep -q '^GPU ' "$WORK/gpus.txt"; then
  record gpu FAIL "no NVIDIA GPU here ($(command -v nvidia-smi >/dev/null 2>&1 && head -n 1 "$WORK/gpus.txt" || echo 'nvidia-smi not found')): these checks need the GPU machine; the bundle itself unpacked and runs"
  exit 2
fi
GPU_NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"

# The GPU's dense peaks in GFLOP/s (NVIDIA datasheets; dense = half the sparsity figure):
# fp32 on CUDA cores, TF32 and BF16 on tensor cores. PEAK_FP32/PEAK_TF32/PEAK_BF16 override.
case "$GPU_NAME" in
  *H100*PCIe*) peaks=(51200 378000 756000) ;;
  *H100*NVL* | *H200*NVL*) peaks=(60000 417500 835500) ;;
  *H100* | *H200*) peaks=(66900 494700 989400) ;; # SXM
  *) peaks=("" "" "") ;;
esac
PEAK_FP32="${PEAK_FP32:-${peaks[0]}}"
PEAK_TF32="${PEAK_TF32:-${peaks[1]}}"
PEAK_BF16="${PEAK_BF16:-${peaks[2]}}"
[ -n "$PEAK_FP32" ] || echo "gpu_checks: peaks of '$GPU_NAME' unknown: set PEAK_FP32, PEAK_TF32, PEAK_BF16 (GFLOP/s) for MFU" >&2

# libdevice.10.bc (exp, log, erf… in CUDA kernels): where cubecl-llvm looks (CUDA_PATH, else the
# first of /usr/local/cuda /opt/cuda /usr/lib/cuda /usr with nvvm/libdevice), else the bundle's
# copy, else PyTorch's Triton or pip's nvidia-cuda-nvcc; CUDA_PATH is pointed at what is found.
libdevice=""
if [ -n "${CUDA_PATH:-}" ]; then
  [ -f "$CUDA_PATH/nvvm/libdevice/libdevice.10.bc" ] && libdevice="$CUDA_PATH/nvvm/libdevice/libdevice.10.bc"
else
  for root in /usr/local/cuda /opt/cuda /usr/lib/cuda /usr; do
    if [ -d "$root/nvvm/libdevice" ]; then
      [ -f "$root/nvvm/libdevice/libdevice.10.bc" ] && libdevice="$root/nvvm/libdevice/libdevice.10.bc"
      break
    fi
  done
fi
if [ -z "$libdevice" ]; then
  for cand in "$BUNDLE/cuda/nvvm/libdevice/libdevice.10.bc" \
    $("$TORCH_PY" -c 'import glob, os, site
for d in site.getsitepackages():
    print(" ".join(glob.glob(os.path.join(d, "triton/backends/nvidia/lib/libdevice.10.bc"))
                   + glob.glob(os.path.join(d, "nvidia/cu*/nvvm/libdevice/libdevice.10.bc"))))' 2>/dev/null); do
    if [ -f "$cand" ]; then
      mkdir -p "$WORK/cuda/nvvm/libdevice"
      ln -sf "$cand" "$WORK/cuda/nvvm/libdevice/libdevice.10.bc"
      export CUDA_PATH="$WORK/cuda"
      libdevice="$cand"
      break
    fi
  done
fi
if [ -n "$libdevice" ]; then
  record libdevice PASS "$libdevice (CUDA_PATH=${CUDA_PATH:-unset})"
else
  record libdevice FAIL "libdevice.10.bc not found: CUDA kernels with exp/log/erf will fail; set CUDA_PATH to a CUDA toolkit"
fi


# CubeCL's caches (autotune results, compiled kernels) live under ./target/environment: the
# binary runs from the repository root, whose Cargo.toml CubeCL finds (its default `target`
# cache root), and target/ is git-ignored, so a warm device machine keeps it between calls.
CACHE="$ROOT/target/environment"
cache_size() { du -sh "$CACHE" 2>/dev/null | cut -f1 || echo 0; }
echo "gpu_checks: CubeCL caches in $CACHE ($(cache_size) before this call)"

summary() { # summary.md from checks.tsv and the benchmarks so far
  python3 - "$OUT" "$GPU_NAME" "${PEAK_FP32:-0}" "${PEAK_TF32:-0}" "${PEAK_BF16:-0}" <<'PY'
import glob, json, os, sys
out, gpu = sys.argv[1], sys.argv[2]
peaks = {k: float(v) for k, v in zip(["fp32", "tf32", "bf16"], sys.argv[3:6])}
lines = [f"# GPU checks on {gpu}", "", "| check | result | detail | at (s) |", "|---|---|---|---|"]
checks = [l.rstrip("\n").split("\t") for l in open(os.path.join(out, "checks.tsv")) if l.strip()]
lines += [f"| {c[0]} | {c[1]} | {c[2].replace('|', '/')} | {c[3] if len(c) > 3 else ''} |" for c in checks]
rows, best = [], {}
for path in sorted(glob.glob(os.path.join(out, "bench", "*.json"))):
    try:
        r = json.load(open(path))
    except ValueError:
        continue
    name = os.path.basename(path)[:-5]
    best[name] = r["median_tokens_per_s"]
    mfu = " | ".join(f"{100 * r['achieved_gflops'] / p:.1f}%" if p else "?" for p in peaks.values())
    rows.append(f"| {name} | {r['median_tokens_per_s']:,.0f} | {r['achieved_gflops'] / 1000:.1f} | {mfu} |")
if rows:
    lines += ["", "gu60m's model (8 × 2048 tokens per step, training steps; FLOPs/token = 6N + 12LTd):", "",
              "| run | tokens/s | TFLOP/s | MFU vs fp32 peak | vs TF32 | vs BF16 |", "|---|---|---|---|---|---|"] + rows
    lines += ["", "peaks (GFLOP/s, dense): " + ", ".join(f"{k} {v:g}" for k, v in peaks.items())]
    torch = max((v for k, v in best.items() if k.startswith("torch-bf16")), default=None)
    ours = max((v for k, v in best.items() if k.startswith("sinklab-cuda-bf16")), default=None)
    if torch and ours:
        lines += ["", f"sinklab bf16 (faster attention path) / best PyTorch bf16: **{ours / torch:.2f}×**"]
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
PY
}

in_section() { # SECTION KIND: whether this call runs it
  local s
  for s in "${sections[@]}"; do
    [ "$s" = "$1" ] || [ "$s" = "$2" ] && return 0
  done
  return 1
}
wanted() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; } # NAME: in ONLY, or ONLY empty

# ---- info -----------------------------------------------------------------------------------
if in_section core info; then
  {
    echo "date: $(date -u +%FT%TZ)  host: $(hostname)  kernel: $(uname -r)  cores: $(nproc)"
    echo "binary: $version"
    cat "$BUNDLE/BUILD" 2>/dev/null
    echo
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,compute_cap,power.limit --format=csv
    echo "peaks (GFLOP/s, dense): fp32 ${PEAK_FP32:-?} tf32 ${PEAK_TF32:-?} bf16 ${PEAK_BF16:-?}"
    echo "libdevice: ${libdevice:-not found}; CUDA_PATH=${CUDA_PATH:-unset}"
    echo "CubeCL caches: $CACHE, $(cache_size) at the start of this call"
    command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -n 2
    command -v ncu >/dev/null 2>&1 && ncu --version | tail -n 1
    echo
    echo "shared libraries of the binary:"
    ldd "$BIN"
    echo
    "$TORCH_PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1 || true
  } >"$OUT/info.txt" 2>&1
  nvidia-smi -q >"$OUT/nvidia-smi.txt" 2>&1 || true
  if ldd "$BIN" | grep -q 'not found'; then
    record info FAIL "shared libraries missing: $(ldd "$BIN" | grep 'not found' | tr -s ' \t\n' ' ')"
  else
    record info PASS "$GPU_NAME, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1); caches $(cache_size); info.txt"
  fi
fi

# ---- the kinds of check ---------------------------------------------------------------------
train_run() { # NAME LIMIT FLAGS...: natural_text for $STEPS steps; metrics copied to $OUT/train/NAME
  local name="$1" limit="$2"
  shift 2
  local dir="$WORK/runs/$name" start
  rm -rf "$dir"
  mkdir -p "$OUT/train/$name"
  start=$(date +%s)
  # shellcheck disable=SC2068
  if timeout -k 20 "$limit" "$BIN" train experiments/natural_text.toml $@ --quiet \
    --set "run.out_dir=\"$WORK/runs\"" --set "run.name=\"$name\"" --set "data.cache_dir=\"$WORK/cache\"" \
    --set "train.steps=$STEPS" --set "optim.schedule.warmup=$((STEPS / 3))" \
    --set "train.log_every=1" --set "train.eval_every=$EVAL_EVERY" \
    --set "metrics.every=$STEPS" --set "train.checkpoint_every=$STEPS" \
    >"$OUT/train/$name/train.log" 2>&1; then
    echo "$(( $(date +%s) - start ))" >"$OUT/train/$name/wall_s"
    cp "$dir"/{metrics.jsonl,resolved.toml,provenance.json} "$OUT/train/$name/" 2>/dev/null || true
    return 0
  fi
  echo "$(( $(date +%s) - start ))" >"$OUT/train/$name/wall_s"
  return 1
}
declare -A ref_done=()
reference() { # NAME: the flex reference run, once per call; 0 when it passed
  local r name flags limit
  [ -n "${ref_done[$1]:-}" ] && { [ "${ref_done[$1]}" = ok ]; return; }
  for r in "${FLEX_REFERENCES[@]}"; do
    IFS='|' read -r name flags limit <<<"$r"
    [ "$name" = "$1" ] || continue
    # shellcheck disable=SC2086
    if train_run "$name" "$limit" $flags; then
      ref_done[$name]=ok
      record "train-$name" PASS "reference: $STEPS steps in $(cat "$OUT/train/$name/wall_s") s"
      return 0
    fi
    ref_done[$name]=failed
    record "train-$name" FAIL "the flex reference run failed: $(why "$OUT/train/$name/train.log")"
    return 1
  done
  return 1
}
check_train() { # NAME LIMIT "FLAGS|RTOL|REFERENCE"
  local name="$1" limit="$2" flags rtol ref run="${1#train-}"
  IFS='|' read -r flags rtol ref <<<"$3"
  if ! reference "$ref"; then
    record "$name" SKIP "its reference $ref failed"
    return
  fi
  # shellcheck disable=SC2086
  if ! train_run "$run" "$limit" $flags; then
    record "$name" FAIL "training failed or timed out after $(cat "$OUT/train/$run/wall_s") s: $(why "$OUT/train/$run/train.log")"
    return
  fi
  if python3 scripts/compare_runs.py "$OUT/train/$ref/metrics.jsonl" "$OUT/train/$run/metrics.jsonl" \
    --names "$ref" "$run" --label "train $run" --rtol "$rtol" \
    --json "$OUT/train/$run/compare.json" >"$OUT/train/$run/compare.txt"; then
    record "$name" PASS "losses within $rtol of $ref over $STEPS steps ($(cat "$OUT/train/$run/wall_s") s; $(grep -m 1 '^attention' "$OUT/train/$run/train.log" | cut -c1-160))"
  else
    record "$name" FAIL "losses differ from $ref's by more than $rtol: see train/$run/compare.txt"
  fi
  cat "$OUT/train/$run/compare.txt"
}
peak_of() { case "$1" in fp32) echo "$PEAK_FP32" ;; tf32) echo "$PEAK_TF32" ;; *) echo "$PEAK_BF16" ;; esac; }
check_bench() { # NAME LIMIT "ENV|FLAGS|PEAK"
  local name="$1" limit="$2" env flags peak run="sinklab-${1#bench-}" p
  IFS='|' read -r env flags peak <<<"$3"
  p="$(peak_of "$peak")"
  # shellcheck disable=SC2086
  if env $env timeout -k 20 "$limit" "$BIN" bench "${GU60M_SINKLAB[@]}" $flags --warmup "$BENCH_WARMUP" \
    --steps "$BENCH_STEPS" --rounds 3 ${p:+--peak-gflops "$p"} --json \
    >"$OUT/bench/$run.json.tmp" 2>"$OUT/bench/$run.log"; then
    mv "$OUT/bench/$run.json.tmp" "$OUT/bench/$run.json"
    record "$name" PASS "$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("%.0f tokens/s, MFU %.1f%% (%s); %s" % (r["median_tokens_per_s"], 100 * r["mfu"], sys.argv[2], (r.get("attention") or "")[:150]))' "$OUT/bench/$run.json" "$peak")"
  else
    rm -f "$OUT/bench/$run.json.tmp"
    record "$name" FAIL "sinklab bench failed or timed out after $limit s: $(why "$OUT/bench/$run.log")"
  fi
}
check_torch() { # NAME LIMIT "FLAGS|PEAK"
  local name="$1" limit="$2" flags peak p
  IFS='|' read -r flags peak <<<"$3"
  if ! "$TORCH_PY" -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    record "$name" SKIP "no PyTorch with CUDA in $TORCH_PY (set TORCH_PY)"
    return
  fi
  p="$(peak_of "$peak")"
  # shellcheck disable=SC2086
  if timeout -k 20 "$limit" "$TORCH_PY" scripts/bench_torch.py --device cuda "${GU60M_TORCH[@]}" $flags \
    --warmup "$BENCH_WARMUP" --steps "$BENCH_STEPS" --rounds 3 ${p:+--peak-gflops "$p"} --json \
    >"$OUT/bench/$name.json.tmp" 2>"$OUT/bench/$name.log"; then
    mv "$OUT/bench/$name.json.tmp" "$OUT/bench/$name.json"
    record "$name" PASS "$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("%.0f tokens/s, MFU %.1f%%" % (r["median_tokens_per_s"], 100 * r.get("mfu", 0)))' "$OUT/bench/$name.json")"
  else
    rm -f "$OUT/bench/$name.json.tmp"
    record "$name" FAIL "bench_torch.py failed or timed out after $limit s: $(why "$OUT/bench/$name.log")"
  fi
}
check_profile() { # NAME LIMIT "ENV|FLAGS": one step's kernels, timed one by one by CubeCL
  local name="$1" limit="$2" env flags dir="$WORK/profile"
  IFS='|' read -r env flags <<<"$3"
  mkdir -p "$dir"
  rm -f "$OUT/profile/cubecl.log"
  # CubeCL reads cubecl.toml from the working directory: its profiler into $OUT, the caches
  # where every other check keeps them
  cat >"$dir/cubecl.toml" <<TOML
[profiling.logger]
level = "medium"
file = "$OUT/profile/cubecl.log"
append = false

[environment]
path = { directory = "$CACHE" }
TOML
  # shellcheck disable=SC2086
  if (cd "$dir" && env $env timeout -k 20 "$limit" "$BIN" bench "$ROOT/${GU60M_SINKLAB[0]}" "${GU60M_SINKLAB[@]:1}" \
    $flags --warmup "$BENCH_WARMUP" --steps 1 --rounds 1 --json --profile-log "$OUT/profile/cubecl.log" \
    >"$OUT/profile/bench.json" 2>"$OUT/profile/bench.log") &&
    python3 scripts/kernel_profile.py "$OUT/profile/bench.json" --md "$OUT/profile/kernels.md" \
      --json "$OUT/profile/kernels.json" >/dev/null; then
    record "$name" PASS "$(sed -n 1p "$OUT/profile/kernels.md" | cut -c1-200); profile/kernels.md"
  else
    record "$name" FAIL "the profiled step failed or timed out after $limit s: $(why "$OUT/profile/bench.log")"
  fi
  if [ "$NCU" = 1 ] && command -v ncu >/dev/null 2>&1; then
    # Nsight Compute, where the machine lets it read the counters: one step's kernels
    # shellcheck disable=SC2086
    env $env timeout -k 20 "$limit" ncu --metrics gpu__time_duration.sum --csv \
      "$BIN" bench "${GU60M_SINKLAB[@]}" $flags --warmup 1 --steps 1 --rounds 1 --json \
      >"$OUT/profile/ncu.csv" 2>"$OUT/profile/ncu.log" &&
      record "$name-ncu" PASS "profile/ncu.csv" ||
      record "$name-ncu" FAIL "ncu: $(why "$OUT/profile/ncu.log")"
  fi
}

# ---- run them -------------------------------------------------------------------------------
for c in "${CHECKS[@]}"; do
  IFS='|' read -r section name limit kind args <<<"$c"
  in_section "$section" "$kind" || continue
  wanted "$name" || continue
  case "$kind" in
    train) check_train "$name" "$limit" "$args" ;;
    bench) check_bench "$name" "$limit" "$args" ;;
    torch) check_torch "$name" "$limit" "$args" ;;
    profile) check_profile "$name" "$limit" "$args" ;;
  esac
done

summary
cat "$OUT/summary.md"
echo "gpu_checks: CubeCL caches in $CACHE: $(cache_size) after this call"
passed=$(grep -c $'\tPASS\t' "$CHECKS_TSV" || true)
failed=$(grep -c $'\tFAIL\t' "$CHECKS_TSV" || true)
skipped=$(grep -c $'\tSKIP\t' "$CHECKS_TSV" || true)
echo "gpu checks: $passed passed, $failed failed, $skipped skipped in $(( $(date +%s) - START )) s"
[ "$failed" = 0 ]
