#!/usr/bin/env python3
"""Independent NumPy reference for Hugging Face checkpoints of the LLaMA family, GPT-2 and GPT-NeoX.

Golden source for sinklab's HF importer (and for checking its LLaMA-style exporter). Nothing here
imports sinklab, PyTorch or transformers: the forwards are written from the architectures'
definitions (cross-read against transformers' modeling_llama / modeling_mistral / modeling_qwen2 /
modeling_gpt2 / modeling_gpt_neox and their configuration classes) and run in float64.

Usage
-----
    python scripts/reference_hf.py make OUT_DIR            # tiny random HF dirs + OUT_DIR/expected.json
    python scripts/reference_hf.py forward MODEL_DIR --ids 1,2,3 [--greedy 8]
    python scripts/reference_hf.py check-export MODEL_DIR EXPECTED [--case NAME] [--ids ...]
           [--atol 1e-4] [--rtol 1e-4] [--strict-names]
        EXPECTED is (a) a JSON written by `forward` ({"ids", "logits"}), (b) OUT_DIR/expected.json
        (pick the case with --case), or (c) another HF model directory (reference logits are then
        computed from it on --ids, default 12 fixed ids). Exit status 0 = match, 1 = mismatch.
    python scripts/reference_hf.py selftest [--keep DIR]  # internal consistency checks + determinism

Only numpy, safetensors(.numpy), tokenizers, json and the standard library are used.

Cases written by `make` (d_model 64, 2 layers, ctx 64, vocab ~300, weights std ~0.1-0.3)
--------------------------------------------------------------------------------------
  llama           LlamaForCausalLM, 4 heads / 2 kv heads (GQA), head_dim 16, SwiGLU (I=176),
                  RMSNorm eps 1e-5, rope_theta 1e4, untied lm_head, no "head_dim" key in config.
  llama_tied      SmolLM-style: tie_word_embeddings true, lm_head.weight ABSENT from the file,
                  4 heads / 4 kv heads (MHA), explicit "head_dim": 16.
  mistral         MistralForCausalLM, 4 heads / 1 kv head (MQA), sliding_window 4096 (> ctx, no-op),
                  explicit "head_dim", untied.
  qwen2           Qwen2ForCausalLM, biases on q/k/v ONLY (o_proj and MLP have none), rope_theta 1e6,
                  RMSNorm eps 1e-6, tied (lm_head absent), use_sliding_window false with a
                  (to-be-ignored) sliding_window 32768 as in real Qwen2.5 configs.
  gpt2            GPT2LMHeadModel as written by save_pretrained: "transformer." prefix, Conv1D
                  weights [in, out], fused c_attn, learned positions, LayerNorm, gelu_new, tied head.
  pythia          GPTNeoXForCausalLM: parallel residual, rotary_pct 0.25 (4 of 16 dims rotate),
                  fused query_key_value interleaved per head, LayerNorm, exact-erf gelu, untied
                  embed_out, biases everywhere.
  llama_sharded   EXACTLY the llama weights, split over model-00001-of-00002.safetensors and
                  model-00002-of-00002.safetensors + model.safetensors.index.json (logits identical).
  Extra robustness cases:
  llama_bf16      the llama weights rounded to bfloat16 and stored as BF16 (torch_dtype bfloat16);
                  reference logits are computed from the stored bf16 values (upcast exactly).
  mistral_headdim head_dim 32 != hidden_size / num_attention_heads (= 16): q_proj [128, 64],
                  k/v_proj [64, 64], o_proj [64, 128] (Mistral-Nemo / Qwen3 style).
  gpt2_hub        the gpt2 weights laid out like openai-community/gpt2's model.safetensors: NO
                  "transformer." prefix, plus non-parameter buffers h.N.attn.bias ([1,1,n_pos,n_pos]
                  lower-triangular ones, F32) to ignore; config has no tie_word_embeddings key
                  (GPT-2 default is tied). Logits identical to gpt2.
  pythia_buffers  the pythia weights plus the buffers old NeoX checkpoints carry (attention.bias BOOL
                  [1,1,n_pos,n_pos], attention.masked_bias F32 [], attention.rotary_emb.inv_freq F32
                  [rot/2]) that must be ignored. Logits identical to pythia.
  neox_sequential GPT-NeoX with use_parallel_residual false and rotary_pct 0.5.

Conventions (all verified by `selftest` with a second, loop-based implementation)
------------------------------------------------------------------------------
* Linear layers (LLaMA family, NeoX): PyTorch nn.Linear layout W [out, in]; y = x @ W.T + b.
* GPT-2 Conv1D: W [in, out]; y = x @ W + b (no transpose). c_attn.weight [d, 3d], its output
  columns are [q | k | v] (each d wide, split in that order), head h of each owns columns
  h*hd .. (h+1)*hd. c_proj [d, d], mlp.c_fc [d, 4d], mlp.c_proj [4d, d].
* NeoX query_key_value.weight [3d, d] / bias [3d]: output row r belongs to head h = r // (3*hd),
  part s = (r % (3*hd)) // hd (0 = q, 1 = k, 2 = v), dim j = r % hd. I.e. rows viewed as
  [heads, 3, head_dim]: Wq[h*hd + j] = Wqkv[h*3*hd + j], Wk[h*hd + j] = Wqkv[h*3*hd + hd + j],
  Wv[h*hd + j] = Wqkv[h*3*hd + 2*hd + j] (same for the bias). NOT [q-block | k-block | v-block].
* RoPE ("rotate halves", HF/NeoX convention, NOT interleaved pairs): over the first `rot` dims of
  a head, dim i (i < rot/2) is paired with dim i + rot/2; inv_freq[i] = theta^(-2i/rot);
  angle = pos * inv_freq[i]; x'[i] = x[i] cos - x[i+rot/2] sin; x'[i+rot/2] = x[i+rot/2] cos +
  x[i] sin. LLaMA family: rot = head_dim. NeoX: rot = int(head_dim * rotary_pct) and dims
  rot..head_dim pass through unchanged. Positions are 0..T-1. Applied to q and k only.
  (HF computes inv_freq/cos/sin in float32; this reference uses float64.)
* Attention: scores = q.k / sqrt(head_dim) (GPT-2: only if scale_attn_weights, default true;
  additionally / (layer_idx + 1) if scale_attn_by_inverse_layer_idx); causal mask: query i sees
  key j iff j <= i (and, when a sliding window W applies, i - j < W); softmax over visible keys.
* GQA: query head h uses kv head h // (num_attention_heads / num_key_value_heads)
  (HF repeat_kv = repeat_interleave of kv heads).
* RMSNorm: x / sqrt(mean(x^2) + eps) * weight (no bias, no mean subtraction); eps = rms_norm_eps.
* LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias, biased (population) variance;
  eps = layer_norm_epsilon (GPT-2) / layer_norm_eps (NeoX), both default 1e-5.
* Activations: silu(x) = x * sigmoid(x) (LLaMA "silu"); NeoX "gelu" = exact 0.5 x (1 + erf(x/sqrt2));
  GPT-2 "gelu_new" = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (gelu_pytorch_tanh and
  gelu_fast are the same function).
* LLaMA block: h = x + o_proj(attn(rope(q,k), v)) of input_layernorm(x);
  out = h + down_proj(silu(gate_proj(n)) * up_proj(n)) with n = post_attention_layernorm(h).
  Final model.norm, then lm_head. Qwen2: q/k/v biases only. Llama/Mistral: attention_bias adds
  biases to q,k,v AND o; mlp_bias to gate/up/down (both false here).
* GPT-2 block (pre-LN): x = wte[ids] + wpe[pos]; x += c_proj(attn(c_attn(ln_1(x))));
  x += mlp.c_proj(gelu_new(mlp.c_fc(ln_2(x)))); ln_f; logits = x @ wte.T.
* NeoX block: a = attention(input_layernorm(x)); parallel: x = x + a + mlp(post_attention_layernorm(x));
  sequential: y = x + a; x = y + mlp(post_attention_layernorm(y)). mlp = dense_4h_to_h(gelu(dense_h_to_4h)).
  final_layer_norm, logits = embed_out(x) (no bias).
* Tie rules: tie_word_embeddings true => output matrix = input embedding matrix; the checkpoint
  normally has no lm_head.weight (if present it is ignored, as HF re-ties it). Defaults when the
  key is missing: GPT-2 true; llama / mistral / qwen2 / gpt_neox false.
* Mean NLL = mean over t = 0..T-2 of -log softmax(logits[t])[ids[t+1]] (natural log).
* Greedy: repeatedly append argmax of the last row (argmax over all config.vocab_size logits,
  ties -> lowest id), re-running the full forward each step (no KV cache), 8 new tokens.
* BF16 files: bf16 = upper 16 bits of an f32 (stored little-endian); written with round-to-nearest-
  even from the f32 weights, decoded exactly.
"""
import argparse
import hashlib
import json
import math
import shutil
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file as st_load_file
from safetensors.numpy import save_file as st_save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

FORMAT_VERSION = 1
SEQ_LEN = 12
N_GREEDY = 8
TRANSFORMERS_VERSION = "4.44.2"  # only written into config.json, as save_pretrained does

# --------------------------------------------------------------------------------------------
# safetensors I/O (own reader so BF16 works without torch; F32/F16 written with safetensors)
# --------------------------------------------------------------------------------------------

_ST_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}


