#!/usr/bin/env bash
# CUDA's math library for GPU code, libdevice.10.bc (exp, log, erf… as NVVM bitcode; 0.5 MB),
# without a CUDA toolkit: taken from PyPI's nvidia-cuda-nvcc-cu12 wheel (40 MB, downloaded once
# into ~/.cache/sinklab-wheels) and laid out as a CUDA_PATH (~/.cache/sinklab-cuda by default):
#
#   export CUDA_PATH="$(bash scripts/fetch_libdevice.sh)"
#
# Used by the wgpu smoke test (tests/cube_compile.rs compiles the tensor-core attention kernels
# to PTX through LLVM, which links libdevice) and by scripts/build_gpu_bundle.sh (the bundle
# ships it for GPU machines without a toolkit). A local toolkit's copy (CUDA_PATH,
# /usr/local/cuda) is used when there is one. Prints the CUDA_PATH on stdout; fails, saying why,
# when neither a toolkit nor the wheel can be had.
set -euo pipefail
for root in "${CUDA_PATH:-}" /usr/local/cuda /opt/cuda /usr/lib/cuda; do
  if [ -n "$root" ] && [ -f "$root/nvvm/libdevice/libdevice.10.bc" ]; then
    echo "$root"
    exit 0
  fi
done
out="${SINKLAB_CUDA_DIR:-$HOME/.cache/sinklab-cuda}"
if [ -f "$out/nvvm/libdevice/libdevice.10.bc" ]; then
  echo "$out"
  exit 0
fi
wheels="$HOME/.cache/sinklab-wheels"
wheel="$(ls "$wheels"/nvidia_cuda_nvcc_cu12-*.whl 2>/dev/null | head -n 1 || true)"
if [ -z "$wheel" ]; then
  py="${SINKLAB_PYTHON:-$(command -v python3 || true)}"
  [ -n "$py" ] || { echo "fetch_libdevice: no python3 to download the nvidia-cuda-nvcc-cu12 wheel with" >&2; exit 1; }
  mkdir -p "$wheels"
  "$py" -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    -d "$wheels" nvidia-cuda-nvcc-cu12 >&2 ||
    { echo "fetch_libdevice: pip could not download nvidia-cuda-nvcc-cu12 from PyPI" >&2; exit 1; }
  wheel="$(ls "$wheels"/nvidia_cuda_nvcc_cu12-*.whl | head -n 1)"
fi
mkdir -p "$out/nvvm/libdevice"
python3 - "$wheel" "$out/nvvm/libdevice/libdevice.10.bc" <<'PY'
import os, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
name = next(n for n in z.namelist() if n.endswith("nvvm/libdevice/libdevice.10.bc"))
tmp = sys.argv[2] + ".tmp"
open(tmp, "wb").write(z.read(name))
os.replace(tmp, sys.argv[2])
PY
echo "fetch_libdevice: $out/nvvm/libdevice/libdevice.10.bc from $(basename "$wheel")" >&2
echo "$out"
