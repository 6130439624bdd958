#!/usr/bin/env bash
# Create (or update) the Python virtualenv the test suite uses to read sinklab's files with the
# real tools: tensorboard, tokenizers, safetensors, numpy (pinned in scripts/requirements.txt).
#   bash scripts/setup_python.sh            # → ~/.cache/sinklab-venv
#   export SINKLAB_PYTHON=~/.cache/sinklab-venv/bin/python
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${SINKLAB_VENV:-$HOME/.cache/sinklab-venv}"
req="$here/requirements.txt"
stamp="$venv/.sinklab-requirements"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" 2>/dev/null || {
    # Debian's python3 may lack ensurepip: install python3-venv first.
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
      python3 -m venv "$venv"
    else
      echo "setup_python: cannot create a virtualenv (install python3-venv)" >&2; exit 1
    fi
  }
fi
if ! cmp -s "$req" "$stamp"; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  cp "$req" "$stamp"
fi
echo "python env ready: $venv/bin/python"