def read_safetensors(path):
    """Return ({name: ndarray}, {name: dtype_str}, metadata). BF16 is decoded to float32 exactly."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None)
    base = 8 + n
    out, dtypes = {}, {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        buf = raw[base + b: base + e]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "BF16":
            bits = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32).reshape(shape)
        else:
            arr = np.frombuffer(buf, dtype=_ST_DTYPES[dt]).reshape(shape).copy()
        out[name] = arr
        dtypes[name] = dt
    return out, dtypes, meta


def f32_to_bf16_bits(x):
    """Round-to-nearest-even float32 -> bfloat16 bit pattern (what torch's .to(bfloat16) does)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_round(x):
    return (f32_to_bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


def write_safetensors_raw(path, tensors, dtypes, metadata):
    """Minimal safetensors writer (used for BF16). tensors: name -> ndarray, dtypes: name -> str."""
    header, chunks, off = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name]
        if dtypes[name] == "BF16":
            data = f32_to_bf16_bits(a).astype("<u2").tobytes()
        else:
            data = np.ascontiguousarray(a, dtype=_ST_DTYPES[dtypes[name]]).tobytes()
        header[name] = {"dtype": dtypes[name], "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        chunks.append(data)
        off += len(data)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)


def load_hf_weights(model_dir):
    """All tensors of an HF dir: model.safetensors, or the shards named by model.safetensors.index.json."""
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        wm = json.loads(index.read_text())["weight_map"]
        files = sorted(set(wm.values()))
    elif (model_dir / "model.safetensors").exists():
        wm, files = None, ["model.safetensors"]
    else:
        raise FileNotFoundError(f"{model_dir}: no model.safetensors or model.safetensors.index.json")
    tensors, dtypes = {}, {}
    for fname in files:
        t, d, _ = read_safetensors(model_dir / fname)
        for k in t:
            if k in tensors:
                raise ValueError(f"tensor {k} appears in more than one shard")
            if wm is not None and wm.get(k) != fname:
                raise ValueError(f"tensor {k} found in {fname} but index maps it to {wm.get(k)}")
        tensors.update(t)
        dtypes.update(d)
    if wm is not None:
        missing = set(wm) - set(tensors)
        if missing:
            raise ValueError(f"index names tensors not present in shards: {sorted(missing)[:5]}")
    return tensors, dtypes


# --------------------------------------------------------------------------------------------
# Config normalisation
# --------------------------------------------------------------------------------------------

LLAMA_FAMILY = ("llama", "mistral", "qwen2")


def _rope_theta(cfg, default=10000.0):
    rp = cfg.get("rope_parameters") or {}
    for v in (cfg.get("rope_theta"), rp.get("rope_theta"), cfg.get("rotary_emb_base")):
        if v is not None:
            return float(v)
    return float(default)


def _check_rope_scaling(cfg):
    rs = cfg.get("rope_scaling")
    rp = cfg.get("rope_parameters") or {}
    kind = (rs or {}).get("rope_type", (rs or {}).get("type")) if rs else rp.get("rope_type", "default")
    if kind not in (None, "default"):
        raise NotImplementedError(f"rope scaling {kind!r} is not supported by this reference")


def normalize_config(cfg):
    """HF config.json -> flat architecture spec used by both forwards."""
    mt = cfg["model_type"]
    a = {"model_type": mt, "vocab": int(cfg["vocab_size"])}
    if mt in LLAMA_FAMILY:
        _check_rope_scaling(cfg)
        d, H = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        kv = cfg.get("num_key_value_heads") or H
        hd = cfg.get("head_dim") or d // H
        sw = cfg.get("sliding_window")
        if mt == "qwen2" and not cfg.get("use_sliding_window", False):
            sw = None
        if mt == "qwen2" and sw is not None:
            raise NotImplementedError("qwen2 with use_sliding_window=true (per-layer windows) not supported")
        attn_bias = bool(cfg.get("attention_bias", False))
        a.update(
            family="llama", d=d, L=int(cfg["num_hidden_layers"]), H=H, KV=int(kv), hd=int(hd),
            I=int(cfg["intermediate_size"]), norm="rms", eps=float(cfg.get("rms_norm_eps", 1e-6)),
            pos="rope", theta=_rope_theta(cfg), rot=int(hd), act=cfg.get("hidden_act", "silu"),
            mlp="gated", parallel=False, tied=bool(cfg.get("tie_word_embeddings", False)),
            sliding_window=sw, n_pos=int(cfg.get("max_position_embeddings", 2048)),
            qkv_bias=(mt == "qwen2") or attn_bias, o_bias=attn_bias and mt != "qwen2",
            mlp_bias=bool(cfg.get("mlp_bias", False)) and mt == "llama",
            attn_scale_layer=False,
        )
    elif mt == "gpt2":
        d = int(cfg.get("n_embd", cfg.get("hidden_size", 768)))
        a.update(
            family="gpt2", d=d, L=int(cfg.get("n_layer", cfg.get("num_hidden_layers", 12))),
            H=int(cfg.get("n_head", cfg.get("num_attention_heads", 12))),
            I=int(cfg.get("n_inner") or 4 * d), norm="ln", eps=float(cfg.get("layer_norm_epsilon", 1e-5)),
            pos="learned", theta=None, act=cfg.get("activation_function", "gelu_new"), mlp="plain",
            parallel=False, tied=bool(cfg.get("tie_word_embeddings", True)), sliding_window=None,
            n_pos=int(cfg.get("n_positions", cfg.get("max_position_embeddings", 1024))),
            qkv_bias=True, o_bias=True, mlp_bias=True,
            attn_scale_layer=bool(cfg.get("scale_attn_by_inverse_layer_idx", False)),
        )
        a["KV"] = a["H"]
        a["hd"] = d // a["H"]
        a["rot"] = 0
        if not cfg.get("scale_attn_weights", True):
            a["no_scale"] = True
    elif mt == "gpt_neox":
        _check_rope_scaling(cfg)
        d, H = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        hd = d // H
        rp = cfg.get("rope_parameters") or {}
        pct = cfg.get("rotary_pct", rp.get("partial_rotary_factor", 0.25))
        bias = bool(cfg.get("attention_bias", True))
        a.update(
            family="neox", d=d, L=int(cfg["num_hidden_layers"]), H=H, KV=H, hd=hd,
            I=int(cfg["intermediate_size"]), norm="ln", eps=float(cfg.get("layer_norm_eps", 1e-5)),
            pos="rope", theta=_rope_theta(cfg), rot=int(hd * float(pct)), act=cfg.get("hidden_act", "gelu"),
            mlp="plain", parallel=bool(cfg.get("use_parallel_residual", True)),
            tied=bool(cfg.get("tie_word_embeddings", False)), sliding_window=None,
            n_pos=int(cfg.get("max_position_embeddings", 2048)), qkv_bias=bias, o_bias=bias,
            mlp_bias=True, attn_scale_layer=False,
        )
    else:
        raise NotImplementedError(f"model_type {mt!r}")
    if a["H"] % a["KV"]:
        raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
    if a["rot"] % 2:
        raise ValueError("rotary dims must be even")
    return a


# --------------------------------------------------------------------------------------------
# HF tensor names, packing (canonical split params -> HF layout) and unpacking (HF -> canonical)
# --------------------------------------------------------------------------------------------
# Canonical params: embed [V,d], pos [n_pos,d] | None, lnf_w/lnf_b, head [V,d] | None (tied) and per layer
# ln1_w, ln1_b, ln2_w, ln2_b, wq [H*hd,d], bq, wk [KV*hd,d], bk, wv, bv, wo [d,H*hd], bo,
# w_gate [I,d] (gated only), b_gate, w_up [I,d], b_up, w_down [d,I], b_down   (bias None when absent).

BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".attention.bias", ".attention.masked_bias",
                   ".rotary_emb.inv_freq")


def _gpt2_prefix(tensors):
    return "transformer." if any(k.startswith("transformer.") for k in tensors) else ""


