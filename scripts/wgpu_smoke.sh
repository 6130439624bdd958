#!/usr/bin/env bash
# Proves "switch the backend with a cargo feature": builds sinklab with the `wgpu` feature (next
# to the default `flex`) in the `smoke` profile (Cargo.toml: release at opt-level 0, same target
# directory), trains experiments/ci/wgpu_smoke.toml for 3 steps on wgpu with that binary and on
# flex with the release binary from the same initial weights, and checks that the per-step
# training losses and the final validation loss agree (relative difference < 1e-3). In CI the
# wgpu device is Mesa's software Vulkan driver (lavapipe: apt-get install mesa-vulkan-drivers
# libvulkan1).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
CARGO_TARGET_DIR="$target" cargo build --release --locked
CARGO_TARGET_DIR="$target" cargo build --profile smoke --locked --features wgpu
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
python3 - "$tmp/runs/flex/metrics.jsonl" "$tmp/runs/wgpu/metrics.jsonl" <<'PY'
import json, sys
def series(path, tag):
    out = []
    for line in open(path):
        rec = json.loads(line)
        if tag in rec["scalars"]:
            out.append((rec["step"], rec["scalars"][tag]))
    return out
failed = 0
for tag in ["train/loss", "val/loss", "act/norm_ratio/layer01"]:
    a, b = series(sys.argv[1], tag), series(sys.argv[2], tag)
    ok = len(a) == len(b) > 0 and all(sa == sb and abs(va - vb) <= 1e-3 * max(1.0, abs(va)) for (sa, va), (sb, vb) in zip(a, b))
    print(f"  {tag}: flex {[round(v, 6) for _, v in a]} wgpu {[round(v, 6) for _, v in b]} -> {'ok' if ok else 'MISMATCH'}")
    failed += not ok
print(f"wgpu smoke: {3 - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
