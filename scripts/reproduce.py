#!/usr/bin/env python3
"""Re-run a results folder's commands and rewrite its files and its record.

    python3 scripts/reproduce.py experiments/results/quickstart [--fresh] [--sinklab PATH]

A results folder's `produced.json` says how its files were made. Its recipe part, written by
hand for a new folder:

    commands   the command lines, run in order from the repository root with bash; `sinklab`
               is the release binary (built here with `cargo build --release --locked`, the
               default features, unless --sinklab names one)
    runs       run directories the commands create (their resolved.toml is recorded)
    sweeps     sweep directories the commands create (every run of sweep.json is recorded)
    inputs     run directories the commands read but do not create (recorded, not removed)
    scratch    other directories the commands create (outputs to copy from; not recorded)
    copy       [source, destination] pairs, relative to the repository root: what the
               commands wrote that is shipped (a source may be a glob; a destination ending in
               `/` is a directory)
    notes      free text, kept

and the part this script writes (every field replaced on each run):

    produced   date, wall time and load of each command, the sinklab revision (dirty flag,
               build revision, features), the CPU (model, vector width, cores), the kernel
               environment variables as set, and `resolved`: for every run, its resolved.toml
               copied to `resolved/RUN.toml` with where it came from (experiment file and
               `--set` overrides, or sweep file and run name, or the imported file) and its
               kernel line. `tests/suite/results_provenance.rs` checks that each of those
               resolves today to the same configuration.
    files      every file this script wrote (removed before the next run rewrites them)

The run, sweep and scratch directories must not exist when it starts (a sweep would skip
finished runs and report the old ones): --fresh removes them first. `--into ROOT` writes the folder's files
into another checkout (the commands still run here, where the revision is recorded): for
running from a clean worktree while the one holding the folder is being edited.
"""

import argparse
import glob
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = ("notes", "commands", "runs", "sweeps", "inputs", "scratch", "copy")


