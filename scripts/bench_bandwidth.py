#!/usr/bin/env python3
"""Memory read bandwidth of this machine, as a ceiling for cached decoding (which reads every
f32 weight once per token), three ways over a 1 GiB float32 array: NumPy's `sum` on one core;
the same split in two halves summed by two threads (NumPy releases the GIL in the reduction);
and a matrix-vector product (1 GiB viewed as (2^18 × 1024), times a vector: BLAS on every core).
NumPy's pairwise `sum` is slower than memory on some CPUs (7.2–7.7 GB/s on one core of the
2-core Xeon VM, where a plain C read gives 11); the matrix-vector product, which is what
decoding does, is the ceiling to compare with (26 GB/s on that VM).

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
    m = a.reshape(-1, 1024)
    v = np.ones(1024, dtype=np.float32)
    m @ v
    t = time.time()
    for _ in range(REPEATS):
        m @ v
    print(f"matrix-vector product (BLAS, every core): "
          f"{REPEATS * a.nbytes / (time.time() - t) / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
