#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU and no cargo or network (the project's lent
# H100: driver 580 = CUDA 13.0, a CUDA 13 toolkit, PyTorch 2.11+cu130). They run the binary of
# scripts/build_gpu_bundle.sh, which must come along as dist/gpu (with the device tool:
# carry ["dist/gpu"]); run from the repository root:
#
#   bash scripts/gpu_checks.sh                 # every section, results under $OUT
#   bash scripts/gpu_checks.sh info train      # only these sections (a call has 10 minutes)
#   STEPS=50 bash scripts/gpu_checks.sh train  # settings: the variables below
#   ONLY="cuda cuda-bf16 torch-bf16-sdpa" bash scripts/gpu_checks.sh train bench torch
#                                              # only these variants (and the references they need)
#
# Sections (each writes under $OUT, default ./gpu-checks-out, which the device tool brings back):
#   info   GPU, driver, toolkit, libdevice, the binary's shared libraries, PyTorch, Vulkan
#   train  experiments/natural_text.toml for $STEPS steps (LR warmup $STEPS/3) on flex at f32,
#          bf16 and f16 (the references), and on every TRAIN_VARIANTS entry (cuda and wgpu at
#          f32, cuda at bf16 and f16, wgpu at f16) from the same initial weights; per-step train
#          loss, val loss and the norm ratio must agree with the flex run of the same precision
#          within each entry's tolerance (scripts/compare_runs.py)
#   bench  `sinklab bench` of experiments/gu60m.toml's model (d 768, 10 layers, 8 heads, SwiGLU
#          1536, RoPE, ctx 2048, vocab 50,432; one micro-batch of 8 × 2048 tokens per step) for
#          every BENCH_VARIANTS entry (cuda at f32/bf16/f16, wgpu at f32/f16, each with
#          sinklab's fused attention kernel; cuda f32/bf16 and wgpu f32 also with the explicit
#          path): tokens/s and MFU
#   torch  scripts/bench_torch.py on the same shape and step: fp32 with hand-written attention
#          (sinklab's maths), the same with TF32 matmuls, bf16 autocast + SDPA (what a PyTorch
#          user runs), and torch.compile of that
# and summary.md: every check and every throughput with MFU against the GPU's peaks. Exit 0
# when every check passed. The binary is unpacked into $WORK (default /tmp/sinklab-gpu), not
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
RUN_TIMEOUT="${RUN_TIMEOUT:-300}"    # seconds allowed to one training run or benchmark
TORCH_PY="${TORCH_PY:-python3}"      # a Python with PyTorch (CUDA build)
ONLY="${ONLY:-}"                     # variant names to run (space-separated); empty: all