def expected_tensor_shapes(a, gpt2_prefix="transformer."):
    """name -> shape of every parameter an HF checkpoint of spec `a` must contain (buffers excluded)."""
    d, V, I, H, KV, hd, L = a["d"], a["vocab"], a["I"], a["H"], a["KV"], a["hd"], a["L"]
    s = {}
    if a["family"] == "llama":
        s["model.embed_tokens.weight"] = (V, d)
        for i in range(L):
            p = f"model.layers.{i}."
            s[p + "input_layernorm.weight"] = (d,)
            s[p + "post_attention_layernorm.weight"] = (d,)
            s[p + "self_attn.q_proj.weight"] = (H * hd, d)
            s[p + "self_attn.k_proj.weight"] = (KV * hd, d)
            s[p + "self_attn.v_proj.weight"] = (KV * hd, d)
            s[p + "self_attn.o_proj.weight"] = (d, H * hd)
            if a["qkv_bias"]:
                s[p + "self_attn.q_proj.bias"] = (H * hd,)
                s[p + "self_attn.k_proj.bias"] = (KV * hd,)
                s[p + "self_attn.v_proj.bias"] = (KV * hd,)
            if a["o_bias"]:
                s[p + "self_attn.o_proj.bias"] = (d,)
            s[p + "mlp.gate_proj.weight"] = (I, d)
            s[p + "mlp.up_proj.weight"] = (I, d)
            s[p + "mlp.down_proj.weight"] = (d, I)
            if a["mlp_bias"]:
                s[p + "mlp.gate_proj.bias"] = (I,)
                s[p + "mlp.up_proj.bias"] = (I,)
                s[p + "mlp.down_proj.bias"] = (d,)
        s["model.norm.weight"] = (d,)
        if not a["tied"]:
            s["lm_head.weight"] = (V, d)
    elif a["family"] == "gpt2":
        P = gpt2_prefix
        s[P + "wte.weight"] = (V, d)
        s[P + "wpe.weight"] = (a["n_pos"], d)
        for i in range(L):
            p = f"{P}h.{i}."
            for ln in ("ln_1", "ln_2"):
                s[p + ln + ".weight"] = (d,)
                s[p + ln + ".bias"] = (d,)
            s[p + "attn.c_attn.weight"] = (d, 3 * d)
            s[p + "attn.c_attn.bias"] = (3 * d,)
            s[p + "attn.c_proj.weight"] = (d, d)
            s[p + "attn.c_proj.bias"] = (d,)
            s[p + "mlp.c_fc.weight"] = (d, I)
            s[p + "mlp.c_fc.bias"] = (I,)
            s[p + "mlp.c_proj.weight"] = (I, d)
            s[p + "mlp.c_proj.bias"] = (d,)
        s[P + "ln_f.weight"] = (d,)
        s[P + "ln_f.bias"] = (d,)
        if not a["tied"]:
            s["lm_head.weight"] = (V, d)
    else:
        s["gpt_neox.embed_in.weight"] = (V, d)
        for i in range(L):
            p = f"gpt_neox.layers.{i}."
            for ln in ("input_layernorm", "post_attention_layernorm"):
                s[p + ln + ".weight"] = (d,)
                s[p + ln + ".bias"] = (d,)
            s[p + "attention.query_key_value.weight"] = (3 * d, d)
            s[p + "attention.dense.weight"] = (d, d)
            if a["qkv_bias"]:
                s[p + "attention.query_key_value.bias"] = (3 * d,)
                s[p + "attention.dense.bias"] = (d,)
            s[p + "mlp.dense_h_to_4h.weight"] = (I, d)
            s[p + "mlp.dense_h_to_4h.bias"] = (I,)
            s[p + "mlp.dense_4h_to_h.weight"] = (d, I)
            s[p + "mlp.dense_4h_to_h.bias"] = (d,)
        s["gpt_neox.final_layer_norm.weight"] = (d,)
        s["gpt_neox.final_layer_norm.bias"] = (d,)
        if not a["tied"]:
            s["embed_out.weight"] = (V, d)
    return s


def neox_fuse_qkv(wq, wk, wv, H):
    """Separate [H*hd, ...] q/k/v (weights or biases) -> NeoX fused rows viewed as [H, 3, hd, ...]."""
    hd = wq.shape[0] // H
    rest = wq.shape[1:]
    parts = [w.reshape((H, 1, hd) + rest) for w in (wq, wk, wv)]
    return np.concatenate(parts, axis=1).reshape((3 * H * hd,) + rest)


def neox_split_qkv(wqkv, H):
    hd = wqkv.shape[0] // (3 * H)
    rest = wqkv.shape[1:]
    v = wqkv.reshape((H, 3, hd) + rest)
    return tuple(np.ascontiguousarray(v[:, s].reshape((H * hd,) + rest)) for s in range(3))


def pack_hf(a, P, gpt2_prefix="transformer."):
    """Canonical params -> {HF name: float32 array} (HF layouts)."""
    t = {}
    f = lambda x: np.ascontiguousarray(x, dtype=np.float32)  # noqa: E731
    if a["family"] == "llama":
        t["model.embed_tokens.weight"] = f(P["embed"])
        for i, l in enumerate(P["layers"]):
            p = f"model.layers.{i}."
            t[p + "input_layernorm.weight"] = f(l["ln1_w"])
            t[p + "post_attention_layernorm.weight"] = f(l["ln2_w"])
            for n, k in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "o")):
                t[p + f"self_attn.{n}_proj.weight"] = f(l["w" + k])
                if l.get("b" + k) is not None:
                    t[p + f"self_attn.{n}_proj.bias"] = f(l["b" + k])
            for n in ("gate", "up", "down"):
                t[p + f"mlp.{n}_proj.weight"] = f(l["w_" + n])
                if l.get("b_" + n) is not None:
                    t[p + f"mlp.{n}_proj.bias"] = f(l["b_" + n])
        t["model.norm.weight"] = f(P["lnf_w"])
        if not a["tied"]:
            t["lm_head.weight"] = f(P["head"])
    elif a["family"] == "gpt2":
        Q = gpt2_prefix
        t[Q + "wte.weight"] = f(P["embed"])
        t[Q + "wpe.weight"] = f(P["pos"])
        for i, l in enumerate(P["layers"]):
            p = f"{Q}h.{i}."
            t[p + "ln_1.weight"], t[p + "ln_1.bias"] = f(l["ln1_w"]), f(l["ln1_b"])
            t[p + "ln_2.weight"], t[p + "ln_2.bias"] = f(l["ln2_w"]), f(l["ln2_b"])
            # Conv1D stores [in, out]: transpose of the nn.Linear weight; q|k|v concatenated on out.
            t[p + "attn.c_attn.weight"] = f(np.concatenate([l["wq"].T, l["wk"].T, l["wv"].T], axis=1))
            t[p + "attn.c_attn.bias"] = f(np.concatenate([l["bq"], l["bk"], l["bv"]]))
            t[p + "attn.c_proj.weight"] = f(l["wo"].T)
            t[p + "attn.c_proj.bias"] = f(l["bo"])
            t[p + "mlp.c_fc.weight"] = f(l["w_up"].T)
            t[p + "mlp.c_fc.bias"] = f(l["b_up"])
            t[p + "mlp.c_proj.weight"] = f(l["w_down"].T)
            t[p + "mlp.c_proj.bias"] = f(l["b_down"])
        t[Q + "ln_f.weight"], t[Q + "ln_f.bias"] = f(P["lnf_w"]), f(P["lnf_b"])
        if not a["tied"]:
            t["lm_head.weight"] = f(P["head"])
    else:
        H = a["H"]
        t["gpt_neox.embed_in.weight"] = f(P["embed"])
        for i, l in enumerate(P["layers"]):
            p = f"gpt_neox.layers.{i}."
            t[p + "input_layernorm.weight"], t[p + "input_layernorm.bias"] = f(l["ln1_w"]), f(l["ln1_b"])
            t[p + "post_attention_layernorm.weight"] = f(l["ln2_w"])
            t[p + "post_attention_layernorm.bias"] = f(l["ln2_b"])
            t[p + "attention.query_key_value.weight"] = f(neox_fuse_qkv(l["wq"], l["wk"], l["wv"], H))
            t[p + "attention.dense.weight"] = f(l["wo"])
            if a["qkv_bias"]:
                t[p + "attention.query_key_value.bias"] = f(neox_fuse_qkv(l["bq"], l["bk"], l["bv"], H))
                t[p + "attention.dense.bias"] = f(l["bo"])
            t[p + "mlp.dense_h_to_4h.weight"], t[p + "mlp.dense_h_to_4h.bias"] = f(l["w_up"]), f(l["b_up"])
            t[p + "mlp.dense_4h_to_h.weight"], t[p + "mlp.dense_4h_to_h.bias"] = f(l["w_down"]), f(l["b_down"])
        t["gpt_neox.final_layer_norm.weight"] = f(P["lnf_w"])
        t["gpt_neox.final_layer_norm.bias"] = f(P["lnf_b"])
        if not a["tied"]:
            t["embed_out.weight"] = f(P["head"])
    return t


def unpack_hf(a, T):
    """{HF name: array} -> canonical params (float64). Inverse of pack_hf; used by the naive forward."""
    g = lambda k: None if k not in T else np.asarray(T[k], dtype=np.float64)  # noqa: E731
    layers = []
    if a["family"] == "llama":
        P = {"embed": g("model.embed_tokens.weight"), "pos": None, "lnf_w": g("model.norm.weight"), "lnf_b": None}
        P["head"] = None if a["tied"] else g("lm_head.weight")
        for i in range(a["L"]):
            p = f"model.layers.{i}."
            l = {"ln1_w": g(p + "input_layernorm.weight"), "ln1_b": None,
                 "ln2_w": g(p + "post_attention_layernorm.weight"), "ln2_b": None}
            for n in "qkvo":
                l["w" + n] = g(p + f"self_attn.{n}_proj.weight")
                l["b" + n] = g(p + f"self_attn.{n}_proj.bias")
            for n in ("gate", "up", "down"):
                l["w_" + n] = g(p + f"mlp.{n}_proj.weight")
                l["b_" + n] = g(p + f"mlp.{n}_proj.bias")
            layers.append(l)
    elif a["family"] == "gpt2":
        Q = _gpt2_prefix(T)
        d = a["d"]
        P = {"embed": g(Q + "wte.weight"), "pos": g(Q + "wpe.weight"),
             "lnf_w": g(Q + "ln_f.weight"), "lnf_b": g(Q + "ln_f.bias")}
        P["head"] = None if a["tied"] else g("lm_head.weight")
        for i in range(a["L"]):
            p = f"{Q}h.{i}."
            W, b = g(p + "attn.c_attn.weight"), g(p + "attn.c_attn.bias")
            l = {"ln1_w": g(p + "ln_1.weight"), "ln1_b": g(p + "ln_1.bias"),
                 "ln2_w": g(p + "ln_2.weight"), "ln2_b": g(p + "ln_2.bias"),
                 "wq": W[:, :d].T.copy(), "wk": W[:, d:2 * d].T.copy(), "wv": W[:, 2 * d:].T.copy(),
                 "bq": b[:d], "bk": b[d:2 * d], "bv": b[2 * d:],
                 "wo": g(p + "attn.c_proj.weight").T.copy(), "bo": g(p + "attn.c_proj.bias"),
                 "w_gate": None, "b_gate": None,
                 "w_up": g(p + "mlp.c_fc.weight").T.copy(), "b_up": g(p + "mlp.c_fc.bias"),
                 "w_down": g(p + "mlp.c_proj.weight").T.copy(), "b_down": g(p + "mlp.c_proj.bias")}
            layers.append(l)
    else:
        H = a["H"]
        P = {"embed": g("gpt_neox.embed_in.weight"), "pos": None,
             "lnf_w": g("gpt_neox.final_layer_norm.weight"), "lnf_b": g("gpt_neox.final_layer_norm.bias")}
        P["head"] = None if a["tied"] else g("embed_out.weight")
        for i in range(a["L"]):
            p = f"gpt_neox.layers.{i}."
            wq, wk, wv = neox_split_qkv(g(p + "attention.query_key_value.weight"), H)
            bqkv = g(p + "attention.query_key_value.bias")
            bq, bk, bv = (None, None, None) if bqkv is None else neox_split_qkv(bqkv, H)
            l = {"ln1_w": g(p + "input_layernorm.weight"), "ln1_b": g(p + "input_layernorm.bias"),
                 "ln2_w": g(p + "post_attention_layernorm.weight"), "ln2_b": g(p + "post_attention_layernorm.bias"),
                 "wq": wq, "wk": wk, "wv": wv, "bq": bq, "bk": bk, "bv": bv,
                 "wo": g(p + "attention.dense.weight"), "bo": g(p + "attention.dense.bias"),
                 "w_gate": None, "b_gate": None,
                 "w_up": g(p + "mlp.dense_h_to_4h.weight"), "b_up": g(p + "mlp.dense_h_to_4h.bias"),
                 "w_down": g(p + "mlp.dense_4h_to_h.weight"), "b_down": g(p + "mlp.dense_4h_to_h.bias")}
            layers.append(l)
    P["layers"] = layers
    return P


