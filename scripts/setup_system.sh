#!/usr/bin/env bash
# The system packages the test suite needs, installed when missing (scripts/test.sh runs this
# first, before any build time is spent):
#   python3-venv                    the virtualenv of the Python readers (scripts/setup_python.sh)
#   slurm-wlm munge                 the one-node SLURM cluster of tests/suite/slurm.rs
#   openmpi-bin libopenmpi-dev libclang-dev
#                                   OpenMPI (mpirun, libmpi and its headers) and libclang, for
#                                   the `mpi` feature's build (the mpi crate's bindgen) and the
#                                   2-rank tests of tests/suite/mpi.rs (docs/distributed.md)
#   mesa-vulkan-drivers libvulkan1  Mesa's software Vulkan (lavapipe) for the wgpu smoke test
#                                   (not needed with --quick)
#   llvm-22-dev libzstd-dev zlib1g-dev
#                                   the offline LLVM with which the smoke test also builds the
#                                   `cuda` feature (not needed with --quick); then
#                                   scripts/setup_cuda_build.sh writes the tracel-llvm sentinel
#   rustfmt (rustup component)      `cargo fmt --check`
# As root, or with passwordless sudo, it installs them with apt-get; otherwise it prints one line
# saying exactly what to run and why, and exits 1.
#   bash scripts/setup_system.sh [--quick]
set -euo pipefail
pkgs=(python3-venv slurm-wlm munge openmpi-bin libopenmpi-dev libclang-dev)
quick=0
[ "${1:-}" = "--quick" ] && quick=1
if [ "$quick" = 0 ]; then
  pkgs+=(mesa-vulkan-drivers libvulkan1)
  read -r -a cuda_pkgs <<<"$(bash "$(dirname "$0")/setup_cuda_build.sh" --packages)"
  pkgs+=("${cuda_pkgs[@]}")
fi

if command -v rustup >/dev/null 2>&1 && ! rustup component list --installed 2>/dev/null | grep -q '^rustfmt'; then
  rustup component add rustfmt >&2
fi

if ! command -v dpkg >/dev/null 2>&1; then
  echo "setup_system: not a Debian/Ubuntu machine (no dpkg): install the equivalents of ${pkgs[*]} (Python venv, SLURM + munge, OpenMPI with headers, libclang, Mesa lavapipe Vulkan) by hand, then run again" >&2
  exit 1
fi
bash "$(dirname "$0")/apt_install.sh" setup_system "the test suite (venv for the Python readers, a one-node SLURM cluster, OpenMPI and libclang for the MPI tests, software Vulkan and LLVM 22 for the GPU smoke build)" "${pkgs[@]}"
# The tracel-llvm sentinel and llvm-config wrapper for the cuda build (packages installed above).
[ "$quick" = 1 ] || bash "$(dirname "$0")/setup_cuda_build.sh"
