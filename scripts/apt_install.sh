#!/usr/bin/env bash
# Installs the Debian packages not yet installed, shared by setup_system.sh and
# setup_cuda_build.sh: as root or with passwordless sudo it runs apt-get; otherwise it prints one
# line saying what to run and why, and exits 1.
#   bash scripts/apt_install.sh WHO "WHY" PACKAGE...
set -euo pipefail
who=$1 why=$2
shift 2
need=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
[ "${#need[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "$who: $why needs the Debian packages ${need[*]}; run: sudo apt-get install -y --no-install-recommends ${need[*]}   then run this command again" >&2
  exit 1
fi
echo "$who: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
