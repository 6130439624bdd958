#!/usr/bin/env python3
"""Per-token NLL of a text under a GGUF LLaMA model in float64, and how far f32 results are
from it.

    python scripts/reference_dense_nll.py MODEL.gguf TOKENIZER.json TEXT --tokens 2048 \
        --compare OLD/stream.json NEW/stream.json [--json OUT.json] [--stages]

The text is encoded with the run's tokenizer.json (Python `tokenizers`, no special tokens) and
cut to --tokens ids, as `sinklab stream-eval --text TEXT --tokens N` does for a run without BOS.
The forward is `reference_gguf.llama_forward` in float64 on the float64 copies of the
dequantised f32 weights: no f32 rounding anywhere after the weights. For each `stream.json`
given, the dense row's per-token NLL (`rows[0].nll`, the tokens 1..N-1) is compared with the
float64 NLL: max and mean absolute difference, and the largest difference between two of the
files. This separates "another f32 summation order" (both files equally far from float64) from
"a different result" (one far, one near).

--stages measures the f32 floor stage by stage (about 11 min more on 2 cores): the same
forward with chosen stages in float32 and the rest in float64, per-token NLL against float64:
  proj   the q, k, v and output products
  attn   scores, softmax and P·V
  ffn    gate, up, SiLU·up and the down product
  norm   the RMSNorms
  resid  the residual stream, rounded after each add
  head   the tied head's logits
RoPE and the log-softmax stay in float64. "all" runs every stage in float32 (NumPy's own f32
summation order: a third f32 implementation beside the two files), "only S" one stage, "all but
S" every stage except S. A stage whose f32 rounding alone moves a token's NLL by more than a
tolerance bounds what any two f32 orders can be expected to agree to.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import math

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_gguf as R  # noqa: E402


STAGES = ("proj", "attn", "ffn", "norm", "resid", "head")


def staged_forward(W32, W64, cfg, ids, f32_stages):
    """`reference_gguf.llama_forward` (adjacent RoPE, no cache) with the stages named in
    `f32_stages` computed in float32 (inputs rounded to f32, the product or op in f32, the result
    widened) and every other stage in float64. Per-token NLL of ids[1:]."""
    f32, f64 = np.float32, np.float64
    F = set(f32_stages)

    def mm(a, name, stage):  # a (T, in) · W (out, in)ᵀ
        if stage in F:
            return (a.astype(f32) @ W32[name].T).astype(f64)
        return a @ W64[name].T

    def rnd(x, stage):
        return x.astype(f32).astype(f64) if stage in F else x

    def norm(x, name):
        if "norm" in F:
            x = x.astype(f32)
            ms = np.mean(x * x, axis=-1, keepdims=True)
            return (x / np.sqrt(ms + f32(cfg["rms_eps"])) * W32[name]).astype(f64)
        return R.rms_norm(x, W64[name], cfg["rms_eps"])

    T, H, Hkv, hd, n_rot = len(ids), cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"], cfg["n_rot"]
    cos, sin = R.rope_tables(T, n_rot, cfg["rope_freq_base"], f64)
    mask = np.arange(T)[None, :] > np.arange(T)[:, None]  # key j > query i
    dt = f32 if "attn" in F else f64
    x = W64["token_embd.weight"][ids]
    for l in range(cfg["n_layer"]):
        p = f"blk.{l}."
        h = norm(x, p + "attn_norm.weight")
        q = mm(h, p + "attn_q.weight", "proj").reshape(T, H, hd)
        k = mm(h, p + "attn_k.weight", "proj").reshape(T, Hkv, hd)
        v = mm(h, p + "attn_v.weight", "proj").reshape(T, Hkv, hd)
        q = R.apply_rope(q, cos, sin, n_rot, "adjacent")
        k = R.apply_rope(k, cos, sin, n_rot, "adjacent")
        k = np.repeat(k, H // Hkv, axis=1).astype(dt)  # query head h reads kv head h // group
        v = np.repeat(v, H // Hkv, axis=1).astype(dt)
        s = np.matmul(q.astype(dt).transpose(1, 0, 2), k.transpose(1, 2, 0)) * dt(1 / math.sqrt(hd))
        s[:, mask] = -np.inf  # (H, T, T)
        pr = np.exp(s - s.max(axis=-1, keepdims=True))
        pr /= pr.sum(axis=-1, keepdims=True)
        o = np.matmul(pr, v.transpose(1, 0, 2)).transpose(1, 0, 2).reshape(T, H * hd).astype(f64)
        x = rnd(x + mm(o, p + "attn_output.weight", "proj"), "resid")
        h = norm(x, p + "ffn_norm.weight")
        g, u = mm(h, p + "ffn_gate.weight", "ffn"), mm(h, p + "ffn_up.weight", "ffn")
        x = rnd(x + mm(rnd(R.silu(g) * u, "ffn"), p + "ffn_down.weight", "ffn"), "resid")
    x = norm(x, "output_norm.weight")
    head = "output.weight" if "output.weight" in W32 else "token_embd.weight"
    return R.token_nll(mm(x, head, "head"), ids)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("gguf")
    p.add_argument("tokenizer")
    p.add_argument("text")
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--compare", nargs="*", default=[])
    p.add_argument("--json")
    p.add_argument("--stages", action="store_true", help="the f32 floor stage by stage (above)")
    a = p.parse_args()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(a.tokenizer)
    ids = tok.encode(Path(a.text).read_text(), add_special_tokens=False).ids[: a.tokens]
    r = R.GGUFReader(a.gguf)
    cfg = R.llama_config(r)
    W32 = R.load_llama_weights(r, np.float32)
    W = {k: v.astype(np.float64) for k, v in W32.items()}
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
    if a.stages:
        same = np.abs(staged_forward(W32, W, cfg, ids, ()) - nll).max()
        assert same < 1e-9, f"the staged forward in float64 is {same:.3g} from llama_forward"
        report["stages"] = {}
        runs = [("all", STAGES)] + [(f"only {s}", (s,)) for s in STAGES]
        runs += [(f"all but {s}", tuple(t for t in STAGES if t != s)) for s in STAGES]
        for name, st in runs:
            x = staged_forward(W32, W, cfg, ids, st)
            d = np.abs(x - nll)
            report["stages"][name] = {"max_abs": float(d.max()), "mean_abs": float(d.mean())}
            vs = "".join(f"; vs {f}: max {np.abs(x - y).max():.3g}" for f, y in dense.items()
                         if name == "all")
            print(f"f32 {name:12s} |NLL − float64| max {d.max():.3g}, mean {d.mean():.3g}{vs}",
                  flush=True)
            if name == "all":
                report["stages"][name]["max_abs_vs_files"] = {
                    f: float(np.abs(x - y).max()) for f, y in dense.items()}
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