# ---- Variants --------------------------------------------------------------------------------
# Training: "NAME|sinklab flags|relative tolerance|flex reference". Each reference is a flex run
# with the same precision (flex computes bf16 and f16 on the CPU), so a variant is compared with
# the same maths on the CPU: "flex" (f32), "flex-bf16", "flex-f16".
# Tolerances: f32 2e-2, since CubeCL's autotune may run f32 matmuls as TF32 on tensor cores
# (10-bit mantissa; before fusion and autotune, wgpu on an H100 stayed within 0.011, ≈2e-3
# relative, of flex's train loss over 100 steps); bf16 (8-bit mantissa) 3e-2 and f16 2e-2, since
# two backends round the same products after summing in different orders.
# Flags are split on spaces (no space inside a value). At f32 the default attention is
# sinklab's fused kernel (model.attention.kernel = "fused": on cuda and wgpu the CubeCL half,
# src/kernels/cube/attention.rs); "-manual" runs the explicit path (the (T, T) weights written
# out with Burn's ops). The CubeCL kernel also runs under bf16/f16 (q, k, v stored in the low
# precision, its arithmetic in f32), so "-manual" is compared there too.
TRAIN_VARIANTS=(
  "cuda|--device cuda|2e-2|flex"
  "wgpu|--device wgpu|2e-2|flex"
  "cuda-manual|--device cuda --set model.attention.kernel=\"manual\"|2e-2|flex"
  "cuda-bf16|--device cuda --set train.precision=\"bf16\"|3e-2|flex-bf16"
  "cuda-f16|--device cuda --set train.precision=\"f16\"|2e-2|flex-f16"
  "wgpu-f16|--device wgpu --set train.precision=\"f16\"|2e-2|flex-f16"
)
# The flex references: "NAME|flags".
FLEX_REFERENCES=(
  "flex|--device flex"
  "flex-bf16|--device flex --set train.precision=\"bf16\""
  "flex-f16|--device flex --set train.precision=\"f16\""
)
# Throughput: "NAME|sinklab flags". wgpu has no bf16 (WGSL), so no wgpu-bf16.
BENCH_VARIANTS=(
  "cuda|--device cuda"
  "cuda-bf16|--device cuda --set train.precision=\"bf16\""
  "cuda-f16|--device cuda --set train.precision=\"f16\""
  "wgpu|--device wgpu"
  "wgpu-f16|--device wgpu --set train.precision=\"f16\""
  "cuda-manual|--device cuda --set model.attention.kernel=\"manual\""
  "cuda-bf16-manual|--device cuda --set train.precision=\"bf16\" --set model.attention.kernel=\"manual\""
  "wgpu-manual|--device wgpu --set model.attention.kernel=\"manual\""
)
# PyTorch peers: "NAME|bench_torch.py flags|peak (fp32, tf32 or bf16)".
TORCH_VARIANTS=(
  "torch-fp32|--attn manual|fp32"
  "torch-fp32-tf32|--attn manual --tf32|tf32"
  "torch-bf16-sdpa|--attn sdpa --dtype bf16|bf16"
  "torch-bf16-sdpa-compile|--attn sdpa --dtype bf16 --compile|bf16"
)
# gu60m's model, one micro-batch per step, for both sinklab and PyTorch.
GU60M_SINKLAB=(experiments/gu60m.toml --set train.batch_tokens=16384)
GU60M_TORCH=(--vocab 50432 --d-model 768 --layers 10 --heads 8 --ffn 1536 --ctx 2048 --batch 8
  --lr 4e-4 --wd 0.1)

sections=("$@")
[ "${#sections[@]}" -gt 0 ] || sections=(info train bench torch)
for s in "${sections[@]}"; do
  case "$s" in info | train | bench | torch) ;; *)
    echo "gpu_checks: unknown section '$s' (sections: info train bench torch)" >&2
    exit 1
    ;;
  esac
