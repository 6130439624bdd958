#!/usr/bin/env python3
"""Roofline of one training step of sinklab's baseline LM (pre-norm, RMSNorm, RoPE, SwiGLU,
untied head by default) on an H100 SXM or H200: per stage, forward and backward, the FLOPs,
the bytes moved from/to HBM, the arithmetic intensity, the bound and the expected time; then
ms per step, tokens/s and MFU. Defaults: experiments/gu60m.toml's model and the step
scripts/gpu_checks.sh benchmarks (one micro-batch of 8 x 2048 tokens). docs/gpu_roofline.md
states the assumptions and reads the result.

    python3 scripts/roofline.py                      # gu60m, bf16, H100
    python3 scripts/roofline.py --gpu h200 --json
    python3 scripts/roofline.py --gpu both            # one table, each GPU's bound and time
    python3 scripts/roofline.py --measured 3848 --precision f32 --attention fa2
    python3 scripts/roofline.py --attention explicit # the (T, T) scores written to HBM

The step modelled (the intended GPU step, --precision bf16): f32 master weights cast to bf16
before each matrix product (forward and the backward's input-gradient product: two casts per
weight per step, 4 B read + 2 B written per parameter each); products on tensor cores with
f32 accumulation, outputs and every activation stored in bf16 (the residual stream too);
causal FlashAttention-2 forward and backward (no (T, T) tensor in HBM; the backward recomputes
the scores); RMSNorm, RoPE and the SwiGLU gate as one kernel each; the residual adds in the
epilogue of the W_o and W_down products; cross-entropy in one kernel that walks each row's
logits a vocabulary block at a time (online max and sum) and writes dlogits in place of the
bf16 logits (--ce recompute: never write the logits, recompute them in the backward);
gradients of weights written in f32; one global grad-norm pass, then clip + AdamW fused (f32
p, g, m, v); one loss read back. --precision f32: everything f32, products on the CUDA cores.

Bytes: each kernel reads its inputs from HBM once and writes its outputs once (tiles re-read
by a product or by attention are taken to hit L2/shared memory). Time per stage = the largest
of matrix-product FLOPs / their practical peak ("compute"), other FLOPs / fp32 peak ("fp32"),
exponentials / SFU rate ("exp") and bytes / HBM bandwidth ("memory"): the roofline; stages do
not overlap each other. Model FLOPs and MFU use
sinklab's convention (src/bench.rs): 6N + 12 L T d per token, N the parameters without the
token embedding (a tied head counted as a (d, V) matrix), MFU against the dense bf16 peak.

Standard library only.
"""
import argparse
import json
import sys

# Peaks (dense). H100 SXM and H200 share the GH100 arithmetic; only HBM differs.
# tc_practical: a bf16 matmul measured on random data (~80% of the datasheet's 989.4).
# sfu: the special-function units' exp2 rate (FlashAttention-3 paper: 3.9 T/s on H100 SXM5).
GPUS = {
    "h100": {"name": "H100 SXM", "hbm": 3.35e12},
    "h200": {"name": "H200 SXM", "hbm": 4.8e12},
}
BF16_DENSE = 989.4e12  # the figure scripts/gpu_checks.sh divides by
BF16_PRACTICAL = 790e12
FP32 = 66.9e12
SFU = 3.9e12


GROUPS = [  # (name prefix, group) for the summary by kind of work
    ("embedding", "embedding"), ("RMSNorm", "RMSNorm"), ("final RMSNorm", "RMSNorm"),
    ("q, k, v", "q, k, v, o products"), ("o product", "q, k, v, o products"),
    ("RoPE", "RoPE"), ("attention", "attention core"), ("gate, up", "FFN products"),
    ("down", "FFN products"), ("SwiGLU", "SwiGLU gate"), ("head", "head + cross-entropy"),
    ("cross-entropy", "head + cross-entropy"), ("weight casts", "weight casts"),
    ("global grad", "optimizer"), ("clip", "optimizer"), ("loss", "optimizer"),
]


