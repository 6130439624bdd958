#!/usr/bin/env python3
"""Encode texts with a tokenizer.json using Hugging Face `tokenizers` (Python).

    python3 scripts/encode_texts.py TOKENIZER.json TEXTS.json

TEXTS.json is a JSON list of strings; prints a JSON list of id lists (no special tokens added).
The Rust tests use it to prove that sinklab's saved tokenizers give identical ids in Python.
"""
import json
import sys

from tokenizers import Tokenizer


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    tok = Tokenizer.from_file(sys.argv[1])
    texts = json.load(open(sys.argv[2], encoding="utf-8"))
    print(json.dumps([tok.encode(t, add_special_tokens=False).ids for t in texts]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
