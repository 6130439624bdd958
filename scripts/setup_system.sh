#!/usr/bin/env bash
# The system packages the test suite needs, installed when missing (scripts/test.sh runs this
# first, before any build time is spent):
#   python3-venv                    the virtualenv of the Python readers (scripts/setup_python.sh)
#   slurm-wlm munge                 the one-node SLURM cluster of tests/suite/slurm.rs
#   mesa-vulkan-drivers libvulkan1  Mesa's software Vulkan (lavapipe) for the wgpu smoke test
#                                   (not needed with --quick)
#   rustfmt (rustup component)      `cargo fmt --check`
# As root, or with passwordless sudo, it installs them with apt-get; otherwise it prints one line
# saying exactly what to run and why, and exits 1.
#   bash scripts/setup_system.sh [--quick]
set -euo pipefail
pkgs=(python3-venv slurm-wlm munge)
[ "${1:-}" = "--quick" ] || pkgs+=(mesa-vulkan-drivers libvulkan1)

if command -v rustup >/dev/null 2>&1 && ! rustup component list --installed 2>/dev/null | grep -q '^rustfmt'; then
  rustup component add rustfmt >&2
fi

if ! command -v dpkg >/dev/null 2>&1; then
  echo "setup_system: not a Debian/Ubuntu machine (no dpkg): install the equivalents of ${pkgs[*]} (Python venv, SLURM + munge, Mesa lavapipe Vulkan) by hand, then run again" >&2
  exit 1
fi
need=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
[ "${#need[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "setup_system: the test suite needs the Debian packages ${need[*]} (venv for the Python readers, a one-node SLURM cluster, software Vulkan for the wgpu smoke test); run: sudo apt-get install -y ${need[*]}   then run this command again" >&2
  exit 1
fi
echo "setup_system: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