class Stage:
    def __init__(self, phase, name, n, tc=0.0, alu=0.0, exps=0.0, nbytes=0.0):
        self.phase, self.name, self.n = phase, name, n
        self.group = next(g for prefix, g in GROUPS if name.startswith(prefix))
        # totals over the n instances (layers)
        self.tc, self.alu, self.exps, self.bytes = n * tc, n * alu, n * exps, n * nbytes

    def times(self, tc_peak, hbm):
        t = {
            "compute": self.tc / tc_peak,
            "fp32": self.alu / FP32,
            "exp": self.exps / SFU,
            "memory": self.bytes / hbm,
        }
        bound = max(t, key=t.get)
        serial = max(t["compute"] + t["fp32"] + t["exp"], t["memory"])
        return bound, t[bound], serial


def build(a):
    d, L, H, f, T, V, B = a.d, a.layers, a.heads, a.ffn, a.ctx, a.vocab, a.batch
    dh = d // H
    M = B * T  # tokens per micro-batch
    f32 = a.precision == "f32"
    act = 4 if f32 else 2  # bytes per stored activation
    wt = 4 if f32 else 2  # bytes per weight as a product reads it
    gb = 4  # weight gradients, f32
    tied = a.tied

    # parameters
    per_layer = 4 * d * d + 3 * d * f + 2 * d  # q k v o, gate up down, two RMSNorm gains
    emb = V * d
    head = 0 if tied else d * V
    P = emb + L * per_layer + d + head  # + final norm gain
    N = P - emb + (emb if tied else 0)  # sinklab's non_embedding_params
    mat_layer = 4 * d * d + 3 * d * f  # matrices cast before products, per layer
    mat = L * mat_layer + d * V  # + the head (or the embedding, tied)

    S = []
    F, Bk, O = "forward", "backward", "optimizer"
    # ---- forward ----------------------------------------------------------------------------
    S.append(Stage(F, "embedding gather (f32 rows -> activations)", 1,
                   nbytes=M * 4 + M * d * 4 + M * d * act))
    norm_f = dict(alu=4 * M * d, nbytes=2 * M * d * act + M * 4)  # read x, write u, rstd
    S.append(Stage(F, "RMSNorm before attention", L, **norm_f))
    S.append(Stage(F, "q, k, v products (one d x 3d product)", L,
                   tc=2 * M * d * 3 * d, nbytes=M * d * act + 3 * d * d * wt + 3 * M * d * act))
    S.append(Stage(F, "RoPE on q and k", L, alu=3 * M * 2 * d, nbytes=2 * (M * 2 * d * act)))
    if a.attention == "fa2":
        scores = B * H * T * T / 2  # causal: half the (T, T) tiles
        S.append(Stage(F, "attention, FA2 forward (causal)", L,
                       tc=4 * scores * dh, alu=5 * scores, exps=scores,
                       nbytes=3 * M * d * act + M * d * act + B * H * T * 4))
    else:
        sq = B * H * T * T  # the whole square is computed, then masked
        per = 16 if f32 else 20  # S write, softmax read+write, [P cast], P read
        S.append(Stage(F, "attention, explicit forward ((T, T) scores in HBM)", L,
                       tc=4 * sq * dh, alu=5 * sq, exps=sq,
                       nbytes=per * sq + 3 * M * d * act + M * d * act))
    S.append(Stage(F, "o product + residual add", L,
                   tc=2 * M * d * d, nbytes=M * d * act + d * d * wt + 2 * M * d * act))
    S.append(Stage(F, "RMSNorm before the FFN", L, **norm_f))
    S.append(Stage(F, "gate, up products (one d x 2f product)", L,
                   tc=2 * M * d * 2 * f, nbytes=M * d * act + 2 * d * f * wt + 2 * M * f * act))
    S.append(Stage(F, "SwiGLU gate silu(g) * u", L, alu=5 * M * f, exps=M * f,
                   nbytes=3 * M * f * act))
    S.append(Stage(F, "down product + residual add", L,
                   tc=2 * M * f * d, nbytes=M * f * act + f * d * wt + 2 * M * d * act))
    S.append(Stage(F, "final RMSNorm", 1, **norm_f))
    if a.ce == "materialize":
        S.append(Stage(F, "head product (logits written)", 1,
                       tc=2 * M * d * V, nbytes=M * d * act + d * V * wt + M * V * act))
        S.append(Stage(F, "cross-entropy: loss and dlogits in one pass", 1,
                       alu=6 * M * V, exps=2 * M * V, nbytes=2 * M * V * act + M * 4 + M * 4))
    else:
        S.append(Stage(F, "head product + online log-sum-exp (no logits)", 1,
                       tc=2 * M * d * V, alu=4 * M * V, exps=M * V,
                       nbytes=M * d * act + d * V * wt + M * 4 + M * 4))
    if not f32:
        S.append(Stage(F, "weight casts f32 -> bf16 (forward products)", 1,
                       alu=mat, nbytes=mat * (4 + 2)))
    # ---- backward ---------------------------------------------------------------------------
    if a.ce == "materialize":
        S.append(Stage(Bk, "head products dX, dW", 1, tc=2 * 2 * M * d * V,
                       nbytes=(M * V * act + d * V * wt + M * d * act)  # dX
                       + (M * d * act + M * V * act + d * V * gb)))  # dW
    else:
        S.append(Stage(Bk, "head: logits recomputed, dlogits, dX, dW", 1, tc=3 * 2 * M * d * V,
                       alu=6 * M * V, exps=M * V,
                       nbytes=M * d * act + d * V * wt + M * 4 + M * 4 + M * d * act + d * V * gb))
    norm_b = dict(alu=10 * M * d, nbytes=4 * M * d * act + M * 4 + d * 4)  # x, du, dres -> dx
    S.append(Stage(Bk, "final RMSNorm", 1, alu=10 * M * d, nbytes=3 * M * d * act + M * 4 + d * 4))
    S.append(Stage(Bk, "down products dX, dW", L, tc=2 * 2 * M * f * d,
                   nbytes=(M * d * act + f * d * wt + M * f * act)
                   + (M * f * act + M * d * act + f * d * gb)))
    S.append(Stage(Bk, "SwiGLU gate", L, alu=12 * M * f, exps=M * f,
                   nbytes=3 * M * f * act + 2 * M * f * act))  # dh, g, u -> dg, du
    S.append(Stage(Bk, "gate, up products dX, dW", L, tc=2 * 2 * M * d * 2 * f,
                   nbytes=(2 * M * f * act + 2 * d * f * wt + M * d * act)
                   + (M * d * act + 2 * M * f * act + 2 * d * f * gb)))
    S.append(Stage(Bk, "RMSNorm before the FFN (+ residual gradient)", L, **norm_b))
    S.append(Stage(Bk, "o products dX, dW", L, tc=2 * 2 * M * d * d,
                   nbytes=(M * d * act + d * d * wt + M * d * act)
                   + (M * d * act + M * d * act + d * d * gb)))
    if a.attention == "fa2":
        scores = B * H * T * T / 2
        # D = rowsum(dO * O) (reads O, dO; writes D); the main kernel reads q k v dO, lse, D,
        # writes dk, dv; dq through an f32 accumulator: zeroed, one read-modify-write, converted
        pre = 2 * M * d * act + B * H * T * 4
        main = 4 * M * d * act + 2 * B * H * T * 4 + 2 * M * d * act
        dq = M * d * (4 + 8 + 4 + act)
        S.append(Stage(Bk, "attention, FA2 backward (scores recomputed)", L,
                       tc=2.5 * 4 * scores * dh, alu=5 * scores, exps=scores,
                       nbytes=pre + main + dq))
    else:
        sq = B * H * T * T
        per = 28  # dP write, P read (dV), softmax backward r/r/w, [dS cast], dS read twice
        S.append(Stage(Bk, "attention, explicit backward ((T, T) in HBM)", L,
                       tc=8 * sq * dh, alu=4 * sq,
                       nbytes=per * sq + 5 * M * d * act + 3 * M * d * act))
    S.append(Stage(Bk, "RoPE on dq and dk", L, alu=3 * M * 2 * d, nbytes=2 * (M * 2 * d * act)))
    S.append(Stage(Bk, "q, k, v products dX, dW", L, tc=2 * 2 * M * d * 3 * d,
                   nbytes=(3 * M * d * act + 3 * d * d * wt + M * d * act)
                   + (M * d * act + 3 * M * d * act + 3 * d * d * gb)))
    S.append(Stage(Bk, "RMSNorm before attention (+ residual gradient)", L, **norm_b))
    # scatter-add of dh into the f32 (V, d) gradient: zeroed first unless the tied head's dW
    # product has already written it; each row read-modify-written
    S.append(Stage(Bk, "embedding scatter-add", 1, alu=M * d,
                   nbytes=(0 if tied else V * d * 4) + M * 4 + M * d * act + M * d * 8))
    if not f32:
        S.append(Stage(Bk, "weight casts f32 -> bf16 (dX products)", 1,
                       alu=mat, nbytes=mat * (4 + 2)))
    # ---- optimizer --------------------------------------------------------------------------
    S.append(Stage(O, "global grad norm (read every gradient)", 1, alu=2 * P, nbytes=P * 4))
    S.append(Stage(O, "clip + AdamW (p, g, m, v read; p, m, v written)", 1, alu=15 * P,
                   nbytes=P * (4 * 4 + 3 * 4)))
    S.append(Stage(O, "loss read back (4 B)", 1, nbytes=4))

    saved = L * (M * (8 * d + 3 * f) * act + M * (H + 2) * 4)  # per layer: x u q k v o x' u g up h
    info = {
        "params": P, "non_embedding_params": N, "matrices_cast": mat if not f32 else 0,
        "tokens_per_step": M, "d_head": dh,
        "memory_bytes": {
            "weights_grads_adam_f32": 4 * P * 4,
            "saved_activations": saved,
            "logits": M * V * act if a.ce == "materialize" else 0,
            "explicit_scores": L * B * H * T * T * (4 + (0 if f32 else 2))
            if a.attention == "explicit" else 0,
        },
    }
    return S, info


