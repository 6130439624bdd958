#!/usr/bin/env bash
# Builds what scripts/gpu_checks.sh runs on a GPU machine that has no cargo and no network and
# receives only a copy of the working tree plus a few carried files (docs/backends.md, "On a
# GPU machine without cargo"):
#
#   bash scripts/build_gpu_bundle.sh     # -> dist/gpu/ (git-ignored), tens of MiB
#
# then, on the GPU machine, from the repository root with dist/gpu carried along:
#   bash scripts/gpu_checks.sh           # results under $OUT
#
# dist/gpu/ holds:
#   sinklab.xz       the release binary with `--features cuda,wgpu` (flex is the default and
#                    stays in; Cargo.toml gives both GPU features Burn's fusion and autotune),
#                    stripped and xz-compressed
#   cuda/nvvm/libdevice/libdevice.10.bc
#                    CUDA's math library (exp, log, erf… on the GPU), only when one was found
#                    here (a local CUDA toolkit, or PyPI's nvidia-cuda-nvcc-cu12 wheel fetched
#                    once into ~/.cache/sinklab-wheels); gpu_checks.sh prefers the machine's own
#   BUILD            what was built: git revision, features, sizes, sha256
# The build uses its own target directory (SINKLAB_GPU_TARGET_DIR, default target/gpu) so that
# target/release/sinklab stays the default CPU build. scripts/setup_cuda_build.sh runs first
# (the offline LLVM for cuda). A cold build takes tens of minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
features="cuda,wgpu"
target="${SINKLAB_GPU_TARGET_DIR:-target/gpu}"
dist=dist/gpu

bash scripts/setup_cuda_build.sh
start=$(date +%s)
CARGO_TARGET_DIR="$target" cargo build --release --locked --features "$features"
built=$(( $(date +%s) - start ))

rm -rf "$dist"
mkdir -p "$dist"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
strip --strip-all -o "$tmp/sinklab" "$target/release/sinklab"
"$tmp/sinklab" --version >/dev/null
xz -T0 -6 -c "$tmp/sinklab" >"$dist/sinklab.xz"

# libdevice: a local toolkit's, else the pip wheel's (scripts/fetch_libdevice.sh).
libdevice=""
libdevice_from=""
if cuda_path="$(bash scripts/fetch_libdevice.sh)"; then
  libdevice="$cuda_path/nvvm/libdevice/libdevice.10.bc"
  libdevice_from="$cuda_path"
fi
if [ -n "$libdevice" ]; then
  mkdir -p "$dist/cuda/nvvm/libdevice"
  cp "$libdevice" "$dist/cuda/nvvm/libdevice/libdevice.10.bc"
else
  echo "build_gpu_bundle: no libdevice.10.bc (no CUDA toolkit here, and the pip download failed): the bundle relies on the GPU machine's toolkit" >&2
fi

size() { stat -c %s "$1"; }
{
  echo "git_revision: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty)')"
  echo "features: flex (default),$features; burn fusion + autotune (Cargo.toml)"
  echo "built: $(date -u +%FT%TZ) on $(nproc) cores in ${built} s (target dir $target)"
  echo "binary: $(size "$target/release/sinklab") bytes, stripped $(size "$tmp/sinklab"), xz $(size "$dist/sinklab.xz")"
  echo "binary_sha256: $(sha256sum "$tmp/sinklab" | cut -d' ' -f1)"
  echo "needed: $(readelf -d "$tmp/sinklab" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
  if [ -n "$libdevice" ]; then echo "libdevice: $(size "$dist/cuda/nvvm/libdevice/libdevice.10.bc") bytes from $libdevice_from"; fi
} >"$dist/BUILD"
cat "$dist/BUILD"
echo "build_gpu_bundle: $(du -sh "$dist" | cut -f1) in $dist; carry it to the GPU machine and run: bash scripts/gpu_checks.sh" >&2
