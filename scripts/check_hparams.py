#!/usr/bin/env python3
"""Check a sweep's HParams data and its runs' Custom Scalars layout with the real TensorBoard server.

Starts `tensorboard --logdir SWEEP_DIR` on a free local port, asks the HParams plugin for the
experiment and for every session group over HTTP (the requests the HPARAMS tab makes), and
checks, against the sweep's own files:
  * every hyper-parameter of `sweep.json` (each axis path, and `seed`) is listed;
  * every finished run (status/RUN.json says "done") is listed as a session with its axis values
    and seed, and each metric the experiment names equals the last value of that tag in the
    run's metrics.jsonl (within float32 rounding).
It also fetches the Custom Scalars layout (the GET the CUSTOM SCALARS tab makes) and checks that
the "Sink₁ at every ε" chart exists and its regular expression matches one Sink₁ tag per ε
recorded in a run's metrics.jsonl.
Prints one line per run and exits 0 when all match, 1 on a mismatch, 2 when TensorBoard is
missing or does not answer.

    python3 scripts/check_hparams.py runs/sweeps/bb_normaliser [--load-fast false|true]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, route: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/data/plugin/hparams/{route}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-XSRF-Protected": "1"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def last_values(metrics_jsonl: str) -> dict:
    last = {}
    with open(metrics_jsonl) as f:
        for line in f:
            last.update(json.loads(line)["scalars"])
    return last


def toml_value(text: str):
    """An axis value as sweep.json writes it (TOML), as the HParams plugin shows it."""
    try:
        import tomllib

        return tomllib.loads(f"v = {text}")["v"]
    except Exception:  # noqa: BLE001
        return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep_dir")
    ap.add_argument("--load-fast", default="false", help="TensorBoard's --load_fast (default false)")
    args = ap.parse_args()
    plan = json.load(open(os.path.join(args.sweep_dir, "sweep.json")))
    port = free_port()
    tb = [sys.executable, "-m", "tensorboard.main", "--logdir", args.sweep_dir, "--port", str(port),
          "--host", "127.0.0.1", f"--load_fast={args.load_fast}", "--reload_interval", "1"]
    proc = subprocess.Popen(tb, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        exp = None
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                exp = post(port, "experiment", {"experimentName": ""})
                if exp.get("hparamInfos"):
                    break
            except Exception:  # noqa: BLE001  (server still starting)
                pass
            if proc.poll() is not None:
                print("check_hparams.py: tensorboard exited:\n" + proc.stderr.read(), file=sys.stderr)
                return 2
            time.sleep(1)
        if not exp or not exp.get("hparamInfos"):
            print(f"check_hparams.py: no HParams experiment served for {args.sweep_dir}", file=sys.stderr)
            return 2
        names = {h["name"] for h in exp["hparamInfos"]}
        want = {a[0] for a in plan["axes"]} | {"seed"}
        errors = []
        if names != want:
            errors.append(f"hyper-parameters {sorted(names)} != {sorted(want)}")
        metrics = [m["name"] for m in exp.get("metricInfos", [])]
        cols = [{"hparam": h, "includeInResult": True} for h in sorted(names)]
        cols += [{"metric": m, "includeInResult": True} for m in metrics]
        done = [r for r in plan["runs"]
                if json.load(open(os.path.join(args.sweep_dir, "status", r["name"] + ".json")))["state"] == "done"]
        groups = []
        deadline = time.time() + 60
        while time.time() < deadline:
            resp = post(port, "session_groups", {
                "experimentName": "", "startIndex": 0, "sliceSize": 100000, "colParams": cols,
                "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
                "aggregationType": "AGGREGATION_AVG"})
            groups = resp.get("sessionGroups", [])
            # TensorBoard reads event files incrementally: wait until every finished run is
            # listed with a value for every metric its metrics.jsonl recorded (a loaded machine
            # can serve a session before its last scalars)
            listed = {s["name"]: {m["name"]["tag"] for m in s.get("metricValues", [])}
                      for g in groups for s in g["sessions"]}
            recorded = {r["name"]: set(last_values(os.path.join(args.sweep_dir, r["name"], "metrics.jsonl")))
                        for r in done}
            if all(r["name"] in listed
                   and {m["tag"] for m in metrics if m["tag"] in recorded[r["name"]]} <= listed[r["name"]]
                   for r in done):
                break
            time.sleep(2)
        sessions = {}
        for g in groups:
            for s in g["sessions"]:
                sessions[s["name"]] = (g["hparams"], {m["name"]["tag"]: m["value"] for m in s.get("metricValues", [])})
        for r in done:
            if r["name"] not in sessions:
                errors.append(f"{r['name']}: not listed")
                continue
            hp, mv = sessions[r["name"]]
            expect = {p: toml_value(v) for p, v in r["values"].items()}
            expect["seed"] = r["seed"]
            for p, v in expect.items():
                got = hp.get(p)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    ok = isinstance(got, (int, float)) and math.isclose(got, v, rel_tol=1e-12)
                elif isinstance(v, bool):
                    ok = got is v
                else:
                    ok = isinstance(got, str) and got != ""
                if not ok:
                    errors.append(f"{r['name']}: hparam {p} = {got!r}, expected {v!r}")
            last = last_values(os.path.join(args.sweep_dir, r["name"], "metrics.jsonl"))
            shown = []
            for m in metrics:
                tag = m["tag"]
                if tag not in last:
                    if tag in mv:
                        errors.append(f"{r['name']}: metric {tag} shown but never recorded")
                    continue
                got = mv.get(tag)
                if got is None or not math.isclose(got, last[tag], rel_tol=1e-6, abs_tol=1e-6):
                    errors.append(f"{r['name']}: metric {tag} = {got}, metrics.jsonl says {last[tag]}")
                else:
                    shown.append(f"{tag}={got:.4g}")
            print(f"{r['name']}: {', '.join(f'{k}={v}' for k, v in sorted(hp.items()))}; {'; '.join(shown)}")
        layout = json.loads(urllib.request.urlopen(
            f"http://127.0.0.1:{port}/data/plugin/custom_scalars/layout", timeout=60).read())
        charts = {c["title"]: c for cat in layout.get("category", []) for c in cat.get("chart", [])}
        sink_chart = charts.get("Sink₁ at every ε")
        if sink_chart is None:
            errors.append(f"custom scalars: no 'Sink₁ at every ε' chart among {sorted(charts)}")
        elif done:
            import re
            tags = last_values(os.path.join(args.sweep_dir, done[0]["name"], "metrics.jsonl")).keys()
            pattern = re.compile(sink_chart["multiline"]["tag"][0])
            matched = sorted(t for t in tags if pattern.search(t))
            want_tags = sorted(t for t in tags if t.startswith("sink/rate_eps") and t.endswith("/pos01"))
            if matched != want_tags or len(matched) < 2:
                errors.append(f"custom scalars: Sink₁ chart matches {matched}, expected {want_tags}")
            else:
                print(f"custom scalars: {len(charts)} charts; 'Sink₁ at every ε' shows {', '.join(matched)}")
        if errors:
            print("\n".join(["HParams check FAILED:"] + errors))
            return 1
        print(f"HParams check OK: {len(done)} runs, {len(names)} hyper-parameters, {len(metrics)} metrics "
              f"(tensorboard --load_fast={args.load_fast})")
        return 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