def predict(a, gpu_key):
    """Every stage's figures and the totals on one GPU."""
    gpu = GPUS[gpu_key]
    tc_peak = (a.tc_tflops * 1e12 if a.tc_tflops else
               (FP32 if a.precision == "f32" else BF16_PRACTICAL))
    hbm = gpu["hbm"]
    stages, info = build(a)
    rows = []
    for s in stages:
        bound, t, serial = s.times(tc_peak, hbm)
        flops = s.tc + s.alu
        rows.append({
            "phase": s.phase, "stage": s.name, "group": s.group, "n": s.n,
            "matmul_flops": s.tc, "other_flops": s.alu, "exps": s.exps, "bytes": s.bytes,
            "intensity": flops / s.bytes if s.bytes else None,
            "bound": bound, "ms": 1e3 * t, "ms_no_overlap": 1e3 * serial,
        })
    ms = sum(r["ms"] for r in rows)
    ms_serial = sum(r["ms_no_overlap"] for r in rows)
    M = info["tokens_per_step"]
    N = info["non_embedding_params"]
    model_fpt = 6 * N + 12 * a.layers * a.ctx * a.d  # src/bench.rs
    tps = M / (ms / 1e3)
    tc_total = sum(r["matmul_flops"] for r in rows)
    by_phase = {p: sum(r["ms"] for r in rows if r["phase"] == p)
                for p in ("forward", "backward", "optimizer")}
    by_bound, by_group = {}, {}
    for r in rows:
        by_bound[r["bound"]] = by_bound.get(r["bound"], 0.0) + r["ms"]
        by_group[r["group"]] = by_group.get(r["group"], 0.0) + r["ms"]
    out = {
        "gpu": gpu["name"], "precision": a.precision, "attention": a.attention, "ce": a.ce,
        "shape": {"d": a.d, "layers": a.layers, "heads": a.heads, "ffn": a.ffn, "ctx": a.ctx,
                  "vocab": a.vocab, "batch": a.batch, "tied": a.tied},
        "peaks": {"matmul_practical": tc_peak, "bf16_dense": BF16_DENSE, "fp32": FP32,
                  "sfu_exp_per_s": SFU, "hbm_bytes_per_s": hbm,
                  "ridge_flop_per_byte": tc_peak / hbm},
        **info,
        "stages": rows,
        "total": {
            "ms_per_step": ms, "ms_per_step_no_overlap": ms_serial,
            "tokens_per_s": tps, "tokens_per_s_no_overlap": M / (ms_serial / 1e3),
            "ms_by_phase": by_phase, "ms_by_bound": by_bound, "ms_by_group": by_group,
            "matmul_flops": tc_total, "bytes": sum(r["bytes"] for r in rows),
            "model_flops_per_token": model_fpt, "model_flops_per_step": model_fpt * M,
            "mfu": tps * model_fpt / BF16_DENSE,
            "mfu_fp32": tps * model_fpt / FP32,
            "hfu": tc_total / (ms / 1e3) / BF16_DENSE,
        },
    }
    if a.measured:
        m_ms = M / a.measured * 1e3
        out["measured"] = {"tokens_per_s": a.measured, "ms_per_step": m_ms,
                           "fraction_of_predicted": ms / m_ms,
                           "mfu": a.measured * model_fpt / BF16_DENSE,
                           "mfu_fp32": a.measured * model_fpt / FP32}
    return out