done
mkdir -p "$OUT" "$WORK"
CHECKS="$OUT/checks.tsv"
: >"$CHECKS"
why() { # LOG: the first panic with its message, else the last 3 lines, on one line
  if grep -q 'panicked at' "$1"; then grep -m 1 -A 1 'panicked at' "$1"; else tail -n 3 "$1"; fi | tr '\n' ' '
}
record() { # NAME PASS|FAIL|SKIP DETAIL
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$CHECKS"
  echo "gpu_checks: $2 $1: $3"
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

has() { local s; for s in "${sections[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
wanted() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; } # NAME: in ONLY, or ONLY empty

# ---- info -----------------------------------------------------------------------------------
if has info; then
  {
    echo "date: $(date -u +%FT%TZ)  host: $(hostname)  kernel: $(uname -r)  cores: $(nproc)"
    echo "binary: $version"
    cat "$BUNDLE/BUILD" 2>/dev/null
    echo
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,compute_cap,power.limit --format=csv
    echo "peaks (GFLOP/s, dense): fp32 ${PEAK_FP32:-?} tf32 ${PEAK_TF32:-?} bf16 ${PEAK_BF16:-?}"
    echo "libdevice: ${libdevice:-not found}; CUDA_PATH=${CUDA_PATH:-unset}"
    command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -n 2
    echo
    echo "shared libraries of the binary:"
    ldd "$BIN"
    echo
    "$TORCH_PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1 || true
    command -v vulkaninfo >/dev/null 2>&1 && vulkaninfo --summary 2>/dev/null | sed -n '/Devices:/,$p' | head -n 30
  } >"$OUT/info.txt" 2>&1
  nvidia-smi -q >"$OUT/nvidia-smi.txt" 2>&1 || true
  if ldd "$BIN" | grep -q 'not found'; then
    record info FAIL "shared libraries missing: $(ldd "$BIN" | grep 'not found' | tr -s ' \t\n' ' ')"
  else
    record info PASS "$GPU_NAME, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1); info.txt"
  fi
fi

# ---- train ----------------------------------------------------------------------------------
train_run() { # NAME FLAGS...: natural_text for $STEPS steps; metrics copied to $OUT/train/NAME
  local name="$1"
  shift
  local dir="$WORK/runs/$name" start
  rm -rf "$dir"
  mkdir -p "$OUT/train/$name"
  start=$(date +%s)
  if timeout -k 30 "$RUN_TIMEOUT" "$BIN" train experiments/natural_text.toml "$@" --quiet \
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
if has train; then
  declare -A ref_ok=() ref_needed=()
  for v in "${TRAIN_VARIANTS[@]}"; do
    IFS='|' read -r name flags rtol ref <<<"$v"
    wanted "$name" && ref_needed[$ref]=1
  done
  for r in "${FLEX_REFERENCES[@]}"; do
    IFS='|' read -r name flags <<<"$r"
    [ -n "${ref_needed[$name]:-}" ] || continue
    # shellcheck disable=SC2086
    if train_run "$name" $flags; then
      ref_ok[$name]=1
      record "train-$name" PASS "reference: $STEPS steps in $(cat "$OUT/train/$name/wall_s") s"
    else
      record "train-$name" FAIL "the flex reference run failed: $(why "$OUT/train/$name/train.log")"
    fi
  done
  for v in "${TRAIN_VARIANTS[@]}"; do
    IFS='|' read -r name flags rtol ref <<<"$v"
    wanted "$name" || continue
    if [ -z "${ref_ok[$ref]:-}" ]; then
      record "train-$name" SKIP "its reference $ref failed"
      continue
    fi
    # shellcheck disable=SC2086
    if ! train_run "$name" $flags; then
      record "train-$name" FAIL "training failed or timed out after $(cat "$OUT/train/$name/wall_s") s: $(why "$OUT/train/$name/train.log")"
      continue
    fi
    if python3 scripts/compare_runs.py "$OUT/train/$ref/metrics.jsonl" "$OUT/train/$name/metrics.jsonl" \
      --names "$ref" "$name" --label "train $name" --rtol "$rtol" \
      --json "$OUT/train/$name/compare.json" >"$OUT/train/$name/compare.txt"; then
      record "train-$name" PASS "losses within $rtol of $ref over $STEPS steps ($(cat "$OUT/train/$name/wall_s") s; train/$name/compare.txt)"
    else
      record "train-$name" FAIL "losses differ from $ref's by more than $rtol: see train/$name/compare.txt"
    fi
    cat "$OUT/train/$name/compare.txt"
  done
fi

# ---- bench ----------------------------------------------------------------------------------
mkdir -p "$OUT/bench"
if has bench; then
  for v in "${BENCH_VARIANTS[@]}"; do
    IFS='|' read -r name flags <<<"$v"
    wanted "$name" || continue
    # shellcheck disable=SC2086
    if timeout -k 30 "$RUN_TIMEOUT" "$BIN" bench "${GU60M_SINKLAB[@]}" $flags --warmup "$BENCH_WARMUP" \
      --steps "$BENCH_STEPS" --rounds 3 ${PEAK_FP32:+--peak-gflops "$PEAK_FP32"} --json \
      >"$OUT/bench/sinklab-$name.json" 2>"$OUT/bench/sinklab-$name.log"; then
      record "bench-$name" PASS "$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("%.0f tokens/s" % r["median_tokens_per_s"])' "$OUT/bench/sinklab-$name.json")"
    else
      record "bench-$name" FAIL "sinklab bench failed or timed out: $(why "$OUT/bench/sinklab-$name.log")"
      rm -f "$OUT/bench/sinklab-$name.json"
    fi
  done
fi

# ---- torch ----------------------------------------------------------------------------------
if has torch; then
  if ! "$TORCH_PY" -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    record torch SKIP "no PyTorch with CUDA in $TORCH_PY (set TORCH_PY)"
  else
    for v in "${TORCH_VARIANTS[@]}"; do
      IFS='|' read -r name flags peak <<<"$v"
      wanted "$name" || continue
      case "$peak" in fp32) p="$PEAK_FP32" ;; tf32) p="$PEAK_TF32" ;; *) p="$PEAK_BF16" ;; esac
      # shellcheck disable=SC2086
      if timeout -k 30 "$RUN_TIMEOUT" "$TORCH_PY" scripts/bench_torch.py --device cuda "${GU60M_TORCH[@]}" $flags \
        --warmup "$BENCH_WARMUP" --steps "$BENCH_STEPS" --rounds 3 ${p:+--peak-gflops "$p"} --json \
        >"$OUT/bench/$name.json" 2>"$OUT/bench/$name.log"; then
        record "$name" PASS "$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("%.0f tokens/s" % r["median_tokens_per_s"])' "$OUT/bench/$name.json")"
      else
        record "$name" FAIL "bench_torch.py failed or timed out: $(why "$OUT/bench/$name.log")"
        rm -f "$OUT/bench/$name.json"
      fi
    done
  fi
