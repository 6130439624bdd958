#!/usr/bin/env python3
"""Memory read bandwidth of this machine, as a ceiling for cached decoding (which reads every
f32 weight once per token): NumPy's `sum` over a 1 GiB float32 array, on one core and split in
two halves summed by two threads (NumPy releases the GIL in the reduction).

    python3 scripts/bench_bandwidth.py
"""
import threading
import time

import numpy as np

REPEATS = 5


def main():
    a = np.ones(2**28, dtype=np.float32)  # 1 GiB
    a.sum()  # touch every page once
    t = time.time()
    for _ in range(REPEATS):
        a.sum()
    print(f"one core: {REPEATS * a.nbytes / (time.time() - t) / 1e9:.1f} GB/s")
    halves = [a[: a.size // 2], a[a.size // 2:]]

    def read(x):
        for _ in range(REPEATS):
            x.sum()

    threads = [threading.Thread(target=read, args=(x,)) for x in halves]
    t = time.time()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    print(f"two threads: {REPEATS * a.nbytes / (time.time() - t) / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