def summary(a, out):
    """The lines after the table, for one GPU."""
    t, rows, ms = out["total"], out["stages"], out["total"]["ms_per_step"]
    name = out["gpu"]
    print(f"{name}: ms by phase: "
          + ", ".join(f"{k} {v:.2f}" for k, v in t["ms_by_phase"].items())
          + "; by bound: "
          + ", ".join(f"{k} {v:.2f}" for k, v in sorted(t["ms_by_bound"].items())))
    groups = sorted(t["ms_by_group"].items(), key=lambda kv: -kv[1])
    print(f"{name}: ms by kind of work (forward + backward): "
          + ", ".join(f"{k} {v:.2f} ({100 * v / ms:.0f}%)" for k, v in groups))
    top = sorted(rows, key=lambda r: -r["ms"])[:3]
    print(f"{name}: top stages: " + "; ".join(f"{r['phase']} {r['stage']} {r['ms']:.2f} ms "
                                              f"({100 * r['ms'] / ms:.0f}%)" for r in top))
    print(f"{name}: predicted {ms:.2f} ms/step, {t['tokens_per_s']:,.0f} tokens/s, MFU "
          f"{100 * t['mfu']:.1f}% (executed matmul FLOPs: {100 * t['hfu']:.1f}%) of "
          f"{BF16_DENSE / 1e12:.1f} TFLOP/s bf16 dense")
    print(f"{name}: if no stage overlaps its matmul, fp32 and exp work: "
          f"{t['ms_per_step_no_overlap']:.2f} ms/step, "
          f"{t['tokens_per_s_no_overlap']:,.0f} tokens/s")
    if a.precision == "f32":
        print(f"{name}: against the fp32 peak {FP32 / 1e12:.1f} TFLOP/s, as sinklab bench reports "
              f"f32: MFU {100 * t['mfu_fp32']:.1f}% (over 100% is possible: the model FLOPs count "
              f"the whole (T, T) square, a causal kernel computes half)")
    if a.measured:
        m = out["measured"]
        fp32 = f" ({100 * m['mfu_fp32']:.1f}% of fp32)" if a.precision == "f32" else ""
        print(f"{name}: measured {a.measured:,.0f} tokens/s = {m['ms_per_step']:.2f} ms/step, MFU "
              f"{100 * m['mfu']:.2f}% of bf16 dense{fp32}; "
              f"{100 * m['fraction_of_predicted']:.1f}% of the predicted speed "
              f"(predicted / measured time)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, default=768, help="d_model")
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=1536, help="SwiGLU hidden width d_ff")
    ap.add_argument("--ctx", type=int, default=2048, help="tokens per sequence T")
    ap.add_argument("--vocab", type=int, default=50432)
    ap.add_argument("--batch", type=int, default=8, help="sequences per step (one micro-batch)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--tied", dest="tied", action="store_true", help="head = embedding^T")
    g.add_argument("--untied", dest="tied", action="store_false", help="own head (default)")
    ap.set_defaults(tied=False)
    ap.add_argument("--gpu", choices=sorted(GPUS) + ["both"], default="h100",
                    help="both: one table with each GPU's bound and time")
    ap.add_argument("--precision", choices=["bf16", "f32"], default="bf16",
                    help="bf16: the intended step; f32: f32 storage, products on CUDA cores")
    ap.add_argument("--attention", choices=["fa2", "explicit"], default="fa2",
                    help="fa2: fused, causal tiles skipped; explicit: (T, T) scores in HBM")
    ap.add_argument("--ce", choices=["materialize", "recompute"], default="materialize",
                    help="materialize: bf16 logits written once, dlogits in place; "
                         "recompute: no logits in HBM, recomputed in the backward")
    ap.add_argument("--tc-tflops", type=float, default=None,
                    help="practical peak of the matrix products (default 790 at bf16, 66.9 at f32)")
    ap.add_argument("--measured", type=float, default=None, metavar="TOKENS_PER_S",
                    help="a measured throughput: print it against the prediction")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.d % a.heads:
        sys.exit("roofline: --d must be a multiple of --heads")

    keys = sorted(GPUS) if a.gpu == "both" else [a.gpu]
    outs = [predict(a, k) for k in keys]
    if a.json:
        json.dump(dict(zip(keys, outs)) if a.gpu == "both" else outs[0], sys.stdout, indent=1)
        print()
        return

    o = outs[0]
    M, N, t = o["tokens_per_step"], o["non_embedding_params"], o["total"]
    print(f"{' and '.join(x['gpu'] for x in outs)}, {a.precision}, attention {a.attention}, "
          f"cross-entropy {a.ce}: d {a.d}, {a.layers} layers, {a.heads} heads of {o['d_head']}, "
          f"SwiGLU {a.ffn}, T {a.ctx}, V {a.vocab}, {'tied' if a.tied else 'untied'} head; "
          f"{a.batch} x {a.ctx} = {M} tokens per step")
    p = o["peaks"]
    print(f"peaks: products {p['matmul_practical'] / 1e12:.0f} TFLOP/s (practical), fp32 "
          f"{FP32 / 1e12:.1f} TFLOP/s, exp {SFU / 1e12:.1f} T/s; HBM "
          + ", ".join(f"{x['gpu']} {x['peaks']['hbm_bytes_per_s'] / 1e12:.2f} TB/s (ridge "
                      f"{x['peaks']['ridge_flop_per_byte']:.0f} FLOP/B)" for x in outs))
    print(f"params {o['params']:,} (N without the embedding {N:,}); model FLOPs (6N + 12LTd) "
          f"{t['model_flops_per_token'] / 1e6:.1f} M/token = {t['model_flops_per_step'] / 1e12:.2f}"
          f" T/step; executed matmul FLOPs {t['matmul_flops'] / 1e12:.2f} T/step; HBM traffic "
          f"{t['bytes'] / 1e9:.2f} GB/step")
    mem = o["memory_bytes"]
    print("memory: " + ", ".join(f"{k} {v / 1e9:.2f} GB" for k, v in mem.items() if v))
    print()
    names = [x["gpu"].split()[0] for x in outs]
    print("| phase | stage | x | matmul GFLOP | other GFLOP | G exp | MB | FLOP/B | "
          + " | ".join(f"bound {n} | ms {n}" for n in names) + " |")
    print("|---|---|---|---|---|---|---|---|" + "---|---|" * len(outs))
    for i, r in enumerate(o["stages"]):
        ai = "-" if r["intensity"] is None else f"{r['intensity']:.1f}"
        print(f"| {r['phase']} | {r['stage']} | {r['n']} | {r['matmul_flops'] / 1e9:.1f} | "
              f"{r['other_flops'] / 1e9:.2f} | {r['exps'] / 1e9:.2f} | {r['bytes'] / 1e6:.1f} | "
              f"{ai} | "
              + " | ".join(f"{x['stages'][i]['bound']} | {x['stages'][i]['ms']:.3f}" for x in outs)
              + " |")
    print()
    for x in outs:
        summary(a, x)


if __name__ == "__main__":
    main()