fi

# ---- summary --------------------------------------------------------------------------------
python3 - "$OUT" "$GPU_NAME" "${PEAK_FP32:-0}" "${PEAK_TF32:-0}" "${PEAK_BF16:-0}" <<'PY'
import glob, json, os, sys
out, gpu = sys.argv[1], sys.argv[2]
peaks = {k: float(v) for k, v in zip(["fp32", "tf32", "bf16"], sys.argv[3:6])}
lines = [f"# GPU checks on {gpu}", "", "| check | result | detail |", "|---|---|---|"]
checks = [l.rstrip("\n").split("\t") for l in open(os.path.join(out, "checks.tsv")) if l.strip()]
lines += [f"| {c[0]} | {c[1]} | {c[2].replace('|', '/')} |" for c in checks]
rows = []
for path in sorted(glob.glob(os.path.join(out, "bench", "*.json"))):
    r = json.load(open(path))
    name = os.path.basename(path)[:-5]
    mfu = " | ".join(f"{100 * r['achieved_gflops'] / p:.1f}%" if p else "?" for p in peaks.values())
    rows.append(f"| {name} | {r['median_tokens_per_s']:,.0f} | {r['achieved_gflops'] / 1000:.1f} | {mfu} |")
if rows:
    lines += ["", "gu60m's model (8 × 2048 tokens per step, training steps; FLOPs/token = 6N + 12LTd):", "",
              "| run | tokens/s | TFLOP/s | MFU vs fp32 peak | vs TF32 | vs BF16 |", "|---|---|---|---|---|---|"] + rows
    lines += ["", "peaks (GFLOP/s, dense): " + ", ".join(f"{k} {v:g}" for k, v in peaks.items())]
text = "\n".join(lines) + "\n"
open(os.path.join(out, "summary.md"), "w").write(text)
print(text)
PY
passed=$(grep -c $'\tPASS\t' "$CHECKS" || true)
failed=$(grep -c $'\tFAIL\t' "$CHECKS" || true)
skipped=$(grep -c $'\tSKIP\t' "$CHECKS" || true)
echo "gpu checks: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