def check_tensor_names(a, tensors):
    """(missing, unexpected, shape_mismatch, ignorable) against the HF naming for spec `a`.

    ignorable = known non-parameter buffers (attn.bias, masked_bias, rotary_emb.inv_freq) and, for tied
    models, a stored lm_head.weight copy (HF re-ties it); unexpected = anything else not in the naming."""
    prefix = _gpt2_prefix(tensors) if a["family"] == "gpt2" else ""
    exp = expected_tensor_shapes(a, gpt2_prefix=prefix)
    have = {k: tuple(v.shape) for k, v in tensors.items()}
    missing = sorted(k for k in exp if k not in have)
    tolerated = {"lm_head.weight", "embed_out.weight"} if a["tied"] else set()
    extra = sorted(k for k in have if k not in exp)
    ignorable = [k for k in extra if k in tolerated or k.endswith(BUFFER_SUFFIXES)]
    unexpected = [k for k in extra if k not in ignorable]
    bad = sorted((k, have[k], exp[k]) for k in exp if k in have and have[k] != exp[k])
    return missing, unexpected, bad, ignorable


# --------------------------------------------------------------------------------------------
# Math helpers
# --------------------------------------------------------------------------------------------

_erf = np.frompyfunc(math.erf, 1, 1)


def act_fn(name, x):
    if name in ("silu", "swish"):
        return x / (1.0 + np.exp(-x))
    if name == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "relu":
        return np.maximum(x, 0.0)
    raise NotImplementedError(f"activation {name!r}")


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layernorm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rope_halves(x, pos, rot, theta):
    """x (T, heads, hd); rotate the first `rot` dims, pairing i with i + rot/2."""
    if rot == 0:
        return x
    half = rot // 2
    inv = theta ** (-(2.0 * np.arange(half)) / rot)
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s, rest], axis=-1)


def log_softmax(z):
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


# --------------------------------------------------------------------------------------------
# Forward A: vectorised, straight from the HF tensors (fused c_attn / query_key_value as stored)
# --------------------------------------------------------------------------------------------

def _lin(x, T, name, transpose=True):
    """nn.Linear (W [out,in], transpose=True) or Conv1D (W [in,out], transpose=False), optional bias."""
    W = np.asarray(T[name + ".weight"], dtype=np.float64)
    y = x @ (W.T if transpose else W)
    b = T.get(name + ".bias")
    return y if b is None else y + np.asarray(b, dtype=np.float64)


