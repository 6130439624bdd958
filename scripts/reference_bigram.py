"""Independent reference for sinklab's character bigram chain (Bigram-Backcopy with
chain = "shakespeare_chars", src/data/synthetic.rs::char_chain), written from Guo et al.'s
definition: pi_c = count(c) / n; row c = count(c, d) / count(c, .) over adjacent pairs; tokens
ordered by descending count, ties by code point.

    python scripts/reference_bigram.py TEXT_FILE [N_ROWS]

prints one JSON object: the characters in token order, pi, and the first N_ROWS rows (default 6).
"""
import json
import sys

import numpy as np


def main():
    text = open(sys.argv[1], encoding="utf-8").read()
    n_rows = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    chars, counts = np.unique(np.array(list(text)), return_counts=True)
    # np.unique sorts by code point; a stable sort by descending count keeps that for ties
    order = np.argsort(-counts, kind="stable")
    chars, counts = chars[order], counts[order]
    index = {c: i for i, c in enumerate(chars)}
    ids = np.array([index[c] for c in text], dtype=np.int64)
    v = len(chars)
    pairs = np.bincount(ids[:-1] * v + ids[1:], minlength=v * v).reshape(v, v).astype(np.float64)
    pi = counts / counts.sum()
    rows = pairs / pairs.sum(axis=1, keepdims=True)
    print(json.dumps({
        "chars": [str(c) for c in chars],
        "unigram": pi.tolist(),
        "rows": rows[:n_rows].tolist(),
    }))


if __name__ == "__main__":
    main()
