#!/usr/bin/env python3
"""The matrix products alone: the `gemm` crate (Burn's CPU matmul and sinklab's CPU kernels on
AVX-512 CPUs) and sinklab's packed AVX2 products (`kernels::cpu::sgemm`, the kernels' products
on CPUs with AVX2 and no AVX-512; `examples/bench_gemm.rs`) against PyTorch's `torch.mm` (MKL) on the same shapes, on one thread
and on every core, in GFLOP/s. Where sinklab's forward is mostly products, this bounds what any
kernel work outside them can gain.

    ~/.cache/sinklab-torch-venv/bin/python scripts/bench_gemm.py [--json FILE]
"""
import argparse
import json
import os
import subprocess
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def torch_gflops(threads, m, n, k):
    torch.set_num_threads(threads)
    a = torch.arange(m * k, dtype=torch.float32).remainder(7).mul(0.1).reshape(m, k)
    b = torch.arange(k * n, dtype=torch.float32).remainder(5).mul(0.1).reshape(k, n)
    for _ in range(3):
        torch.mm(a, b)
    flop = 2.0 * m * n * k
    iters = max(3, int(4e10 / flop))
    t = time.perf_counter()
    for _ in range(iters):
        torch.mm(a, b)
    return flop * iters / (time.perf_counter() - t) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None, help="write every row here")
    args = ap.parse_args()
    out = subprocess.run(["cargo", "run", "--release", "--quiet", "--example", "bench_gemm"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    print(f"GFLOP/s, {len(os.sched_getaffinity(0))} cores, PyTorch {torch.__version__}\n")
    print("| threads | m × k · k × n | gemm crate | sinklab packed | torch.mm | gemm / torch | packed / torch |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        r["torch_gflops"] = torch_gflops(r["threads"], r["m"], r["n"], r["k"])
        packed = r.get("packed_gflops")
        p_rate = "–" if packed is None else f"{packed:.0f}"
        p_ratio = "–" if packed is None else f"{packed / r['torch_gflops']:.2f}×"
        print(f"| {r['threads']} | {r['m']} × {r['k']} · {r['k']} × {r['n']} | {r['gflops']:.0f} | {p_rate} | "
              f"{r['torch_gflops']:.0f} | {r['gflops'] / r['torch_gflops']:.2f}× | {p_ratio} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