def _attention(q, k, v, a, layer_idx, return_probs=False):
    """q (T,H,hd), k/v (T,KV,hd) -> (T, H*hd)."""
    Tn, H, hd = q.shape
    grp = H // k.shape[1]
    k = np.repeat(k, grp, axis=1)  # kv head h // grp serves query head h (repeat_interleave)
    v = np.repeat(v, grp, axis=1)
    s = np.einsum("ihd,jhd->hij", q, k)
    if not a.get("no_scale"):
        s = s / math.sqrt(hd)
    if a.get("attn_scale_layer"):
        s = s / float(layer_idx + 1)
    i, j = np.arange(Tn)[:, None], np.arange(Tn)[None, :]
    allowed = j <= i
    if a.get("sliding_window") is not None:
        allowed &= (i - j) < a["sliding_window"]
    s = np.where(allowed[None], s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    o = np.einsum("hij,jhd->ihd", p, v).reshape(Tn, H * hd)
    return (o, p) if return_probs else o


def forward_hf(a, T, ids, return_attn=False):
    """Logits (len(ids), vocab) in float64 from HF-named tensors T."""
    ids = np.asarray(ids, dtype=np.int64)
    Tn = len(ids)
    pos = np.arange(Tn)
    f64 = lambda k: np.asarray(T[k], dtype=np.float64)  # noqa: E731
    H, KV, hd, eps = a["H"], a["KV"], a["hd"], a["eps"]
    probs = []
    if a["family"] == "llama":
        x = f64("model.embed_tokens.weight")[ids]
        for li in range(a["L"]):
            p = f"model.layers.{li}."
            h = rmsnorm(x, f64(p + "input_layernorm.weight"), eps)
            q = _lin(h, T, p + "self_attn.q_proj").reshape(Tn, H, hd)
            k = _lin(h, T, p + "self_attn.k_proj").reshape(Tn, KV, hd)
            v = _lin(h, T, p + "self_attn.v_proj").reshape(Tn, KV, hd)
            q, k = rope_halves(q, pos, a["rot"], a["theta"]), rope_halves(k, pos, a["rot"], a["theta"])
            o, pr = _attention(q, k, v, a, li, return_probs=True)
            probs.append(pr)
            x = x + _lin(o, T, p + "self_attn.o_proj")
            n = rmsnorm(x, f64(p + "post_attention_layernorm.weight"), eps)
            m = act_fn(a["act"], _lin(n, T, p + "mlp.gate_proj")) * _lin(n, T, p + "mlp.up_proj")
            x = x + _lin(m, T, p + "mlp.down_proj")
        x = rmsnorm(x, f64("model.norm.weight"), eps)
        head = f64("model.embed_tokens.weight") if a["tied"] else f64("lm_head.weight")
    elif a["family"] == "gpt2":
        Q = _gpt2_prefix(T)
        d = a["d"]
        if Tn > a["n_pos"]:
            raise ValueError("sequence longer than n_positions")
        x = f64(Q + "wte.weight")[ids] + f64(Q + "wpe.weight")[pos]
        for li in range(a["L"]):
            p = f"{Q}h.{li}."
            h = layernorm(x, f64(p + "ln_1.weight"), f64(p + "ln_1.bias"), eps)
            qkv = _lin(h, T, p + "attn.c_attn", transpose=False)  # (T, 3d): [q | k | v]
            q, k, v = (qkv[:, s * d:(s + 1) * d].reshape(Tn, H, hd) for s in range(3))
            o, pr = _attention(q, k, v, a, li, return_probs=True)
            probs.append(pr)
            x = x + _lin(o, T, p + "attn.c_proj", transpose=False)
            n = layernorm(x, f64(p + "ln_2.weight"), f64(p + "ln_2.bias"), eps)
            x = x + _lin(act_fn(a["act"], _lin(n, T, p + "mlp.c_fc", transpose=False)), T,
                         p + "mlp.c_proj", transpose=False)
        x = layernorm(x, f64(Q + "ln_f.weight"), f64(Q + "ln_f.bias"), eps)
        head = f64(Q + "wte.weight") if a["tied"] else f64("lm_head.weight")
    else:
        x = f64("gpt_neox.embed_in.weight")[ids]
        for li in range(a["L"]):
            p = f"gpt_neox.layers.{li}."
            h = layernorm(x, f64(p + "input_layernorm.weight"), f64(p + "input_layernorm.bias"), eps)
            qkv = _lin(h, T, p + "attention.query_key_value").reshape(Tn, H, 3 * hd)  # per head [q|k|v]
            q, k, v = qkv[..., :hd], qkv[..., hd:2 * hd], qkv[..., 2 * hd:]
            q, k = rope_halves(q, pos, a["rot"], a["theta"]), rope_halves(k, pos, a["rot"], a["theta"])
            o, pr = _attention(q, k, v, a, li, return_probs=True)
            probs.append(pr)
            attn = _lin(o, T, p + "attention.dense")
            ln2 = lambda z: layernorm(z, f64(p + "post_attention_layernorm.weight"),  # noqa: E731
                                      f64(p + "post_attention_layernorm.bias"), eps)
            mlp = lambda z: _lin(act_fn(a["act"], _lin(z, T, p + "mlp.dense_h_to_4h")), T,  # noqa: E731
                                 p + "mlp.dense_4h_to_h")
            if a["parallel"]:
                x = x + attn + mlp(ln2(x))
            else:
                y = x + attn
                x = y + mlp(ln2(y))
        x = layernorm(x, f64("gpt_neox.final_layer_norm.weight"), f64("gpt_neox.final_layer_norm.bias"), eps)
        head = f64("gpt_neox.embed_in.weight") if a["tied"] else f64("embed_out.weight")
    logits = x @ head.T
    return (logits, probs) if return_attn else logits


# --------------------------------------------------------------------------------------------
# Forward B: naive per-position loops on canonical split weights, complex-number RoPE
# --------------------------------------------------------------------------------------------

def forward_naive(a, P, ids):
    ids = list(int(i) for i in ids)
    Tn, H, KV, hd, rot = len(ids), a["H"], a["KV"], a["hd"], a["rot"]
    grp = H // KV

    def norm(v, w, b):
        if a["norm"] == "rms":
            return v * (1.0 / math.sqrt(float(np.dot(v, v)) / len(v) + a["eps"])) * w
        mu = sum(v) / len(v)
        c = v - mu
        return c / math.sqrt(float(np.dot(c, c)) / len(v) + a["eps"]) * w + b

    def lin(v, W, b):
        out = np.array([float(np.dot(W[r], v)) for r in range(W.shape[0])])
        return out if b is None else out + b

    def rope_c(vec, t):
        if rot == 0:
            return vec
        half = rot // 2
        out = vec.copy()
        for i in range(half):
            z = complex(vec[i], vec[i + half]) * complex(math.cos(t * a["theta"] ** (-2.0 * i / rot)),
                                                         math.sin(t * a["theta"] ** (-2.0 * i / rot)))
            out[i], out[i + half] = z.real, z.imag
        return out

    xs = [P["embed"][i].copy() + (P["pos"][t] if P["pos"] is not None else 0.0) for t, i in enumerate(ids)]
    for li, l in enumerate(P["layers"]):
        hs = [norm(x, l["ln1_w"], l["ln1_b"]) for x in xs]
        qs = [lin(h, l["wq"], l["bq"]) for h in hs]
        ks = [lin(h, l["wk"], l["bk"]) for h in hs]
        vs = [lin(h, l["wv"], l["bv"]) for h in hs]
        attn_out = []
        for t in range(Tn):
            heads = []
            for h in range(H):
                kvh = h // grp
                qh = rope_c(qs[t][h * hd:(h + 1) * hd], t)
                vis = [j for j in range(t + 1)
                       if a.get("sliding_window") is None or t - j < a["sliding_window"]]
                sc = []
                for j in vis:
                    kh = rope_c(ks[j][kvh * hd:(kvh + 1) * hd], j)
                    s = float(np.dot(qh, kh))
                    if not a.get("no_scale"):
                        s /= math.sqrt(hd)
                    if a.get("attn_scale_layer"):
                        s /= li + 1
                    sc.append(s)
                mx = max(sc)
                e = [math.exp(s - mx) for s in sc]
                z = sum(e)
                acc = np.zeros(hd)
                for w, j in zip(e, vis):
                    acc += (w / z) * vs[j][kvh * hd:(kvh + 1) * hd]
                heads.append(acc)
            attn_out.append(lin(np.concatenate(heads), l["wo"], l["bo"]))

        def mlp(v):
            if a["mlp"] == "gated":
                g = act_fn(a["act"], lin(v, l["w_gate"], l["b_gate"]))
                return lin(g * lin(v, l["w_up"], l["b_up"]), l["w_down"], l["b_down"])
            return lin(act_fn(a["act"], lin(v, l["w_up"], l["b_up"])), l["w_down"], l["b_down"])

        new = []
        for t in range(Tn):
            if a["parallel"]:
                new.append(xs[t] + attn_out[t] + mlp(norm(xs[t], l["ln2_w"], l["ln2_b"])))
            else:
                y = xs[t] + attn_out[t]
                new.append(y + mlp(norm(y, l["ln2_w"], l["ln2_b"])))
        xs = new
    head = P["embed"] if a["tied"] else P["head"]
    return np.array([[float(np.dot(head[r], norm(x, P["lnf_w"], P["lnf_b"]))) for r in range(head.shape[0])]
                     for x in xs])


# --------------------------------------------------------------------------------------------
# Loading a model dir, greedy, NLL
# --------------------------------------------------------------------------------------------

def load_model(model_dir):
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    a = normalize_config(cfg)
    T, dtypes = load_hf_weights(model_dir)
    missing, unexpected, bad, ignorable = check_tensor_names(a, T)
    if missing or bad:
        raise ValueError(f"{model_dir}: missing tensors {missing[:6]} / shape mismatches {bad[:4]}")
    return cfg, a, T, dtypes, {"ignored": ignorable, "unexpected": unexpected}


def greedy(a, T, ids, n, return_margins=False):
    """n greedy tokens (full re-forward each step). margins = top1 - top2 logit at each step."""
    seq, margins = list(int(i) for i in ids), []
    for _ in range(n):
        last = forward_hf(a, T, seq)[-1]
        top2 = np.sort(last)[-2:]
        margins.append(float(top2[1] - top2[0]))
        seq.append(int(np.argmax(last)))
    return (seq[len(ids):], margins) if return_margins else seq[len(ids):]


def mean_nll(logits, ids):
    lp = log_softmax(logits[:-1])
    return float(-np.mean(lp[np.arange(len(ids) - 1), np.asarray(ids[1:])]))


# --------------------------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------------------------

CORPUS = """\
Attention sinks are tokens that receive a large share of attention mass regardless of their content.
In many causal language models the first token of a sequence becomes such a sink, because every query
can see it and softmax weights must sum to one. The model learns to park surplus attention there.
Researchers study sinks by measuring the attention that each head pays to position zero, layer by layer.
When the first token is removed from a sliding window cache, the quality of generation can collapse.
Keeping four initial tokens in the cache, together with a window of recent tokens, restores stability.
A small model with sixty four hidden units and two layers is enough to check that the weights load.
The quick brown fox jumps over the lazy dog. The lazy dog sleeps in the sun while the fox runs away.
Numbers matter too: 0 1 2 3 4 5 6 7 8 9 10 11 12, 100 + 23 = 123, 3.14159, 2**10 = 1024, 1e-5.
Code looks like this: def forward(x): return x @ w.T + b  # a linear layer in python
for i in range(10): print(i, i * i)  and  let y = x.matmul(&w)?;  // the same idea in rust
Punctuation! Questions? Quotes "like these" and 'these', brackets (round) [square] {curly}; colons: yes.
Unicode text appears as well: cafe and café, naive and naïve, Tokyo and 東京, smiles 🙂 and arrows →.
The weather today is mild with a light breeze; tomorrow brings rain, and the weekend will be sunny.
Every layer reads the residual stream, writes an update, and passes the sum to the next layer above.
Rotary position embeddings rotate pairs of query and key dimensions by an angle that grows with position.
Grouped query attention shares each key and value head among several query heads to save memory.
Layer normalization subtracts the mean and divides by the standard deviation; RMS norm skips the mean.
"""

SAMPLES = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "attention sinks: 123 + 456 = 579",
    " leading space and  double  spaces",
    "café naïve 東京 🙂",
    "line one\nline two\n",
    "",
]

SEQ_TEXT = "Attention sinks appear at the first token of every sequence, layer after layer."

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

TOKENIZER_STYLES = {
    # style: (special tokens (ids 0.. in order), bos, eos, add bos via post-processor, qwen split regex)
    "llama": (["<s>", "</s>"], "<s>", "</s>", True, False),
    "smollm": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "<|endoftext|>", "<|endoftext|>", False, False),
    "qwen2": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "<|endoftext|>", "<|endoftext|>", False, True),
    "gpt2": (["<|endoftext|>"], "<|endoftext|>", "<|endoftext|>", False, False),
    "neox": (["<|endoftext|>", "<|padding|>"], "<|endoftext|>", "<|endoftext|>", False, False),
}

_TOK_CACHE = {}


def build_tokenizer(style, vocab_size=300):
    if style in _TOK_CACHE:
        return Tokenizer.from_str(_TOK_CACHE[style])
    specials, bos, _eos, add_bos, qwen = TOKENIZER_STYLES[style]
    tok = Tokenizer(models.BPE())
    if qwen:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer)
    if add_bos:
        bid = tok.token_to_id(bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bid)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    _TOK_CACHE[style] = tok.to_str()
    return tok


def tokenizer_samples(tok):
    out = []
    for s in SAMPLES:
        e = tok.encode(s)
        e2 = tok.encode(s, add_special_tokens=False)
        out.append({"text": s, "ids": e.ids, "ids_no_special": e2.ids, "tokens": e.tokens,
                    "decoded": tok.decode(e.ids, skip_special_tokens=True)})
    return out


# --------------------------------------------------------------------------------------------
# Case definitions and random weights
# --------------------------------------------------------------------------------------------

def _ceil16(n):
    return (n + 15) // 16 * 16