def git(*args):
    out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def cpu():
    model, flags = "unknown", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k.strip() == "model name" and model == "unknown":
                model = v.strip()
            if k.strip() == "flags" and not flags:
                flags = set(v.split())
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if {"avx2", "fma"} <= flags else "scalar"
    return {"model": model, "vector": vector, "cores": os.cpu_count()}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build(binary_dir):
    """`cargo build --release --locked` here, then a private copy of the binary (the target
    directory may be shared with other checkouts, whose builds replace release/sinklab)."""
    subprocess.run(["cargo", "build", "--release", "--locked"], cwd=REPO, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    exe = os.path.join(binary_dir, "sinklab")
    shutil.copy2(os.path.join(target, "release", "sinklab"), exe)
    return exe


def train_source(argv):
    """The experiment file and the overrides of a `sinklab train` command line."""
    args = argv[argv.index("train") + 1 :]
    exp, sets, i = None, [], 0
    while i < len(args):
        a = args[i]
        if a == "--set":
            sets.append(args[i + 1])
            i += 2
            continue
        if a.startswith("--set="):
            sets.append(a[len("--set=") :])
        elif a == "--device":
            sets.append(f'run.device="{args[i + 1]}"')
            i += 2
            continue
        elif a == "--stop-after":
            i += 2
            continue
        elif not a.startswith("-") and exp is None:
            exp = a
        i += 1
    return exp, sets


def describe_run(run_dir, folder_dir, sweep=None):
    """Copy a run's resolved.toml into the folder; where it came from, from its provenance."""
    name = os.path.basename(os.path.normpath(run_dir))
    with open(os.path.join(REPO, run_dir, "provenance.json")) as f:
        prov = json.load(f)
    dst = os.path.join("resolved", name + ".toml")
    os.makedirs(os.path.join(folder_dir, "resolved"), exist_ok=True)
    shutil.copyfile(os.path.join(REPO, run_dir, "resolved.toml"), os.path.join(folder_dir, dst))
    entry = {"run": name, "file": dst}
    argv = prov.get("argv", [])
    if sweep is not None:
        entry.update(sweep=sweep)
    elif "imported_from" in prov:
        src = prov["imported_from"]
        entry.update(imported=src.get("path"), argv=argv[1:])
    elif "train" in argv:
        exp, sets = train_source(argv)
        entry.update(experiment=os.path.relpath(os.path.join(prov["cwd"], exp), REPO), set=sets)
    else:
        entry.update(argv=argv[1:])
    entry["kernels"] = prov.get("kernels")
    if prov.get("kernel_env"):
        entry["kernel_env"] = prov["kernel_env"]
    return entry, prov


def dumps(value, indent=0):
    """JSON with lists of scalars on one line (a record read by people as well as tests)."""
    pad = "  " * indent
    if isinstance(value, dict) and value:
        items = [f'{pad}  {json.dumps(k)}: {dumps(v, indent + 1)}' for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        if all(isinstance(v, list) and not any(isinstance(x, (dict, list)) for x in v) for v in value):
            items = [pad + "  " + json.dumps(v, ensure_ascii=False) for v in value]
        else:
            items = [pad + "  " + dumps(v, indent + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    if isinstance(value, list) and len(json.dumps(value, ensure_ascii=False)) > 90:
        items = [pad + "  " + json.dumps(v, ensure_ascii=False) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="e.g. experiments/results/quickstart")
    ap.add_argument("--sinklab", help="the binary to run (default: build it here)")
    ap.add_argument("--built-by", help="with --sinklab: the command that built it, as recorded")
    ap.add_argument("--fresh", action="store_true", help="remove the run, sweep and scratch directories first")
    ap.add_argument("--into", default=REPO, help="the checkout whose folder is read and rewritten")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    ap.add_argument("--reformat", action="store_true", help="only rewrite the record's layout")
    a = ap.parse_args()

    folder_dir = os.path.join(os.path.abspath(a.into), a.folder)
    record_path = os.path.join(folder_dir, "produced.json")
    with open(record_path) as f:
        old = json.load(f)
    recipe = {k: old[k] for k in RECIPE if k in old}
    creates = recipe.get("runs", []) + recipe.get("sweeps", []) + recipe.get("scratch", [])
    if a.reformat:
        with open(record_path, "w") as f:
            f.write(dumps(old) + "\n")
        return
    if a.dry_run:
        print("\n".join(recipe["commands"]))
        return
    present = [d for d in creates if os.path.exists(os.path.join(REPO, d))]
    if present and not a.fresh:
        sys.exit(f"already present (a sweep would skip its finished runs): {', '.join(present)}; "
                 "move them away or pass --fresh to remove them")
    for d in present:
        shutil.rmtree(os.path.join(REPO, d))
    for d in recipe.get("scratch", []):
        os.makedirs(os.path.join(REPO, d))
    missing = [d for d in recipe.get("inputs", []) if not os.path.exists(os.path.join(REPO, d))]
    if missing:
        sys.exit(f"inputs missing: {', '.join(missing)} (see the notes of {record_path})")

    revision, dirty = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    bindir = tempfile.mkdtemp(prefix="sinklab-reproduce-")
    if a.sinklab:
        exe = os.path.join(bindir, "sinklab")
        shutil.copy2(a.sinklab, exe)
        built_with = a.built_by or f"given: {a.sinklab}"
    else:
        exe = build(bindir)
        built_with = "cargo build --release --locked"
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"])

    commands, started = [], time.time()
    log_path = os.path.join(tempfile.gettempdir(), f"reproduce-{os.path.basename(a.folder)}.log")
    with open(log_path, "w") as log:
        for cmd in recipe["commands"]:
            load = os.getloadavg()[0]
            t0 = time.time()
            print(f"$ {cmd}", flush=True)
            log.write(f"$ {cmd}\n")
            log.flush()
            p = subprocess.run(["bash", "-c", "set -eo pipefail; " + cmd], cwd=REPO, env=env,
                               stdout=log, stderr=subprocess.STDOUT)
            wall = time.time() - t0
            if p.returncode != 0:
                sys.exit(f"failed (exit {p.returncode}) after {wall:.0f} s: {cmd}; log: {log_path}")
            commands.append({"cmd": cmd, "wall_s": round(wall, 1),
                             "load_1min_before": round(load, 2),
                             "load_1min_after": round(os.getloadavg()[0], 2)})
            print(f"  {wall:.1f} s", flush=True)

    # What the last run wrote is removed before this one's files are copied in.
    for f in old.get("files", []):
        path = os.path.join(os.path.abspath(a.into), f)
        if os.path.isfile(path):
            os.remove(path)
    shutil.rmtree(os.path.join(folder_dir, "resolved"), ignore_errors=True)
    files = []
    for src, dst in recipe.get("copy", []):
        srcs = sorted(glob.glob(os.path.join(REPO, src)))
        if not srcs:
            sys.exit(f"nothing matches {src}")
        for s in srcs:
            target = os.path.join(dst, os.path.basename(s)) if dst.endswith("/") else dst
            full = os.path.join(os.path.abspath(a.into), target)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            if os.path.isdir(s):
                shutil.rmtree(full, ignore_errors=True)
                shutil.copytree(s, full)
                files += [os.path.relpath(os.path.join(r, n), os.path.abspath(a.into))
                          for r, _, ns in os.walk(full) for n in ns]
            else:
                shutil.copyfile(s, full)
                files.append(os.path.normpath(target))

    resolved, provs = [], []
    for d in recipe.get("inputs", []) + recipe.get("runs", []):
        entry, prov = describe_run(d, folder_dir)
        resolved.append(entry)
        provs.append(prov)
    for d in recipe.get("sweeps", []):
        with open(os.path.join(REPO, d, "sweep.json")) as f:
            plan = json.load(f)
        sweep_file = os.path.relpath(os.path.join(REPO, plan["file"]), REPO)
        for r in plan["runs"]:
            entry, prov = describe_run(os.path.join(d, r["name"]), folder_dir, sweep=sweep_file)
            resolved.append(entry)
            provs.append(prov)
    files += [os.path.relpath(os.path.join(folder_dir, e["file"]), os.path.abspath(a.into)) for e in resolved]

    created = [p for p in provs if p.get("git_revision") == revision]
    builds = sorted({p.get("build_git_revision") for p in created})
    record = dict(recipe)
    record["produced"] = {
        "date": time.strftime("%Y-%m-%d", time.localtime(started)),
        "sinklab": {
            "git_revision": revision,
            "git_dirty": bool(dirty),
            "build": built_with,
            "build_git_revision": builds[0] if len(builds) == 1 else builds,
            "features": created[0].get("features") if created else None,
            "binary_sha256": sha256(exe),
        },
        "cpu": cpu(),
        "kernel_env": {k: os.environ[k] for k in ("SINKLAB_KERNELS", "SINKLAB_GEMM") if k in os.environ},
        "commands": commands,
        "wall_s": round(time.time() - started, 1),
        "resolved": resolved,
    }
    record["files"] = sorted(set(files))
    with open(record_path, "w") as f:
        f.write(dumps(record) + "\n")
    shutil.rmtree(bindir, ignore_errors=True)
    print(f"wrote {record_path} ({len(record['files'])} files); log: {log_path}")


if __name__ == "__main__":
    main()
