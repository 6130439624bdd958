#!/usr/bin/env python3
"""PyTorch peer of `sinklab bench`: training (or inference) tokens/s of sinklab's baseline LM.

Usage (PyTorch lives in its own venv; it is not in scripts/requirements.txt):

    python3 -m venv ~/.cache/sinklab-torch-venv
    ~/.cache/sinklab-torch-venv/bin/pip install torch==2.9.0 numpy   # PyPI's wheel is the CUDA build
    ~/.cache/sinklab-torch-venv/bin/python scripts/bench_torch.py               # eager, defaults below
    ~/.cache/sinklab-torch-venv/bin/python scripts/bench_torch.py --compile     # torch.compile + fused AdamW
    ~/.cache/sinklab-torch-venv/bin/python scripts/bench_torch.py --compile --compile-loss --optimizer foreach
    ~/.cache/sinklab-torch-venv/bin/python scripts/bench_torch.py --attn sdpa --json
    python3 scripts/bench_torch.py --device cuda --dtype bf16 --attn sdpa --peak-gflops 989400
                                                      # on a GPU: bf16 autocast + SDPA, as a
                                                      # PyTorch user trains (scripts/gpu_checks.sh)

scripts/bench_compare.py runs this and `sinklab bench` in alternation on the same shapes and
prints the ratios; use it for any figure you report. PyTorch runs with its default threads and
OpenMP settings (see the note at the import).

The model (sinklab's baseline; defaults V=2048, d=128, L=4, H=4, ffn=384, T=128, B=16):
  - token embedding (V, d), then L pre-norm blocks
        x = x + Attn(RMSNorm(x));  x = x + SwiGLU(RMSNorm(x))
    then a final RMSNorm and an untied head Linear(d, V, bias=False);
  - RMSNorm(x) = x / sqrt(mean(x^2, -1) + 1e-5) * g, with g initialised to 1;
  - Attn: Wq, Wk, Wv, Wo = Linear(d, d, bias=False); H heads of d_h = d/H; RoPE (base 10000)
    on q and k with the NeoX/HF "rotate halves" pairing (i, i + d_h/2); scores q.k/sqrt(d_h);
    causal mask filled with -inf; softmax in float32; @ v; heads concatenated; Wo.
    `--attn manual` (default) is that, written by hand, as sinklab's attention is;
    `--attn sdpa` uses F.scaled_dot_product_attention(is_causal=True), for comparison;
  - SwiGLU(x) = W_down(silu(W_gate x) * (W_up x)); W_gate, W_up: d -> ffn, W_down: ffn -> d,
    no biases;
  - init: every Linear weight and the embedding ~ N(0, sqrt(2 / (5 d))); norm gains 1.
`--device cuda` runs it on the first GPU (model, batch and caches there; every round starts and
ends with torch.cuda.synchronize()). `--dtype bf16` wraps the forward pass and the loss in
torch.autocast(dtype=torch.bfloat16), PyTorch's mixed precision: fp32 master weights, AdamW
state and gradients, matmuls and SDPA in bf16 (no loss scaler: bf16 has fp32's exponent range);
the default fp32 is what sinklab trains in. In fp32, CUDA matmuls stay true fp32 (PyTorch's
default; no TF32) unless --tf32 is given.
Training step: cross-entropy over all B*T positions (next-token targets, mean), backward,
global-norm gradient clipping at 1.0 (clip_grad_norm_), AdamW(lr, betas=(0.9, 0.95), eps=1e-8,
weight_decay=wd) on every parameter (PyTorch's default foreach implementation), zero_grad, and
loss.item() every step, as a training loop that prints its loss would do.

Data: one batch of random token ids in [2, V) of shape [B, T+1] from a fixed generator,
split into inputs [:, :-1] and targets [:, 1:], reused every step (speed does not depend on
the content; `sinklab bench` also reuses one random batch).

Timing, as in `sinklab bench`: torch.set_num_threads(threads); `warmup` steps untimed; then
`rounds` rounds of `steps` steps, each round timed with time.perf_counter around the whole
loop. tokens/s per round = B*T*steps / elapsed. The summary is the median round,
sorted(rounds)[len // 2], which is the same rule sinklab uses.
Model FLOPs per token = 6*N + 12*L*T*d. N is the number of non-embedding parameters (the head
and the norm gains included, the token embedding excluded). The second term is attention's
q.k^T and A.v (2*T*d multiply-adds each per token per layer, forward), times 3 for forward and
backward. This matches `sinklab bench`. Achieved GFLOP/s = median tokens/s * FLOPs per token
/ 1e9. MFU divides that by the CPU's fp32 peak, estimated from /proc/cpuinfo in the same way
as sinklab (cores x MHz x 32 FLOP/cycle with AVX2+FMA, 64 with AVX-512) unless --peak-gflops
is given; on a GPU pass --peak-gflops (the peak of the dtype that runs the matmuls), else MFU
is not reported. Peak RSS comes from resource.getrusage (ru_maxrss, KiB on Linux).
Contention: each round also reports how many cores other processes kept busy. This is the
/proc/stat busy and steal time minus this process's own CPU time, divided by the round's wall
time. A round with more than about 0.1 busy cores was measured on a shared machine. Take the
median of quiet rounds, or rerun.
"""
import argparse
import json
import math
import os
import resource
import time