def case_specs():
    """name -> dict(style, config builder inputs, seed, weights_from, variant)."""
    return {
        "llama": dict(style="llama", seed=1001, mt="llama", H=4, KV=2, I=176, eps=1e-5, theta=1e4,
                      tied=False, head_dim_key=False, embed_std=0.05),
        "llama_tied": dict(style="smollm", seed=1002, mt="llama", H=4, KV=4, I=176, eps=1e-5, theta=1e4,
                           tied=True, head_dim_key=True, embed_std=0.3),
        "mistral": dict(style="llama", seed=1003, mt="mistral", H=4, KV=1, I=176, eps=1e-5, theta=1e4,
                        tied=False, head_dim_key=True, sliding_window=4096, embed_std=0.1),
        "qwen2": dict(style="qwen2", seed=1004, mt="qwen2", H=4, KV=2, I=176, eps=1e-6, theta=1e6,
                      tied=True, head_dim_key=False, embed_std=0.3),
        "gpt2": dict(style="gpt2", seed=1005, mt="gpt2", H=4),
        "pythia": dict(style="neox", seed=1006, mt="gpt_neox", H=4, rotary_pct=0.25, parallel=True),
        "llama_sharded": dict(same_as="llama", variant="sharded"),
        "llama_bf16": dict(same_as="llama", variant="bf16"),
        "mistral_headdim": dict(style="llama", seed=1007, mt="mistral", H=4, KV=2, I=176, eps=1e-5,
                                theta=1e4, tied=False, head_dim_key=True, head_dim=32, sliding_window=None,
                                embed_std=0.1),
        "gpt2_hub": dict(same_as="gpt2", variant="gpt2_hub"),
        "pythia_buffers": dict(same_as="pythia", variant="neox_buffers"),
        "neox_sequential": dict(style="neox", seed=1008, mt="gpt_neox", H=4, rotary_pct=0.5, parallel=False),
    }


D_MODEL, N_LAYERS, CTX = 64, 2, 64


def build_config(spec, tok):
    V_tok = tok.get_vocab_size()
    _, bos, eos, _, _ = TOKENIZER_STYLES[spec["style"]]
    bos_id, eos_id = tok.token_to_id(bos), tok.token_to_id(eos)
    mt = spec["mt"]
    if mt in LLAMA_FAMILY:
        V = _ceil16(V_tok)
        arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}[mt]
        cfg = {
            "architectures": [arch], "model_type": mt, "vocab_size": V, "hidden_size": D_MODEL,
            "intermediate_size": spec["I"], "num_hidden_layers": N_LAYERS,
            "num_attention_heads": spec["H"], "num_key_value_heads": spec["KV"], "hidden_act": "silu",
            "max_position_embeddings": CTX, "initializer_range": 0.02, "rms_norm_eps": spec["eps"],
            "use_cache": True, "tie_word_embeddings": spec["tied"], "rope_theta": float(spec["theta"]),
            "rope_scaling": None, "attention_dropout": 0.0, "bos_token_id": bos_id, "eos_token_id": eos_id,
            "torch_dtype": "float32", "transformers_version": TRANSFORMERS_VERSION,
        }
        if spec.get("head_dim_key"):
            cfg["head_dim"] = spec.get("head_dim", D_MODEL // spec["H"])
        if mt == "llama":
            cfg.update(attention_bias=False, mlp_bias=False, pretraining_tp=1)
        if mt == "mistral":
            cfg["sliding_window"] = spec.get("sliding_window")
        if mt == "qwen2":
            cfg.update(use_sliding_window=False, sliding_window=32768, max_window_layers=N_LAYERS)
    elif mt == "gpt2":
        V = V_tok
        cfg = {
            "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_embd": D_MODEL,
            "n_layer": N_LAYERS, "n_head": spec["H"], "n_positions": CTX, "n_ctx": CTX, "n_inner": None,
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.1,
            "embd_pdrop": 0.1, "attn_pdrop": 0.1, "initializer_range": 0.02, "scale_attn_weights": True,
            "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
            "tie_word_embeddings": True, "use_cache": True, "bos_token_id": bos_id, "eos_token_id": eos_id,
            "torch_dtype": "float32", "transformers_version": TRANSFORMERS_VERSION,
        }
    else:
        V = _ceil16(V_tok)
        cfg = {
            "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": V,
            "hidden_size": D_MODEL, "intermediate_size": 4 * D_MODEL, "num_hidden_layers": N_LAYERS,
            "num_attention_heads": spec["H"], "hidden_act": "gelu", "rotary_pct": spec["rotary_pct"],
            "rotary_emb_base": 10000, "max_position_embeddings": CTX, "layer_norm_eps": 1e-5,
            "use_parallel_residual": spec["parallel"], "tie_word_embeddings": False, "attention_bias": True,
            "attention_dropout": 0.0, "hidden_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
            "bos_token_id": bos_id, "eos_token_id": eos_id, "torch_dtype": "float32",
            "transformers_version": TRANSFORMERS_VERSION,
        }
    return cfg


def random_params(a, seed, embed_std=0.2):
    """Canonical params with std ~0.1-0.3 so attention is far from uniform."""
    rs = np.random.RandomState(seed)  # legacy generator: stream frozen across numpy versions
    n = lambda shape, std: (rs.standard_normal(shape) * std).astype(np.float32)  # noqa: E731
    gain = lambda: (1.0 + rs.standard_normal(a["d"]) * 0.1).astype(np.float32)  # noqa: E731
    d, V, I, H, KV, hd = a["d"], a["vocab"], a["I"], a["H"], a["KV"], a["hd"]
    ln = a["norm"] == "ln"
    P = {"embed": n((V, d), embed_std), "pos": n((a["n_pos"], d), 0.1) if a["pos"] == "learned" else None}
    layers = []
    for _ in range(a["L"]):
        l = {"ln1_w": gain(), "ln1_b": n(d, 0.05) if ln else None,
             "ln2_w": gain(), "ln2_b": n(d, 0.05) if ln else None,
             "wq": n((H * hd, d), 0.2), "wk": n((KV * hd, d), 0.2), "wv": n((KV * hd, d), 0.2),
             "wo": n((d, H * hd), 0.15)}
        if a["qkv_bias"]:
            # Qwen2-style: sizeable biases (real Qwen k biases are large) so a dropped bias is visible
            sb = 0.3 if a["model_type"] == "qwen2" else 0.05
            l["bq"], l["bk"], l["bv"] = n(H * hd, sb), n(KV * hd, sb), n(KV * hd, sb)
        else:
            l["bq"] = l["bk"] = l["bv"] = None
        l["bo"] = n(d, 0.05) if a["o_bias"] else None
        if a["mlp"] == "gated":
            l["w_gate"], l["b_gate"] = n((I, d), 0.2), (n(I, 0.05) if a["mlp_bias"] else None)
        else:
            l["w_gate"] = l["b_gate"] = None
        l["w_up"], l["b_up"] = n((I, d), 0.2), (n(I, 0.05) if a["mlp_bias"] else None)
        l["w_down"], l["b_down"] = n((d, I), 0.1), (n(d, 0.05) if a["mlp_bias"] else None)
        layers.append(l)
    P["layers"] = layers
    P["lnf_w"], P["lnf_b"] = gain(), (n(d, 0.05) if ln else None)
    P["head"] = None if a["tied"] else n((V, d), 0.2)
    return P


def tokenizer_config(style):
    _, bos, eos, add_bos, _ = TOKENIZER_STYLES[style]
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
            "unk_token": None, "model_max_length": CTX, "add_bos_token": add_bos, "add_eos_token": False,
            "clean_up_tokenization_spaces": False}


def _sha256(p):
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def _json_compact(obj, ind=0):
    """Pretty JSON with sorted keys where lists of scalars (logits rows, ids) stay on one line."""
    pad, pad1 = " " * ind, " " * (ind + 2)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad1}{json.dumps(str(k), ensure_ascii=False)}: {_json_compact(obj[k], ind + 2)}"
                 for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in obj):
            return json.dumps(list(obj), ensure_ascii=False)
        return "[\n" + ",\n".join(pad1 + _json_compact(v, ind + 2) for v in obj) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)


def _dump_json(path, obj, compact=False):
    text = _json_compact(obj) if compact else json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False)
    Path(path).write_text(text + "\n")


