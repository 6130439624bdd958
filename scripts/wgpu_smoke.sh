#!/usr/bin/env bash
# Proves "switch the backend with a cargo feature" and the wgpu half of mixed precision:
# builds sinklab with both GPU features, `wgpu` and `cuda` (next to the default `flex`; each with
# Burn's fusion and autotune), in the `smoke` profile (Cargo.toml: release at opt-level 0, same
# target directory), then
#   0. tests/cube_attention.rs: sinklab's tiled CubeCL attention kernels (src/kernels/cube/) on
#      the wgpu device against the explicit computation on flex, values and gradients of q, k, v
#      and the extra logit, on every variant they cover, at odd sizes and several block and tile
#      sizes (relative 2e-5 at f32, 3e-3 at f16; lavapipe has no tensor cores, so the products
#      take the shared-memory path); tests/cube_compile.rs: their tensor-core path, which no CI
#      machine can run, compiled for CUDA sm_90 to C++ and to PTX (through LLVM, with the
#      libdevice of scripts/fetch_libdevice.sh); tests/cube_kernels.rs: the cross-entropy and
#      AdamW kernels' CubeCL halves against the explicit computation;
# and with experiments/ci/wgpu_smoke.toml, from the same initial weights:
#   1. f32: 3 steps on wgpu (smoke binary; attention by the CubeCL kernel) and on flex (release
#      binary; the CPU kernel); the per-step training losses, the final validation loss and the
#      norm ratio agree (relative difference < 1e-3);
#   1b. the same at f32 with experiments/ci/wgpu_smoke_variants.toml (RoPE, a sink logit with
#      softmax_n, a sinks + window mask: the CubeCL attention kernel's variants inside a model);
#   2. f16 (train.precision = "f16": matrix products in f16, f32 master weights, dynamic loss
#      scaling): the same 3 steps on wgpu (attention by the CubeCL kernel with q, k, v stored
#      in f16) and on flex (the explicit attention: the CPU kernel is f32), compared the same
#      way with a relative tolerance of 1e-2 (two f16 backends round the same products in
#      different orders; the measured difference is printed);
#   3. `sinklab check --device wgpu` refuses train.precision = "bf16" and says why (WGSL has no
#      bf16).
#   bash scripts/wgpu_smoke.sh
# In CI the wgpu device is Mesa's software Vulkan driver (lavapipe: apt-get install
# mesa-vulkan-drivers libvulkan1), which has shader-f16. No GPU runs CUDA here: the `cuda`
# feature is built and linked (one CubeCL build serves both features;
# scripts/setup_cuda_build.sh provides the offline LLVM) so that it cannot silently stop
# building; it is run by scripts/gpu_checks.sh on a GPU (docs/backends.md).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
exp=experiments/ci/wgpu_smoke.toml
bash scripts/setup_cuda_build.sh
CARGO_TARGET_DIR="$target" cargo build --release --locked
CARGO_TARGET_DIR="$target" cargo build --profile smoke --locked --features wgpu,cuda
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
echo "wgpu smoke: the CubeCL attention kernels against the explicit path (tests/cube_attention.rs)"
CARGO_TARGET_DIR="$target" cargo test --profile smoke --locked --features wgpu,cuda --test cube_attention -- --nocapture
echo "wgpu smoke: the CubeCL cross-entropy and AdamW kernels against the explicit computation (tests/cube_kernels.rs)"
CARGO_TARGET_DIR="$target" cargo test --profile smoke --locked --features wgpu,cuda --test cube_kernels -- --nocapture
echo "wgpu smoke: the tensor-core attention kernels compiled for CUDA (tests/cube_compile.rs)"
CUDA_PATH="$(bash scripts/fetch_libdevice.sh)"
export CUDA_PATH
compiled="$(mktemp)"
CARGO_TARGET_DIR="$target" cargo test --profile smoke --locked --features wgpu,cuda --test cube_compile -- --nocapture --test-threads 1 | tee "$compiled"
if grep -q 'PTX NOT COMPILED' "$compiled"; then
  echo "wgpu smoke: FAILED: the tensor-core kernels were not compiled to PTX (no libdevice under CUDA_PATH=$CUDA_PATH)" >&2
  exit 1
fi
rm -f "$compiled"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

train() { # DEVICE PRECISION [EXPERIMENT NAME]
  local dev="$1" precision="$2" file="${3:-$exp}" name="${4:-$1-$2}" bin="$target/release/sinklab" start
  [ "$dev" = wgpu ] && bin="$target/smoke/sinklab"
  echo "wgpu smoke: training $file on $dev at $precision"
  start=$(date +%s)
  "$bin" train "$file" --device "$dev" --quiet --set "train.precision=\"$precision\"" \
    --set "run.out_dir=\"$tmp/runs\"" --set "run.name=\"$name\"" --set "data.cache_dir=\"$tmp/cache\""
  echo "wgpu smoke: $name took $(( $(date +%s) - start )) s"
}
for precision in f32 f16; do
  train flex "$precision"
  train wgpu "$precision"
done
python3 scripts/compare_runs.py "$tmp/runs/flex-f32/metrics.jsonl" "$tmp/runs/wgpu-f32/metrics.jsonl" \
  --names flex wgpu --label "wgpu smoke f32" --rtol 1e-3
# The kernel's variants inside a model: RoPE, sink logit with softmax_n, sinks + window.
variants=experiments/ci/wgpu_smoke_variants.toml
train flex f32 "$variants" flex-variants
train wgpu f32 "$variants" wgpu-variants
python3 scripts/compare_runs.py "$tmp/runs/flex-variants/metrics.jsonl" "$tmp/runs/wgpu-variants/metrics.jsonl" \
  --names flex wgpu --label "wgpu smoke f32, kernel variants" --rtol 1e-3
python3 scripts/compare_runs.py "$tmp/runs/flex-f16/metrics.jsonl" "$tmp/runs/wgpu-f16/metrics.jsonl" \
  --names flex-f16 wgpu-f16 --label "wgpu smoke f16" --rtol 1e-2

# bf16 on wgpu: refused before anything is built, with the reason.
if "$target/smoke/sinklab" check "$exp" --device wgpu --set 'train.precision="bf16"' >"$tmp/check.out" 2>&1; then
  echo "wgpu smoke: FAILED: sinklab check accepted train.precision = \"bf16\" on wgpu:" >&2
  cat "$tmp/check.out" >&2
  exit 1
fi
if ! grep -q 'WGSL' "$tmp/check.out" || ! grep -q 'bf16' "$tmp/check.out"; then
  echo "wgpu smoke: FAILED: sinklab check refused bf16 on wgpu without naming the reason (WGSL has no bf16):" >&2
  cat "$tmp/check.out" >&2
  exit 1
fi
echo "wgpu smoke: bf16 on wgpu refused by sinklab check: $(grep -m 1 'bf16' "$tmp/check.out")"
