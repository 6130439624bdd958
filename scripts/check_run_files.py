#!/usr/bin/env python3
"""Read a sinklab checkpoint and tokenizer with the real Python libraries.

    python3 scripts/check_run_files.py MODEL.safetensors TOKENIZER.json "sample text"

Loads the weights with `safetensors` (numpy flavour: the same file format PyTorch's
`safetensors.torch.load_file` reads) and the tokenizer with Hugging Face `tokenizers`, and prints
one JSON line: {"tensors": {name: {"shape": [...], "sum": float64 sum}}, "ids": [...]}, where ids
encode the sample text without added special tokens. The Rust test suite compares both with its
own reading of the same files.
"""
import json
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    weights = load_file(sys.argv[1])
    tensors = {}
    for name, arr in sorted(weights.items()):
        if arr.dtype != np.float32:
            print(f"{name}: dtype {arr.dtype}, expected float32", file=sys.stderr)
            return 1
        if not np.isfinite(arr).all():
            print(f"{name}: non-finite values", file=sys.stderr)
            return 1
        tensors[name] = {"shape": list(arr.shape), "sum": float(arr.astype(np.float64).sum())}
    tok = Tokenizer.from_file(sys.argv[2])
    ids = tok.encode(sys.argv[3], add_special_tokens=False).ids
    print(json.dumps({"tensors": tensors, "ids": ids}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