def write_case(out, name, specs, cache):
    spec = specs[name]
    base = spec.get("same_as", name)
    variant = spec.get("variant")
    bspec = specs[base]
    tok = build_tokenizer(bspec["style"])
    cfg = build_config(bspec, tok)
    if variant == "bf16":
        cfg["torch_dtype"] = "bfloat16"
    if variant == "gpt2_hub":
        cfg.pop("tie_word_embeddings")
    a = normalize_config(cfg)
    if base not in cache:
        cache[base] = random_params(a, bspec["seed"], bspec.get("embed_std", 0.2))
    P = cache[base]
    d = Path(out) / name
    d.mkdir(parents=True, exist_ok=True)
    meta = {"format": "pt"}
    if variant == "gpt2_hub":
        T = pack_hf(a, P, gpt2_prefix="")
        tri = np.tril(np.ones((CTX, CTX), dtype=np.float32)).reshape(1, 1, CTX, CTX)
        for i in range(a["L"]):
            T[f"h.{i}.attn.bias"] = tri
    else:
        T = pack_hf(a, P)
    if variant == "neox_buffers":
        rot = a["rot"]
        for i in range(a["L"]):
            p = f"gpt_neox.layers.{i}.attention."
            T[p + "bias"] = np.tril(np.ones((CTX, CTX), dtype=bool)).reshape(1, 1, CTX, CTX)
            T[p + "masked_bias"] = np.array(-1e9, dtype=np.float32)
            T[p + "rotary_emb.inv_freq"] = (1.0 / (10000.0 ** (np.arange(0, rot, 2) / rot))).astype(np.float32)
    if variant == "sharded":
        names = sorted(T)
        first = [k for k in names if k.startswith(("model.embed_tokens", "model.layers.0."))]
        shards = {"model-00001-of-00002.safetensors": {k: T[k] for k in first},
                  "model-00002-of-00002.safetensors": {k: T[k] for k in names if k not in first}}
        wm, total = {}, 0
        for fname, part in shards.items():
            st_save_file(part, str(d / fname), metadata=meta)
            for k, v in part.items():
                wm[k] = fname
                total += v.nbytes
        _dump_json(d / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": wm})
    elif variant == "bf16":
        write_safetensors_raw(d / "model.safetensors", T, {k: "BF16" for k in T}, meta)
    else:
        st_save_file(T, str(d / "model.safetensors"), metadata=meta)
    _dump_json(d / "config.json", cfg)
    _dump_json(d / "generation_config.json", {"_from_model_config": True, "bos_token_id": cfg["bos_token_id"],
                                              "eos_token_id": cfg["eos_token_id"],
                                              "transformers_version": TRANSFORMERS_VERSION})
    tok.save(str(d / "tokenizer.json"))
    _dump_json(d / "tokenizer_config.json", tokenizer_config(bspec["style"]))
    for fp in d.iterdir():
        fp.chmod(0o644)  # safetensors creates 0600 files
    return d, tok


def compute_case(d, tok, name):
    cfg, a, T, dtypes, unexpected = load_model(d)
    seq_ids = tok.encode(SEQ_TEXT).ids[:SEQ_LEN]
    assert len(seq_ids) == SEQ_LEN
    logits, probs = forward_hf(a, T, seq_ids, return_attn=True)
    cont, margins = greedy(a, T, seq_ids, N_GREEDY, return_margins=True)
    srt = np.sort(logits, axis=-1)
    files = sorted(p.name for p in d.iterdir())
    return {
        "model_type": cfg["model_type"], "architectures": cfg["architectures"],
        "dir": name, "files": {f: _sha256(d / f) for f in files},
        "tensors": {k: {"shape": list(T[k].shape), "dtype": dtypes[k]} for k in sorted(T)},
        "ignored_tensors": unexpected["ignored"] + unexpected["unexpected"],
        "spec": {k: v for k, v in a.items()},
        "ids": [int(i) for i in seq_ids],
        "logits": logits.tolist(),
        "argmax": [int(i) for i in logits.argmax(axis=-1)],
        "greedy": cont,
        "greedy_margins": margins,
        "argmax_margins": (srt[:, -1] - srt[:, -2]).tolist(),
        "nll_mean": mean_nll(logits, seq_ids),
        "nll_per_token": (-log_softmax(logits[:-1])[np.arange(SEQ_LEN - 1), np.asarray(seq_ids[1:])]).tolist(),
        "attn_max_prob_mean": [float(p.max(axis=-1)[:, 1:].mean()) for p in probs],
        "tokenizer": {"vocab_size": tok.get_vocab_size(), "seq_text": SEQ_TEXT, "samples": tokenizer_samples(tok)},
    }


def make(out_dir, verbose=True):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specs = case_specs()
    cache, expected = {}, {}
    for name in specs:
        d, tok = write_case(out, name, specs, cache)
        expected[name] = compute_case(d, tok, name)
        if verbose:
            e = expected[name]
            print(f"{name:16s} V={e['spec']['vocab']:4d} nll={e['nll_mean']:.4f} greedy={e['greedy']} "
                  f"attn_max={['%.2f' % x for x in e['attn_max_prob_mean']]}")
    doc = {"format_version": FORMAT_VERSION, "generator": "scripts/reference_hf.py",
           "numpy_version": np.__version__, "seq_len": SEQ_LEN, "n_greedy": N_GREEDY,
           "notes": "logits are float64 rows [seq_len][vocab_size] computed from the stored tensor values; "
                    "nll_mean = mean_t -log p(ids[t+1] | ids[:t+1]); greedy = argmax continuation of ids; "
                    "*_margins = top1 - top2 logit gap of each argmax decision (how robust it is to f32 error); "
                    "spec = this script's normalised view of config.json; tensors = name -> shape/dtype "
                    "as stored; ignored_tensors = buffers an importer must skip.",
           "cases": expected}
    _dump_json(out / "expected.json", doc, compact=True)
    return doc


# --------------------------------------------------------------------------------------------
# Self-tests
# --------------------------------------------------------------------------------------------

def _assert_close(x, y, tol, what):
    err = float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) if np.size(x) else 0.0
    if not err <= tol:
        raise AssertionError(f"{what}: max abs diff {err:.3e} > {tol:.1e}")
    return err


def selftest(keep=None):
    tmp = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="reference_hf_"))
    rs = np.random.RandomState(7)
    checks = []

    def ok(msg):
        checks.append(msg)
        print("ok  ", msg)

    # 1. RoPE: halves formula == complex multiplication; relative-position invariance; pass-through dims
    x = rs.standard_normal((9, 3, 16))
    pos = np.arange(9)
    for rot in (16, 4):
        y = rope_halves(x, pos, rot, 10000.0)
        half = rot // 2
        z = (x[..., :half] + 1j * x[..., half:rot]) * np.exp(
            1j * pos[:, None, None] * 10000.0 ** (-2.0 * np.arange(half) / rot))
        _assert_close(y[..., :half], z.real, 1e-12, "rope real")
        _assert_close(y[..., half:rot], z.imag, 1e-12, "rope imag")
        _assert_close(y[..., rot:], x[..., rot:], 0, "rope pass-through")
    q, k = rs.standard_normal((1, 1, 16)), rs.standard_normal((1, 1, 16))
    r = lambda v, p: rope_halves(v, np.array([p]), 16, 1e4)[0, 0]  # noqa: E731
    _assert_close(r(q, 7) @ r(k, 3), r(q, 12) @ r(k, 8), 1e-10, "rope relative position")
    ok("RoPE halves == complex form, depends only on relative position, partial rotary passes dims through")

    # 2. NeoX fuse/split round trip + explicit index formula
    H, hd, d = 4, 16, 64
    ws = [rs.standard_normal((H * hd, d)) for _ in range(3)]
    fused = neox_fuse_qkv(*ws, H)
    for s in range(3):
        for h in range(H):
            for j in (0, 5, hd - 1):
                assert np.array_equal(fused[h * 3 * hd + s * hd + j], ws[s][h * hd + j])
    back = neox_split_qkv(fused, H)
    assert all(np.array_equal(b, w) for b, w in zip(back, ws))
    bs = [rs.standard_normal(H * hd) for _ in range(3)]
    assert all(np.array_equal(b, w) for b, w in zip(neox_split_qkv(neox_fuse_qkv(*bs, H), H), bs))
    ok("NeoX query_key_value interleave [heads,3,hd]: index formula and de-interleave round trip")

    # 3. make (twice -> byte-identical), then per-case checks
    doc = make(tmp / "a", verbose=True)
    make(tmp / "b", verbose=False)
    for name, c in doc["cases"].items():
        for f, h in c["files"].items():
            if _sha256(tmp / "b" / name / f) != h:
                raise AssertionError(f"non-deterministic output {name}/{f}")
    if _sha256(tmp / "a" / "expected.json") != _sha256(tmp / "b" / "expected.json"):
        raise AssertionError("non-deterministic expected.json")
    ok("make is deterministic (all files and expected.json byte-identical across two runs)")

    root = tmp / "a"
    for name, c in doc["cases"].items():
        d = root / name
        cfg, a, T, dtypes, unexpected = load_model(d)
        # reader == safetensors library for non-BF16 files
        for fn in sorted(p for p in d.iterdir() if p.suffix == ".safetensors"):
            mine, dts, meta = read_safetensors(fn)
            assert meta == {"format": "pt"}, meta
            with safe_open(str(fn), framework="numpy") as sf:
                assert set(sf.keys()) == set(mine)
            if "BF16" not in dts.values():
                lib = st_load_file(str(fn))
                assert all(np.array_equal(lib[k], mine[k]) for k in lib)
        # no missing / unexpected names
        missing, unexp, bad, ign = check_tensor_names(a, T)
        assert not missing and not bad and not unexp, (missing, bad, unexp)
        if name in ("gpt2_hub", "pythia_buffers"):
            assert ign, "buffers should have been reported as ignorable"
        else:
            assert not ign, ign
        logits = np.array(c["logits"])
        # independent naive loop implementation on de-fused canonical weights
        P = unpack_hf(a, T)
        naive = forward_naive(a, P, c["ids"])
        e1 = _assert_close(logits, naive, 1e-9, f"{name}: vectorised vs naive")
        # pack(unpack(T)) reproduces the file tensors exactly (GPT-2 transpose/concat, NeoX interleave)
        T2 = pack_hf(a, P, gpt2_prefix=_gpt2_prefix(T) if a["family"] == "gpt2" else "")
        for k, v in T2.items():
            assert np.array_equal(v, np.asarray(T[k], dtype=np.float32)), k
        # causality: changing the last token leaves earlier rows untouched
        ids2 = list(c["ids"])
        ids2[-1] = (ids2[-1] + 1) % a["vocab"]
        _assert_close(forward_hf(a, T, ids2)[:-1], logits[:-1], 1e-12, f"{name}: causality")
        # attention is not uniform
        assert min(c["attn_max_prob_mean"]) > 0.3, c["attn_max_prob_mean"]
        # tokenizer round trip
        tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        for smp in c["tokenizer"]["samples"]:
            assert tok.decode(smp["ids_no_special"]) == smp["text"], smp
        # greedy consistent with logits
        assert c["greedy"][0] == int(np.argmax(logits[-1]))
        ok(f"{name}: naive loop forward agrees ({e1:.1e}), pack/unpack exact, causal, tokenizer round trip")

    # 4. GPT-2 fused vs split: the vectorised forward used fused c_attn; compute again with a model
    #    whose c_attn is replaced by nn.Linear-style split q/k/v via the llama-style canonical path.
    for name in ("gpt2", "pythia"):
        cfg, a, T, _, _ = load_model(root / name)
        P = unpack_hf(a, T)
        ids = doc["cases"][name]["ids"]
        # split computation written directly with numpy on canonical weights (vectorised, no loops)
        x = P["embed"][ids] + (P["pos"][np.arange(len(ids))] if P["pos"] is not None else 0)
        for li, l in enumerate(P["layers"]):
            h = layernorm(x, l["ln1_w"], l["ln1_b"], a["eps"])
            q = (h @ l["wq"].T + l["bq"]).reshape(len(ids), a["H"], a["hd"])
            k = (h @ l["wk"].T + l["bk"]).reshape(len(ids), a["H"], a["hd"])
            v = (h @ l["wv"].T + l["bv"]).reshape(len(ids), a["H"], a["hd"])
            pos = np.arange(len(ids))
            q, k = rope_halves(q, pos, a["rot"], a["theta"] or 1.0), rope_halves(k, pos, a["rot"], a["theta"] or 1.0)
            att = _attention(q, k, v, a, li) @ l["wo"].T + l["bo"]
            mlp = lambda z: act_fn(a["act"], z @ l["w_up"].T + l["b_up"]) @ l["w_down"].T + l["b_down"]  # noqa
            if a["parallel"]:
                x = x + att + mlp(layernorm(x, l["ln2_w"], l["ln2_b"], a["eps"]))
            else:
                y = x + att
                x = y + mlp(layernorm(y, l["ln2_w"], l["ln2_b"], a["eps"]))
        x = layernorm(x, P["lnf_w"], P["lnf_b"], a["eps"])
        split_logits = x @ (P["embed"] if a["tied"] else P["head"]).T
        e = _assert_close(split_logits, doc["cases"][name]["logits"], 1e-10, f"{name} fused vs split")
        ok(f"{name}: fused-qkv forward == split q/k/v forward ({e:.1e})")

    # 5. variants that must reproduce their base exactly
    for v, b in (("llama_sharded", "llama"), ("gpt2_hub", "gpt2"), ("pythia_buffers", "pythia")):
        assert doc["cases"][v]["logits"] == doc["cases"][b]["logits"], v
        assert doc["cases"][v]["greedy"] == doc["cases"][b]["greedy"], v
    e = _assert_close(doc["cases"]["llama_bf16"]["logits"], doc["cases"]["llama"]["logits"], 0.5, "bf16 close")
    assert doc["cases"]["llama_bf16"]["logits"] != doc["cases"]["llama"]["logits"]
    Tb, _, _ = read_safetensors(root / "llama_bf16" / "model.safetensors")
    Tf, _, _ = read_safetensors(root / "llama" / "model.safetensors")
    assert all(np.array_equal(Tb[k], bf16_round(Tf[k])) for k in Tf)
    ok(f"sharded / hub-layout / buffer variants bit-identical to their base; bf16 = rounded llama (diff {e:.2e})")

    # 6. tie rules and bias placement visible in the files
    _, _, Tt, _, _ = load_model(root / "llama_tied")
    assert "lm_head.weight" not in Tt
    _, aq, Tq, _, _ = load_model(root / "qwen2")
    assert "model.layers.0.self_attn.q_proj.bias" in Tq and "model.layers.0.self_attn.o_proj.bias" not in Tq
    assert "lm_head.weight" not in Tq
    Tz = dict(Tq)
    for i in range(aq["L"]):
        for n in "qkv":
            Tz[f"model.layers.{i}.self_attn.{n}_proj.bias"] = np.zeros_like(Tq[f"model.layers.{i}.self_attn.{n}_proj.bias"])
    ids = doc["cases"]["qwen2"]["ids"]
    diff = float(np.max(np.abs(forward_hf(aq, Tz, ids) - np.array(doc["cases"]["qwen2"]["logits"]))))
    assert diff > 0.1, f"qwen2 biases have too little effect ({diff})"
    ok(f"tied cases lack lm_head.weight; qwen2 has q/k/v biases only and they matter (max logit shift {diff:.2f})")

    # 7. check-export machinery: a dir checked against itself passes, against another fails
    assert check_export(root / "llama_sharded", str(root / "expected.json"), case="llama", quiet=True) == 0
    assert check_export(root / "llama", str(root / "llama_sharded"), quiet=True) == 0
    assert check_export(root / "mistral", str(root / "expected.json"), case="llama", quiet=True) == 1
    ok("check-export accepts an identical model and rejects a different one")
    if not keep:
        shutil.rmtree(tmp)
    print(f"selftest: {len(checks)} groups passed")
    return 0


