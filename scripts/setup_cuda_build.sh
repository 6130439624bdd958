#!/usr/bin/env bash
# Prepares a Debian/Ubuntu machine to build sinklab's `cuda` cargo feature with no network
# access beyond the Debian mirror (docs/backends.md, "Building cuda offline"):
#
#   bash scripts/setup_cuda_build.sh             # idempotent; then:
#   cargo build --release --features cuda        # CUDARC_CUDA_VERSION=13000 comes from .cargo/config.toml
#   bash scripts/setup_cuda_build.sh --packages  # only print the Debian packages it needs
#
# Why: cubecl-cuda compiles kernels with LLVM (cubecl-llvm → NVPTX), and cubecl-llvm's build
# dependency tracel-llvm-bundler downloads an LLVM bundle from GitHub unless its sentinel
# `$XDG_DATA_HOME/tracel/tracel-llvm-<version>/.tracel-llvm-installed` exists
# (XDG_DATA_HOME defaults to ~/.local/share); it then runs `<that dir>/bin/llvm-config
# --link-static …` and links LLVM statically. This script puts Debian's LLVM 22 there instead:
#   1. installs llvm-22-dev libzstd-dev zlib1g-dev with apt-get when missing (as root or with
#      passwordless sudo; otherwise it prints one line saying what to run and exits 1);
#   2. creates that directory (the version is read from Cargo.lock), the empty sentinel, and
#      `bin/llvm-config`, a wrapper around /usr/lib/llvm-22/bin/llvm-config that rewrites
#      absolute `/…/libNAME.so` entries to `-lNAME` (the bundler would turn them into
#      `-l libNAME`) and drops `-lPolly -lPollyISL` (Debian ships Polly in libpolly-22-dev).
# A directory that holds a real downloaded bundle (a sentinel without this script's wrapper) is
# left alone. The result links LLVM statically: the binary needs no LLVM at run time.
set -euo pipefail
cd "$(dirname "$0")/.."

LLVM_DIR=/usr/lib/llvm-22
PKGS=(llvm-22-dev libzstd-dev zlib1g-dev)
MARK="sinklab scripts/setup_cuda_build.sh wrapper"

if [ "${1:-}" = "--packages" ]; then
  echo "${PKGS[*]}"
  exit 0
fi

# 1. Debian packages.
if ! command -v dpkg >/dev/null 2>&1; then
  echo "setup_cuda_build: not a Debian/Ubuntu machine (no dpkg): install LLVM 22 with the NVPTX target and its static libraries, point $LLVM_DIR at it, then run again" >&2
  exit 1
fi
bash "$(dirname "$0")/apt_install.sh" setup_cuda_build "building the cuda feature (LLVM 22 with NVPTX stands in for the LLVM bundle cubecl would download)" "${PKGS[@]}"
real="$LLVM_DIR/bin/llvm-config"
if ! "$real" --targets-built | grep -qw NVPTX; then
  echo "setup_cuda_build: $real lacks the NVPTX target (targets: $("$real" --targets-built))" >&2
  exit 1
fi

# 2. The bundler's directory, named after its version in Cargo.lock (its constants
# TRACEL_LLVM_VERSION-TRACEL_LLVM_RELEASE_NUMBER equal the crate version, e.g. 23.1.0-4).
version="$(awk '$0 == "name = \"tracel-llvm-bundler\"" { getline; gsub(/^version = "|"$/, ""); print; exit }' Cargo.lock)"
if [ -z "$version" ]; then
  echo "setup_cuda_build: Cargo.lock names no tracel-llvm-bundler: has the cuda dependency chain changed? (docs/backends.md)" >&2
  exit 1
fi
dir="${XDG_DATA_HOME:-$HOME/.local/share}/tracel/tracel-llvm-$version"
if [ -e "$dir/.tracel-llvm-installed" ] && ! grep -qs "$MARK" "$dir/bin/llvm-config"; then
  echo "setup_cuda_build: $dir holds a downloaded LLVM bundle; leaving it as it is" >&2
  exit 0
fi
mkdir -p "$dir/bin"
wrapper="$(mktemp)"
cat >"$wrapper" <<EOF
#!/bin/sh
# $MARK: Debian's LLVM 22 standing in for tracel-llvm $version.
# Passes every query to $real; in the library lists it rewrites absolute
# /…/libNAME.so[.N] entries to -lNAME and drops -lPolly -lPollyISL.
out="\$($real "\$@")" || exit \$?
case " \$* " in
  *" --system-libs "* | *" --libs "*) ;;
  *) printf '%s\n' "\$out"; exit 0 ;;
esac
res=""
for tok in \$out; do
  case "\$tok" in
    -lPolly | -lPollyISL) continue ;;
    /*/lib*.so | /*/lib*.so.*) tok="\${tok##*/lib}"; tok="-l\${tok%%.so*}" ;;
  esac
  res="\${res:+\$res }\$tok"
done
printf '%s\n' "\$res"
EOF
if ! cmp -s "$wrapper" "$dir/bin/llvm-config"; then
  install -m 0755 "$wrapper" "$dir/bin/llvm-config"
fi
rm -f "$wrapper"
# Created once, never touched again: the bundler's build script declares
# `rerun-if-changed=<sentinel>`, so a newer mtime would rebuild cubecl-llvm and every crate above
# it (the whole CubeCL stack) on the next cargo build.
[ -e "$dir/.tracel-llvm-installed" ] || : >"$dir/.tracel-llvm-installed"
echo "setup_cuda_build: ready: $dir -> $("$real" --version) ($real); build with: cargo build --release --features cuda" >&2
