#!/usr/bin/env python3
"""sinklab against PyTorch on the same shapes, timed in alternation, with the ratios.

    ~/.cache/sinklab-torch-venv/bin/python scripts/bench_compare.py                # both models
    ~/.cache/sinklab-torch-venv/bin/python scripts/bench_compare.py --models natural_text --rounds 5

Every round runs, one after the other as separate processes: `sinklab bench EXP` (one timed
round) and scripts/bench_torch.py in each PyTorch variant (one timed round each), so that a
slow phase of the machine hits every contender of that round alike. Each round gives a ratio
sinklab / variant; the summary is the median ratio over the rounds with its range (min-max).

PyTorch runs as a user runs it: default threads (one per core) and default OpenMP settings (no
OMP_WAIT_POLICY; export it yourself to see what it changes). Variants:
  eager    hand-written attention (as sinklab's), foreach AdamW (PyTorch's default)
  sdpa     F.scaled_dot_product_attention, foreach AdamW
  compile  torch.compile of the model (forward and backward through inductor), fused AdamW;
           the cross-entropy outside the compiled function (the earlier, weaker peer)
  compile_loss_fused    torch.compile of model and cross-entropy as one function, fused AdamW
  compile_loss_foreach  the same with foreach AdamW
The summary adds "best torch.compile": per round, the fastest of the compile variants run (so
the ratio is against the strongest PyTorch a careful user builds here, whichever it is).

Models (`--models`, comma-separated):
  natural_text   experiments/natural_text.toml: V 2048, d 128, 4 layers, 4 heads, SwiGLU 384,
                 RoPE, ctx 128, 16 sequences per step (the former quickstart's model)
  smollm2_shape  experiments/bench/smollm2_shape.toml: SmolLM2-135M's shape (d 576, 30 layers,
                 9 / 3 KV heads, SwiGLU 1536, tied 49,152 vocabulary, RoPE base 1e5), ctx 512,
                 2 sequences per step
`--mode forward` times inference instead (no gradients, logits of the whole batch): sinklab's
side is `sinklab bench --forward` (the path of eval and analyze). `--mode decode` times cached
decoding of one stream of `--decode` tokens (batch 1, dense KV cache, every step's logits read
back): sinklab's side is `sinklab bench --decode N` (the path of stream-eval and generate);
torch.compile is not run in this mode (not measured: the KV cache grows every call).

Prints a Markdown table; `--json FILE` also writes every round.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = {
    "natural_text": {
        "exp": "experiments/natural_text.toml",
        "torch": ["--vocab", "2048", "--d-model", "128", "--layers", "4", "--heads", "4",
                  "--ffn", "384", "--ctx", "128", "--batch", "16", "--lr", "1e-2", "--wd", "0.5"],
        "steps": 20,
        "warmup": 5,
    },
    "smollm2_shape": {
        "exp": "experiments/bench/smollm2_shape.toml",
        "torch": ["--vocab", "49152", "--d-model", "576", "--layers", "30", "--heads", "9",
                  "--kv-heads", "3", "--ffn", "1536", "--ctx", "512", "--batch", "2", "--tied",
                  "--rope-base", "100000", "--lr", "3e-4", "--wd", "0.1"],
        "steps": 2,
        "warmup": 1,
    },
}

VARIANTS = {
    "eager": [],
    "sdpa": ["--attn", "sdpa"],
    "compile": ["--compile"],
    "compile_loss_fused": ["--compile", "--compile-loss", "--optimizer", "fused"],
    "compile_loss_foreach": ["--compile", "--compile-loss", "--optimizer", "foreach"],
}


def run_json(cmd):
    t0 = time.time()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    line = [l for l in p.stdout.splitlines() if l.startswith("{")][-1]
    out = json.loads(line)
    out["wall_s"] = time.time() - t0
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sinklab", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "sinklab"))
    ap.add_argument("--models", default="natural_text,smollm2_shape")
    ap.add_argument("--variants", default="eager,sdpa,compile,compile_loss_fused,compile_loss_foreach")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", choices=["train", "forward", "decode"], default="train")
    ap.add_argument("--decode", type=int, default=256, help="tokens per stream (--mode decode)")
    ap.add_argument("--json", default=None, help="write every round here")
    args = ap.parse_args()
    if not os.access(args.sinklab, os.X_OK):
        sys.exit(f"{args.sinklab}: build first (cargo build --release) or pass --sinklab")
    import torch  # only to fail early and to record the version
    models = args.models.split(",")
    variants = args.variants.split(",")
    if args.mode == "decode":  # torch.compile is not run for decoding (see above)
        variants = [v for v in variants if not v.startswith("compile")]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        sys.exit(f"--variants: unknown {unknown}; valid: {', '.join(VARIANTS)}")
    results = {m: {"sinklab": [], **{v: [] for v in variants}} for m in models}
    for r in range(args.rounds):
        for m in models:
            spec = MODELS[m]
            steps, warmup = str(spec["steps"]), str(spec["warmup"])
            cmd = [args.sinklab, "bench", spec["exp"], "--warmup", warmup, "--steps", steps,
                   "--rounds", "1", "--json"]
            if args.mode == "forward":
                cmd.append("--forward")
            if args.mode == "decode":
                cmd += ["--decode", str(args.decode)]
            s = run_json(cmd)
            results[m]["sinklab"].append(s)
            print(f"round {r + 1} {m}: sinklab {s['median_tokens_per_s']:,.0f} tokens/s", file=sys.stderr)
            for v in variants:
                t = run_json([sys.executable, "scripts/bench_torch.py", *spec["torch"], *VARIANTS[v],
                              "--mode", args.mode, "--decode", str(args.decode),
                              "--warmup", warmup, "--steps", steps,
                              "--rounds", "1", "--json"])
                results[m][v].append(t)
                print(f"round {r + 1} {m}: torch {v} {t['median_tokens_per_s']:,.0f} tokens/s "
                      f"(other processes: {t['other_busy_cores_per_round'][0]:.2f} cores)",
                      file=sys.stderr)
    print(f"sinklab vs PyTorch {torch.__version__} ({args.mode}, {len(os.sched_getaffinity(0))} cores, "
          f"{args.rounds} alternating rounds; OMP_WAIT_POLICY "
          f"{os.environ.get('OMP_WAIT_POLICY', 'default')})\n")
    print("| model | contender | tokens/s (median) | MFU | sinklab / it: median (min-max) |")
    print("|---|---|---|---|---|")
    for m in models:
        sk = [x["median_tokens_per_s"] for x in results[m]["sinklab"]]
        skm = statistics.median(sk)
        mfu = statistics.median(x["mfu"] for x in results[m]["sinklab"])
        print(f"| {m} | sinklab | {skm:,.0f} | {100 * mfu:.1f}% | |")
        for v in variants:
            tv = [x["median_tokens_per_s"] for x in results[m][v]]
            ratios = [a / b for a, b in zip(sk, tv)]
            tmfu = statistics.median(x["mfu"] for x in results[m][v])
            print(f"| {m} | torch {v} | {statistics.median(tv):,.0f} | {100 * tmfu:.1f}% | "
                  f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}-{max(ratios):.2f}) |")
        compiled = [v for v in variants if v.startswith("compile")]
        if len(compiled) > 1:
            best = [max(results[m][v][r]["median_tokens_per_s"] for v in compiled)
                    for r in range(args.rounds)]
            ratios = [a / b for a, b in zip(sk, best)]
            print(f"| {m} | best torch.compile (per round) | {statistics.median(best):,.0f} | | "
                  f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}-{max(ratios):.2f}) |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "mode": args.mode, "rounds": results}, f, indent=1)


if __name__ == "__main__":
    main()