# --------------------------------------------------------------------------------------------
# CLI: forward / check-export
# --------------------------------------------------------------------------------------------

def _parse_ids(s):
    return [int(t) for t in s.replace(" ", "").split(",") if t != ""]


def cmd_forward(model_dir, ids, n_greedy):
    cfg, a, T, dtypes, unexpected = load_model(model_dir)
    logits = forward_hf(a, T, ids)
    out = {"model_dir": str(model_dir), "model_type": cfg["model_type"], "ids": ids, "logits": logits.tolist(),
           "argmax": [int(i) for i in logits.argmax(axis=-1)],
           "nll_mean": mean_nll(logits, ids) if len(ids) > 1 else None,
           "ignored_tensors": unexpected["ignored"], "unexpected_tensors": unexpected["unexpected"]}
    if n_greedy:
        out["greedy"] = greedy(a, T, ids, n_greedy)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


DEFAULT_CHECK_IDS = [1, 17, 42, 99, 5, 250, 3, 77, 128, 200, 64, 9]


def check_export(model_dir, expected, case=None, ids=None, atol=1e-4, rtol=1e-4, strict_names=False,
                 quiet=False):
    """Compare reference logits of model_dir against EXPECTED (forward JSON, expected.json, or a dir)."""
    say = (lambda *m: None) if quiet else print
    cfg, a, T, dtypes, unexpected = load_model(model_dir)
    if unexpected["ignored"]:
        say(f"note: known buffers / tied copies ignored: {unexpected['ignored'][:8]}")
    if unexpected["unexpected"]:
        say(f"note: tensors outside the {cfg['model_type']} naming: {unexpected['unexpected'][:8]}")
    if strict_names and (unexpected["unexpected"] or unexpected["ignored"]):
        say("FAIL: --strict-names and tensors beyond the exact parameter set are present")
        return 1
    exp_greedy = None
    ep = Path(expected)
    if ep.is_dir():
        ids = ids or DEFAULT_CHECK_IDS
        _, a2, T2, _, _ = load_model(ep)
        ref = forward_hf(a2, T2, ids)
        exp_greedy = greedy(a2, T2, ids, N_GREEDY)
    else:
        doc = json.loads(ep.read_text())
        if "cases" in doc:
            if case is None:
                raise SystemExit("expected.json holds several cases: pass --case NAME")
            doc = doc["cases"][case]
        ids = doc["ids"]
        ref = np.array(doc["logits"], dtype=np.float64)
        exp_greedy = doc.get("greedy")
    got = forward_hf(a, T, ids)
    if got.shape != ref.shape:
        say(f"FAIL: logits shape {got.shape} != expected {ref.shape}")
        return 1
    err = np.abs(got - ref)
    lim = atol + rtol * np.abs(ref)
    n_bad = int((err > lim).sum())
    say(f"logits max abs err {err.max():.3e} (atol {atol}, rtol {rtol}); rows argmax equal: "
        f"{bool((got.argmax(-1) == ref.argmax(-1)).all())}")
    rc = 0 if n_bad == 0 else 1
    if exp_greedy is not None:
        g = greedy(a, T, ids, len(exp_greedy))
        if g != list(exp_greedy):
            say(f"greedy differs: {g} vs expected {exp_greedy}")
            rc = 1
    say("OK" if rc == 0 else f"FAIL ({n_bad} logits out of tolerance)")
    return rc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="write tiny random HF model dirs + expected.json")
    m.add_argument("out_dir")
    f = sub.add_parser("forward", help="print reference logits (JSON) for an HF model dir")
    f.add_argument("model_dir")
    f.add_argument("--ids", required=True, help="comma-separated token ids")
    f.add_argument("--greedy", type=int, default=0, help="also return N greedy tokens")
    c = sub.add_parser("check-export", help="compare an HF dir's reference logits with expected ones")
    c.add_argument("model_dir")
    c.add_argument("expected", help="forward JSON, expected.json (+ --case) or another HF dir")
    c.add_argument("--case")
    c.add_argument("--ids", help="ids when EXPECTED is a directory")
    c.add_argument("--atol", type=float, default=1e-4)
    c.add_argument("--rtol", type=float, default=1e-4)
    c.add_argument("--strict-names", action="store_true", help="fail on tensors outside the HF naming")
    s = sub.add_parser("selftest", help="internal consistency checks")
    s.add_argument("--keep", help="write the generated dirs here and keep them")
    args = ap.parse_args(argv)
    if args.cmd == "make":
        make(args.out_dir)
        return 0
    if args.cmd == "forward":
        return cmd_forward(args.model_dir, _parse_ids(args.ids), args.greedy)
    if args.cmd == "check-export":
        return check_export(args.model_dir, args.expected, case=args.case,
                            ids=_parse_ids(args.ids) if args.ids else None, atol=args.atol, rtol=args.rtol,
                            strict_names=args.strict_names)
    return selftest(args.keep)


if __name__ == "__main__":
    sys.exit(main())
