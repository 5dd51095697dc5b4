#!/usr/bin/env python3
"""What three ways of normalising an order-0 table to 256 cost on real KV.

For the exponents of the bench's data (the prompts' files concatenated and
repeated to the call's size, as codec_gpu_bench fills a call), prints the
table's cost over the exponents' entropy, in % of the order-0 bound
(exponent entropy plus the raw plane), for:
  - the format's normalisation (docs/codec-format.md, "Normalisation");
  - largest remainders: floor(h M / total), symbols under one unit raised
    to 1, the sum then fixed by the remainders (largest up, smallest down);
  - the optimum: the format's table, then single unit moves while a move
    lowers the cost (real log2).

usage: 2026-11-28-normalisation-rules.py [KV_DIR]  (tools/kv_capture.py's files)
"""
import math
import os
import sys

import numpy as np

M = 256


def current(h):
    total = int(h.sum())
    f = np.zeros(256, dtype=np.int64)
    for s in np.nonzero(h)[0]:
        f[s] = max(1, int(h[s]) * M // total)
    d = M - int(f.sum())
    if d > 0:
        f[int(np.argmax(h))] += d
    while d < 0:  # the largest frequency above 1, lowest symbol on ties
        i = int(np.where(f == f.max())[0][0])
        f[i] -= 1
        d += 1
    return f


def largest_remainders(h):
    total = int(h.sum())
    f = np.zeros(256, dtype=np.int64)
    rem = {}
    symbols = [int(s) for s in np.nonzero(h)[0]]
    for s in symbols:
        q, r = divmod(int(h[s]) * M, total)
        f[s], rem[s] = (q, r) if q > 0 else (1, -1)  # raised to 1: never lowered
    d = M - int(f.sum())
    if d > 0:
        for s in sorted(symbols, key=lambda s: (-rem[s], s))[:d]:
            f[s] += 1
    elif d < 0:
        for s in sorted([s for s in symbols if f[s] > 1], key=lambda s: (rem[s], s))[:-d]:
            f[s] -= 1
    assert f.sum() == M
    return f


def optimum(h):
    f = current(h)
    symbols = np.nonzero(h)[0]
    while True:
        best, best_gain = None, 0.0
        for i in symbols:
            if f[i] <= 1:
                continue
            loss = h[i] * (math.log2(f[i]) - math.log2(f[i] - 1))
            for j in symbols:
                if j != i and f[j] < M:
                    gain = h[j] * (math.log2(f[j] + 1) - math.log2(f[j])) - loss
                    if gain > best_gain + 1e-9:
                        best, best_gain = (i, j), gain
        if best is None:
            return f
        f[best[0]] -= 1
        f[best[1]] += 1


def main():
    kv = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/kvferry/kv")
    dtypes = [  # name, element type, symbol, raw bits
        ("fp8_e5m2", np.uint8, lambda x: (x >> 2) & 31, 3),
        ("fp8_e4m3", np.uint8, lambda x: (x >> 3) & 15, 4),
        ("bf16", np.uint16, lambda x: (x >> 7) & 255, 8),
    ]
    for name, elem, symbol, raw_bits in dtypes:
        data = np.concatenate([np.fromfile(f"{kv}/{p}.{name}", dtype=elem) for p in ("prose", "code", "chat")])
        for n in (1 << 20, 2 << 20, 4 << 20, 64 << 20):
            x = np.tile(data, (n + len(data) - 1) // len(data))[:n]
            h = np.bincount(symbol(x).astype(np.int64), minlength=256).astype(np.int64)
            total = int(h.sum())
            entropy = sum(-c * math.log2(c / total) for c in h if c)
            bound = entropy / 8 + n * raw_bits / 8

            def over(f):
                bits = sum(h[s] * (8 - math.log2(f[s])) for s in range(256) if h[s])
                return 100 * (bits - entropy) / 8 / bound

            print(f"{name:9s} {n:>9d} elements: format {over(current(h)):.3f}%  "
                  f"largest remainders {over(largest_remainders(h)):.3f}%  optimum {over(optimum(h)):.3f}%")


if __name__ == "__main__":
    main()
