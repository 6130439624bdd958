#!/usr/bin/env bash
# Proves "switch the backend with a cargo feature": builds sinklab with both GPU features,
# `wgpu` and `cuda` (next to the default `flex`; each with Burn's fusion and autotune), in the
# `smoke` profile (Cargo.toml: release at opt-level 0, same target directory), trains
# experiments/ci/wgpu_smoke.toml for 3 steps on wgpu with that binary and on flex with the
# release binary from the same initial weights, and checks that the per-step training losses and
# the final validation loss agree (relative difference < 1e-3; scripts/compare_runs.py).
#   bash scripts/wgpu_smoke.sh
# In CI the wgpu device is Mesa's software Vulkan driver (lavapipe: apt-get install
# mesa-vulkan-drivers libvulkan1). No GPU runs CUDA here: the `cuda` feature is built and linked
# (one CubeCL build serves both features; scripts/setup_cuda_build.sh provides the offline LLVM)
# so that it cannot silently stop building; it is run by scripts/gpu_checks.sh on a GPU.
# With Burn's fusion and autotune the wgpu run costs about 7× the CPU time it cost without
# them on lavapipe (first step: kernel compilation and autotune); CUBECL_AUTOTUNE_LEVEL=minimal
# did not shorten it measurably, so the run uses CubeCL's defaults (docs/backends.md §1).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
bash scripts/setup_cuda_build.sh
CARGO_TARGET_DIR="$target" cargo build --release --locked
CARGO_TARGET_DIR="$target" cargo build --profile smoke --locked --features wgpu,cuda
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for dev in flex wgpu; do
  echo "wgpu smoke: training on $dev"
  start=$(date +%s)
  bin="$target/release/sinklab"
  [ "$dev" = wgpu ] && bin="$target/smoke/sinklab"
  "$bin" train experiments/ci/wgpu_smoke.toml --device "$dev" --quiet \
    --set "run.out_dir=\"$tmp/runs\"" --set "run.name=\"$dev\"" --set "data.cache_dir=\"$tmp/cache\""
  echo "wgpu smoke: $dev took $(( $(date +%s) - start )) s"
done
python3 scripts/compare_runs.py "$tmp/runs/flex/metrics.jsonl" "$tmp/runs/wgpu/metrics.jsonl" \
  --names flex wgpu --label "wgpu smoke" --rtol 1e-3
