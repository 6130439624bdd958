#!/usr/bin/env python3
"""Independent checks of `sinklab data prepare` with the real tools (tests/suite/data_prepare.rs).

    data_reference.py parquet OUT.parquet COLUMN DOCS.json [--null-at I]
        Write DOCS (a JSON list of strings) as a Parquet file with pyarrow (its default snappy
        compression, row groups of 4 rows) in column COLUMN plus an "id" column; row I null.
    data_reference.py check PREPARED_DIR DOMAIN DOCS.json
        Read DOMAIN's shards with numpy (dtype from manifest.json), encode DOCS with Python's
        `tokenizers` and the directory's tokenizer.json, each followed by the end-of-document
        id, and require the two to be equal; check the train/val split and every source
        file's sha256 and size recorded in the manifest against hashlib. Prints "ok N".
"""

import hashlib
import json
import math
import os
import sys

import numpy as np


def parquet(out, column, docs_path, null_at=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = json.load(open(docs_path, encoding="utf-8"))
    col = [None if i == null_at else d for i, d in enumerate(docs)]
    table = pa.table({"id": list(range(len(docs))), column: pa.array(col, type=pa.string())})
    pq.write_table(table, out, row_group_size=4)


def check(prepared, domain, docs_path):
    from tokenizers import Tokenizer

    m = json.load(open(os.path.join(prepared, "manifest.json")))
    (d,) = [x for x in m["domains"] if x["name"] == domain]
    dtype = {"u16": "<u2", "u32": "<u4"}[m["width"]]
    got = np.concatenate([np.fromfile(os.path.join(prepared, s["file"]), dtype=dtype) for s in d["shards"]])
    tok = Tokenizer.from_file(os.path.join(prepared, "tokenizer.json"))
    eot = tok.token_to_id(m["tokenizer"].get("eot", "<|endoftext|>"))
    want = []
    for doc in json.load(open(docs_path, encoding="utf-8")):
        want += tok.encode(doc, add_special_tokens=False).ids + [eot]
    want = np.array(want, dtype=np.int64)
    if got.shape != want.shape or not (got.astype(np.int64) == want).all():
        first = int(np.argmax(got[: len(want)].astype(np.int64) != want[: len(got)])) if len(got) and len(want) else 0
        sys.exit(f"{domain}: shards hold {len(got)} ids, tokenizers gives {len(want)}; first difference at {first}")
    val = math.ceil(len(want) * m["val_fraction"])
    assert d["tokens"] == len(want) and d["val_tokens"] == val and d["train_tokens"] == len(want) - val, d
    if m["vocab_size"] <= 65536:
        assert m["width"] == "u16", m["width"]
    for s in d["shards"]:
        src = s["source"]
        if src.startswith("embedded:"):
            continue
        data = open(src, "rb").read()
        assert s["sha256"] == hashlib.sha256(data).hexdigest(), src
        assert s["source_bytes"] == len(data), src
    print(f"ok {len(want)}")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "parquet":
        null_at = int(args[4]) if len(args) > 4 and args[3] == "--null-at" else None
        parquet(args[0], args[1], args[2], null_at)
    elif cmd == "check":
        check(*args)
    else:
        sys.exit(__doc__)