# PyTorch runs with its default threading and OpenMP settings, as a user runs it. (An earlier
# version set OMP_WAIT_POLICY=PASSIVE for steadier rounds; on this 2-core machine that made
# eager PyTorch 30-40% slower, a handicap for the peer. Export it yourself to compare.)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gain = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.gain


def rope_tables(T, dh, base=10000.0):
    half = dh // 2
    inv = base ** (-(2.0 * torch.arange(half, dtype=torch.float64)) / dh)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]  # (T, half)
    cos = torch.cat([ang.cos(), ang.cos()], dim=-1).float()  # (T, dh)
    sin = torch.cat([ang.sin(), ang.sin()], dim=-1).float()
    return cos, sin


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    """x: (B, H, T, dh); pairs (i, i + dh/2): [x1 cos - x2 sin, x1 sin + x2 cos]."""
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, d, n_heads, attn_impl, kv_heads=None):
        super().__init__()
        self.h, self.dh, self.impl = n_heads, d // n_heads, attn_impl
        self.kv = kv_heads or n_heads
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, self.kv * self.dh, bias=False)
        self.wv = nn.Linear(d, self.kv * self.dh, bias=False)
        self.wo = nn.Linear(d, d, bias=False)

    def decode(self, x, cos, sin, cache, pos):
        """One new token x (1, 1, d) at position `pos`; cache = [K, V] of (1, kv, ctx, dh),
        filled up to pos (keys stored after RoPE, as HF's cache does)."""
        q = self.wq(x).view(1, 1, self.h, self.dh).transpose(1, 2)
        k = self.wk(x).view(1, 1, self.kv, self.dh).transpose(1, 2)
        v = self.wv(x).view(1, 1, self.kv, self.dh).transpose(1, 2)
        q, k = apply_rope(q, cos[pos:pos + 1], sin[pos:pos + 1]), apply_rope(k, cos[pos:pos + 1], sin[pos:pos + 1])
        cache[0][:, :, pos:pos + 1] = k
        cache[1][:, :, pos:pos + 1] = v
        k, v = cache[0][:, :, :pos + 1], cache[1][:, :, :pos + 1]
        if self.kv != self.h:
            k = k.repeat_interleave(self.h // self.kv, dim=1)
            v = v.repeat_interleave(self.h // self.kv, dim=1)
        if self.impl == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v)
        else:
            a = torch.softmax((q @ k.transpose(-2, -1)) / math.sqrt(self.dh), dim=-1)
            o = a @ v
        return self.wo(o.transpose(1, 2).reshape(1, 1, self.h * self.dh))

    def forward(self, x, cos, sin, causal):
        B, T, d = x.shape
        q = self.wq(x).view(B, T, self.h, self.dh).transpose(1, 2)
        k = self.wk(x).view(B, T, self.kv, self.dh).transpose(1, 2)
        v = self.wv(x).view(B, T, self.kv, self.dh).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.kv != self.h:  # grouped-query attention: each KV head serves h / kv query heads
            k = k.repeat_interleave(self.h // self.kv, dim=1)
            v = v.repeat_interleave(self.h // self.kv, dim=1)
        if self.impl == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(self.dh)
            s = s.masked_fill(causal, float("-inf"))
            a = torch.softmax(s.float(), dim=-1).to(v.dtype)  # float32 softmax (no-ops in fp32)
            o = a @ v
        return self.wo(o.transpose(1, 2).reshape(B, T, d))


class SwiGLU(nn.Module):
    def __init__(self, d, ffn):
        super().__init__()
        self.w_gate = nn.Linear(d, ffn, bias=False)
        self.w_up = nn.Linear(d, ffn, bias=False)
        self.w_down = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    def __init__(self, d, n_heads, ffn, attn_impl, kv_heads=None):
        super().__init__()
        self.norm1, self.attn = RMSNorm(d), Attention(d, n_heads, attn_impl, kv_heads)
        self.norm2, self.mlp = RMSNorm(d), SwiGLU(d, ffn)

    def forward(self, x, cos, sin, causal):
        x = x + self.attn(self.norm1(x), cos, sin, causal)
        return x + self.mlp(self.norm2(x))

    def decode(self, x, cos, sin, cache, pos):
        x = x + self.attn.decode(self.norm1(x), cos, sin, cache, pos)
        return x + self.mlp(self.norm2(x))


class LM(nn.Module):
    def __init__(self, vocab, d, n_layers, n_heads, ffn, ctx, attn_impl, kv_heads=None,
                 tied=False, rope_base=10000.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, n_heads, ffn, attn_impl, kv_heads)
                                    for _ in range(n_layers))
        self.norm_f = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        cos, sin = rope_tables(ctx, d // n_heads, rope_base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("causal", torch.triu(torch.ones(ctx, ctx, dtype=torch.bool), 1),
                             persistent=False)
        std = math.sqrt(2.0 / (5.0 * d))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, std)
        if tied:
            self.head.weight = self.embed.weight

    def decode(self, tokens):
        """Feed tokens (n,) one at a time through a dense KV cache (batch 1); the last logits."""
        kv = self.blocks[0].attn.kv
        dh = self.cos.shape[1]
        dev = tokens.device
        caches = [[torch.empty(1, kv, len(tokens), dh, device=dev),
                   torch.empty(1, kv, len(tokens), dh, device=dev)]
                  for _ in self.blocks]
        for pos, tok in enumerate(tokens.tolist()):
            x = self.embed(torch.tensor([[tok]], device=dev))
            for blk, cache in zip(self.blocks, caches):
                x = blk.decode(x, self.cos, self.sin, cache, pos)
            logits = self.head(self.norm_f(x))
            logits[0, 0, 0].item()  # read back, as stream-eval reads every step's logits
        return logits

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embed(tokens)
        cos, sin, causal = self.cos[:T], self.sin[:T], self.causal[:T, :T]
        for blk in self.blocks:
            x = blk(x, cos, sin, causal)
        return self.head(self.norm_f(x))


def cpu_peak_gflops():
    """Same estimate as sinklab's bench: cores x MHz x FLOP/cycle from /proc/cpuinfo."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        info = ""
    cores = len(os.sched_getaffinity(0))  # the cores this process may run on (as sinklab's)
    mhz = 2000.0
    for line in info.splitlines():
        if line.startswith("cpu MHz"):
            try:
                mhz = float(line.split(":")[1])
            except ValueError:
                pass
            break
    flags = next((l for l in info.splitlines() if l.startswith("flags")), "")
    per_cycle = 64.0 if " avx512f" in flags else 32.0 if (" fma" in flags and " avx2" in flags) else 8.0
    return cores * mhz / 1000.0 * per_cycle, f"{cores} cores x {mhz:.0f} MHz x {per_cycle:.0f} FLOP/cycle (from /proc/cpuinfo)"


def cpu_ticks():
    """(busy, steal) seconds since boot over all CPUs from /proc/stat; (nan, nan) elsewhere."""
    try:
        f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    except (OSError, ValueError):
        return math.nan, math.nan
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq = f[:7]
    steal = f[7] if len(f) > 7 else 0
    return (user + nice + system + irq + softirq) / hz, steal / hz


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=384)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30, help="steps per timed round")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads (default: PyTorch's own choice, one per core)")
    ap.add_argument("--kv-heads", type=int, default=None, help="grouped-query attention")
    ap.add_argument("--tied", action="store_true", help="head = embedding")
    ap.add_argument("--rope-base", type=float, default=10000.0)
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model (forward and backward through inductor)")
    ap.add_argument("--compile-loss", action="store_true",
                    help="with --compile: compile the model and the cross-entropy as one function "
                         "(the logits never leave the compiled graph), as a careful user does")
    ap.add_argument("--optimizer", choices=["foreach", "fused"], default=None,
                    help="AdamW implementation (default: foreach in eager, fused with --compile)")
    ap.add_argument("--mode", choices=["train", "forward", "decode"], default="train",
                    help="train: a full training step; forward: inference (no grad), logits; "
                         "decode: one stream of --decode tokens fed one at a time through a KV cache")
    ap.add_argument("--decode", type=int, default=256, help="tokens per decoded stream (--mode decode)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--attn", choices=["manual", "sdpa"], default="manual")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: torch.autocast around forward and loss (mixed precision)")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 tensor cores for fp32 CUDA matmuls")
    ap.add_argument("--peak-gflops", type=float, default=None, help="override the CPU peak estimate for MFU")
    ap.add_argument("--json", action="store_true", help="print one JSON line with the results")
    args = ap.parse_args()
    assert args.d_model % args.heads == 0 and (args.d_model // args.heads) % 2 == 0

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_torch: --device cuda but torch.cuda.is_available() is False "
                         f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    if args.device == "cuda":
        if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch >= 2.9
            torch.backends.cuda.matmul.fp32_precision = "tf32" if args.tf32 else "ieee"
        else:
            torch.backends.cuda.matmul.allow_tf32 = args.tf32
    dev = torch.device(args.device)
    autocast = torch.autocast(device_type=args.device, dtype=torch.bfloat16,
                              enabled=args.dtype == "bf16")
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    torch.manual_seed(args.seed)
    B, T, V, d, L = args.batch, args.ctx, args.vocab, args.d_model, args.layers
    model = LM(V, d, L, args.heads, args.ffn, T, args.attn, args.kv_heads, args.tied,
               args.rope_base).to(dev)
    model.train(args.mode == "train")
    params = list(model.parameters())
    optimizer = args.optimizer or ("fused" if args.compile else "foreach")
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=args.wd,
                            **({"fused": True} if optimizer == "fused" else {"foreach": True}))
    run = torch.compile(model) if args.compile else model
    if args.compile_loss and not args.compile:
        raise SystemExit("bench_torch: --compile-loss needs --compile")

    def model_loss(inputs, targets):
        return F.cross_entropy(model(inputs).reshape(-1, V), targets.reshape(-1))

    train_loss = torch.compile(model_loss) if args.compile_loss else None

    gen = torch.Generator().manual_seed(args.seed)
    batch = torch.randint(2, V, (B, T + 1), generator=gen)
    batch = batch.to(dev)
    inputs, targets = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()

    stream = batch[0, :args.decode].contiguous()

    def step():
        if args.mode == "decode":
            with torch.inference_mode(), autocast:
                return run.decode(stream)[0, -1, 0].item()
        if args.mode == "forward":
            with torch.inference_mode(), autocast:
                return run(inputs)[0, -1, 0].item()
        with autocast:
            if train_loss is not None:
                loss = train_loss(inputs, targets)
            else:
                logits = run(inputs)
                loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad()
        return loss.item()

    first_loss = None
    for _ in range(args.warmup):
        l = step()
        first_loss = l if first_loss is None else first_loss
    rounds, last_loss, other = [], None, []
    for _ in range(args.rounds):
        busy0, steal0 = cpu_ticks()
        own0 = sum(os.times()[:2])
        sync()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            last_loss = step()
        sync()
        wall = time.perf_counter() - t0
        per_step = args.decode if args.mode == "decode" else B * T
        rounds.append(per_step * args.steps / wall)
        busy1, steal1 = cpu_ticks()
        own = sum(os.times()[:2]) - own0
        # cores kept busy by other processes (and stolen by the hypervisor) during the round
        other.append(max(0.0, (busy1 - busy0 - own) + (steal1 - steal0)) / wall)
    median = sorted(rounds)[len(rounds) // 2]

    n_params = sum(p.numel() for p in params)
    # the head's matmul counts, also when it shares the embedding's weights
    n_nonemb = n_params - model.embed.weight.numel() + (V * d if args.tied else 0)
    # a training step is 3 forward passes' worth (forward, and backward for inputs and weights)
    passes = 3.0 if args.mode == "train" else 1.0
    attn_len = (args.decode + 1) / 2.0 if args.mode == "decode" else T  # decode: mean cache length
    flops_per_token = passes * (2.0 * n_nonemb + 4.0 * L * attn_len * d)
    achieved = median * flops_per_token / 1e9
    if args.peak_gflops:
        peak, peak_source = args.peak_gflops, "--peak-gflops"
    elif args.device == "cpu":
        peak, peak_source = cpu_peak_gflops()
    else:
        peak, peak_source = None, "unknown (pass --peak-gflops)"
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    where = args.device
    if args.device == "cuda":
        where = f"cuda ({torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda})"
    res = {
        "impl": f"torch {torch.__version__} "
                f"{('compile model+loss' if args.compile_loss else 'compile') if args.compile else 'eager'} {where}, "
                f"dtype={args.dtype}{' tf32' if args.tf32 else ''}, attn={args.attn}, "
                f"adamw={optimizer}, mode={args.mode}",
        "device": args.device,
        "dtype": args.dtype,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)"),
        "params": n_params,
        "non_embedding_params": n_nonemb,
        "batch": B,
        "ctx": T,
        "steps_per_round": args.steps,
        "warmup": args.warmup,
        "rounds_tokens_per_s": rounds,
        "median_tokens_per_s": median,
        "flops_per_token": flops_per_token,
        "achieved_gflops": achieved,
        "peak_gflops": peak,
        "peak_source": peak_source,
        "mfu": achieved / peak if peak else None,
        "peak_rss_mib": rss_mib,
        "gpu_peak_allocated_mib": (torch.cuda.max_memory_allocated() / 2**20
                                   if args.device == "cuda" else None),
        "threads": torch.get_num_threads(),
        "loss_first": first_loss,
        "loss_last": last_loss,
        "loadavg": os.getloadavg(),
        "other_busy_cores_per_round": other,
    }
    if args.json:
        print(json.dumps(res))
        return
    print(f"{res['impl']}, {res['threads']} threads, OMP_WAIT_POLICY {res['omp_wait_policy']}")
    print(f"model: V={V} d={d} L={L} H={args.heads} ffn={args.ffn} T={T} B={B}; "
          f"params {n_params:,} (non-embedding {n_nonemb:,})")
    print(f"FLOPs/token = 6*N + 12*L*T*d = 6*{n_nonemb} + 12*{L}*{T}*{d} = {flops_per_token:,.0f}")
    print(f"loss: first warmup step {first_loss:.4f}, last step {last_loss:.4f}")
    for i, r in enumerate(rounds):
        shape = f"1 stream of {args.decode}" if args.mode == "decode" else f"{B}x{T}"
        print(f"round {i + 1}: {r:,.0f} tokens/s ({args.steps} steps of {shape}); "
              f"other processes kept {other[i]:.2f} of {os.cpu_count()} cores busy")
    mfu = f"MFU {100 * achieved / peak:.1f}% of {peak:.0f} GFLOP/s" if peak else "MFU not known"
    print(f"median: {median:,.0f} tokens/s = {achieved:.2f} GFLOP/s; {mfu} ({peak_source})")
    print(f"peak RSS {rss_mib:.0f} MiB; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
