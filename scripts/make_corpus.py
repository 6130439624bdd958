#!/usr/bin/env python3
"""Generate a large corpus for `sinklab data prepare` benchmarks: documents made of the
shipped texts' paragraphs (datasets/embedded/*.txt), drawn at random with a seed, written as
JSONL shards of about --file-mb MB each (optionally zstd- or gzip-compressed, the format of
most public pretraining dumps such as the Pile's).

    python3 scripts/make_corpus.py --size-mb 1000 --out data/bench_1g --compress zst

Each document is 5–40 paragraphs chosen uniformly (with replacement) from one of the texts;
each record is {"text": ..., "id": n, "meta": {"source": "milton" | "shakespeare"}}. The text
is real English, so BPE and tokenization cost what they cost on prose; its vocabulary is that
of the shipped texts (about 30k distinct words), smaller than a web corpus's.
"""

import argparse
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def paragraphs(path):
    text = open(path, encoding="utf-8").read().replace("<|doc|>\n", "")
    return [p.strip() + "\n" for p in text.split("\n\n") if p.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, required=True, help="uncompressed JSONL size to write")
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--file-mb", type=float, default=256, help="uncompressed size per shard")
    ap.add_argument("--compress", choices=["none", "zst", "gz"], default="none")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    emb = os.path.join(HERE, "..", "datasets", "embedded")
    sources = {n: paragraphs(os.path.join(emb, n + ".txt")) for n in ("milton", "shakespeare")}
    names = list(sources)
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    total, limit, shard, doc_id = 0, int(a.size_mb * 1e6), 0, 0
    while total < limit:
        path = os.path.join(a.out, f"part-{shard:05d}.jsonl")
        if a.compress != "none":
            path += "." + a.compress
            cmd = ["zstd", "-q", "-3", "-T2", "-c"] if a.compress == "zst" else ["gzip", "-4", "-c"]
            out = open(path, "wb")
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out)
            sink = proc.stdin
        else:
            proc, out = None, open(path, "wb")
            sink = out
        written, cap = 0, min(int(a.file_mb * 1e6), limit - total)
        buf = []
        while written < cap:
            src = rng.choice(names)
            paras = sources[src]
            text = "\n".join(rng.choice(paras) for _ in range(rng.randint(5, 40)))
            line = (json.dumps({"text": text, "id": doc_id, "meta": {"source": src}}) + "\n").encode()
            buf.append(line)
            written += len(line)
            doc_id += 1
            if len(buf) >= 512:
                sink.write(b"".join(buf))
                buf = []
        sink.write(b"".join(buf))
        sink.close()
        if proc:
            proc.wait()
        out.close()
        total += written
        shard += 1
        print(f"{path}: {written / 1e6:.0f} MB of JSONL", file=sys.stderr)
    print(f"{a.out}: {shard} files, {total / 1e6:.0f} MB of JSONL, {doc_id} documents")


if __name__ == "__main__":
    main()
