// Deterministic KV-like test data: per-channel scaled, roughly Gaussian values
// (KV caches carry per-channel scale and outlier channels), and block compare.
#pragma once

#include <cstdint>
#include <string>

#include "client/client.h"

namespace kvferry::cli {

// Fills every block of `pool` with data determined by (seed, block id).
void FillKvLike(const client::HostPool& pool, uint64_t seed);

// Fills the pool's bytes by repeating the real bf16 KV captures of
// tools/kv_capture.py found in `dir` (*.bf16). Returns how many files it used;
// 0 (and nothing written) when there are none.
int FillRealKv(const client::HostPool& pool, const std::string& dir);

// Compares block `a` of pool `pa` with block `b` of pool `pb`, all segments.
bool SameBlock(const client::HostPool& pa, uint32_t a, const client::HostPool& pb, uint32_t b);

}  // namespace kvferry::cli
