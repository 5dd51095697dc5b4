#!/usr/bin/env python3
"""What a frequency table taken from a sample of a chunk would cost in ratio.

A one-pass encoder cannot build the table from the whole chunk's histogram
before it codes. This estimates the alternative: the table normalised (as
docs/codec-format.md says) from every `stride`-th 4 KiB block only, each
8192-symbol tile costed at its ideal rANS size (sum of 12 - log2 f, plus the
128 bytes of states) or stored RAW (8 bits a bf16 symbol) when a symbol of
the tile has no frequency or coding would not be smaller.

usage: 2026-11-23-sampled-tables.py [KV_DIR]  (real bf16 KV from tools/kv_capture.py)
"""
import glob
import os
import sys

import numpy as np


def normalise(h):
    total = h.sum()
    f = np.where(h > 0, np.maximum(1, (h * 4096) // total), 0)
    if f.sum() < 4096:
        f[np.argmax(h)] += 4096 - f.sum()
    while f.sum() > 4096:
        f[np.argmax(np.where(f > 1, f, 0))] -= 1
    return f


def coded_bits(sym, f, tile=8192):
    cost = np.where(f > 0, 12 - np.log2(np.maximum(f, 1)), np.inf)
    bits, raw_tiles = 0.0, 0
    for t in range(0, sym.size, tile):
        s = sym[t:t + tile]
        c = cost[s].sum() + 128 * 8
        if not np.isfinite(c) or c >= 8 * s.size:
            bits += 8 * s.size
            raw_tiles += 1
        else:
            bits += c
    return bits, raw_tiles


def main():
    kv_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/kvferry/kv")
    data = np.concatenate([np.fromfile(p, dtype=np.uint16) for p in sorted(glob.glob(kv_dir + "/*.bf16"))])
    for n in (1 << 21, 1 << 25, 1 << 27):  # 4, 64 and 256 MiB of bf16, the real KV repeated
        sym = ((np.tile(data, -(-n // data.size))[:n] >> 7) & 0xFF).astype(np.int64)
        full, _ = coded_bits(sym, normalise(np.bincount(sym, minlength=256)))
        for stride in (16, 64):
            idx = np.concatenate([np.arange(b, min(b + 2048, n)) for b in range(0, n, 2048 * stride)])
            sampled, raw = coded_bits(sym, normalise(np.bincount(sym[idx], minlength=256)))
            print(f"{n * 2 >> 20:4d} MiB  sample 1/{stride:<3d} exponent bits/symbol {full / n:.4f} -> "
                  f"{sampled / n:.4f} ({(sampled / full - 1) * 100:+.2f}%), RAW tiles {raw}")


if __name__ == "__main__":
    main()
