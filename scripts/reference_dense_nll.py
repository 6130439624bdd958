#!/usr/bin/env python3
"""Per-token NLL of a text under a GGUF LLaMA model in float64, and how far f32 results are
from it.

    python scripts/reference_dense_nll.py MODEL.gguf TOKENIZER.json TEXT --tokens 2048 \
        --compare OLD/stream.json NEW/stream.json [--json OUT.json]

The text is encoded with the run's tokenizer.json (Python `tokenizers`, no special tokens) and
cut to --tokens ids, as `sinklab stream-eval --text TEXT --tokens N` does for a run without BOS.
The forward is `reference_gguf.llama_forward` in float64 on the float64 copies of the
dequantised f32 weights: no f32 rounding anywhere after the weights. For each `stream.json`
given, the dense row's per-token NLL (`rows[0].nll`, the tokens 1..N-1) is compared with the
float64 NLL: max and mean absolute difference, and the largest difference between two of the
files. This separates "another f32 summation order" (both files equally far from float64) from
"a different result" (one far, one near).
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_gguf as R  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("gguf")
    p.add_argument("tokenizer")
    p.add_argument("text")
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--compare", nargs="*", default=[])
    p.add_argument("--json")
    a = p.parse_args()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(a.tokenizer)
    ids = tok.encode(Path(a.text).read_text(), add_special_tokens=False).ids[: a.tokens]
    r = R.GGUFReader(a.gguf)
    cfg = R.llama_config(r)
    W = {k: v.astype(np.float64) for k, v in R.load_llama_weights(r, np.float32).items()}
    t0 = time.time()
    logits = R.llama_forward(W, cfg, ids, dtype=np.float64)
    nll = R.token_nll(logits, ids)
    print(f"float64 forward of {len(ids)} tokens in {time.time() - t0:.1f} s; "
          f"mean NLL {nll.mean():.6f}, ppl {np.exp(nll.mean()):.4f}")
    report = {"tokens": len(ids), "nll_f64_mean": float(nll.mean()), "files": {}}
    dense = {}
    for f in a.compare:
        row = json.loads(Path(f).read_text())["rows"][0]
        x = np.asarray(row["nll"], dtype=np.float64)
        if len(x) != len(nll):
            sys.exit(f"{f}: {len(x)} dense NLLs, the float64 forward has {len(nll)}")
        d = np.abs(x - nll)
        dense[f] = x
        report["files"][f] = {"row": row.get("name"), "max_abs": float(d.max()), "mean_abs": float(d.mean())}
        print(f"{f} ({row.get('name')}): |NLL − float64| max {d.max():.3g}, mean {d.mean():.3g}")
    fs = list(dense)
    for i in range(len(fs)):
        for j in range(i + 1, len(fs)):
            d = np.abs(dense[fs[i]] - dense[fs[j]])
            print(f"{fs[i]} vs {fs[j]}: max {d.max():.3g}, mean {d.mean():.3g}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
