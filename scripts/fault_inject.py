#!/usr/bin/env python3
"""Fault injection: kill training at random moments, corrupt checkpoints, and check that the
finished run equals an uninterrupted one, in metrics.jsonl and in TensorBoard's own reader.

    python3 scripts/fault_inject.py [--kills 40] [--corrupt-every 7] [--seed 1] [--steps 300]

Trains experiments/quickstart.toml (shortened: --steps, checkpoints every 10 steps, probes every
25, evaluations every 50) once without faults, then again under faults: each attempt is
`sinklab train --resume`, killed with SIGKILL after a random 0.05–2.5 s (--max-wait; during steps, probes,
event and checkpoint writes alike), and every --corrupt-every kills one byte of a random file of
the newest checkpoint is flipped (sinklab must detect it by its SHA256SUMS and resume from the
newest good checkpoint). After --kills kills the run is resumed to the end. Then every (step, tag)
value of metrics.jsonl (except the wall-clock train/tokens_per_s) must equal the reference run's
exactly, and scripts/check_tensorboard.py
must find every such value once in the run's event files (EventAccumulator, float32).
Finally (where a tmpfs can be mounted, i.e. as root) the run is trained onto a 1.5 MB tmpfs: it
must stop with an error naming the file being written; after the tmpfs grows, --resume must
finish it with the same values.
Prints the counts; exit 0 when everything matches. SINKLAB names the binary (default
target/release/sinklab); SINKLAB_PYTHON the Python with tensorboard (default this one).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def metrics(run_dir):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            for tag, v in rec["scalars"].items():
                if tag == "train/tokens_per_s":
                    continue  # wall-clock speed, not a result
                key = (rec["step"], tag)
                if key in out:
                    raise SystemExit(f"{tag} at step {rec['step']} twice in {run_dir}/metrics.jsonl")
                out[key] = v
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=40)
    ap.add_argument("--corrupt-every", type=int, default=7)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--max-wait", type=float, default=2.5, help="longest run before a kill (s)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--no-disk-full", action="store_true", help="skip the full-disk phase")
    ap.add_argument("--exe", help="the sinklab binary (default: $SINKLAB, else target/release/sinklab)")
    args = ap.parse_args()
    exe = args.exe or os.environ.get(
        "SINKLAB", os.path.join(ROOT, os.environ.get("CARGO_TARGET_DIR", "target"), "release", "sinklab"))
    py = os.environ.get("SINKLAB_PYTHON", sys.executable)
    rng = random.Random(args.seed)
    tmp = tempfile.mkdtemp(prefix="sinklab-faults-")
    exp = os.path.join(ROOT, "experiments", "quickstart.toml")

    def cmd(name, resume, out=None):
        c = [exe, "train", exp, "--quiet",
             "--set", f'run.out_dir="{out or tmp + "/runs"}"', "--set", f'run.name="{name}"',
             "--set", f'data.cache_dir="{tmp}/cache"', "--set", f"train.steps={args.steps}",
             "--set", "train.checkpoint_every=10", "--set", "train.keep_checkpoints=3",
             "--set", "metrics.every=25", "--set", "train.eval_every=50"]
        return c + (["--resume"] if resume else [])

    t0 = time.time()
    subprocess.run(cmd("reference", False), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"reference run: {time.time() - t0:.1f} s")
    run = os.path.join(tmp, "runs", "faulty")
    kills = corruptions = finished_early = 0
    detected = 0
    log = open(os.path.join(tmp, "faulty.log"), "w")
    while kills < args.kills:
        if kills and kills % args.corrupt_every == 0 and os.path.isdir(os.path.join(run, "checkpoints")):
            steps = sorted(d for d in os.listdir(os.path.join(run, "checkpoints")) if d.startswith("step_"))
            if steps:
                d = os.path.join(run, "checkpoints", steps[-1])
                name = rng.choice(["model.safetensors", "optim.safetensors"])
                p = os.path.join(d, name)
                if os.path.exists(p):
                    b = bytearray(open(p, "rb").read())
                    i = rng.randrange(len(b))
                    b[i] ^= 1 << rng.randrange(8)
                    open(p, "wb").write(bytes(b))
                    corruptions += 1
        proc = subprocess.Popen(cmd("faulty", True), stdout=log, stderr=log)
        try:
            proc.wait(timeout=rng.uniform(0.05, args.max_wait))
            finished_early += 1  # the run ended before the kill: start it again (a no-op if done)
            if proc.returncode != 0:
                raise SystemExit(f"attempt failed with {proc.returncode}; see {tmp}/faulty.log")
            if os.path.exists(os.path.join(run, "summary.json")):
                break
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
    log.close()
    final = subprocess.run(cmd("faulty", True), capture_output=True, text=True)
    if final.returncode != 0:
        print(final.stderr)
        return 1
    detected = open(os.path.join(tmp, "faulty.log")).read().count("cannot be used")
    want, got = metrics(os.path.join(tmp, "runs", "reference")), metrics(run)
    bad = [k for k in want if got.get(k) != want[k]] + [k for k in got if k not in want]
    print(f"faulty run: {kills} SIGKILLs, {corruptions} corrupted checkpoints ({detected} detected on "
          f"resume), {finished_early} attempts that ended by themselves; {time.time() - t0:.1f} s in all")
    if bad:
        print(f"metrics.jsonl: {len(bad)} of {len(want)} values differ, e.g. {bad[:5]}")
        return 1
    print(f"metrics.jsonl: all {len(want)} (step, tag) values equal the uninterrupted run's")

    def check_tb(run_dir, values):
        scalars = {}
        for (step, tag), v in sorted(values.items()):
            scalars.setdefault(tag, []).append([step, v])
        exp_path = os.path.join(tmp, "expected.json")
        json.dump({"scalars": scalars, "rel_tol": 1e-6}, open(exp_path, "w"))
        tb = subprocess.run([py, os.path.join(ROOT, "scripts", "check_tensorboard.py"), run_dir, exp_path],
                            capture_output=True, text=True)
        print("TensorBoard:", (tb.stdout.strip().splitlines() or [""])[-1])
        if tb.returncode != 0:
            print(tb.stdout[-3000:], tb.stderr[-2000:])
        return tb.returncode == 0
    ok = check_tb(run, want)
    if ok and not args.no_disk_full:
        ok = disk_full(tmp, cmd, want, check_tb)
    if ok and not args.keep:
        import shutil
        shutil.rmtree(tmp)
    return 0 if ok else 1


def disk_full(tmp, cmd, want, check_tb):
    """Train onto a 1.5 MB tmpfs until the disk is full: the error must name the file being
    written; after the disk grows, --resume must finish the run exactly."""
    mnt = os.path.join(tmp, "small_disk")
    os.makedirs(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1500k", "tmpfs", mnt],
                      capture_output=True).returncode != 0:
        print("disk full: skipped (cannot mount a tmpfs here)")
        return True
    try:
        first = subprocess.run(cmd("full", True, out=mnt), capture_output=True, text=True)
        msg = (first.stderr.strip().splitlines() or [""])[-1]
        if first.returncode == 0 or mnt not in msg or "No space left" not in msg:
            print(f"disk full: expected a failure naming a file under {mnt}; got rc {first.returncode}: {msg}")
            return False
        print(f"disk full: {msg}")
        subprocess.run(["mount", "-o", "remount,size=64m", mnt], check=True)
        second = subprocess.run(cmd("full", True, out=mnt), capture_output=True, text=True)
        if second.returncode != 0:
            print("disk full: the resume after freeing space failed:", second.stderr[-2000:])
            return False
        run = os.path.join(mnt, "full")
        got = metrics(run)
        bad = [k for k in want if got.get(k) != want[k]] + [k for k in got if k not in want]
        if bad:
            print(f"disk full: {len(bad)} values differ after the resume, e.g. {bad[:5]}")
            return False
        print(f"disk full: resumed after freeing space; all {len(want)} values equal the uninterrupted run's")
        return check_tb(run, want)
    finally:
        subprocess.run(["umount", mnt], capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
